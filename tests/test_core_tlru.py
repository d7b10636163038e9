"""Tail-Optimized LRU (``cache.eviction_policy: tlru``), SGLang 0.5.23's ``TLRUStrategy``: a node past
its branch's budget (deepest reach + next prompt estimate - threshold, tokens) is TEL-safe and goes
first; then LRU. The orders below are derived by hand from that rule (reference section 2.6)."""

from __future__ import annotations

import pytest
from conftest import new_cache, node_at, put, settle

from hicache_sim.core import check
from hicache_sim.core.tree import chain_hashes

# A conversation X in three turns ([1, 2], then + [3, 4], then + [5, 6]: nodes a, b, c, depth 2, 4, 6
# pages, the branch's deepest reach 6), a short one Y ([10, 11]: depth 2) and a long single-turn W
# (6 pages). threshold 3 pages, next prompt estimate 1 page: budget = reach + 1 - 3, X's and W's 4, Y's 0.
# TEL-safe (the pages above the node reach the budget): c (4 >= 4) and Y (0 >= 0); not b (2), a (0), W (0).
# Matched W, Y, X: LRU order W, Y, c, then b and a as they become leaves.
# tlru: the TEL-safe Y, c by age; then W, b, a. b stays unsafe once c is gone: X's reach is still 6.
CHAIN = {"a": [1, 2], "b": [1, 2, 3, 4], "c": [1, 2, 3, 4, 5, 6], "Y": [10, 11], "W": [20, 21, 22, 23, 24, 25]}
ORDER = {"lru": "WYcba", "tlru": "YcWba"}


def conversation_tree(policy: str, page_size: int, host_pages: int = 0):
    config = {"threshold": 3 * page_size, "next_prompt_estimate": page_size} if policy == "tlru" else {}
    c = new_cache(
        page_size=page_size,
        device_pages=64,
        host_pages=host_pages,
        eviction_policy=policy,
        eviction_policy_config=config,
    )
    for name in ("a", "b", "c", "Y", "W"):
        put(c, CHAIN[name])
    settle(c)
    for name in ("W", "Y", "c"):
        c.match_prefix(CHAIN[name])
    return c


def gone_order(c, evict) -> str:
    """Evict one node at a time; the names of the nodes that left, in order."""
    order = ""
    for _ in range(5):
        before = {n: node_at_or_none(c, k) for n, k in CHAIN.items()}
        evict(c)
        for name, node in before.items():
            if node is not None and node_at_or_none(c, CHAIN[name]) is None:
                order += name
        check(c)
    return order


def node_at_or_none(c, keys):
    """The node ending at ``keys`` while its device copy (or, once all are on host, its host copy) is
    there."""
    try:
        node = node_at(c, keys)
    except KeyError:
        return None
    return node if node.value is not None or (node.host_value is not None and not _any_device(c)) else None


def _any_device(c) -> bool:
    return any(n.value is not None for n in c.iter_nodes())


@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("policy", sorted(ORDER))
def test_device_eviction_order(policy, page_size):
    """Thresholds are tokens, depths pages: the same order at 1 and 4 tokens a page."""
    c = conversation_tree(policy, page_size)
    assert gone_order(c, lambda c: c.evict(1)) == ORDER[policy]


@pytest.mark.parametrize("policy", sorted(ORDER))
def test_host_eviction_follows_the_same_order(policy):
    c = conversation_tree(policy, 4, host_pages=64)  # write_through: every node backed up
    c.evict(100)
    assert all(n.state() == "H" for n in c.iter_nodes())
    assert gone_order(c, lambda c: c.evict_host(1)) == ORDER[policy]


def test_history_outlives_the_evicted_tail():
    c = conversation_tree("tlru", 4)
    b, cc = node_at(c, CHAIN["b"]), node_at(c, CHAIN["c"])
    assert (b.tlru_depth, b.tlru_history, cc.tlru_depth, cc.tlru_history) == (4, 6, 6, 6)
    assert c.strategy.key(cc)[0] == -1 and c.strategy.key(b)[0] == 0
    c.evict(1)  # Y
    c.evict(1)  # c
    assert node_at_or_none(c, CHAIN["c"]) is None
    assert b.tlru_history == 6 and c.strategy.key(b)[0] == 0


def test_a_split_keeps_depth_and_reach():
    """Matching [20, 21, 22] splits W: the upper half ends 3 pages deep, both keep W's reach 6."""
    c = conversation_tree("tlru", 4)
    c.match_prefix([20, 21, 22, 99])
    upper, lower = node_at(c, [20, 21, 22]), node_at(c, CHAIN["W"])
    assert (upper.tlru_depth, upper.tlru_history) == (3, 6)
    assert (lower.tlru_depth, lower.tlru_history, len(lower.key)) == (6, 6, 3)
    # The lower half has 3 pages above it, short of the budget 4: still not TEL-safe.
    assert c.strategy.key(lower)[0] == 0
    check(c)


def test_a_prefetched_tail_raises_the_reach_of_every_ancestor_and_requeues_them():
    """A (16 pages) is a device leaf whose child A2 (8 pages) was evicted to host; with threshold 24
    pages both are TEL-safe (reach 24: budget 0). A prefetch puts 16 H-only pages under A2: the
    branch reaches 40 pages, A's budget is 16 pages and A, with none above it, is no longer TEL-safe,
    so the newer leaf B is evicted first. A is not the new node's parent: only the walk up the branch
    re-queues it (without it A would leave first, under its stale key)."""
    page = 16
    keys = list(range(100, 140))
    c = new_cache(
        page_size=page,
        device_pages=64,
        host_pages=128,
        storage=True,
        prefetch_policy="wait_complete",
        eviction_policy="tlru",
        eviction_policy_config={"threshold": 24 * page, "next_prompt_estimate": 0},
    )
    put(c, keys[:16])
    put(c, keys[:24])
    settle(c)
    put(c, [900, 901])  # B: newer than A, TEL-safe (reach 2 pages, budget 0)
    settle(c)
    c.evict(1)  # A2, the oldest leaf, leaves the device with its host copy
    a, a2 = node_at(c, keys[:16]), node_at(c, keys[:24])
    assert a.value is not None and a2.state() == "H"
    assert c.strategy.key(a)[0] == -1
    c.storage.put(chain_hashes(a2.hashes[-1], keys[24:]))
    assert c.prefetch("r", a2, keys[24:], 0.0) is not None
    assert c.prefetch_query("r") == 16
    settle(c)
    assert c.check_prefetch_progress("r", 0.0)
    assert node_at(c, keys).state() == "H"
    assert (a.tlru_depth, a.tlru_history) == (16, 40) and c.strategy.key(a)[0] == 0
    check(c)
    c.evict(1)
    assert a.value is not None and node_at(c, [900, 901]).value is None
    check(c)


def test_other_policies_keep_no_depths():
    """Only a strategy that reads them pays for the bookkeeping."""
    c = conversation_tree("lru", 4)
    assert {(n.tlru_depth, n.tlru_history) for n in c.iter_nodes()} == {(0, 0)}
