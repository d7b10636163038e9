"""bench_multiturn's client order: the ready-queue policy, its seed, and instant mode replaying the
order the timed closed loop sends under no load."""

from __future__ import annotations

import itertools
import random

import pytest
import simpy

from hicache_sim.scenario import MultiturnSpec, Scenario
from hicache_sim.sim.arrivals import ClosedLoop
from hicache_sim.workloads.build import build_workload
from hicache_sim.workloads.client_loop import POLL_S, READY_QUEUE_POLICIES
from hicache_sim.workloads.synthetic import multiturn


def _wl(**fields):
    spec = {"num_clients": 5, "num_rounds": 3, "request_length": 128, "output_length": 8, "request_rate": 4.0}
    return multiturn(MultiturnSpec(**{**spec, **fields}), 64, seed=3)


def _closed_loop_sends(wl, service_s: float = 0.0) -> list[tuple[str, float]]:
    """Drive the timed world's closed loop with a server that answers after ``service_s``."""
    env = simpy.Environment()
    sent: list[tuple[str, float]] = []
    loop: ClosedLoop

    def deliver(_position, req):
        sent.append((req.rid, env.now))
        if service_s == 0.0:
            loop.on_done(req)
        else:
            env.process(_answer(req))

    def _answer(req):
        yield env.timeout(service_s)
        loop.on_done(req)

    loop = ClosedLoop(env, wl, deliver)
    env.run()
    return sent


@pytest.mark.parametrize("policy", READY_QUEUE_POLICIES.names())
@pytest.mark.parametrize("barrier", [False, True])
def test_instant_order_is_the_closed_loop_order_under_no_load(policy, barrier):
    wl = _wl(ready_queue_policy=policy, round_barrier=barrier, max_parallel=2)
    assert _closed_loop_sends(wl) == [(r.rid, r.arrival_s) for r in wl.requests]


def test_the_default_policy_is_bench_multiturns_seeded_random_pop():
    assert MultiturnSpec().ready_queue_policy == "random"
    wl = _wl()
    # By hand, from bench_multiturn's draws: pop index, then gap, from one stream seeded with --seed.
    rng = random.Random(3)
    ready = [f"c{k}" for k in range(5)]
    first = ready.pop(rng.randrange(5))
    gap = rng.expovariate(4.0)
    ready.append(first)  # answered at once: its next turn joins the end of the queue
    second = ready.pop(rng.randrange(5))
    rids = [r.rid for r in wl.requests]
    assert rids[0] == f"{first}r0" and wl.requests[0].arrival_s == 0.0
    assert rids[1] == f"{second}r{1 if second == first else 0}" and wl.requests[1].arrival_s == gap
    assert rids != [r.rid for r in _wl(ready_queue_policy="fifo").requests]


def test_fifo_under_no_load_is_round_robin():
    rids = [r.rid for r in _wl(ready_queue_policy="fifo").requests]
    assert rids == [f"c{k}r{r}" for r in range(3) for k in range(5)]


def test_the_seed_decides_the_order_and_the_scenario_seed_is_the_default():
    def order(seed, mt_seed=None):
        mt = {"num_clients": 6, "num_rounds": 3, "request_length": 64, "output_length": 8, "seed": mt_seed}
        sc = Scenario.model_validate({"seed": seed, "workload": {"kind": "multiturn", "multiturn": mt}})
        return [(r.rid, r.arrival_s) for r in build_workload(sc, 64).requests]

    assert order(1) == order(1) == order(7, mt_seed=1)
    assert order(1) != order(2)


def test_uniform_gaps_stay_within_twice_the_mean():
    wl = _wl(ready_queue_policy="fifo", distribution="uniform", request_rate=2.0)
    gaps = [b.arrival_s - a.arrival_s for a, b in itertools.pairwise(wl.requests)]
    assert max(gaps) <= 1.0 and min(gaps) >= 0.0 and len(set(gaps)) == len(gaps)


def test_barrier_pause_separates_rounds_and_the_cap_retries_every_50ms():
    wl = _wl(round_barrier=True, round_barrier_pause_s=30.0, request_rate=100.0, max_parallel=1)
    sends = _closed_loop_sends(wl, service_s=0.5)
    by_round: dict[int, list[float]] = {}
    for rid, t in sends:
        by_round.setdefault(int(rid.split("r")[1]), []).append(t)
    for r in (1, 2):
        last_finish = max(by_round[r - 1]) + 0.5
        assert min(by_round[r]) >= last_finish + 30.0
        assert min(by_round[r]) < last_finish + 30.0 + 0.2  # the next wake after the pause (gaps ~10 ms)
    # At the cap (one in flight) the sender polls every 50 ms: each later send of a round comes a whole
    # number of polls after the previous one was answered, and within one poll of it.
    for times in by_round.values():
        for a, b in itertools.pairwise(times):
            waited = b - (a + 0.5)
            assert 0.0 <= waited <= POLL_S + 1e-9


def test_sub_question_length_and_range_ratio_shape_the_prompts():
    wl = _wl(request_length=300, sub_question_input_length=40, output_length=20, ready_queue_policy="fifo")
    by = {(r.session, r.turn): r for r in wl.requests}
    assert [by[("c0", t)].input_tokens for t in range(3)] == [300, 360, 420]
    var = _wl(request_length=300, sub_question_input_length=40, output_length=20, range_ratio=0.5)
    firsts = [r.input_tokens for r in var.requests if r.turn == 0]
    assert all(150 <= n <= 300 for n in firsts) and len(set(firsts)) > 1
    outs = [r.output_tokens for r in var.requests]
    assert all(10 <= n <= 20 for n in outs) and len(set(outs)) > 1


def test_round_counts_per_client_are_drawn_first_from_the_seeded_stream():
    wl = _wl(min_rounds=1, max_rounds=4)
    rng = random.Random(3)
    want = [rng.randint(1, 4) for _ in range(5)]  # bench_multiturn's draws, before the sender's
    got = [sum(1 for r in wl.requests if r.session == f"c{k}") for k in range(5)]
    assert got == want and len(set(want)) > 1
    # The sender continues that stream: its first pop is the next draw.
    assert wl.requests[0].rid == f"c{rng.randrange(5)}r0"
    assert _wl(max_rounds=2).sender == _wl(num_rounds=2).sender  # min 0 = max: fixed, no draw
    for barrier in (False, True):  # the barrier waits for the clients still in each round
        wl = _wl(min_rounds=1, max_rounds=4, round_barrier=barrier, max_parallel=2)
        assert _closed_loop_sends(wl) == [(r.rid, r.arrival_s) for r in wl.requests]
