"""bench_multiturn's client side as a clock-free state machine, shared by the timed closed loop
(``sim/arrivals.py``, SimPy clock) and by the no-load replay that orders instant mode's requests.

SGLang's ``benchmark/hicache/bench_multiturn.py`` sender loops forever: while fewer than
``max_parallel`` requests are in flight it pops the ready queue (``random``: a uniformly drawn entry,
``fifo``: the oldest; an empty queue pops nothing) and then sleeps one gap (Poisson: exponential with
mean 1 / rate; uniform: U(0, 2 / rate)) whether or not it sent; at the cap it sleeps 50 ms and retries.
A finished request appends its client's next turn to the queue; with the round barrier the next turns
are held (in finish order) until every request of the round finished, then released after a pause
(bench_multiturn sends a small heartbeat request and sleeps 10 s). One ``random.Random(seed)`` feeds
both the pops and the gaps (after the per-client round counts, when they vary) in the order
bench_multiturn draws them from its seeded ``random`` module: with a server that answers at once, the
order below is the one its sender draws for that seed, as long as nothing else drew from that stream
first (its ShareGPT sampling, without ``--disable-random-sample``, may shuffle with it).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..core.registry import Registry
from .records import Request

#: bench_multiturn's sleep when ``max_parallel`` requests are in flight (``asyncio.sleep(0.05)``).
POLL_S = 0.05

#: Which ready-queue entry the sender pops: index chosen from (rng, queue length).
READY_QUEUE_POLICIES: Registry[Callable[[random.Random, int], int]] = Registry(
    "ready-queue policy", "workload.multiturn.ready_queue_policy"
)
READY_QUEUE_POLICIES.add("random", lambda rng, n: rng.randrange(n))
READY_QUEUE_POLICIES.add("fifo", lambda rng, n: 0)

#: The sender's sleep after each pop attempt, drawn from (rng, rate).
GAP_DISTRIBUTIONS: Registry[Callable[[random.Random, float], float]] = Registry(
    "request-interval distribution", "workload.multiturn.distribution"
)
GAP_DISTRIBUTIONS.add("poisson", lambda rng, rate: rng.expovariate(rate))
GAP_DISTRIBUTIONS.add("uniform", lambda rng, rate: rng.uniform(0.0, 2.0 / rate))


@dataclass(frozen=True)
class SenderSpec:
    """How bench_multiturn sends: ready-queue policy, seed, interval distribution and rate, in-flight
    cap, round barrier and the pause before a barrier releases the next round."""

    policy: str = "random"
    seed: int = 1
    rate: float = 1.0
    distribution: str = "poisson"
    max_parallel: int = 128
    round_barrier: bool = False
    barrier_pause_s: float = 10.0
    #: The ready queue at the start, bench_multiturn's client 0..N-1 (empty: first appearance in the list).
    clients: tuple[str, ...] = ()
    #: The stream's state when the sender starts, where draws came first (bench_multiturn's per-client
    #: round counts); None: ``random.Random(seed)`` fresh.
    rng_state: tuple | None = None


class ClientLoop:
    """Ready queue, in-flight count and barrier of one bench_multiturn run; the caller owns the clock.

    ``wake()`` is one turn of the sender loop: it returns the request sent (or None) and how long the
    sender sleeps next. ``finished(req)`` returns the delay after which ``release()`` must be called
    (a barrier round just completed) or None.
    """

    def __init__(self, requests: Sequence[Request], spec: SenderSpec) -> None:
        self.spec = spec
        self.rng = random.Random(spec.seed)
        if spec.rng_state is not None:
            self.rng.setstate(spec.rng_state)
        self._pick = READY_QUEUE_POLICIES.get(spec.policy)
        self._gap = GAP_DISTRIBUTIONS.get(spec.distribution)
        self.turns: dict[str, list[Request]] = {}
        for r in sorted(requests, key=lambda r: r.turn):  # stable: list order within a turn
            self.turns.setdefault(r.session or r.rid, []).append(r)
        for q in self.turns.values():
            q.reverse()  # pop() from the end = the next turn
        self.total = len(requests)
        order = spec.clients or tuple(self.turns)
        self.ready: list[Request] = [self.turns[c].pop() for c in order]  # every client's first turn
        self.per_round: dict[int, int] = {}
        for r in requests:
            self.per_round[r.turn] = self.per_round.get(r.turn, 0) + 1
        self.round = min(self.per_round, default=0)
        self.round_done = 0
        self.held: list[Request] = []
        self.in_flight = 0
        self.sent = 0

    def wake(self) -> tuple[Request | None, float]:
        """One sender iteration: pop if under the cap, then the sleep that follows it."""
        if self.in_flight >= self.spec.max_parallel:
            return None, POLL_S
        req = None
        if self.ready:
            req = self.ready.pop(self._pick(self.rng, len(self.ready)))
            self.in_flight += 1
            self.sent += 1
        return req, self._gap(self.rng, self.spec.rate)

    def finished(self, req: Request) -> float | None:
        """``req`` finished (or was rejected): free its slot, queue or hold its client's next turn."""
        self.in_flight -= 1
        q = self.turns.get(req.session or req.rid)
        nxt = q.pop() if q else None
        if not self.spec.round_barrier:
            if nxt is not None:
                self.ready.append(nxt)
            return None
        if nxt is not None:
            self.held.append(nxt)
        self.round_done += 1
        if self.round_done < self.per_round.get(self.round, 0):
            return None
        self.round_done = 0
        self.round += 1
        return self.spec.barrier_pause_s

    def release(self) -> None:
        """The barrier's pause is over: the held turns join the queue in the order they finished."""
        self.ready.extend(self.held)
        self.held = []

    @property
    def all_sent(self) -> bool:
        return self.sent >= self.total


def no_load_order(requests: Sequence[Request], spec: SenderSpec) -> list[tuple[Request, float]]:
    """(request, send time) in the order the closed loop sends them when every request finishes the
    moment it is sent: instant mode's order, and bench_multiturn's against a server with no latency."""
    loop = ClientLoop(requests, spec)
    out: list[tuple[Request, float]] = []
    t = 0.0
    release_at: float | None = None
    while not loop.all_sent:
        if release_at is None and not loop.ready and not loop.held:
            raise RuntimeError("closed loop stalled: no client ready, none held")  # a bug, not an input
        if release_at is not None and release_at <= t:
            loop.release()
            release_at = None
        req, gap = loop.wake()
        if req is not None:
            out.append((req, t))
            pause = loop.finished(req)
            if pause is not None:
                release_at = t + pause
        t += gap
    return out
