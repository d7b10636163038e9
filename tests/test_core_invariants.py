"""check() fails, with the rule's whole message, when exactly one thing is corrupted. The slot rule
(9) is checked by a vectorised count with a slow walk that names the culprit: both paths are covered
here (a leak, a page owned twice, a page twice in the free list, a page out of range)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import new_cache, node_at, put, settle

from hicache_sim.core import InvariantError, check
from hicache_sim.core.policies import HOST_EVICTION_RULES
from hicache_sim.core.prefetch_op import HOST_PIN, NO_PIN


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
    leaf = node_at(cache, [1, 2, 3])
    other = node_at(cache, [1, 2, 9, 9])
    other.children[3] = leaf  # also under another parent
    _fails_with(cache, f"[1a reachable once] node {leaf.id} reachable twice")


def test_shape_parent_link(cache):
    a, leaf = node_at(cache, [1, 2]), node_at(cache, [1, 2, 3])
    other = node_at(cache, [1, 2, 9, 9])
    leaf.parent = other  # still a child of a
    _fails_with(cache, f"[1b parent link] node {leaf.id} is child of {a.id} but its parent is {other.id}")


def test_shape_empty_key(cache):
    leaf = node_at(cache, [1, 2, 3])
    leaf.key, leaf.value, leaf.host_value, leaf.hashes = [], [], [], []
    _fails_with(cache, f"[1c key] node {leaf.id} has an empty key")


def test_shape_child_indexed_under_the_wrong_key(cache):
    a, leaf = node_at(cache, [1, 2]), node_at(cache, [1, 2, 3])
    a.children[7] = a.children.pop(3)
    _fails_with(cache, f"[1d child index] node {leaf.id} indexed under 7 but its first key is 3")


def test_lengths_device_pages_vs_keys(cache):
    leaf = node_at(cache, [1, 2, 3])
    leaf.value = [*leaf.value, 15]
    _fails_with(cache, f"[3a device lengths] node {leaf.id}: 2 device pages for 1 keys")


def test_lengths_host_pages_vs_keys(cache):
    leaf = node_at(cache, [1, 2, 3])
    leaf.host_value = [*leaf.host_value, 15]
    _fails_with(cache, f"[3b host lengths] node {leaf.id}: 2 host pages for 1 keys")


def test_lengths_hashes_vs_keys():
    c = new_cache(page_size=1, device_pages=16, host_pages=16, write_policy="write_through", storage=True)
    put(c, [1, 2, 3])
    settle(c)
    node = node_at(c, [1, 2, 3])
    assert node.hashes is not None
    node.hashes = [*node.hashes, 0]
    _fails_with(c, f"[3c hash lengths] node {node.id}: 4 page hashes for 3 keys")


def test_device_prefix_closure(cache):
    a, leaf = node_at(cache, [1, 2]), node_at(cache, [1, 2, 3])
    a.value = None  # the parent left the device, its child did not
    _fails_with(cache, f"[4 device prefix-closure] node {leaf.id} is on device but its parent {a.id} is not")


def test_no_empty_nodes(cache):
    a, leaf = node_at(cache, [1, 2]), node_at(cache, [1, 2, 3])
    leaf.value = leaf.host_value = None
    a.n_dev_children -= 1  # the parent's counts agree: only the empty node is wrong
    a.n_host_children -= 1
    _fails_with(cache, f"[5c no empty nodes] node {leaf.id} has neither device nor host copy")


def test_host_prefix_closure_under_write_through(cache):
    a, leaf = node_at(cache, [1, 2]), node_at(cache, [1, 2, 3])
    a.host_value = None  # the child stays backed up
    _fails_with(cache, f"[15b host prefix-closure] node {leaf.id} is backed up but its parent {a.id} is not")


def test_host_boundary_under_the_boundary_rule():
    c = new_cache(page_size=1, device_pages=16, host_pages=16, host_eviction="boundary", write_policy="write_back")
    put(c, [1, 2, 3])
    put(c, [1, 2, 9])
    settle(c)
    a, leaf = node_at(c, [1, 2]), node_at(c, [1, 2, 3])
    leaf.host_value, leaf.value = leaf.value, None  # H-only, under a parent without host copy
    a.n_dev_children -= 1
    a.n_host_children += 1
    _fails_with(c, f"[15a host boundary] H-only node {leaf.id} hangs under node {a.id} without host copy")


def _buffer_only_cache():
    c = new_cache(
        page_size=1,
        device_pages=16,
        host_pages=16,
        write_policy="write_through",
        storage=True,
        host_memory_mode="buffer_only",
    )
    put(c, [1, 2, 3])
    settle(c)
    return c, node_at(c, [1, 2, 3])


def test_buffer_only_holds_no_host_copy():
    c, node = _buffer_only_cache()
    node.host_value = [0, 1, 2]
    _fails_with(c, f"[5a buffer_only host] node {node.id} holds a host copy in buffer_only mode")


def test_buffer_only_keeps_no_evicted_node():
    c, node = _buffer_only_cache()
    c.device.free(node.value)
    c._dev_cands.pop(node, None)
    c.evictable_pages -= 3
    node.value = None
    c.root.n_dev_children -= 1
    _fails_with(c, f"[5b buffer_only evicted] node {node.id} is evicted but still in the tree")


def test_child_counts_host(cache):
    a = node_at(cache, [1, 2])
    a.n_host_children -= 1
    _fails_with(cache, f"[8b host child counts] node {a.id} counts 1 host children")


def test_locks_an_evicted_node_is_unlocked(cache):
    leaf = node_at(cache, [1, 2, 3])
    a = leaf.parent
    cache.device.free(leaf.value)
    cache._dev_cands.pop(leaf, None)
    cache.evictable_pages -= 1
    leaf.value = None  # now H-only (a host copy remains), yet locked
    a.n_dev_children -= 1
    leaf.lock_ref = 1
    a.lock_ref = 1
    with pytest.raises(InvariantError, match=rf"^\[6a evicted unlocked\] evicted node {leaf.id} has lock_ref 1$"):
        check(cache)


def test_child_counts(cache):
    a = node_at(cache, [1, 2])
    a.n_dev_children += 1
    _fails_with(cache, f"[8a device child counts] node {a.id} counts 3 device children")


def test_locks_child_locked_more_than_parent(cache):
    a, leaf = node_at(cache, [1, 2]), node_at(cache, [1, 2, 3])
    leaf.lock_ref = 1
    _fails_with(cache, f"[6c lock order] node {leaf.id} lock_ref 1 > parent {a.id} lock_ref 0")


def test_locks_negative_host_ref(cache):
    leaf = node_at(cache, [1, 2, 3])
    leaf.host_ref = -1
    _fails_with(cache, f"[6b refs non-negative] node {leaf.id} lock_ref 0 host_ref -1")


def test_accounting_evictable_bumped(cache):
    cache.evictable_pages += 1
    _fails_with(cache, "[7a device accounting] evictable 6 + protected 0 != 5 device pages in the tree")


def test_accounting_protected_bumped(cache):
    cache.protected_pages += 1
    cache.evictable_pages -= 1
    _fails_with(cache, "[7b evictable accounting] evictable 4 != 5 unlocked device pages")


@pytest.mark.parametrize("field", ["tree_host_pages", "mirror_pages"])
def test_accounting_residency_count_drifted(cache, field):
    """A running residency count out of step with the tree (a mutator that forgot to update it); the
    device count is evictable + protected, checked above."""
    want = cache.residency_walk()
    walk = (want["host_pages"], want["mirror_pages"])
    counted = list(walk)
    setattr(cache, field, getattr(cache, field) + 1)
    counted[["tree_host_pages", "mirror_pages"].index(field)] += 1
    _fails_with(
        cache, f"[7c residency counts] residency counts (host, mirror) {tuple(counted)} != {walk} from the tree"
    )


def test_device_candidate_missing(cache):
    leaf = node_at(cache, [1, 2, 3])
    del cache._dev_cands[leaf]
    _fails_with(cache, f"[8c device candidates] candidate set differs: extra nodes [], missing [{leaf.id}]")


def test_device_candidate_key_changed_behind_the_heaps_back(cache):
    leaf = node_at(cache, [1, 2, 3])
    leaf.last_access += 1000  # touched without re-queueing
    _fails_with(cache, f"[8e device heap keys] node {leaf.id} queued under a stale key")


def test_host_candidate_extra():
    c = new_cache(page_size=1, device_pages=16, host_pages=16, host_eviction="reclaim_mirrors")
    put(c, [1, 2, 3])
    put(c, [1, 2, 9])
    settle(c)
    a = node_at(c, [1, 2])
    c._host_cands[a] = c.host_rule.key(c, a)  # a parent with host children is no host leaf
    _fails_with(c, f"[8d host candidates] candidate set differs: extra nodes [{a.id}], missing []")


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
    _fails_with(c, f"[8f host heap keys] node {leaf.id} queued under a stale key")


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
        c, f"[8g host rule index] mirror node {m.id} is a candidate under key {k!r} but not in the rule's mirror heap"
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
    _fails_with(c, f"[8f host heap keys] node {m.id} queued under a stale key")


def test_device_candidate_without_a_heap_entry(cache):
    leaf = node_at(cache, [1, 2, 3])
    k = cache._dev_cands[leaf]
    cache._dev_heap[:] = [e for e in cache._dev_heap if e[-1] is not leaf]
    msg = f"node {leaf.id} is a candidate under key {k!r} but no heap entry holds that key"
    _fails_with(cache, f"[8e device heap keys] {msg}")


def test_pending_write_of_an_unlocked_node(cache):
    leaf = node_at(cache, [1, 2, 3])
    cache.ongoing_write[999] = (leaf, 1)
    _fails_with(cache, f"[15c write pinned] node {leaf.id} has a pending write 999 but is not locked")


def test_pending_load_of_an_unlocked_node(cache):
    leaf = node_at(cache, [1, 2, 3])
    cache.ongoing_load[999] = leaf
    _fails_with(cache, f"[16 load pinned] node {leaf.id} has a pending load 999 but is not locked")


def test_prefetch_occupancy(cache):
    cache.prefetch_occupied_pages += 2
    _fails_with(cache, "[17a prefetch occupancy] occupied 2 pages != 0 in ongoing ops")


def _prefetch_in_flight(c):
    """A prefetch below the (host-backed) node [1, 2, 3], still in flight."""
    op = c.prefetch("r", node_at(c, [1, 2, 3]), list(range(100, 104)), 0.0)
    assert op is not None and c.ongoing_prefetch["r"] is op
    check(c)
    return op


def test_prefetch_anchor_is_pinned():
    """A prefetch holds its anchor (lock or host pin) until it ends: drop the pin behind its back."""
    c = new_cache(
        page_size=1,
        device_pages=16,
        host_pages=64,
        write_policy="write_through",
        storage=True,
        prefetch_threshold_tokens=1,
    )
    put(c, [1, 2, 3])
    settle(c)
    op = _prefetch_in_flight(c)
    assert op.pin is not NO_PIN
    if op.pin is HOST_PIN:
        op.anchor.host_ref -= 1
    else:
        op.anchor.lock_ref -= 1
    with pytest.raises(
        InvariantError, match=rf"^\[17b prefetch anchor pin\] prefetch .*: anchor node {op.anchor.id} is not pinned"
    ):
        check(c)


def test_duplicates_tracked_where_the_configuration_tracks_none(cache):
    assert not cache._track_dups
    cache.host_duplicates[node_at(cache, [1, 2, 3])] = None
    _fails_with(cache, "[23a host duplicates off] 1 nodes tracked but this configuration tracks none")


def _tlru_chain():
    """tlru, [1, 2] then [1, 2, 3, 4] then [1, 2, 9]: the upper node [1, 2] (depth 2) under which [3, 4]
    (depth 4) and [9] (depth 3); the branch's high-water depth is 4."""
    c = new_cache(
        page_size=1,
        device_pages=16,
        eviction_policy="tlru",
        eviction_policy_config={"threshold": 2, "next_prompt_estimate": 0},
    )
    for keys in ([1, 2], [1, 2, 3, 4], [1, 2, 9]):
        put(c, keys)
    check(c)
    return c


def test_tlru_depth():
    c = _tlru_chain()
    node = node_at(c, [1, 2, 9])
    node.tlru_depth = 2
    _fails_with(c, f"[24a depth] node {node.id} depth 2 pages, parent's + its key is 3")


def test_tlru_high_water_depth_below_a_child():
    c = _tlru_chain()
    upper = node_at(c, [1, 2])
    upper.tlru_history = 3
    c._refresh(upper)  # its heap key follows, so only the depth rule is broken
    _fails_with(c, f"[24b high-water depth] node {upper.id} high-water depth 3 pages, below 4 (its depth or a child's)")


def test_root_lock(cache):
    cache.root.lock_ref = 0
    _fails_with(cache, "[6d root lock] root lock_ref is 0, must be >= 1")


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
    _fails_with(c, f"[23c host duplicates tracked] node {dup.id} is D+H with nothing in flight but not tracked")


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
    _fails_with(
        c, f"[23b host duplicates in tree] node {ghost.id} is tracked as a duplicate but is no longer in the tree"
    )


# ------------------------------------------------- one tag per rule, each documented and tested

INVARIANTS = Path(__file__).resolve().parent.parent / "hicache_sim" / "core" / "invariants.py"
SEMANTICS = Path(__file__).resolve().parent.parent / "docs" / "reference" / "sglang-hicache-semantics.md"


def _check_tags() -> list[str]:
    """The tag of every rule ``check()`` can fail with (``_fail("<tag> <name>", ...)`` and the heap-key
    rules passed to ``_check_keys``), in source order."""
    source = INVARIANTS.read_text(encoding="utf-8")
    return re.findall(r'(?:_fail|_check_keys)\(\s*"(\d+[a-z]?) ', source)


def _documented_tags(section: str) -> set[str]:
    """Tags named in the 'verified' column as "`check()` 1a-1d" (a range of letters) or "`check()` 4"."""
    tags = set()
    for num, first, last in re.findall(r"`check\(\)` (\d+)([a-z]?)(?:-\d+([a-z]))?", section):
        letters = [chr(c) for c in range(ord(first), ord(last or first) + 1)] if first else [""]
        tags |= {num + letter for letter in letters}
    return tags


def test_every_check_tag_is_documented_and_tested():
    tags = _check_tags()
    names = re.findall(r'(?:_fail|_check_keys)\(\s*"(\d+[a-z]? [^"]+)"', INVARIANTS.read_text(encoding="utf-8"))
    assert len(set(names)) == len(set(tags)), f"a tag names two rules: {sorted(names)}"
    text = SEMANTICS.read_text(encoding="utf-8")
    section = text[text.index("## 8. Invariants") : text.index("## 9.")]
    assert _documented_tags(section) == set(tags)
    tests = Path(__file__).read_text(encoding="utf-8")
    untested = sorted({name for name in names if f"[{name}]" not in tests and f"\\[{name}\\]" not in tests})
    assert not untested, f"rules with no test asserting their message: {untested}"


def test_the_invariant_table_names_only_tests_that_exist():
    text = SEMANTICS.read_text(encoding="utf-8")
    section = text[text.index("## 8. Invariants") : text.index("## 9.")]
    root = SEMANTICS.parent.parent.parent
    current = ""
    for m in re.finditer(r"`(tests/[\w/]+\.py)(?:::(\w+\*?))?`|`::(\w+\*?)`", section):
        current = m.group(1) or current
        name = m.group(2) or m.group(3)
        source = (root / current).read_text(encoding="utf-8")
        if name:
            pattern = rf"def {name[:-1]}\w*\(" if name.endswith("*") else rf"def {name}\("
            assert re.search(pattern, source), f"{current}::{name} named in section 8 does not exist"
