"""Pre-flight: the host memory SGLang 0.5.23 pins on one node, against what the node has.

Every rank builds its own host pools (``mem_cache/pool_host``): the KV pool HiCache mirrors device
pages into, and, where the model has them, pools that ride beside it on the same pages (DeepSeek
sparse attention's indexer keys, ``pool_host/dsa.py``). All of it is pinned, so it cannot be reclaimed:
a node whose ranks ask for more than it has fails at start-up or is killed later. The ranks on one
node are ``tp x pp / nnodes`` of each data-parallel replica, times the replicas (``--dp-size`` without
DP attention starts that many full groups on the node).

SGLang 0.5.23 keeps 10 GiB of the host back (``HICACHE_HOST_MEMORY_RESERVE_BYTES``) and checks each
pool against ``(available - 10 GiB) // ranks_per_host`` at construction, with ``ranks_per_host =
tp x pp / nnodes`` (one replica's ranks). Two consequences the check here spells out:

- an explicit ``--hicache-size`` / ``--hicache-ratio`` pool is checked when each rank reaches it, and a
  rank that arrives after ``k`` peers pinned theirs sees ``available`` already lower by ``k`` pools
  while still dividing by every rank (sgl-project/sglang#38156): it starts in every order only when
  ``(2n - 1) x pool <= available - 10 GiB``, and never when ``n x pool`` exceeds it;
- without a host size, auto-sizing (``mem_cache/hicache_auto_size.py``) lowers the default ratio to
  ``--hicache-host-memory-fraction`` of one snapshot's per-rank share, with 5 % slack, and books every
  pool against that snapshot, so it starts whatever the order.

Pure arithmetic on a resolved scenario: nothing is allocated, nothing is read from the machine this
runs on (the simulator does not run on the node).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..core import ConfigError
from ..core.registry import Registry
from ..core.sizing import host_pool_tokens
from ..hardware.memory import GIB
from .resolve import HOST_RESERVE_BYTES, Resolved, default_host_ratio, indexer_bytes_per_token, sglang_ranks_per_host


@dataclass(frozen=True)
class HostPool:
    """One host pool of one rank: its name and pinned bytes."""

    name: str
    bytes: int


@dataclass(frozen=True)
class SidePool:
    """A pool beside the KV pool: its pinned bytes on one rank for a resolved scenario and a KV host pool
    of ``host_tokens`` (0: the model has none)."""

    name: str
    bytes_per_rank: Callable[[Resolved, int], int]


def _indexer_host_bytes(r: Resolved, host_tokens: int) -> int:
    """DSA indexer keys on the host: the KV pool's pages plus one (``pool_host/dsa.py`` sizes its buffer
    ``(size + page + 1) // page`` pages), each token ``indexer_bytes_per_token`` of the rank's layers."""
    per_token = indexer_bytes_per_token(r.model, r.stage_layers)
    page = r.cache.page_size
    return (host_tokens + page + 1) // page * page * per_token


def _draft_host_bytes(r: Resolved, host_tokens: int) -> int:
    """Speculative decoding's draft host pool, one slot per KV host slot (``hardware/speculative.py``); an
    MTP draft has none: SGLang packs its layers into the KV pool's rows (``rank_pools``)."""
    return host_tokens * r.draft.own_pool_bpt


#: Host pools beside the KV pool, by name.
SIDE_POOLS: Registry[SidePool] = Registry("host side pool", "pool")
SIDE_POOLS.add("DSA indexer", SidePool("DSA indexer", _indexer_host_bytes))
SIDE_POOLS.add("draft", SidePool("draft", _draft_host_bytes))


@dataclass(frozen=True)
class NodeCheck:
    """What one node pins for a resolved scenario, and whether ``node_bytes`` holds it (bytes)."""

    pools: tuple[HostPool, ...]  # one rank's pools, the KV pool first (empty: no host pool)
    ranks_on_node: int  # every rank of every replica on this node
    guard_ranks: int  # what SGLang divides the node by (one replica's ranks on the node)
    node_bytes: int | None  # hardware.host_memory_gib (what SGLang reads as available), or None
    explicit: bool  # a host size was given: SGLang's auto-sizing is off
    auto_ratio: float | None  # the ratio auto-sizing would choose on this node (None: no node memory)
    auto_pool_bytes: int | None  # one rank's pools at that ratio
    auto_fraction: float | None = None  # the --hicache-host-memory-fraction it takes (lowered under --dp-size)

    @property
    def per_rank_bytes(self) -> int:
        return sum(p.bytes for p in self.pools)

    @property
    def pinned_bytes(self) -> int:
        """Every rank's pools on this node."""
        return self.ranks_on_node * self.per_rank_bytes

    @property
    def needed_bytes(self) -> int:
        """The pinned pools plus SGLang's 10 GiB reserve."""
        return self.pinned_bytes + HOST_RESERVE_BYTES

    @property
    def overcommits(self) -> bool:
        return self.node_bytes is not None and self.needed_bytes > self.node_bytes

    def guard(self) -> str:
        """SGLang 0.5.23's start-up check of explicit pools: ``refused`` (in every order), ``order`` (refused
        when ranks pin one after another, sglang#38156), ``ok``; ``ok`` too for auto-sizing, which books
        one snapshot, and without node memory."""
        if self.node_bytes is None or not self.explicit:
            return "ok"
        n, free = self.guard_ranks, self.node_bytes - HOST_RESERVE_BYTES
        verdict, pinned = "ok", 0
        for pool in self.pools:  # every rank builds them in this order, each after the last is pinned
            if n * pool.bytes > free - pinned:
                return "refused"
            if (2 * n - 1) * pool.bytes > free - pinned:
                verdict = "order"
            pinned += n * pool.bytes
        return verdict

    def lines(self) -> list[str]:
        """What ``validate`` prints: the pinned total, and the node's verdict when its memory is known."""
        if not self.pools:
            return ["host memory: no host pool (nothing pinned)"]
        named = len(self.pools) > 1 or self.pools[0].name != "KV"  # a packed draft widens the one KV pool
        parts = f" ({' + '.join(f'{p.name} {p.bytes / GIB:.1f}' for p in self.pools)})" if named else ""
        head = (
            f"host memory: {self.ranks_on_node} rank(s) on the node x {self.per_rank_bytes / GIB:.1f} GiB{parts} "
            f"= {self.pinned_bytes / GIB:.1f} GiB pinned, {self.needed_bytes / GIB:.1f} GiB with SGLang's "
            "10 GiB reserve"
        )
        if self.node_bytes is None:
            return [f"{head}; give the node's memory (hardware.host_memory_gib or --node-memory) to check it"]
        spare = self.node_bytes - self.needed_bytes
        verdict = "fits" if spare >= 0 else "does NOT fit"
        return [f"{head}, of {self.node_bytes / GIB:.1f} GiB on the node: {verdict} ({spare / GIB:+.1f} GiB spare)"]

    def warnings(self) -> list[str]:
        """One line per problem, with the numbers and what SGLang's auto-sizing would choose instead."""
        if self.node_bytes is None or not self.pools:
            return []
        out = []
        node, n = self.node_bytes / GIB, self.guard_ranks
        if self.overcommits:
            out.append(
                f"host memory overcommitted: {self.ranks_on_node} rank(s) x {self.per_rank_bytes / GIB:.1f} GiB "
                f"= {self.pinned_bytes / GIB:.1f} GiB pinned + 10 GiB reserve > {node:.1f} GiB on the node"
                f"{self._instead()}"
            )
        verdict = self.guard()
        if verdict == "refused":
            share = (self.node_bytes - HOST_RESERVE_BYTES) / n / GIB
            out.append(
                f"SGLang 0.5.23 refuses to start ('Not enough host memory available'): a rank's host pools "
                f"({self.per_rank_bytes / GIB:.1f} GiB) are more than its share of the node, ({node:.1f} GiB - 10 "
                f"GiB) / {n} rank(s) = {share:.1f} GiB"
            )
        elif verdict == "order":
            out.append(
                f"SGLang 0.5.23 may refuse to start: the pools fit when the {n} ranks pin them at once, but a rank "
                f"that reaches its check after others pinned theirs sees less free memory while still dividing by "
                f"{n} (sgl-project/sglang#38156); every order passes only while (2 x {n} - 1) x pool <= "
                f"{node:.1f} GiB - 10 GiB"
            )
        elif self.overcommits and self.ranks_on_node > n:
            out.append(
                f"SGLang 0.5.23's check divides the node by one replica's {n} rank(s), not the "
                f"{self.ranks_on_node} of all --dp-size replicas: the replicas that check before the others pin "
                "pass it, and the node runs out (or a later replica is refused)"
            )
        return out

    def _instead(self) -> str:
        if self.auto_ratio is None or self.auto_pool_bytes is None:
            return ""
        if self.auto_ratio <= 0:
            return "; SGLang's auto-sizing would find no room left after its 10 GiB reserve"
        flags = "no --hicache-ratio / --hicache-size"
        if self.ranks_on_node > self.guard_ranks:  # it counts one replica: only a smaller fraction fits all
            flags += f", --hicache-host-memory-fraction {self.auto_fraction:.3g} as it counts one replica's ranks"
        return (
            f"; SGLang's auto-sizing ({flags}) would choose ratio {self.auto_ratio:.3f}: "
            f"{self.auto_pool_bytes / GIB:.1f} GiB per rank"
        )


def node_ranks(r: Resolved) -> int:
    """Every rank on one node: one replica's ``tp x pp / nnodes``, times the data-parallel replicas."""
    return sglang_ranks_per_host(r.scenario.hardware) * r.scenario.hardware.dp


def rank_pools(r: Resolved, host_tokens: int | None = None) -> tuple[HostPool, ...]:
    """One rank's host pools (the KV pool, then each side pool the model has) for a KV host pool of
    ``host_tokens`` (default: the scenario's)."""
    tokens = r.host_tokens if host_tokens is None else host_tokens
    packed = r.draft.packed_bpt  # an MTP draft's layers ride in the KV pool's rows: one pool, checked as one
    pools = [HostPool("KV+MTP draft" if packed else "KV", tokens * (r.bytes_per_token + packed))]
    for name in SIDE_POOLS.names():
        b = SIDE_POOLS.get(name).bytes_per_rank(r, tokens)
        if b:
            pools.append(HostPool(name, b))
    return tuple(pools)


def node_check(r: Resolved) -> NodeCheck:
    """The host memory one node pins for ``r``, against ``hardware.host_memory_gib`` when given."""
    hw, c = r.scenario.hardware, r.scenario.cache
    explicit = any(v is not None for v in (c.host_ratio, c.host_size_gb, c.host_tokens))
    node = None if hw.host_memory_gib is None else int(hw.host_memory_gib * GIB)
    pools = rank_pools(r) if r.host_tokens else ()
    auto_ratio = auto_bytes = fraction = None
    if node is not None:
        # SGLang's auto-sizing splits the node over one replica's ranks: with --dp-size replicas on the
        # node, only 1 / dp of the fraction keeps all of them within it.
        fraction = c.host_memory_fraction / hw.dp
        auto_ratio = auto_sized_ratio(r, fraction)
        if auto_ratio > 0:
            tokens = host_pool_tokens(r.device_tokens, c.page_size, host_ratio=auto_ratio).host_tokens
            auto_bytes = sum(p.bytes for p in rank_pools(r, tokens))
    ranks = sglang_ranks_per_host(hw)
    return NodeCheck(pools, node_ranks(r), ranks, node, explicit, auto_ratio, auto_bytes, fraction)


def auto_sized_ratio(r: Resolved, fraction: float | None = None) -> float:
    """The host ratio SGLang 0.5.23's auto-sizing takes on the node (``hardware.host_memory_gib``), as a
    run without a host size resolves it, at ``fraction`` (default: the scenario's
    ``cache.host_memory_fraction``); 0 when its reserve leaves nothing."""
    sc = r.scenario
    if fraction is not None:
        sc = sc.model_copy(update={"cache": sc.cache.model_copy(update={"host_memory_fraction": fraction})})
    try:
        side = indexer_bytes_per_token(r.model, r.stage_layers) + r.draft.host_bpt
        return default_host_ratio(sc, r.device_tokens, r.bytes_per_token, [], side)
    except ConfigError:
        return 0.0


def largest_host_gb(r: Resolved) -> int | None:
    """The largest whole ``--hicache-size`` (GB per rank) whose pools, on every rank of the node, fit
    ``hardware.host_memory_gib`` with SGLang's reserve, which is also what passes its check when the
    ranks pin at once (None: node memory not given; 0: not even 1 GB fits)."""
    hw = r.scenario.hardware
    if hw.host_memory_gib is None:
        return None
    page, free = r.cache.page_size, int(hw.host_memory_gib * GIB) - HOST_RESERVE_BYTES
    ranks = node_ranks(r)
    gb = max(0, free // ranks // 10**9)
    while gb > 0:
        row = r.bytes_per_token + r.draft.packed_bpt  # what one GB buys: a packed draft widens the rows
        tokens = host_pool_tokens(0, page, host_size_gb=gb, bytes_per_token=row).host_tokens
        if ranks * sum(p.bytes for p in rank_pools(r, tokens)) <= free:
            return gb
        gb -= 1
    return 0
