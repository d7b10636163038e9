"""Result folders and sweeps that never lose a user's file or return stale numbers (issue 8's data-loss
cases), plus the run's verdict when nothing (or not everything) was served."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from conftest import TINY_SCENARIO, assert_user_error, invoke

from hicache_sim.output.write import MARKER, clean_stale

TINY = {
    **TINY_SCENARIO,
    "workload": {"kind": "trace", "trace": {"path": "builtin:mooncake/conversation_trace.jsonl", "limit": 80}},
}
SWEEP = {**TINY, "sweep": {"cache.host_ratio": [0.5, 1.0]}}


def write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_rerun_replaces_only_its_own_folder(tmp_path):
    sc = write(tmp_path / "s.yaml", TINY)
    out = tmp_path / "out"
    assert invoke("run", sc, "--out", out, "--no-figures").exit_code == 0
    assert json.loads((out / MARKER).read_text())["kind"] == "run"
    first = (out / "summary.json").read_bytes()
    assert invoke("run", sc, "--out", out, "--no-figures").exit_code == 0
    assert (out / "summary.json").read_bytes() == first
    (out / MARKER).unlink()  # no marker: no longer ours, so never replaced
    assert_user_error(invoke("run", sc, "--out", out, "--no-figures"), "did not write")
    assert (out / "summary.json").read_bytes() == first


def test_empty_folder_is_used(tmp_path):
    sc = write(tmp_path / "s.yaml", TINY)
    (tmp_path / "empty").mkdir()
    assert invoke("run", sc, "--out", tmp_path / "empty", "--no-figures").exit_code == 0
    assert (tmp_path / "empty" / "summary.json").is_file()


def test_files_follow_the_umask(tmp_path):
    sc = write(tmp_path / "s.yaml", TINY)
    old = os.umask(0o022)
    try:
        assert invoke("run", sc, "--out", tmp_path / "o", "--no-figures").exit_code == 0
    finally:
        os.umask(old)
    assert (tmp_path / "o").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "o" / "summary.json").stat().st_mode & 0o777 == 0o644


def test_stale_temp_folder_of_a_killed_run_is_cleaned(tmp_path):
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    ).stdout.strip()
    stale = tmp_path / f".out.hicache-tmp-{dead}-abc"
    stale.mkdir()
    (stale / "summary.json").write_text("{}")
    live = tmp_path / f".out.hicache-tmp-{os.getpid()}-xyz"
    live.mkdir()
    other = tmp_path / ".out.user-folder"
    other.mkdir()
    assert clean_stale(tmp_path, "out") == [stale]
    assert not stale.exists() and live.exists() and other.exists()


def test_nothing_served_exits_1_with_the_reason(tmp_path):
    sc = write(tmp_path / "s.yaml", {**TINY, "cache": {**TINY["cache"], "device_tokens": 512, "host_ratio": 1}})
    r = invoke("run", sc, "--out", tmp_path / "o", "--no-figures")
    assert r.exit_code == 1, r.output
    assert "error: nothing was served: all 80 requests were rejected (device pool too small" in r.output


def test_partly_rejected_run_warns(tmp_path):
    sc = write(tmp_path / "s.yaml", {**TINY, "cache": {**TINY["cache"], "device_tokens": 1024}})
    r = invoke("run", sc, "--out", tmp_path / "o", "--no-figures")
    assert r.exit_code == 0, r.output
    assert "were rejected (device pool too small for the prompt); hit rates and latencies cover the" in r.output


def test_huge_pools_cost_no_memory(tmp_path):
    """A 10**15-token device pool (an unbounded cache) runs: pools hold only the pages in use."""
    sc = write(tmp_path / "s.yaml", TINY)
    r = invoke(
        "run",
        sc,
        "--out",
        tmp_path / "o",
        "--no-figures",
        "--check-invariants",
        "--set",
        "cache.device_tokens=1000000000000000",
        "--set",
        "cache.host_ratio=1000000000",
    )
    assert r.exit_code == 0, r.output
    assert "GiB per GPU, more than" in r.output  # and the pool is said to exceed any H200


# ------------------------------------------------------------------------------------ sweeps


def _points(folder: Path) -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in (folder / "points").glob("*.json")}


def test_sweep_resume_reuses_only_identical_points(tmp_path):
    sc = write(tmp_path / "s.yaml", SWEEP)
    out = tmp_path / "sw"
    r = invoke("sweep", sc, "--out", out, "--workers", 1)
    assert r.exit_code == 0 and "(2 run, 0 already done)" in r.output, r.output
    r = invoke("sweep", sc, "--out", out, "--workers", 1)
    assert "(0 run, 2 already done)" in r.output, r.output
    # Extending the grid keeps the two points and runs only the new one.
    write(tmp_path / "s.yaml", {**SWEEP, "sweep": {"cache.host_ratio": [0.5, 1.0, 2.0]}})
    r = invoke("sweep", sc, "--out", out, "--workers", 1)
    assert "(1 run, 2 already done)" in r.output, r.output


def test_sweep_into_folder_of_another_base_is_refused(tmp_path):
    sc = write(tmp_path / "s.yaml", SWEEP)
    out = tmp_path / "sw"
    assert invoke("sweep", sc, "--out", out, "--workers", 1).exit_code == 0
    before = _points(out)
    r = invoke("sweep", sc, "--out", out, "--workers", 1, "--set", "cache.page_size=256")
    assert_user_error(r, "made from another base scenario", "cache.page_size", "--force")
    assert _points(out) == before
    r = invoke("sweep", sc, "--out", out, "--workers", 1, "--set", "cache.page_size=256", "--force")
    assert r.exit_code == 0 and "(2 run, 0 already done)" in r.output, r.output
    assert len(_points(out)) == 2
    assert all(p["sizes.page_size"] == 256 for p in _points(out).values())


def test_changed_trace_file_invalidates_points(tmp_path):
    src = Path(__file__).resolve().parent.parent / "hicache_sim/data/traces/mooncake/conversation_trace.jsonl"
    lines = src.read_text().splitlines()[:60]
    trace = tmp_path / "t.jsonl"
    trace.write_text("\n".join(lines) + "\n")
    data = {**SWEEP, "workload": {"kind": "trace", "trace": {"path": str(trace)}}}
    sc = write(tmp_path / "s.yaml", data)
    out = tmp_path / "sw"
    assert invoke("sweep", sc, "--out", out, "--workers", 1).exit_code == 0
    trace.write_text("\n".join(lines[:40]) + "\n")
    r = invoke("sweep", sc, "--out", out, "--workers", 1)
    assert "(2 run, 0 already done)" in r.output, r.output
    table = __import__("pandas").read_parquet(out / "sweep.parquet")
    assert list(table["requests"]) == [40, 40]


def test_timed_run_draws_a_ttft_figure(tmp_path):
    sc = write(tmp_path / "s.yaml", {**TINY, "mode": "timed"})
    r = invoke("run", sc, "--out", tmp_path / "o")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "o" / "ttft.png").stat().st_size > 10_000
    sc2 = write(tmp_path / "i.yaml", TINY)
    assert invoke("run", sc2, "--out", tmp_path / "i").exit_code == 0
    assert not (tmp_path / "i" / "ttft.png").exists()  # instant mode has no time
