"""Speed of the timed world on the Mooncake conversation trace (12,031 requests; Llama-3.1-8B on one
H200, host ratio 2, write_through: ``scenarios/mooncake_conversation.yaml``).

Runs the trace once, twice and four times in a row (each copy with fresh request ids and its times
shifted past the previous copy) to show that the cost per request stays flat, plus one run at half
the arrival rate. Prints a table and writes it as markdown to ``results/bench/timed.md``.

Command:  python bench/bench_timed.py [--out results/bench/timed.md] [--repeats 1,2,4] [--trials N] [--profile]
(``--trials N`` keeps the fastest of N runs per row: the machine is shared, wall times are noisy.)
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import gc
import io
import platform
import pstats
import statistics
import sys
import time
from pathlib import Path

from md_table import markdown_table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's hicache_sim, not an installed one

from hicache_sim.scenario import load_scenario, resolve
from hicache_sim.sim import World
from hicache_sim.workloads.build import build_workload
from hicache_sim.workloads.synthetic import Workload

SCENARIO = "builtin:mooncake_conversation"
BUDGET_S = 60.0


def repeated(workload: Workload, times: int) -> Workload:
    """The trace ``times`` times in a row: copy k has ids suffixed ``~k`` and times shifted by k spans."""
    reqs = workload.requests
    span = max(r.arrival_s for r in reqs) + 1.0
    out = []
    for k in range(times):
        out.extend(dataclasses.replace(r, rid=f"{r.rid}~{k}", arrival_s=r.arrival_s + k * span) for r in reqs)
    return dataclasses.replace(workload, requests=out)


def one_run(label: str, times: int, overrides: list[str], profile: bool = False, gc_off: bool = False) -> dict:
    # The scenario file stretches arrivals 4x; the benchmark runs the trace at its own rate unless told.
    sc = load_scenario(SCENARIO, ["workload.trace.time_scale=1.0", *overrides])
    r = resolve(sc)
    wl = repeated(build_workload(sc, r.cache.page_size), times)
    prof = cProfile.Profile() if profile else None
    if gc_off:
        gc.disable()
    t0, c0 = time.perf_counter(), time.process_time()
    if prof:
        prof.enable()
    try:
        world = World(r, wl)
        res = world.run()
    finally:
        if prof:
            prof.disable()
        wall = time.perf_counter() - t0
        cpu = time.process_time() - c0
        gc.enable()
    done = [x for x in res.requests if x["status"] == "finished"]
    prompt = sum(x["input_tokens"] for x in done) or 1
    row = {
        "run": label,
        "requests": len(wl.requests),
        "finished": len(done),
        "wall_s": wall,
        "sim_s": res.sim_time_s,
        "sim_per_wall": res.sim_time_s / wall,
        "req_per_s": len(wl.requests) / wall,
        "cpu_s": cpu,
        "req_per_cpu_s": len(wl.requests) / cpu,
        "us_per_req": wall / len(wl.requests) * 1e6,
        "events": res.counters["events"],
        "simpy_events": world.engine_events,
        "merged_steps": world.scheduler.merged_steps,
        "steps": res.counters["steps"],
        "hit_device": sum(x["device_hit_tokens"] for x in done) / prompt,
        "hit_host": sum(x["host_hit_tokens"] for x in done) / prompt,
        "ttft_p50_s": statistics.median(x["ttft_s"] for x in done),
        "gpu_busy": res.counters["busy_s"] / res.sim_time_s,
        "span_s": max(q.arrival_s for q in wl.requests) - min(q.arrival_s for q in wl.requests),
        "mean_input": statistics.mean(q.input_tokens for q in wl.requests),
    }
    row["prefill_demand"] = sum(q.input_tokens for q in wl.requests) / max(row["span_s"], 1e-9)
    if prof:
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(12)
        row["profile"] = s.getvalue()
    return row


COLUMNS = [
    ("run", "{}"),
    ("requests", "{:,}"),
    ("finished", "{:,}"),
    ("wall_s", "{:.2f}"),
    ("sim_s", "{:,.0f}"),
    ("sim_per_wall", "{:,.0f}"),
    ("req_per_s", "{:,.0f}"),
    ("cpu_s", "{:.2f}"),
    ("req_per_cpu_s", "{:,.0f}"),
    ("us_per_req", "{:.0f}"),
    ("events", "{:,}"),
    ("simpy_events", "{:,}"),
    ("steps", "{:,}"),
    ("gpu_busy", "{:.0%}"),
    ("hit_device", "{:.4f}"),
    ("hit_host", "{:.4f}"),
    ("ttft_p50_s", "{:,.2f}"),
]


def table(rows: list[dict]) -> str:
    return markdown_table(rows, COLUMNS)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/bench/timed.md")
    ap.add_argument("--repeats", default="1,2,4")
    ap.add_argument("--trials", type=int, default=1, help="runs per row; the fastest is reported")
    ap.add_argument(
        "--gc-check",
        action="store_true",
        help="also time the smallest and largest repeat with the garbage collector off",
    )
    ap.add_argument("--profile", action="store_true", help="cProfile a 1x run and append the top functions")
    args = ap.parse_args(argv)
    rows = []
    print(table([]).splitlines()[0], flush=True)

    def best(label: str, times: int, overrides: list[str], gc_off: bool = False) -> dict:
        runs = (one_run(label, times, overrides, gc_off=gc_off) for _ in range(max(1, args.trials)))
        return min(runs, key=lambda r: r["wall_s"])

    for k in (int(x) for x in args.repeats.split(",")):
        rows.append(best(f"{k}x trace", k, []))
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    rows.append(best("1x, 1/4 rate", 1, ["workload.trace.time_scale=4.0"]))
    print(table(rows[-1:]).splitlines()[-1], flush=True)
    repeats = [int(x) for x in args.repeats.split(",")]
    gc_rows = []
    if args.gc_check:
        for k in (min(repeats), max(repeats)):
            gc_rows.append(best(f"{k}x trace, gc off", k, [], gc_off=True))
            print(table(gc_rows[-1:]).splitlines()[-1], flush=True)
    rows += gc_rows
    full = rows[0]
    light = next(r for r in rows if r["run"] == "1x, 1/4 rate")
    profile = one_run("profile", 1, [], profile=True)["profile"] if args.profile else ""
    flat = [r["us_per_req"] / full["us_per_req"] for r in rows if r["run"].endswith("x trace")]
    gc_costs = ", ".join("{:.0f}".format(r["us_per_req"]) for r in gc_rows)
    gc_runs = ", ".join(r["run"].split(",")[0] for r in gc_rows)
    gc_note = f"; with the collector off: {gc_costs} us per request ({gc_runs})." if gc_rows else "."
    cmd = "python bench/bench_timed.py" + ("" if argv is None else " " + " ".join(argv))
    if argv is None and len(sys.argv) > 1:
        cmd = "python bench/bench_timed.py " + " ".join(sys.argv[1:])
    lines = [
        "# Timed world speed: Mooncake conversation trace",
        "",
        f"Command: `{cmd}`",
        "",
        f"Scenario `{SCENARIO}` (Llama-3.1-8B, one H200, page 64, host ratio 2, write_through, chunked prefill "
        "8192); wall time measured with `time.perf_counter` around `World.run` only (trace parsing excluded). "
        f"Machine: {platform.processor() or platform.machine()}, Python {platform.python_version()}.",
        "",
        table(rows),
        "",
        f"- 1x trace: {full['wall_s']:.1f} s wall (budget {BUDGET_S:.0f} s), {full['sim_per_wall']:,.0f} simulated "
        f"seconds per wall second, {full['req_per_s']:,.0f} requests per wall second.",
        f"- Cost per request relative to 1x: {', '.join(f'{x:.2f}' for x in flat)} "
        f"({args.repeats.replace(',', 'x, ')}x), best of {max(1, args.trials)} run(s) each. The longer runs also "
        "carry a proportionally longer waiting queue (the trace overloads the GPU, see below) and a larger heap "
        "for the garbage collector (every request record and transfer is kept)" + gc_note,
        f"- Load: the trace is not trivial for one H200. At its own arrival rate the GPU is busy "
        f"{full['gpu_busy']:.0%} of the {full['sim_s']:,.0f} simulated seconds (the trace spans "
        f"{full['span_s']:,.0f} s): prompts average {full['mean_input']:,.0f} tokens, about "
        f"{full['prefill_demand']:,.0f} prefill tokens/s, and decode steps read the whole batch's KV, so the "
        f"waiting queue and TTFT (p50 {full['ttft_p50_s']:,.0f} s) grow over the run. At a quarter of the "
        f"rate the GPU is busy {light['gpu_busy']:.0%} and TTFT p50 is {light['ttft_p50_s']:.2f} s.",
        "- `sim_per_wall`: simulated seconds per wall second; `req_per_s`: requests simulated per wall second; "
        "`cpu_s`, `req_per_cpu_s`: the same run in CPU time of this process (steadier on a shared machine); "
        "`events`: SimPy events of one timeout per step (the counter in summary.json); `simpy_events`: events "
        "SimPy actually processed (runs of quiet decode steps advance in one timeout, see "
        "`Scheduler._decode_run`); `steps`: scheduler steps (prefill batches + decode steps).",
    ]
    if profile:
        lines += [
            "",
            "cProfile of a separate 1x run (top functions by own time; profiling slows it down):",
            "",
            "```",
            profile.strip(),
            "```",
        ]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    return 0 if full["wall_s"] < BUDGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
