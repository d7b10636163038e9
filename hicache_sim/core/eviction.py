"""Device (L1) and host (L2) eviction, as a mixin of HiCache.

SGLang evicts whole leaf nodes: a request's unshared suffix is one node, so one eviction can free
many more pages than were asked for. ``eviction_granularity: page`` splits the victim so exactly the
pages needed leave (page-level LRU).
"""

from __future__ import annotations

import heapq

from .state import CacheState
from .tree import Node


class EvictionMixin(CacheState):
    """evict / evict_host and the per-victim paths (backed up, regular, write-back, drop subtree)."""

    def evict(self, num_pages: int) -> int:
        """Free device pages from unlocked leaves in strategy order until ``num_pages`` left (mutates).

        Returns pages evicted (may exceed ``num_pages`` by less than one node in node granularity).
        Under write_back (or a demoting host rule) victims without a host copy are written back
        first; those D2H copies are ``blocking`` transfers the scheduler waits for.
        """
        self.counters.device_evict_calls += 1
        evicted = 0
        staged: list[tuple[Node, list[int]]] = []
        refused: list[Node] = []
        page_level = self.config.eviction_granularity == "page"
        while evicted < num_pages:
            x = self._pop_device_candidate()
            if x is None:
                break
            if page_level and len(x.key) > num_pages - evicted:
                x = self._split_tail(x, num_pages - evicted)
            freed = self._evict_device_node(x, staged)
            if not freed:
                refused.append(x)
            evicted += freed
        self._flush_write_back(staged)
        # A refused victim (its subtree holds a pinned host copy) stays a candidate: give it its heap
        # entry back so a later call can retry it, as upstream rebuilds its heap on every call.
        for x in refused:
            k = self._dev_cands.get(x)
            if k is not None:
                heapq.heappush(self._dev_heap, (k, x.id, self._tick_push(), x))
        self.counters.device_evicted_pages += evicted
        self._compact_heaps()
        return evicted

    def _split_tail(self, node: Node, n: int) -> Node:
        """Split ``node`` so that its last ``n`` pages form the (returned) lower node."""
        age = node.last_access
        upper = self._split(node, len(node.key) - n)
        # The upper part keeps the victim's age: it was last used together with the pages leaving.
        upper.last_access = age
        self._refresh(upper)
        return node

    def _evict_device_node(self, x: Node, staged: list[tuple[Node, list[int]]]) -> int:
        n = len(x.key)
        if x.host_value is not None:
            # Backed up: drop the device copy, keep the node as H-only (after the rule's parent check).
            self.protect_host(x)
            ok = self.host_rule.ensure_parent_host(self, x)
            self.release_host(x)
            if not ok:
                return self._drop_subtree(x, staged)
            self.device.free(self._clear_value(x))
            self.counters.device_evicted_to_host_pages += n
            return n
        if self.write_policy.backup_at_eviction or self.host_rule.demotes:
            return self._evict_write_back(x, staged)
        if x.children:
            # Only reachable without the parent guard (2025): H-only children under a D-only victim.
            # Upstream unlinks the victim and orphans them; here they are dropped and counted.
            return self._drop_subtree(x, staged)
        self._delete_leaf(x)
        self.counters.device_deleted_pages += n
        return n

    def _evict_write_back(self, x: Node, staged: list[tuple[Node, list[int]]]) -> int:
        """Write a victim without host copy to host, then detach its device pages (freed at flush)."""
        n = len(x.key)
        ok = self.host_rule.ensure_parent_host(self, x)
        if ok:
            # Pin the parent's host copy: making room for x must not reclaim it from under x.
            parent = x.parent
            pin = parent is not self.root and parent.host_value is not None
            if pin:
                self.protect_host(parent)
            ok = self.write_backup(x, write_back=True) > 0
            if pin:
                self.release_host(parent)
        if ok:
            self.protect_host(x)
            staged.append((x, self._clear_value(x)))
            self.counters.device_demoted_pages += n
            return n
        return self._drop_subtree(x, staged)

    def _flush_write_back(self, staged: list[tuple[Node, list[int]]]) -> None:
        """The blocking wait for staged write-back copies: free their device pages, unpin the host."""
        for node, pages in staged:
            self.device.free(pages)
            self.release_host(node)
        staged.clear()

    def _drop_subtree(self, x: Node, staged: list[tuple[Node, list[int]]]) -> int:
        """Host full: drop ``x`` and its whole subtree without backup, unless a host copy in it is pinned.

        Returns device pages freed (0 when refused). Staged write-backs are flushed first, as upstream.
        """
        self._flush_write_back(staged)
        nodes = [x]
        i = 0
        while i < len(nodes):
            nodes.extend(nodes[i].children.values())
            i += 1
        if any(node.host_ref > 0 or node.lock_ref > 0 for node in nodes):
            return 0
        freed = 0
        for node in reversed(nodes):  # children before parents
            if node.value is not None:
                freed += len(node.value)
            self.counters.device_dropped_subtree_pages += len(node.key)  # pages of dropped nodes
            self._delete_leaf(node)
        return freed

    def evict_host(self, num_pages: int) -> int:
        """Free host pages from candidates of the host-eviction rule until ``num_pages`` (mutates).

        Returns pages freed. Under ``evicted_only`` a D+H mirror is never a candidate.
        """
        self.counters.host_evict_calls += 1
        freed = 0
        page_level = self.config.eviction_granularity == "page"
        while freed < num_pages:
            x = self._pop_host_candidate()
            if x is None:
                break
            if page_level and len(x.key) > num_pages - freed:
                x = self._split_tail(x, num_pages - freed)
            freed += self.host_rule.evict_host_node(self, x)
        self.counters.host_evicted_pages += freed
        return freed
