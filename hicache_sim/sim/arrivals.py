"""When requests reach the scheduler: open loop (each at its own ``arrival_s``) or closed loop
(SGLang bench_multiturn: clients wait for their answer before sending the next turn).

Closed loop: a ready queue of clients (FIFO); the sender sends one request, then sleeps the next
ready-queue gap (the workload's own gaps: differences of consecutive ``arrival_s`` in list order),
and only sends while fewer than ``max_parallel`` requests are in flight. A client's turn t + 1 joins
the ready queue when turn t finishes; with ``round_barrier`` only when every client finished turn t.
The request's ``arrival_s`` in the results is the time it was sent.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator
from itertools import pairwise

import simpy

from ..workloads import Request
from ..workloads.synthetic import Workload

Deliver = Callable[[int, Request], None]  # (position in the workload, request)


class OpenLoop:
    """Deliver each request at its ``arrival_s`` (stable order on ties). Only the arrival order is
    kept (positions); each request is read from the workload when it is due, so a workload that
    builds its requests on demand is never held whole."""

    def __init__(self, env: simpy.Environment, workload: Workload, deliver: Deliver) -> None:
        self.env = env
        self.requests = workload.requests
        times = [r.arrival_s for r in self.requests]
        self.order = sorted(range(len(times)), key=times.__getitem__)
        self.deliver = deliver
        self.delivered = 0
        env.process(self._run())

    def _run(self) -> Generator:
        env = self.env
        reqs = self.requests
        for i in self.order:
            req = reqs[i]
            if req.arrival_s > env.now:
                yield env.timeout(req.arrival_s - env.now)
            self.delivered += 1
            self.deliver(i, req)

    def on_done(self, req: Request) -> None:
        """Open loop: a finished request releases nothing."""


class ClosedLoop:
    """bench_multiturn's sender: ready queue, gaps, in-flight cap, optional round barrier."""

    def __init__(self, env: simpy.Environment, workload: Workload, deliver: Deliver) -> None:
        self.env = env
        self.deliver = deliver
        self.max_parallel = workload.max_parallel or len(workload.requests) or 1
        self.barrier = workload.round_barrier
        reqs = workload.requests
        self.gaps = [reqs[0].arrival_s if reqs else 0.0]
        self.gaps += [max(0.0, b.arrival_s - a.arrival_s) for a, b in pairwise(reqs)]
        self.turns: dict[str, deque[tuple[int, Request]]] = {}
        for i in sorted(range(len(reqs)), key=lambda i: reqs[i].turn):  # stable: list order within a turn
            r = reqs[i]
            self.turns.setdefault(r.session or r.rid, deque()).append((i, r))
        self.ready: deque[str] = deque()
        self.round_left: dict[int, int] = {}
        self.held: dict[int, list[str]] = {}
        for r in reqs:
            self.round_left[r.turn] = self.round_left.get(r.turn, 0) + 1
        first = min(self.round_left) if self.round_left else 0
        for session, q in self.turns.items():
            if q and (not self.barrier or q[0][1].turn == first):
                self.ready.append(session)
            elif q:
                self.held.setdefault(q[0][1].turn, []).append(session)
        self.in_flight = 0
        self.delivered = 0
        self._signal: simpy.Event | None = None
        env.process(self._run())

    def _run(self) -> Generator:
        env = self.env
        total = sum(len(q) for q in self.turns.values())
        k = 0
        next_s = self.gaps[0] if self.gaps else 0.0
        while self.delivered < total:
            if next_s > env.now:
                yield env.timeout(next_s - env.now)
            while not self.ready or self.in_flight >= self.max_parallel:
                self._signal = env.event()
                yield self._signal
            session = self.ready.popleft()
            i, req = self.turns[session].popleft()
            self.in_flight += 1
            self.delivered += 1
            self.deliver(i, req)
            k += 1
            next_s = env.now + (self.gaps[k] if k < len(self.gaps) else 0.0)

    def on_done(self, req: Request) -> None:
        """The request finished (or was rejected): free its slot, queue the client's next turn."""
        self.in_flight -= 1
        session = req.session or req.rid
        q = self.turns.get(session)
        if self.barrier:
            self.round_left[req.turn] -= 1
            if q:
                self.held.setdefault(q[0][1].turn, []).append(session)
            self._release_rounds()
        elif q:
            self.ready.append(session)
        if self._signal is not None and not self._signal.triggered:
            self._signal.succeed()

    def _release_rounds(self) -> None:
        """Round r + 1 starts once no request of round r or earlier is left."""
        for turn in sorted(self.held):
            if any(left > 0 for t, left in self.round_left.items() if t < turn):
                break
            self.ready.extend(self.held.pop(turn))


def arrivals_for(env: simpy.Environment, workload: Workload, deliver: Deliver) -> OpenLoop | ClosedLoop:
    """The arrival process the workload asks for."""
    return ClosedLoop(env, workload, deliver) if workload.closed_loop else OpenLoop(env, workload, deliver)
