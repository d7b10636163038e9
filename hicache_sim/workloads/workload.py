"""The Workload a builder returns: requests and how they are sent. Its own module, free of numpy, so
that the workload kinds (and the scenario schema built from them) load without the generators."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .client_loop import SenderSpec
from .records import Request


@dataclass
class Workload:
    """Requests, and for closed-loop workloads how they are sent.

    ``sender`` (closed loop, bench_multiturn): a session's turn t + 1 is sent only after turn t
    finished, by the sender loop of ``client_loop.py``; ``requests`` are then in the order that loop
    sends them under no load, with those send times as ``arrival_s`` (what instant mode replays).
    ``requests`` may be lazy (``workloads/lazy.py``: a trace read from its file as it is replayed);
    runners read them in order and never hold them all.
    """

    requests: Sequence[Request]
    sender: SenderSpec | None = None

    @property
    def closed_loop(self) -> bool:
        return self.sender is not None
