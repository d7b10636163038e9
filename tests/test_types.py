"""The typed packages stay type-clean: mypy over pyproject's [tool.mypy] files (core/, sim/ and
simconfig.py), run here because CI runs only pytest. A second test shows the check bites: a core
module with one narrowing taken out fails it, naming the line."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mypy", reason="mypy is not installed (pip install -e '.[dev]' pins it)")

ROOT = Path(__file__).resolve().parents[1]


def _mypy(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300)


def test_the_typed_packages_are_type_clean():
    # The repository's .mypy_cache (git-ignored) makes a re-run take about a second.
    out = _mypy("--cache-dir", str(ROOT / ".mypy_cache"), cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("Success: no issues found")


def test_a_type_error_in_the_core_fails_the_check(tmp_path):
    """A copy of the core whose ``_set_value`` reads ``node.parent`` without narrowing it (the root has
    no parent) must fail, and the message must name the line."""
    core = tmp_path / "hicache_sim" / "core"
    shutil.copytree(ROOT / "hicache_sim" / "core", core, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "hicache_sim" / "__init__.py").write_text("", encoding="utf-8")
    state = core / "state.py"
    text = state.read_text(encoding="utf-8")
    narrowing = (
        "        parent = node.parent\n"
        '        assert parent is not None, "a node in the tree below the root"\n'
        "        parent.n_dev_children += 1\n"
    )
    assert text.count(narrowing) == 1, "the narrowing this test removes has moved: update the test"
    state.write_text(text.replace(narrowing, narrowing.replace(narrowing.splitlines(True)[1], "")), encoding="utf-8")
    out = _mypy("--cache-dir", str(tmp_path / "cache"), "hicache_sim/core", cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "state.py:" in out.stdout and 'Item "None" of "Node | None" has no attribute "n_dev_children"' in out.stdout
    assert "errors in 1 file (checked" in out.stdout, out.stdout  # that function's reads of the parent only
