"""Calibration file: link parameters fitted per direction x io backend x layout, and optionally the
compute parameters measured on the same machine (YAML).

Written by ``hicache-sim calibrate``, read by scenarios through ``hardware.calibration``. A group
missing from the file leaves the preset in place for that combination. The optional ``compute``
mapping carries any of ``COMPUTE_FIELDS`` (the scenario's ``hardware`` fields of the same name and
unit); a scenario that sets one of them itself keeps its own value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..yamlfile import load_yaml, yaml_error_where
from .linkmodel import LinkParams
from .presets import IO_BACKENDS, MEM_LAYOUTS, LinkPreset

CALIBRATION_KIND = "hicache-sim-calibration"
DIRECTIONS = ("h2d", "d2h")
PARAM_FIELDS = ("bandwidth_Bps", "latency_s", "half_efficiency_bytes", "segment_overhead_s")
# Link fields: (low, high, whether low itself is allowed). Finite bounds: a NaN or an infinite cost
# would leave a timed run polling forever; the costs stop where the scenario's (1e9 us) do.
PARAM_BOUNDS = {
    "bandwidth_Bps": (1e6, 1e15, True),
    "latency_s": (0.0, 1e3, True),
    "half_efficiency_bytes": (0.0, 1e12, True),
    "segment_overhead_s": (0.0, 1e3, True),
}
# Why a bound is where it is, said with the error (a bound on a float alone would look arbitrary).
BOUND_REASONS = {
    "bandwidth_Bps": "a host-device copy below 1 MB/s is no PCIe link (gen1 x1 moves 250 MB/s), and one that "
    "slow would put a transfer's end past the simulated clock's range",
}
# Compute fields: (low, high, whether low itself is allowed). Efficiencies are fractions of a peak;
# overheads are microseconds (bounded as the scenario bounds them).
COMPUTE_FIELDS = {
    "linear_mfu": (0.0, 1.0, False),
    "attention_mfu": (0.0, 1.0, False),
    "hbm_efficiency": (0.0, 1.0, False),
    "moe_mfu": (0.0, 1.0, False),
    "allreduce_latency_us": (0.0, 1e9, True),
    "allreduce_half_peak_mib": (0.0, 1e6, False),
    "allreduce_curve_exponent": (0.0, 10.0, False),
    "step_overhead_us": (0.0, 1e9, True),
    "decode_us_per_layer": (0.0, 1e9, True),
    "prefill_eager_us_per_layer": (0.0, 1e9, True),
    "prefill_graph_us_per_layer": (0.0, 1e9, True),
    "request_overhead_us": (0.0, 1e9, True),
}


class CalibrationError(ValueError):
    """Bad calibration file: one line naming the file and the field."""


@dataclass
class Calibration:
    """Fitted link parameters keyed by (direction, io_backend, layout), with provenance."""

    device: str = ""
    source: str = ""
    groups: dict[tuple[str, str, str], LinkParams] = field(default_factory=dict)
    errors: dict[tuple[str, str, str], dict] = field(default_factory=dict)
    compute: dict[str, float] = field(default_factory=dict)

    def get(self, direction: str, io_backend: str, layout: str) -> LinkParams | None:
        return self.groups.get((direction, io_backend, layout))

    def coverage_note(self, name: str, io_backend: str, layout: str, preset: str) -> str:
        """One line when the file lacks a group a run uses (each direction of its io backend x layout),
        saying which are calibrated and which fall back to the ``preset`` link curve; '' when it has
        them all. A file for another backend or layout would otherwise be used silently, changing
        nothing."""
        used = [(d, io_backend, layout) for d in DIRECTIONS]
        missing = [k for k in used if k not in self.groups]
        if not missing:
            return ""
        calibrated = [k for k in used if k in self.groups]
        has = ", ".join("/".join(k) for k in sorted(self.groups)) or "no link groups"
        return (
            f"hardware.calibration {name}: "
            + (f"calibrated {', '.join('/'.join(k) for k in calibrated)}; " if calibrated else "")
            + f"{', '.join('/'.join(k) for k in missing)} not in the file, taken from the {preset} preset "
            f"(the file has {has}; calibrate this io backend and layout to replace them)"
        )

    def to_data(self) -> dict:
        rows = []
        for (d, io, lay), p in sorted(self.groups.items()):
            row = {"direction": d, "io_backend": io, "layout": lay, **p.as_dict()}
            if (d, io, lay) in self.errors:
                row["holdout"] = self.errors[(d, io, lay)]
            rows.append(row)
        data = {"kind": CALIBRATION_KIND, "version": 1, "device": self.device, "source": self.source, "groups": rows}
        if self.compute:
            data["compute"] = dict(self.compute)
        return data

    def save(self, path: str | Path) -> None:
        Path(path).write_text(yaml.safe_dump(self.to_data(), sort_keys=False), encoding="utf-8")


def preset_calibration(link: LinkPreset, device: str, source: str) -> Calibration:
    """A link preset written as a calibration file: every direction x io backend x layout group (the
    shipped ``*-public.yaml`` files are these, so they never drift from the presets)."""
    cal = Calibration(device=device, source=source)
    for direction in sorted(DIRECTIONS):
        for io in IO_BACKENDS:
            for layout in MEM_LAYOUTS:
                cal.groups[(direction, io, layout)] = link.curve(io).params(direction, layout)
    return cal


def is_calibration_file(path: Path) -> bool:
    """Whether ``path`` is a calibration file hicache-sim wrote (its ``kind`` says so): the only kind of
    existing file ``calibrate --out`` may replace."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError):
        return False
    return isinstance(data, dict) and data.get("kind") == CALIBRATION_KIND


def load_calibration(path: str | Path) -> Calibration:
    """Read and validate a calibration file; CalibrationError names the file and field."""
    p = Path(path)
    if not p.is_file():
        raise CalibrationError(f"{path}: calibration file not found")
    try:
        data = load_yaml(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise CalibrationError(f"{path}: not UTF-8 text; expected a YAML calibration file") from None
    except yaml.YAMLError as e:
        where, problem = yaml_error_where(e)
        raise CalibrationError(f"{path}{where}: not valid YAML: {problem}") from None
    if not isinstance(data, dict) or data.get("kind") != CALIBRATION_KIND:
        raise CalibrationError(f"{path}: kind: expected {CALIBRATION_KIND!r}")
    groups = data.get("groups")
    if not isinstance(groups, list):
        raise CalibrationError(f"{path}: groups: expected a list")
    cal = Calibration(device=str(data.get("device", "")), source=str(data.get("source", "")))
    for i, row in enumerate(groups):
        if not isinstance(row, dict):
            raise CalibrationError(f"{path}: groups[{i}]: expected a mapping")
        key = []
        for name in ("direction", "io_backend", "layout"):
            v = row.get(name)
            if not isinstance(v, str):
                raise CalibrationError(f"{path}: groups[{i}].{name}: expected a string")
            key.append(v)
        vals = {
            name: _bounded(row.get(name), PARAM_BOUNDS[name], f"{path}: groups[{i}].{name}", BOUND_REASONS.get(name))
            for name in PARAM_FIELDS
        }
        cal.groups[tuple(key)] = LinkParams(**vals)
        if isinstance(row.get("holdout"), dict):
            cal.errors[tuple(key)] = row["holdout"]
    cal.compute = _compute_section(data.get("compute"), path)
    return cal


def _compute_section(section, path) -> dict[str, float]:
    """The optional ``compute`` mapping, validated field by field."""
    if section is None:
        return {}
    if not isinstance(section, dict):
        raise CalibrationError(f"{path}: compute: expected a mapping of {', '.join(COMPUTE_FIELDS)}")
    out = {}
    for name, v in section.items():
        if name not in COMPUTE_FIELDS:
            raise CalibrationError(
                f"{path}: compute.{name}: unknown field; expected one of {', '.join(COMPUTE_FIELDS)}"
            )
        out[name] = _bounded(v, COMPUTE_FIELDS[name], f"{path}: compute.{name}")
    return out


def _bounded(v, bounds: tuple[float, float, bool], where: str, why: str | None = None) -> float:
    """``v`` as a float inside ``bounds`` (low, high, low allowed); NaN and booleans are refused."""
    low, high, low_ok = bounds
    number = not isinstance(v, bool) and isinstance(v, (int, float)) and v == v
    if not number or v > high or v < low or (v == low and not low_ok):
        rng = f"in [{low:g}, {high:g}]" if low_ok else f"in ({low:g}, {high:g}]"
        raise CalibrationError(f"{where}: expected a number {rng}, got {v!r}" + (f" ({why})" if why else ""))
    return float(v)
