"""Long traces: wall time, CPU time and peak memory of one run of the Mooncake conversation scenario
(quarter rate, ``scenarios/mooncake_conversation.yaml``) over N requests made by ``long_trace.py``
(the trace repeated with remapped hash ids and shifted times), in instant and timed mode.

Each run is a fresh process (peak RSS is the process's ``ru_maxrss``) doing what ``hicache-sim run``
does after parsing: simulate through the runner (timed rows spooled to parquet, summary from the
read-back table), then write the result folder without figures. Prints a table and writes markdown.

Command:  python bench/bench_long.py --runs instant:1000000,timed:12031,timed:50000,timed:100000
          [--out results/bench/long.md]
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from md_table import markdown_table

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def one(mode: str, n: int) -> dict:
    """One run in this process: the row of the table."""
    sys.path[:0] = [str(ROOT), str(HERE)]  # this checkout's hicache_sim, not an installed one
    from long_trace import long_workload

    import hicache_sim
    from hicache_sim.runner import run_instant_scenario, run_timed_scenario, write_outputs

    overrides = [f"mode={mode}"]
    r, wl = long_workload(n, overrides)
    runner = run_timed_scenario if mode == "timed" else run_instant_scenario
    t0, c0 = time.perf_counter(), time.process_time()
    out = runner(r, wl, check_invariants=False, progress=None, record_transfers=False)
    t_sim = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        write_outputs(out, Path(tmp) / "run", figures=False)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    s = out.summary
    row = {
        "mode": mode,
        "requests": n,
        "wall_s": wall,
        "sim_wall_s": t_sim,
        "cpu_s": cpu,
        "req_per_wall_s": n / wall,
        "req_per_cpu_s": n / cpu,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "hit_total": s["hit_rate"]["total"],
        "finished": s["requests_finished"],
        "code": str(Path(hicache_sim.__file__).parent.parent),
    }
    if mode == "timed":
        row["ttft_p50_s"] = s["ttft_s"]["p50"]
        row["gpu_busy"] = s["counters"]["busy_s"] / s["sim_time_s"]
    return row


COLUMNS = [
    ("mode", "{}"),
    ("requests", "{:,}"),
    ("wall_s", "{:.1f}"),
    ("cpu_s", "{:.1f}"),
    ("req_per_wall_s", "{:,.0f}"),
    ("req_per_cpu_s", "{:,.0f}"),
    ("peak_rss_mb", "{:,.0f}"),
    ("hit_total", "{:.4f}"),
]


def table(rows: list[dict]) -> str:
    return markdown_table(rows, COLUMNS)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default="instant:1000000,timed:12031,timed:50000,timed:100000")
    ap.add_argument("--out", default="results/bench/long.md")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        mode, n = args.one.split(":")
        print(json.dumps(one(mode, int(n))))
        return 0
    rows = []
    for spec in args.runs.split(","):
        p = subprocess.run(
            [sys.executable, __file__, "--one", spec], capture_output=True, text=True, check=True, cwd=Path.cwd()
        )
        rows.append(json.loads(p.stdout.strip().splitlines()[-1]))
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    cmd = "python bench/bench_long.py " + " ".join(sys.argv[1:] if argv is None else argv)
    lines = [
        "# Long traces: time and peak memory",
        "",
        f"Command: `{cmd.strip()}`",
        "",
        "Scenario `builtin:mooncake_conversation` (quarter rate; `mode` overridden per row) over the first N "
        "requests of `bench/long_trace.py`'s repeated trace. Each row is a fresh process: simulate through "
        "the runner and write the result folder without figures (trace parsing and figures excluded); "
        f"peak RSS is the process's. Machine: {platform.processor() or platform.machine()}, Python "
        f"{platform.python_version()}, 2 cores shared with other jobs (wall times are noisy: CPU time is the "
        f"steadier figure). Code: `{rows[0]['code']}`.",
        "",
        table(rows),
    ]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
