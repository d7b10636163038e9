"""match_prefix, the lossless split and insert (reference sections 1.2-1.4, 2.1-2.3, 2.9; invariants 10-12)."""

from __future__ import annotations

import pytest
from conftest import new_cache, node_at, put, settle

from hicache_sim.core import CacheStateError, TransferKind, check


def snapshot(node):
    return (
        list(node.key),
        None if node.value is None else list(node.value),
        None if node.host_value is None else list(node.host_value),
        None if node.hashes is None else list(node.hashes),
    )


# ------------------------------------------------------------------------------------------ match


def test_match_on_empty_tree_is_empty_and_ends_at_root():
    c = new_cache()
    m = c.match_prefix([1, 2, 3])
    assert m.device_pages == [] and m.host_hit_pages == 0
    assert m.last_node is m.last_device_node is m.last_host_node is c.root


def test_match_returns_the_device_prefix_and_its_slots():
    c = new_cache()
    put(c, [1, 2, 3])
    pages = list(node_at(c, [1, 2, 3]).value)
    m = c.match_prefix([1, 2, 3, 7, 8])
    assert m.device_pages == pages
    assert m.last_node is m.last_device_node is node_at(c, [1, 2, 3])
    assert c.match_prefix([5, 1, 2]).device_pages == []


def test_match_inside_a_node_splits_it_and_returns_the_upper_half():
    c = new_cache()
    put(c, [1, 2, 3, 4])
    full = list(node_at(c, [1, 2, 3, 4]).value)
    m = c.match_prefix([1, 2, 9])
    assert m.device_pages == full[:2]
    upper = node_at(c, [1, 2])
    lower = node_at(c, [1, 2, 3, 4])
    assert m.last_node is upper and upper.children == {3: lower} and lower.parent is upper
    assert upper.value == full[:2] and lower.value == full[2:]
    check(c)


def test_match_reports_host_hit_of_the_evicted_tail():
    # write_through backs everything up; evicting the leaf leaves it H-only: a host hit after the device prefix.
    c = new_cache(device_pages=16, host_pages=16)
    put(c, [1, 2])
    put(c, [1, 2, 3, 4, 5])
    settle(c)
    assert c.evict(3) == 3
    m = c.match_prefix([1, 2, 3, 4, 5, 6])
    assert len(m.device_pages) == 2 and m.host_hit_pages == 3
    assert m.last_device_node is node_at(c, [1, 2])
    assert m.last_node is node_at(c, [1, 2, 3, 4, 5]) and m.last_node.value is None
    assert m.last_host_node is m.last_node
    check(c)


def test_match_never_counts_an_insert_hit():
    c = new_cache()
    put(c, [1, 2])
    n = node_at(c, [1, 2])
    before = n.hit_count
    for _ in range(3):
        c.match_prefix([1, 2])
    assert n.hit_count == before


# ------------------------------------------------------------------------------------------ split


@pytest.mark.parametrize("at", [1, 2, 3])
def test_split_is_lossless(at):
    """Invariant 10: upper + lower == original (keys, device, host, hashes); lock, hit count, priority
    copied; a match gives the same pages before and after the split."""
    c = new_cache(device_pages=16, host_pages=16, storage=True)
    keys = [1, 2, 3, 4]
    put(c, keys, priority=3)
    put(c, keys, priority=3)
    node = node_at(c, keys)
    c.inc_lock_ref(node)
    settle(c, held=())
    before = snapshot(node)
    lock, hits, prio = node.lock_ref, node.hit_count, node.priority
    assert hits == 2 and lock == 1 and prio == 3 and node.host_value is not None and node.hashes
    match_before = c.match_prefix(keys).device_pages
    upper = c._split(node, at)
    lo, up = snapshot(node), snapshot(upper)
    assert [up[i] + lo[i] for i in range(4)] == list(before)
    assert (upper.lock_ref, upper.hit_count, upper.priority) == (lock, hits, prio)
    assert (node.lock_ref, node.hit_count, node.priority) == (lock, hits, prio)
    assert upper.parent is c.root and node.parent is upper and c.root.children[1] is upper
    assert c.match_prefix(keys).device_pages == match_before
    check(c)
    c.dec_lock_ref(node)
    check(c)


def test_split_keeps_hash_chain_and_equal_pages_under_different_prefixes_hash_differently():
    """Invariant 19: page i's hash depends on every earlier page; hashes survive splits."""
    c = new_cache(device_pages=32, storage=True)
    put(c, [1, 2, 3])
    put(c, [9, 2, 3])
    a, b = node_at(c, [1, 2, 3]), node_at(c, [9, 2, 3])
    assert a.hashes[1:] != b.hashes[1:]
    whole = list(a.hashes)
    c.match_prefix([1, 2])
    assert node_at(c, [1, 2]).hashes + node_at(c, [1, 2, 3]).hashes == whole
    put(c, [1, 2, 3, 4])
    child = node_at(c, [1, 2, 3, 4])
    assert len(child.hashes) == 1 and child.hashes[0] not in whole
    # A child's chain continues from its parent's last page: the same page under another path differs.
    put(c, [1, 2, 4])
    assert node_at(c, [1, 2, 4]).hashes[0] != child.hashes[0]


# ----------------------------------------------------------------------------------------- insert


def test_insert_returns_the_already_resident_prefix_and_round_trips():
    """Invariant 12: insert returns the device-resident matched length; match(K) then returns V."""
    c = new_cache(device_pages=16)
    pages = c.device.alloc(3)
    assert c.insert([1, 2, 3], pages) == 0
    assert c.match_prefix([1, 2, 3]).device_pages == pages
    more = c.device.alloc(5)
    assert c.insert([1, 2, 3, 4, 5], more) == 3
    c.device.free(more[:3])  # the caller frees its duplicates of the resident prefix
    assert c.match_prefix([1, 2, 3, 4, 5]).device_pages == pages + more[3:]
    check(c)


def test_insert_with_fewer_pages_than_keys_raises():
    c = new_cache()
    with pytest.raises(CacheStateError):
        c.insert([1, 2, 3], c.device.alloc(2))


def test_insert_reattaches_device_pages_to_h_only_nodes():
    c = new_cache(device_pages=16, host_pages=16)
    put(c, [1, 2, 3])
    settle(c)
    node = node_at(c, [1, 2, 3])
    host = list(node.host_value)
    c.evict(3)
    assert node.state() == "H"
    fresh = c.device.alloc(3)
    # The re-attached pages are not "already resident": the returned prefix excludes them.
    assert c.insert([1, 2, 3], fresh) == 0
    assert node.state() == "D+H" and node.value == fresh and node.host_value == host
    assert c.counters.reattached_pages == 3
    assert c.take_transfers() == []  # a D+H node is not backed up again
    check(c)


def test_insert_reattach_of_a_partial_h_only_node_splits_it():
    c = new_cache(device_pages=16, host_pages=16)
    put(c, [1, 2, 3, 4])
    settle(c)
    c.evict(4)
    fresh = c.device.alloc(2)
    assert c.insert([1, 2], fresh) == 0
    assert node_at(c, [1, 2]).state() == "D+H" and node_at(c, [1, 2, 3, 4]).state() == "H"
    check(c)


def test_write_through_backs_up_every_new_node_at_insert_and_locks_until_the_ack():
    c = new_cache(device_pages=16, host_pages=16, write_policy="write_through")
    put(c, [1, 2, 3])
    node = node_at(c, [1, 2, 3])
    (t,) = c.take_transfers()
    assert t.kind is TransferKind.D2H and t.reason == "write_through" and t.pages == 3
    assert t.device_pages == node.value and t.host_pages == node.host_value
    assert node.hit_count == 1 and node.lock_ref == 1 and c.protected_pages == 3
    check(c)
    c.complete(t)
    assert node.lock_ref == 0 and c.evictable_pages == 3 and c.protected_pages == 0
    assert c.counters.backups == 1 and c.counters.backup_pages == 3
    check(c)


def test_write_through_selective_backs_up_on_the_second_insert_hit():
    c = new_cache(device_pages=16, host_pages=16, write_policy="write_through_selective")
    put(c, [1, 2, 3])
    node = node_at(c, [1, 2, 3])
    assert node.hit_count == 1 and node.host_value is None and c.take_transfers() == []
    put(c, [1, 2, 3])
    assert node.hit_count == 2 and node.host_value is not None
    assert [t.reason for t in c.take_transfers()] == ["write_through"]
    settle(c)


def test_chunked_inserts_neither_count_hits_nor_back_up_in_hiradix_cache():
    c = new_cache(device_pages=16, host_pages=16, write_policy="write_through", checkpoint_hits="never")
    put(c, [1, 2, 3], chunked=True)
    node = node_at(c, [1, 2, 3])
    assert node.hit_count == 0 and node.host_value is None and c.take_transfers() == []
    put(c, [1, 2, 3])  # the request's final (non-chunked) insert
    assert node.hit_count == 1 and node.host_value is not None
    settle(c)


def test_write_back_never_backs_up_at_insert_and_never_counts_hits():
    c = new_cache(device_pages=16, host_pages=16, write_policy="write_back")
    for _ in range(3):
        put(c, [1, 2, 3])
    node = node_at(c, [1, 2, 3])
    assert node.hit_count == 0 and node.host_value is None
    assert c.take_transfers() == [] and c.host.available() == 16
    check(c)


def test_insert_propagates_the_max_priority_along_the_path():
    c = new_cache(device_pages=16)
    put(c, [1, 2], priority=5)
    put(c, [1, 2, 3], priority=2)
    assert node_at(c, [1, 2]).priority == 5 and node_at(c, [1, 2, 3]).priority == 2
    put(c, [1, 2, 3], priority=7)
    assert node_at(c, [1, 2]).priority == 7 and node_at(c, [1, 2, 3]).priority == 7


def test_no_host_tier_means_no_backup():
    c = new_cache(device_pages=16, host_pages=0, write_policy="write_through")
    put(c, [1, 2, 3])
    assert node_at(c, [1, 2, 3]).host_value is None and c.take_transfers() == []
    assert node_at(c, [1, 2, 3]).hit_count == 1


# ------------------------------------------------------------------------------------------ locks


def test_lock_ref_walks_to_the_root_and_moves_pages_between_evictable_and_protected():
    c = new_cache(device_pages=16)
    put(c, [1, 2])
    put(c, [1, 2, 3])
    parent, leaf = node_at(c, [1, 2]), node_at(c, [1, 2, 3])
    assert c.inc_lock_ref(leaf) == 3 and parent.lock_ref == leaf.lock_ref == 1
    assert c.inc_lock_ref(parent) == 0 and parent.lock_ref == 2  # nothing newly protected
    assert (c.evictable_pages, c.protected_pages) == (0, 3)
    assert c.dec_lock_ref(leaf) == 1 and (c.evictable_pages, c.protected_pages) == (1, 2)
    assert c.dec_lock_ref(parent) == 2 and c.protected_pages == 0
    check(c)


def test_unlocking_or_unpinning_below_zero_raises():
    c = new_cache(device_pages=16, host_pages=16)
    put(c, [1, 2])
    settle(c)
    node = node_at(c, [1, 2])
    with pytest.raises(CacheStateError):
        c.dec_lock_ref(node)
    with pytest.raises(CacheStateError):
        c.release_host(node)
