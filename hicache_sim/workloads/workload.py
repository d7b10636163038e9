"""The Workload a builder returns: requests and how they are sent. Its own module, free of numpy, so
that the workload kinds (and the scenario schema built from them) load without the generators."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .client_loop import SenderSpec
from .records import Request

#: The timed world's clock is a float of seconds. Below 2**23 s (97 days) one step of it is at most
#: 2**-30 s, under the links' 1 ns tolerance and far under the world's microsecond costs, so every wait
#: moves time; further out, small waits round to nothing and the results lose their resolution.
#: Arrivals must fall before it, and a timed run whose clock passes it stops with an error.
MAX_CLOCK_S = float(2**23)


@dataclass(frozen=True)
class ServingSpec:
    """How SGLang's bench_serving sends: the unmeasured requests at the head of the workload first, in
    ``phases`` of (count, in-flight cap or None) each sent when the previous one has finished (earlier
    runs on the same server, then its warm-up, sent all at once), then a pause, then the run's
    requests at their times through a semaphore of ``max_concurrency`` (None: no cap); waiting
    requests get a slot in their order."""

    max_concurrency: int | None = None
    warmup: int = 0
    #: The unmeasured requests' groups in order (they sum to ``warmup``); empty: one group of ``warmup``.
    phases: tuple[tuple[int, int | None], ...] = ()
    #: bench_serving sleeps 1 s between the warm-up and the run (``time.sleep(1.0)``).
    warmup_pause_s: float = 1.0


@dataclass
class Workload:
    """Requests, and for closed-loop workloads how they are sent.

    ``sender`` (closed loop, bench_multiturn): a session's turn t + 1 is sent only after turn t
    finished, by the sender loop of ``client_loop.py``; ``requests`` are then in the order that loop
    sends them under no load, with those send times as ``arrival_s`` (what instant mode replays).
    ``serving`` (bench_serving): the first ``serving.warmup`` requests are its warm-up, sent first and
    not measured; the others are sent in list order, each at its ``arrival_s`` after the warm-up, at
    most ``serving.max_concurrency`` in flight.
    ``requests`` may be lazy (``workloads/lazy.py``: a trace read from its file as it is replayed);
    runners read them in order and never hold them all.
    """

    requests: Sequence[Request]
    sender: SenderSpec | None = None
    serving: ServingSpec | None = None

    @property
    def closed_loop(self) -> bool:
        return self.sender is not None

    @property
    def warmup_requests(self) -> int:
        """Requests at the head of ``requests`` that are the client's warm-up (never measured)."""
        return self.serving.warmup if self.serving is not None else 0
