"""The record of one request's hold on the cache, on the ground floor of the core: the request steps
(requests.py) write it, the buffer_only prefetch consumption (buffer.py) reads it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .tree import Node


@dataclass(slots=True)
class RequestState:
    """One request's hold on the cache. ``pages[i]`` is the device slot of ``keys[i]``.

    ``cached`` leading pages belong to the tree (SGLang's ``cache_protected_len``); the rest are the
    request's own until inserted. ``inserted``: pages this request has inserted so far (SGLang's
    ``cache_inserted_len``). ``last_node`` is the node this request keeps locked.
    Hit counts are pages found at admission: device, host (true L2) and storage (prefetched).
    """

    rid: str
    keys: list[int]
    pages: list[int]
    cached: int
    last_node: Node
    match_last_node: Node
    device_hit: int = 0
    host_hit: int = 0
    storage_hit: int = 0
    loaded_pages: int = 0
    priority: int = 0
    inserted: int = 0
    done: bool = field(default=False)
