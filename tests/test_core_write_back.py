"""write_back in the unified tree core (SGLang 0.5.23): full host duplicates are reclaimed before
host-only copies, in the order they became duplicates, sparing device-eviction candidates in a first
pass; loads in flight are excluded until their ack; each victim is written and demoted at once, with
nothing pinned (reference section 2.14; invariant 23). Trees are page_size 4, keys are page keys."""

from __future__ import annotations

import pytest
from conftest import new_cache, node_at, put, settle

from hicache_sim.core import CacheConfig, check
from hicache_sim.instant import run_instant
from hicache_sim.workloads.records import Request


def wb(device_pages: int, host_pages: int, **kw):
    return new_cache(device_pages=device_pages, host_pages=host_pages, write_policy="write_back", **kw)


def written_back(c, *keys):
    """Insert each key list, then evict them all: each is written back and H-only, in this order."""
    for k in keys:
        put(c, k)
    assert c.evict(sum(len(k) for k in keys)) == sum(len(k) for k in keys)
    assert all(node_at(c, k).state() == "H" for k in keys)
    settle(c)


@pytest.mark.parametrize(("flow", "kept"), [("unified", "B"), ("staged", "A")])
def test_room_comes_from_a_duplicate_before_a_host_only_copy(flow, kept):
    """Host 4: A and B written back fill it; A is re-attached (D+H, a duplicate) and held by a
    request. Writing back C needs 2 host pages: the unified core drops A's duplicate host copy and
    keeps B's only copy; HiRadixCache (staged) can only delete B."""
    c = wb(4, 4, write_back_eviction=flow)
    written_back(c, [1, 2])
    written_back(c, [3, 4])
    put(c, [1, 2])
    a, b = node_at(c, [1, 2]), node_at(c, [3, 4])
    assert a.state() == "D+H"
    c.inc_lock_ref(a)
    put(c, [5, 6])
    assert c.evict(2) == 2
    assert node_at(c, [5, 6]).state() == "H"
    if kept == "B":
        assert a.state() == "D" and b.state() == "H"
        assert c.counters.host_mirror_reclaimed_pages == 2 and c.counters.host_deleted_pages == 0
    else:
        assert a.state() == "D+H" and 3 not in c.root.children
        assert c.counters.host_mirror_reclaimed_pages == 0 and c.counters.host_deleted_pages == 2
    c.dec_lock_ref(a)
    settle(c)


def two_duplicates(device_pages: int, e_keys: list[int]):
    """A and D written back, then re-attached in that order (duplicates A, D); D is held by a request,
    E is inserted and A touched again, so E is the least recently used device leaf."""
    c = wb(device_pages, 4)
    written_back(c, [1, 2], [3, 4])
    put(c, [1, 2])
    put(c, [3, 4])
    a, d = node_at(c, [1, 2]), node_at(c, [3, 4])
    assert list(c.host_duplicates) == [a, d]
    c.inc_lock_ref(d)
    put(c, e_keys)
    c.match_prefix([1, 2])
    return c, a, d


def test_first_pass_spares_a_duplicate_whose_device_copy_is_an_eviction_candidate():
    """Writing back E needs 2 pages. A is the older duplicate, but it is a device-eviction
    candidate (its demotion would reuse the copy): D goes instead."""
    c, a, d = two_duplicates(6, [5, 6])
    assert c.evict(2) == 2
    assert node_at(c, [5, 6]).state() == "H"
    assert a.state() == "D+H" and d.state() == "D"
    c.dec_lock_ref(d)
    settle(c)


def test_second_pass_takes_eviction_candidates_when_the_others_are_not_enough():
    """E is 4 pages: D (2) is not enough, so the second pass takes A too; E is written back."""
    c, a, d = two_duplicates(8, [5, 6, 7, 8])
    assert c.evict(4) == 4
    assert node_at(c, [5, 6, 7, 8]).state() == "H"
    assert a.state() == "D" and d.state() == "D"
    assert c.counters.host_mirror_reclaimed_pages == 4 and c.counters.device_dropped_subtree_pages == 0
    c.dec_lock_ref(d)
    settle(c)


def test_duplicates_go_in_the_order_they_became_duplicates_not_by_recency():
    """A and D both held (neither is spared); D is the less recently used, but A became a duplicate
    first, so A's host copy goes."""
    c, a, d = two_duplicates(6, [5, 6])
    c.inc_lock_ref(a)
    c.match_prefix([1, 2])  # A is the most recently used
    assert c.evict(2) == 2
    assert a.state() == "D" and d.state() == "D+H"
    c.dec_lock_ref(a)
    c.dec_lock_ref(d)
    settle(c)


def test_a_node_being_loaded_back_is_no_duplicate_until_the_ack():
    """A is loaded back (D+H, copy in flight); writing back C before the ack must not take A's host
    pages: B (H-only) is deleted instead. After the ack A is a duplicate and its copy can go."""
    c = wb(4, 4, load_back_threshold_tokens=0)
    written_back(c, [1, 2])
    written_back(c, [3, 4])
    a = node_at(c, [1, 2])
    assert c.load_back(a) is a
    (load,) = c.take_transfers()
    put(c, [5, 6])
    assert c.evict(2) == 2  # C is the only candidate: A is locked by its load
    assert a.state() == "D+H" and 3 not in c.root.children and node_at(c, [5, 6]).state() == "H"
    assert c.counters.host_mirror_reclaimed_pages == 0
    check(c)
    c.complete(load)
    assert a.pending_load is None and a in c.host_duplicates
    c.inc_lock_ref(a)
    put(c, [7, 8])
    assert c.evict(2) == 2
    assert a.state() == "D" and node_at(c, [7, 8]).state() == "H" and node_at(c, [5, 6]).state() == "H"
    c.dec_lock_ref(a)
    settle(c)


def test_the_parent_copy_is_not_pinned_while_a_child_is_written_back():
    """Host 2 holds P's copy; P is re-attached (a duplicate) with a new D-only child X. Evicting X
    needs 2 host pages: P is no eviction candidate (X is on device), so its duplicate copy makes
    the room, and X becomes H-only under a D-only P (write_back needs no prefix-closed host)."""
    c = wb(4, 2)
    written_back(c, [1, 2])
    put(c, [1, 2, 3, 4])
    p, x = node_at(c, [1, 2]), node_at(c, [1, 2, 3, 4])
    assert p.state() == "D+H" and x.state() == "D"
    assert c.evict(2) == 2
    assert p.state() == "D" and x.state() == "H" and x.parent is p
    assert c.counters.device_dropped_subtree_pages == 0 and c.counters.backup_failures == 0
    settle(c)


def test_a_split_registers_the_upper_half_as_a_new_duplicate():
    """A matched at half its length splits: the lower half keeps A's place, the upper half is a new
    duplicate after D."""
    c = wb(8, 8)
    written_back(c, [1, 2, 3, 4], [5, 6])
    put(c, [1, 2, 3, 4])
    put(c, [5, 6])
    a, d = node_at(c, [1, 2, 3, 4]), node_at(c, [5, 6])
    c.match_prefix([1, 2])
    upper = node_at(c, [1, 2])
    assert a.key == [3, 4] and a.parent is upper
    assert list(c.host_duplicates) == [a, d, upper]
    settle(c)


def test_only_write_back_under_the_unified_core_tracks_duplicates():
    for kw in ({"write_policy": "write_through"}, {"write_policy": "write_back", "write_back_eviction": "staged"}):
        c = new_cache(device_pages=8, host_pages=8, **kw)
        put(c, [1, 2])
        c.evict(2)
        put(c, [1, 2])
        settle(c)
        assert node_at(c, [1, 2]).state() == "D+H" and c.host_duplicates == {}


def test_a_demoted_victim_keeps_a_stale_entry_that_is_never_reclaimed():
    """A write-back victim registers when its write is acknowledged and is demoted right after:
    its entry stays (stale, as upstream), but the walk only drops it: the node's only copy stays."""
    c = wb(4, 4)
    written_back(c, [1, 2])
    a = node_at(c, [1, 2])
    assert list(c.host_duplicates) == [a]
    assert c.evict_host(2) == 2  # nothing to reclaim among duplicates: A is deleted as an H-only leaf
    assert c.counters.host_mirror_reclaimed_pages == 0 and c.counters.host_deleted_pages == 2
    assert c.host_duplicates == {} and c.root.children == {}
    settle(c)


def test_a_node_that_becomes_a_duplicate_again_keeps_its_old_place():
    """T is written back, re-attached with a new child L, then L (written back) and T (demoted)
    leave the device: both entries stay, T's first. Loading the chain back and acknowledging it
    walks L then T, but both keep their places, so T's copy goes first when both are held. (Upstream
    keeps stale entries; dropping them at demotion would put L first: one host eviction more or
    less on the conversation trace at 6000/12000 pages.)"""
    c = wb(6, 4, load_back_threshold_tokens=0)
    written_back(c, [1, 2])
    put(c, [1, 2, 3, 4])
    t, leaf = node_at(c, [1, 2]), node_at(c, [1, 2, 3, 4])
    assert c.evict(4) == 4 and t.state() == leaf.state() == "H"
    assert list(c.host_duplicates) == [t, leaf]
    settle(c)
    assert c.load_back(leaf) is leaf
    settle(c)
    assert list(c.host_duplicates) == [t, leaf]
    c.inc_lock_ref(leaf)
    put(c, [5, 6])
    assert c.evict(2) == 2
    assert t.state() == "D" and leaf.state() == "D+H" and node_at(c, [5, 6]).state() == "H"
    c.dec_lock_ref(leaf)
    settle(c)


# ------------------------------------------------------------------- write_back reaches storage


@pytest.mark.parametrize(("flow", "stored"), [("unified", True), ("staged", False)])
def test_a_write_back_copy_goes_on_to_storage_when_the_era_sends_it(flow, stored):
    """SGLang 0.5.23 finishes each write-back ack like a write-through one, and a finished ack with a
    storage tier queues the node's storage backup (``writing_check(write_back=True)`` ->
    ``_finish_write_through_ack`` -> ``write_backup_storage``); 0.5.2's HiRadixCache (staged) dropped
    the ack. Evicting A (2 pages, D-only) writes it to host; the unified core then sends those 2
    pages on to storage, the host copy pinned until the storage ack."""
    c = wb(4, 4, write_back_eviction=flow, storage=True)
    put(c, [1, 2])
    a = node_at(c, [1, 2])
    assert c.evict(2) == 2 and a.state() == "H"
    h2s = [t for t in c.take_transfers() if t.kind.value == "h2s"]
    if stored:
        assert [t.page_hashes for t in h2s] == [a.hashes] and a.host_ref == 1
        check(c)
        c.drain()
        assert a.hashes[0] in c.storage and a.hashes[1] in c.storage and a.host_ref == 0
        assert c.counters.storage_backup_pages == 2
    else:
        assert h2s == [] and a.host_ref == 0
        c.drain()
        assert len(c.storage) == 0 and c.counters.storage_backup_pages == 0
    settle(c)


def test_a_written_back_prefix_comes_back_from_storage_after_the_host_lost_it():
    """sgl-project/sglang #39444's shape in miniature: host smaller than the device, write_back, a
    store. A (4 pages) is evicted, written back and stored; B (4 pages) evicts A's only host copy.
    A's prefix is then a storage hit of its whole length: the prefetch anchors at the root."""
    c = wb(4, 4, storage=True, prefetch_threshold_tokens=1, prefetch_policy="wait_complete")
    put(c, [1, 2, 3, 4])
    assert c.evict(4) == 4
    c.drain()
    put(c, [5, 6, 7, 8])
    assert c.evict(4) == 4  # writing B back needs the whole host: A's copy goes
    c.drain()
    assert node_at(c, [5, 6, 7, 8]).state() == "H"
    assert 1 not in c.root.children
    m = c.match_prefix([1, 2, 3, 4])
    assert m.device_hit_pages == 0 and m.host_hit_pages == 0
    # B's host copy must make room for the hit: it is stored too, so nothing is lost.
    assert c.prefetch("r", m.last_node, [1, 2, 3, 4], 0.0) is not None
    assert c.prefetch_query("r") == 4
    c.drain()
    assert c.check_prefetch_progress("r", 0.0)
    assert node_at(c, [1, 2, 3, 4]).state() == "H"
    settle(c)


# ------------------------------------------------------------------------------ sglang #39444

PROMPT = 16_011  # tokens; page size 1 (SGLang's default with the Triton backend)


def _sglang_39444(policy: str) -> tuple[int, int, int]:
    """sgl-project/sglang #39444: Qwen3-4B on one H20-3e, L1 42,763 tokens, L2 27,127 (``--hicache-size
    4``), a Mooncake store (16 GiB segment: 116k tokens of Qwen3-4B, more than the run writes),
    wait_complete. Five distinct 16,011-token prompts with ``max_new_tokens=1``, then the first again.
    Returns the replay's (device, host, storage) hit tokens."""
    prompts = [tuple(range(i * 100_000, i * 100_000 + PROMPT)) for i in range(5)]
    requests = [Request(f"p{i}", float(i), PROMPT, 1, keys) for i, keys in enumerate(prompts)]
    requests.append(Request("replay", 10.0, PROMPT, 1, prompts[0]))
    config = CacheConfig(1, 42_763, 27_127, write_policy=policy, storage=True, prefetch_policy="wait_complete")
    res = run_instant(config, requests, reserve_last_token=True)
    return res.device_hit[-1], res.host_hit[-1], res.storage_hit[-1]


def test_sglang_39444_write_back_restores_the_whole_prefix_from_storage():
    """The report: with write_back the replay restores the full prefix from the store, 16,010 tokens
    (the last token is never matched). Each write-back copy is sent on to storage; the first prompt
    left the device when the third arrived and the host when the fourth did, so only the store has it."""
    assert _sglang_39444("write_back") == (0, 0, PROMPT - 1)


def test_sglang_39444_write_through_restores_what_the_host_mirrors_leave_free():
    """The report's write_through replay restores only part of the prefix. Derived by hand: L1 holds
    two prompts; the host holds one prompt's copy at a time (27,127 < 2 x 16,011), and under
    evicted_only a host copy of a prompt still on the device is never reclaimed. At the replay the
    host holds the fifth prompt's mirror, so the storage hit (all 16,010 tokens are in the store:
    prompts 1, 3 and 5 were stored, 2 and 4 failed their host backup) gets the 27,127 - 16,011 =
    11,116 free host pages, which 0.5.23 takes as a partial prefetch. A mechanism, not a held
    figure: the report does not print its write_through restore length."""
    assert _sglang_39444("write_through") == (0, 0, 27_127 - PROMPT)
