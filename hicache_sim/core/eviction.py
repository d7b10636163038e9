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
        page_level = self._page_level
        while evicted < num_pages:
            x = self._pop(self._dev_heap, self._dev_cands)
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
            if self._pins_inert:
                ok = self.host_rule.ensure_parent_host(self, x)
            else:
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
        """Write a victim without host copy to host, then demote it to H-only.

        ``unified`` write_back: the copy is waited for at once and the device pages are freed; for
        that moment the node is a full host duplicate (registered, then stale once demoted).
        Otherwise (staged) the device pages are detached and freed at the flush, the host copy
        pinned until then.
        """
        n = len(x.key)
        ok = self.host_rule.ensure_parent_host(self, x)
        if ok:
            # The boundary rule needs the parent's host copy under x: pin it while room is made for
            # x. Upstream write_back pins nothing (a parent's duplicate copy may be reclaimed).
            parent = x.parent
            assert parent is not None, "a victim is in the tree below the root"
            pin = self.host_rule.demotes and parent is not self.root and parent.host_value is not None
            if pin:
                self.protect_host(parent)
            ok = self.write_backup(x, write_back=True) > 0
            if pin:
                self.release_host(parent)
        if not ok:
            return self._drop_subtree(x, staged)
        self.counters.device_demoted_pages += n
        if self.unified_write_back:
            self._track_duplicate(x)
            self.device.free(self._clear_value(x))
        else:
            self.protect_host(x)
            staged.append((x, self._clear_value(x)))
        return n

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

        Returns pages freed. Under ``evicted_only`` a D+H mirror is never a candidate, but under
        write_back (unified semantics) full host duplicates are reclaimed first.
        """
        self.counters.host_evict_calls += 1
        freed = self._reclaim_duplicates(num_pages) if self._track_dups else 0
        page_level = self._page_level
        while freed < num_pages:
            x = self.host_rule.pop_candidate(self)
            if x is None:
                break
            if page_level and len(x.key) > num_pages - freed:
                x = self._split_tail(x, num_pages - freed)
            freed += self.host_rule.evict_host_node(self, x)
        self.counters.host_evicted_pages += freed
        return freed

    def _reclaim_duplicates(self, num_pages: int) -> int:
        """Drop host copies of full host duplicates, oldest duplicate first, until ``num_pages``
        (mutates). Returns pages freed.

        A first pass spares device-eviction candidates (their demotion would reuse the copy), a
        second takes them too. A duplicate with a host pin is skipped; an entry that is no longer a
        duplicate is dropped when the walk reaches it, as is each reclaimed one.
        """
        freed = 0
        done: list[Node] = []
        dups = self.host_duplicates
        for spare_candidates in (True, False):
            if freed >= num_pages:
                break
            for node in dups:
                if freed >= num_pages:
                    break
                if node.value is None or node.host_value is None:
                    done.append(node)
                    continue
                if spare_candidates and self.is_device_candidate(node):
                    continue
                if node.pending_write is not None or node.pending_load is not None or node.host_ref:
                    continue
                n = len(node.host_value)
                self._clear_host_value(node)
                self.counters.host_mirror_reclaimed_pages += n
                freed += n
                done.append(node)
        for node in done:
            dups.pop(node, None)
        return freed
