"""Calibrate on a public set's GPU-only run, predict its + L2 / + store runs (issue 27, item 4).

The operator's question: "calibrated on my deployment as it runs today, what will more host memory or a
store do?" Each public set is one deployment and one benchmark run GPU-only, then with more tiers. For
each set this module

1. writes the GPU-only run's published per-round figures as bench_multiturn prints them
   (``Round <i>: Average TTFT = <t>s, Cache Hit Rate = <h> (<n> requests, <n> clients)``): the only
   figures the sources publish for these runs;
2. runs the tool's own fit on it, ``hicache-sim calibrate BENCH --scenario GPU_ONLY --out CAL`` (the
   scenario is the case's, stopped at the last published round: a round barrier holds later rounds
   back, so the earlier ones are the same);
3. simulates every run of the set with the presets and with ``hardware.calibration: CAL``, and tables
   the mean TTFT over the published rounds (and each round) against the published figures.

Nothing here is fitted by hand: the knobs are the calibration file the CLI wrote from the GPU-only
figures. ``python -m validation.calibrated`` writes ``results/validation/calibrated.{md,json}`` and
the inputs and outputs of each fit under ``results/validation/calibrated/<set>/``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd
import yaml

from hicache_sim.runner import simulate

from .run import ROOT, _derived, _rounds_of, _runs, _scenario, load_cases, round_metrics

OUT_DIR = ROOT / "results" / "validation"
COMMAND = "python -m validation.calibrated"
HELD = 0.25  # |relative error| of a predicted run's mean TTFT the issue holds
GOAL = 0.15


@dataclass(frozen=True)
class PublicSet:
    """One deployment and one benchmark: the run calibrated on, and the runs predicted from it."""

    name: str
    base: tuple[str, str]  # (case id, run name; "" for a one-run case)
    predict: tuple[tuple[str, str], ...]
    #: Predicted runs whose calibrated mean TTFT is asserted within HELD (tests/test_validation_calibrated.py);
    #: the others miss, with their mechanism in MISSES.
    held: tuple[str, ...] = ()


SETS = (
    PublicSet(
        "mooncake_blog_h800",
        ("mooncake_blog_h800", "gpu_only"),
        (("mooncake_blog_h800", "l2"), ("mooncake_blog_h800", "mooncake")),
        held=("mooncake_blog_h800.l2", "mooncake_blog_h800.mooncake"),
    ),
    PublicSet("sglang_27010", ("sglang_27010_l1", ""), (("sglang_27010_l2", ""),), held=("sglang_27010_l2",)),
    PublicSet(
        "mooncake_ssd_offload_a100",
        ("mooncake_ssd_offload_a100", "gpu_only"),
        tuple(("mooncake_ssd_offload_a100", r) for r in ("l2", "mooncake", "mooncake_ssd")),
        held=("mooncake_ssd_offload_a100.l2", "mooncake_ssd_offload_a100.mooncake"),
    ),
)


#: Predicted runs that miss HELD after calibration, and why (validation/README.md has the numbers).
MISSES = {
    "mooncake_ssd_offload_a100.mooncake_ssd": (
        "not the SSD (Mooncake's offload is modelled: evicted objects read from the NVMe one by one at the "
        "source's 27 GB/s and 80 us each; it moves the run under 1 point) and not the attention over the cached "
        "prefix either: triton's extend kernel is modelled from its code (hardware.attention_backend triton: every "
        "query head x 128-token tile re-reads the whole prefix, memory-bound at 1.2x its FLOPs time on the "
        "a100-40g preset), which moves the run from -36.9% to -39.8%, because the GPU-only run the fit sees does "
        "the same work: on a 40 GiB card SGLang chunks prefill at 4,096 tokens, so a recomputed history is "
        "4,096-token chunks attending to the same request's earlier chunks, the store rounds' shape. Nor the fit's "
        "shape: the tool's one prefill lever scales the efficiencies, which slows triton's HBM-bound kernel less "
        "than the GEMMs (1.16x against 1.40x at its x 0.7155, so GPU-only round 0 goes +4.7% -> +44.7%), but "
        "fitting the GPU-only run on two figures instead "
        "(round 0 -> linear_mfu, the mean -> the kernel's hbm_efficiency; the split-fit diagnostic) leaves + SSD at "
        "-34.5%. Nor the admission budget (0.5.10's PrefillAdder charges a request's host hit as the simulator "
        "does), nor the SGLang version's cache code: the case now runs 0.5.10's HiRadixCache variants (whole-need "
        "eviction, prefetch pages taken at issue, no re-issue, ...: -39.8% -> -39.7%). What the store rounds have "
        "and the GPU-only run has not is loading the hit prefix into the GPU: their calibrated deficit grows with "
        "the tokens loaded (+ Mooncake rounds 3-6 -37..-47%), host hits included. Nor is it the load path as "
        "SGLang 0.5.10 codes it, which is the simulator's: admitted in the step that matches it, the batch's "
        "loads merged and issued before its forward, the forward waiting layer by layer on a pinned host pool (JIT "
        "kernel for + L2, one cudaMemcpyBatchAsync a layer for the store runs); in the model the forward waits "
        "0.43 s in all for loads over + Mooncake's 180 requests, and even an unhidden load at the preset's 25.1 "
        "GB/s would be a sixth of the deficit. It asks for a load or store read at ~4 GB/s that the request waits "
        "for; what could make one (the RDMA loopback read rate of the source's two HDR NICs, the JIT kernel's "
        "blocks waiting for free SMs under the prefill, a driver older than 12.8 putting the direct path on "
        "per-page copies) needs a measurement on the source's machine"
    ),
}


def _median_abs(simulated: list[float], published: list[float]) -> float:
    """Median |relative error| over rounds."""
    return float(statistics.median(abs(s / p - 1.0) for s, p in zip(simulated, published, strict=True)))


@dataclass
class RunResult:
    """One run of a set: published, preset and calibrated mean TTFT over the published rounds, per round."""

    set: str
    case: str
    run: str
    role: str  # "calibrated on" or "predicted"
    published: list[float]
    preset: list[float]
    calibrated: list[float]
    mean_published: float = 0.0
    mean_preset: float = 0.0
    mean_calibrated: float = 0.0
    err_preset: float = 0.0
    err_calibrated: float = 0.0
    hit_published: list[float] = field(default_factory=list)
    hit_calibrated: list[float] = field(default_factory=list)
    loaded_calibrated: list[float] = field(default_factory=list)  # tokens per request from host or store
    round_err_preset: float = 0.0  # median |relative error| over the rounds
    round_err_calibrated: float = 0.0

    def __post_init__(self) -> None:
        n = len(self.published)
        self.mean_published = sum(self.published) / n
        self.mean_preset = sum(self.preset) / n
        self.mean_calibrated = sum(self.calibrated) / n
        self.err_preset = self.mean_preset / self.mean_published - 1.0
        self.err_calibrated = self.mean_calibrated / self.mean_published - 1.0
        self.round_err_preset = _median_abs(self.preset, self.published)
        self.round_err_calibrated = _median_abs(self.calibrated, self.published)

    @property
    def label(self) -> str:
        return f"{self.case}{'.' + self.run if self.run else ''}"


def _case_run(case_id: str, run: str) -> tuple[dict, dict]:
    """(scenario data, published figures) of one run of a case."""
    (case,) = load_cases([case_id])
    return _runs(case)[run]


def _fmt_time(v: float) -> str:
    """A TTFT as bench_multiturn prints it (``{:.2f}``), more digits only where the source has them."""
    return f"{v:.2f}" if round(v, 2) == v else repr(float(v))


def bench_text(published: dict, clients: int) -> str:
    """The per-round lines bench_multiturn prints (``--enable-round-barrier``) for published figures."""
    lines = []
    for r, (t, h) in enumerate(zip(published["ttft_mean_s"], published["hit_rate"], strict=True)):
        lines.append(
            f"Round {r}: Average TTFT = {_fmt_time(float(t))}s, Cache Hit Rate = {float(h):.6f} "
            f"({clients} requests, {clients} clients)"
        )
    return "\n".join(lines) + "\n"


def _truncated(data: dict, published: dict) -> dict:
    """The run's scenario stopped at its last published round, as a plain dict."""
    out = json.loads(json.dumps(data))
    mt = out["workload"]["multiturn"]
    mt["num_rounds"] = min(mt["num_rounds"], len(published["ttft_mean_s"]))
    return out


def calibrate_set(s: PublicSet, folder: Path) -> tuple[Path, dict]:
    """Write the GPU-only run's bench text and scenario under ``folder``, run ``hicache-sim calibrate``
    on them; the calibration file and the fit (from the report JSON the CLI wrote)."""
    folder.mkdir(parents=True, exist_ok=True)
    data, published = _case_run(*s.base)
    scen = _truncated(data, published)
    clients = int(scen["workload"]["multiturn"]["num_clients"])
    bench = folder / "gpu_only_bench.txt"
    bench.write_text(bench_text(published, clients))
    scenario = folder / "gpu_only.yaml"
    scenario.write_text(yaml.safe_dump(scen, sort_keys=False))
    cal = folder / "calibration.yaml"
    cmd = ["calibrate", bench.name, "--scenario", scenario.name, "--out", cal.name, "--report"]
    done = subprocess.run(
        [sys.executable, "-m", "hicache_sim", *cmd], cwd=folder, capture_output=True, text=True, check=False
    )
    if done.returncode:
        raise SystemExit(f"hicache-sim {' '.join(cmd)} (in {folder}): exit {done.returncode}\n{done.stderr}")
    (folder / "calibrate.out").write_text(f"$ hicache-sim {' '.join(cmd)}\n{done.stdout}")
    report = json.loads((folder / "calibration_bench.json").read_text())
    return cal, report["fit"]


def _per_round(
    data: dict,
    published: dict,
    calibration: Path | None,
    read_gbps: float | None = None,
    knobs: dict[str, float] | None = None,
) -> dict[str, list[float]]:
    scen = _truncated(data, published)
    if calibration is not None:
        scen["hardware"]["calibration"] = str(calibration.resolve())
    if read_gbps is not None:
        scen["hardware"].setdefault("storage", {})["read_gbps"] = read_gbps
    scen["hardware"].update(knobs or {})
    out = simulate(_scenario(scen, fast=False, rounds=None), base_dir=ROOT)
    return round_metrics(out.requests) | {"loaded_tokens": loaded_tokens(out.requests)}


def loaded_tokens(df: pd.DataFrame) -> list[float]:
    """Per round, the mean tokens a finished request's hits brought into the GPU (host and storage
    hits): what the GPU-only run never does, against which the + store runs' deficit is read (MISSES)."""
    df = df[df["status"] == "finished"].assign(round=_rounds_of(df))
    loaded = df["host_hit_tokens"] + df["storage_hit_tokens"]
    return [float(x) for x in df.assign(loaded=loaded).groupby("round")["loaded"].mean()]


def run_set(s: PublicSet, out_dir: Path) -> tuple[list[RunResult], dict]:
    """Calibrate on the set's GPU-only run; every run of the set before and after."""
    cal, fit = calibrate_set(s, out_dir / "calibrated" / s.name)
    rows = []
    for role, (case_id, run) in [("calibrated on", s.base)] + [("predicted", p) for p in s.predict]:
        data, published = _case_run(case_id, run)
        pub = _derived(published)
        before = _per_round(data, pub, None)
        after = _per_round(data, pub, cal)
        rows.append(
            RunResult(
                s.name,
                case_id,
                run,
                role,
                [float(x) for x in pub["ttft_mean_s"]],
                before["ttft_mean_s"],
                after["ttft_mean_s"],
                hit_published=[float(x) for x in pub["hit_rate"]],
                hit_calibrated=after["hit_rate"],
                loaded_calibrated=after["loaded_tokens"],
            )
        )
    return rows, fit


#: Store read rates (GB/s) the diagnostic tries on the calibrated runs with a store (None: the preset's).
READ_GBPS = (None, 10.0, 5.0, 3.0)


def store_read_sensitivity(s: PublicSet, out_dir: Path, rows: list[RunResult]) -> list[dict]:
    """Diagnostic, never applied: the calibrated mean TTFT error of each predicted run with a store at
    other store read rates (what a GPU-only run cannot pin: it reads nothing from a store). ``rows``: the
    set's runs from :func:`run_set`, whose calibrated rounds are the preset read rate's (not run again)."""
    cal = out_dir / "calibrated" / s.name / "calibration.yaml"
    calibrated = {(r.case, r.run): r.calibrated for r in rows}
    out = []
    for case_id, run in s.predict:
        data, published = _case_run(case_id, run)
        if not data.get("cache", {}).get("storage_backend"):
            continue
        pub = _derived(published)
        mean = sum(pub["ttft_mean_s"]) / len(pub["ttft_mean_s"])
        errs = {}
        for bw in READ_GBPS:
            t = calibrated[case_id, run] if bw is None else _per_round(data, pub, cal, bw)["ttft_mean_s"]
            errs["preset" if bw is None else f"{bw:g}"] = sum(t) / len(t) / mean - 1.0
        out.append({"set": s.name, "run": f"{case_id}.{run}", "error_by_read_gbps": errs})
    return out


#: The split fit's knobs: ``linear_mfu`` (GEMMs) pinned by round 0, ``hbm_efficiency`` (under an attention
#: kernel rule, the roof that bounds the prefill attention kernel) by the mean; their search ranges.
SPLIT_KNOBS = {"linear_mfu": (0.05, 1.0), "hbm_efficiency": (0.05, 1.0)}
SPLIT_STEPS = 14  # bisection steps per knob, in log space: the range to 0.03% of a factor


def _attention_rule(data: dict) -> bool:
    """Does the run time its prefill attention by a kernel rule (``hardware.attention_backend`` with one)?"""
    from hicache_sim.scenario import Scenario, resolve
    from hicache_sim.sim import ComputeParams

    return bool(ComputeParams.from_resolved(resolve(Scenario.model_validate(data))).attn_tile_rows)


def _bisect(f, lo: float, hi: float) -> float:
    """The knob in [lo, hi] where the decreasing ``f`` (simulated / published - 1) crosses 0, in log space."""
    for _ in range(SPLIT_STEPS):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if f(mid) > 0 else (lo, mid)
    return (lo * hi) ** 0.5


def split_fit(s: PublicSet, rows: list[RunResult]) -> dict | None:
    """Diagnostic, never applied: the set's GPU-only run fitted on two of its figures instead of one.
    Round 0 (no cached prefix: GEMM work) pins ``linear_mfu``; the mean over the rounds (long cached
    prefixes: attention work) pins ``hbm_efficiency``, the roof of triton's prefill attention kernel,
    which the tool's one prefill lever (the efficiencies together) moves only once the kernel's FLOPs roof
    overtakes it. Then every run of the
    set is predicted with both. Only for sets whose runs time attention by a kernel rule (None otherwise).
    The question it answers: is a predicted run's miss the one-lever fit's shape, or something the store
    runs have that the GPU-only run has not?"""
    data, published = _case_run(*s.base)
    if not _attention_rule(data):
        return None
    pub = _derived(published)
    target = [float(x) for x in pub["ttft_mean_s"]]

    def ttft(knobs: dict[str, float]) -> list[float]:
        return _per_round(data, pub, None, knobs=knobs)["ttft_mean_s"]

    def linear_for(hbm: float) -> float:
        return _bisect(
            lambda v: ttft({"linear_mfu": v, "hbm_efficiency": hbm})[0] / target[0] - 1, *SPLIT_KNOBS["linear_mfu"]
        )

    def mean_error(hbm: float) -> float:
        return sum(ttft({"linear_mfu": linear_for(hbm), "hbm_efficiency": hbm})) / sum(target) - 1

    hbm = _bisect(mean_error, *SPLIT_KNOBS["hbm_efficiency"])
    knobs = {"linear_mfu": linear_for(hbm), "hbm_efficiency": hbm}
    tool = {(r.case, r.run): r.err_calibrated for r in rows}
    runs = []
    for case_id, run in [s.base, *s.predict]:
        d, p = _case_run(case_id, run)
        pp = _derived(p)
        t = _per_round(d, pp, None, knobs=knobs)["ttft_mean_s"]
        pubs = [float(x) for x in pp["ttft_mean_s"]]
        runs.append(
            {
                "run": f"{case_id}.{run}",
                "err_tool_fit": tool[case_id, run],
                "err_split_fit": sum(t) / sum(pubs) - 1.0,
                "round0_err_split_fit": t[0] / pubs[0] - 1.0,
                "round_err_split_fit": _median_abs(t, pubs),
            }
        )
    return {"set": s.name, "knobs": {k: round(v, 6) for k, v in knobs.items()}, "runs": runs}


def split_table(splits: list[dict]) -> str:
    """Markdown: the split fit's knobs and each run's calibrated mean TTFT error under both fits."""
    if not splits:
        return ""
    out = [
        "",
        "## Diagnostic, not applied: the GPU-only run fitted on round 0 and on the mean",
        "",
        "Round 0 pins `linear_mfu`, the mean `hbm_efficiency` (the roof of triton's prefill attention kernel, "
        "which the tool's prefill lever moves less than the GEMMs); presets otherwise.",
        "",
        "| set | run | knobs | tool's fit: error | split fit: error | round 0 | per-round median abs. error |",
        "|---|---|---|---|---|---|---|",
    ]
    for sp in splits:
        knobs = ", ".join(f"{k} {v:.3f}" for k, v in sp["knobs"].items())
        for r in sp["runs"]:
            out.append(
                f"| {sp['set']} | {r['run']} | {knobs} | {_pct(r['err_tool_fit'])} | {_pct(r['err_split_fit'])} | "
                f"{_pct(r['round0_err_split_fit'])} | {100 * r['round_err_split_fit']:.1f}% |"
            )
    return "\n".join(out) + "\n"


def _pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def _verdict(r: RunResult) -> str:
    if r.role != "predicted":
        return "fit target"
    e = abs(r.err_calibrated)
    return "within 15%" if e <= GOAL else "within 25%" if e <= HELD else "MISS"


def table(rows: list[RunResult], fits: dict[str, dict]) -> str:
    """Markdown: per run the mean TTFT before and after, then per round; then each fit."""
    out = [
        "| set | run | role | published mean TTFT (s) | presets | error | calibrated | error | 25% / 15% "
        "| per-round median abs. error, presets -> calibrated |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r.set} | {r.label} | {r.role} | {r.mean_published:.3f} | {r.mean_preset:.3f} | "
            f"{_pct(r.err_preset)} | {r.mean_calibrated:.3f} | {_pct(r.err_calibrated)} | {_verdict(r)} | "
            f"{100 * r.round_err_preset:.1f}% -> {100 * r.round_err_calibrated:.1f}% |"
        )
    out += ["", "## Per round (mean TTFT, s: published / presets / calibrated, calibrated error)", ""]
    out += [
        "| run | round | published | presets | calibrated | error | hit rate published / calibrated "
        "| tokens loaded per request (calibrated) |"
    ]
    out += ["|---|---|---|---|---|---|---|---|"]
    for r in rows:
        for i, (p, b, a) in enumerate(zip(r.published, r.preset, r.calibrated, strict=True)):
            out.append(
                f"| {r.label} | {i} | {p:.2f} | {b:.3f} | {a:.3f} | {_pct(a / p - 1)} | "
                f"{r.hit_published[i]:.3f} / {r.hit_calibrated[i]:.3f} | {r.loaded_calibrated[i]:.0f} |"
            )
    out += ["", "## The fits (`hicache-sim calibrate` on each GPU-only run)", ""]
    for name, fit in fits.items():
        levers = "; ".join(
            f"{g}: {lv} x {fit['factors'][g]:.4f} on {fit['targets'][g]}" for g, lv in fit["levers"].items()
        )
        knobs = ", ".join(f"{k} {fit['start'][k]:.4g} -> {v:.4g}" for k, v in fit["knobs"].items())
        bound = f"; at its bound: {', '.join(fit['at_bound'])}" if fit["at_bound"] else ""
        out.append(f"- **{name}**: {levers or 'nothing fitted'} ({knobs}){bound}; {fit['runs']} runs")
    return "\n".join(out) + "\n"


def diagnostic_table(diag: list[dict]) -> str:
    """Markdown: calibrated mean TTFT error of the store runs at other store read rates."""
    if not diag:
        return ""
    keys = list(diag[0]["error_by_read_gbps"])
    out = [
        "",
        "## Diagnostic, not applied: the store's read rate (calibrated mean TTFT error)",
        "",
        "| run | " + " | ".join(k if k == "preset" else f"{k} GB/s" for k in keys) + " |",
        "|---|" + "---|" * len(keys),
    ]
    for d in diag:
        out.append(f"| {d['run']} | " + " | ".join(_pct(d["error_by_read_gbps"][k]) for k in keys) + " |")
    return "\n".join(out) + "\n"


def write_results(
    rows: list[RunResult],
    fits: dict[str, dict],
    out_dir: Path,
    command: str,
    diag: list[dict] | None = None,
    splits: list[dict] | None = None,
) -> None:
    """``calibrated.md`` and ``calibrated.json`` in ``out_dir``, each naming the command that made it."""
    head = (
        "# Calibrated on the GPU-only run, predicting the others\n\n"
        f"Made by `{command}` (sets, inputs and mechanisms: `validation/README.md`, section "
        "'Calibrated on the GPU-only run'; each fit's input, scenario, calibration file and report under "
        "`results/validation/calibrated/<set>/`). Mean TTFT is over the published rounds.\n\n"
    )
    (out_dir / "calibrated.md").write_text(
        head + table(rows, fits) + diagnostic_table(diag or []) + split_table(splits or [])
    )
    doc = {"command": command, "held": HELD, "goal": GOAL, "runs": [asdict(r) for r in rows], "fits": fits}
    doc["store_read_diagnostic"] = diag or []
    doc["split_fit_diagnostic"] = splits or []
    (out_dir / "calibrated.json").write_text(json.dumps(doc, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    """Run the sets named (default: all), write the table; exit 1 if a held run misses."""
    names = [s.name for s in SETS]
    ap = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    ap.add_argument("sets", nargs="*", help=f"sets (default: all): {', '.join(names)}")
    ap.add_argument("--out", default=str(OUT_DIR), help="result folder (default: results/validation)")
    a = ap.parse_args(argv)
    unknown = set(a.sets) - set(names)
    if unknown:
        ap.error(f"unknown set(s): {', '.join(sorted(unknown))}; known: {', '.join(names)}")
    out_dir = Path(a.out)
    rows: list[RunResult] = []
    fits: dict[str, dict] = {}
    diag: list[dict] = []
    splits: list[dict] = []
    for s in SETS:
        if a.sets and s.name not in a.sets:
            continue
        print(f"{s.name}: calibrating on {s.base[0]} {s.base[1]}".rstrip(), file=sys.stderr)
        got, fits[s.name] = run_set(s, out_dir)
        rows.extend(got)
        diag.extend(store_read_sensitivity(s, out_dir, got))
        sp = split_fit(s, got)
        if sp is not None:
            splits.append(sp)
    write_results(rows, fits, out_dir, " ".join([COMMAND, *a.sets]), diag, splits)
    print(table(rows, fits) + diagnostic_table(diag) + split_table(splits))
    held = {(s.name, lab) for s in SETS for lab in s.held}
    missed = [r for r in rows if (r.set, r.label) in held and abs(r.err_calibrated) > HELD]
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
