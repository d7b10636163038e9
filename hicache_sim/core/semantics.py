"""Era variants as behaviour: where upstream changed over time, one registry per variant.

Each variant (``evict_amount``, ``parent_backup``, ...) is a registry of small behaviour objects; an
era (``SEMANTICS``: ``2025`` or ``2026``) names one entry per variant, a config may override any of
them, and :class:`Semantics` holds the chosen objects, resolved once, so the core calls behaviour
instead of comparing names. A new variant value is one registered entry; the allowed values
(``SEMANTIC_CHOICES``) come from the registries.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .registry import Registry

if TYPE_CHECKING:
    from .counters import Counters
    from .tree import Node


class BackupSite(Protocol):
    """What a parent-backup variant acts on (the cache; a protocol keeps this module below it)."""

    counters: Counters

    def _backup_ancestors(self, node: Node) -> bool: ...


@dataclass(frozen=True)
class EvictAmount:
    """How many pages an allocation of ``need`` pages asks eviction for when only ``available`` are free:
    the whole need, or only the shortfall."""

    name: str
    whole_need: bool

    def pages(self, need: int, available: int) -> int:
        """Pages to evict before retrying the allocation once."""
        return need if self.whole_need else need - available


#: Device shortfall (scheduler -> tree): the whole ``need`` (before the 2026 "evict only the KV
#: shortfall" change) or only the ``deficit``.
EVICT_AMOUNTS: Registry[EvictAmount] = Registry("evict amount", "cache.evict_amount")
EVICT_AMOUNTS.add("need", EvictAmount("need", True))
EVICT_AMOUNTS.add("deficit", EvictAmount("deficit", False))

#: Host shortfall at a backup: ``full_retry`` evicts the node's whole length from host then retries
#: once (HiRadixCache); ``shortfall`` evicts only what is missing (unified tree).
HOST_BACKUP_EVICTIONS: Registry[EvictAmount] = Registry("host backup eviction", "cache.host_backup_eviction")
HOST_BACKUP_EVICTIONS.add("full_retry", EvictAmount("full_retry", True))
HOST_BACKUP_EVICTIONS.add("shortfall", EvictAmount("shortfall", False))


class ParentBackup:
    """What a write-through backup does when the node's parent has no host copy (prefix-closed rules)."""

    name = "none"
    #: Does the era keep the host set prefix-closed (a backup never lands under an unbacked parent)?
    guards_parent = False

    def admit(self, cache: BackupSite, node: Node) -> bool:
        """May ``node`` be backed up now (mutates: may count a skip or back up its ancestors)?"""
        return True


PARENT_BACKUPS: Registry[ParentBackup] = Registry("parent backup", "cache.parent_backup")
PARENT_BACKUPS.add("none", ParentBackup())  # 2025: backed up anyway


class _SkipParent(ParentBackup):
    """HiRadixCache 2026: skip the backup."""

    name = "skip"
    guards_parent = True

    def admit(self, cache: BackupSite, node: Node) -> bool:
        cache.counters.backup_skipped_parent += 1
        return False


class _ChainParent(ParentBackup):
    """Unified tree 2026: back up the unbacked ancestors first, parent first from the top."""

    name = "chain"
    guards_parent = True

    def admit(self, cache: BackupSite, node: Node) -> bool:
        return cache._backup_ancestors(node)


PARENT_BACKUPS.add("skip", _SkipParent())
PARENT_BACKUPS.add("chain", _ChainParent())


@dataclass(frozen=True)
class PrefetchFlow:
    """When a storage prefetch takes host pages: ``prealloc`` reserves them at issue, before the
    storage query (2025); ``after_hit`` allocates exactly the hit pages once the query returns (2026).

    Either way a short host is first relieved of the whole run (0.5.2's ``prefetch_from_storage`` and
    0.5.23's ``allocate_storage_hit`` both call ``evict_host`` with the full length, not the
    shortfall). ``partial``: when even that leaves too little, take what is free if it still reaches
    the prefetch threshold (0.5.23's ``allow_partial``); 0.5.2 gave up."""

    name: str
    reserves_at_issue: bool
    partial: bool


PREFETCH_FLOWS: Registry[PrefetchFlow] = Registry("prefetch flow", "cache.prefetch_flow")
PREFETCH_FLOWS.add("prealloc", PrefetchFlow("prealloc", True, False))
PREFETCH_FLOWS.add("after_hit", PrefetchFlow("after_hit", False, True))


@dataclass(frozen=True)
class WriteBackEviction:
    """How write_back evicts: ``staged`` (HiRadixCache) writes each device victim back, detaches it
    and keeps its host copy pinned until the end of the evict call; ``unified`` (the unified tree
    core) writes and demotes each victim at once, unpinned, and makes host room from full host
    duplicates (D+H nodes, oldest duplicate first) before evicting host-only copies.

    ``stores_copies``: with a storage tier, is each write-back copy backed up on to storage when it
    is acknowledged? SGLang 0.5.23's unified cache does (the blocking ``writing_check`` finishes each
    write-back ack like a write-through one, which queues the node's storage backup); 0.5.2's
    HiRadixCache dropped write-back acks without one, so its write_back never reached storage."""

    name: str
    unified: bool
    stores_copies: bool


WRITE_BACK_EVICTIONS: Registry[WriteBackEviction] = Registry("write-back eviction", "cache.write_back_eviction")
WRITE_BACK_EVICTIONS.add("staged", WriteBackEviction("staged", False, False))
WRITE_BACK_EVICTIONS.add("unified", WriteBackEviction("unified", True, True))


@dataclass(frozen=True)
class CheckpointHits:
    """Which inserts count insert-hits (the write-through trigger). ``counted_from(n, inserted,
    chunked)``: a node counts its hit when it ends past this many of the insert's ``n`` pages."""

    name: str
    counted_from: Callable[[int, int, bool], int]


CHECKPOINT_HITS: Registry[CheckpointHits] = Registry("checkpoint hits", "cache.checkpoint_hits")
# HiRadixCache: every insert but never a chunked-prefill checkpoint.
CHECKPOINT_HITS.add("never", CheckpointHits("never", lambda n, inserted, chunked: n if chunked else 0))
# Unified tree core: every insert, checkpoints included, for the nodes past what was already inserted.
CHECKPOINT_HITS.add("past_inserted", CheckpointHits("past_inserted", lambda n, inserted, chunked: inserted))


@dataclass(frozen=True)
class CapacityFormula:
    """SGLang's ``prefetch_capacity_limit`` (tokens of storage prefetch allowed in flight) and what it
    is compared with: the prefetch pages in flight, or (``counts_host_use``) the host pages in use
    less those staged for storage (buffer_only, 2026)."""

    name: str
    limit_tokens: Callable[[int, int], int]  # (host tokens, device tokens) -> tokens
    counts_host_use: bool = False


CAPACITY_FORMULAS: Registry[CapacityFormula] = Registry("prefetch capacity formula", "cache.prefetch_capacity_formula")
# <= 0 when host <= device: prefetch never issued.
CAPACITY_FORMULAS.add("2025", CapacityFormula("2025", lambda host, device: int(0.8 * (host - device))))
CAPACITY_FORMULAS.add("2026", CapacityFormula("2026", lambda host, device: int(0.5 * host)))
CAPACITY_FORMULAS.add(
    "2026_buffer_only", CapacityFormula("2026_buffer_only", lambda host, device: int(0.9 * host), True)
)


#: The variants a config may override one by one, each with the registry of its values.
SEMANTIC_VARIANTS: dict[str, Registry] = {
    "evict_amount": EVICT_AMOUNTS,
    "parent_backup": PARENT_BACKUPS,
    "host_backup_eviction": HOST_BACKUP_EVICTIONS,
    "prefetch_flow": PREFETCH_FLOWS,
    "write_back_eviction": WRITE_BACK_EVICTIONS,
    "checkpoint_hits": CHECKPOINT_HITS,
}
SEMANTIC_CHOICES: dict[str, tuple[str, ...]] = {name: tuple(reg.names()) for name, reg in SEMANTIC_VARIANTS.items()}
#: Numeric era values a config may set explicitly (CacheConfig fields of the same name).
SEMANTIC_VALUES = (
    "prefetch_timeout_base_s",
    "prefetch_timeout_per_ki_token_s",
    "prefetch_timeout_max_s",
    "prefetch_retry_poll_interval",
    "prefetch_retry_max_attempts",
)


@dataclass(frozen=True)
class Era:
    """An upstream era: the name of its value for each variant, its timeout defaults (seconds;
    timeout = base + per 1024 tokens x slope, capped; None: no cap), its storage prefetch re-issue
    defaults (prefill passes between polls, attempts; 0: none) and its capacity formula."""

    evict_amount: str
    parent_backup: str
    host_backup_eviction: str
    prefetch_flow: str
    write_back_eviction: str
    checkpoint_hits: str
    prefetch_timeout_base_s: float
    prefetch_timeout_per_ki_token_s: float
    prefetch_timeout_max_s: float | None
    prefetch_retry_poll_interval: int
    prefetch_retry_max_attempts: int
    capacity_formula: str


#: Which SGLang source each era follows (the behaviour variants cite their commits in
#: docs/reference/sglang-hicache-semantics.md, section 0). Prefetch timeout defaults, read from the PyPI
#: wheels: up to 0.5.2 a fixed 3 s (``HiRadixCache.prefetch_timeout``, no extra-config keys); from 0.5.3
#: through 0.5.23 ``1 + 0.25 s per 1024 tokens``, no cap (hiradix_cache.py; 0.5.23's
#: unified_radix_cache.py the same), the ``2025`` era's numbers; the ``2026`` era's ``2.0 + 0.1 s per
#: 1024 tokens, capped at 30 s`` is upstream main after 0.5.23 (``PrefetchTimeoutConfig`` in
#: hicache_storage.py, an unpinned snapshot): no release up to 0.5.23 has it. To match a 0.5.3-0.5.23
#: server under the ``2026`` behaviour set ``cache.prefetch_timeout_base_s: 1.0``,
#: ``prefetch_timeout_per_ki_token_s: 0.25`` and a large ``prefetch_timeout_max_s``.
SEMANTICS: Registry[Era] = Registry("semantics", "cache.semantics")
#: Storage prefetch re-issues (``--hicache-storage-prefetch-retry-poll-interval`` /
#: ``--hicache-storage-prefetch-retry-max-attempts``, 8 and 8 in 0.5.23's server args): a request whose
#: prefetch ended with nothing because its hit query had not answered (best_effort) or the host had no
#: room asks storage again after that many prefill passes, unless it is at the head of the queue. 0.5.2
#: and earlier had no re-issue (0 and 0).
SEMANTICS.add("2025", Era("need", "none", "full_retry", "prealloc", "staged", "never", 1.0, 0.25, None, 0, 0, "2025"))
SEMANTICS.add(
    "2026",
    Era("deficit", "chain", "shortfall", "after_hit", "unified", "past_inserted", 2.0, 0.1, 30.0, 8, 8, "2026"),
)


@dataclass(frozen=True)
class Semantics:
    """One config's era variants as behaviour objects (overrides applied), resolved once."""

    evict_amount: EvictAmount
    parent_backup: ParentBackup
    host_backup_eviction: EvictAmount
    prefetch_flow: PrefetchFlow
    write_back_eviction: WriteBackEviction
    checkpoint_hits: CheckpointHits
    prefetch_timeout_base_s: float
    prefetch_timeout_per_ki_token_s: float
    prefetch_timeout_max_s: float | None
    prefetch_retry_poll_interval: int
    prefetch_retry_max_attempts: int
    capacity_formula: CapacityFormula


def resolve_semantics(
    era: str, chosen: dict[str, str | None], values: dict[str, float | None], formula: str
) -> Semantics:
    """The behaviour of era ``era`` with the variant names in ``chosen`` and the numbers in ``values``
    overriding it where not None, and the capacity formula named ``formula``."""
    base = SEMANTICS.get(era)
    variants: dict[str, Any] = {
        name: reg.get(chosen.get(name) or getattr(base, name)) for name, reg in SEMANTIC_VARIANTS.items()
    }
    numbers: dict[str, Any] = {n: getattr(base, n) if values.get(n) is None else values[n] for n in SEMANTIC_VALUES}
    return Semantics(**variants, **numbers, capacity_formula=CAPACITY_FORMULAS.get(formula))
