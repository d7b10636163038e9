"""The facts the core's hot paths rely on instead of recomputing, checked for every registered rule
and strategy: a locked node is never a host candidate, a rule that says its candidates are H-only
never takes a node on device, and a strategy that says its key ignores hit counts does."""

from __future__ import annotations

import pytest

from hicache_sim.core import CacheConfig
from hicache_sim.core.policies import EVICTION_STRATEGIES, HOST_EVICTION_RULES
from hicache_sim.core.tree import Node
from hicache_sim.instant import run_instant
from hicache_sim.workloads.traces import load_mooncake, vendored_trace


@pytest.fixture(scope="module")
def requests():
    return load_mooncake(vendored_trace("mooncake/conversation_trace.jsonl"), 512)[:800]


def _check_candidacy(cache, seen: dict) -> None:
    """Lock every other device node, ask the rule about every node, unlock (leaves the cache as it was)."""
    nodes = cache.iter_nodes()
    locked = [n for n in nodes[::2] if n.value is not None]
    for node in locked:
        cache.inc_lock_ref(node)
    rule = cache.host_rule
    for node in nodes:
        candidate = rule.is_candidate(cache, node)
        assert not (candidate and node.lock_ref), f"{rule.name}: locked node {node} is a host candidate"
        if rule.h_only_candidates:
            assert not (candidate and node.value is not None), f"{rule.name}: {node} on device is a host candidate"
        seen["locked"] += node.lock_ref > 0
        seen["candidates"] += candidate
        seen["on_device_candidates"] += candidate and node.value is not None
    for node in locked:
        cache.dec_lock_ref(node)


# write_through_selective differs from write_through only in its threshold (and backs up little here).
@pytest.mark.parametrize("write_policy", ["write_through", "write_back"])
@pytest.mark.parametrize("rule", sorted(HOST_EVICTION_RULES.names()))
def test_host_candidacy_shortcuts_hold_for_every_rule(requests, rule, write_policy):
    seen = {"locked": 0, "candidates": 0, "on_device_candidates": 0}

    def sample(i: int, cache) -> None:
        if i % 40 == 39:
            _check_candidacy(cache, seen)

    cfg = CacheConfig(512, 100, 300, write_policy=write_policy, host_eviction=rule)
    run_instant(cfg, requests, on_request=sample)
    assert seen["locked"] and seen["candidates"], seen
    if not HOST_EVICTION_RULES.get(rule).h_only_candidates and write_policy == "write_through":
        # The flag is not merely cautious: mirrors are taken under this rule.
        assert seen["on_device_candidates"], f"{rule} never had a D+H candidate"


@pytest.mark.parametrize("name", sorted(EVICTION_STRATEGIES.names()))
def test_strategies_that_ignore_hit_counts_do(name):
    strategy = EVICTION_STRATEGIES.get(name)()
    keys = set()
    for hits in range(6):
        node = Node(7, [1, 2], now=40, priority=3)
        node.last_access = 55
        node.hit_count = hits
        keys.add(strategy.key(node))
    assert (len(keys) > 1) == strategy.reads_hit_count, f"{name}: {len(keys)} distinct keys over hit counts 0-5"
