"""A store with an offload disk behind it (``hardware.storage.offload``: Mooncake's ``enable_offload``).

Every page the pool accepts is also written to the disk, so a page the pool evicts stays a hit, read
from the disk: its objects one after another at the disk's rate (docs/reference/sglang-hicache-semantics.md,
section 3.7). Without the disk the same page is a miss.
"""

from __future__ import annotations

import pytest

from hicache_sim.core.stores import STORE_MODELS, OffloadedStore, build_store
from hicache_sim.runner import simulate
from hicache_sim.scenario import build_scenario, resolve


def _lru_pair(pool_pages: int, disk_pages: int | None = None) -> tuple[OffloadedStore, object]:
    """The same two-page LRU pool with and without a disk behind it (two objects a page)."""
    with_disk = build_store("lru", pool_pages, objects_per_page=2, offload=True, offload_capacity_pages=disk_pages)
    plain = build_store("lru", pool_pages, objects_per_page=2)
    assert isinstance(with_disk, OffloadedStore) and not isinstance(plain, OffloadedStore)
    return with_disk, plain


def test_a_page_the_pool_evicted_is_a_hit_read_from_the_disk():
    store, plain = _lru_pair(2)
    for s in (store, plain):
        s.put([1, 2, 3])  # the pool holds 2 pages: page 1 is evicted
    assert 1 not in store.pool and 1 not in plain
    assert plain.prefix_hits([1, 2, 3]) == 0  # a miss ends the run
    assert store.prefix_hits([1, 2, 3]) == 3
    # page 1's two objects come from the disk; pages 2 and 3 are still in the pool
    assert store.offload_objects([1, 2, 3]) == 2
    assert plain.offload_objects([1, 2, 3]) == 0
    assert store.report()["storage_offload_read_objects"] == 2
    assert store.report()["storage_offload_pages_held"] == 3
    assert len(store) == 3 and len(plain) == 2


def test_a_disk_read_is_not_a_pool_read():
    """Mooncake serves a disk-only object from the disk without bringing it back into memory; the
    pool's own rule sees a read of its own pages only."""
    store, _ = _lru_pair(2)
    store.put([1, 2, 3])
    assert store.prefix_hits([1, 2]) == 2  # touches page 2 in the pool, page 1 stays on disk only
    assert 1 not in store.pool
    store.put([4])  # the pool evicts its least recent page: 3 (2 was just read)
    assert 2 in store.pool and 3 not in store.pool
    assert store.prefix_hits([3]) == 1 and store.offload_objects([3]) == 2


def test_a_full_disk_refuses_the_page_which_then_lives_in_the_pool_alone():
    """Mooncake's bucket backend evicts nothing by default: past its space a page is not offloaded."""
    store, _ = _lru_pair(2, disk_pages=2)
    store.put([1, 2, 3])
    assert store.report()["storage_offload_refused_pages"] == 1
    assert store.prefix_hits([3]) == 1  # in the pool
    store.put([4, 5])  # the pool evicts 2 and 3: page 3 was on no disk
    assert store.prefix_hits([1, 2]) == 2
    assert store.prefix_hits([3]) == 0


def test_objects_evicted_apart_are_read_from_the_disk_one_by_one():
    """mooncake_sharded evicts K and V apart: a page with one object left reads the other from disk."""
    pool = STORE_MODELS.get("mooncake_sharded")(1, objects_per_page=2)
    store = OffloadedStore(pool, None)
    store.put([7])
    pool._drop((7, 1))  # V evicted, K still in the pool
    assert 7 not in pool and pool.resident_objects(7) == 1
    assert store.prefix_hits([7]) == 1 and store.offload_objects([7]) == 1


# ----------------------------------------------------------------------------------- the timed world

PAGE = 64
#: Eight clients' three rounds: their histories outgrow GPU and host and pass through a Mooncake pool
#: of 6 pages, which evicts them.
SMALL = {
    "name": "offload",
    "mode": "timed",
    "seed": 1,
    "model": "llama-3.1-8b",
    "hardware": {
        "gpu": "h200",
        "storage": {"capacity_gb": 6 * PAGE * 131072 / 1e9, "latency_us": 0.0, "eviction": "mooncake"},
    },
    "cache": {
        "page_size": PAGE,
        "device_tokens": 2048,
        "host_tokens": 2048,
        "storage_backend": "mooncake",
        "prefetch_policy": "wait_complete",
    },
    "workload": {
        "kind": "multiturn",
        "multiturn": {
            "num_clients": 8,
            "num_rounds": 3,
            "request_length": 512,
            "output_length": 1,
            "request_rate": 16.0,
            "max_parallel": 1,
            "round_barrier": True,
        },
    },
    "metrics": {"warmup_fraction": 0.0},
}
DISK = "hardware.storage.offload"


def _run(*overrides: str):
    return simulate(build_scenario(SMALL, "offload", list(overrides)))


def test_small_scenario_evicts_the_history_from_the_pool():
    res = resolve(build_scenario(SMALL, "offload"))
    assert res.bytes_per_token == 131072 and res.cache.storage_capacity_pages == 6
    plain = _run()
    assert plain.summary["counters"]["storage_evicted_pages"] > 0
    assert plain.summary["hit_rate"]["storage"] == 0.0


def test_evicted_pages_are_hits_read_at_the_disks_rate():
    """With the disk the evicted history hits (without it, it is recomputed); the disk's link moved
    exactly the objects the store read from it, each at one read's latency plus its bytes at the rate."""
    gbps, lat_us = 2.0, 500.0
    plain = _run()
    disk = _run(f"{DISK}.read_gbps={gbps}", f"{DISK}.latency_us={lat_us}")
    c = disk.summary["counters"]
    objects = c["storage_offload_read_objects"]
    assert objects > 0 and "storage_offload" not in plain.summary["links"]
    assert disk.summary["hit_rate"]["storage"] > plain.summary["hit_rate"]["storage"]
    obj_bytes = disk.resolved.bytes_per_token * PAGE // 2  # K or V of one page (TP 1)
    link = disk.summary["links"]["storage_offload"]
    assert link["bytes"] == objects * obj_bytes
    assert link["busy_s"] == pytest.approx(objects * (lat_us * 1e-6 + obj_bytes / (gbps * 1e9)), rel=1e-9)


def test_a_slower_disk_slows_the_rounds_that_read_it():
    fast = _run(f"{DISK}.read_gbps=20")
    slow = _run(f"{DISK}.read_gbps=0.2")
    assert fast.summary["counters"]["storage_offload_read_objects"] > 0
    assert slow.summary["hit_rate"] == fast.summary["hit_rate"]
    assert slow.summary["ttft_s"]["mean"] > fast.summary["ttft_s"]["mean"]


def test_offload_is_written_beside_results_only_when_set():
    """Result folders of runs without a disk keep their scenario copy as it was."""
    from hicache_sim.scenario.load import scenario_dump

    assert "offload" not in scenario_dump(build_scenario(SMALL, "x"))["hardware"]["storage"]
    dumped = scenario_dump(build_scenario(SMALL, "x", [f"{DISK}.read_gbps=3"]))["hardware"]["storage"]
    assert dumped["offload"]["read_gbps"] == 3 and dumped["offload"]["device"] == "local_nvme"
