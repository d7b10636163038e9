"""Chunked prefill: which inserts count insert-hits (the write-through trigger), and instant mode
allocating device pages chunk by chunk (reference sections 2.2, 2.3). Page size 4, keys are pages."""

from __future__ import annotations

import pytest
from conftest import new_cache, node_at, settle

from hicache_sim.core import CacheConfig
from hicache_sim.instant import run_instant
from hicache_sim.workloads import Request


def reasons(c):
    return [(t.reason, t.node_ids) for t in c.take_transfers()]


@pytest.mark.parametrize("rule", ["past_inserted", "never"])
def test_a_chunk_checkpoint_counts_its_new_node_and_the_finish_only_the_rest(rule):
    """A 6-page prompt in two 3-page chunks under write_through. past_inserted (unified tree): the
    checkpoint counts the first chunk's node, so its write-through starts at once; the finish counts
    only the node past the 3 pages already inserted. never (HiRadixCache): the checkpoint counts
    nothing; the finish counts both nodes."""
    c = new_cache(device_pages=16, host_pages=16, checkpoint_hits=rule)
    st = c.begin_request("r", [1, 2, 3, 4, 5, 6], 6)
    assert c.extend_request(st, 3)
    c.checkpoint_request(st, 3)
    first = node_at(c, [1, 2, 3])
    if rule == "past_inserted":
        assert first.hit_count == 1 and reasons(c) == [("write_through", [first.id])]
    else:
        assert first.hit_count == 0 and reasons(c) == []
    assert c.extend_request(st, 3)
    c.finish_request(st)
    second = node_at(c, [1, 2, 3, 4, 5, 6])
    assert first.hit_count == 1 and second.hit_count == 1
    want = [("write_through", [second.id])]
    if rule == "never":
        want.insert(0, ("write_through", [first.id]))
    assert reasons(c) == want
    settle(c)


@pytest.mark.parametrize(("rule", "hits"), [("past_inserted", 1), ("never", 2)])
def test_a_request_counts_a_node_once_across_its_inserts(rule, hits):
    """write_through_selective (threshold 2): a request inserts its prompt after the prefill (not a
    chunk checkpoint) and again when it finishes. The unified tree remembers the inserted length,
    so the node has one hit and no backup; HiRadixCache counts both inserts and backs it up. A
    second request then brings the unified tree's count to 2."""
    c = new_cache(device_pages=16, host_pages=16, write_policy="write_through_selective", checkpoint_hits=rule)
    st = c.begin_request("r", [1, 2, 3], 3)
    assert c.extend_request(st, 3)
    c.checkpoint_request(st, 3, chunked=False)
    c.finish_request(st)
    node = node_at(c, [1, 2, 3])
    assert node.hit_count == hits and (node.host_value is not None) == (hits == 2)
    settle(c)
    st = c.begin_request("r2", [1, 2, 3], 3)
    c.finish_request(st)
    assert node.hit_count == hits + 1 and node.host_value is not None
    settle(c)


def request(rid: str, keys: list[int]) -> Request:
    return Request(rid, 0.0, 4 * len(keys), 0, tuple(keys))


def test_instant_mode_allocates_each_chunk_when_it_is_prefilled():
    """Device 8 pages, chunks of 4. R1 (8 pages) fills the device as two nodes. R2 (8 pages) needs 4
    pages for each chunk: the first chunk evicts R1's leaf [14..17], the second, after R2's first
    chunk is checkpointed and pinned, evicts [10..13]. Two device evictions; allocating the whole
    prompt up front would make one of 8 pages."""
    cfg = CacheConfig(4, 8, 0)
    r1 = request("r1", list(range(10, 18)))
    r2 = request("r2", list(range(20, 28)))
    res = run_instant(cfg, [r1, r2], chunk_pages=4, reserve_last_token=False, check_invariants=True)
    c = res.cache
    assert not res.rejected
    assert c.counters.device_evict_calls == 2 and c.counters.device_evicted_pages == 8
    assert set(c.root.children) == {20}
    assert node_at(c, [20, 21, 22, 23]).state() == "D" and node_at(c, list(range(20, 28))).state() == "D"


def test_instant_mode_completes_acknowledgements_between_chunks():
    """Each chunk after the first is a new scheduler step, which first completes what finished:
    here the load-back of the request's host hit. write_back, device 6, host 4, chunks of 2 pages.
    R1-R3 fill the device; R4 and R5 write R1 and R2 back (host full). R6 = R1's pages + 4 new:
    loading R1's pages back writes R3 back (R2 deleted from host); chunk 1 writes R4 back (R3
    deleted). Before chunk 2 the load is acknowledged, R1's pages are a duplicate (held by R6), and
    writing R5 back reclaims their host copy instead of deleting R4's only copy, which R7 then hits.
    Were the load still in flight, R4 would be deleted and R7 would miss."""
    cfg = CacheConfig(4, 6, 4, write_policy="write_back", load_back_threshold_tokens=0)
    keys = [[1, 2], [3, 4], [5, 6], [7, 8], [9, 10], [1, 2, 11, 12, 13, 14], [7, 8]]
    reqs = [request(f"r{i + 1}", k) for i, k in enumerate(keys)]
    res = run_instant(cfg, reqs, chunk_pages=2, reserve_last_token=False, check_invariants=True)
    assert not res.rejected
    assert res.host_hit == [0, 0, 0, 0, 0, 2, 2]
    assert res.cache.counters.host_mirror_reclaimed_pages == 2
