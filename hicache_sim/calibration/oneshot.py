"""One-shot device calibration: integrity, sweep, fit and validation in one unattended run, on a budget.

A session lent a GPU has minutes of device time and no one watching, so the four steps of
``results/calibration/README.md`` run here as one command that cannot overrun: it times each stage,
predicts the sweep and the validation from a short pilot pass, shrinks the grid (page counts first,
then repeats) and the validation (repeats, then transfers) until the prediction fits the budget,
and says what it shrank. Everything lands in one marked folder (default
``results/calibration/<device>``, the device named by torch, e.g. ``h200``)::

    python -m hicache_sim.calibration.oneshot --device cuda            # -> results/calibration/h200
    python -m hicache_sim.calibration.oneshot --device cpu --quick --out /tmp/cal

A module entry point rather than a CLI verb: it is a maintainer's run that chains four verbs
(``replay --sweep``, ``calibrate``, ``validate-model``, and the integrity checks that are otherwise
gpu-marked tests) into the repository's results, not a question a simulator user asks; each verb
keeps one job.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from .. import __version__
from ..output.write import OutputError, atomic_write, check_target, prepare_folder, write_text_atomic

#: The marker kind of a one-shot folder (never a folder that holds anything else).
KIND = "calibration"
#: What a run writes (validate-model/ is a folder of validation files).
FILES = (
    "integrity.json",
    "measurements.parquet",
    "sweep.json",
    "calibration.yaml",
    "calibration_errors.md",
    "calibration_holdout.png",
    "validate-model/validation.md",
    "validate-model/validation.json",
    "validate-model/validation.parquet",
    "validate-model/predicted_vs_measured.png",
    "summary.json",
    "README.md",
)
VALIDATE_SCENARIO = "results/calibration/cpu/validate-scenario.yaml"
DEFAULT_BUDGET_S = 270.0  # under the 5 minutes the issue allows, with room for start-up and writing
#: Page-count caps the sweep may shrink to, largest first (the full grid goes to 4,096 pages).
PAGE_CAPS = (4096, 2048, 1024, 512, 256, 128, 64, 32, 16)
PILOT_COUNTS = (1, 16, 256)  # page counts of the pilot pass (those in the grid)
MIN_REPEATS = 2  # fewer gives no repeat spread
#: Predictions are inflated by this much before they are compared with the budget: on the shared 2-core VM
#: the full CPU sweep took 1.46 x its raw prediction (45.0 s against 30.8 s), the load moving between
#: the pilot and the sweep.
SAFETY = 1.5
FIT_RESERVE_S = 15.0  # the fit, its figure, the validation's simulation and writing


class OneShotError(ValueError):
    """A bad option or target: one line, exit 2."""


def device_slug(name: str) -> str:
    """Folder name for a device: ``NVIDIA H200`` -> ``h200``, ``NVIDIA H100 80GB HBM3`` -> ``h100-80gb-hbm3``."""
    s = re.sub(r"^(nvidia|amd)\s+", "", name.strip(), flags=re.IGNORECASE).lower()
    s = re.sub(r"[^a-z0-9]+", "-", s).strip("-")
    return s or "device"


@dataclass
class Plan:
    """What the run decided before measuring, and why (``shrunk``: one line per reduction)."""

    budget_s: float
    page_cap: int
    repeats: int
    validate_repeats: int
    validate_limit: int | None
    predicted: dict = field(default_factory=dict)
    shrunk: list[str] = field(default_factory=list)


@dataclass
class CostModel:
    """Wall seconds of one measurement: ``overhead_s`` (flush, bookkeeping) + ``fixed_s`` + ``per_byte_s`` x bytes,
    fitted on the pilot pass's own rows."""

    overhead_s: float
    fixed_s: float
    per_byte_s: float

    def seconds(self, nbytes: np.ndarray) -> float:
        return float(np.sum(self.overhead_s + self.fixed_s + self.per_byte_s * np.asarray(nbytes, dtype=float)))


def cost_model(rows, wall_s: float) -> CostModel:
    """Least-squares duration = fixed + per_byte x bytes over the pilot rows; the rest of the pilot's wall
    time, spread over its rows, is per-measurement overhead."""
    b = rows["bytes"].to_numpy(dtype=float)
    d = rows["duration_s"].to_numpy(dtype=float)
    a = np.column_stack([np.ones_like(b), b])
    (fixed, per_byte), *_ = np.linalg.lstsq(a, d, rcond=None)
    overhead = max(0.0, (wall_s - float(d.sum())) / max(1, len(d)))
    return CostModel(overhead, max(0.0, float(fixed)), max(0.0, float(per_byte)))


def grid_bytes(cfg) -> np.ndarray:
    """Bytes of every measurement one pass over ``cfg`` makes (pool caps ignored: an upper bound)."""
    out = []
    per_point = len(cfg.operations()) * len(cfg.layouts) * len(cfg.io_backends)
    for ps in cfg.page_sizes:
        page_bytes = replace(cfg.shape, page_size=ps).page_bytes
        out.extend([c * page_bytes] * per_point for c in cfg.page_counts)
    return np.concatenate([np.asarray(x, dtype=float) for x in out]) if out else np.zeros(0)


def plan_run(
    cfg, cost: CostModel, log_bytes: np.ndarray, remaining_s: float, validate_repeats: int, budget_s: float
) -> Plan:
    """The largest sweep and validation whose predicted wall time fits ``remaining_s``.

    The validation is planned first at its full size (it is the check of the fit on a workload's own
    transfers); the sweep gets what is left, shrinking its page counts to 256, then its repeats to
    ``MIN_REPEATS``, then its page counts further. If even that does not fit, the validation shrinks
    (repeats to one, then the first N transfers).
    """
    plan = Plan(budget_s, max(cfg.page_counts), cfg.repeats, validate_repeats, None)

    def validate_s(repeats: int, limit: int | None) -> float:
        b = log_bytes[:limit] if limit else log_bytes
        return SAFETY * repeats * cost.seconds(b)

    def sweep_s(cap: int, repeats: int) -> float:
        return SAFETY * repeats * cost.seconds(grid_bytes(cfg.limited(cap)))

    full = max(cfg.page_counts)
    caps = [c for c in PAGE_CAPS if c <= full] or [full]
    big = [c for c in caps if c >= 256] or caps[:1]
    low = min(MIN_REPEATS, cfg.repeats)
    ladder = [(c, cfg.repeats) for c in big]  # page counts first, down to 256
    ladder += [(big[-1], r) for r in range(cfg.repeats - 1, low - 1, -1)]  # then repeats
    ladder += [(c, low) for c in caps if c < big[-1]]  # then page counts below 256
    v_full = validate_s(validate_repeats, None)
    chosen = ladder[-1]
    for cap, reps in ladder:
        if sweep_s(cap, reps) + v_full <= remaining_s:
            chosen = (cap, reps)
            break
    plan.page_cap, plan.repeats = chosen
    if plan.page_cap < max(cfg.page_counts):
        plan.shrunk.append(f"sweep page counts capped at {plan.page_cap} (full grid: {max(cfg.page_counts)})")
    if plan.repeats < cfg.repeats:
        plan.shrunk.append(f"sweep repeats {cfg.repeats} -> {plan.repeats}")
    left = remaining_s - sweep_s(*chosen)
    if v_full > left and validate_repeats > 1:
        plan.validate_repeats = 1
        plan.shrunk.append(f"validation repeats {validate_repeats} -> 1")
    if validate_s(plan.validate_repeats, None) > left and len(log_bytes):
        per = validate_s(plan.validate_repeats, None) / len(log_bytes)
        plan.validate_limit = max(1, int(left / per)) if per > 0 else None
        if plan.validate_limit is not None and plan.validate_limit < len(log_bytes):
            plan.shrunk.append(f"validation limited to the first {plan.validate_limit} of {len(log_bytes)} transfers")
        else:
            plan.validate_limit = None
    plan.predicted = {
        "sweep_s": round(sweep_s(*chosen), 2),
        "validate_s": round(validate_s(plan.validate_repeats, plan.validate_limit), 2),
        "remaining_s": round(remaining_s, 2),
    }
    return plan


# ------------------------------------------------------------------------------------ stages


def integrity_checks(rp, device, *, pages: int = 24) -> list[dict]:
    """The round trip of every layout x io backend, H2D per layer and whole (the gpu-marked tests' checks,
    called directly so the run needs no pytest)."""
    from ..hardware.presets import IO_BACKENDS, MEM_LAYOUTS

    shape = rp.KVShape(num_layers=2, kv_factor=2, heads=2, head_dim=16, page_size=8)
    out = []
    for layout in MEM_LAYOUTS:
        pools = rp.allocate_pools(shape, layout, 64, 64, device)
        for io in IO_BACKENDS:
            ex = rp.Executor(pools, io)
            for seed, per_layer in enumerate((True, False)):
                rep = rp.check_round_trip(ex, pages=pages, seed=seed, per_layer=per_layer)
                out.append(asdict(rep))
    return out


def quick_config(rp):
    """The smallest grid the fit can still separate three costs on (tests, a smoke run)."""
    return rp.SweepConfig(page_counts=(1, 2, 4, 8, 16), page_sizes=(16, 64), repeats=2)


def run_oneshot(
    device: str = "auto",
    out: str | Path | None = None,
    *,
    quick: bool = False,
    budget_s: float = DEFAULT_BUDGET_S,
    scenario: str = VALIDATE_SCENARIO,
    validate_repeats: int = 3,
    command: str = "",
    log: Callable[[str], None] = lambda s: print(s, file=sys.stderr),
) -> dict:
    """Run the four stages into ``out`` (checked before any work: never a folder hicache-sim did not write);
    return the summary written to ``summary.json``."""
    import torch

    import hicache_sim.replay as rp

    from ..scenario import load_scenario, resolve_builtin
    from .fit import calibrate, dropped_note, error_table_markdown, read_measurements, scatter_figure
    from .validate import simulate_log, validate_run, write_validation

    if budget_s <= 0:
        raise OneShotError(f"--budget {budget_s}: expected seconds > 0")
    t_start = time.perf_counter()
    dev = rp.pick_device(device)
    name = rp.pools.device_name(dev)
    label = device_slug(name) if dev.type == "cuda" else "cpu-oneshot"
    folder = check_target(out or Path("results") / "calibration" / label, KIND)
    sc = load_scenario(scenario, [])  # bad scenario: before any work
    stages: dict[str, float] = {}

    def stage(key: str, fn):
        t0 = time.perf_counter()
        value = fn()
        stages[key] = round(time.perf_counter() - t0, 3)
        log(f"{key}: {stages[key]:.1f} s")
        return value

    integrity = stage("integrity_s", lambda: integrity_checks(rp, dev))
    cfg = quick_config(rp) if quick else rp.SweepConfig()
    # One pass over a few page counts spanning small copies (fixed costs) and copies larger than the CPU
    # caches (memory-bound bytes), so the per-byte cost is not extrapolated from cache-resident sizes.
    pilot_counts = tuple(c for c in cfg.page_counts if c in PILOT_COUNTS) or cfg.page_counts
    pilot_cfg = replace(cfg, page_counts=pilot_counts, repeats=1)

    def pilot():
        t0 = time.perf_counter()
        df = rp.run_sweep(pilot_cfg, dev)
        return df, time.perf_counter() - t0

    pilot_rows, pilot_wall = stage("pilot_s", pilot)
    cost = cost_model(pilot_rows, pilot_wall)
    run = stage("simulate_s", lambda: simulate_log(sc, base_dir=resolve_builtin(scenario, "scenarios").parent))
    log_bytes = run.transfers[run.transfers["kind"].astype(str).isin(["d2h", "h2d"])]["bytes"].to_numpy(dtype=float)
    remaining = budget_s - (time.perf_counter() - t_start) - FIT_RESERVE_S
    plan = plan_run(cfg, cost, log_bytes, remaining, validate_repeats, budget_s)
    for line in plan.shrunk:
        log(f"budget: {line}")
    cfg = replace(cfg.limited(plan.page_cap), repeats=plan.repeats)

    folder = prepare_folder(folder, KIND)
    for rel in FILES:  # an earlier run's files (the folder is hicache-sim's own, checked above)
        (folder / rel).unlink(missing_ok=True)
    write_text_atomic(folder / "integrity.json", json.dumps(integrity, indent=2) + "\n")

    def sweep():
        t0 = time.perf_counter()
        df = rp.run_sweep(cfg, dev)
        return df, time.perf_counter() - t0

    df, sweep_wall = stage("sweep_s", sweep)
    name = str(df["device_name"].iloc[0]) if len(df) else name  # as measured (CPU: the sweep's torch threads)
    atomic_write(folder / "measurements.parquet", lambda p: df.to_parquet(p, index=False))
    sweep_meta = rp.sweep.sweep_metadata(cfg, df, dev, sweep_wall)
    write_text_atomic(folder / "sweep.json", json.dumps(sweep_meta, indent=2) + "\n")

    def fit():
        m = read_measurements(folder / "measurements.parquet")
        res = calibrate(m, holdout=0.25, seed=0, source=f"oneshot sweep: {len(m)} measurements on {name}")
        atomic_write(folder / "calibration.yaml", res.calibration.save)
        md = error_table_markdown(res, title="Link-model calibration: calibration.yaml")
        write_text_atomic(folder / "calibration_errors.md", md)
        title = f"held-out configurations, {name}"
        scatter_figure(res.rows, folder / "calibration_holdout.png", title, only_split="holdout")
        return res

    res = stage("fit_s", fit)
    if res.overall.get("dropped_timings"):
        log(f"note: {dropped_note(res.overall['dropped_timings'])}")
    vsc = load_scenario(scenario, [f"hardware.calibration={folder / 'calibration.yaml'}"])
    vrun = simulate_log(vsc, base_dir=resolve_builtin(scenario, "scenarios").parent)
    v = stage(
        "validate_s",
        lambda: validate_run(vrun, device=str(dev), limit=plan.validate_limit, repeats=plan.validate_repeats),
    )
    write_validation(v, folder / "validate-model")
    stages["total_s"] = round(time.perf_counter() - t_start, 3)
    summary = {
        "command": command or "python -m hicache_sim.calibration.oneshot (called from Python)",
        "device": dev.type,
        "device_name": name,
        "versions": {
            "hicache_sim": __version__,
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "python": platform.python_version(),
        },
        "budget_s": budget_s,
        "within_budget": stages["total_s"] <= budget_s,
        "stages_s": stages,
        "plan": {
            "page_cap": plan.page_cap,
            "repeats": plan.repeats,
            "validate_repeats": plan.validate_repeats,
            "validate_limit": plan.validate_limit,
            "predicted": plan.predicted,
            "shrunk": plan.shrunk,
        },
        "integrity": {"checks": len(integrity), "passed": True},
        "sweep": {"rows": len(df), "page_counts": list(cfg.page_counts), "repeats": cfg.repeats},
        "calibration": {k: (round(x, 3) if isinstance(x, float) else x) for k, x in res.overall.items()},
        "validation": [
            {k: (round(x, 4) if isinstance(x, float) else x) for k, x in row.items()}
            for row in v.table.to_dict("records")
        ],
        "validation_scenario": scenario,
    }
    write_text_atomic(folder / "summary.json", json.dumps(summary, indent=2, default=str) + "\n")
    write_text_atomic(folder / "README.md", readme(summary))
    return summary


def readme(s: dict) -> str:
    """The folder's README: what was measured, from ``summary.json``."""
    from .fit import dropped_note

    cal, p = s["calibration"], s["plan"]
    lines = [
        f"# One-shot calibration: {s['device_name']}",
        "",
        f"Made by `{s['command']}` (hicache-sim {s['versions']['hicache_sim']}, torch {s['versions']['torch']}, "
        f"CUDA {s['versions']['cuda']}, Python {s['versions']['python']}).",
        "",
        f"- Integrity: {s['integrity']['checks']} round trips (every layout x io backend, H2D per layer and whole) "
        "bit for bit.",
        f"- Sweep: {s['sweep']['rows']} measurements, page counts {s['sweep']['page_counts'][0]}.."
        f"{s['sweep']['page_counts'][-1]}, {s['sweep']['repeats']} repeats (separate passes).",
    ]
    if "median_ape_pct" in cal:
        lines.append(
            f"- Fit: held-out median APE {cal['median_ape_pct']:.1f} %, p90 {cal['p90_ape_pct']:.1f} % over "
            f"{cal['n_holdout']} configurations (`calibration_errors.md`)."
        )
    if "repeat_spread_median_pct" in cal:
        lines.append(
            f"- Timing noise: repeat spread {cal['repeat_spread_median_pct']:.1f} % (median), p90 "
            f"{cal['repeat_spread_p90_pct']:.1f} %; {cal['outlier_repeats']} of {cal['repeats_total']} repeats "
            "outliers."
        )
    if "warning" in cal:
        lines.append(f"- Warning: {cal['warning']}")
    if cal.get("dropped_timings"):
        lines.append(f"- Sweep: {dropped_note(cal['dropped_timings'])}.")
    for row in s["validation"]:
        lines.append(
            f"- Validation ({row['direction']}, {row['transfers']} transfers of `{s['validation_scenario']}`): "
            f"median APE {row['median_ape_pct']:.1f} %, p90 {row['p90_ape_pct']:.1f} %, predicted/measured total "
            f"{row['predicted_over_measured']:.3f} (`validate-model/validation.md`)."
        )
    stages = ", ".join(f"{k.removesuffix('_s')} {v:.1f} s" for k, v in s["stages_s"].items())
    lines += ["", f"Wall time per stage: {stages}; budget {s['budget_s']:.0f} s."]
    lines.append("Shrunk to fit the budget: " + ("; ".join(p["shrunk"]) if p["shrunk"] else "nothing") + ".")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hicache_sim.calibration.oneshot", description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="auto", help="auto (CUDA when present), cuda or cpu")
    ap.add_argument("--out", default=None, help="output folder (default results/calibration/<device>)")
    ap.add_argument("--quick", action="store_true", help="a tiny grid (smoke test; the fit is not meaningful)")
    ap.add_argument("--budget", type=float, default=DEFAULT_BUDGET_S, help="wall-time budget, seconds")
    ap.add_argument("--scenario", default=VALIDATE_SCENARIO, help="validation scenario")
    argv = sys.argv[1:] if argv is None else argv
    args = ap.parse_args(argv)
    command = " ".join([ap.prog, *argv])
    try:
        import hicache_sim.replay as rp
    except ImportError as e:
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    from ..hardware.calibration import CalibrationError
    from ..scenario.schema import ScenarioError

    try:
        s = run_oneshot(
            args.device, args.out, quick=args.quick, budget_s=args.budget, scenario=args.scenario, command=command
        )
    except (OneShotError, OutputError, rp.ReplayError, ScenarioError, CalibrationError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except rp.IntegrityError as e:
        print(f"error: integrity check failed: {e}", file=sys.stderr)
        return 1
    total, budget = s["stages_s"]["total_s"], s["budget_s"]
    print(f"one-shot calibration on {s['device_name']} in {total:.1f} s (budget {budget:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
