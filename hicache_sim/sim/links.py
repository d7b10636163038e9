"""Links of the timed world: PCIe H2D and D2H (independent directions), storage read and write.

A transfer costs, alone on its link, ``latency + work`` where ``work = segments x overhead +
bytes / (bandwidth x eff(segment))`` (:mod:`hicache_sim.hardware.linkmodel`). The latency is private to the
transfer (DMA set-up pipelines with other copies); the work is what the direction serves:

- ``processor`` sharing (default): the n transfers in their work phase each progress at 1/n of
  the link, so two equal concurrent transfers both take about twice as long;
- ``fifo``: one transfer at a time in submission order (a single copy stream).

Processor sharing is kept exact with a virtual clock ``V`` (service each active transfer has
received, in seconds of exclusive link time): ``dV/dt = 1/n``. A transfer that joins at ``V0`` with
``work`` finishes when ``V = V0 + work``; optional milestones (per-layer arrival of a load-back)
fire at equal fractions of the work. One pending SimPy timeout per link points at the next due
entry; a generation number makes superseded timeouts no-ops (SimPy cannot cancel them).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import simpy

from ..hardware.linkmodel import LinkParams

SHARING_MODES = ("processor", "fifo")
# Entries due within this many seconds of the virtual clock are treated as due now: keeps float
# rounding from producing zero-length timeouts that never advance time.
_TOLERANCE_S = 1e-9


@dataclass(eq=False, slots=True)
class Flow:
    """One transfer on a link. ``work_s``: seconds of exclusive link time after the latency."""

    id: int
    nbytes: int
    latency_s: float
    work_s: float
    on_done: Callable[[Flow], None] | None
    milestones: int = 0
    on_milestone: Callable[[Flow, int, float], None] | None = None
    submit_s: float = 0.0
    start_s: float | None = None
    end_s: float | None = None
    v_start: float = 0.0
    tag: object = field(default=None)


class Link:
    """One direction of a link with processor-sharing or FIFO service and utilisation accounting."""

    def __init__(self, env: simpy.Environment, name: str, params: LinkParams, sharing: str = "processor") -> None:
        if sharing not in SHARING_MODES:
            raise ValueError(f"link {name}: sharing must be one of {SHARING_MODES}, got {sharing!r}")
        self.env = env
        self.name = name
        self.params = params
        self.fifo = sharing == "fifo"
        self.bytes = 0  # bytes of completed transfers
        self.transfers = 0
        self.busy_s = 0.0  # time with at least one transfer in its work phase (up to self._t)
        self._v = 0.0
        self._t = 0.0
        self._n = 0
        self._heap: list[tuple[float, int, int, Flow]] = []  # (V due, seq, milestone index or -1, flow)
        self._seq = 0
        self._gen = 0
        self._queue: deque[Flow] = deque()
        self._next_id = 0

    # ------------------------------------------------------------------------------ submitting

    def cost(self, nbytes: int, segments: int, launches: int = 1) -> tuple[float, float]:
        """(latency, work) seconds of a transfer alone on this link. A transfer of several copy
        operations (one per layer) pays the first one's latency up front and the others' as link time."""
        p = self.params
        work = (
            (launches - 1) * p.latency_s
            + segments * p.segment_overhead_s
            + p.effective_bytes(nbytes, segments) / p.bandwidth_Bps
        )
        return p.latency_s, work

    def submit(
        self,
        nbytes: int,
        segments: int,
        on_done: Callable[[Flow], None] | None = None,
        *,
        milestones: int = 0,
        on_milestone: Callable[[Flow, int, float], None] | None = None,
        tag: object = None,
        launches: int = 1,
    ) -> Flow:
        """Start a transfer now (mutates). ``on_done(flow)`` runs at its completion; with
        ``milestones = k`` ``on_milestone(flow, i, t)`` runs when fraction (i + 1) / k has arrived."""
        latency, work = self.cost(nbytes, segments, launches)
        flow = Flow(
            self._next_id, nbytes, latency, work, on_done, milestones, on_milestone, submit_s=self.env.now, tag=tag
        )
        self._next_id += 1
        if latency > 0:
            self.env.timeout(latency).callbacks.append(lambda _ev: self._join(flow))
        else:
            self._join(flow)
        return flow

    def busy_until(self, t: float) -> float:
        """Busy seconds up to ``t`` (``t`` not before the last event on this link)."""
        return self.busy_s + (t - self._t if self._n > 0 else 0.0)

    # -------------------------------------------------------------------------------- service

    def _join(self, flow: Flow) -> None:
        if self.fifo and self._n > 0:
            self._queue.append(flow)
            return
        self._activate(flow)

    def _activate(self, flow: Flow) -> None:
        self._advance()
        flow.start_s = self.env.now
        flow.v_start = self._v
        for i in range(flow.milestones - 1):  # the last milestone is the completion itself
            self._push(self._v + flow.work_s * (i + 1) / flow.milestones, i, flow)
        self._push(self._v + flow.work_s, -1, flow)
        self._n += 1
        self._reschedule()

    def _push(self, due: float, kind: int, flow: Flow) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (due, self._seq, kind, flow))

    def _advance(self) -> None:
        now = self.env.now
        dt = now - self._t
        if dt > 0 and self._n > 0:
            self._v += dt / self._n
            self.busy_s += dt
        self._t = now

    def _reschedule(self) -> None:
        self._gen += 1
        if not self._heap:
            return
        delay = max(0.0, (self._heap[0][0] - self._v) * self._n)
        gen = self._gen
        self.env.timeout(delay).callbacks.append(lambda _ev: self._fire(gen))

    def _fire(self, gen: int) -> None:
        if gen != self._gen:
            return
        self._advance()
        now = self.env.now
        heap = self._heap
        done: list[Flow] = []
        # This timeout was set for the head entry, and nothing touched the heap since (a change bumps
        # the generation): the head is due even where the clock could not resolve the wait (far out, a
        # float's step exceeds a small wait, so ``now`` and ``V`` stop moving), so each firing pops at
        # least one entry; the others are due within the tolerance.
        head = True
        while heap and (head or (heap[0][0] - self._v) * max(1, self._n) <= _TOLERANCE_S):
            head = False
            _due, _seq, kind, flow = heapq.heappop(heap)
            if kind >= 0:
                if flow.on_milestone is not None:
                    flow.on_milestone(flow, kind, now)
                continue
            self._n -= 1
            flow.end_s = now
            self.bytes += flow.nbytes
            self.transfers += 1
            done.append(flow)
        if self.fifo and self._n == 0 and self._queue:
            self._activate(self._queue.popleft())  # reschedules
        else:
            self._reschedule()
        for flow in done:
            if flow.milestones and flow.on_milestone is not None:
                flow.on_milestone(flow, flow.milestones - 1, now)
            if flow.on_done is not None:
                flow.on_done(flow)

    def stats(self, elapsed_s: float) -> dict:
        """{bytes, busy_s, utilisation} over ``elapsed_s`` simulated seconds."""
        busy = self.busy_until(self.env.now)
        return {
            "bytes": self.bytes,
            "busy_s": busy,
            "utilisation": busy / elapsed_s if elapsed_s > 0 else 0.0,
            "transfers": self.transfers,
        }


def storage_params(bandwidth_Bps: float, latency_s: float) -> LinkParams:
    """Storage link: latency per batch and bandwidth; no per-piece cost, full efficiency."""
    return LinkParams(
        bandwidth_Bps=bandwidth_Bps, latency_s=latency_s, half_efficiency_bytes=0.0, segment_overhead_s=0.0
    )


def offload_params(bandwidth_Bps: float, latency_s: float) -> LinkParams:
    """An offload disk read one object at a time: each object's latency is link time (a segment's
    overhead, one segment an object), then its bytes at the disk's rate."""
    return LinkParams(
        bandwidth_Bps=bandwidth_Bps, latency_s=0.0, half_efficiency_bytes=0.0, segment_overhead_s=latency_s
    )
