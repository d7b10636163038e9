"""CacheConfig: everything the core needs, in pages, validated at construction.

The scenario layer (pydantic, tokens and GB) resolves user settings into this plain dataclass so
the core stays free of I/O and third-party imports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError
from .policies import (
    EVICTION_GRANULARITIES,
    EVICTION_STRATEGIES,
    HOST_EVICTION_RULES,
    HOST_MEMORY_MODES,
    PREFETCH_STOP_POLICIES,
    WRITE_POLICIES,
    HostMemoryMode,
)
from .semantics import SEMANTIC_CHOICES, SEMANTIC_VALUES, SEMANTICS, Semantics, resolve_semantics
from .stores import STORE_MODELS


@dataclass(frozen=True)
class CacheConfig:
    """Sizes (pages), policies (registry names) and thresholds (tokens, seconds) of one HiCache.

    ``host_pages == 0`` means no host tier (plain RadixCache: nothing is ever backed up).
    ``storage_pages`` is None without a storage tier; with one, ``storage_capacity_pages`` bounds it
    (None: unbounded) and ``storage_eviction`` names what a full store does (a ``STORE_MODELS`` entry,
    its knobs in ``storage_eviction_params``; ``storage_objects_per_page``: the objects a page is
    stored as over every writing rank, for the models that evict objects). ``semantics`` picks the
    2025 or 2026 upstream variant where they differ (prefetch capacity formula, prefetch flow,
    timeout defaults, write-back eviction, checkpoint insert-hits; see :mod:`.semantics`).
    """

    page_size: int
    device_pages: int
    host_pages: int
    write_policy: str = "write_through"
    host_eviction: str = "evicted_only"
    host_memory_mode: str = "cache"
    eviction_policy: str = "lru"
    eviction_policy_config: dict[str, Any] = field(default_factory=dict)
    eviction_granularity: str = "node"
    load_back_threshold_tokens: int = 10
    storage: bool = False
    storage_capacity_pages: int | None = None
    storage_eviction: str = "lru"
    storage_eviction_params: dict[str, Any] = field(default_factory=dict)
    storage_objects_per_page: int = 1
    storage_batch_pages: int = 128
    # An offload disk behind the store (stores.OffloadedStore): on, and its capacity (None: unbounded).
    storage_offload: bool = False
    storage_offload_capacity_pages: int | None = None
    prefetch_policy: str = "timeout"
    prefetch_threshold_tokens: int = 256
    prefetch_timeout_base_s: float | None = None
    prefetch_timeout_per_ki_token_s: float | None = None
    prefetch_timeout_max_s: float | None = None
    prefetch_retry_poll_interval: int | None = None
    prefetch_retry_max_attempts: int | None = None
    semantics: str = "2026"
    evict_amount: str | None = None
    parent_backup: str | None = None
    host_backup_eviction: str | None = None
    prefetch_flow: str | None = None
    write_back_eviction: str | None = None
    checkpoint_hits: str | None = None
    bytes_per_page: int = 0
    strict: bool = False

    def __post_init__(self) -> None:
        positive = {
            "page_size": self.page_size,
            "device_pages": self.device_pages,
            "storage_batch_pages": self.storage_batch_pages,
            "storage_objects_per_page": self.storage_objects_per_page,
        }
        for name, value in positive.items():
            if value <= 0:
                raise ConfigError(f"cache.{name}", f"must be > 0, got {value}")
        for name, value in {
            "host_pages": self.host_pages,
            "bytes_per_page": self.bytes_per_page,
            "load_back_threshold_tokens": self.load_back_threshold_tokens,
            "prefetch_threshold_tokens": self.prefetch_threshold_tokens,
            "prefetch_retry_poll_interval": self.prefetch_retry_poll_interval or 0,
            "prefetch_retry_max_attempts": self.prefetch_retry_max_attempts or 0,
        }.items():
            if value < 0:
                raise ConfigError(f"cache.{name}", f"must be >= 0, got {value}")
        WRITE_POLICIES.get(self.write_policy)
        EVICTION_STRATEGIES.get(self.eviction_policy)
        HOST_EVICTION_RULES.get(self.host_eviction)
        PREFETCH_STOP_POLICIES.get(self.prefetch_policy)
        self._choice("host_memory_mode", self.host_memory_mode, tuple(HOST_MEMORY_MODES.names()))
        self._choice("eviction_granularity", self.eviction_granularity, EVICTION_GRANULARITIES)
        SEMANTICS.get(self.semantics)
        for name, allowed in SEMANTIC_CHOICES.items():
            choice = getattr(self, name)  # a name or None (the era's default), not the int ``value`` above
            if choice is not None:
                self._choice(name, choice, allowed)
        if self.storage_capacity_pages is not None and self.storage_capacity_pages < 0:
            raise ConfigError("cache.storage_capacity_pages", f"must be >= 0, got {self.storage_capacity_pages}")
        STORE_MODELS.get(self.storage_eviction).check_params(self.storage_eviction_params)
        if self.storage_offload_capacity_pages is not None and self.storage_offload_capacity_pages < 0:
            raise ConfigError(
                "cache.storage_offload_capacity_pages", f"must be >= 0, got {self.storage_offload_capacity_pages}"
            )
        if self.storage_offload and not self.storage:
            raise ConfigError("cache.storage_offload", "an offload disk needs a storage tier (storage is off)")
        mode = self.host_mode
        if mode.stages and not self.storage:
            raise ConfigError(
                "cache.host_memory_mode", f"{mode.name} needs a storage backend (storage_backend is none)"
            )
        if mode.runs(self.write_policy) != self.write_policy:
            # The scenario resolver applies the server's resolution with a note; the core takes only
            # what the server runs.
            runs = mode.runs(self.write_policy)
            raise ConfigError("cache.write_policy", f"{mode.name} runs {self.write_policy} as {runs}: pass {runs}")
        if mode.stages and self.host_pages == 0:
            raise ConfigError("cache.host_pages", f"{mode.name} needs a host staging pool > 0 pages")

    @staticmethod
    def _choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
        if value not in allowed:
            raise ConfigError(f"cache.{name}", f"expected one of {', '.join(allowed)}; got {value!r}")

    # Derived values -------------------------------------------------------------------------------

    @property
    def resolved_semantics(self) -> Semantics:
        """The era's behaviour with this config's explicit overrides applied (the core resolves it once)."""
        return resolve_semantics(
            self.semantics,
            {name: getattr(self, name) for name in SEMANTIC_CHOICES},
            {name: getattr(self, name) for name in SEMANTIC_VALUES},
            self.prefetch_capacity_formula,
        )

    @property
    def host_mode(self) -> HostMemoryMode:
        """What host memory is for: the ``HOST_MEMORY_MODES`` entry ``host_memory_mode`` names."""
        return HOST_MEMORY_MODES.get(self.host_memory_mode)

    @property
    def has_host(self) -> bool:
        """True when there is a host tier (L2 cache or buffer)."""
        return self.host_pages > 0

    @property
    def timeout_base_s(self) -> float:
        """Prefetch timeout base (s): the era's unless set."""
        return self.resolved_semantics.prefetch_timeout_base_s

    @property
    def timeout_per_ki_token_s(self) -> float:
        """Prefetch timeout slope (s per 1024 tokens): the era's unless set."""
        return self.resolved_semantics.prefetch_timeout_per_ki_token_s

    @property
    def timeout_max_s(self) -> float | None:
        """Prefetch timeout cap (s; None: none): the era's unless set."""
        return self.resolved_semantics.prefetch_timeout_max_s

    @property
    def prefetch_capacity_formula(self) -> str:
        """Which ``prefetch_capacity_limit`` formula applies (see sizing.prefetch_capacity_limit_tokens):
        the era's, as the host memory mode takes it (buffer_only under 2026 has a variant)."""
        return self.host_mode.capacity_formula(SEMANTICS.get(self.semantics).capacity_formula)
