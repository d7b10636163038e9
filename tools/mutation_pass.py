"""A mutation pass over the rules users' numbers depend on (issue 30 item 1): apply each hand-made mutant
of ``tools/mutants.yaml`` alone to a clean checkout of a commit, run its package's tests (stopping at the
first failure), run the whole suite on the ones they miss, and report the kill rate per package.

    python tools/mutation_pass.py [--rev HEAD] [--only core,output] [--out results/mutation]

The checkout is a detached ``git worktree`` in a temporary folder (the working tree is never touched);
tests import the package from it (``PYTHONPATH``). Before any mutant, each package's tests must pass
unmutated, or its mutants are reported as not judged (a kill on a red baseline means nothing). A mutant
whose ``old`` text is not found exactly once is reported as stale (the code moved on), never counted.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
COMMAND = "python tools/mutation_pass.py"


@dataclass
class Outcome:
    """What one mutant did to the suite."""

    package: str
    path: str
    what: str
    status: str  # killed | killed_by_error | survived | stale | not_judged (its package's tests red unmutated)
    by: str  # "package tests" | "whole suite" | ""
    seconds: float


def _pytest(tree: Path, tests: list[str], timeout_s: float) -> int:
    """pytest's return code for ``tests`` in ``tree`` (the package imported from it), -x, quiet."""
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests]
    try:
        out = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return 124
    return out.returncode


def _expand(tree: Path, patterns: list[str]) -> list[str]:
    files = sorted({f for p in patterns for f in glob.glob(str(tree / p))})
    return [str(Path(f).relative_to(tree)) for f in files]


def run_pass(rev: str, mutants: dict, only: set[str] | None, timeout_s: float, log) -> tuple[str, list[Outcome]]:
    """Every mutant of ``mutants`` (the YAML's packages) against ``rev``; returns (commit, outcomes)."""
    commit = subprocess.run(["git", "rev-parse", rev], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    commit = commit.strip()
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="hicache-mutation-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), commit], cwd=ROOT, check=True,
                       capture_output=True)  # fmt: skip
        try:
            for package, spec in mutants.items():
                if only and package not in only:
                    continue
                tests = _expand(tree, spec["tests"])
                t0 = time.monotonic()
                if _pytest(tree, tests, timeout_s) != 0:
                    # a kill on a red baseline means nothing: the package's mutants are not judged
                    log(f"{package}: its tests fail unmutated at {commit[:10]}: its mutants are not judged")
                    outcomes += [Outcome(package, m["path"], m["what"], "not_judged", "", 0.0) for m in spec["mutants"]]
                    continue
                log(f"{package}: baseline green ({time.monotonic() - t0:.0f} s, {len(tests)} files)")
                for m in spec["mutants"]:
                    outcomes.append(_one(tree, package, m, tests, timeout_s, log))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True)
    return commit, outcomes


def _one(tree: Path, package: str, m: dict, tests: list[str], timeout_s: float, log) -> Outcome:
    path = tree / m["path"]
    text = path.read_text(encoding="utf-8")
    t0 = time.monotonic()
    if text.count(m["old"]) != 1:
        out = Outcome(package, m["path"], m["what"], "stale", "", 0.0)
    else:
        path.write_text(text.replace(m["old"], m["new"]), encoding="utf-8")
        try:
            status, by = _judge(tree, tests, timeout_s)
        finally:
            path.write_text(text, encoding="utf-8")
        out = Outcome(package, m["path"], m["what"], status, by, round(time.monotonic() - t0, 1))
    log(f"  {out.status:16s} {out.by:14s} {m['path']}: {m['what']}")
    return out


def _judge(tree: Path, tests: list[str], timeout_s: float) -> tuple[str, str]:
    """Killed by the package's tests, else by the whole suite, else survived. rc 1: a test failed; any
    other non-zero code (collection error, timeout): killed by error."""
    for by, selection in (("package tests", tests), ("whole suite", [])):
        rc = _pytest(tree, selection, timeout_s)
        if rc == 1:
            return "killed", by
        if rc != 0:
            return "killed_by_error", by
    return "survived", ""


def report(commit: str, outcomes: list[Outcome], argv: list[str]) -> str:
    """The Markdown report: kill rate per package, then every survivor and stale mutant."""
    lines = [
        "# Mutation pass",
        "",
        f"Made by `{' '.join([COMMAND, *argv])}` at commit {commit[:10]}: each mutant of",
        "`tools/mutants.yaml` applied alone to a clean checkout; its package's tests first (stop at the first",
        "failure), the whole suite for the ones they miss. Killed by error: a collection error or timeout.",
        "",
        "| package | mutants | killed by its tests | killed by the whole suite only | survived "
        "| stale or not judged | kill rate |",
        "|---|---|---|---|---|---|---|",
    ]
    packages = list(dict.fromkeys(o.package for o in outcomes))
    for pkg in [*packages, "all"]:
        rows = [o for o in outcomes if pkg in ("all", o.package)]
        live = [o for o in rows if o.status not in ("stale", "not_judged")]
        own = sum(o.status.startswith("killed") and o.by == "package tests" for o in live)
        whole = sum(o.status.startswith("killed") and o.by == "whole suite" for o in live)
        surv = sum(o.status == "survived" for o in live)
        rate = f"{(own + whole) / len(live):.0%}" if live else "-"
        stale = len(rows) - len(live)  # stale or not judged
        lines.append(f"| {pkg} | {len(live)} | {own} | {whole} | {surv} | {stale} | {rate} |")
    odd = [o for o in outcomes if o.status in ("survived", "stale", "not_judged") or o.by == "whole suite"]
    if odd:
        lines += ["", "| package | mutant | file | outcome |", "|---|---|---|---|"]
        lines += [f"| {o.package} | {o.what} | `{o.path}` | {o.status} {o.by}".rstrip() + " |" for o in odd]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rev", default="HEAD", help="commit to mutate (default HEAD)")
    ap.add_argument("--mutants", type=Path, default=ROOT / "tools" / "mutants.yaml")
    ap.add_argument("--only", default="", help="comma-separated packages of the YAML to run")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "mutation")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per pytest run")
    args = ap.parse_args(argv)
    mutants = yaml.safe_load(args.mutants.read_text(encoding="utf-8"))
    only = {p for p in args.only.split(",") if p} or None
    commit, outcomes = run_pass(args.rev, mutants, only, args.timeout, lambda s: print(s, flush=True))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.md").write_text(report(commit, outcomes, argv), encoding="utf-8")
    command = " ".join([COMMAND, *argv])
    payload = {"commit": commit, "command": command, "mutants": [asdict(o) for o in outcomes]}
    (args.out / "report.json").write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out / 'report.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
