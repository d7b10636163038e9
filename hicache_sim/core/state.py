"""Tree state and its bookkeeping: node creation, deletion and split, locks, host pins, page
accounting and the two eviction-candidate sets with their heaps.

Every mutation of a node's device copy, host copy, children, lock or pin goes through a method here,
which keeps the candidate sets equal to their definitions (invariant 8). The operations built on it
(match, insert, evict, backup, load-back, prefetch) live in the mixins of :mod:`.cache`.
"""

from __future__ import annotations

import heapq
from heapq import heappop, heappush
from typing import TYPE_CHECKING, Any

from .config import CacheConfig
from .counters import Counters
from .errors import CacheStateError
from .policies import EVICTION_STRATEGIES, HOST_EVICTION_RULES, PREFETCH_STOP_POLICIES, WRITE_POLICIES
from .pools import PagePool
from .stores import build_store
from .transfers import Transfer, TransferKind
from .tree import ROOT_PRIORITY, Node, chain_hashes

if TYPE_CHECKING:
    from .prefetch_op import PrefetchOp
    from .request_state import RequestState
    from .semantics import EvictAmount


class CacheState:
    """The tree, pools and candidate sets of one HiCache. Units: pages unless stated."""

    def __init__(self, config: CacheConfig) -> None:
        self.config = config
        self.page_size = config.page_size
        self.sem = config.resolved_semantics
        self.device = PagePool("device", config.device_pages, strict=config.strict)
        self.host = PagePool("host", config.host_pages, strict=config.strict)
        self.storage = (
            build_store(
                config.storage_eviction,
                config.storage_capacity_pages,
                config.storage_eviction_params,
                clock=lambda: self.now,  # leases and cleaner periods run on the simulated clock
                batch_pages=config.storage_batch_pages,
                objects_per_page=config.storage_objects_per_page,
                offload=config.storage_offload,
                offload_capacity_pages=config.storage_offload_capacity_pages,
            )
            if config.storage
            else None
        )
        self.counters = Counters()
        self.strategy = EVICTION_STRATEGIES.get(config.eviction_policy)(
            config.eviction_policy_config, page_size=config.page_size
        )
        # Node depths and branch high-water marks, kept only for a strategy whose key reads them.
        self._tracks_depth = self.strategy.tracks_depth
        self.write_policy = WRITE_POLICIES.get(config.write_policy)
        self.host_rule = HOST_EVICTION_RULES.get(config.host_eviction)()
        self.stop_policy = PREFETCH_STOP_POLICIES.get(config.prefetch_policy)()
        # Bound once: _refresh runs on every lock, touch and copy change.
        self._dev_key = self.strategy.key
        self._host_is_candidate = self.host_rule.is_candidate
        self._host_key = self.host_rule.key
        self._host_h_only = self.host_rule.h_only_candidates
        # Must an insert-hit re-queue the node? Pure host keys read the node through the strategy's
        # key (the checker recomputes them); an impure one may differ whenever it is recomputed.
        self._hit_count_keyed = self.strategy.reads_hit_count
        self.host_prefix_closed = self.host_rule.host_set_prefix_closed(self)  # fixed by the config
        self.host_mode = config.host_mode  # what host memory is for: a cache, or a staging buffer
        self.has_host = config.has_host
        self._page_level = config.eviction_granularity == "page"
        # Logical clock for access/creation order: strictly increasing, so no two nodes tie.
        self._clock = 0
        self._next_node_id = 0
        self._next_transfer_id = 0
        self.root = self._new_node([], priority=ROOT_PRIORITY)
        self.root.value = []
        self.root.host_value = []
        self.root.hashes = []
        self.root.lock_ref = 1
        # evictable + protected == device pages held by tree nodes.
        self.evictable_pages = 0
        self.protected_pages = 0
        # Host pages held by tree nodes, and pages of D+H nodes: kept by the mutators below so that a
        # residency sample is O(1) rather than a walk of the tree.
        self.tree_host_pages = 0
        self.mirror_pages = 0
        # Candidate sets (dicts keep a deterministic order) and lazily invalidated heaps: an entry
        # is (key, node id, push number, node) and is valid only while the node is still a candidate and its key
        # is unchanged; a changed key pushes a fresh entry. Pops are O(log n) amortised; the heap
        # is rebuilt when stale entries outnumber live ones.
        self._dev_cands: dict[Node, Any] = {}  # node -> its current eviction key
        self._host_cands: dict[Node, Any] = {}
        self._dev_heap: list[tuple[Any, int, int, Node]] = []
        self._host_heap: list[tuple[Any, int, int, Node]] = []
        self._pushes = 0
        # Full host duplicates, as the unified tree core tracks them under write_back: D+H nodes with
        # no write or load in flight, in the order they became duplicates (an ordered dict). A node
        # is registered where it becomes one (write or load acknowledged, re-attached at insert,
        # split off a duplicate) and leaves when deleted; otherwise entries go stale lazily (a
        # demoted node keeps its place) until a reclaim walk passes them, as upstream.
        self.unified_write_back = self.write_policy.backup_at_eviction and self.sem.write_back_eviction.unified
        self._track_dups = self.unified_write_back and self.host_rule.reclaims_duplicates
        # Does a host pin on a node with a device copy change nothing? Under an H-only rule such a
        # node is never a host candidate (the pin would guard its candidacy), and without the
        # duplicate reclaim no host eviction reads its pin: the hot paths then skip the pin.
        self._pins_inert = self._host_h_only and not self._track_dups
        self.host_duplicates: dict[Node, None] = {}
        self._outbox: list[Transfer] = []
        self.inflight: dict[int, Transfer] = {}
        self.now = 0.0

    # ---------------------------------------------------------------------------------- clock/ids

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _tick_push(self) -> int:
        self._pushes += 1
        return self._pushes

    def _new_node(self, key: list[int], priority: int = 0) -> Node:
        self._clock += 1
        node = Node(self._next_node_id, key, self._clock, priority)
        self._next_node_id += 1
        return node

    def _new_transfer(self, kind: TransferKind, reason: str, pages: int, **fields: Any) -> Transfer:
        """Create a transfer, register it as in flight and put it in the outbox (mutates)."""
        t = Transfer(
            self._next_transfer_id,
            kind,
            reason,
            pages,
            pages * self.config.bytes_per_page,
            issued_at=self.now,
            **fields,
        )
        self._next_transfer_id += 1
        self._outbox.append(t)
        self.inflight[t.id] = t
        return t

    def take_transfers(self) -> list[Transfer]:
        """Transfers created since the last call, in creation order (mutates: empties the outbox)."""
        out, self._outbox = self._outbox, []
        return out

    if TYPE_CHECKING:
        # What the mixins of HiCache (cache.py) call on one another: declared for the type checker
        # only, so that each mixin is checked against the one class they all extend. Each is defined
        # by exactly one mixin; at run time the MRO finds it there.
        prefetched_pages: dict[str, int]
        prefetch_occupied_pages: int
        buffer_staged_pages: int

        def _match(self, keys: list[int], locking: bool) -> tuple[list[int], int, Node, Node, Node]: ...
        def insert(
            self, keys: list[int], pages: list[int], *, chunked: bool = False, priority: int = 0, inserted: int = 0
        ) -> int: ...
        def evict(self, num_pages: int) -> int: ...
        def evict_host(self, num_pages: int) -> int: ...
        def alloc_device(self, n: int) -> list[int] | None: ...
        def alloc_host(self, n: int, amount: EvictAmount | None = None) -> list[int] | None: ...
        def load_back(
            self, node: Node, mem_quota_pages: int | None = None, request_id: str | None = None
        ) -> Node | None: ...
        def write_backup(self, node: Node, *, write_back: bool = False, enforce_parent: bool = True) -> int: ...
        def buffer_backup_intent(self, node: Node) -> int: ...
        def stage_prefetch(self, op: PrefetchOp, m: int) -> int: ...
        def consume_staged_prefetch(self, st: RequestState) -> int: ...
        def checkpoint_request(self, st: RequestState, upto: int, *, chunked: bool = True) -> None: ...

    # ----------------------------------------------------------------------------- candidate sets

    def is_device_candidate(self, node: Node) -> bool:
        """Device-eviction candidate: on device, unlocked, no child on device, not root (read-only)."""
        return node.value is not None and node.lock_ref == 0 and node.n_dev_children == 0 and node is not self.root

    def _refresh(self, node: Node) -> None:
        """Recompute both candidacies and keys of ``node``; push a heap entry where either changed.

        The hottest function of the core (every lock, touch and copy change): the device test is
        ``is_device_candidate`` written out, the key functions are bound once in ``__init__``. The
        root needs no test: it stays locked (``lock_ref`` 1), so it is never a candidate.
        """
        if node.value is not None:
            if node.lock_ref == 0 and node.n_dev_children == 0:
                k = self._dev_key(node)
                cands = self._dev_cands
                if cands.get(node) != k:
                    cands[node] = k
                    self._pushes += 1
                    heappush(self._dev_heap, (k, node.id, self._pushes, node))
            else:
                self._dev_cands.pop(node, None)
            if self._host_h_only:
                # _refresh_host's answer for a node on device under an H-only rule, without the call.
                self._host_cands.pop(node, None)
                return
        else:
            self._dev_cands.pop(node, None)
        self._refresh_host(node)

    def _refresh_host(self, node: Node) -> None:
        """Recompute the host candidacy and key of ``node`` only: for changes the device side does not
        read (host copy, host pin, host children, pending write). Its device side is a pure function
        of what did not change, so a full ``_refresh`` would leave it as it is.

        Under a rule whose candidates are all H-only, a node on device skips the rule's test; it is
        never in the host candidate set (invariant 8), so the hot callers skip the call for it.
        """
        cands = self._host_cands
        if (node.value is None or not self._host_h_only) and self._host_is_candidate(self, node):
            k = self._host_key(self, node)
            if cands.get(node) != k:
                cands[node] = k
                self._pushes += 1
                heappush(self._host_heap, (k, node.id, self._pushes, node))
        elif node in cands:
            del cands[node]

    def _touch(self, node: Node) -> None:
        """Mark ``node`` accessed now; re-queue it where its eviction key changed."""
        self._clock += 1
        node.last_access = self._clock
        self._refresh(node)

    @staticmethod
    def _pop(heap: list[tuple[Any, int, int, Node]], cands: dict[Node, Any]) -> Node | None:
        """Pop the smallest valid entry: the node is still a candidate under the same key."""
        while heap:
            k, _, _, node = heappop(heap)
            if cands.get(node) == k:
                return node
        return None

    def _pop_host_candidate(self) -> Node | None:
        """Remove and return the host candidate with the smallest key, or None (mutates heap only)."""
        return self._pop(self._host_heap, self._host_cands)

    def _compact_heaps(self) -> None:
        """Drop stale entries once they dominate (keeps memory bounded on long runs)."""
        if len(self._dev_heap) > 4 * len(self._dev_cands) + 4096:
            self._dev_heap = [(k, n.id, self._tick_push(), n) for n, k in self._dev_cands.items()]
            heapq.heapify(self._dev_heap)
        if len(self._host_heap) > 4 * len(self._host_cands) + 4096:
            self._host_heap = [(k, n.id, self._tick_push(), n) for n, k in self._host_cands.items()]
            heapq.heapify(self._host_heap)

    # ------------------------------------------------------------------------- host duplicates

    def is_settled_duplicate(self, node: Node) -> bool:
        """Device and host copy, no write or load in flight on it (read-only)."""
        return (
            node.value is not None
            and node.host_value is not None
            and node.pending_write is None
            and node.pending_load is None
            and node is not self.root
        )

    def _track_duplicate(self, node: Node) -> None:
        """Register ``node`` as a full host duplicate if it is one now, else drop its entry. A node
        already registered keeps its place."""
        if not self._track_dups:
            return
        if self.is_settled_duplicate(node):
            self.host_duplicates.setdefault(node, None)
        else:
            self.host_duplicates.pop(node, None)

    # ------------------------------------------------------------------------------ node changes

    def _add_child(self, parent: Node, child: Node) -> None:
        child.parent = parent
        parent.children[child.key[0]] = child
        if self._tracks_depth:
            self._raise_history(child, parent)
        if child.value is not None:
            parent.n_dev_children += 1
        if child.host_value is not None:
            parent.n_host_children += 1
            # New children are D-only (insert) or H-only (prefetch), never mirrors.
            self.tree_host_pages += len(child.key)
        self._refresh(child)
        if not parent.lock_ref:  # a locked node is in neither candidate set: nothing to re-queue
            self._refresh(parent)

    def _raise_history(self, node: Node, parent: Node) -> None:
        """A new node under ``parent``: its depth, and the high-water depth of it and of every ancestor
        that had not reached it yet (SGLang's ``_set_tlru_lens_and_raise_history``). An ancestor's key
        may read its history, so each one raised is re-queued (mutates)."""
        depth = parent.tlru_depth + len(node.key)
        node.tlru_depth = depth
        if node.tlru_history < depth:
            node.tlru_history = depth
        x: Node | None = parent
        root = self.root
        while x is not None and x.tlru_history < depth:
            x.tlru_history = depth
            if x is not root:
                self._refresh(x)
            x = x.parent

    def _set_value(self, node: Node, pages: list[int]) -> None:
        """Give an evicted node device pages (re-attach or load-back); counts them as evictable."""
        node.value = pages
        self.evictable_pages += len(pages)
        if node.host_value is not None:
            self.mirror_pages += len(pages)
        parent = node.parent
        assert parent is not None, "a node in the tree below the root"
        parent.n_dev_children += 1
        self._refresh(node)
        if not parent.lock_ref:
            self._refresh(parent)

    def _clear_value(self, node: Node) -> list[int]:
        """Detach a node's device pages without freeing them; returns them."""
        pages, parent = node.value, node.parent
        assert pages is not None and parent is not None, "a node on device, in the tree below the root"
        node.value = None
        self.evictable_pages -= len(pages)
        if node.host_value is not None:
            self.mirror_pages -= len(pages)
        parent.n_dev_children -= 1
        self._refresh(node)
        if not parent.lock_ref:
            self._refresh(parent)
        return pages

    def _set_host_value(self, node: Node, pages: list[int]) -> None:
        node.host_value = pages
        self.tree_host_pages += len(pages)
        if node.value is not None:
            self.mirror_pages += len(pages)
        parent = node.parent
        assert parent is not None, "a node in the tree below the root"
        parent.n_host_children += 1
        if node.value is None or not self._host_h_only:
            self._refresh_host(node)
        if not parent.lock_ref and (parent.value is None or not self._host_h_only):
            self._refresh_host(parent)

    def _clear_host_value(self, node: Node) -> None:
        """Free a node's host pages (mutates)."""
        host_pages, parent = node.host_value, node.parent
        assert host_pages is not None and parent is not None, "a node on host, in the tree below the root"
        self.host.free(host_pages)
        n = len(host_pages)
        self.tree_host_pages -= n
        if node.value is not None:
            self.mirror_pages -= n
        node.host_value = None
        parent.n_host_children -= 1
        if node.value is None or not self._host_h_only:
            self._refresh_host(node)
        if not parent.lock_ref and (parent.value is None or not self._host_h_only):
            self._refresh_host(parent)

    def _delete_leaf(self, node: Node) -> None:
        """Remove a childless node, freeing whatever device and host pages it holds."""
        if node.children:
            raise CacheStateError(f"delete of node {node.id} which still has {len(node.children)} children")
        parent = node.parent
        assert parent is not None, "a node in the tree below the root"
        del parent.children[node.key[0]]
        value, host_value = node.value, node.host_value
        if value is not None:
            if host_value is not None:
                self.mirror_pages -= len(node.key)
            self.device.free(value)
            self.evictable_pages -= len(value)
            parent.n_dev_children -= 1
            node.value = None
        if host_value is not None:
            self.host.free(host_value)
            self.tree_host_pages -= len(host_value)
            parent.n_host_children -= 1
            node.host_value = None
        self._dev_cands.pop(node, None)
        self._host_cands.pop(node, None)
        self.host_duplicates.pop(node, None)
        node.parent = None
        if not parent.lock_ref:
            self._refresh(parent)

    def _split(self, child: Node, n: int) -> Node:
        """Split ``child`` after its first ``n`` pages; returns the new upper node (lossless).

        The upper node takes the child's parent slot, lock count, hit count, priority, creation time
        and any pending write or load id; it is never newer than the child, as the tree walk stamps
        ancestors before descendants. An upper half that is a full host duplicate is registered as a
        new one (the child keeps its place).
        """
        parent = child.parent
        assert parent is not None, "a node in the tree below the root"
        upper = self._new_node(child.key[:n], child.priority)
        upper.creation = child.creation
        upper.hit_count = child.hit_count
        upper.lock_ref = child.lock_ref
        upper.pending_write = child.pending_write
        upper.pending_load = child.pending_load
        if self._tracks_depth:
            # A split adds no depth: the upper half ends n pages below the parent and shares the
            # branch's high-water mark; the child's depth is unchanged (its key is shorter).
            upper.tlru_depth = parent.tlru_depth + n
            upper.tlru_history = child.tlru_history
        if child.value is not None:
            upper.value = child.value[:n]
            child.value = child.value[n:]
            upper.n_dev_children = 1
        if child.host_value is not None:
            upper.host_value = child.host_value[:n]
            child.host_value = child.host_value[n:]
            upper.n_host_children = 1
        if child.hashes is not None:
            upper.hashes = child.hashes[:n]
            child.hashes = child.hashes[n:]
        upper.parent = parent
        parent.children[upper.key[0]] = upper
        child.key = child.key[n:]
        child.parent = upper
        upper.children[child.key[0]] = child
        if self._page_level:
            # Page granularity stands for one node per page: pages keep their own ages.
            upper.last_access = child.last_access
        else:
            # Node granularity, as the unified tree: the lower half is stamped newer than the upper.
            child.last_access = self._tick()
        self._refresh(upper)
        self._refresh(child)
        self._track_duplicate(upper)
        return upper

    def _page_hashes(self, parent: Node, keys: list[int]) -> list[int] | None:
        """Chained page hashes for a new node under ``parent`` (only kept with a storage tier)."""
        if self.storage is None:
            return None
        prev = parent.hashes[-1] if parent.hashes else None
        return chain_hashes(prev, keys)

    # ------------------------------------------------------------------------------ locks / pins

    def inc_lock_ref(self, node: Node) -> int:
        """Pin ``node`` and its ancestors on device (mutates). Returns pages newly protected."""
        newly = 0
        # Up to the root, which alone in the tree has no parent (and stays locked).
        parent = node.parent
        while parent is not None:
            if node.lock_ref == 0:
                newly += len(node.key)  # its device pages: a locked path is on device, a slot per key
                node.lock_ref = 1
                # No rule keeps a locked node a candidate, on either side.
                self._dev_cands.pop(node, None)
                self._host_cands.pop(node, None)
            else:
                node.lock_ref += 1
            node = parent
            parent = node.parent
        if newly:
            self.evictable_pages -= newly
            self.protected_pages += newly
        return newly

    def dec_lock_ref(self, node: Node) -> int:
        """Unpin ``node`` and its ancestors (mutates). Returns pages made evictable again."""
        freed = 0
        refresh = self._refresh
        parent = node.parent  # up to the root, as inc_lock_ref
        while parent is not None:
            lock = node.lock_ref - 1
            if lock < 0:
                self.evictable_pages += freed
                self.protected_pages -= freed
                raise CacheStateError(f"dec_lock_ref on node {node.id} with lock_ref {node.lock_ref}")
            node.lock_ref = lock
            if lock == 0:
                freed += len(node.key)  # its device pages, as inc_lock_ref
                refresh(node)
            node = parent
            parent = node.parent
        if freed:
            self.evictable_pages += freed
            self.protected_pages -= freed
        return freed

    def protect_host(self, node: Node) -> None:
        """Pin the node's host copy (storage backup, prefetch anchor, load-back in progress)."""
        node.host_ref += 1
        if node.host_ref == 1 and (node.value is None or not self._host_h_only):
            self._refresh_host(node)

    def release_host(self, node: Node) -> None:
        """Unpin the node's host copy; releasing below zero is an error, as upstream."""
        if node.host_ref <= 0:
            raise CacheStateError(f"release_host on node {node.id} with host_ref {node.host_ref}")
        node.host_ref -= 1
        if node.host_ref == 0 and node.parent is not None and (node.value is None or not self._host_h_only):
            self._refresh_host(node)

    # ---------------------------------------------------------------------------------- queries

    def iter_nodes(self) -> list[Node]:
        """All nodes except the root, parents before children, in a deterministic order."""
        out: list[Node] = []
        stack = list(reversed(self.root.children.values()))
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(reversed(node.children.values()))
        return out

    def counter_values(self) -> dict[str, int]:
        """The core's counters and, with a storage tier, what the store did (pages held, evicted,
        refused, eviction passes): one flat dict for a run's ``counters``."""
        out = self.counters.as_dict()
        if self.storage is not None:
            out.update(self.storage.report())
        return out

    def residency(self) -> dict[str, int]:
        """Pages by state: device_pages (D and D+H), host_pages (H and D+H), mirror_pages (D+H).

        From the counters the mutators keep (O(1)); ``residency_walk`` recounts them from the tree."""
        return _residency(self.evictable_pages + self.protected_pages, self.tree_host_pages, self.mirror_pages)

    def residency_walk(self) -> dict[str, int]:
        """``residency`` counted node by node (O(nodes); for checks)."""
        d = h = dh = 0
        for node in self.iter_nodes():
            n = len(node.key)
            if node.value is not None:
                d += n
                if node.host_value is not None:
                    dh += n
            if node.host_value is not None:
                h += n
        return _residency(d, h, dh)


def _residency(d: int, h: int, dh: int) -> dict[str, int]:
    return {
        "device_pages": d,
        "host_pages": h,
        "mirror_pages": dh,
        "device_only_pages": d - dh,
        "host_only_pages": h - dh,
    }
