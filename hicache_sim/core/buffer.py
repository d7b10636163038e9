"""Host memory mode ``buffer_only``: host memory is a staging buffer between GPU and storage.

Nodes never keep a host copy; device eviction deletes; everything cached beyond the GPU lives in
storage. Write path: a write-through trigger queues a FIFO *intent*; each tick ``flush_pending_writes``
stages intents into host pages within the live window, pins the device node for the D2H copy, then
writes to storage and frees the staging pages at the storage ack. Read path: a storage prefetch lands
in host "bounce" pages and is parked until the request is admitted; then it is copied to device,
inserted as device nodes, and the bounce pages are freed at the H2D ack.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .config import CacheConfig
from .prefetch_op import NO_PIN
from .state import CacheState
from .transfers import Transfer, TransferKind
from .tree import Node

if TYPE_CHECKING:
    from .prefetch_op import AnchorPin, PrefetchOp
    from .request_state import RequestState


@dataclass(slots=True)
class BufferIntent:
    """A queued request to write ``node`` (``pages`` long when queued) to storage."""

    node: Node
    pages: int


@dataclass(slots=True)
class StagedPrefetch:
    """Prefetched pages waiting in host bounce pages for their request's admission."""

    anchor: Node
    pin: AnchorPin  # the prefetch's, taken over until the request consumes the pages
    keys: list[int]
    host_pages: list[int]


class BufferMixin(CacheState):
    """buffer_only write intents, staging flush, storage writes, staged prefetch consumption."""

    def __init__(self, config: CacheConfig) -> None:
        super().__init__(config)
        self.buffer_queue: deque[BufferIntent] = deque()
        self.buffer_backlog_pages = 0
        self.buffer_staged_pages = 0  # host pages holding in-flight write staging
        self._buffer_inflight: dict[Node, int] = {}  # node -> queued/staged/storing writes
        self._buffer_writes: dict[int, tuple[Node, list[int], list[int]]] = {}
        self.staged_prefetch: dict[str, StagedPrefetch] = {}
        self._buffer_loads: dict[int, list[int]] = {}

    @property
    def write_backlog_cap_pages(self) -> int:
        """Metadata backlog bound: twice the device pool."""
        return 2 * self.config.device_pages

    def _covered(self, node: Node) -> bool:
        """Can a child of ``node`` be written without leaving a hole in storage?"""
        if node is self.root or node in self._buffer_inflight:
            return True
        assert self.storage is not None, "buffer_only runs with a storage tier"
        return bool(node.hashes and node.hashes[-1] in self.storage)

    def buffer_backup_intent(self, node: Node) -> int:
        """Queue ``node`` for a storage write (mutates). Returns 0: no host copy is kept."""
        n = len(node.key)
        parent = node.parent
        assert self.storage is not None and parent is not None, "buffer_only, a node below the root"
        if node in self._buffer_inflight or (node.hashes and node.hashes[-1] in self.storage):
            return 0  # one intent per node: already queued or being written, or already durable
        # Oversize (can never be staged: it would block the FIFO head forever), parent not covered, or
        # backlog full: dropped.
        if (
            n > self.host.size
            or not self._covered(parent)
            or self.buffer_backlog_pages + n > self.write_backlog_cap_pages
        ):
            self.counters.buffer_intents_dropped += 1
            return 0
        self.buffer_queue.append(BufferIntent(node, n))
        self.buffer_backlog_pages += n
        self._buffer_inflight[node] = self._buffer_inflight.get(node, 0) + 1
        self.counters.buffer_intents += 1
        return 0

    def _buffer_done(self, node: Node) -> None:
        left = self._buffer_inflight[node] - 1
        if left:
            self._buffer_inflight[node] = left
        else:
            del self._buffer_inflight[node]

    def flush_pending_writes(self) -> int:
        """Stage queued intents into host pages within the live window (mutates). Returns pages staged.

        Loads have priority: the window is ``max(0.2 host, host - prefetch in flight - host/10)``.
        An intent whose node left the device, was split or deleted is dropped; so is one whose parent
        is no longer covered (its queued descendants then drop too: no holes in storage).
        """
        if not self.host_mode.stages:
            return 0
        host = self.host.size
        live_cap = max(int(0.2 * host), host - self.prefetch_occupied_pages - host // 10)
        staged = 0
        q = self.buffer_queue
        while q:
            it = q[0]
            node = it.node
            parent, value = node.parent, node.value
            if parent is None or value is None or len(node.key) != it.pages or not self._covered(parent):
                q.popleft()
                self.buffer_backlog_pages -= it.pages
                self._buffer_done(node)
                self.counters.buffer_intents_dropped += 1
                continue
            n = it.pages
            if self.buffer_staged_pages and self.buffer_staged_pages + n > live_cap:
                break
            pages = self.host.alloc(n)
            if pages is None:
                break
            q.popleft()
            self.buffer_backlog_pages -= n
            self.inc_lock_ref(node)
            t = self._new_transfer(
                TransferKind.D2H,
                "buffer_stage",
                n,
                device_pages=list(value),
                host_pages=list(pages),
                node_ids=[node.id],
            )
            self._buffer_writes[t.id] = (node, pages, list(node.hashes or []))
            self.buffer_staged_pages += n
            self.counters.buffer_staged_pages += n
            staged += n
        return staged

    def _ack_buffer_stage(self, t: Transfer) -> None:
        node, pages, hashes = self._buffer_writes.pop(t.id)
        self.dec_lock_ref(node)
        s = self._new_transfer(
            TransferKind.H2S, "buffer_store", len(pages), host_pages=list(pages), page_hashes=hashes, node_ids=[node.id]
        )
        self._buffer_writes[s.id] = (node, pages, hashes)

    def _ack_buffer_store(self, t: Transfer) -> None:
        node, pages, hashes = self._buffer_writes.pop(t.id)
        self.host.free(pages)
        self.buffer_staged_pages -= len(pages)
        assert self.storage is not None, "buffer_only runs with a storage tier"
        self.storage.put(hashes)
        self.counters.storage_backups += 1
        self.counters.storage_backup_pages += len(hashes)
        self._buffer_done(node)

    # ------------------------------------------------------------------------------- read path

    def stage_prefetch(self, op: PrefetchOp, m: int) -> int:
        """Park ``m`` prefetched pages for the request (takes over the anchor pin). Returns m."""
        host_pages = op.host_pages
        assert host_pages is not None, "m pages arrived, so host pages were allocated"
        self.staged_prefetch[op.rid] = StagedPrefetch(op.anchor, op.pin, op.keys[:m], host_pages[:m])
        op.pin = NO_PIN
        return m

    def _drop_staged(self, sp: StagedPrefetch) -> None:
        self.host.free(sp.host_pages)
        sp.pin.release(self, sp.anchor)

    def release_staged_prefetch(self, rid: str) -> None:
        """The request is gone: free its staged prefetch (mutates)."""
        sp = self.staged_prefetch.pop(rid, None)
        if sp is not None:
            self._drop_staged(sp)

    def consume_staged_prefetch(self, st: RequestState) -> int:
        """At admission: copy the request's staged prefetch to device and insert it (mutates).

        Returns pages gained; 0 when there is none or it no longer fits the request's match.
        """
        sp = self.staged_prefetch.pop(st.rid, None)
        if sp is None:
            return 0
        m = len(sp.keys)
        start = len(st.pages)
        if st.last_node is not sp.anchor or st.keys[start : start + m] != sp.keys:
            self._drop_staged(sp)
            return 0
        pages = self.alloc_device(m)
        if pages is None:
            self._drop_staged(sp)
            return 0
        t = self._new_transfer(
            TransferKind.H2D,
            "buffer_load",
            m,
            device_pages=list(pages),
            host_pages=list(sp.host_pages),
            request_id=st.rid,
        )
        self._buffer_loads[t.id] = sp.host_pages
        st.pages.extend(pages)
        self.checkpoint_request(st, start + m)
        sp.pin.release(self, sp.anchor)
        st.loaded_pages += m
        return m

    def _ack_buffer_load(self, t: Transfer) -> None:
        self.host.free(self._buffer_loads.pop(t.id))
