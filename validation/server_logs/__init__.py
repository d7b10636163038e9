"""Public SGLang server logs through ``hicache-sim calibrate SERVER_LOG --scenario S`` (issue 27).

Each folder here holds one published log excerpt (``server.log``, its lines as published), the
scenario that reproduces its deployment from what the source states (``scenario.yaml``) and the
source note (``source.yaml``: url, what the source states, what is assumed, and the benchmark result
of the same run where one is published). ``check_log`` runs the tool's own parser and fit on it,
holding out the tool's default quarter of the intervals, and reports what the log pinned, what it
could not, the held-out step-time error of the preset and of the fitted knobs, and, for decode
intervals of one batch size, the step time's slope over KV tokens measured against the model's: a
single efficiency scales the slope and the intercept together, so where their ratio differs from the
model's the fit is exact on the logged shape and wrong off it.

    python -m validation.server_logs     # writes results/validation/server_logs.{md,json}
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from hicache_sim.calibration.logfit import fit_log, model_with, step_seconds
from hicache_sim.calibration.serverlog import Interval, parse_server_log
from hicache_sim.scenario import Resolved, load_scenario, resolve
from hicache_sim.sim.compute import ComputeModel, ComputeParams

HERE = Path(__file__).parent
HOLDOUT = 0.25  # the share `hicache-sim calibrate` holds out by default
SEED = 0


def log_dirs() -> list[Path]:
    """Every vendored log, in name order."""
    return sorted(p.parent for p in HERE.glob("*/source.yaml"))


@dataclass
class HeldOut:
    """One held-out interval: where it is, its shape and the step time measured, preset and fitted."""

    lineno: int
    kind: str
    shape: list[float]
    measured_ms: float
    preset_ms: float
    fitted_ms: float


@dataclass
class LogCheck:
    """What one log gave the fit (the rows of results/validation/server_logs.md)."""

    name: str
    title: str
    url: str
    states: list[str]
    assumed: list[str]
    scheduler_lines: dict[str, int]
    intervals: dict[str, int]
    skipped: dict[str, int]
    start: dict[str, float]
    pinned: dict[str, float]
    not_pinned: dict[str, str]
    n_fit: dict[str, int]
    n_holdout: dict[str, int]
    holdout_ape: dict[str, list[float]]  # kind -> [median, p90] %, the fitted knobs
    preset_holdout_ape: dict[str, list[float]]  # kind -> [median, p90] %, the scenario's own knobs
    held_out: list[HeldOut]
    decode_terms_ms: dict[str, float] = field(default_factory=dict)
    kv_slope: dict[str, float] = field(default_factory=dict)
    benchmark: str | None = None


def _ape(model: ComputeModel, ivs: list[Interval]) -> list[float]:
    return [abs(step_seconds(model, iv) / iv.seconds - 1.0) * 100.0 for iv in ivs]


def _median_p90(values: list[float]) -> list[float]:
    import numpy as np

    return [float(np.median(values)), float(np.percentile(values, 90))]


def decode_terms(r: Resolved, batch: int, kv: float) -> dict[str, float]:
    """The preset decode step of ``batch`` requests holding ``kv`` KV tokens, term by term (ms), as
    ``sim/compute.py`` adds them: which term a log's missing time could sit in."""
    p = ComputeParams.from_resolved(r)
    m = ComputeModel(p)
    hbm = p.hbm_Bps * p.hbm_efficiency
    return {
        "weights read": m.weights_read(batch) / hbm * 1e3,
        "KV read": kv * p.kv_bytes_per_token / hbm * 1e3,
        "GEMM + attention FLOPs (overlap the reads: the larger counts)": (
            m.linear_time(batch) + 4.0 * p.num_layers * p.attn_width * kv / (p.peak_flops * p.attention_mfu)
        )
        * 1e3,
        "all-reduces": m.allreduce_time(batch) * 1e3,
        "per-layer fixed (decode_us_per_layer)": p.num_layers * p.decode_s_per_layer * 1e3,
        "unsplit kernels": m.unsplit_time(batch) * 1e3,
        "step overhead": p.step_overhead_s * 1e3,
        "total": m.decode_step_s(batch, round(kv)) * 1e3,
    }


def kv_slope(r: Resolved, decode: list[Interval], knobs: dict[str, float]) -> dict[str, float]:
    """Least-squares step time over KV tokens of decode intervals of one batch size (us per 1k
    tokens, and the intercept at the mean KV in ms), measured and as the preset and fitted models
    charge it; empty unless every decode interval has the same batch and the KV spans some range."""
    if len({iv.shape[0] for iv in decode}) != 1 or len(decode) < 3:
        return {}
    xs = [iv.shape[1] for iv in decode]
    if max(xs) - min(xs) < 1000:
        return {}
    b = int(decode[0].shape[0])
    xbar = statistics.fmean(xs)
    ys = [iv.seconds for iv in decode]
    slope = statistics.linear_regression(xs, ys).slope
    base = ComputeParams.from_resolved(r)
    out = {"batch": float(b), "kv_min": min(xs), "kv_max": max(xs), "measured_us_per_1k": slope * 1e9}
    for name, model in (("preset", model_with(base, {})), ("fitted", model_with(base, knobs))):
        lo, hi = model.decode_step_s(b, round(min(xs))), model.decode_step_s(b, round(max(xs)))
        out[f"{name}_us_per_1k"] = (hi - lo) / (max(xs) - min(xs)) * 1e9
        out[f"{name}_ms_at_mean"] = model.decode_step_s(b, round(xbar)) * 1e3
    out["measured_ms_at_mean"] = statistics.fmean(ys) * 1e3
    return out


def check_log(folder: Path) -> LogCheck:
    """Parse and fit one vendored log as ``hicache-sim calibrate`` does, and measure the result."""
    src = yaml.safe_load((folder / "source.yaml").read_text())
    r = resolve(load_scenario(str(folder / src["scenario"])))
    parsed = parse_server_log(folder / src["log"], r.chunked_prefill_size)
    fit = fit_log(r, parsed.intervals, holdout=HOLDOUT, seed=SEED)
    base = ComputeParams.from_resolved(r)
    preset, fitted = model_with(base, {}), model_with(base, fit.knobs)
    held = fit.held_out
    kinds = ("decode", "prefill")
    decode = [iv for iv in parsed.intervals if iv.kind == "decode"]
    check = LogCheck(
        name=folder.name,
        title=src["title"],
        url=src["url"],
        states=list(src["states"]),
        assumed=list(src["assumed"]),
        scheduler_lines={k: sum(ln.kind == k for ln in parsed.lines) for k in kinds},
        intervals={k: sum(iv.kind == k for iv in parsed.intervals) for k in kinds},
        skipped=dict(sorted(parsed.skipped.items())),
        start={k: fit.start[k] for k in fit.knobs},
        pinned=dict(fit.knobs),
        not_pinned=dict(fit.not_pinned),
        n_fit=dict(fit.n_fit),
        n_holdout=dict(fit.n_holdout),
        holdout_ape={k: list(v) for k, v in fit.holdout_ape.items()},
        preset_holdout_ape={k: _median_p90(_ape(preset, [iv for iv in held if iv.kind == k])) for k in fit.holdout_ape},
        held_out=[
            HeldOut(
                iv.lineno,
                iv.kind,
                [float(x) for x in iv.shape],
                iv.seconds * 1e3,
                step_seconds(preset, iv) * 1e3,
                step_seconds(fitted, iv) * 1e3,
            )
            for iv in sorted(held, key=lambda iv: iv.lineno)
        ],
        benchmark=src.get("benchmark"),
    )
    if decode:
        mid = sorted(decode, key=lambda iv: iv.shape[1])[len(decode) // 2]
        check.decode_terms_ms = decode_terms(r, int(mid.shape[0]), mid.shape[1])
        check.kv_slope = kv_slope(r, decode, fit.knobs)
    return check


def as_json(checks: list[LogCheck]) -> dict:
    """The JSON results file's content."""
    return {"holdout": HOLDOUT, "seed": SEED, "logs": [asdict(c) for c in checks]}
