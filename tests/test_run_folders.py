"""Issue 28 item 3, run and trace-stats folders: files a user adds inside one survive the next run into
it; two runs into one folder at once: the second is refused while the first holds it; a run removes
the temporary folders a killed run left in the same parent (any name; never a live writer's)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
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


# ------------------------------------------------------- user files survive a rerun (finding 1)


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


# ------------------------------------------- one run at a time into a folder (finding 3)


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


# ------------------------------------- temporary folders a killed run left (finding 4)


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


def test_racing_takers_of_a_stale_lock_never_both_hold_the_folder(tmp_path):
    """Six processes race for one folder whose lock a dead run left; each holds it for 0.5 s if it gets
    it. Under the flock exactly one holds it at any time (unlink-and-retake let two in)."""
    lock = tmp_path / ".out.hicache-lock"
    lock.write_text(f"{dead_pid()}\n")
    code = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from hicache_sim.output.write import OutputError, hold_folder\n"
        "t = Path(sys.argv[1]); go = float(sys.argv[2])\n"
        "time.sleep(max(0.0, go - time.time()))\n"
        "try:\n"
        "    with hold_folder(t):\n"
        "        print('held', time.time(), flush=True); time.sleep(0.5); print('left', time.time(), flush=True)\n"
        "except OutputError:\n"
        "    print('refused', flush=True)\n"
    )
    go = time.time() + 1.5
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(tmp_path / "out"), str(go)], stdout=subprocess.PIPE, text=True
        )
        for _ in range(6)
    ]
    outs = [p.communicate(timeout=60)[0].split() for p in procs]
    spans = sorted((float(o[1]), float(o[3])) for o in outs if o and o[0] == "held")
    assert spans, outs
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), spans  # never two at once
    assert all(o in (["refused"],) or o[0] == "held" for o in outs), outs
    assert not lock.exists()


def test_sweep_and_advise_into_a_held_folder_are_refused(tmp_path):
    """sweep and advise hold their folder as run does: a second one into it at once is refused in one
    line and writes nothing (they took no lock: two sweeps resumed the same points into one folder)."""
    sc = write(tmp_path / "s.yaml", {**TINY, "sweep": {"cache.host_ratio": [0.5, 1.0]}})
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        advise = ["--instant-only", "--workers", "1", "--set", "cache.host_alignment=up_plus_one"]
        for verb, name, extra in (("sweep", "sw", []), ("advise", "adv", advise)):
            (tmp_path / f".{name}.hicache-lock").write_text(f"{holder.pid}\n")
            r = invoke(verb, sc, "--out", tmp_path / name, *extra)
            assert_user_error(r, name, str(holder.pid), "another hicache-sim run")
            assert not (tmp_path / name).exists()
    finally:
        holder.kill()
        holder.wait()
