"""Issue 28 item 3: a run removes the temporary folders a killed run left in the same parent
(any name; never a live writer's)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml
from conftest import TINY_SCENARIO, invoke

TINY = {
    **TINY_SCENARIO,
    "workload": {"kind": "trace", "trace": {"path": "builtin:mooncake/conversation_trace.jsonl", "limit": 40}},
}
TRACE = "builtin:mooncake/conversation_trace.jsonl"


def write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def dead_pid() -> int:
    """The pid of a process that has exited."""
    out = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(out.stdout)


def test_stale_temp_folders_of_any_name_in_the_parent_are_cleaned(tmp_path):
    sc = write(tmp_path / "s.yaml", TINY)
    stale = tmp_path / f".other.hicache-tmp-{dead_pid()}-abc"
    stale.mkdir()
    (stale / "summary.json").write_text("{}")
    live = tmp_path / f".other.hicache-tmp-{os.getpid()}-xyz"
    live.mkdir()
    assert invoke("run", sc, "--out", tmp_path / "out", "--no-figures").exit_code == 0
    assert not stale.exists()
    assert live.exists()
