"""write_back in the unified tree core (SGLang 0.5.23): full host duplicates are reclaimed before
host-only copies, in the order they became duplicates, sparing device-eviction candidates in a first
pass; loads in flight are excluded until their ack; each victim is written and demoted at once, with
nothing pinned (reference section 2.14; invariant 23). Trees are page_size 4, keys are page keys."""

from __future__ import annotations

import pytest
from conftest import new_cache, node_at, put, settle

from hicache_sim.core import check


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
