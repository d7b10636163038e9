"""Named policies as data: eviction strategies, write policies, prefetch stop policies, host memory modes.

Each family is a :class:`~hicache_sim.core.registry.Registry`. A new eviction strategy is one class
and one ``register`` line. Host-eviction rules live in :mod:`hicache_sim.core.host_rules` because
they act on the tree; they register into ``HOST_EVICTION_RULES`` defined here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING, Any, ClassVar

from .registry import Registry

if TYPE_CHECKING:
    from .prefetch_op import PrefetchOp
    from .tree import Node


# --------------------------------------------------------------------------------------------------
# Eviction strategies (--radix-eviction-policy). Smaller key = evicted first. The same strategy
# orders device (L1) and host (L2) eviction, as upstream. Node ids break remaining ties so that the
# order never depends on heap layout.


class EvictionStrategy:
    """Orders eviction candidates. ``key(node)`` must change only when the node is touched."""

    name = "base"
    #: Does ``key`` read ``node.hit_count``? If not, an insert-hit leaves every key as it was and the
    #: cache does not re-queue the node.
    reads_hit_count = False
    #: The keys ``eviction_policy_config`` may hold for this strategy, each a non-negative integer
    #: (checked by the scenario schema), with what it means.
    config_keys: ClassVar[dict[str, str]] = {}
    #: Does ``key`` read ``node.tlru_depth`` / ``node.tlru_history``? Then the cache keeps them (at
    #: node creation and split) and re-queues the ancestors whose history a new node raises.
    tracks_depth = False

    def __init__(self, config: dict[str, Any] | None = None, page_size: int = 1) -> None:
        self.config = dict(config or {})
        self.page_size = page_size

    @classmethod
    def config_error(cls, config: dict[str, Any]) -> str | None:
        """Why SGLang would refuse ``config`` for this strategy at start-up (None: it accepts it). The
        keys are already known counts here; this is for rules between them."""
        return None

    def key(self, node: Node, /) -> Any:  # pragma: no cover - abstract
        # Positional-only: a strategy may be an ``attrgetter`` (LRU, FIFO), called without a name.
        raise NotImplementedError


EVICTION_STRATEGIES: Registry[type[EvictionStrategy]] = Registry("eviction policy", "cache.eviction_policy")


@EVICTION_STRATEGIES.register("lru")
class LRU(EvictionStrategy):
    """Least recently used first."""

    name = "lru"
    # An attribute getter rather than a method: the key is read on every touch (no Python frame).
    key = attrgetter("last_access")


@EVICTION_STRATEGIES.register("lfu")
class LFU(EvictionStrategy):
    """Fewest insert-hits first, then least recently used."""

    name = "lfu"
    reads_hit_count = True

    def key(self, node: Node) -> Any:
        return (node.hit_count, node.last_access)


@EVICTION_STRATEGIES.register("fifo")
class FIFO(EvictionStrategy):
    """Oldest node first."""

    name = "fifo"
    key = attrgetter("creation")


@EVICTION_STRATEGIES.register("mru")
class MRU(EvictionStrategy):
    """Most recently used first."""

    name = "mru"

    def key(self, node: Node) -> Any:
        return -node.last_access


@EVICTION_STRATEGIES.register("filo")
class FILO(EvictionStrategy):
    """Newest node first."""

    name = "filo"

    def key(self, node: Node) -> Any:
        return -node.creation


@EVICTION_STRATEGIES.register("priority")
class Priority(EvictionStrategy):
    """Lowest request priority first, then least recently used."""

    name = "priority"

    def key(self, node: Node) -> Any:
        return (node.priority, node.last_access)


@EVICTION_STRATEGIES.register("slru")
class SLRU(EvictionStrategy):
    """Segmented LRU: nodes hit fewer than ``protected_threshold`` times (default 2) go first."""

    name = "slru"
    reads_hit_count = True
    config_keys: ClassVar[dict[str, str]] = {"protected_threshold": "hits after which a node is protected (default 2)"}

    def __init__(self, config: dict[str, Any] | None = None, page_size: int = 1) -> None:
        super().__init__(config, page_size)
        self.protected_threshold = int(self.config.get("protected_threshold", 2))

    def key(self, node: Node) -> Any:
        return (1 if node.hit_count >= self.protected_threshold else 0, node.last_access)


@EVICTION_STRATEGIES.register("tlru")
class TLRU(EvictionStrategy):
    """Tail-Optimized LRU (SGLang 0.5.23 ``TLRUStrategy``, arXiv:2510.15152): a branch whose deepest
    reach is L tokens, whose next prompt adds about ``next_prompt_estimate`` tokens, needs only
    L + estimate - ``threshold`` tokens cached to keep its next prefill under the TTFT budget. A node
    lying wholly past that budget (the tokens above it already cover it) is TEL-safe and goes first;
    then plain LRU. Both keys are tokens, as SGLang's; depths here are pages of ``page_size`` tokens.

    L is the branch's high-water depth (``tlru_history``), which an eviction does not lower: a trimmed
    conversation stops being TEL-safe once its tail past the budget is gone.
    """

    name = "tlru"
    tracks_depth = True
    config_keys: ClassVar[dict[str, str]] = {
        "threshold": "tokens a next prefill may recompute within the TTFT budget (default 0)",
        "next_prompt_estimate": "tokens a conversation's next prompt is expected to add (default 0)",
    }

    def __init__(self, config: dict[str, Any] | None = None, page_size: int = 1) -> None:
        super().__init__(config, page_size)
        self.threshold = int(self.config.get("threshold", 0))
        self.next_prompt_estimate = int(self.config.get("next_prompt_estimate", 0))

    @classmethod
    def config_error(cls, config: dict[str, Any]) -> str | None:
        """SGLang 0.5.23 (``kv_cache_hook``) refuses tlru unless threshold > next_prompt_estimate:
        otherwise nothing is ever TEL-safe and tlru is LRU."""
        threshold, estimate = config.get("threshold", 0), config.get("next_prompt_estimate", 0)
        if threshold <= estimate:
            return (
                f"tlru needs threshold > next_prompt_estimate (SGLang refuses it otherwise), "
                f"got {threshold} <= {estimate}"
            )
        return None

    def key(self, node: Node) -> Any:
        p = self.page_size
        budget = max(node.tlru_history * p + self.next_prompt_estimate - self.threshold, 0)
        tel_safe = (node.tlru_depth - len(node.key)) * p >= budget
        return (-1 if tel_safe else 0, node.last_access)


# --------------------------------------------------------------------------------------------------
# Write policies (--hicache-write-policy).


@dataclass(frozen=True)
class WritePolicy:
    """When device pages are copied to host.

    ``threshold``: insert-hits after which a node is backed up (None: never at insert).
    ``backup_at_eviction``: a device victim without a host copy is written back before it leaves.
    """

    name: str
    threshold: int | None
    backup_at_eviction: bool


WRITE_POLICIES: Registry[WritePolicy] = Registry("write policy", "cache.write_policy")
WRITE_POLICIES.add("write_through", WritePolicy("write_through", 1, False))
WRITE_POLICIES.add("write_through_selective", WritePolicy("write_through_selective", 2, False))
WRITE_POLICIES.add("write_back", WritePolicy("write_back", None, True))


# --------------------------------------------------------------------------------------------------
# Prefetch stop policies (--hicache-storage-prefetch-policy): may a request stop waiting for its
# storage prefetch now?


class StopPolicy:
    """Decides whether an ongoing prefetch may be terminated at simulated time ``now`` (seconds)."""

    name = "base"
    #: Does a stop end the prefetch at a deadline? Then a prefetch stopped before its hit query
    #: answered is over (SGLang: reason "deadline"); otherwise it is a miss poll, asked again later.
    stops_at_deadline = False

    def can_terminate(self, op: PrefetchOp, now: float, timeout_s: float) -> bool:  # pragma: no cover
        raise NotImplementedError


PREFETCH_STOP_POLICIES: Registry[type[StopPolicy]] = Registry("prefetch policy", "cache.prefetch_policy")


@PREFETCH_STOP_POLICIES.register("best_effort")
class BestEffort(StopPolicy):
    """Stop as soon as the request is schedulable; use whatever has arrived."""

    name = "best_effort"

    def can_terminate(self, op: PrefetchOp, now: float, timeout_s: float) -> bool:
        return True


@PREFETCH_STOP_POLICIES.register("wait_complete")
class WaitComplete(StopPolicy):
    """Block the request until every hit page has arrived."""

    name = "wait_complete"

    def can_terminate(self, op: PrefetchOp, now: float, timeout_s: float) -> bool:
        return op.is_complete()


@PREFETCH_STOP_POLICIES.register("timeout")
class Timeout(StopPolicy):
    """Wait until complete or until the linear timeout (base + per 1024 hit tokens, capped) passes."""

    name = "timeout"
    stops_at_deadline = True

    def can_terminate(self, op: PrefetchOp, now: float, timeout_s: float) -> bool:
        return op.is_complete() or now - op.start_time > timeout_s


# Host-eviction rules register here (implementations in host_rules.py).
HOST_EVICTION_RULES: Registry[type] = Registry("host eviction rule", "cache.host_eviction")


# --------------------------------------------------------------------------------------------------
# Host memory modes (--hicache-host-memory-mode): what host memory is for. The core reads the mode's
# attributes, never its name.


@dataclass(frozen=True, eq=False)
class HostMemoryMode:
    """What host memory holds and what follows from it.

    ``stages``: host memory is a staging buffer between device and storage, not a cache: no node keeps
    a host copy, device eviction deletes, backups queue as intents written through to storage, a
    prefetch parks in bounce pages until its request is admitted (buffer.py); such a mode needs a
    storage tier and a host pool. ``partial_prefetch``: a short host may take a shorter prefetch run
    of what is free (0.5.23's buffer pipeline asks for the whole hit or nothing).
    ``resolved_write_policies``: write policies the server accepts and runs as another (start-up
    resolution). ``capacity_formulas``: the era's prefetch capacity formula -> this mode's (see
    semantics.CAPACITY_FORMULAS). ``default_host_ratio``: SGLang's ``--hicache-ratio`` when no host
    size is given.
    """

    name: str
    stages: bool
    partial_prefetch: bool
    resolved_write_policies: Mapping[str, str]
    capacity_formulas: Mapping[str, str]
    default_host_ratio: float

    def runs(self, write_policy: str) -> str:
        """The write policy the server runs when asked for ``write_policy`` in this mode."""
        return self.resolved_write_policies.get(write_policy, write_policy)

    def capacity_formula(self, era_formula: str) -> str:
        """The prefetch capacity formula this mode uses where the era's is ``era_formula``."""
        return self.capacity_formulas.get(era_formula, era_formula)


HOST_MEMORY_MODES: Registry[HostMemoryMode] = Registry("host memory mode", "cache.host_memory_mode")
HOST_MEMORY_MODES.add("cache", HostMemoryMode("cache", False, True, {}, {}, 2.0))
# SGLang 0.5.23 accepts write_back with buffer_only and resolves it to write_through at start-up
# (``validate_hicache_host_memory_mode``: no host tier to write back to); its default ratio is 1.2.
HOST_MEMORY_MODES.add(
    "buffer_only",
    HostMemoryMode("buffer_only", True, False, {"write_back": "write_through"}, {"2026": "2026_buffer_only"}, 1.2),
)

EVICTION_GRANULARITIES = ("node", "page")
