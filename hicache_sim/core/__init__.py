"""hicache_sim.core: SGLang HiCache's memory logic over pages, pure Python.

What it models: the radix tree over pages with device (L1) and host (L2) copies per node, the device
and host page pools, the storage (L3) index, and every decision SGLang's HiRadixCache / unified tree
makes about them: prefix match, insert with write-through triggers, whole-node (or page) eviction
with the named strategies, host eviction under a named host-eviction rule, write-back staging with
the drop-subtree fallback, all-or-nothing load-back, storage backup after the D2H ack, storage
prefetch with its threshold, capacity limit and stop policy, and buffer_only host memory.

What it does not model: time, copies, tensors, TP ranks and their collectives. It never waits: each
operation that moves KV puts a :class:`Transfer` in the outbox; the caller performs it and reports
``complete(transfer)``. No simpy, torch, pandas, printing or exiting here.

Where to start reading: ``tree.py`` (nodes), ``state.py`` (bookkeeping every mutation goes through),
``cache.py`` (match/insert/complete), then ``eviction.py``, ``backup.py``, ``loadback.py``,
``prefetch.py``, ``buffer.py``, ``requests.py`` (a request's life), ``invariants.py`` (``check``).
Policies are registries in ``policies.py`` and ``host_rules.py``, era variants in ``semantics.py``,
what each storage backend does when full in ``stores.py``;
sizes in ``sizing.py``; the waiting-queue order of SGLang's ``--schedule-policy`` in ``schedule.py``.
"""

from . import host_rules as _host_rules  # noqa: F401  (registers the host-eviction rules)
from .cache import HiCache, MatchResult
from .config import CacheConfig
from .counters import Counters
from .errors import CacheStateError, ConfigError, InvariantError
from .invariants import check
from .policies import (
    EVICTION_STRATEGIES,
    HOST_EVICTION_RULES,
    PREFETCH_STOP_POLICIES,
    WRITE_POLICIES,
)
from .requests import RequestState
from .schedule import SCHEDULE_POLICIES
from .semantics import SEMANTICS
from .stores import STORE_MODELS
from .transfers import Transfer, TransferKind

__all__ = [
    "EVICTION_STRATEGIES",
    "HOST_EVICTION_RULES",
    "PREFETCH_STOP_POLICIES",
    "SCHEDULE_POLICIES",
    "SEMANTICS",
    "STORE_MODELS",
    "WRITE_POLICIES",
    "CacheConfig",
    "CacheStateError",
    "ConfigError",
    "Counters",
    "HiCache",
    "InvariantError",
    "MatchResult",
    "RequestState",
    "Transfer",
    "TransferKind",
    "check",
]
