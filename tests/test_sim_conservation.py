"""Conservation in the timed world: bytes per link equal the core's transfers, pools never exceed
their sizes at any simulated instant (sampled after every event), every arrival finishes or is
rejected with a reason, nothing is left locked, pinned or in flight; every core invariant holds
after every scheduler step."""

from __future__ import annotations

from collections import defaultdict

import pytest
from test_sim_support import PAGE, req, resolved, workload_of

from hicache_sim.sim import SimulationError, World, run_timed
from hicache_sim.sim.transport import LINK_OF_KIND
from hicache_sim.workloads.synthetic import Workload

MULTITURN = {
    "kind": "multiturn",
    "multiturn": {
        "num_clients": 16,
        "num_rounds": 4,
        "request_length": 256,
        "output_length": 32,
        "request_rate": 40.0,
        "max_parallel": 16,
    },
}

# Loaded runs (several requests in flight, evictions at both tiers) covering every transfer kind.
LOADED = {
    "l3_write_through": dict(cache={"device_tokens": 4096, "host_tokens": 4096, "storage_backend": "local_nvme"}),
    "host_smaller_write_back": dict(cache={"device_tokens": 4096, "host_tokens": 2048, "write_policy": "write_back"}),
    "buffer_only": dict(
        cache={"device_tokens": 4096, "host_tokens": 2048, "storage_backend": "3fs", "host_memory_mode": "buffer_only"}
    ),
    "pipeline_two_stages": dict(
        cache={"device_tokens": 4096, "host_tokens": 3072, "storage_backend": "local_nvme"}, hardware={"pp": 2}
    ),
    "fifo_pcie_reclaim_mirrors": dict(
        cache={"device_tokens": 4096, "host_tokens": 3072, "host_eviction": "reclaim_mirrors"},
        hardware={"pcie": {"sharing": "fifo"}},
    ),
}


def _observe(world: World, seen: dict) -> None:
    c = world.cache
    assert c.device.used() <= c.device.size and c.host.used() <= c.host.size
    u = world.pool_usage()
    # Every device page in use is owned by the tree or by a running request, never both or neither.
    assert u["device_used"] == u["device_in_tree"] + u["device_held"], u
    seen["events"] += 1
    seen["max_device"] = max(seen["max_device"], u["device_used"])
    seen["max_host"] = max(seen["max_host"], u["host_used"])


@pytest.mark.parametrize("name", sorted(LOADED))
def test_loaded_run_conserves_pages_bytes_and_requests(name):
    r = resolved(workload=MULTITURN, **LOADED[name])
    wl = workload_of(r.scenario)
    seen = defaultdict(int)
    world = World(r, wl, check_invariants=True)
    res = world.run(observer=lambda w: _observe(w, seen))
    assert seen["events"] == res.counters["events"] > 0
    assert 0 < seen["max_device"] <= r.cache.device_pages and seen["max_host"] <= r.cache.host_pages
    # Every arrival finished (or was rejected with a reason).
    assert len(res.requests) == len(wl.requests)
    assert all(x["status"] == "finished" for x in res.requests)
    # Bytes per link = bytes of the core's transfers that ran; every transfer id the core issued is logged.
    log = res.transfers
    assert sorted(t["id"] for t in log) == list(range(len(log)))
    moved = defaultdict(int)
    for t in log:
        if t["start_s"] is not None:
            moved[LINK_OF_KIND[_kind(t["kind"])]] += t["bytes"]
            assert t["end_s"] >= t["start_s"]
    for link, stats in res.links.items():
        assert stats["bytes"] == moved[link], link
        assert 0.0 <= stats["utilisation"] <= 1.0 + 1e-9
    assert res.links["d2h"]["bytes"] > 0 and res.counters["device_evicted_pages"] > 0
    assert max(row["running"] for row in res.timeseries) > 1
    if r.cache.storage:
        assert res.links["storage_read"]["bytes"] > 0 and res.links["storage_write"]["bytes"] > 0
    assert not res.cache.inflight and not res.cache.ongoing_prefetch
    assert all(x.lock_ref == 0 and x.host_ref == 0 for x in res.cache.iter_nodes())


def _kind(value: str):
    from hicache_sim.core import TransferKind

    return TransferKind(value)


def test_every_arrival_finishes_or_is_rejected_with_a_reason():
    r = resolved()
    huge = req("huge", 0.5, range(5000, 5041))  # 41 pages: more than the 40-page device pool
    wl = Workload([req("a", 0.0, range(1, 9), out=20), huge, req("b", 0.6, range(1, 12), out=5)])
    res = run_timed(r, wl, check_invariants=True)
    status = {x["rid"]: (x["status"], x["reason"]) for x in res.requests}
    assert status["a"][0] == status["b"][0] == "finished"
    assert status["huge"][0] == "rejected" and "device pool" in status["huge"][1]
    huge_row = next(x for x in res.requests if x["rid"] == "huge")
    assert huge_row["ttft_s"] is None and huge_row["queue_s"] is None


def test_time_series_is_sampled_on_the_grid_within_pool_sizes():
    r = resolved(
        workload=MULTITURN, cache={"device_tokens": 4096, "host_tokens": 3072}, metrics={"timeseries_interval_s": 0.05}
    )
    res = run_timed(r, workload_of(r.scenario))
    ts = res.timeseries
    assert len(ts) >= 3
    assert [row["t_s"] for row in ts] == pytest.approx([0.05 * i for i in range(len(ts))])
    for row in ts:
        assert row["device_pages"] <= row["device_used_pages"] <= r.cache.device_pages
        assert row["host_pages"] <= r.cache.host_pages and row["mirror_pages"] <= row["host_pages"]
        for k in ("h2d_util", "d2h_util", "storage_read_util", "storage_write_util"):
            assert 0.0 <= row[k] <= 1.0 + 1e-9
    assert any(row["running"] > 0 for row in ts) and any(row["d2h_util"] > 0 for row in ts)


def test_end_of_run_check_names_what_leaked():
    r = resolved()
    world = World(r, Workload([req("a", 0.0, range(1, 9))]))
    world.run()
    node = next(iter(world.cache.root.children.values()))
    world.cache.inc_lock_ref(node)
    with pytest.raises(SimulationError, match="still locked or pinned"):
        world.verify()
    world.cache.dec_lock_ref(node)
    world.links["d2h"].bytes += PAGE
    with pytest.raises(SimulationError, match="link d2h moved"):
        world.verify()


REQUEST_COLUMNS = {
    "rid",
    "arrival_s",
    "admit_s",
    "first_token_s",
    "finish_s",
    "queue_s",
    "prefetch_wait_s",
    "load_wait_s",
    "ttft_s",
    "e2e_s",
    "input_tokens",
    "output_tokens",
    "prompt_pages",
    "device_hit_pages",
    "host_hit_pages",
    "storage_hit_pages",
    "device_hit_tokens",
    "host_hit_tokens",
    "storage_hit_tokens",
    "retractions",
    "status",
    "reason",
}
SERIES_COLUMNS = {
    "t_s",
    "device_pages",
    "host_pages",
    "mirror_pages",
    "device_used_pages",
    "host_used_pages",
    "waiting",
    "running",
    "h2d_util",
    "d2h_util",
    "storage_read_util",
    "storage_write_util",
}


def test_result_has_the_documented_fields_and_progress_counts_every_request():
    r = resolved(workload=MULTITURN, **LOADED["l3_write_through"])
    wl = workload_of(r.scenario)
    ticks: list[int] = []
    res = run_timed(r, wl, progress=ticks.append)
    assert ticks == list(range(1, len(wl.requests) + 1))
    assert [x["rid"] for x in res.requests] == [q.rid for q in wl.requests]
    assert all(set(x) == REQUEST_COLUMNS for x in res.requests)
    assert all(set(row) == SERIES_COLUMNS for row in res.timeseries)
    assert set(res.links) == {"h2d", "d2h", "storage_read", "storage_write"}
    assert all({"bytes", "busy_s", "utilisation"} <= set(v) for v in res.links.values())
    t = res.transfers[0]
    assert {"id", "kind", "reason", "pages", "bytes", "start_s", "end_s", "duration_s"} <= set(t)
    for x in res.requests:
        # Token hits follow the page prefix device -> host -> storage, within the prompt.
        assert x["device_hit_tokens"] + x["host_hit_tokens"] + x["storage_hit_tokens"] <= x["input_tokens"]
        assert x["ttft_s"] == x["first_token_s"] - x["arrival_s"] >= x["queue_s"] >= x["prefetch_wait_s"] >= 0
    assert res.sim_time_s >= max(x["finish_s"] for x in res.requests)
    assert res.counters["requests"] >= len(wl.requests) and res.counters["steps"] > 0
