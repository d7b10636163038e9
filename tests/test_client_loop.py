"""bench_multiturn's sender rules one at a time (issue 30 item 1: each was caught only by the
published-run suite): the 50 ms poll at the in-flight cap draws nothing from the seeded stream, and a
round barrier releases the held turns in the order their requests finished."""

from __future__ import annotations

import random

from hicache_sim.workloads.client_loop import POLL_S, ClientLoop, SenderSpec
from hicache_sim.workloads.records import Request


def _requests(clients: int, rounds: int) -> list[Request]:
    return [
        Request(f"c{c}t{t}", 0.0, 64, 1, (c * 100 + t,), session=f"c{c}", turn=t)
        for c in range(clients)
        for t in range(rounds)
    ]


def test_at_the_in_flight_cap_the_sender_sleeps_50_ms_and_draws_nothing():
    loop = ClientLoop(_requests(4, 2), SenderSpec(policy="random", seed=7, rate=2.0, max_parallel=2))
    sent = [loop.wake()[0] for _ in range(2)]
    assert all(r is not None for r in sent) and loop.in_flight == 2
    state = loop.rng.getstate()
    for _ in range(3):
        assert loop.wake() == (None, POLL_S)
    assert POLL_S == 0.05  # bench_multiturn's asyncio.sleep(0.05)
    assert loop.rng.getstate() == state  # the poll neither pops nor draws a gap
    # Under the cap again, the next pop and gap are the draws bench_multiturn's stream makes next.
    loop.finished(sent[0])
    twin = random.Random()
    twin.setstate(state)
    ready = list(loop.ready)
    req, gap = loop.wake()
    assert req is ready[twin.randrange(len(ready))]
    assert gap == twin.expovariate(2.0)
    assert loop.in_flight == 2


def test_a_round_barrier_releases_the_held_turns_in_finish_order():
    loop = ClientLoop(_requests(3, 2), SenderSpec(policy="fifo", round_barrier=True, barrier_pause_s=10.0))
    first = [loop.wake()[0] for _ in range(3)]
    assert [r.rid for r in first] == ["c0t0", "c1t0", "c2t0"]
    by_rid = {r.rid: r for r in first}
    assert loop.finished(by_rid["c2t0"]) is None
    assert loop.finished(by_rid["c0t0"]) is None
    assert loop.ready == []  # held, not queued, until the whole round finished
    assert loop.finished(by_rid["c1t0"]) == 10.0  # the round is complete: release after the pause
    assert loop.ready == []
    loop.release()
    assert [r.rid for r in loop.ready] == ["c2t1", "c0t1", "c1t1"]


def test_uniform_gaps_are_drawn_on_twice_the_mean():
    """bench_multiturn's uniform distribution sleeps U(0, 2 / rate) after each pop attempt (mean 1 / rate):
    each gap is the seeded stream's next uniform draw on that interval."""
    loop = ClientLoop(_requests(6, 1), SenderSpec(policy="fifo", seed=5, rate=4.0, distribution="uniform"))
    twin = random.Random(5)
    gaps = [loop.wake()[1] for _ in range(6)]
    assert gaps == [twin.uniform(0.0, 2.0 / 4.0) for _ in range(6)]
    assert max(gaps) > 1.0 / 4.0  # draws above the mean: the interval is not [0, 1 / rate)
