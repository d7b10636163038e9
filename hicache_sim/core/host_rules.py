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
  ratio of 1 gave fewer hits than 0.5 (``results/host_ratio_monotone``). A mirror's worth moves with the
  boundary, so the rule weighs the newest mirror against the oldest H-only copy at each pop
  (``pop_candidate``), from a heap of mirrors of its own. (Plain LRU over both kinds,
  as #16909 proposed, keeps the host full of mirrors of the newest device pages: no failed
  allocations, but no L2 hits either; measured on the Mooncake conversation trace.)
- ``boundary`` (upstream proof of concept, #29049): D+H "duplicate" leaves go first, then H-only
  leaves; the invariant is only that an H-only node's parent has a host copy (or is the root), so a
  device victim without host copy is demoted (written to host) and a D+H victim first makes sure its
  parent has a host copy.

Keys and the checker: the host heap is lazily invalidated, like the device heap; an entry counts only
while the candidate dict holds the same key for its node. ``check()`` asserts that every candidate has
a heap entry under its stored key, that the stored key is the one ``pure_key`` recomputes (every rule's
key is a function of the node and the strategy), and whatever the rule's own ``check`` asserts of its
bookkeeping (``reclaim_mirrors``: every mirror candidate is in its mirror heap).
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
        """The key ``node`` must be queued under, computed without side effects (read only: the
        checker's reference; ``key`` may also record the node in the rule's own heaps)."""
        return self.key(cache, node)

    def pop_candidate(self, cache: HiCache) -> Node | None:
        """Remove and return the next host victim, or None (mutates heaps only): the smallest key."""
        return cache._pop_host_candidate()

    def check(self, cache: HiCache) -> str | None:
        """What is wrong with the rule's own bookkeeping, or None (read-only; the checker's hook)."""
        return None

    def evict_host_node(self, cache: HiCache, node: Node) -> int:
        """Reclaim one candidate's host pages (mutates). Returns pages freed."""
        host_pages = node.host_value
        assert host_pages is not None, "a host candidate holds a host copy"
        n = len(host_pages)
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


def _valid_top(heap: list[tuple], cands: dict) -> tuple | None:
    """The top entry of a lazily invalidated heap (key first, node last) that is still valid, or None.

    Drops stale entries off the top, as the next pop would; the order is unchanged.
    """
    while heap:
        entry = heap[0]
        if cands.get(entry[-1]) == entry[0]:
            return entry
        heapq.heappop(heap)
    return None


def _device_boundary(cache: HiCache) -> Any:
    """Strategy key of the next device victim (the device LRU boundary), or None if none is evictable."""
    top = _valid_top(cache._dev_heap, cache._dev_cands)
    return None if top is None else top[0]


@HOST_EVICTION_RULES.register("reclaim_mirrors")
class ReclaimMirrors(HostEvictionRule):
    """Host copies of GPU-resident leaves are reclaimable too (the fix #16909 aimed for, reachable)."""

    name = "reclaim_mirrors"
    h_only_candidates = False  # D+H mirrors are candidates too

    def __init__(self) -> None:
        # Mirror candidates by key, newest device copy first, lazily invalidated like the cache's heaps.
        # The cache's host heap holds them too, behind every H-only copy (class 2): its top is the
        # oldest H-only copy, this heap's top the mirror it is weighed against (``pop_candidate``).
        self._mirrors: list[tuple[Any, int, Node]] = []

    def is_candidate(self, cache: HiCache, node: Node) -> bool:
        return (
            node.host_value is not None
            and node.lock_ref == 0
            and node.host_ref == 0
            and node.n_host_children == 0
            and node.pending_write is None
        )

    def _weighed_live(self, cache: HiCache) -> bool:
        """Are mirrors weighed against H-only copies at each pop? Not with demotion (write_back): a
        device victim is written to host as it leaves, so a mirror serves no hit its page would not
        get anyway, and mirrors go first (class 0). Under the unified write_back the cache's
        full-duplicate reclaim (upstream's order, oldest duplicate first, sparing device-eviction
        candidates) runs before the heap and takes them; it beat newest-first by 0.003 to 0.007 of
        pages at every host size on the conversation trace. Class 0 orders the rest (the staged 2025
        write_back)."""
        return not (cache.write_policy.backup_at_eviction or self.demotes)

    def pure_key(self, cache: HiCache, node: Node) -> Any:
        k = cache.strategy.key(node)
        if node.value is None:
            return (1, k)  # an H-only copy: the strategy's order
        return (2, _reflect(k)) if self._weighed_live(cache) else (0, _reflect(k))

    def key(self, cache: HiCache, node: Node) -> Any:
        k = self.pure_key(cache, node)
        if k[0] == 2:
            # Compact before the push: the cache stores this key for the node only after ``key``
            # returns, so a heap rebuilt from the candidate dict now would drop the new entry.
            if len(self._mirrors) > 2 * len(cache._host_cands) + 1024:
                self._compact(cache)
            heapq.heappush(self._mirrors, (k, node.id, node))
        return k

    def pop_candidate(self, cache: HiCache) -> Node | None:
        # One scale for both kinds of copy, the strategy's key, read as "when could this copy serve a
        # hit". An H-only copy can now: its key is the strategy's. A mirror can only once the device
        # boundary b (the next device victim's key) has passed its device copy; without demotion a
        # mirror reclaimed before then loses the page. Reflected around b, a mirror with key k is
        # worth an H-only copy with key 2b - k: the newest mirror, furthest ahead of the boundary,
        # counts as an H-only copy as far behind it. (Under LRU, if a page idle for a time t is
        # expected to wait as long again for its next use, an H-only copy idle for t serves in t; a
        # mirror first waits until it leaves the device, idle then for as long as the device keeps
        # pages, and then as long again; the two waits are equal at 2b - k.) That worth moves with the
        # boundary, so it is weighed here, at each pop, against the oldest H-only copy: the newest
        # mirror (the least worth of all mirrors) goes if it is worth less, else the H-only copy.
        if not self._weighed_live(cache):
            return cache._pop_host_candidate()
        cands = cache._host_cands
        top = _valid_top(cache._host_heap, cands)  # mirrors (class 2) sort behind every H-only copy
        h_only = top[0][1] if top is not None and top[0][0] == 1 else None
        mirror = self._newest_mirror(cache)
        if mirror is None:
            return cache._pop_host_candidate()
        if h_only is not None:
            k = _reflect(cands[mirror][1])
            b = _device_boundary(cache)
            if not (k if b is None else _reflect(k, b)) < h_only:
                return cache._pop_host_candidate()
        heapq.heappop(self._mirrors)
        return mirror

    def _newest_mirror(self, cache: HiCache) -> Node | None:
        """The mirror candidate with the newest device copy, or None (drops stale entries)."""
        top = _valid_top(self._mirrors, cache._host_cands)
        return None if top is None else top[-1]

    def _compact(self, cache: HiCache) -> None:
        self._mirrors = [(k, n.id, n) for n, k in cache._host_cands.items() if k[0] == 2]
        heapq.heapify(self._mirrors)

    def check(self, cache: HiCache) -> str | None:
        queued = {(node, k) for k, _, node in self._mirrors}
        for node, k in cache._host_cands.items():
            if k[0] == 2 and (node, k) not in queued:
                return f"mirror node {node.id} is a candidate under key {k!r} but not in the rule's mirror heap"
        return None


@HOST_EVICTION_RULES.register("boundary")
class Boundary(ReclaimMirrors):
    """Duplicates first, then H-only leaves; H-only nodes always hang under a host copy or the root."""

    name = "boundary"
    prefix_closed_host = False
    demotes = True
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
        assert parent is not None, "a victim is in the tree below the root"
        if parent is cache.root or parent.host_value is not None:
            return True
        # Demote the parent's copy as part of this eviction (a blocking copy, like write-back), so the
        # parent is not left locked by a pending write-through and stays evictable in the same call.
        return cache.write_backup(parent, write_back=True, enforce_parent=False) > 0
