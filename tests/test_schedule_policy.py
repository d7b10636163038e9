"""--schedule-policy in the timed scheduler: the waiting queue's order decides which request is
admitted first (SGLang's SchedulePolicy.calc_priority, sglang 0.5.23 schedule_policy.py)."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
from conftest import new_cache, put
from test_sim_support import FixedCompute, req, resolved

from hicache_sim.core import SCHEDULE_POLICIES
from hicache_sim.core.schedule import PREFIX_MATCH_MAX_WAITING, UNMODELLED
from hicache_sim.scenario import ScenarioError, build_scenario
from hicache_sim.sim import run_timed
from hicache_sim.workloads.synthetic import Workload


def _admit_order(policy: str, reqs, running: int = 1) -> list[str]:
    return [x["rid"] for x in _rows(policy, reqs, running) if x["rid"] != "warm"]


def _rows(policy: str, reqs, running: int = 1, seed: int = 0) -> list[dict]:
    r = resolved(
        seed=seed,
        cache={"device_tokens": 400 * 64, "host_tokens": 800 * 64},
        scheduler={"max_running_requests": running, "schedule_policy": policy},
    )
    res = run_timed(r, Workload(reqs), compute=FixedCompute(prefill_s=0.01, decode_s=0.001), check_invariants=True)
    return sorted(res.requests, key=lambda x: (x["admit_s"], x["rid"]))


def _cached_prefix_world():
    # "warm" leaves pages 1..20 cached; then, at the same instant, "cold" (nothing cached) queues
    # ahead of "hit" (20 of its 24 pages cached). One request runs at a time.
    return [
        req("warm", 0.0, range(1, 21), out=1),
        req("cold", 1.0, range(500, 524), out=4),
        req("hit", 1.0, range(1, 25), out=4),
    ]


def test_lpm_admits_the_longest_cached_prefix_first():
    assert _admit_order("lpm", _cached_prefix_world()) == ["hit", "cold"]


def test_fcfs_admits_in_arrival_order():
    assert _admit_order("fcfs", _cached_prefix_world()) == ["cold", "hit"]


def test_lpm_defers_a_request_sharing_its_prompt_with_one_ahead_of_it():
    # Nothing is cached and two requests run at a time: "b" shares its first 8 pages with "a", so lpm
    # sends it behind "c" and it runs once "a" is cached (its 8 pages then hit); fcfs runs a and b
    # together, so b's shared pages are computed twice.
    reqs = [
        req("a", 0.0, [*range(1, 9), *range(100, 104)], out=4),
        req("b", 0.0, [*range(1, 9), *range(200, 204)], out=4),
        req("c", 0.0, range(300, 312), out=4),
    ]
    assert _admit_order("lpm", reqs, running=2) == ["a", "c", "b"]
    assert _admit_order("fcfs", reqs, running=2) == ["a", "b", "c"]
    hits = {p: {x["rid"]: x["device_hit_pages"] for x in _rows(p, reqs, 2)} for p in ("lpm", "fcfs")}
    assert hits["lpm"]["b"] == 8 and hits["fcfs"]["b"] == 0


def test_lof_admits_the_longest_output_first():
    reqs = [req("short", 0.0, range(1, 5), out=2), req("long", 0.0, range(10, 14), out=40)]
    assert _admit_order("lof", reqs) == ["long", "short"]


class _FakeCache:
    page_size = 64

    def __init__(self, hits: dict[int, int]) -> None:
        self.hits = hits

    def match_prefix(self, keys):
        n = self.hits.get(keys[0], 0)
        return SimpleNamespace(device_hit_pages=n, host_hit_pages=0)


def test_lpm_falls_back_to_arrival_order_beyond_128_waiting():
    def waiting(n: int):
        return [SimpleNamespace(keys=[i], limit=1) for i in range(n)]

    cache = _FakeCache({i: i for i in range(PREFIX_MATCH_MAX_WAITING + 1)})
    lpm = SCHEDULE_POLICIES.get("lpm")
    rng = random.Random(0)
    few = waiting(PREFIX_MATCH_MAX_WAITING)
    assert [r.keys[0] for r in lpm(few, cache, rng)][:2] == [127, 126]
    many = waiting(PREFIX_MATCH_MAX_WAITING + 1)
    assert lpm(many, cache, rng) == many


# --------------------------------------------------------------- one queue, five orders
#
# The tree (page size 1): root -> [1 2] -> {[3 4], [5 6]} and root -> [7 8]. The queue, in arrival
# order, with each request's cached prefix and output length:
#   a [9 9]          nothing cached   out 5
#   b [1 2 3 4 10]   4 pages at [3 4] out 1
#   c [1 2 5 6 11]   4 pages at [5 6] out 2
#   d [1 2 5 6 12]   4 pages at [5 6] out 3
#   e [7 8 13]       2 pages at [7 8] out 4
# lpm: longest prefix first (stable): b c d e a. lof: longest output first: a e d c b. dfs-weight:
# [1 2] holds 3 waiting requests and [7 8] one, so [1 2] first; under it [5 6] (2) before [3 4] (1);
# a node's own requests after its children's, root's (a) last: c d b e a.
QUEUE = {"a": ([9, 9], 5), "b": ([1, 2, 3, 4, 10], 1), "c": ([1, 2, 5, 6, 11], 2), "d": ([1, 2, 5, 6, 12], 3)}
QUEUE["e"] = ([7, 8, 13], 4)
EXPECTED = {
    "fcfs": "abcde",
    "lpm": "bcdea",
    "lof": "aedcb",
    "dfs-weight": "cdbea",
    "random": "eadbc",  # random.Random(7).shuffle of the queue (Python's shuffle, stable across versions)
}


def _tree_and_queue():
    cache = new_cache(page_size=1, device_pages=64)
    for keys in ([1, 2, 3, 4], [1, 2, 5, 6], [7, 8]):
        put(cache, keys)
    waiting = [
        SimpleNamespace(rid=rid, keys=keys, limit=len(keys), req=SimpleNamespace(output_tokens=out))
        for rid, (keys, out) in QUEUE.items()
    ]
    return cache, waiting


def _order(policy: str, seed: int = 7) -> str:
    cache, waiting = _tree_and_queue()
    return "".join(r.rid for r in SCHEDULE_POLICIES.get(policy)(waiting, cache, random.Random(seed)))


@pytest.mark.parametrize("policy", sorted(EXPECTED))
def test_each_policy_orders_the_same_queue_its_own_way(policy):
    assert _order(policy) == EXPECTED[policy]


def test_the_five_orders_differ_so_a_policy_run_as_another_fails():
    assert len(set(EXPECTED.values())) == len(EXPECTED) == len(SCHEDULE_POLICIES.names())


def test_dfs_weight_breaks_weight_ties_by_the_trees_child_order():
    # [1 2] and [7 8] both hold one request now: the child inserted first is walked first.
    cache, waiting = _tree_and_queue()
    two = [w for w in waiting if w.rid in ("e", "b")]  # e queues ahead of b
    assert [r.rid for r in SCHEDULE_POLICIES.get("dfs-weight")(two, cache, random.Random(0))] == ["b", "e"]


def test_dfs_weight_keeps_sorting_beyond_128_waiting():
    # SGLang 0.5.23 falls back to fcfs with a long queue for lpm and hrrn only, not dfs-weight.
    cache, waiting = _tree_and_queue()
    long = [waiting[0]] * PREFIX_MATCH_MAX_WAITING + waiting[1:]
    got = SCHEDULE_POLICIES.get("dfs-weight")(long, cache, random.Random(0))
    assert [r.rid for r in got[:4]] == ["c", "d", "b", "e"]
    assert [r.rid for r in SCHEDULE_POLICIES.get("lpm")(long, cache, random.Random(0))] == [r.rid for r in long]


def test_random_is_a_seeded_shuffle():
    runs = {seed: _order("random", seed) for seed in range(6)}
    assert all(sorted(o) == list("abcde") for o in runs.values())
    assert _order("random", 3) == runs[3]  # same seed, same order
    assert len(set(runs.values())) > 1  # the seed matters


def test_dfs_weight_and_random_in_the_timed_scheduler():
    # After "warm" caches pages 1..20, four requests queue at once behind one running slot: two share
    # the warm prefix, so dfs-weight admits them first (cached deepest first), then the cold ones.
    reqs = [
        req("warm", 0.0, range(1, 21), out=1),
        req("cold1", 1.0, range(500, 524), out=4),
        req("hit1", 1.0, [*range(1, 21), 30, 31], out=4),
        req("cold2", 1.0, range(600, 624), out=4),
        req("hit2", 1.0, [*range(1, 11), 40, 41], out=4),
    ]
    assert _admit_order("fcfs", reqs) == ["cold1", "hit1", "cold2", "hit2"]
    assert _admit_order("dfs-weight", reqs)[:2] == ["hit1", "hit2"]
    orders = {seed: [x["rid"] for x in _rows("random", reqs, seed=seed) if x["rid"] != "warm"] for seed in range(5)}
    assert _admit_order("random", reqs) == orders[0]  # a run is reproducible
    assert len({tuple(o) for o in orders.values()}) > 1  # and the scenario's seed drives it


def test_an_unmodelled_policy_is_refused_naming_the_field():
    with pytest.raises(ScenarioError, match=r"scheduler\.schedule_policy: SGLang schedule policy 'hrrn' is not mod"):
        build_scenario({"scheduler": {"schedule_policy": "hrrn"}}, "s.yaml")
    with pytest.raises(ScenarioError, match=r"scheduler\.schedule_policy: unknown schedule policy 'fifo'"):
        build_scenario({"scheduler": {"schedule_policy": "fifo"}}, "s.yaml")


def test_every_sglang_choice_is_modelled_or_refused():
    # sglang 0.5.23 arg_groups/fields/schedule.py: the --schedule-policy choices.
    sglang = {"lpm", "random", "fcfs", "dfs-weight", "lof", "priority", "routing-key", "hrrn", "shortest-prefill-first"}
    assert set(SCHEDULE_POLICIES.names()) | set(UNMODELLED) == sglang
    assert not set(SCHEDULE_POLICIES.names()) & set(UNMODELLED)
