"""Issue 28 item 3: files a user adds inside a run or trace-stats folder survive the next run into it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml
from conftest import TINY_SCENARIO, assert_user_error, invoke

from hicache_sim.output.write import MARKER

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


def test_user_files_in_a_run_folder_survive_a_rerun(tmp_path):
    sc = write(tmp_path / "s.yaml", TINY)
    out = tmp_path / "out"
    assert invoke("run", sc, "--out", out, "--no-figures").exit_code == 0
    (out / "notes.txt").write_text("mine")
    (out / "extra").mkdir()
    (out / "extra" / "a.csv").write_text("1,2")
    assert invoke("run", sc, "--out", out, "--no-figures").exit_code == 0
    assert (out / "notes.txt").read_text() == "mine"
    assert (out / "extra" / "a.csv").read_text() == "1,2"
    assert (out / "summary.json").is_file()
    assert "notes.txt" not in json.loads((out / MARKER).read_text()).get("files", [])


def test_a_file_hicache_sim_no_longer_writes_is_not_kept(tmp_path):
    sc = write(tmp_path / "s.yaml", {**TINY, "metrics": {"transfer_log": True}})
    out = tmp_path / "out"
    assert invoke("run", sc, "--out", out, "--no-figures").exit_code == 0
    assert (out / "transfers.parquet").is_file()
    write(sc, TINY)
    assert invoke("run", sc, "--out", out, "--no-figures").exit_code == 0
    assert not (out / "transfers.parquet").exists()


def test_user_files_in_a_trace_stats_folder_survive_a_rerun(tmp_path):
    out = tmp_path / "st"
    assert invoke("trace", "stats", TRACE, "--out", out).exit_code == 0
    (out / "notes.txt").write_text("mine")
    assert invoke("trace", "stats", TRACE, "--out", out).exit_code == 0
    assert (out / "notes.txt").read_text() == "mine"


def test_a_users_file_where_hicache_sim_now_writes_one_is_refused(tmp_path):
    sc = write(tmp_path / "s.yaml", TINY)
    out = tmp_path / "out"
    assert invoke("run", sc, "--out", out, "--no-figures").exit_code == 0
    (out / "transfers.parquet").write_text("mine")
    write(sc, {**TINY, "metrics": {"transfer_log": True}})
    assert_user_error(invoke("run", sc, "--out", out, "--no-figures"), "transfers.parquet", "did not write")
    assert (out / "transfers.parquet").read_text() == "mine"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
