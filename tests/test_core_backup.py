"""write_backup and its ack, write_back staging with the drop-subtree fallback, storage backup after
the D2H ack (reference sections 2.4-2.6, 2.12; invariant 15)."""

from __future__ import annotations

import pytest
from conftest import new_cache, node_at, put, settle

from hicache_sim.core import CacheStateError, TransferKind, check


def test_write_backup_never_backs_up_twice_and_allocates_exactly_the_node_length():
    c = new_cache(device_pages=16, host_pages=16)
    put(c, [1, 2, 3])
    node = node_at(c, [1, 2, 3])
    assert c.host.used() == 3
    assert c.write_backup(node) == 0  # already has a host copy
    put(c, [1, 2, 3])
    assert c.host.used() == 3 and len(c.take_transfers()) == 1
    settle(c)


def test_write_backup_of_an_evicted_node_is_refused():
    c = new_cache(device_pages=16, host_pages=16, write_policy="write_back")
    put(c, [1, 2])
    c.evict(2)
    assert c.write_backup(node_at(c, [1, 2])) == 0


def test_write_through_ancestors_are_locked_until_the_ack():
    c = new_cache(device_pages=16, host_pages=16)
    put(c, [1, 2])
    settle(c)
    put(c, [1, 2, 3, 4])
    parent, child = node_at(c, [1, 2]), node_at(c, [1, 2, 3, 4])
    (t,) = c.take_transfers()
    assert child.lock_ref == 1 and parent.lock_ref == 1
    assert c.evict(100) == 0  # nothing evictable while the copy is in flight
    c.complete(t)
    assert child.lock_ref == parent.lock_ref == 0
    assert c.evict(100) == 4
    check(c)


def test_a_transfer_completes_once():
    c = new_cache(device_pages=16, host_pages=16)
    put(c, [1, 2])
    (t,) = c.take_transfers()
    c.complete(t)
    try:
        c.complete(t)
    except CacheStateError as e:
        assert "twice" in str(e)
    else:
        raise AssertionError("second completion accepted")


def test_parent_backup_chain_backs_up_unbacked_ancestors_first():
    # 2026 unified tree (parent_backup chain): a node whose parent has no host copy brings its
    # ancestors along, parent first, so the host set stays prefix-closed. (Checkpoints that count no
    # insert-hit leave both nodes without a host copy.)
    c = new_cache(device_pages=16, host_pages=16, semantics="2026", checkpoint_hits="never")
    put(c, [1, 2], chunked=True)
    put(c, [1, 2, 3], chunked=True)
    child = node_at(c, [1, 2, 3])
    assert c.write_backup(child) == 1
    assert node_at(c, [1, 2]).state() == "D+H" and child.state() == "D+H"
    assert [t.node_ids for t in c.take_transfers()] == [[node_at(c, [1, 2]).id], [child.id]]
    settle(c)


def test_parent_backup_skip_refuses_a_node_whose_parent_has_no_host_copy():
    c = new_cache(device_pages=16, host_pages=16, parent_backup="skip", checkpoint_hits="never")
    put(c, [1, 2], chunked=True)
    put(c, [1, 2, 3], chunked=True)
    assert c.write_backup(node_at(c, [1, 2, 3])) == 0
    assert c.counters.backup_skipped_parent == 1 and c.host.used() == 0
    check(c)


# ------------------------------------------------------------------------------------- write_back


def test_write_back_stages_the_victim_to_host_and_frees_its_device_pages():
    c = new_cache(device_pages=16, host_pages=16, write_policy="write_back")
    put(c, [1, 2, 3])
    node = node_at(c, [1, 2, 3])
    dev = list(node.value)
    assert c.evict(1) == 3
    (t,) = c.take_transfers()
    assert t.kind is TransferKind.D2H and t.reason == "write_back" and t.blocking
    assert t.device_pages == dev and t.host_pages == node.host_value
    # The scheduler waited for the copy inside evict: device pages free, node H-only and unpinned.
    assert node.state() == "H" and node.host_ref == 0 and node.lock_ref == 0
    assert c.device.available() == 16 and c.counters.device_demoted_pages == 3
    c.complete(t)
    check(c)
    # A later request finds it as a host hit.
    assert c.match_prefix([1, 2, 3]).host_hit_pages == 3


def test_write_back_drops_the_victim_when_the_host_is_full():
    """Upstream #28614 / #27108: write_backup fails at eviction -> drop without backup; nothing leaks."""
    c = new_cache(device_pages=16, host_pages=2, write_policy="write_back")
    put(c, [1, 2, 3])
    assert c.evict(1) == 3
    assert c.root.children == {} and c.device.available() == 16 and c.host.available() == 2
    assert c.counters.device_dropped_subtree_pages == 3 and c.counters.backup_failures == 1
    assert c.take_transfers() == []
    check(c)


def test_write_back_evicts_host_only_pages_to_make_room():
    c = new_cache(device_pages=16, host_pages=4, write_policy="write_back")
    put(c, [1, 2, 3])
    c.evict(1)
    put(c, [5, 6, 7])
    assert c.evict(1) == 3  # [5, 6, 7] needs 3 host pages: [1, 2, 3] (H-only) is evicted from host
    assert 1 not in c.root.children and node_at(c, [5, 6, 7]).state() == "H"
    assert c.counters.host_deleted_pages == 3 and c.counters.device_dropped_subtree_pages == 0
    settle(c)


def test_write_back_drop_is_refused_when_the_subtree_has_a_pinned_host_copy():
    c = new_cache(device_pages=4, host_pages=2, write_policy="write_back")
    put(c, [1, 2])
    put(c, [1, 2, 3])
    c.evict(1)  # [3] is written back: H-only under the D-only [1, 2]
    a, b = node_at(c, [1, 2]), node_at(c, [1, 2, 3])
    assert b.state() == "H" and a.state() == "D"
    c.protect_host(b)  # e.g. a storage backup in flight
    assert c.evict(2) == 0  # a's backup fails (no room) and dropping its subtree would free b: refused
    assert a.state() == "D" and b.state() == "H"
    check(c)
    c.release_host(b)
    # Refused once is not forgotten: a is still an eviction candidate and goes now.
    assert c.evict(2) == 2
    check(c)


def test_write_back_of_many_victims_flushes_once_at_the_end():
    c = new_cache(device_pages=16, host_pages=16, write_policy="write_back")
    for k in (1, 2, 3):
        put(c, [k * 10, k * 10 + 1])
    assert c.evict(6) == 6
    ts = c.take_transfers()
    assert len(ts) == 3 and all(t.blocking for t in ts)
    assert all(n.state() == "H" and n.host_ref == 0 for n in c.root.children.values())
    settle(c)


# ------------------------------------------------------------------------------- storage backup


def test_storage_backup_starts_after_the_d2h_ack_and_pins_host_until_its_own_ack():
    c = new_cache(device_pages=16, host_pages=16, storage=True)
    put(c, [1, 2, 3])
    node = node_at(c, [1, 2, 3])
    (d2h,) = c.take_transfers()
    assert d2h.kind is TransferKind.D2H and len(c.storage) == 0
    c.complete(d2h)
    (h2s,) = c.take_transfers()
    assert h2s.kind is TransferKind.H2S and h2s.reason == "storage_backup"
    assert h2s.page_hashes == node.hashes and h2s.host_pages == node.host_value
    assert node.host_ref == 1 and node.lock_ref == 0
    assert len(c.storage) == 0  # not durable before the ack
    check(c)
    c.complete(h2s)
    assert node.host_ref == 0 and len(c.storage) == 3 and all(h in c.storage for h in node.hashes)
    assert c.counters.storage_backups == 1 and c.counters.storage_backup_pages == 3
    # The host mirror stays after the storage ack (reference 2.12).
    assert node.state() == "D+H"
    check(c)


def test_storage_backup_covers_a_node_split_while_its_write_was_pending():
    c = new_cache(device_pages=16, host_pages=16, storage=True)
    put(c, [1, 2, 3, 4])
    c.match_prefix([1, 2, 9])  # splits the node before the D2H ack
    upper, lower = node_at(c, [1, 2]), node_at(c, [1, 2, 3, 4])
    assert upper.lock_ref == lower.lock_ref == 1
    (d2h,) = c.take_transfers()
    c.complete(d2h)
    assert upper.lock_ref == lower.lock_ref == 0
    (h2s,) = c.take_transfers()
    assert h2s.node_ids == [upper.id, lower.id] and h2s.pages == 4
    assert h2s.page_hashes == upper.hashes + lower.hashes
    c.complete(h2s)
    assert upper.host_ref == lower.host_ref == 0
    check(c)


def test_storage_is_a_bounded_lru_index():
    from hicache_sim.core.pools import StorageIndex

    s = StorageIndex(3)
    assert s.put([1, 2, 3]) == 3
    assert s.prefix_hits([1, 2]) == 2  # 1 and 2 become most recently used
    s.put([4])
    assert 3 not in s and s.evicted_pages == 1
    assert s.prefix_hits([1, 2, 3, 4]) == 2  # a miss ends the run


@pytest.mark.parametrize(("mode", "evicted", "host_hit_20"), [("shortfall", 1, 1), ("full_retry", 2, 0)])
def test_host_backup_eviction_shortfall_evicts_only_what_is_missing(mode, evicted, host_hit_20):
    """Device 3 pages, host 4, page = 1 key. [10], [20], [30] fill the device and take 3 host pages;
    [40, 41] evicts [10] and [20] from the device (H-only). Its backup needs 2 host pages and 1 is
    free: ``shortfall`` evicts the 1 missing (the LRU H-only leaf, [10]); ``full_retry`` evicts the
    node's whole 2 pages ([10] and [20]) before retrying. Both backups then succeed."""
    c = new_cache(page_size=1, device_pages=3, host_pages=4, host_backup_eviction=mode)
    for k in (10, 20, 30):
        put(c, [k])
        settle(c)
    put(c, [40, 41])
    settle(c)
    assert c.counters.host_evicted_pages == evicted
    assert c.counters.backup_failures == 0
    assert c.match_prefix([20]).host_hit_pages == host_hit_20


# Backups (counters.backups) after a request for [1, 2, 3], a second one for the same prompt, and one
# for [5, 6, 7, 8], which pushes [1, 2, 3] off the 4-page device. Derived from each policy's rule:
# copy every new node at its first insert (so [5, 6, 7, 8] too), at its second insert-hit, or only
# when it leaves the GPU.
EXPECTED_BACKUPS = {
    "write_through": (1, 1, 2),
    "write_through_selective": (0, 1, 1),
    "write_back": (0, 0, 1),
}


def test_every_registered_write_policy_is_covered():
    from hicache_sim.core.policies import WRITE_POLICIES

    assert set(WRITE_POLICIES.names()) == set(EXPECTED_BACKUPS)


@pytest.mark.parametrize("policy", sorted(EXPECTED_BACKUPS))
def test_when_each_write_policy_copies_to_host(policy):
    c = new_cache(page_size=1, device_pages=4, host_pages=16, write_policy=policy)
    seen = []
    for keys in ([1, 2, 3], [1, 2, 3], [5, 6, 7, 8]):
        put(c, keys)
        settle(c)
        seen.append(c.counters.backups)
    assert tuple(seen) == EXPECTED_BACKUPS[policy]
    assert c.match_prefix([1, 2, 3]).host_hit_pages == 3
