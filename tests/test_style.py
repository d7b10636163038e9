"""The tree stays `ruff check` and `ruff format` clean (pinned ruff version in the dev extra), so a
formatting slip fails CI like any other regression."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TREES = ["hicache_sim", "tests", "bench", "validation"]


@pytest.mark.parametrize("args", [["check"], ["format", "--check"]], ids=["check", "format"])
def test_ruff_clean(args):
    pytest.importorskip("ruff")
    r = subprocess.run([sys.executable, "-m", "ruff", *args, *TREES], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
