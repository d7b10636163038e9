"""Benchmark: the JSONL trace loader's CPU on the default scenario's trace (issue 12), both ways it
serves requests, in one process so that both see the same machine: a trace of at most
``HELD_PAGE_KEYS`` page keys keeps the requests its checking pass built (each line parsed once); a
longer one is read again line by line when each request is built (each line parsed twice), which is
forced here with ``HELD_PAGE_KEYS = 0``. Each repeat opens the trace and reads every request once, in
order, as a run does; CPU by ``time.process_time``, median (min-max); lines parsed counted.

    python bench/bench_trace_loader.py --repeat 9
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's package

import hicache_sim.workloads.traces as traces

TRACE = "mooncake/conversation_trace.jsonl"
PAGE_SIZE = 512


def once(path: Path) -> tuple[float, float, int]:
    """(CPU s of the checking pass, CPU s reading every request, lines parsed)."""
    parsed = [0]
    real = traces._object

    def counting(*args):
        parsed[0] += 1
        return real(*args)

    traces._object = counting
    try:
        t0 = time.process_time()
        reqs = traces.open_mooncake(path, PAGE_SIZE)
        t1 = time.process_time()
        for _ in reqs:
            pass
        t2 = time.process_time()
    finally:
        traces._object = real
    return t1 - t0, t2 - t1, parsed[0]


def fmt(v: list[float]) -> str:
    return f"{statistics.median(v) * 1000:.1f} ({min(v) * 1000:.1f}-{max(v) * 1000:.1f})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args(argv)
    path = traces.vendored_trace(TRACE)
    limit = traces.HELD_PAGE_KEYS
    rows = {"held (default)": limit, "read again (HELD_PAGE_KEYS = 0)": 0}
    res: dict[str, list[tuple[float, float, int]]] = {k: [] for k in rows}
    for _ in range(args.repeat):  # in turns: both ways see the same load
        for name, keys in rows.items():
            traces.HELD_PAGE_KEYS = keys
            res[name].append(once(path))
    traces.HELD_PAGE_KEYS = limit
    print(f"{TRACE}, page size {PAGE_SIZE}, {args.repeat} repeats; CPU ms, median (min-max)\n")
    print("| requests served | check pass | reading every request | total | lines parsed |\n|---|---|---|---|---|")
    for name, r in res.items():
        print(
            f"| {name} | {fmt([a for a, _, _ in r])} | {fmt([b for _, b, _ in r])} | "
            f"{fmt([a + b for a, b, _ in r])} | {r[0][2]:,} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
