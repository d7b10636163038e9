"""Device -> host backup (write_backup), its acknowledgement, and storage (L3) backup after the ack."""

from __future__ import annotations

from .config import CacheConfig
from .semantics import EvictAmount
from .state import CacheState
from .transfers import Transfer, TransferKind
from .tree import Node

_D2H = TransferKind.D2H


class BackupMixin(CacheState):
    """write_backup / host allocation with eviction fallback / D2H ack / storage backup."""

    def __init__(self, config: CacheConfig) -> None:
        super().__init__(config)
        # transfer id -> (node whose lock is held, pages written); the node may have been split
        # since, in which case its upper halves carry the same pending id.
        self.ongoing_write: dict[int, tuple[Node, int]] = {}
        self.ongoing_storage_backup: dict[int, list[Node]] = {}

    def write_backup(self, node: Node, *, write_back: bool = False, enforce_parent: bool = True) -> int:
        """Copy a device node to host (mutates). Returns pages backed up, 0 when skipped or failed.

        Write-through: the node and its ancestors stay locked until the D2H ack. ``write_back``:
        the copy is part of an eviction and blocks the scheduler (the caller frees the device pages
        at the flush). With a prefix-closed host rule a node whose parent has no host copy is skipped
        or preceded by its unbacked ancestors, as ``semantics.parent_backup`` says.
        """
        if not self.has_host or node.host_value is not None or node.value is None:
            return 0
        if self.host_mode.stages:
            return self.buffer_backup_intent(node)
        parent = node.parent
        assert parent is not None, "a node on device without host copy is below the root"
        root = self.root
        if (
            not write_back
            and enforce_parent
            and self.host_rule.prefix_closed_host
            and parent is not root
            and parent.host_value is None
            and not self.sem.parent_backup.admit(self, node)
        ):
            return 0
        n = len(node.value)
        # A prefix-closed host set needs the parent's copy to outlive the host eviction this
        # allocation may run: under reclaim_mirrors the parent (a D+H host leaf until its child is
        # backed up) would otherwise be the very mirror reclaimed to make room for its child.
        pin = (
            not write_back
            and parent is not root
            and parent.host_value is not None
            and self.host_prefix_closed
            and not (self._pins_inert and parent.value is not None)
        )
        if pin:
            self.protect_host(parent)
        try:
            host_pages = self.alloc_host(n)
        finally:
            if pin:
                self.release_host(parent)
        if host_pages is None:
            self.counters.backup_failures += 1
            return 0
        self._set_host_value(node, host_pages)
        t = self._new_transfer(
            _D2H,
            "write_back" if write_back else "write_through",
            n,
            device_pages=list(node.value),
            host_pages=list(host_pages),
            node_ids=[node.id],
            blocking=write_back,
        )
        if not write_back:
            # Write-through: pinned until the D2H ack. A write-back copy blocks the scheduler, so it
            # is complete when the evict call that made it returns: nothing stays pending.
            node.pending_write = t.id
            self.inc_lock_ref(node)
            self.ongoing_write[t.id] = (node, n)
        elif self.storage is not None and self.sem.write_back_eviction.stores_copies:
            # The blocking wait acknowledges the copy inside the same evict call, and the ack queues
            # the node's storage backup (its host copy pinned until the storage ack), as for a
            # write-through ack.
            self._backup_to_storage([node])
        c = self.counters
        c.backups += 1
        c.backup_pages += n
        return n

    def _backup_ancestors(self, node: Node) -> bool:
        """Back up ``node``'s unbacked ancestors, parent first from the top; False at the first failure."""
        chain = []
        p = node.parent
        while p is not None and p is not self.root and p.host_value is None:
            chain.append(p)
            p = p.parent
        return all(self.write_backup(anc, enforce_parent=False) > 0 for anc in reversed(chain))

    def alloc_host(self, n: int, amount: EvictAmount | None = None) -> list[int] | None:
        """Allocate ``n`` host pages, evicting from host when short (mutates). None when impossible.

        ``amount`` says how much a short host evicts before the one retry; by default the era's
        backup rule: ``full_retry`` (HiRadixCache) evicts ``n`` pages, ``shortfall`` (unified tree)
        only the missing pages.
        """
        pages = self.host.alloc(n)
        if pages is None:
            rule = amount if amount is not None else self.sem.host_backup_eviction
            self.evict_host(rule.pages(n, self.host.available()))
            pages = self.host.alloc(n)
            if pages is None:
                self.counters.failed_host_allocations += 1
        return pages

    def _ack_write(self, t: Transfer) -> None:
        """D2H acknowledged: unlock the node and, with a storage tier, back it up to storage. A
        write-back copy was settled (and sent on to storage) when it was made."""
        if t.blocking:
            return
        node, n = self.ongoing_write.pop(t.id)
        chain = self._pending_chain(node, t.id, n)
        self.dec_lock_ref(node)
        if self.storage is not None:
            self._backup_to_storage(chain)

    def _pending_chain(self, node: Node, tid: int, n: int) -> list[Node]:
        """The node and any upper halves split off it while its write was pending, top first."""
        chain = []
        covered = 0
        x: Node | None = node
        root = self.root
        while covered < n and x is not None and x is not root and x.pending_write == tid:
            x.pending_write = None
            chain.append(x)
            covered += len(x.key)
            if not x.lock_ref:  # still locked by the write (the caller unlocks next): nothing to re-queue
                self._refresh_host(x)
            x = x.parent
        chain.reverse()
        return chain

    def _backup_to_storage(self, chain: list[Node]) -> None:
        """Queue an H2S copy of the chain's host pages; their host copies stay pinned until the ack."""
        kept: list[Node] = []  # the nodes with a host copy and page hashes
        hashes: list[int] = []
        host_pages: list[int] = []
        for n in chain:
            if n.host_value is not None and n.hashes is not None:
                kept.append(n)
                hashes.extend(n.hashes)
                host_pages.extend(n.host_value)
        if not kept:
            return
        chain = kept
        t = self._new_transfer(
            TransferKind.H2S,
            "storage_backup",
            len(hashes),
            host_pages=host_pages,
            page_hashes=hashes,
            node_ids=[n.id for n in chain],
        )
        for n in chain:
            self.protect_host(n)
        self.ongoing_storage_backup[t.id] = chain
        self.counters.storage_backups += 1

    def _ack_storage_backup(self, t: Transfer) -> None:
        chain = self.ongoing_storage_backup.pop(t.id)
        for n in chain:
            self.release_host(n)
        assert self.storage is not None, "a storage backup was issued, so there is a storage tier"
        self.storage.put(t.page_hashes)
        self.counters.storage_backup_pages += t.pages
