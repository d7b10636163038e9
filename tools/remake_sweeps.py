"""Remake the committed sweep and advise folders from empty folders, by the commands results/README.md gives
for them, on the committed code alone.

Why: a sweep point's identity holds the resolved scenario and a digest of the package's code. A schema
field added since a folder was made strands it (``sweep`` refuses to resume: "made from another base
scenario"), and a folder made from a working tree with uncommitted edits records a code digest no clone
has, so the README's sweep and advise examples compute every point again on a fresh clone and add their
files beside the committed ones. This script exports HEAD (``git archive``) to a temporary folder, runs
there, from empty folders, each ``hicache-sim sweep`` / ``advise`` command of results/README.md's tables
and the ``python results/...`` commands of the same rows, then copies the remade folders over the working
tree's. Commit them alone, with no code change in the same commit. ``tests/test_readme_commands.py``
checks the result.

    python tools/remake_sweeps.py            # about 3 to 5 minutes on 2 cores
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VERBS = ("sweep", "advise")


def rows(readme: str) -> list[list[str]]:
    """The inline commands of each table row of results/README.md that sweeps or advises."""
    out = []
    for line in readme.splitlines():
        if not line.startswith("|"):
            continue
        cmds = [c for c in re.findall(r"`([^`]+)`", line) if c.startswith(("hicache-sim ", "python results/"))]
        if any(shlex.split(c)[1] in VERBS for c in cmds if c.startswith("hicache-sim ")):
            out.append(cmds)
    return out


def out_folder(words: list[str]) -> str:
    if "--out" not in words:
        raise SystemExit(f"results/README.md: `{shlex.join(words)}` names no --out folder")
    return words[words.index("--out") + 1]


def digests(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` -> digest of its bytes (git-ignored environment.json left out)."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != "environment.json"
    }


def main() -> int:
    todo = rows((ROOT / "results" / "README.md").read_text(encoding="utf-8"))
    if not todo:
        raise SystemExit("results/README.md quotes no sweep or advise command")
    with tempfile.TemporaryDirectory(prefix="remake-") as tmp:
        export = Path(tmp)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", "HEAD"], check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(export)], input=archive.stdout, check=True)
        env = {**os.environ, "PYTHONPATH": str(export)}
        before = digests(export / "results")
        for cmd in (c for cmds in todo for c in cmds):
            words = shlex.split(cmd)
            if words[0] == "hicache-sim":
                shutil.rmtree(export / out_folder(words), ignore_errors=True)  # from an empty folder
                words = [sys.executable, "-m", "hicache_sim", *words[1:]]
            else:
                words = [sys.executable, *words[1:]]
            print(f"$ {cmd}", flush=True)
            subprocess.run(words, cwd=export, env=env, check=True, stdout=subprocess.DEVNULL)
        after = digests(export / "results")
        for rel in sorted(set(before) | set(after)):  # what the commands changed, mirrored into the tree
            if before.get(rel) == after.get(rel):
                continue
            dst = ROOT / "results" / rel
            if rel in after:
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(export / "results" / rel, dst)
            else:
                dst.unlink(missing_ok=True)
    status = subprocess.run(["git", "-C", str(ROOT), "status", "--short", "--", "results"], capture_output=True)
    print(status.stdout.decode(), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
