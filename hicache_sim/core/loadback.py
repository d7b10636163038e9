"""Host -> device load-back of a host hit: all or nothing, with SGLang's threshold and memory quota."""

from __future__ import annotations

from .config import CacheConfig
from .errors import CacheStateError
from .state import CacheState
from .transfers import Transfer, TransferKind
from .tree import Node


class LoadBackMixin(CacheState):
    """load_back and its acknowledgement."""

    def __init__(self, config: CacheConfig) -> None:
        super().__init__(config)
        self.ongoing_load: dict[int, Node] = {}

    def alloc_device(self, n: int) -> list[int] | None:
        """Allocate ``n`` device pages, evicting from the tree when short (mutates). None if impossible.

        The scheduler asks the tree for the whole need (``need``, before 2026) or only the
        shortfall (``deficit``), as ``semantics.evict_amount`` says.
        """
        pages = self.device.alloc(n)
        if pages is None:
            self.evict(self.sem.evict_amount.pages(n, self.device.available()))
            pages = self.device.alloc(n)
            if pages is None:
                self.counters.failed_device_allocations += 1
        return pages

    def load_back(self, node: Node, mem_quota_pages: int | None = None, request_id: str | None = None) -> Node | None:
        """Bring the evicted chain ending at ``node`` back to device (mutates).

        All or nothing: refused when the chain is under ``load_back_threshold_tokens`` or over
        ``mem_quota_pages`` (less what locking the ancestor newly protects), or when device pages
        cannot be found even after eviction. On success the chain is D+H, the path stays locked until
        the H2D ack, and the deepest loaded node is returned.
        """
        chain: list[Node] = []
        n = 0
        x = node
        while x.value is None:
            parent, h = x.parent, x.host_value
            if parent is None or h is None:
                raise CacheStateError(f"load_back of node {x.id}: not an H-only node in the tree")
            chain.append(x)
            n += len(h)
            x = parent
        if not chain:
            return None
        chain.reverse()
        ancestor = x
        newly = self.inc_lock_ref(ancestor)
        if n * self.page_size < self.config.load_back_threshold_tokens:
            self.dec_lock_ref(ancestor)
            self.counters.load_back_below_threshold += 1
            return None
        if mem_quota_pages is not None and n > mem_quota_pages - newly:
            self.dec_lock_ref(ancestor)
            self.counters.load_back_over_quota += 1
            return None
        for c in chain:  # a nested write-back eviction must not free the chain's host pages
            self.protect_host(c)
        pages = self.alloc_device(n)
        self.dec_lock_ref(ancestor)
        for c in chain:
            self.release_host(c)
        if pages is None:
            self.counters.load_back_failed_alloc += 1
            return None
        host_pages: list[int] = []
        i = 0
        for c in chain:
            h = c.host_value
            if h is None:  # pinned through alloc_device: never reclaimed
                raise CacheStateError(f"load_back: node {c.id} lost its host copy during the allocation")
            k = len(h)
            self._set_value(c, pages[i : i + k])
            host_pages.extend(h)
            i += k
        last = chain[-1]
        self.inc_lock_ref(last)
        t = self._new_transfer(
            TransferKind.H2D,
            "load_back",
            n,
            device_pages=list(pages),
            host_pages=host_pages,
            node_ids=[c.id for c in chain],
            request_id=request_id,
        )
        for c in chain:  # not a settled duplicate until the ack
            c.pending_load = t.id
        self.ongoing_load[t.id] = last
        self.counters.load_backs += 1
        self.counters.load_back_pages += n
        return last

    def _ack_load(self, t: Transfer) -> None:
        """H2D acknowledged: unlock the path; the loaded nodes (and halves split off them since),
        found walking up from the deepest, become full host duplicates in that order."""
        x = self.ongoing_load.pop(t.id)
        self.dec_lock_ref(x)
        parent = x.parent  # up to the root, which alone in the tree has no parent
        while parent is not None:
            if x.pending_load == t.id:
                x.pending_load = None
                self._track_duplicate(x)
            x = parent
            parent = x.parent
