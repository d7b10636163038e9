"""Same scenario and seed: byte-identical results. Two simulations in one process do not interfere."""

from __future__ import annotations

import json

from test_sim_support import scenario, workload_of

from hicache_sim.runner import simulate
from hicache_sim.scenario import resolve
from hicache_sim.sim import run_timed

SC = dict(
    workload={
        "kind": "multiturn",
        "multiturn": {
            "num_clients": 12,
            "num_rounds": 3,
            "request_length": 256,
            "output_length": 32,
            "request_rate": 40.0,
            "max_parallel": 8,
        },
    },
    cache={"device_tokens": 4096, "host_tokens": 4096, "storage_backend": "local_nvme"},
    metrics={"timeseries_interval_s": 0.1},
)


def _blob(res) -> str:
    return json.dumps(
        {
            "requests": res.requests,
            "timeseries": res.timeseries,
            "links": res.links,
            "counters": res.counters,
            "sim_time_s": res.sim_time_s,
            "transfers": res.transfers,
        },
        sort_keys=True,
    )


def test_same_scenario_and_seed_give_byte_identical_summary_json():
    a = simulate(scenario(**SC))
    b = simulate(scenario(**SC))
    ja = json.dumps(a.summary, indent=2, sort_keys=True)
    assert ja == json.dumps(b.summary, indent=2, sort_keys=True)
    assert a.summary["mode"] == "timed" and a.summary["ttft_s"]["p50"] is not None
    assert a.requests.to_json() == b.requests.to_json()
    assert a.timeseries.to_json() == b.timeseries.to_json()


def test_runs_in_one_process_do_not_interfere():
    first = _blob(run_timed(resolve(scenario(**SC)), workload_of(scenario(**SC))))
    other = scenario(**{**SC, "cache": {"device_tokens": 8192, "host_tokens": 4096}}, seed=7)
    run_timed(resolve(other), workload_of(other))
    again = _blob(run_timed(resolve(scenario(**SC)), workload_of(scenario(**SC))))
    assert first == again


def test_a_different_seed_changes_the_run():
    a = _blob(run_timed(resolve(scenario(**SC)), workload_of(scenario(**SC))))
    sc7 = scenario(**SC, seed=7)
    b = _blob(run_timed(resolve(sc7), workload_of(sc7)))
    assert a != b


def test_identical_across_processes_with_different_hash_seeds(tmp_path):
    import os
    import subprocess
    import sys

    code = (
        "import json, sys; sys.path.insert(0, 'tests'); from test_sim_support import scenario; "
        "from test_sim_determinism import SC; from hicache_sim.runner import simulate; "
        "print(json.dumps(simulate(scenario(**SC)).summary, sort_keys=True))"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    outs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        outs.append(
            subprocess.run(
                [sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, check=True
            ).stdout
        )
    assert outs[0] == outs[1] and outs[0].startswith("{")
