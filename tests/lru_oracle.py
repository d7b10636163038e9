"""An exact oracle for the device tier: an LRU stack-distance (Mattson) computation written
independently of the core (it imports nothing from hicache_sim, so ``bench/bench_oracle.py`` runs it as a
script), predicts every request's device hit pages under page-granular eviction.

The oracle
----------
Identify a page by its whole prefix (the path from the root), as the radix tree does. Keep one LRU
stack over all pages ever referenced. A request for pages p_1 .. p_k (p_1 the first page) *references*
them in the order p_k, p_(k-1), ..., p_1, each moving to the top. So after every request an ancestor
sits above (is more recent than) all of its descendants.

Claim 1 (ancestors above descendants, always). By induction over requests: every reference to a page
p_j is followed, within the same request, by references to all of p_j's ancestors p_(j-1) .. p_1, so
each ancestor ends above p_j; a reference to an ancestor alone only raises the ancestor. Hence along
any path the stack depths of referenced pages strictly increase from the root down.

Claim 2 (the top C of the stack is exactly what a page-granular LRU tree cache of C pages holds).
By Mattson's inclusion property an LRU cache of capacity C holds the top C pages of the stack. Claim 1
makes that set prefix-closed (a page's ancestors are above it), so it is a valid radix tree, and the
bottom-most cached page is always a leaf: exactly the page a tree cache may evict (only leaves can
leave; a node's deepest pages go first). The core orders leaf nodes by last access (the request that
last touched them) and, with page granularity, evicts exactly the shortfall, deepest pages of the
victim first; both agree with the stack's bottom as long as a request fits in the cache (C at least
its length: then the request's own pages, locked in the core, are the top of the stack anyway).

Claim 3 (hits). Before a request its hit pages are the cached ones among p_1 .. p_m (m = the match
limit); by Claim 1 their depths increase along the path, so the cached pages are a prefix: the hit
count is the number of leading pages whose depth before the request is <= C. (Depths are taken
*before* the request: referencing p_k first pushes p_i down by k - i, so sequential stack distances
in the reference order would not be the pre-request depths.)

Depth is computed with a Fenwick tree over reference times: a page's depth is the number of pages
whose latest reference is at or after its own.
"""

from __future__ import annotations


class _Fenwick:
    def __init__(self, n: int) -> None:
        self.n = n
        self.tree = [0] * (n + 1)

    def add(self, i: int, d: int) -> None:
        i += 1
        while i <= self.n:
            self.tree[i] += d
            i += i & -i

    def prefix(self, i: int) -> int:
        """Sum over positions [0, i)."""
        s = 0
        while i > 0:
            s += self.tree[i]
            i -= i & -i
        return s


def lru_stack_hits(requests: list[tuple[tuple[int, ...], int]], capacities: list[int]) -> dict[int, list[int]]:
    """Device hit pages per request for each capacity. ``requests``: (page keys, match limit) pairs."""
    total = sum(len(keys) for keys, _ in requests)
    fw = _Fenwick(total + 1)
    page_id: dict[tuple[int, int], int] = {}  # (parent page id, key) -> page id: a page is its prefix
    last_ref: dict[int, int] = {}  # page id -> time of its latest reference
    clock = live = 0
    out: dict[int, list[int]] = {c: [] for c in capacities}
    for keys, limit in requests:
        ids = []
        parent = -1
        for k in keys:
            parent = page_id.setdefault((parent, k), len(page_id))
            ids.append(parent)
        depths = []
        for pid in ids[:limit]:
            t = last_ref.get(pid)
            if t is None:
                break  # never referenced: neither it nor anything below it can be cached
            depths.append(live - fw.prefix(t))
        assert depths == sorted(set(depths)), "claim 1 violated: depths must increase along the path"
        for c in capacities:
            out[c].append(sum(1 for d in depths if d <= c))
        for pid in reversed(ids):  # leaf first, root last: ancestors end above descendants
            t = last_ref.get(pid)
            if t is not None:
                fw.add(t, -1)
                live -= 1
            last_ref[pid] = clock
            fw.add(clock, 1)
            clock += 1
            live += 1
    return out
