"""Run the validation cases and compare with the published figures.

A case file holds ``scenario`` (one run) or ``scenarios`` (named runs), ``published`` (metric ->
per-round list, or per-run mapping), and ``checks`` (the tolerance the README claims, per metric;
``asserted: false`` rows are reported, not held; a check with ``seeds`` holds the published figure
within its tolerance of the range the run gives over those scenario seeds, the client order's spread).
Metrics are computed as the source computes them: bench_multiturn's per-round hit rate is the sum of
cached prompt tokens over the sum of prompt tokens of the round's requests, and its TTFT is the round's
mean; a bench_serving run's figures are its "Serving Benchmark Result" lines (``ttft_median_ms`` =
"Median TTFT (ms)", ...), as summary.json's ``serving`` block computes them.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd
import yaml

from hicache_sim.runner import simulate
from hicache_sim.scenario import Scenario

from .trace_bound import token_level_ratio

CASES_DIR = Path(__file__).parent / "cases"
ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "results" / "validation"
COMMAND = "python -m validation"


@dataclass
class Row:
    """One published figure beside its simulated value."""

    case: str
    metric: str
    key: str
    published: float
    simulated: float
    abs_err: float
    rel_err: float | None
    tolerance: float | None
    asserted: bool
    within: bool | None
    #: A ``seeds`` check: the least and greatest simulated value over its seeds (``simulated`` is the
    #: scenario's own seed).
    sim_min: float | None = None
    sim_max: float | None = None


def load_cases(names: list[str] | None = None) -> list[dict]:
    """Every case file (sorted by name), or the ones named."""
    cases = [yaml.safe_load(p.read_text()) for p in sorted(CASES_DIR.glob("*.yaml"))]
    if names:
        unknown = set(names) - {c["id"] for c in cases}
        if unknown:
            raise SystemExit(f"unknown case(s): {', '.join(sorted(unknown))}")
        cases = [c for c in cases if c["id"] in names]
    return cases


def _rounds_of(df: pd.DataFrame) -> pd.Series:
    """Round of each multi-turn request, from its id ``c<client>r<round>``."""
    return df["rid"].str.rsplit("r", n=1).str[1].astype(int)


def round_metrics(df: pd.DataFrame) -> dict[str, list[float]]:
    """Per round, as bench_multiturn prints them: token-weighted hit rate and mean TTFT."""
    df = df[df["status"] == "finished"].assign(round=_rounds_of(df))
    cached = df["device_hit_tokens"] + df["host_hit_tokens"] + df["storage_hit_tokens"]
    g = df.assign(cached=cached).groupby("round")
    hit = g["cached"].sum() / g["prompt_tokens"].sum()
    ttft = [float(x) for x in g["ttft_s"].mean()]
    return {"hit_rate": [float(x) for x in hit], "ttft_mean_s": ttft, "ttft_vs_round0": [t / ttft[0] for t in ttft]}


#: bench_serving result lines a case may quote: metric -> (summary["serving"] key, statistic or None).
SERVING_METRICS = {
    f"{stat}_{agg}_ms": (f"{key}_ms", agg)
    for stat, key in (("ttft", "ttft"), ("tpot", "tpot"), ("e2e", "e2e_latency"))
    for agg in ("mean", "median", "p99")
} | {
    "total_input_tokens": ("total_input_tokens", None),
    "total_output_tokens": ("total_output_tokens", None),
    "duration_s": ("duration_s", None),
    "request_throughput": ("request_throughput", None),
    "input_token_throughput": ("input_token_throughput", None),
    "output_token_throughput": ("output_token_throughput", None),
}


def serving_value(block: dict, metric: str) -> float:
    """One bench_serving figure of a simulated run's ``serving`` block."""
    if metric not in SERVING_METRICS:
        raise SystemExit(f"unknown bench_serving metric {metric!r}; known: {', '.join(sorted(SERVING_METRICS))}")
    key, agg = SERVING_METRICS[metric]
    return float(block[key] if agg is None else block[key][agg])


def _derived(pub: dict) -> dict:
    """Published figures plus the scale-free ones derived from them: TTFT of each round over round 0's
    (compares how TTFT grows with the history when the source does not name its GPU)."""
    out = dict(pub)
    t = pub.get("ttft_mean_s")
    if t and t[0]:
        out["ttft_vs_round0"] = [round(x / t[0], 6) for x in t]
    return out


def _scenario(data: dict, *, fast: bool, rounds: int | None) -> Scenario:
    """The case's scenario; in fast mode a round-barrier run stops after the last published round
    (rounds after it cannot change the earlier ones: the barrier holds them back)."""
    data = json.loads(json.dumps(data))
    mt = data.get("workload", {}).get("multiturn")
    if fast and rounds and mt and mt.get("round_barrier"):
        mt["num_rounds"] = min(mt["num_rounds"], rounds)
    return Scenario.model_validate(data)


def _check(case: dict, metric: str, key: str, run: str = "") -> dict:
    """The check group that holds one figure: ``RUN.metric`` before ``metric``, the first group whose
    ``rounds`` (if any) name the figure's round."""
    checks = case.get("checks", {})
    found = checks.get(f"{run}.{metric}" if run else metric, checks.get(metric, {}))
    rnd = key.split()[-1]
    for c in found if isinstance(found, list) else [found]:
        if "rounds" not in c or (rnd.isdigit() and int(rnd) in c["rounds"]):
            return c
    return {}


def _row(
    case: dict, metric: str, key: str, pub: float, sim: float, run: str = "", spread: list[float] | None = None
) -> Row:
    chk = _check(case, metric, key, run)
    tol = chk.get("abs")
    asserted = bool(chk.get("asserted"))
    err = sim - pub
    rel = err / pub if pub else None
    lo, hi = (min(spread), max(spread)) if spread else (sim, sim)
    within = lo - tol - 1e-12 <= pub <= hi + tol + 1e-12 if tol is not None and asserted else None
    row = Row(case["id"], metric, key, pub, sim, err, rel, tol if asserted else None, asserted, within)
    if spread:
        row.sim_min, row.sim_max = lo, hi
    return row


def _runs(case: dict) -> dict[str, tuple[dict, dict]]:
    """The case's runs: name -> (scenario, published). A one-run case has no name."""
    if "scenario" in case:
        return {"": (case["scenario"], case["published"])}
    return {name: (run["scenario"], run["published"]) for name, run in case["runs"].items()}


def run_case(case: dict, *, fast: bool = False) -> list[Row]:
    """Simulate one case and compare every published figure: per-round lists (bench_multiturn), or
    ``cache_ratio`` (the run's token-weighted hit rate) with its token-level estimate for traces."""
    if case.get("kind") == "copy":
        from .copy_cases import copy_rows  # imports Row from here

        return copy_rows(case)
    rows: list[Row] = []
    only = set(case.get("fast_runs") or []) if fast else set()
    for name, (data, published) in _runs(case).items():
        if only and name not in only:
            continue
        pub = _derived(published)
        rounds = len(pub.get("hit_rate", [])) or None
        out = simulate(_scenario(data, fast=fast, rounds=rounds), base_dir=ROOT)
        if "cache_ratio" in pub:
            ratio = float(pub["cache_ratio"])
            rows.append(_row(case, "cache_ratio", name, ratio, out.summary["hit_rate"]["total"]))
            bound = token_level_ratio(data["workload"]["trace"]["path"], block_tokens=512)
            rows.append(_row(case, "cache_ratio_token_level_estimate", name, ratio, bound))
            continue
        if "serving" in out.summary:
            for metric, v in pub.items():
                rows.append(_row(case, metric, name, float(v), serving_value(out.summary["serving"], metric), run=name))
            continue
        sim = round_metrics(out.requests)
        by_seed = {data.get("seed", 1): sim} | {
            s: round_metrics(simulate(_scenario({**data, "seed": s}, fast=fast, rounds=rounds), base_dir=ROOT).requests)
            for s in _seeds(case, name, pub)
            if s != data.get("seed", 1)
        }
        for metric, values in pub.items():
            for r, v in enumerate(values):
                key = f"{name} {r}" if name else str(r)
                seeds = _check(case, metric, key, name).get("seeds")
                spread = [by_seed[s][metric][r] for s in seeds] if seeds else None
                rows.append(_row(case, metric, key, float(v), sim[metric][r], run=name, spread=spread))
    return rows


def _seeds(case: dict, run: str, published: dict) -> set[int]:
    """Every scenario seed a ``seeds`` check of this run asks for."""
    out: set[int] = set()
    for metric, values in published.items():
        for r in range(len(values)):
            out.update(_check(case, metric, f"{run} {r}" if run else str(r), run).get("seeds") or [])
    return out


def _fmt(x: float | None, digits: int = 6) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:.{digits}f}"


def table(rows: list[Row]) -> str:
    """Markdown: published vs simulated with the errors, one line per figure."""
    head = "| case | metric | round / run | published | simulated | abs. error | rel. error | held to |\n"
    head += "|---|---|---|---|---|---|---|---|\n"
    lines = []
    for r in rows:
        rel = "n/a" if r.rel_err is None else f"{100 * r.rel_err:+.1f}%"
        held = f"±{r.tolerance:g} {'ok' if r.within else 'FAIL'}" if r.asserted else "reported"
        if r.sim_min is not None:
            held += f" (seeds: {_fmt(r.sim_min, 3)}-{_fmt(r.sim_max, 3)})"
        lines.append(
            f"| {r.case} | {r.metric} | {r.key} | {_fmt(r.published)} | {_fmt(r.simulated)} | "
            f"{r.abs_err:+.6f} | {rel} | {held} |"
        )
    return head + "\n".join(lines) + "\n"


def write_results(rows: list[Row], out_dir: Path, command: str) -> None:
    """``table.md`` and ``results.json`` in ``out_dir``, each saying which command made it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    md = f"# Validation against published runs\n\nMade by `{command}` (cases and sources: `validation/`).\n\n"
    (out_dir / "table.md").write_text(md + table(rows))
    doc = {"command": command, "rows": [asdict(r) for r in rows]}
    (out_dir / "results.json").write_text(json.dumps(doc, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m validation", description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="*", help="case ids (default: all)")
    ap.add_argument(
        "--fast",
        action="store_true",
        help="the CI subset: stop round-barrier runs at the last published round, and run only a case's "
        "fast_runs when it names them",
    )
    ap.add_argument("--out", default=str(OUT_DIR), help="result folder (default: results/validation)")
    a = ap.parse_args(argv)
    rows: list[Row] = []
    for case in load_cases(a.cases):
        print(f"{case['id']}: {case['title']}", file=sys.stderr)
        rows.extend(run_case(case, fast=a.fast))
    cmd = " ".join([COMMAND, *(["--fast"] if a.fast else []), *a.cases])
    write_results(rows, Path(a.out), cmd)
    print(table(rows))
    failed = [r for r in rows if r.within is False]
    return 1 if failed else 0
