"""Benchmark: sweep throughput (issue 12 target 4), points per minute with 1 and 2 local worker
processes and on a Dask LocalCluster, and a 1,000-point sweep over Dask interrupted and resumed.

Throughput grid: the default scenario (whole Mooncake conversation trace, instant mode), host ratio
x host-eviction rule, each configuration into a fresh folder (nothing resumed). ``--uncached`` also
times one worker with the per-process workload cache bypassed (the trace parsed for every point, as
before the cache), to show what the cache saves.

Resume: a 1,000-point grid on a short trace prefix run on a LocalCluster, stopped after ``--stop-after``
points (as a killed client would be), then rerun into the same folder: only the missing points run.

    python bench/bench_sweep.py --output results/bench/sweep.md
    python bench/bench_sweep.py --resume-points 1000 --stop-after 400 --output results/bench/sweep.md
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib
import os
import platform
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

# This checkout's package, not whichever one is installed (a script's sys.path starts at bench/); the
# LocalCluster's worker processes inherit it through PYTHONPATH.
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))

from hicache_sim.scenario import load_scenario_data  # noqa: E402
from hicache_sim.workloads.build import build_workload  # noqa: E402

sweep = importlib.import_module("hicache_sim.sweep")  # the module, not the API's sweep function

RATIOS = [0.5, 1.0, 2.0, 4.0]
RULES = ["evicted_only", "reclaim_mirrors", "boundary"]


class Stop(Exception):
    """Raised from the progress callback: the client goes away mid-sweep."""


def throughput_base() -> dict:
    data = load_scenario_data("builtin:default")
    return {**data, "sweep": {"cache.host_ratio": RATIOS, "cache.host_eviction": RULES}}


def resume_base(points: int) -> dict:
    """``points`` host ratios on the default scenario's first 40 requests (L1 400 pages)."""
    data = load_scenario_data("builtin:default")
    data["workload"] = {**data["workload"], "trace": {**data["workload"]["trace"], "limit": 40}}
    data["cache"] = {**data["cache"], "device_tokens": 512 * 400, "host_alignment": "down"}
    return {**data, "sweep": {"cache.host_ratio": [round(0.25 + 0.005 * i, 3) for i in range(points)]}}


def cpu_s() -> float:
    """CPU seconds of this process and its reaped children (local worker processes, once the pool
    shuts down; not a Dask cluster's workers)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


#: Busy cores of the local configurations: CPU seconds / wall seconds, per sweep.
CORES: dict[str, list[float]] = {}


def timed_sweep(base: dict, folder: Path, label: str = "", **kw) -> tuple[float, int]:
    c0, t0 = cpu_s(), time.perf_counter()
    res = sweep.run_sweep(base, "builtin:default", folder, **kw)
    wall = time.perf_counter() - t0
    if "dask_scheduler" not in kw:
        CORES.setdefault(label, []).append((cpu_s() - c0) / wall)
    return wall, res.ran


def uncached(sc, page_size, base_dir):
    return build_workload(sc, page_size, base_dir)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=1, help="sweeps per configuration (median reported)")
    ap.add_argument("--no-uncached", dest="uncached", action="store_false", help="skip the cache-bypassed run")
    ap.add_argument("--resume-points", type=int, default=1000, help="points of the resume demonstration (0: skip)")
    ap.add_argument("--stop-after", type=int, default=400, help="points saved before the first client stops")
    ap.add_argument("--dask-workers", type=int, default=2)
    ap.add_argument("--output", type=Path)
    args = ap.parse_args(argv)
    from dask.distributed import LocalCluster

    tmp = Path(tempfile.mkdtemp(prefix="bench_sweep_"))
    load0 = os.getloadavg()
    base = throughput_base()
    n = len(RATIOS) * len(RULES)
    rows: list[tuple[str, list[float]]] = []
    try:
        t0 = time.perf_counter()
        cluster = LocalCluster(
            n_workers=args.dask_workers, threads_per_worker=1, processes=True, dashboard_address=None
        )
        cluster_start = time.perf_counter() - t0
        configs: list[tuple[str, dict]] = [
            ("1 worker", {"workers": 1}),
            ("2 workers", {"workers": 2}),
            (f"Dask LocalCluster, {args.dask_workers} workers", {"dask_scheduler": cluster.scheduler_address}),
        ]
        for label, kw in configs:
            walls = []
            for i in range(args.repeat):
                wall, ran = timed_sweep(base, tmp / f"{label[:8].strip()}{i}".replace(" ", "_"), label, **kw)
                assert ran == n
                walls.append(wall)
            rows.append((label, walls))
        if args.uncached:
            real = sweep.cached_workload
            sweep.cached_workload = uncached
            try:
                label = "1 worker, trace parsed per point (cache bypassed)"
                walls = [timed_sweep(base, tmp / f"uncached{i}", label, workers=1)[0] for i in range(args.repeat)]
            finally:
                sweep.cached_workload = real
            rows.append((label, walls))
        resume_lines: list[str] = []
        if args.resume_points:
            rb = resume_base(args.resume_points)
            folder = tmp / "resume"
            saved = 0

            def stop_after() -> None:
                nonlocal saved
                saved += 1
                if saved >= args.stop_after:
                    raise Stop

            t0 = time.perf_counter()
            with contextlib.suppress(Stop):
                sweep.run_sweep(
                    rb, "builtin:default", folder, dask_scheduler=cluster.scheduler_address, on_point=stop_after
                )
            first = time.perf_counter() - t0
            done = len(list((folder / "points").glob("*.json")))
            t0 = time.perf_counter()
            res = sweep.run_sweep(rb, "builtin:default", folder, dask_scheduler=cluster.scheduler_address)
            second = time.perf_counter() - t0
            total = res.ran + res.skipped
            assert total == args.resume_points and len(res.table) == total and res.skipped == done
            resume_lines = [
                "",
                f"## {total:,}-point sweep over Dask, interrupted and resumed",
                "",
                f"Grid: default scenario on its first 40 requests (L1 400 pages), {total} host ratios (0.25 to "
                f"{0.25 + 0.005 * (total - 1):g}), on the same LocalCluster ({args.dask_workers} workers). The "
                f"client stopped after {args.stop_after} points were saved ({first:.1f} s; {done} point files on "
                f"disk, the futures in flight cancelled). The rerun into the same folder ran {res.ran} points and "
                f"reused {res.skipped} ({second:.1f} s, {res.ran / second * 60:,.0f} points/min); sweep.parquet has "
                f"{len(res.table)} rows.",
            ]
        cluster.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    load1 = os.getloadavg()
    one = statistics.median(rows[0][1])
    lines = [
        "# Sweep throughput (issue 12, target 4)",
        "",
        "```",
        "python bench/bench_sweep.py"
        + (f" --repeat {args.repeat}" if args.repeat != 1 else "")
        + (f" --resume-points {args.resume_points}" if args.resume_points != 1000 else "")
        + (f" --stop-after {args.stop_after}" if args.stop_after != 400 else "")
        + (f" --output {args.output}" if args.output else ""),
        "```",
        "",
        f"- date: {dt.datetime.now().isoformat(timespec='seconds')}",
        f"- machine: {platform.machine()}, nproc {os.cpu_count()}; Python {platform.python_version()}, "
        f"{platform.system()}; load average {load0[0]:.2f} at start, {load1[0]:.2f} at end",
        f"- grid: default scenario (Mooncake conversation trace, 12,031 requests, instant), host ratio {RATIOS} x "
        f"host_eviction {RULES} = {n} points, each configuration into a fresh folder; wall time of run_sweep "
        f"(plan, points, table), {args.repeat} sweep(s) per configuration, median (min-max)",
        f"- LocalCluster start (not in the figures): {cluster_start:.1f} s",
        "",
        "| workers | wall s | points/min | speed-up vs 1 worker | busy cores (CPU s / wall s) |",
        "|---|---|---|---|---|",
    ]
    for label, walls in rows:
        med = statistics.median(walls)
        lines.append(
            f"| {label} | {med:.1f} ({min(walls):.1f}-{max(walls):.1f}) | {n / med * 60:.1f} | {one / med:.2f}x "
            f"| {f'{statistics.median(CORES[label]):.2f}' if label in CORES else 'n/a (cluster processes)'} |"
        )
    text = "\n".join(lines + resume_lines) + "\n"
    print(text)
    if args.output:
        args.output.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
