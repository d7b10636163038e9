"""Benchmark: whole ``hicache-sim`` processes (issue 12 target 1): ``--help`` and ``validate`` (target
< 0.3 s), ``run`` on the default scenario with and without figures, against the exact stack-distance
oracle run as a script on the same trace (bench/stack_distance_oracle.py; target: run within 1.2x).

Each command is a fresh interpreter (``python -m hicache_sim``: this checkout's code), run in turns so
that every command sees the same machine load; wall and CPU (user + system of the child) are reported
as medians with min and max. The import cost of ``hicache_sim.cli`` comes from ``python -X importtime``.

    python bench/bench_cli.py                                   # print the table
    python bench/bench_cli.py --repeat 7 --output results/bench/cli.md
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
HELP_TARGET_S = 0.3
RUN_RATIO_TARGET = 1.2


def commands(tmp: Path) -> dict[str, list[str]]:
    cli = [PY, "-m", "hicache_sim"]
    return {
        "python -c pass": [PY, "-c", "pass"],
        "hicache-sim --help": [*cli, "--help"],
        "hicache-sim validate builtin:default": [*cli, "validate", "builtin:default"],
        "hicache-sim run (figures)": [*cli, "run", "--out", str(tmp / "run")],
        "hicache-sim run --no-figures": [*cli, "run", "--no-figures", "--out", str(tmp / "run_nofig")],
        "stack-distance oracle": [PY, str(ROOT / "bench" / "stack_distance_oracle.py")],
    }


def time_once(cmd: list[str]) -> tuple[float, float]:
    """(wall s, CPU s) of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def cli_import_s() -> float:
    """Cumulative import time of ``hicache_sim.cli`` (seconds) from ``python -X importtime``."""
    out = subprocess.run(
        [PY, "-X", "importtime", "-c", "import hicache_sim.cli"], cwd=ROOT, capture_output=True, text=True
    )
    for line in out.stderr.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) == 3 and parts[2] == "hicache_sim.cli":
            return int(parts[1]) / 1e6
    raise RuntimeError("hicache_sim.cli not in the importtime output")


def fmt(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="runs of each command (median reported)")
    ap.add_argument("--output", type=Path, help="write the markdown table here")
    args = ap.parse_args(argv)
    load0 = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="bench_cli_"))
    try:
        cmds = commands(tmp)
        for cmd in cmds.values():  # warm the file cache and write every result folder once
            time_once(cmd)
        walls: dict[str, list[float]] = {k: [] for k in cmds}
        cpus: dict[str, list[float]] = {k: [] for k in cmds}
        for _ in range(args.repeat):
            for name, cmd in cmds.items():
                w, c = time_once(cmd)
                walls[name].append(w)
                cpus[name].append(c)
        imports = [cli_import_s() for _ in range(args.repeat)]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    load1 = os.getloadavg()
    med = {k: statistics.median(v) for k, v in walls.items()}
    cmed = {k: statistics.median(v) for k, v in cpus.items()}
    oracle = "stack-distance oracle"
    lines = [
        "# CLI start-up and `run` against the stack-distance oracle (issue 12, target 1)",
        "",
        "```",
        f"python bench/bench_cli.py --repeat {args.repeat}" + (f" --output {args.output}" if args.output else ""),
        "```",
        "",
        f"- date: {dt.datetime.now().isoformat(timespec='seconds')}",
        f"- machine: {platform.machine()}, nproc {os.cpu_count()}; Python {platform.python_version()}, "
        f"{platform.system()}; load average {load0[0]:.2f} at start, {load1[0]:.2f} at end (a shared machine: "
        "CPU seconds are the steadier figure)",
        "- each command a fresh process from the repository root (`python -m hicache_sim` is the "
        f"`hicache-sim` script of this checkout), {args.repeat} runs each, in turns; median (min-max)",
        "- `run`: the default scenario (Mooncake conversation trace, 12,031 requests, instant mode); "
        "the oracle: tests/lru_oracle.py on the same trace at the same device capacity (6,000 pages), "
        "trace parsed by the same loader",
        "",
        "| command | wall s | CPU s |",
        "|---|---|---|",
    ]
    lines += [f"| `{k}` | {fmt(walls[k])} | {fmt(cpus[k])} |" for k in cmds]
    run, nofig = "hicache-sim run (figures)", "hicache-sim run --no-figures"
    help_s, val_s = med["hicache-sim --help"], med["hicache-sim validate builtin:default"]
    lines += [
        "",
        f"- `import hicache_sim.cli` (python -X importtime, cumulative): median {statistics.median(imports):.3f} s",
        f"- `--help` {help_s:.3f} s and `validate` {val_s:.3f} s wall (target < {HELP_TARGET_S} s): "
        f"{'met' if max(help_s, val_s) < HELP_TARGET_S else 'not met'}",
        f"- figures (run minus run --no-figures): {med[run] - med[nofig]:.3f} s wall, "
        f"{cmed[run] - cmed[nofig]:.3f} s CPU",
        f"- run / oracle, wall: {med[run] / med[oracle]:.2f}x with figures, {med[nofig] / med[oracle]:.2f}x "
        f"without (target {RUN_RATIO_TARGET}x); CPU: {cmed[run] / cmed[oracle]:.2f}x and "
        f"{cmed[nofig] / cmed[oracle]:.2f}x",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.output:
        args.output.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
