"""Host-eviction rules: which host copies ``evict_host`` may reclaim, and what device eviction must do
to keep the rule's invariant.

- ``evicted_only`` (upstream HiRadixCache / unified tree): only H-only leaves are candidates. Under
  write_through with a host smaller than the device, the host fills with D+H mirrors that nothing
  can reclaim, host allocations fail and L2/L3 starve. (Under write_back the unified tree core first
  reclaims full host duplicates, see ``EvictionMixin._reclaim_duplicates``.)
- ``reclaim_mirrors``: any host leaf (no child with a host copy) that is unlocked and unpinned is a
  candidate, D+H mirrors included; reclaiming a mirror leaves the node D-only. Reclaiming only host
  leaves keeps the host set prefix-closed, which write_through relies on. Order (``key``): both kinds
  of copy on the strategy's scale, by when they could serve a hit. An H-only copy can now; a mirror
  only once the device boundary passes its device copy, so it counts as an H-only copy as far behind
  the boundary as it is ahead of it. No capacity threshold: the old order switched at host = device
  (mirrors first at or below it, H-only copies first above it), and with ``up_plus_one`` sizing a
  ratio of 1 gave fewer hits than 0.5 (``results/host_ratio_monotone``). (Plain LRU over both kinds,
  as #16909 proposed, keeps the host full of mirrors of the newest device pages: no failed
  allocations, but no L2 hits either; measured on the Mooncake conversation trace.)
- ``boundary`` (upstream proof of concept, #29049): D+H "duplicate" leaves go first, then H-only
  leaves; the invariant is only that an H-only node's parent has a host copy (or is the root), so a
  device victim without host copy is demoted (written to host) and a D+H victim first makes sure its
  parent has a host copy.

Keys and the checker: the host heap is lazily invalidated, like the device heap; an entry counts only
while the candidate dict holds the same key for its node. ``check()`` asserts that every candidate has
a heap entry under its stored key, and, where the rule's key is a pure function of the node
(``key_is_pure``; per node, ``pure_key``), that the stored key is the recomputed one. ``reclaim_mirrors``
keys a mirror by the device boundary at the time the key is computed, so its mirrors are checked only
against the heap.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Any

from .policies import HOST_EVICTION_RULES

if TYPE_CHECKING:
    from .cache import HiCache
    from .tree import Node


class HostEvictionRule:
    """Base rule: upstream's evicted-only behaviour."""

    name = "base"
    #: Under write_through, does a backup need the parent backed up first (prefix-closed host set)?
    prefix_closed_host = True
    #: Is a device victim without host copy written to host before it leaves (demotion)?
    demotes = False
    #: Under write_back (unified semantics), does evict_host first reclaim full host duplicates, as
    #: upstream does (oldest duplicate first, sparing device-eviction candidates)?
    reclaims_duplicates = True
    #: Is ``key`` a pure function of the node (and the strategy), computed without side effects? The
    #: checker then recomputes every host candidate's key and compares it with the stored one. A rule
    #: whose key depends on the cache's state when it is computed (``reclaim_mirrors`` reads the device
    #: LRU boundary) says False and names, in ``pure_key``, the nodes whose key is still pure.
    key_is_pure = True
    #: Are candidates always H-only (no device copy)? The cache then skips ``is_candidate`` for nodes
    #: on device.
    h_only_candidates = True

    def host_set_prefix_closed(self, cache: HiCache) -> bool:
        """Must every host copy's parent have one too (or be the root)? Write-through with a
        prefix-closed rule keeps it, unless the 2025 semantics (no parent guard) run; write-back
        never promises it."""
        return (
            self.prefix_closed_host
            and cache.write_policy.threshold is not None
            and cache.sem.parent_backup.guards_parent
        )

    def h_only_needs_host_parent(self, cache: HiCache) -> bool:
        """May an H-only node hang only under a host copy (or the root)? The one predicate behind the
        checker and every place that attaches H-only pages (prefetch): a prefix-closed host set, or a
        demoting rule whose boundary invariant asks for it."""
        return self.host_set_prefix_closed(cache) or self.demotes

    def is_candidate(self, cache: HiCache, node: Node) -> bool:
        """Host-eviction candidate (read-only). Never a locked node, under any rule: the cache drops a
        node's candidacy without asking when it is locked."""
        return (
            node.value is None
            and node.host_value is not None
            and node.lock_ref == 0
            and node.host_ref == 0
            and node.n_host_children == 0
        )

    def key(self, cache: HiCache, node: Node) -> Any:
        """Eviction order among host candidates; the cache's strategy by default."""
        return cache.strategy.key(node)

    def pure_key(self, cache: HiCache, node: Node) -> Any:
        """The key ``node`` must be queued under if it is a pure function of the node, else None (read
        only: the checker's reference; the lazy-invalidation contract holds for every key)."""
        return self.key(cache, node) if self.key_is_pure else None

    def evict_host_node(self, cache: HiCache, node: Node) -> int:
        """Reclaim one candidate's host pages (mutates). Returns pages freed."""
        n = len(node.host_value)
        if node.value is None:
            cache._delete_leaf(node)
            cache.counters.host_deleted_pages += n
        else:
            cache._clear_host_value(node)
            cache.counters.host_mirror_reclaimed_pages += n
        return n

    def ensure_parent_host(self, cache: HiCache, node: Node) -> bool:
        """Before ``node`` becomes H-only: make sure the rule's invariant will hold. True if it will."""
        return True


@HOST_EVICTION_RULES.register("evicted_only")
class EvictedOnly(HostEvictionRule):
    """Upstream: only host copies of GPU-evicted nodes are reclaimable."""

    name = "evicted_only"


def _reflect(k: Any, about: Any = None) -> Any:
    """``2 * about - k`` (``-k`` without ``about``), elementwise for tuple keys: reverses the strategy
    order around ``about``."""
    if isinstance(k, tuple):
        return tuple(2 * b - x for x, b in zip(k, about or (0,) * len(k), strict=True))
    return -k if about is None else 2 * about - k


def _device_boundary(cache: HiCache) -> Any:
    """Strategy key of the next device victim (the device LRU boundary), or None if none is evictable.

    Drops stale entries off the top of the device heap, as the next pop would; the order is unchanged.
    """
    heap, cands = cache._dev_heap, cache._dev_cands
    while heap:
        k, _, _, node = heap[0]
        if cands.get(node) == k:
            return k
        heapq.heappop(heap)
    return None


@HOST_EVICTION_RULES.register("reclaim_mirrors")
class ReclaimMirrors(HostEvictionRule):
    """Host copies of GPU-resident leaves are reclaimable too (the fix #16909 aimed for, reachable)."""

    name = "reclaim_mirrors"
    key_is_pure = False  # a mirror's key reads the device boundary when it is computed
    h_only_candidates = False  # D+H mirrors are candidates too

    def __init__(self) -> None:
        # H-only candidates by key, lazily invalidated like the cache's heaps: the oldest H-only copy.
        self._h_only: list[tuple[Any, int, Node]] = []

    def is_candidate(self, cache: HiCache, node: Node) -> bool:
        return (
            node.host_value is not None
            and node.lock_ref == 0
            and node.host_ref == 0
            and node.n_host_children == 0
            and node.pending_write is None
        )

    def key(self, cache: HiCache, node: Node) -> Any:
        # One scale for both kinds of copy, the strategy's key, read as "when could this copy serve a
        # hit". An H-only copy can now: its key is the strategy's. A mirror can only once the device
        # boundary b (the next device victim's key) has passed its device copy; without demotion a
        # mirror reclaimed before then loses the page. Reflected around b, a mirror with key k is
        # worth an H-only copy with key 2b - k: the newest mirror, furthest ahead of the boundary,
        # counts as an H-only copy as far behind it. (Under LRU, if a page idle for a time t is
        # expected to wait as long again for its next use, an H-only copy idle for t serves in t; a
        # mirror first waits until it leaves the device, idle then for as long as the device keeps
        # pages, and then as long again; the two waits are equal at 2b - k.) That worth rises twice
        # as fast as the boundary moves, faster than the H-only copies it competes with, while a heap
        # key stays fixed until the node is refreshed; so the comparison is made when the key is
        # computed (the mirror becomes a candidate, or is touched): a mirror worth less than the
        # oldest H-only copy (or with no H-only copy to reclaim instead) keeps key 2b - k and goes
        # before it; one worth more stays so until it leaves the device, and takes the key it will
        # then have as an H-only copy, k. With demotion (write_back) a device victim is written to
        # host as it leaves, so a mirror serves no hit its page would not get anyway: mirrors go
        # first. Under the unified write_back the cache's full-duplicate reclaim (upstream's order,
        # oldest duplicate first, sparing device-eviction candidates) runs before this heap and
        # takes them; it beat newest-first by 0.003 to 0.007 of pages at every host size on the
        # conversation trace. This branch orders the rest (the staged 2025 write_back).
        k = cache.strategy.key(node)
        if node.value is None:
            heapq.heappush(self._h_only, ((1, k), node.id, node))
            if len(self._h_only) > 2 * len(cache._host_cands) + 1024:
                self._compact(cache)
            return (1, k)
        if cache.write_policy.backup_at_eviction or self.demotes:
            return (0, _reflect(k))
        b = _device_boundary(cache)
        worth = k if b is None else _reflect(k, b)
        oldest = self._oldest_h_only(cache)
        return (1, worth if oldest is None or worth < oldest else k)

    def pure_key(self, cache: HiCache, node: Node) -> Any:
        # H-only copies and mirrors under demotion have keys of their own; other mirrors do not (and
        # ``key`` pushes onto the H-only heap, so the checker must not call it).
        k = cache.strategy.key(node)
        if node.value is None:
            return (1, k)
        if cache.write_policy.backup_at_eviction or self.demotes:
            return (0, _reflect(k))
        return None

    def _oldest_h_only(self, cache: HiCache) -> Any:
        """Strategy key of the H-only candidate reclaimed first, or None (drops stale entries)."""
        heap = self._h_only
        while heap:
            k, _, node = heap[0]
            if node.value is None and cache._host_cands.get(node) == k:
                return k[1]
            heapq.heappop(heap)
        return None

    def _compact(self, cache: HiCache) -> None:
        self._h_only = [(k, n.id, n) for n, k in cache._host_cands.items() if n.value is None]
        heapq.heapify(self._h_only)


@HOST_EVICTION_RULES.register("boundary")
class Boundary(ReclaimMirrors):
    """Duplicates first, then H-only leaves; H-only nodes always hang under a host copy or the root."""

    name = "boundary"
    prefix_closed_host = False
    demotes = True
    key_is_pure = True
    # Its own order takes duplicates first and only leaves: the cache's duplicate reclaim would take a
    # D+H node above an H-only child, leaving that child under a parent without host copy.
    reclaims_duplicates = False

    def pure_key(self, cache: HiCache, node: Node) -> Any:
        return self.key(cache, node)

    def key(self, cache: HiCache, node: Node) -> Any:
        # As the proof of concept: least recently used duplicate first, then H-only leaves.
        return (0 if node.value is not None else 1, cache.strategy.key(node))

    def ensure_parent_host(self, cache: HiCache, node: Node) -> bool:
        parent = node.parent
        if parent is cache.root or parent.host_value is not None:
            return True
        # Demote the parent's copy as part of this eviction (a blocking copy, like write-back), so the
        # parent is not left locked by a pending write-through and stays evictable in the same call.
        return cache.write_backup(parent, write_back=True, enforce_parent=False) > 0
