"""check() fails, with the rule's whole message, when exactly one thing is corrupted. The slot rule
(9) is checked by a vectorised count with a slow walk that names the culprit: both paths are covered
here (a leak, a page owned twice, a page twice in the free list, a page out of range)."""

from __future__ import annotations

import pytest
from conftest import new_cache, node_at, put, settle

from hicache_sim.core import InvariantError, check
from hicache_sim.core.policies import HOST_EVICTION_RULES


@pytest.fixture
def cache():
    c = new_cache(page_size=1, device_pages=16, host_pages=16, write_policy="write_through")
    put(c, [1, 2, 3])
    put(c, [1, 2, 9, 9])
    settle(c)
    return c


def test_a_settled_cache_passes(cache):
    check(cache)


def test_leaked_device_page(cache):
    cache.device.alloc(1)  # handed out, owned by nobody
    with pytest.raises(InvariantError) as e:
        check(cache)
    assert str(e.value) == "[9 slots] device pool: 15 pages accounted for, pool has 16 (1 leaked)"


def test_held_pages_count_as_owned(cache):
    held = cache.device.alloc(2)
    check(cache, held_device_pages=held)


def test_device_page_owned_twice(cache):
    a, b = node_at(cache, [1, 2]), node_at(cache, [1, 2, 3])
    stolen = a.value[0]
    cache.device.free([b.value[0]])
    b.value[0] = stolen
    with pytest.raises(InvariantError) as e:
        check(cache)
    assert str(e.value) == f"[9 slots] device page {stolen} held by node {b.id} and by node {a.id}"


def test_host_page_twice_in_the_free_list(cache):
    free = cache.host.recycled_pages()
    page = node_at(cache, [1, 2, 3]).host_value[0]
    cache.host._free.append(page)  # freed behind the tree's back, still owned
    assert page not in free
    with pytest.raises(InvariantError) as e:
        check(cache)
    assert str(e.value) == f"[9 slots] host page {page} held by node {node_at(cache, [1, 2, 3]).id} and by free list"


def test_device_page_never_handed_out(cache):
    node = node_at(cache, [1, 2, 3])
    cache.device.free([node.value[0]])
    node.value[0] = 15  # beyond every slot the pool handed out
    fresh = cache.device.fresh_start
    with pytest.raises(InvariantError) as e:
        check(cache)
    want = f"[9 slots] device page 15 held by node {node.id} was never handed out (pool has {fresh} in use or freed)"
    assert str(e.value) == want


# ------------------------------------------------- one corruption per rule, the whole message asserted


def _fails_with(cache, message: str) -> None:
    with pytest.raises(InvariantError) as e:
        check(cache)
    assert str(e.value) == message


def test_shape_node_reachable_twice(cache):
    a, leaf = node_at(cache, [1, 2]), node_at(cache, [1, 2, 3])
    other = node_at(cache, [1, 2, 9, 9])
    other.children[3] = leaf  # also under another parent
    _fails_with(cache, f"[1 shape] node {leaf.id} is child of {other.id} but its parent is {a.id}")


def test_shape_child_indexed_under_the_wrong_key(cache):
    a, leaf = node_at(cache, [1, 2]), node_at(cache, [1, 2, 3])
    a.children[7] = a.children.pop(3)
    _fails_with(cache, f"[1 shape] node {leaf.id} indexed under 7 but its first key is 3")


def test_lengths_device_pages_vs_keys(cache):
    leaf = node_at(cache, [1, 2, 3])
    leaf.value = [*leaf.value, 15]
    _fails_with(cache, f"[3 lengths] node {leaf.id}: 2 device pages for 1 keys")


def test_device_prefix_closure(cache):
    a, leaf = node_at(cache, [1, 2]), node_at(cache, [1, 2, 3])
    a.value = None  # the parent left the device, its child did not
    _fails_with(cache, f"[4 device prefix-closure] node {leaf.id} is on device but its parent {a.id} is not")


def test_no_empty_nodes(cache):
    a, leaf = node_at(cache, [1, 2]), node_at(cache, [1, 2, 3])
    leaf.value = leaf.host_value = None
    a.n_dev_children -= 1  # the parent's counts agree: only the empty node is wrong
    a.n_host_children -= 1
    _fails_with(cache, f"[5 no empty nodes] node {leaf.id} has neither device nor host copy")


def test_host_prefix_closure_under_write_through(cache):
    a, leaf = node_at(cache, [1, 2]), node_at(cache, [1, 2, 3])
    a.host_value = None  # the child stays backed up
    _fails_with(cache, f"[15 host prefix-closure] node {leaf.id} is backed up but its parent {a.id} is not")


def test_host_boundary_under_the_boundary_rule():
    c = new_cache(page_size=1, device_pages=16, host_pages=16, host_eviction="boundary", write_policy="write_back")
    put(c, [1, 2, 3])
    put(c, [1, 2, 9])
    settle(c)
    a, leaf = node_at(c, [1, 2]), node_at(c, [1, 2, 3])
    leaf.host_value, leaf.value = leaf.value, None  # H-only, under a parent without host copy
    a.n_dev_children -= 1
    a.n_host_children += 1
    _fails_with(c, f"[15 host boundary] H-only node {leaf.id} hangs under node {a.id} without host copy")


def test_child_counts(cache):
    a = node_at(cache, [1, 2])
    a.n_dev_children += 1
    _fails_with(cache, f"[8 child counts] node {a.id} counts 3 device children")


def test_locks_child_locked_more_than_parent(cache):
    a, leaf = node_at(cache, [1, 2]), node_at(cache, [1, 2, 3])
    leaf.lock_ref = 1
    _fails_with(cache, f"[6 locks] node {leaf.id} lock_ref 1 > parent {a.id} lock_ref 0")


def test_locks_negative_host_ref(cache):
    leaf = node_at(cache, [1, 2, 3])
    leaf.host_ref = -1
    _fails_with(cache, f"[6 locks] node {leaf.id} lock_ref 0 host_ref -1")


def test_accounting_evictable_bumped(cache):
    cache.evictable_pages += 1
    _fails_with(cache, "[7 accounting] evictable 6 + protected 0 != 5 device pages in the tree")


def test_accounting_protected_bumped(cache):
    cache.protected_pages += 1
    cache.evictable_pages -= 1
    _fails_with(cache, "[7 accounting] evictable 4 != 5 unlocked device pages")


@pytest.mark.parametrize("field", ["tree_host_pages", "mirror_pages"])
def test_accounting_residency_count_drifted(cache, field):
    """A running residency count out of step with the tree (a mutator that forgot to update it); the
    device count is evictable + protected, checked above."""
    want = cache.residency_walk()
    walk = (want["host_pages"], want["mirror_pages"])
    counted = list(walk)
    setattr(cache, field, getattr(cache, field) + 1)
    counted[["tree_host_pages", "mirror_pages"].index(field)] += 1
    _fails_with(cache, f"[7 accounting] residency counts (host, mirror) {tuple(counted)} != {walk} from the tree")


def test_device_candidate_missing(cache):
    leaf = node_at(cache, [1, 2, 3])
    del cache._dev_cands[leaf]
    _fails_with(cache, f"[8 device leaves] candidate set differs: extra nodes [], missing [{leaf.id}]")


def test_device_candidate_key_changed_behind_the_heaps_back(cache):
    leaf = node_at(cache, [1, 2, 3])
    leaf.last_access += 1000  # touched without re-queueing
    _fails_with(cache, f"[8 device leaves] node {leaf.id} queued under a stale key")


def test_host_candidate_extra():
    c = new_cache(page_size=1, device_pages=16, host_pages=16, host_eviction="reclaim_mirrors")
    put(c, [1, 2, 3])
    put(c, [1, 2, 9])
    settle(c)
    a = node_at(c, [1, 2])
    c._host_cands[a] = c.host_rule.key(c, a)  # a parent with host children is no host leaf
    _fails_with(c, f"[8 host leaves] candidate set differs: extra nodes [{a.id}], missing []")


@pytest.mark.parametrize("rule", HOST_EVICTION_RULES.names())
def test_host_candidate_key_changed_behind_the_heaps_back(rule):
    # An H-only leaf's key is a pure function of the node under every rule: the checker recomputes it.
    c = new_cache(page_size=1, device_pages=16, host_pages=16, host_eviction=rule)
    put(c, [1, 2, 3])
    put(c, [1, 2, 9, 9])
    settle(c)
    assert c.evict(1) == 1
    leaf = node_at(c, [1, 2, 3])
    assert leaf.state() == "H" and leaf in c._host_cands
    check(c)
    leaf.last_access += 1000  # touched without re-queueing
    _fails_with(c, f"[8 host leaves] node {leaf.id} queued under a stale key")


def test_a_mirror_missing_from_reclaim_mirrors_own_heap():
    # reclaim_mirrors weighs the newest mirror (the top of its own heap) against the oldest H-only copy:
    # a mirror candidate absent from that heap could never be reclaimed while H-only copies remain.
    c = new_cache(page_size=1, device_pages=16, host_pages=16, host_eviction="reclaim_mirrors")
    put(c, [1, 2, 3])
    settle(c)
    m = node_at(c, [1, 2, 3])
    assert m.state() == "D+H" and m in c._host_cands
    check(c)
    k = c._host_cands[m]
    c.host_rule._mirrors[:] = [e for e in c.host_rule._mirrors if e[-1] is not m]
    _fails_with(
        c, f"[8 host leaves] mirror node {m.id} is a candidate under key {k!r} but not in the rule's mirror heap"
    )


def test_a_mirror_requeued_when_reclaim_mirrors_compacts_its_heap_stays_in_it():
    # The rule's heap is rebuilt from the candidate dict when stale entries dominate; the node whose
    # key triggers the rebuild is stored in that dict only after its key is returned, so its new entry
    # must be pushed after the rebuild (it was lost before, and the mirror became unreclaimable).
    c = new_cache(page_size=1, device_pages=16, host_pages=16, host_eviction="reclaim_mirrors")
    put(c, [1, 2, 3])
    settle(c)
    m = node_at(c, [1, 2, 3])
    stale = [((2, 10**9), 10**6 + i, m) for i in range(2 * len(c._host_cands) + 1025)]
    c.host_rule._mirrors.extend(stale)  # entries under a key m does not have: stale
    c.match_prefix([1, 2, 3])  # touches m: a new key, pushed as the heap is compacted
    assert len(c.host_rule._mirrors) < len(stale)
    check(c)


def test_a_mirror_key_under_reclaim_mirrors_is_recomputed_by_the_checker():
    c = new_cache(page_size=1, device_pages=16, host_pages=16, host_eviction="reclaim_mirrors")
    put(c, [1, 2, 3])
    settle(c)
    m = node_at(c, [1, 2, 3])
    m.last_access += 1000  # touched without re-queueing either side
    c._dev_cands[m] = c.strategy.key(m)
    c._dev_heap.append((c._dev_cands[m], m.id, 0, m))
    _fails_with(c, f"[8 host leaves] node {m.id} queued under a stale key")


def test_device_candidate_without_a_heap_entry(cache):
    leaf = node_at(cache, [1, 2, 3])
    k = cache._dev_cands[leaf]
    cache._dev_heap[:] = [e for e in cache._dev_heap if e[-1] is not leaf]
    msg = f"node {leaf.id} is a candidate under key {k!r} but no heap entry holds that key"
    _fails_with(cache, f"[8 device leaves] {msg}")


def test_pending_write_of_an_unlocked_node(cache):
    leaf = node_at(cache, [1, 2, 3])
    cache.ongoing_write[999] = (leaf, 1)
    _fails_with(cache, f"[15 write_backup] node {leaf.id} has a pending write 999 but is not locked")


def test_pending_load_of_an_unlocked_node(cache):
    leaf = node_at(cache, [1, 2, 3])
    cache.ongoing_load[999] = leaf
    _fails_with(cache, f"[16 load_back] node {leaf.id} has a pending load 999 but is not locked")


def test_prefetch_occupancy(cache):
    cache.prefetch_occupied_pages += 2
    _fails_with(cache, "[17 prefetch] occupied 2 pages != 0 in ongoing ops")


def test_root_lock(cache):
    cache.root.lock_ref = 0
    _fails_with(cache, "[6 locks] root lock_ref is 0, must be >= 1")


def test_untracked_host_duplicate():
    """write_back (unified): [1, 2, 3] is written back when [7, 8, 9] needs the device, then loaded
    back; at the load's ack it is a full host duplicate, which must be tracked."""
    c = new_cache(page_size=1, device_pages=3, host_pages=8, write_policy="write_back", load_back_threshold_tokens=1)
    put(c, [1, 2, 3])
    put(c, [7, 8, 9])
    dup = node_at(c, [1, 2, 3])
    assert c.load_back(dup) is dup
    settle(c)
    assert c._track_dups and c.is_settled_duplicate(dup)
    del c.host_duplicates[dup]
    _fails_with(c, f"[23 host duplicates] node {dup.id} is D+H with nothing in flight but not tracked")


def test_tracked_duplicate_no_longer_in_the_tree():
    c = new_cache(page_size=1, device_pages=3, host_pages=8, write_policy="write_back", load_back_threshold_tokens=1)
    put(c, [1, 2, 3])
    settle(c)
    ghost = node_at(c, [1, 2, 3])
    c.root.children.pop(1)  # gone from the tree, its slots freed, but still tracked
    c.device.free(ghost.value)
    c._dev_cands.pop(ghost, None)
    c.evictable_pages -= 3
    c.host_duplicates[ghost] = None
    _fails_with(c, f"[23 host duplicates] node {ghost.id} is tracked as a duplicate but is no longer in the tree")
