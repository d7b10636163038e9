"""Check a scenario against the deployment's own benchmark result, and fit the compute terms such a
result can pin by re-running the timed model.

A benchmark result gives aggregates of a whole run, not step times: a mean TTFT and a mean TPOT (or
ITL, or latency) over requests whose batches, queues and caches overlap. So the fit moves only two
*levers*, each by one factor, and finds them by re-running the scenario (Newton steps on the log of
the figures, finite-difference Jacobian, a few runs each, bounded):

- prefill (target: mean TTFT, else median TTFT): either one scale on the prefill efficiencies
  (``linear_mfu``, ``attention_mfu`` and, for a MoE, ``moe_mfu`` together: their ratio stays as it
  was) or the host floor of a prefill forward (``prefill_eager_us_per_layer`` /
  ``prefill_graph_us_per_layer``, whichever the scenario's prefill graph backend uses), whichever the
  figure depends on most;
- decode (target: mean TPOT, else median TPOT, mean ITL, latency, output throughput, duration):
  ``hbm_efficiency`` or ``decode_us_per_layer``, whichever the figure depends on most.

A lever the target barely moves (less than ``MIN_SENSITIVITY`` in d log figure / d log lever: short
prompts under the host floor, answers of one token) is not fitted and the result says why. What one
run cannot separate is never fitted: the per-request and per-step constants, the all-reduce terms,
and the split between the efficiencies a prefill scale moves together. Every other figure the
benchmark printed is reported before and after the fit: the fit's error on figures it did not use.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from ..hardware.calibration import COMPUTE_FIELDS
from ..scenario import Resolved
from .benchresult import MULTITURN, SERVING, SERVING_STATS, BenchResult

MIN_SENSITIVITY = 0.02  # |d log(target) / d log(lever)| below which a lever is not pinned
PROBE = 0.02  # the lever step of the finite differences, in log units
TOLERANCE = 5e-5  # |log(simulated / measured)| at which a target counts as matched
MAX_ITERATIONS = 10
MAX_STEP = 1.0  # at most a factor e per Newton step
SMALL = 1e-4  # lowest efficiency

#: Knobs one benchmark run never pins, and why.
NEVER_PINNED = {
    "request_overhead_us": "a constant per request: one run's TTFT cannot tell it from prefill speed",
    "step_overhead_us": "a constant per step: one run cannot tell it from the decode and prefill terms",
    "allreduce_latency_us": "folded into the step times; needs a collective benchmark",
    "allreduce_half_peak_mib": "folded into the step times; needs a collective benchmark",
    "allreduce_curve_exponent": "folded into the step times; needs a collective benchmark",
}

#: Per benchmark and lever group: the target figures in order of preference (the first the result has).
TARGETS = {
    SERVING: {
        "prefill": ("mean_ttft_ms", "median_ttft_ms"),
        "decode": (
            "mean_tpot_ms",
            "median_tpot_ms",
            "mean_itl_ms",
            "mean_e2e_latency_ms",
            "median_e2e_latency_ms",
            "output_throughput",
            "duration",
        ),
    },
    MULTITURN: {
        "prefill": ("average_ttft", "median_ttft"),
        "decode": ("average_itl", "average_latency", "median_latency", "throughput"),
    },
}
#: Figures that fall as the deployment gets faster (the rest, times, rise).
RATES = {
    "request_throughput",
    "input_throughput",
    "output_throughput",
    "total_throughput",
    "throughput",
    "input_token_throughput",
    "output_token_throughput",
}


@dataclass(frozen=True)
class Lever:
    """One factor on one or more compute knobs (all multiplied by ``exp(u)``)."""

    group: str  # prefill or decode
    name: str
    knobs: tuple[str, ...]

    def values(self, start: dict[str, float], u: float) -> dict[str, float]:
        return {k: start[k] * math.exp(u) for k in self.knobs}

    def bounds(self, start: dict[str, float]) -> tuple[float, float]:
        """The range of ``u`` that keeps every knob inside the calibration file's bounds."""
        lo, hi = -math.inf, math.inf
        for k in self.knobs:
            low, high, _ = COMPUTE_FIELDS[k]
            v = start[k]
            top = high if high <= 1.0 else 1e6
            bottom = max(low, SMALL) if high <= 1.0 else max(low, 1e-3)
            hi = min(hi, math.log(top / v))
            lo = max(lo, math.log(bottom / v))
        return lo, hi


def levers(r: Resolved, start: dict[str, float]) -> dict[str, list[Lever]]:
    """The candidate levers per group for the scenario ``r`` (a knob at 0 cannot be scaled)."""
    from ..scenario.resolve import PREFILL_FLOOR_KNOB

    effs = ("linear_mfu", "attention_mfu") + (("moe_mfu",) if r.model.num_experts else ())
    floor = PREFILL_FLOOR_KNOB[r.prefill_graph]
    out = {
        "prefill": [Lever("prefill", "prefill efficiency scale", effs), Lever("prefill", floor, (floor,))],
        "decode": [
            Lever("decode", "hbm_efficiency", ("hbm_efficiency",)),
            Lever("decode", "decode_us_per_layer", ("decode_us_per_layer",)),
        ],
    }
    return {g: [lv for lv in ls if all(start[k] > 0 for k in lv.knobs)] for g, ls in out.items()}


# ----------------------------------------------------------------------------------------------------
# What the simulator gives for each figure the benchmark prints


def serving_figures(rows) -> dict[str, float]:
    """bench_serving's figures from a run's measured rows (warm-up dropped), as its ``calculate_metrics``
    defines them; ITL only as its mean (the simulator has no per-token times: the mean of a request's
    gaps is its TPOT, token-weighted over the run)."""
    from ..output.serving import stats_ms

    done = rows.take(rows["status"] == "finished") if "status" in rows else rows
    n = len(done)
    if not n:
        return {"completed": 0.0}
    ttft = [float(x) for x in done["ttft_s"].tolist()]
    e2e = [float(x) for x in done["e2e_s"].tolist()]
    outs = [int(x) for x in done["output_tokens"].tolist()]
    decode = [(e - t, o - 1) for e, t, o in zip(e2e, ttft, outs, strict=True) if o > 1]
    duration = max(float(done["finish_s"].max() - done["arrival_s"].min()), 1e-9)
    total_in = float(done["prompt_tokens"].sum())
    total_out = float(sum(outs))
    out = {
        "completed": float(n),
        "duration": duration,
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": n / duration,
        "input_throughput": total_in / duration,
        "output_throughput": total_out / duration,
        "total_throughput": (total_in + total_out) / duration,
        "concurrency": sum(e2e) / duration,
    }
    for name, vals in (("ttft", ttft), ("e2e_latency", e2e), ("tpot", [t / k for t, k in decode])):
        out.update({f"{s}_{name}_ms": v for s, v in stats_ms(vals, SERVING_STATS).items() if v is not None})
    if decode:
        out["mean_itl_ms"] = 1000.0 * sum(t for t, _ in decode) / sum(k for _, k in decode)
    cached = sum(float(done[f"{t}_hit_tokens"].sum()) for t in ("device", "host", "storage"))
    out["total_cached_tokens"] = cached
    out["cache_hit_rate_pct"] = 100.0 * cached / total_in if total_in else 0.0
    return out


def multiturn_figures(rows) -> tuple[dict[str, float], list[dict]]:
    """bench_multiturn's summary and per-round figures from a run's rows (its percentile rule
    ``sorted[int(q n)]``; throughput over first send to last finish)."""
    from ..output.rounds import bench_percentile, per_round

    done = rows.take(rows["status"] == "finished") if "status" in rows else rows
    n = len(done)
    if not n:
        return {"total_requests": 0.0}, []
    out: dict[str, float] = {"total_requests": float(n)}
    ttft = [float(x) for x in done["ttft_s"].tolist()]
    lat = [float(x) for x in done["e2e_s"].tolist()]
    for name, vals in (("ttft", ttft), ("latency", lat)):
        out[f"average_{name}"] = sum(vals) / n
        out[f"median_{name}"] = bench_percentile(vals, 0.5)
        out[f"p90_{name}"] = bench_percentile(vals, 0.9)
        out[f"p99_{name}"] = bench_percentile(vals, 0.99)
        out[f"max_{name}"] = max(vals)
    outs = [int(x) for x in done["output_tokens"].tolist()]
    gaps = sum(e - t for e, t, o in zip(lat, ttft, outs, strict=True) if o > 1)
    steps = sum(o - 1 for o in outs if o > 1)
    if steps:
        out["average_itl"] = gaps / steps
    duration = max(float(done["finish_s"].max() - done["arrival_s"].min()), 1e-9)
    prompt = float(done["prompt_tokens"].sum())
    hits = sum(float(done[f"{t}_hit_tokens"].sum()) for t in ("device", "host", "storage"))
    out["input_token_throughput"] = prompt / duration
    out["output_token_throughput"] = float(sum(outs)) / duration
    out["throughput"] = n / duration
    out["cache_hit_rate"] = hits / prompt if prompt else 0.0
    rounds = [
        {
            "round": r["round"],
            "average_ttft": r["ttft_s"]["mean"],
            "cache_hit_rate": r["cache_hit_rate"],
            "request_count": float(r["requests"]),
        }
        for r in per_round(done, True)
    ]
    return out, rounds


# ----------------------------------------------------------------------------------------------------
# Running the scenario with some knobs replaced


@dataclass
class Simulated:
    """The simulator's figures for one set of knobs."""

    figures: dict[str, float]
    rounds: list[dict]


class Runner:
    """Runs the scenario's timed model with knobs replaced (the workload built once), counting runs."""

    def __init__(self, r: Resolved, workload, kind: str) -> None:
        self.r = r
        self.workload = workload
        self.kind = kind
        self.runs = 0

    def __call__(self, knobs: dict[str, float]) -> Simulated:
        from ..runner import simulate

        r = dataclasses.replace(self.r, compute_knobs={**self.r.compute_knobs, **knobs})
        out = simulate(r.scenario, resolved=r, workload=self.workload)
        self.runs += 1
        rows = out.request_columns
        if self.kind == SERVING:
            return Simulated(serving_figures(rows.take(slice(self.workload.warmup_requests, None))), [])
        figures, rounds = multiturn_figures(rows)
        return Simulated(figures, rounds)


def measured_value(result: BenchResult, key: str) -> float | None:
    """A figure of the result; a multi-turn run's mean TTFT from its per-round lines when the
    summary is missing (the request-weighted mean of the rounds' means)."""
    if key in result.figures:
        return result.figures[key]
    if key == "average_ttft" and result.rounds:
        n = sum(r["request_count"] for r in result.rounds)
        return sum(r["average_ttft"] * r["request_count"] for r in result.rounds) / n if n else None
    return None


def compare(result: BenchResult, sim: Simulated) -> list[dict]:
    """One row per figure the benchmark printed: measured, simulated, error (%, simulated vs measured)."""
    rows = []
    keys = list(result.figures)
    if "average_ttft" not in keys and result.kind == MULTITURN and result.rounds:
        keys.insert(0, "average_ttft")
    for key in keys:
        m = measured_value(result, key)
        s = sim.figures.get(key)
        rows.append(_row(key, m, s))
    by_round = {r["round"]: r for r in sim.rounds}
    for r in result.rounds:
        got = by_round.get(int(r["round"]), {})
        for k in ("cache_hit_rate", "average_ttft"):
            rows.append(_row(f"round_{int(r['round'])}.{k}", r[k], got.get(k)))
    return rows


def _row(key: str, measured: float | None, simulated: float | None) -> dict:
    err = None
    if measured is not None and simulated is not None and measured != 0:
        err = (simulated / measured - 1.0) * 100.0
    return {"figure": key, "measured": measured, "simulated": simulated, "error_pct": err}


# ----------------------------------------------------------------------------------------------------
# The fit


@dataclass
class BenchFit:
    """What the fit moved, to what, on which figures, and what it left alone."""

    knobs: dict[str, float]
    start: dict[str, float]
    levers: dict[str, str]  # group -> lever name
    targets: dict[str, str]  # group -> figure key
    factors: dict[str, float]  # group -> the lever's factor
    not_pinned: dict[str, str]
    at_bound: list[str] = field(default_factory=list)
    target_error_pct: dict[str, float] = field(default_factory=dict)
    sensitivity: dict[str, float] = field(default_factory=dict)  # lever name -> d log target / d log lever
    runs: int = 0
    before: list[dict] = field(default_factory=list)
    after: list[dict] = field(default_factory=list)


def _target(result: BenchResult, group: str) -> str | None:
    """The first of the group's target figures the result holds."""
    for key in TARGETS[result.kind][group]:
        if measured_value(result, key) is not None:
            return key
    return None


def fit_bench(r: Resolved, workload, result: BenchResult, progress: Callable[[str], None] | None = None) -> BenchFit:
    """Fit the levers ``result`` pins for the scenario ``r`` (its workload already built)."""
    import numpy as np

    run = Runner(r, workload, result.kind)
    start = {k: float(r.compute_knobs[k]) for k in COMPUTE_FIELDS}
    cands = levers(r, start)
    targets = {group: _target(result, group) for group in ("prefill", "decode")}
    not_pinned = dict(NEVER_PINNED)
    base = run({})
    fit = BenchFit(knobs={}, start=start, levers={}, targets={}, factors={}, not_pinned=not_pinned, before=[])
    fit.before = compare(result, base)

    def log_ratio(sim: Simulated, key: str) -> float | None:
        m, s = measured_value(result, key), sim.figures.get(key)
        if m is None or s is None or m <= 0 or s <= 0:
            return None
        return math.log(s / m)

    chosen: list[Lever] = []
    for group in ("prefill", "decode"):
        key = targets[group]
        r0 = log_ratio(base, key) if key else None
        names = [k for lv in cands[group] for k in lv.knobs]
        if r0 is None:
            why = f"the result has none of {', '.join(TARGETS[result.kind][group])}"
            not_pinned.update({k: why for k in names})
            continue
        sens = {}
        for lv in cands[group]:
            up = run(lv.values(start, PROBE))
            d = log_ratio(up, key)
            sens[lv.name] = (d - r0) / PROBE if d is not None else 0.0
        fit.sensitivity.update(sens)
        best = max(cands[group], key=lambda lv: abs(sens[lv.name]))
        if abs(sens[best.name]) < MIN_SENSITIVITY:
            not_pinned.update({k: f"{key} barely depends on it (d log / d log {sens[best.name]:+.3f})" for k in names})
            continue
        chosen.append(best)
        fit.levers[group], fit.targets[group] = best.name, key
        for lv in cands[group]:
            if lv is not best:
                why = (
                    f"{key} depends on {best.name} more ({sens[best.name]:+.2f} vs {sens[lv.name]:+.2f}); "
                    "one figure pins one"
                )
                not_pinned.update({k: why for k in lv.knobs})
        if len(best.knobs) > 1:
            for k in best.knobs:
                not_pinned[k] = f"scaled with {', '.join(x for x in best.knobs if x != k)}: their split is the start's"

    if progress:
        progress(f"fitting {', '.join(lv.name for lv in chosen) or 'nothing'} ({run.runs} runs so far)")
    u = np.zeros(len(chosen))
    bounds = [lv.bounds(start) for lv in chosen]
    keys = [fit.targets[lv.group] for lv in chosen]

    def knobs_at(x) -> dict[str, float]:
        out: dict[str, float] = {}
        for lv, ui in zip(chosen, x, strict=True):
            out.update(lv.values(start, float(ui)))
        return out

    def residual(x) -> tuple[np.ndarray, Simulated]:
        sim = run(knobs_at(x))
        return np.array([log_ratio(sim, k) or 0.0 for k in keys]), sim

    res = np.array([log_ratio(base, k) for k in keys], dtype=float) if chosen else np.zeros(0)
    at_u = base  # the run at ``u``: the start's knobs are the scenario's own, the base run
    for _ in range(MAX_ITERATIONS if chosen else 0):
        if float(np.max(np.abs(res))) < TOLERANCE:
            break
        jac = np.zeros((len(keys), len(chosen)))
        for j in range(len(chosen)):
            probe = u.copy()
            probe[j] += PROBE if u[j] + PROBE <= bounds[j][1] else -PROBE
            jac[:, j] = (residual(probe)[0] - res) / (probe[j] - u[j])
        step = np.linalg.lstsq(jac, -res, rcond=None)[0]
        step = np.clip(step, -MAX_STEP, MAX_STEP)
        for _half in range(4):
            trial = np.array([min(max(u[j] + step[j], bounds[j][0]), bounds[j][1]) for j in range(len(chosen))])
            got, got_run = residual(trial)
            if np.linalg.norm(got) < np.linalg.norm(res):
                break
            step = step / 2
        else:
            break
        if np.allclose(trial, u, atol=1e-9, rtol=0):
            break
        u, res, at_u = trial, got, got_run
    fit.knobs = knobs_at(u)
    for lv, ui, (lo, hi), e in zip(chosen, u, bounds, res, strict=True):
        fit.factors[lv.group] = math.exp(float(ui))
        fit.target_error_pct[fit.targets[lv.group]] = (math.exp(float(e)) - 1.0) * 100.0
        if ui <= lo + 1e-9 or ui >= hi - 1e-9:
            fit.at_bound.append(lv.name)
    fit.after = compare(result, at_u) if chosen else fit.before  # the last accepted run: not run again
    fit.runs = run.runs
    return fit


def check_bench(r: Resolved, workload, result: BenchResult) -> list[dict]:
    """Measured vs simulated for every figure the result printed, at the scenario's own knobs."""
    return compare(result, Runner(r, workload, result.kind)({}))


# ----------------------------------------------------------------------------------------------------
# Reports

UNITS = {SERVING: "ms (times), tokens, per second", MULTITURN: "seconds (times), per second, hit rate 0-1"}


def _num(v: float | None) -> str:
    if v is None:
        return "-"
    if abs(v) >= 1000:
        return f"{v:,.1f}"
    return f"{v:.4g}"


def _err(v: float | None) -> str:
    return "-" if v is None else f"{v:+.1f} %"


def table_lines(before: list[dict], after: list[dict] | None = None) -> list[str]:
    """The terminal table: figure, measured, simulated (and after the fit), error."""
    head = f"{'figure':34s} {'measured':>12s} {'simulated':>12s} {'error':>9s}"
    if after is not None:
        head += f" {'fitted':>12s} {'error':>9s}"
    lines = [head]
    later = {row["figure"]: row for row in after or []}
    for row in before:
        line = f"{row['figure']:34s} {_num(row['measured']):>12s} {_num(row['simulated']):>12s}"
        line += f" {_err(row['error_pct']):>9s}"
        if after is not None:
            a = later.get(row["figure"], {})
            line += f" {_num(a.get('simulated')):>12s} {_err(a.get('error_pct')):>9s}"
        lines.append(line)
    return lines


def not_simulated(rows: list[dict]) -> list[str]:
    """Figures the benchmark printed that the simulator does not produce."""
    return [row["figure"] for row in rows if row["simulated"] is None]


def report_markdown(title: str, meta: list[str], before: list[dict], fit: BenchFit | None) -> str:
    """The markdown report: the context, the table, and what the fit pinned and did not."""
    lines = [f"# {title}", ""] + [f"- {m}" for m in meta] + [""]
    cols = ["figure", "measured", "simulated", "error"]
    if fit is not None:
        cols += ["fitted", "error after"]
    lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    later = {row["figure"]: row for row in fit.after} if fit is not None else {}
    for row in before:
        cells = [row["figure"], _num(row["measured"]), _num(row["simulated"]), _err(row["error_pct"])]
        if fit is not None:
            a = later.get(row["figure"], {})
            cells += [_num(a.get("simulated")), _err(a.get("error_pct"))]
        lines.append("| " + " | ".join(cells) + " |")
    if fit is not None:
        lines += ["", "## Fit", ""]
        for group, name in fit.levers.items():
            lines.append(f"- {group}: {name} x {fit.factors[group]:.4f} on {fit.targets[group]}")
        lines += [f"- {k}: {fit.start[k]:.6g} -> {v:.6g}" for k, v in fit.knobs.items()]
        lines += [f"- at its bound: {name}" for name in fit.at_bound]
        lines += [f"- {fit.runs} runs of the scenario", "", "## Not pinned", ""]
        lines += [f"- {k}: {why}" for k, why in fit.not_pinned.items()]
    missing = not_simulated(before)
    if missing:
        lines += ["", "Not simulated (no per-token times): " + ", ".join(missing)]
    return "\n".join(lines) + "\n"
