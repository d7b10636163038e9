"""The seam between the core and its callers: Transfer values and the transfer-log record.

The core never waits and never copies. Every operation that moves KV puts a :class:`Transfer` in the
cache's outbox (``HiCache.take_transfers()``); the caller performs it (SimPy link, torch copy, or at
once in instant mode) and reports completion with ``HiCache.complete(transfer)``. Until then the
pages stay pinned as SGLang pins them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class TransferKind(str, Enum):
    """Direction of a KV movement."""

    D2H = "d2h"  # device -> host: write-through / write-back backup, buffer_only staging
    H2D = "h2d"  # host -> device: load-back of a host hit, buffer_only prefetch consumption
    S2H = "s2h"  # storage -> host: L3 prefetch (one transfer per storage batch)
    H2S = "h2s"  # host -> storage: L3 backup after the D2H ack (one transfer per node)


@dataclass(slots=True)
class Transfer:
    """One KV movement decided by the core.

    ``pages`` and ``bytes`` are what crosses the link. Device/host page lists name the slots
    (source and destination); storage transfers carry page hashes instead of device slots.
    ``blocking`` marks copies the scheduler thread waits for (the write-back flush inside
    ``evict``): the core has already applied their effect, the world only charges their time.
    """

    id: int
    kind: TransferKind
    reason: str
    pages: int
    bytes: int
    device_pages: list[int] = field(default_factory=list)
    host_pages: list[int] = field(default_factory=list)
    page_hashes: list[int] = field(default_factory=list)
    node_ids: list[int] = field(default_factory=list)
    request_id: str | None = None
    blocking: bool = False
    issued_at: float = 0.0
    #: S2H: objects of the batch the store reads from its offload disk (the pages it evicted), over
    #: every writing rank; 0 without an offload disk.
    offload_objects: int = 0

    def record(self) -> dict:
        """Row of the transfer log (JSON-serialisable; page lists kept for the replay harness)."""
        return {
            "id": self.id,
            "kind": self.kind.value,
            "reason": self.reason,
            "pages": self.pages,
            "bytes": self.bytes,
            "device_pages": list(self.device_pages),
            "host_pages": list(self.host_pages),
            "request_id": self.request_id,
            "blocking": self.blocking,
            "issued_at": self.issued_at,
        }
