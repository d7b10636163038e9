"""Device eviction (evict) and host eviction (evict_host): whole nodes or exact pages, every strategy,
every host-eviction rule (reference sections 2.6, 2.7, 3.2, 5.3, 5.4; invariants 13 and 14)."""

from __future__ import annotations

import pytest
from conftest import new_cache, node_at, put, settle

from hicache_sim.core import EVICTION_STRATEGIES, check
from hicache_sim.core.policies import HOST_EVICTION_RULES

# --------------------------------------------------------------------------------- device eviction


def test_eviction_frees_whole_nodes_by_default():
    c = new_cache(device_pages=16)
    put(c, list(range(1, 9)))
    assert c.evict(1) == 8  # one eviction frees the whole 8-page leaf
    assert c.root.children == {} and c.device.available() == 16
    assert c.counters.device_evicted_pages == 8 and c.counters.device_deleted_pages == 8
    check(c)


def test_page_granularity_evicts_exactly_the_pages_asked_for():
    c = new_cache(device_pages=16, eviction_granularity="page")
    keys = list(range(1, 9))
    put(c, keys)
    pages = list(node_at(c, keys).value)
    assert c.evict(3) == 3
    # The deepest pages leave; the first five stay on device, in one node.
    assert c.match_prefix(keys).device_pages == pages[:5]
    assert c.device.available() == 8 + 3
    assert c.evict(5) == 5 and c.root.children == {}
    check(c)


def test_page_granularity_spans_nodes_in_lru_order():
    c = new_cache(device_pages=16, eviction_granularity="page")
    put(c, [1, 2, 3])
    put(c, [7, 8, 9])
    c.match_prefix([1, 2, 3])  # [7, 8, 9] is now least recently used
    assert c.evict(4) == 4
    assert c.match_prefix([7, 8, 9]).device_pages == []
    assert len(c.match_prefix([1, 2, 3]).device_pages) == 2
    check(c)


def test_eviction_never_touches_locked_nodes_and_peels_parents():
    c = new_cache(device_pages=16)
    put(c, [1, 2])
    put(c, [1, 2, 3])
    put(c, [5, 6, 7])
    locked = node_at(c, [5, 6, 7])
    c.inc_lock_ref(locked)
    # [1, 2, 3]'s leaf goes first, then its parent [1, 2] becomes a leaf and goes too.
    assert c.evict(100) == 3
    assert c.root.children == {5: locked} and locked.value is not None
    check(c)
    c.dec_lock_ref(locked)
    assert c.evict(100) == 3 and c.root.children == {}
    check(c)


def test_evict_overshoots_by_less_than_one_node():
    c = new_cache(device_pages=32)
    put(c, [1, 2, 3])
    put(c, [4, 5, 6, 7, 8])
    c.match_prefix([4, 5, 6, 7, 8])
    assert c.evict(4) == 3 + 5  # 3 < 4, so the next leaf goes too; 8 - 4 < 5
    check(c)


# Hand-built tree for the strategies: five root children, each 2 pages, inserted A..E in this order.
# Insert-hits: A 1, B 1, C 1, D 2 (inserted twice), E 0 (a chunked checkpoint that counts no hit, as
# HiRadixCache's); C has priority -1.
# Then matched in the order D, B, E, A, C, so by last access (oldest first): D, B, E, A, C.
NODES = {"A": [10, 11], "B": [20, 21], "C": [30, 31], "D": [40, 41], "E": [50, 51]}
EXPECTED_ORDER = {
    "lru": "DBEAC",  # last access
    "mru": "CAEBD",  # newest access first
    "fifo": "ABCDE",  # creation
    "filo": "EDCBA",  # newest creation first
    "lfu": "EBACD",  # (hit count, last access): E has 0 hits; B, A, C have 1; D has 2
    "slru": "BEACD",  # (hit count >= 2, last access): D is protected
    "priority": "CDBEA",  # (priority, last access): C has -1
    # No config: threshold 0 <= estimate 0, so no node is TEL-safe and tlru orders as LRU (every root
    # child here has the same depth, so no config separates them; tests/test_core_tlru.py does).
    "tlru": "DBEAC",
}


def build_strategy_tree(policy: str, host_pages: int):
    c = new_cache(device_pages=64, host_pages=host_pages, eviction_policy=policy, checkpoint_hits="never")
    for name in "ABCD":
        put(c, NODES[name], priority=-1 if name == "C" else 0)
    put(c, NODES["E"], chunked=True)
    put(c, NODES["D"])
    if host_pages:
        c.write_backup(node_at(c, NODES["E"]))  # a host copy without an insert-hit
    settle(c)
    for name in "DBEAC":
        c.match_prefix(NODES[name])
    hits = {n: node_at(c, k).hit_count for n, k in NODES.items()}
    assert hits == {"A": 1, "B": 1, "C": 1, "D": 2, "E": 0}
    return c


def name_of(node):
    return next(n for n, k in NODES.items() if k[0] == node.key[0])


def test_every_registered_strategy_is_covered():
    assert set(EVICTION_STRATEGIES.names()) == set(EXPECTED_ORDER)


@pytest.mark.parametrize("policy", sorted(EXPECTED_ORDER))
def test_device_eviction_order_follows_the_strategy(policy):
    c = build_strategy_tree(policy, host_pages=0)
    order = ""
    for _ in range(5):
        before = {name_of(n) for n in c.root.children.values()}
        assert c.evict(1) == 2
        after = {name_of(n) for n in c.root.children.values()}
        (gone,) = before - after
        order += gone
        check(c)
    assert order == EXPECTED_ORDER[policy]


@pytest.mark.parametrize("policy", sorted(EXPECTED_ORDER))
def test_host_eviction_order_follows_the_same_strategy(policy):
    c = build_strategy_tree(policy, host_pages=64)
    assert c.evict(100) == 10
    assert all(n.state() == "H" for n in c.root.children.values())
    order = ""
    for _ in range(5):
        before = {name_of(n) for n in c.root.children.values()}
        assert c.evict_host(1) == 2
        (gone,) = before - {name_of(n) for n in c.root.children.values()}
        order += gone
        check(c)
    assert order == EXPECTED_ORDER[policy]


@pytest.mark.parametrize(("config", "survivor"), [({}, 1), ({"protected_threshold": 3}, 2)])
def test_slru_protected_threshold_is_configurable(config, survivor):
    c = new_cache(device_pages=64, eviction_policy="slru", eviction_policy_config=config)
    put(c, [1])
    put(c, [1])  # 2 insert-hits: protected under the default threshold 2, not under 3
    put(c, [2])
    c.match_prefix([1])
    c.match_prefix([2])  # [1] is the least recently used
    c.evict(1)
    assert list(c.root.children) == [survivor]


# ----------------------------------------------------------------------------------- host eviction


def fill_host_with_mirrors(rule: str):
    """write_through, host (8 pages) smaller than device (16): two 4-page D+H nodes fill the host."""
    c = new_cache(device_pages=16, host_pages=8, host_eviction=rule)
    put(c, [1, 2, 3, 4])
    put(c, [5, 6, 7, 8])
    settle(c)
    assert c.residency()["mirror_pages"] == 8 and c.host.available() == 0
    return c


# Host candidates and the first copy evict_host reclaims, per host rule, after: A = [1, 2] and
# C = [5, 6] inserted twice (write_through_selective backs them up), B = [3, 4] once (device-only),
# then two device evictions (A, the LRU leaf, then B). Derived from each rule: A leaves the device with
# its host copy (H-only, a candidate under every rule); B has none, so it is deleted, except under
# boundary, which demotes it (H-only); the mirror C is a candidate unless the rule is evicted_only.
# reclaim_mirrors keyed C by the device boundary when C got its copy (A's key, k_A): it counts as an
# H-only copy at 2 k_A - k_C, older than A, so C goes first; boundary takes duplicates first.
EXPECTED_HOST_RULE = {
    "evicted_only": ("A", "A"),
    "reclaim_mirrors": ("AC", "A"),
    "boundary": ("ABC", "C"),
}


def test_every_registered_host_rule_is_covered():
    assert set(HOST_EVICTION_RULES.names()) == set(EXPECTED_HOST_RULE)


@pytest.mark.parametrize("rule", sorted(EXPECTED_HOST_RULE))
def test_host_candidates_and_first_reclaimed_copy_follow_the_rule(rule):
    c = new_cache(
        page_size=1, device_pages=16, host_pages=16, write_policy="write_through_selective", host_eviction=rule
    )
    for keys in ([1, 2], [1, 2], [3, 4], [5, 6], [5, 6]):
        put(c, keys)
        settle(c)
    assert c.evict(2) == 2 and c.evict(2) == 2
    settle(c)
    names = {n: node_at(c, k) for n, k in {"A": [1, 2], "B": [3, 4], "C": [5, 6]}.items() if k[0] in c.root.children}
    cands = "".join(sorted(n for n, node in names.items() if node in c._host_cands))
    before = {n: node.host_value is not None for n, node in names.items()}
    assert c.evict_host(1) == 2
    first = "".join(n for n, node in names.items() if before[n] and node.host_value is None)
    assert (cands, first) == EXPECTED_HOST_RULE[rule]
    check(c)


def test_evicted_only_mirrors_are_not_reclaimable():
    """Reference 5.3 / invariant 14: under evicted_only a D+H mirror is never a host candidate, so a
    host full of mirrors makes every backup fail."""
    c = fill_host_with_mirrors("evicted_only")
    assert c._host_cands == {}
    assert c.evict_host(8) == 0
    put(c, [9, 10])
    assert node_at(c, [9, 10]).state() == "D"
    assert c.counters.failed_host_allocations == 1 and c.counters.backup_failures == 1
    assert c.residency()["mirror_pages"] == 8
    # Only once the device copy is gone does the host copy become reclaimable.
    c.evict(100)
    assert c.evict_host(4) == 4 and c.counters.host_deleted_pages == 4
    check(c)


@pytest.mark.parametrize("rule", ["reclaim_mirrors", "boundary"])
def test_reclaim_mirrors_and_boundary_reclaim_d_plus_h_mirrors(rule):
    c = fill_host_with_mirrors(rule)
    assert set(c._host_cands) == {node_at(c, [1, 2, 3, 4]), node_at(c, [5, 6, 7, 8])}
    put(c, [9, 10])  # its backup reclaims a mirror instead of failing
    assert node_at(c, [9, 10]).host_value is not None
    assert c.counters.failed_host_allocations == 0
    assert c.counters.host_mirror_reclaimed_pages == 4
    settle(c)
    reclaimed = [n for n in (node_at(c, [1, 2, 3, 4]), node_at(c, [5, 6, 7, 8])) if n.state() == "D"]
    assert len(reclaimed) == 1  # the mirror's node stays, device-only


@pytest.mark.parametrize("rule", ["reclaim_mirrors", "boundary"])
def test_mirror_reclaim_keeps_the_host_set_prefix_closed(rule):
    c = new_cache(device_pages=16, host_pages=16, host_eviction=rule)
    put(c, [1, 2])
    put(c, [1, 2, 3, 4])
    settle(c)
    x, y = node_at(c, [1, 2]), node_at(c, [1, 2, 3, 4])
    assert x.state() == y.state() == "D+H"
    assert set(c._host_cands) == {y}  # x has a child with a host copy: not a host leaf
    assert c.evict_host(1) == 2
    assert y.state() == "D" and x.state() == "D+H"
    check(c)  # invariant 15: every backed-up node's parent is backed up (or the root)
    assert c.evict_host(1) == 2 and x.state() == "D"
    check(c)


def test_reclaim_mirrors_without_h_only_copies_takes_the_newest_mirror_first():
    # Every copy is a mirror: the one furthest from the device boundary (the newest) goes first.
    c = new_cache(device_pages=16, host_pages=16, host_eviction="reclaim_mirrors")
    for keys in ([1, 2], [3, 4], [5, 6]):
        put(c, keys)
    settle(c)
    for keys in ([5, 6], [3, 4], [1, 2]):
        assert c.evict_host(1) == 2 and node_at(c, keys).state() == "D"
    check(c)


def mirror_against_h_only(mirror_far_from_boundary: bool):
    """write_through_selective (a node is backed up at its second insert), reclaim_mirrors. H = [1, 2]
    is H-only; X = [3, 4] is device-only and the device boundary; M = [5, 6] is a mirror. A locked node
    Z = [9, 9] advances the clock by 20 touches, either between H and X (H far behind the boundary)
    or between X and M (M far ahead of it)."""
    c = new_cache(
        device_pages=16, host_pages=16, write_policy="write_through_selective", host_eviction="reclaim_mirrors"
    )
    put(c, [9, 9])
    c.inc_lock_ref(node_at(c, [9, 9]))

    def tick():
        for _ in range(20):
            c.match_prefix([9, 9])

    put(c, [1, 2])
    put(c, [1, 2])
    settle(c)
    if not mirror_far_from_boundary:
        tick()
    put(c, [3, 4])
    c.evict(2)
    if mirror_far_from_boundary:
        tick()
    put(c, [5, 6])
    put(c, [5, 6])
    settle(c)
    h, x, m = node_at(c, [1, 2]), node_at(c, [3, 4]), node_at(c, [5, 6])
    assert (h.state(), x.state(), m.state()) == ("H", "D", "D+H")
    assert set(c._host_cands) == {h, m}
    return c, h, m


def test_reclaim_mirrors_takes_a_mirror_far_ahead_of_the_device_boundary_before_a_recent_h_only_copy():
    # M's device copy leaves only after 20 more ticks; H is just behind the boundary: M goes first.
    c, h, m = mirror_against_h_only(mirror_far_from_boundary=True)
    assert c.evict_host(1) == 2
    assert m.state() == "D" and h.state() == "H"
    check(c)


def test_reclaim_mirrors_keeps_a_mirror_near_the_device_boundary_over_a_stale_h_only_copy():
    # M is about to leave the device (and would be lost without its copy); H is 20 ticks stale.
    c, h, m = mirror_against_h_only(mirror_far_from_boundary=False)
    assert c.evict_host(1) == 2
    assert m.state() == "D+H" and h.parent is None and 1 not in c.root.children
    check(c)


def test_reclaim_mirrors_weighs_a_mirror_by_the_device_boundary_at_the_pop_not_when_it_was_queued():
    # As in the far case, M was queued while X was the boundary (M then worth less than H). X then
    # leaves the device without a copy: M is the boundary itself, worth its own key, newer than H.
    c, h, m = mirror_against_h_only(mirror_far_from_boundary=True)
    x = node_at(c, [3, 4])
    assert c.evict(2) == 2 and x.parent is None
    assert c.evict_host(1) == 2
    assert m.state() == "D+H" and h.parent is None and 1 not in c.root.children
    check(c)


@pytest.mark.parametrize("host_pages", [8, 24])
def test_reclaim_mirrors_under_write_back_takes_mirrors_first_at_any_host_size(host_pages):
    # With demotion a mirror's page reaches the host anyway when it leaves the device: mirrors go first.
    c = new_cache(
        device_pages=16,
        host_pages=host_pages,
        write_policy="write_back",
        host_eviction="reclaim_mirrors",
        load_back_threshold_tokens=0,
    )
    put(c, [1, 2])
    put(c, [3, 4])
    assert c.evict(100) == 4  # both demoted: H-only
    a, b = node_at(c, [1, 2]), node_at(c, [3, 4])
    assert c.load_back(a) is a
    settle(c)
    assert (a.state(), b.state()) == ("D+H", "H")
    assert c.evict_host(1) == 2
    assert a.state() == "D" and b.state() == "H"
    check(c)


@pytest.mark.parametrize("semantics", ["2025", "2026"])
def test_reclaim_mirrors_under_write_back_takes_a_mirror_at_the_device_boundary_before_a_stale_h_only_copy(
    semantics,
):
    """Under write_back a mirror goes before any H-only copy, in both eras: its page reaches the host
    anyway when it leaves the device. Weighed as under write_through, this mirror (the next device
    victim) would be worth more than the older H-only copy and stay; the staged (2025) write_back has
    no full-duplicate pass in front of the heap, so only the mirror-first order decides there."""
    c = new_cache(
        device_pages=16,
        host_pages=8,
        write_policy="write_back",
        host_eviction="reclaim_mirrors",
        load_back_threshold_tokens=0,
        semantics=semantics,
    )
    put(c, [3, 4])
    c.evict(100)  # [3, 4] demoted first: the stale H-only copy
    settle(c)
    put(c, [1, 2])
    c.evict(100)
    settle(c)
    a, b = node_at(c, [1, 2]), node_at(c, [3, 4])
    assert c.load_back(a) is a
    settle(c)
    put(c, [5, 6])
    put(c, [7, 8])  # two newer device leaves: a is the device boundary
    settle(c)
    assert (a.state(), b.state()) == ("D+H", "H") and b.last_access < a.last_access
    assert c.evict_host(1) == 2
    assert (a.state(), b.state()) == ("D", "H")
    check(c)


def test_reclaim_mirrors_never_reclaims_a_mirror_whose_write_is_pending():
    c = new_cache(device_pages=16, host_pages=4, host_eviction="reclaim_mirrors")
    put(c, [1, 2, 3, 4])  # D2H in flight: node locked, write pending
    assert c._host_cands == {} and c.evict_host(4) == 0
    settle(c)
    assert c.evict_host(4) == 4


def test_boundary_takes_the_least_recently_used_duplicate_first():
    c = new_cache(device_pages=16, host_pages=16, host_eviction="boundary")
    put(c, [1, 2])
    put(c, [3, 4])
    put(c, [5, 6])
    settle(c)
    c.evict(1)  # [1, 2] becomes H-only
    c.match_prefix([3, 4])  # [5, 6] is now the least recently used duplicate
    assert c.evict_host(1) == 2 and node_at(c, [5, 6]).state() == "D"
    assert c.evict_host(1) == 2 and node_at(c, [3, 4]).state() == "D"
    assert c.evict_host(1) == 2 and 1 not in c.root.children
    check(c)


def test_boundary_demotes_a_device_only_victim_to_host():
    c = new_cache(device_pages=16, host_pages=16, host_eviction="boundary", checkpoint_hits="never")
    put(c, [1, 2, 3], chunked=True)  # a checkpoint that counts no hit: not backed up
    node = node_at(c, [1, 2, 3])
    assert node.state() == "D"
    assert c.evict(1) == 3
    assert node.state() == "H" and c.counters.device_demoted_pages == 3
    assert any(t.blocking and t.reason == "write_back" for t in c.take_transfers())
    check(c)


def boundary_parent_without_host_copy(host_pages: int):
    """A D-only parent [1, 2] with a D+H child [3] under the boundary rule (which needs no parent copy
    to back a node up)."""
    c = new_cache(device_pages=16, host_pages=host_pages, host_eviction="boundary", checkpoint_hits="never")
    put(c, [1, 2], chunked=True)
    put(c, [1, 2, 3], chunked=True)
    parent, child = node_at(c, [1, 2]), node_at(c, [1, 2, 3])
    assert c.write_backup(child) == 1
    settle(c)
    assert child.state() == "D+H" and parent.state() == "D"
    return c, parent, child


def test_boundary_backs_up_the_parent_before_its_child_becomes_h_only():
    c, parent, child = boundary_parent_without_host_copy(host_pages=16)
    assert c.evict(1) == 1
    # An H-only node must hang under a host copy: the parent was backed up first.
    assert child.state() == "H" and parent.state() == "D+H"
    settle(c)


def test_boundary_drops_the_victim_when_its_parent_cannot_be_backed_up():
    c, parent, child = boundary_parent_without_host_copy(host_pages=1)
    assert c.evict(1) == 1
    assert child.parent is None and parent.children == {} and parent.state() == "D"
    assert c.counters.device_dropped_subtree_pages == 1 and c.counters.failed_host_allocations == 1
    assert c.host.available() == 1
    settle(c)


def test_page_granularity_host_eviction_frees_exactly():
    c = new_cache(device_pages=16, host_pages=16, eviction_granularity="page")
    put(c, [1, 2, 3, 4, 5])
    settle(c)
    c.evict(5)
    assert c.evict_host(2) == 2
    m = c.match_prefix([1, 2, 3, 4, 5])
    assert m.host_hit_pages == 3
    check(c)


@pytest.mark.parametrize("semantics", ["2025", "2026"])
def test_boundary_demotion_pins_the_parents_host_copy_while_it_makes_room(semantics):
    """Demoting [3, 4] under the boundary rule needs its parent's host copy under it: room for the
    demotion must not come from that copy (the only host candidate, a duplicate). Pinned, it stays; the
    demotion finds no room and the victim is dropped. Unpinned, the parent's copy would be reclaimed and
    [3, 4] left H-only under a parent without host copy (invariant 15a)."""
    c = new_cache(
        page_size=1,
        device_pages=16,
        host_pages=3,
        write_policy="write_back",
        host_eviction="boundary",
        load_back_threshold_tokens=0,
        semantics=semantics,
    )
    put(c, [1, 2])
    c.evict(100)
    settle(c)
    parent = node_at(c, [1, 2])
    assert c.load_back(parent) is parent
    settle(c)
    put(c, [1, 2, 3, 4])
    settle(c)
    assert (parent.state(), node_at(c, [1, 2, 3, 4]).state(), c.host.available()) == ("D+H", "D", 1)
    failures, dropped = c.counters.backup_failures, c.counters.device_dropped_subtree_pages
    assert c.evict(2) == 2
    settle(c)
    assert parent.state() == "D+H" and parent.children == {}
    assert c.counters.backup_failures == failures + 1
    assert c.counters.device_dropped_subtree_pages == dropped + 2
