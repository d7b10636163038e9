"""A Dask sweep ends in bounded time whatever the cluster does: one whose last worker leaves stops once
none has come back within --dask-timeout, keeps every point it saved, says so in one line (exit 2) with
how to resume, and the same command then finishes the sweep from the points kept. The CLI runs in a
subprocess with a timeout, so a sweep that waits for ever fails instead of hanging the suite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from conftest import TINY_SCENARIO

distributed = pytest.importorskip("dask.distributed")

ROOT = Path(__file__).resolve().parents[1]
POINTS = [0.25 * i for i in range(1, 9)]
#: Eight timed points of about 0.25 s each: the worker leaves after the first is saved, with points left.
SCENARIO = {
    **TINY_SCENARIO,
    "mode": "timed",
    "workload": {"kind": "trace", "trace": {"path": "builtin:mooncake/conversation_trace.jsonl", "limit": 600}},
    "sweep": {"cache.host_ratio": POINTS},
}


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "hicache_sim", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90, cwd=ROOT, env=env)


@pytest.mark.slow  # about 10 s: a cluster, two sweeps in subprocesses
def test_a_cluster_that_loses_its_last_worker_stops_the_sweep(tmp_path):
    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump(SCENARIO))
    out = tmp_path / "out"
    # the worker in this process (closed from here), reached over TCP by the sweep's process
    cluster = {"n_workers": 1, "threads_per_worker": 1, "processes": False, "protocol": "tcp://"}
    with distributed.LocalCluster(**cluster, dashboard_address=None) as cl:
        gone = threading.Event()

        def close_after_first_point() -> None:
            while not gone.is_set():
                if list((out / "points").glob("*.json")) if (out / "points").is_dir() else []:
                    cl.scale(0)
                    gone.set()
                time.sleep(0.02)

        watcher = threading.Thread(target=close_after_first_point, daemon=True)
        watcher.start()
        args = ["sweep", str(sc), "--out", str(out), "--dask-scheduler", cl.scheduler_address, "--dask-timeout", "2"]
        t0 = time.monotonic()
        r = cli(*args)
        took = time.monotonic() - t0
        gone.set()
        kept = sorted((out / "points").glob("*.json"))
        assert 1 <= len(kept) < len(POINTS), r.stdout + r.stderr
        assert r.returncode == 2, r.stdout + r.stderr
        errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1 and "Traceback" not in r.stderr, r.stderr
        line = errors[0]
        assert "has had no worker for 2 s" in line and "to resume, rerun the same command" in line, line
        assert f"{len(kept)} of {len(POINTS)} points kept in {out / 'points'}" in line, line
        assert all(json.loads(f.read_text())["identity"] for f in kept)  # every kept point whole
        assert took < 60, took
        cl.scale(1)  # workers are back: the same command finishes the sweep, reusing the points kept
        stamps = {f: f.stat().st_mtime_ns for f in kept}
        again = cli(*args)
        assert again.returncode == 0, again.stdout + again.stderr
        assert f"({len(POINTS) - len(kept)} run, {len(kept)} already done)" in again.stdout
        assert {f: f.stat().st_mtime_ns for f in kept} == stamps
