"""The record of one ongoing storage prefetch, on the ground floor of the core: the prefetch stop
policies (policies.py) read it, the prefetch flow (prefetch.py) writes it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .tree import Node


class PinHolder(Protocol):
    """What a pin needs of the cache: its device locks and host pins (state.py's CacheState)."""

    def inc_lock_ref(self, node: Node) -> int: ...
    def dec_lock_ref(self, node: Node) -> int: ...
    def protect_host(self, node: Node) -> None: ...
    def release_host(self, node: Node) -> None: ...


@dataclass(frozen=True, eq=False)
class AnchorPin:
    """How a prefetch holds its anchor node while its pages arrive, so the node they hang under is
    neither evicted nor deleted: ``hold`` takes the pin, ``release`` gives it back, ``held`` says
    whether the node still carries it (the checker's rule 17b). One object per kind: NO_PIN, HOST_PIN,
    LOCK_PIN; compared by identity."""

    name: str
    hold: Callable[[PinHolder, Node], object]
    release: Callable[[PinHolder, Node], object]
    held: Callable[[Node], bool]

    def __repr__(self) -> str:
        return f"AnchorPin({self.name})"


#: The root anchors a prefetch without a pin: it is never evicted.
NO_PIN = AnchorPin("none", lambda cache, node: None, lambda cache, node: None, lambda node: True)
#: A host-backed anchor: its host copy is protected (``protect_host``), as SGLang's ``protect_host``.
HOST_PIN = AnchorPin(
    "host",
    lambda cache, node: cache.protect_host(node),
    lambda cache, node: cache.release_host(node),
    lambda node: node.host_ref >= 1,
)
#: A device-only anchor: the node and its ancestors are locked on device (``inc_lock_ref``).
LOCK_PIN = AnchorPin(
    "lock",
    lambda cache, node: cache.inc_lock_ref(node),
    lambda cache, node: cache.dec_lock_ref(node),
    lambda node: node.lock_ref >= 1,
)


@dataclass(slots=True)
class PrefetchOp:
    """An ongoing storage prefetch. Pages unless stated; ``start_time`` in simulated seconds."""

    rid: str
    anchor: Node
    pin: AnchorPin  # HOST_PIN, LOCK_PIN or NO_PIN (the root)
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
