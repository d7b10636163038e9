"""--schedule-policy in the timed scheduler: the waiting queue's order decides which request is
admitted first (SGLang's SchedulePolicy.calc_priority, sglang 0.5.23 schedule_policy.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from test_sim_support import FixedCompute, req, resolved

from hicache_sim.core import SCHEDULE_POLICIES
from hicache_sim.core.schedule import PREFIX_MATCH_MAX_WAITING
from hicache_sim.scenario import ScenarioError, build_scenario
from hicache_sim.sim import run_timed
from hicache_sim.workloads.synthetic import Workload


def _admit_order(policy: str, reqs, running: int = 1) -> list[str]:
    return [x["rid"] for x in _rows(policy, reqs, running) if x["rid"] != "warm"]


def _rows(policy: str, reqs, running: int = 1) -> list[dict]:
    r = resolved(
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
    few = waiting(PREFIX_MATCH_MAX_WAITING)
    assert [r.keys[0] for r in lpm(few, cache)][:2] == [127, 126]
    many = waiting(PREFIX_MATCH_MAX_WAITING + 1)
    assert lpm(many, cache) == many


def test_an_unmodelled_policy_is_refused_naming_the_field():
    with pytest.raises(ScenarioError, match=r"scheduler\.schedule_policy: unknown schedule policy 'dfs-weight'"):
        build_scenario({"scheduler": {"schedule_policy": "dfs-weight"}}, "s.yaml")
