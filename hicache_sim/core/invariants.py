"""check(cache): every structural invariant of the cache, each failing with a message that names the
node (or pool) and the rule and prints both numbers. Tags (one per rule) refer to the
reference's section 8 (docs/reference/sglang-hicache-semantics.md), which says where each rule comes from."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, NoReturn

from .errors import InvariantError

if TYPE_CHECKING:
    from .cache import HiCache
    from .pools import PagePool
    from .tree import Node


def _fail(rule: str, msg: str) -> NoReturn:
    raise InvariantError(f"[{rule}] {msg}")


def _parent(node: Node) -> Node:
    """The parent of a node below the root (``_check_shape`` has checked every link by then)."""
    parent = node.parent
    if parent is None:
        _fail("1b parent link", f"node {node.id} is in the tree but has no parent")
    return parent


def check(cache: HiCache, held_device_pages: Iterable[int] = ()) -> None:
    """Raise InvariantError at the first broken invariant (read-only).

    ``held_device_pages``: device slots owned by running requests and not yet by the tree (the
    caller knows them); they count towards device slot conservation.
    """
    root = cache.root
    nodes = cache.iter_nodes()
    _check_shape(cache, nodes)
    _check_states(cache, nodes)
    _check_locks(cache, nodes)
    _check_accounting(cache, nodes)
    _check_candidates(cache, nodes)
    _check_slots(cache, nodes, list(held_device_pages))
    _check_inflight(cache)
    _check_duplicates(cache, nodes)
    _check_depths(cache, nodes)
    if root.lock_ref < 1:
        _fail("6d root lock", f"root lock_ref is {root.lock_ref}, must be >= 1")


def _check_shape(cache: HiCache, nodes: list[Node]) -> None:
    everyone = [cache.root, *nodes]
    if len({id(n) for n in everyone}) != len(everyone):  # before the edges: a second parent names it
        seen: set[int] = set()
        for node in everyone:
            if id(node) in seen:
                _fail("1a reachable once", f"node {node.id} reachable twice")
            seen.add(id(node))
    for node in everyone:
        for k, c in node.children.items():
            if c.parent is not node:
                _fail(
                    "1b parent link",
                    f"node {c.id} is child of {node.id} but its parent is {getattr(c.parent, 'id', None)}",
                )
            if not c.key:
                _fail("1c key", f"node {c.id} has an empty key")
            if k != c.key[0]:
                _fail("1d child index", f"node {c.id} indexed under {k!r} but its first key is {c.key[0]!r}")
        n = len(node.key)
        if node.value is not None and len(node.value) != n:
            _fail("3a device lengths", f"node {node.id}: {len(node.value)} device pages for {n} keys")
        if node.host_value is not None and len(node.host_value) != n:
            _fail("3b host lengths", f"node {node.id}: {len(node.host_value)} host pages for {n} keys")
        if node is not cache.root and node.hashes is not None and len(node.hashes) != n:
            _fail("3c hash lengths", f"node {node.id}: {len(node.hashes)} page hashes for {n} keys")


def _check_states(cache: HiCache, nodes: list[Node]) -> None:
    # The host rule says which of the two host invariants this configuration promises.
    prefix_closed = cache.host_rule.host_set_prefix_closed(cache)
    boundary = cache.host_rule.h_only_needs_host_parent(cache)
    for node in nodes:
        parent = _parent(node)
        if node.value is not None and parent.value is None:
            _fail("4 device prefix-closure", f"node {node.id} is on device but its parent {parent.id} is not")
        if cache.host_mode.stages:
            if node.host_value is not None:
                _fail("5a buffer_only host", f"node {node.id} holds a host copy in buffer_only mode")
            if node.value is None:
                _fail("5b buffer_only evicted", f"node {node.id} is evicted but still in the tree")
            continue
        if node.value is None and node.host_value is None:
            _fail("5c no empty nodes", f"node {node.id} has neither device nor host copy")
        parent_ok = parent is cache.root or parent.host_value is not None
        if boundary and node.value is None and not parent_ok:
            _fail("15a host boundary", f"H-only node {node.id} hangs under node {parent.id} without host copy")
        if prefix_closed and node.host_value is not None and not parent_ok:
            _fail("15b host prefix-closure", f"node {node.id} is backed up but its parent {parent.id} is not")
        if node.n_dev_children != sum(c.value is not None for c in node.children.values()):
            _fail("8a device child counts", f"node {node.id} counts {node.n_dev_children} device children")
        if node.n_host_children != sum(c.host_value is not None for c in node.children.values()):
            _fail("8b host child counts", f"node {node.id} counts {node.n_host_children} host children")


def _check_locks(cache: HiCache, nodes: list[Node]) -> None:
    for node in nodes:
        if node.value is None and node.lock_ref != 0:
            _fail("6a evicted unlocked", f"evicted node {node.id} has lock_ref {node.lock_ref}")
        if node.lock_ref < 0 or node.host_ref < 0:
            _fail("6b refs non-negative", f"node {node.id} lock_ref {node.lock_ref} host_ref {node.host_ref}")
        parent = _parent(node)
        if parent is not cache.root and parent.lock_ref < node.lock_ref:
            _fail(
                "6c lock order",
                f"node {node.id} lock_ref {node.lock_ref} > parent {parent.id} lock_ref {parent.lock_ref}",
            )


def _check_accounting(cache: HiCache, nodes: list[Node]) -> None:
    total = sum(len(n.value) for n in nodes if n.value is not None)
    unlocked = sum(len(n.value) for n in nodes if n.value is not None and n.lock_ref == 0)
    if cache.evictable_pages + cache.protected_pages != total:
        _fail(
            "7a device accounting",
            f"evictable {cache.evictable_pages} + protected {cache.protected_pages} "
            f"!= {total} device pages in the tree",
        )
    if cache.evictable_pages != unlocked:
        _fail("7b evictable accounting", f"evictable {cache.evictable_pages} != {unlocked} unlocked device pages")
    counted = (cache.tree_host_pages, cache.mirror_pages)
    host = sum(len(n.key) for n in nodes if n.host_value is not None)
    mirror = sum(len(n.key) for n in nodes if n.value is not None and n.host_value is not None)
    if counted != (host, mirror):
        _fail("7c residency counts", f"residency counts (host, mirror) {counted} != {(host, mirror)} from the tree")


def _check_candidates(cache: HiCache, nodes: list[Node]) -> None:
    want_dev = {n for n in nodes if cache.is_device_candidate(n)}
    got_dev = set(cache._dev_cands)
    if want_dev != got_dev:
        extra = sorted(n.id for n in got_dev - want_dev)
        missing = sorted(n.id for n in want_dev - got_dev)
        _fail("8c device candidates", f"candidate set differs: extra nodes {extra[:5]}, missing {missing[:5]}")
    want_host = {n for n in nodes if cache.host_rule.is_candidate(cache, n)}
    got_host = set(cache._host_cands)
    if want_host != got_host:
        extra = sorted(n.id for n in got_host - want_host)
        missing = sorted(n.id for n in want_host - got_host)
        _fail("8d host candidates", f"candidate set differs: extra nodes {extra[:5]}, missing {missing[:5]}")
    _check_keys("8e device heap keys", cache._dev_heap, cache._dev_cands, cache.strategy.key)
    rule = cache.host_rule
    _check_keys("8f host heap keys", cache._host_heap, cache._host_cands, lambda n: rule.pure_key(cache, n))
    problem = rule.check(cache)
    if problem is not None:
        _fail("8g host rule index", problem)


def _check_keys(
    rule: str, heap: list[tuple[Any, int, int, Node]], cands: dict[Node, Any], pure_key: Callable[[Node], Any]
) -> None:
    """The lazy-invalidation contract: every candidate has a heap entry under the key stored for it (a
    pop finds it; entries under other keys are stale and skipped), and where its key is a pure function
    of the node (``pure_key`` not None), the stored key is that key (nothing changed behind the heap's
    back)."""
    queued = {(entry[-1], entry[0]) for entry in heap}
    for n, k in cands.items():
        if (n, k) not in queued:
            _fail(rule, f"node {n.id} is a candidate under key {k!r} but no heap entry holds that key")
        want = pure_key(n)
        if want is not None and k != want:
            _fail(rule, f"node {n.id} queued under a stale key")


def _check_pool(name: str, pool: PagePool, owned: list[tuple[str | Node, list[int]]]) -> None:
    # Slots from pool.fresh_start up are free by construction; every slot below it is either in the
    # recycled free list or owned by exactly one holder. O(slots handed out), not O(pool size): one
    # C-level count (a set of every slot), and
    # the slow walk below only to name the culprit when the count is wrong.
    fresh = pool.fresh_start
    free = pool.recycled_pages()
    total = len(free) + sum(len(pages) for _, pages in owned)
    if total == fresh:
        every = [*free, *itertools.chain.from_iterable(pages for _, pages in owned)]
        if not total or (min(every) >= 0 and max(every) < fresh and len(set(every)) == total):
            return
    _name_broken_pool(name, pool, owned)


def _name_broken_pool(name: str, pool: PagePool, owned: list[tuple[str | Node, list[int]]]) -> None:
    fresh = pool.fresh_start
    seen: dict[int, str] = {}
    for p in pool.recycled_pages():
        if p in seen:
            _fail("9 slots", f"{name} page {p} is twice in the free list")
        seen[p] = "free list"
    for owner, pages in owned:
        for p in pages:
            label = owner if isinstance(owner, str) else f"node {owner.id}"
            if p in seen:
                _fail("9 slots", f"{name} page {p} held by {label} and by {seen[p]}")
            seen[p] = label
    for p, owner in seen.items():
        if not 0 <= p < fresh:
            _fail("9 slots", f"{name} page {p} held by {owner} was never handed out (pool has {fresh} in use or freed)")
    accounted = len(seen) + pool.size - fresh
    if len(seen) != fresh:
        _fail(
            "9 slots",
            f"{name} pool: {accounted} pages accounted for, pool has {pool.size} ({pool.size - accounted} leaked)",
        )


def _check_slots(cache: HiCache, nodes: list[Node], held: list[int]) -> None:
    # Owners are nodes or labels; a node is named only when a check fails.
    dev: list[tuple[str | Node, list[int]]] = [(n, n.value) for n in nodes if n.value is not None]
    dev.append(("running requests", held))
    _check_pool("device", cache.device, dev)
    host: list[tuple[str | Node, list[int]]] = [(n, n.host_value) for n in nodes if n.host_value is not None]
    for rid, op in cache.ongoing_prefetch.items():
        if op.host_pages:
            host.append((f"prefetch {rid}", op.host_pages))
    for tid, (_node, pages, _h) in cache._buffer_writes.items():
        host.append((f"buffer write {tid}", pages))
    for rid, sp in cache.staged_prefetch.items():
        host.append((f"staged prefetch {rid}", sp.host_pages))
    for tid, pages in cache._buffer_loads.items():
        host.append((f"buffer load {tid}", pages))
    _check_pool("host", cache.host, host)


def _check_inflight(cache: HiCache) -> None:
    for tid, (node, _n) in cache.ongoing_write.items():
        if node.lock_ref < 1:
            _fail("15c write pinned", f"node {node.id} has a pending write {tid} but is not locked")
    for tid, node in cache.ongoing_load.items():
        if node.lock_ref < 1:
            _fail("16 load pinned", f"node {node.id} has a pending load {tid} but is not locked")
    occupied = sum(len(op.keys) for op in cache.ongoing_prefetch.values())
    if occupied != cache.prefetch_occupied_pages:
        _fail("17a prefetch occupancy", f"occupied {cache.prefetch_occupied_pages} pages != {occupied} in ongoing ops")
    for rid, op in cache.ongoing_prefetch.items():
        if not op.pin.held(op.anchor):
            _fail(
                "17b prefetch anchor pin", f"prefetch {rid}: anchor node {op.anchor.id} is not pinned ({op.pin.name})"
            )


def _check_duplicates(cache: HiCache, nodes: list[Node]) -> None:
    # Every full host duplicate is tracked (stale entries may linger, deleted nodes may not).
    tracked = cache.host_duplicates
    if not cache._track_dups:
        if tracked:
            _fail("23a host duplicates off", f"{len(tracked)} nodes tracked but this configuration tracks none")
        return
    in_tree = set(nodes)
    for node in tracked:
        if node not in in_tree:
            _fail(
                "23b host duplicates in tree", f"node {node.id} is tracked as a duplicate but is no longer in the tree"
            )
    for node in nodes:
        if cache.is_settled_duplicate(node) and node not in tracked:
            _fail("23c host duplicates tracked", f"node {node.id} is D+H with nothing in flight but not tracked")


def _check_depths(cache: HiCache, nodes: list[Node]) -> None:
    """Under a strategy that reads them (tlru): a node ends its parent's depth plus its own pages below the
    root, and its branch's high-water depth covers its own and every child's (nothing lowers it)."""
    if not cache._tracks_depth:
        return
    for node in nodes:
        want = _parent(node).tlru_depth + len(node.key)
        if node.tlru_depth != want:
            _fail("24a depth", f"node {node.id} depth {node.tlru_depth} pages, parent's + its key is {want}")
        reach = max([node.tlru_depth, *(c.tlru_history for c in node.children.values())])
        if node.tlru_history < reach:
            _fail(
                "24b high-water depth",
                f"node {node.id} high-water depth {node.tlru_history} pages, below {reach} (its depth or a child's)",
            )
