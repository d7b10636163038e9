"""A request's state inside the timed world (the core's RequestState is its hold on the cache)."""

from __future__ import annotations

from dataclasses import dataclass

from ..core import RequestState
from ..workloads import Request
from .metrics import RequestRecord


@dataclass(eq=False, slots=True)
class SimRequest:
    """One request in the scheduler. Tokens: ``seq_tokens`` to prefill at the next admission (prompt,
    plus the output generated before a retraction), ``done_tokens`` prefilled so far. While decoding,
    ``join_step``/``kv0``/``gen0`` record the decode step it joined at, the KV tokens and the output
    tokens it had then (its current values follow from the batch's step counter). ``epoch`` changes
    whenever it enters or leaves a queue, so stale heap or queue entries are recognised."""

    req: Request
    rec: RequestRecord
    keys: list[int]
    limit: int
    index: int
    seq_tokens: int
    state: str = "waiting"  # waiting | prefill | decode | done
    st: RequestState | None = None
    done_tokens: int = 0
    generated: int = 0
    join_step: int = 0
    kv0: int = 0
    gen0: int = 0
    epoch: int = 0
    had_prefetch: bool = False
    prefetch_reissues: int = 0  # storage re-asks made while queued (SGLang's storage_prefetch_retry_attempts)
    admitted_once: bool = False
    loaded_now: bool = False

    @property
    def out_target(self) -> int:
        """Tokens the request generates (at least the one its prefill samples)."""
        return max(1, self.req.output_tokens)
