"""Issue 28 item 3: two runs into one folder at once: the second is refused while the first holds it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml
from conftest import TINY_SCENARIO, assert_user_error, invoke

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


def test_second_run_into_a_held_folder_is_refused(tmp_path):
    sc = write(tmp_path / "s.yaml", TINY)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lock = tmp_path / ".out.hicache-lock"
        lock.write_text(f"{holder.pid}\n")
        assert_user_error(invoke("run", sc, "--out", tmp_path / "out", "--no-figures"), "out", str(holder.pid))
        assert not (tmp_path / "out").exists()
        assert lock.read_text() == f"{holder.pid}\n"
    finally:
        holder.kill()
        holder.wait()


def test_stale_lock_of_a_dead_run_is_taken_over_and_released(tmp_path):
    sc = write(tmp_path / "s.yaml", TINY)
    lock = tmp_path / ".out.hicache-lock"
    lock.write_text(f"{dead_pid()}\n")
    assert invoke("run", sc, "--out", tmp_path / "out", "--no-figures").exit_code == 0
    assert (tmp_path / "out" / "summary.json").is_file()
    assert not lock.exists()
    assert invoke("run", sc, "--out", tmp_path / "out", "--no-figures").exit_code == 0
    assert not lock.exists()


def test_trace_stats_into_a_held_folder_is_refused(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / ".st.hicache-lock").write_text(f"{holder.pid}\n")
        assert_user_error(invoke("trace", "stats", TRACE, "--out", tmp_path / "st"), "st", str(holder.pid))
        assert not (tmp_path / "st").exists()
    finally:
        holder.kill()
        holder.wait()
