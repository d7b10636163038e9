"""Host-eviction rules: which host copies ``evict_host`` may reclaim, and what device eviction must do
to keep the rule's invariant.

- ``evicted_only`` (upstream HiRadixCache / unified tree): only H-only leaves are candidates. Under
  write_through with a host smaller than the device, the host fills with D+H mirrors that nothing
  can reclaim, host allocations fail and L2/L3 starve. (Under write_back the unified tree core first
  reclaims full host duplicates, see ``EvictionMixin._reclaim_duplicates``.)
- ``reclaim_mirrors``: any host leaf (no child with a host copy) that is unlocked and unpinned is a
  candidate, D+H mirrors included; reclaiming a mirror leaves the node D-only. Reclaiming only host
  leaves keeps the host set prefix-closed, which write_through relies on. Order: see ``key``. (Plain
  LRU over both kinds, as #16909 proposed, keeps the host full of mirrors of the newest device
  pages: no failed allocations, but no L2 hits either; measured on the Mooncake conversation trace.)
- ``boundary`` (upstream proof of concept, #29049): D+H "duplicate" leaves go first, then H-only
  leaves; the invariant is only that an H-only node's parent has a host copy (or is the root), so a
  device victim without host copy is demoted (written to host) and a D+H victim first makes sure its
  parent has a host copy.
"""

from __future__ import annotations

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
    #: upstream does? Rules that order mirrors themselves say no.
    reclaims_duplicates = True

    def host_set_prefix_closed(self, cache: HiCache) -> bool:
        """Must every host copy's parent have one too (or be the root)? Write-through with a
        prefix-closed rule keeps it, unless the 2025 semantics (no parent guard) run; write-back
        never promises it."""
        return (
            self.prefix_closed_host and cache.write_policy.threshold is not None and cache.sem.parent_backup != "none"
        )

    def h_only_needs_host_parent(self, cache: HiCache) -> bool:
        """May an H-only node hang only under a host copy (or the root)? The one predicate behind the
        checker and every place that attaches H-only pages (prefetch): a prefix-closed host set, or a
        demoting rule whose boundary invariant asks for it."""
        return self.host_set_prefix_closed(cache) or self.demotes

    def is_candidate(self, cache: HiCache, node: Node) -> bool:
        """Host-eviction candidate (read-only)."""
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


@HOST_EVICTION_RULES.register("reclaim_mirrors")
class ReclaimMirrors(HostEvictionRule):
    """Host copies of GPU-resident leaves are reclaimable too (the fix #16909 aimed for, reachable)."""

    name = "reclaim_mirrors"
    reclaims_duplicates = False

    def is_candidate(self, cache: HiCache, node: Node) -> bool:
        return (
            node.host_value is not None
            and node.lock_ref == 0
            and node.host_ref == 0
            and node.n_host_children == 0
            and node.pending_write is None
        )

    def key(self, cache: HiCache, node: Node) -> Any:
        # Among mirrors, the one whose device copy the strategy would evict *last* goes first: the host
        # then keeps copies of the pages about to leave the GPU, which become H-only hits. Whether
        # mirrors go before H-only copies depends on capacity: a host no larger than the device
        # cannot mirror every device page, and a mirror of a hot page then crowds out unique content;
        # a larger host can, and its coldest H-only copy is then worth less than any mirror (without
        # demotion a reclaimed mirror's page is lost when it leaves the GPU).
        k = cache.strategy.key(node)
        mirrors_first = cache.config.host_pages <= cache.config.device_pages
        if node.value is not None:
            return (0 if mirrors_first else 1, tuple(-x for x in k) if isinstance(k, tuple) else -k)
        return (1 if mirrors_first else 0, k)


@HOST_EVICTION_RULES.register("boundary")
class Boundary(ReclaimMirrors):
    """Duplicates first, then H-only leaves; H-only nodes always hang under a host copy or the root."""

    name = "boundary"
    prefix_closed_host = False
    demotes = True

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
