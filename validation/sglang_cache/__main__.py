"""``python -m validation.sglang_cache install | list | run | table``: the SGLang conformance driver.

``install`` makes the driver's own virtual env (never the project's environment), ``run`` starts
one driver process per row inside it and writes the figures to ``targets.json``, ``table`` prints
them beside the core's (the document's table).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .rows import ROOT, TRACES, all_rows, row_by_id, run_core

HERE = Path(__file__).resolve().parent
VENV = HERE / ".venv"
TARGETS = HERE / "targets.json"
REQUIREMENTS = HERE / "requirements.txt"
SGLANG_VERSION = "0.5.23"
TORCH_VERSION = "2.13.0"


def venv_python(venv: Path) -> Path:
    """The venv's interpreter."""
    return venv / "bin" / "python"


def install(venv: Path) -> None:
    """Create ``venv``: torch (CPU build), SGLang without its dependencies, then its import-time ones."""
    py = venv_python(venv)
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pin = venv / "constraints.txt"
    # Every later install keeps this torch: a dependency asking for another one fails instead.
    pin.write_text(f"torch=={TORCH_VERSION}\n", encoding="utf-8")
    pip = [str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    env = dict(os.environ, PIP_CONSTRAINT=str(pin))
    steps = (
        # The CPU build where the machine's pip finds it (the project machines' local wheel).
        [f"torch=={TORCH_VERSION}"],
        ["--no-deps", f"sglang=={SGLANG_VERSION}"],
        ["--no-deps", "-r", str(REQUIREMENTS)],
    )
    for args in steps:
        print("pip install", " ".join(args), flush=True)
        subprocess.run(pip + args, check=True, env=env)
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    stub = Path(site) / "torchvision"
    if stub.exists():
        shutil.rmtree(stub)
    shutil.copytree(HERE / "stub_packages" / "torchvision", stub)
    print(f"stub torchvision -> {stub}")
    out = subprocess.run(
        [
            str(py),
            "-c",
            "import sglang.srt.managers.scheduler, sglang.srt.mem_cache.unified_radix_cache, torch, sglang;"
            " print(torch.__version__, sglang.__version__)",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    print(f"{venv}: torch, sglang = {out.stdout.strip()}")


def _fail(message: str) -> None:
    """One error line, exit status 2 (the project's convention for a user's mistake)."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _run_one(row: dict[str, Any], venv: Path, limit: int | None) -> dict[str, Any]:
    """One row in its own driver process; its JSON result."""
    cmd = [str(venv_python(venv)), "-m", "validation.sglang_cache.worker", json.dumps(row)]
    if limit is not None:
        cmd.append(str(limit))
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        raise RuntimeError(f"row {row['id']} failed (exit {proc.returncode}):\n{tail}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"{row['id']}: {res['rates']} in {time.monotonic() - t0:.0f} s", flush=True)
    return res


def run(ids: list[str] | None, venv: Path, out: Path, jobs: int, limit: int | None) -> None:
    """Run the rows (all, or ``ids``) and merge their results into ``out``."""
    if not venv_python(venv).exists():
        _fail(f"no driver env at {venv}; run `python -m validation.sglang_cache install` first")
    if limit is not None and out.resolve() == TARGETS.resolve():
        _fail("--limit runs part of each trace; give --out FILE (targets.json holds whole runs)")
    rows = [row_by_id(i) for i in ids] if ids else all_rows()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(lambda r: _run_one(r, venv, limit), rows))
    old = json.loads(out.read_text(encoding="utf-8")) if out.exists() else {"rows": []}
    by_id = {r["id"]: r for r in old.get("rows", [])}
    for res in results:
        by_id[res["id"]] = res
    order = [r["id"] for r in all_rows()]
    merged = [by_id[i] for i in order if i in by_id]
    doc = {
        "sglang_version": SGLANG_VERSION,
        "torch_version": TORCH_VERSION,
        "command": "python -m validation.sglang_cache install && python -m validation.sglang_cache run",
        "traces": {name: str(path.relative_to(ROOT)) for name, path in TRACES.items()},
        "rows": merged,
    }
    if limit is not None:
        doc["limit"] = limit
    out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out} ({len(merged)} rows)")


def core_rates(row: dict[str, Any], traces: dict[str, Any]) -> dict[str, float]:
    """The core's page hit rates (instant mode) for one target row, run as the test runs it (``run_core``)."""
    from hicache_sim.workloads.traces import load_mooncake

    name = row["config"]["trace"]
    if name not in traces:
        traces[name] = load_mooncake(TRACES[name], 512)
    return run_core(row, traces[name]).page_hit_rate()


def table(path: Path) -> str:
    """The document's results table: each target row, SGLang's figures and the core's."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    head = (
        "| row | trace | mode | policy | L1 | L2 | chunk | match | store | SGLang L1 / L2 / L3 | core L1 / L2 / L3 "
        "| failed backups | host-evict | device-evict | backups | storage backups (pages) | s |"
    )
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    traces: dict[str, Any] = {}
    for row in doc["rows"]:
        c, k = row["config"], row["counters"]
        r = {tier: pages / row["prompt_pages"] for tier, pages in row["hit_pages"].items()}
        core = core_rates(row, traces)
        policy = c["write_policy"]
        if c["write_policy_resolved"] != policy:
            policy += f" -> {c['write_policy_resolved']}"
        store = "unbounded" if c["storage_pages"] is None else f"{c['storage_pages']:,}"
        if c["storage_pages"] is not None and c["storage_eviction_ratio"] != 1.0:
            store += f" (ratio {c['storage_eviction_ratio']})"
        cells = [
            row["id"],
            c["trace"],
            c["host_memory_mode"],
            policy,
            f"{c['l1_pages']:,}",
            f"{c['l2_pages']:,}",
            "whole" if c["chunk_pages"] is None else str(c["chunk_pages"]),
            {"whole": "whole input", "cap": "input - 1"}[c["match"]],
            store,
            " / ".join(f"{r[t]:.5f}" for t in ("device", "host", "storage")),
            " / ".join(f"{core[t]:.5f}" for t in ("device", "host", "storage")),
            f"{k.get('backup_failures', 0):,}",
            f"{k.get('host_evict_calls', 0):,}",
            f"{k.get('device_evict_calls', 0):,}",
            f"{k.get('backups', 0):,}",
            f"{k.get('storage_backups', 0):,} ({k.get('storage_backup_pages', 0):,})",
            f"{row['seconds']:.0f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command line entry."""
    ap = argparse.ArgumentParser(prog="python -m validation.sglang_cache", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("install", help="create the driver's virtual env")
    p.add_argument("--venv", type=Path, default=VENV)
    sub.add_parser("list", help="print the rows")
    p = sub.add_parser("run", help="run rows through SGLang and write their targets")
    p.add_argument("rows", nargs="*", help="row ids (default: every row)")
    p.add_argument("--venv", type=Path, default=VENV)
    p.add_argument("--out", type=Path, default=TARGETS)
    p.add_argument("--jobs", type=int, default=1, help="rows run at once")
    p.add_argument("--limit", type=int, default=None, help="first N requests only (a quick check)")
    p = sub.add_parser("table", help="print the targets beside the core's figures (markdown)")
    p.add_argument("--targets", type=Path, default=TARGETS)
    args = ap.parse_args(argv)
    if args.cmd == "install":
        install(args.venv)
    elif args.cmd == "table":
        print(table(args.targets))
    elif args.cmd == "list":
        for row in all_rows():
            print(json.dumps(row))
    else:
        run(args.rows or None, args.venv, args.out, args.jobs, args.limit)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
