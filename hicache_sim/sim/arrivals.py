"""When requests reach the scheduler: open loop (each at its own ``arrival_s``) or closed loop
(SGLang bench_multiturn: clients wait for their answer before sending the next turn).

Closed loop: bench_multiturn's sender loop (``workloads/client_loop.py``, shared with instant mode's
no-load order): a seeded ready queue (random or fifo), a gap after every pop attempt, a 50 ms retry at
the in-flight cap, a client's next turn queued when its turn finishes (with the round barrier: held
until the round is done, then released after the barrier pause). The request's ``arrival_s`` in the
results is the time it was sent.

Serving loop: SGLang bench_serving's client: its warm-up requests at once, a pause after they finished,
then every request at its time (``arrival_s`` counted from the end of the pause) through a semaphore
of ``max_concurrency``: a request due while the cap is reached waits, and waiting requests are sent in
their order as slots free. Its ``arrival_s`` in the results is also the time it was sent, which is
where bench_serving starts its TTFT clock (inside the semaphore).
"""

from __future__ import annotations

from collections.abc import Callable, Generator

import simpy

from ..workloads import Request
from ..workloads.client_loop import ClientLoop
from ..workloads.lazy import arrival_times
from ..workloads.synthetic import Workload

Deliver = Callable[[int, Request], None]  # (position in the workload, request)


class OpenLoop:
    """Deliver each request at its ``arrival_s`` (stable order on ties). Only the arrival order is
    kept (positions); each request is read from the workload when it is due, so a workload that
    builds its requests on demand is never held whole."""

    def __init__(self, env: simpy.Environment, workload: Workload, deliver: Deliver) -> None:
        self.env = env
        self.requests = workload.requests
        times = arrival_times(self.requests)
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
    """bench_multiturn's sender (see ``workloads/client_loop.py``) on the SimPy clock."""

    def __init__(self, env: simpy.Environment, workload: Workload, deliver: Deliver) -> None:
        self.env = env
        self.deliver = deliver
        sender = workload.sender
        assert sender is not None, "a closed-loop workload names its sender"
        self.loop = ClientLoop(workload.requests, sender)
        self.position = {r.rid: i for i, r in enumerate(workload.requests)}  # closed loops are small
        self.delivered = 0
        env.process(self._run())

    def _run(self) -> Generator:
        env, loop = self.env, self.loop
        while not loop.all_sent:
            req, sleep_s = loop.wake()
            if req is not None:
                self.delivered += 1
                self.deliver(self.position[req.rid], req)
                if loop.all_sent:
                    break
            yield env.timeout(sleep_s)

    def on_done(self, req: Request) -> None:
        """The request finished (or was rejected): free its slot, queue the client's next turn."""
        pause = self.loop.finished(req)
        if pause is not None:
            self.env.process(self._release_after(pause))

    def _release_after(self, pause_s: float) -> Generator:
        yield self.env.timeout(pause_s)
        self.loop.release()


class ServingLoop:
    """bench_serving's sender (see the module docstring) on the SimPy clock."""

    def __init__(self, env: simpy.Environment, workload: Workload, deliver: Deliver) -> None:
        assert workload.serving is not None
        self.env = env
        self.deliver = deliver
        self.requests = workload.requests
        self.spec = workload.serving
        self.cap = self.spec.max_concurrency
        self.in_flight = 0
        self.warming = 0  # unmeasured requests of the current phase still in flight or unsent
        self.delivered = 0
        self._slot = env.event()
        self._warm = env.event()
        env.process(self._run())

    def _send(self, i: int) -> None:
        self.in_flight += 1
        self.delivered += 1
        self.deliver(i, self.requests[i])

    def _send_capped(self, indices: range, cap: int | None, start: float | None) -> Generator:
        """Send ``indices`` in order, each at ``start + arrival_s`` (None: at once), at most ``cap`` in
        flight."""
        env = self.env
        for i in indices:
            if start is not None:
                due = start + self.requests[i].arrival_s
                if due > env.now:
                    yield env.timeout(due - env.now)
            while cap is not None and self.in_flight >= cap:
                yield self._slot
            self._send(i)

    def _run(self) -> Generator:
        env, w = self.env, self.spec.warmup
        first = 0
        for count, cap in self.spec.phases or ((w, None),):
            if not count:
                continue
            self.warming = count
            self._warm = env.event()
            yield from self._send_capped(range(first, first + count), cap, None)
            if self.warming:
                yield self._warm
            first += count
        if w:
            yield env.timeout(self.spec.warmup_pause_s)
        yield from self._send_capped(range(w, len(self.requests)), self.cap, env.now)

    def on_done(self, req: Request) -> None:
        """A finished (or rejected) request frees its slot; the last of an unmeasured phase starts the
        next one (or, after the warm-up, the run)."""
        self.in_flight -= 1
        if self.warming:
            self.warming -= 1
            if not self.warming:
                self._warm.succeed()
        if not self._slot.triggered:
            self._slot.succeed()
            self._slot = self.env.event()


def arrivals_for(env: simpy.Environment, workload: Workload, deliver: Deliver) -> OpenLoop | ClosedLoop | ServingLoop:
    """The arrival process the workload asks for."""
    if workload.serving is not None:
        return ServingLoop(env, workload, deliver)
    return ClosedLoop(env, workload, deliver) if workload.closed_loop else OpenLoop(env, workload, deliver)
