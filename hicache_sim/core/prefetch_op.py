"""The record of one ongoing storage prefetch, on the ground floor of the core: the prefetch stop
policies (policies.py) read it, the prefetch flow (prefetch.py) writes it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .tree import Node


@dataclass(slots=True)
class PrefetchOp:
    """An ongoing storage prefetch. Pages unless stated; ``start_time`` in simulated seconds."""

    rid: str
    anchor: Node
    pin: str  # "host" (protect_host) or "lock" (inc_lock_ref) or "none" (root)
    keys: list[int]
    hashes: list[int]
    start_time: float
    host_pages: list[int] | None = None
    hit_pages: int | None = None
    completed_pages: int = 0
    terminated: bool = False
    transfer_ids: list[int] = field(default_factory=list)

    def is_complete(self) -> bool:
        """Every hit page arrived. An empty hit counts as not complete, as upstream."""
        hit = self.hit_pages
        return hit is not None and hit != 0 and self.completed_pages >= hit
