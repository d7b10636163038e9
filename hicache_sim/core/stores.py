"""The storage tier (L3): one index of page hashes per store, each with the eviction rule its backend
really runs when it fills (``STORE_MODELS``, picked by ``hardware.storage.eviction``; the storage
preset names its backend's model).

Every model answers what SGLang asks a backend: ``prefix_hits`` (``batch_exists``: how many leading
pages are present; a miss ends the run), ``put`` (``batch_set`` after a backup), ``in`` and ``len``.
They differ in what a full store does (docs/reference/sglang-hicache-semantics.md, section 3.7, has
the source of each rule):

- ``lru``: exact page LRU; a hit query or a re-written page becomes most recent; each new page evicts
  the least recent one (SGLang's hf3fs metadata server, and the simulator's rule before the models).
- ``file``: SGLang's HiCacheFile as it starts by default (no ``max_size``): nothing is ever evicted; a
  write to a full disk fails and the rest of that backup is not written.
- ``file_lru``: HiCacheFile with ``max_size``: LRU on reads and re-writes; a write that would cross
  the cap first evicts the least recent pages down to ``low_watermark`` x cap.
- ``mooncake``: Mooncake Store's master (v0.3.12 on): each object's eviction key is its lease deadline
  (write time, or last read + ``lease_s``); while more than ``high_watermark`` of the pool is used, a
  batch evicts the ``evict_ratio`` share of objects with the oldest keys, never one whose lease is
  still running; a write to a full pool fails.
- ``mooncake_sharded``: the same up to Mooncake v0.3.11, whose batch took about the oldest object of
  each of its 1024 metadata shards: K and V objects evicted apart, holes spread over every chain.
- any of them with an offload device behind it (``OffloadedStore``, ``hardware.storage.offload``:
  Mooncake's ``enable_offload``): every accepted page is also on the device, so a page the pool evicts
  stays a hit, read at the device's rate.
- ``nixl``: SGLang's NIXL file cleaner: every ``interval_s`` it checks the disk, and from
  ``high_watermark`` deletes the oldest-written pages in groups of 50 until below ``low_watermark``;
  between checks a write to a full disk fails.

Time comes from ``clock`` (the cache's simulated ``now``: the SimPy world sets it at every event,
instant mode at each request's arrival). The one draw (the shard a sharded batch starts from) comes
from a fixed seed: the same calls give the same store.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, Protocol

from .errors import ConfigError
from .registry import Registry

#: Where a knob error points (the scenario field that sets it).
KNOB_FIELD = "hardware.storage"


def _never() -> float:
    return 0.0


class _Holds(Protocol):
    """Anything that answers ``page_hash in it``: a set, a dict or a store."""

    def __contains__(self, page_hash: int, /) -> bool: ...


def _leading(hashes: list[int], present: _Holds) -> int:
    """How many leading hashes ``present`` holds: ``batch_exists``'s answer (a miss ends the run)."""
    n = 0
    for h in hashes:
        if h not in present:
            break
        n += 1
    return n


class StoreModel:
    """One L3 store: which page hashes it holds and what it drops when full. Capacity in pages
    (None: unbounded). ``knobs`` are the ``hardware.storage`` fields the model reads, with its
    backend's defaults; ``capacity_scope`` says whether a capacity is one rank's (``rank``) or one
    pool every writing rank fills (``shared``: the scenario layer divides it by the writers)."""

    name: ClassVar[str] = "base"
    knobs: ClassVar[dict[str, float]] = {}
    capacity_scope: ClassVar[str] = "rank"

    def __init__(
        self,
        capacity_pages: int | None,
        params: Mapping[str, Any] | None = None,
        *,
        clock: Callable[[], float] | None = None,
        batch_pages: int = 128,
        objects_per_page: int = 1,
    ) -> None:
        if capacity_pages is not None and capacity_pages < 0:
            raise ValueError(f"storage capacity_pages must be >= 0 or None, got {capacity_pages}")
        if objects_per_page < 1:
            raise ValueError(f"objects_per_page must be >= 1, got {objects_per_page}")
        self.check_params(params or {})
        self.capacity = capacity_pages
        self.params = {**self.knobs, **(params or {})}
        self.clock = clock or _never
        #: Pages SGLang asks ``batch_exists`` about at once (its STORAGE_BATCH_SIZE).
        self.batch_pages = batch_pages
        #: Objects one page is stored as, over every writing rank (read by object-level models).
        self.objects_per_page = objects_per_page
        self.evicted_pages = 0
        #: Pages a put could not store (store full, nothing evictable): the write failed upstream.
        self.refused_pages = 0
        #: Eviction passes (the models that evict in batches: file_lru, mooncake, nixl); 0 for models
        #: that drop one page at a time.
        self.eviction_batches = 0
        self._setup()

    def _setup(self) -> None:
        """The model's own index, empty (called once by ``__init__``)."""

    def report(self) -> dict[str, int]:
        """What the store did, for a run's counters: pages held now, evicted, refused, eviction passes."""
        return {
            "storage_pages_held": len(self),
            "storage_evicted_pages": self.evicted_pages,
            "storage_refused_pages": self.refused_pages,
            "storage_eviction_batches": self.eviction_batches,
        }

    @classmethod
    def check_params(cls, params: Mapping[str, Any]) -> None:
        """Each key must be a knob of this model and a number in its range (raises ConfigError)."""
        for key, value in params.items():
            if key not in cls.knobs:
                readers = ", ".join(knob_readers(key)) or "none"
                raise ConfigError(
                    f"{KNOB_FIELD}.{key}", f"the {cls.name} store model does not read it (models that do: {readers})"
                )
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ConfigError(f"{KNOB_FIELD}.{key}", f"expected a finite number, got {value!r}")
            low, high, low_allowed = KNOB_RANGES[key]
            if not (low <= value if low_allowed else low < value) or value > high:
                shown = f"[{low}, {high}]" if low_allowed else f"({low}, {high}]"
                raise ConfigError(f"{KNOB_FIELD}.{key}", f"expected a value in {shown}, got {value!r}")
        cls._check_together({**cls.knobs, **params})

    @classmethod
    def _check_together(cls, params: Mapping[str, Any]) -> None:
        """Rules between knobs (none unless a model says so)."""

    def __len__(self) -> int:
        raise NotImplementedError  # pragma: no cover

    def __contains__(self, page_hash: int) -> bool:
        raise NotImplementedError  # pragma: no cover

    def prefix_hits(self, hashes: list[int], *, touch: bool = True) -> int:  # pragma: no cover
        """Leading hashes present (with ``touch``, the query counts as an access where the store's
        rule says a read does)."""
        raise NotImplementedError

    def put(self, hashes: Iterable[int]) -> int:  # pragma: no cover
        """Store pages (mutates), evicting as the rule says. Returns pages added."""
        raise NotImplementedError

    def resident_objects(self, page_hash: int) -> int:
        """Objects of the page this store holds (all or none, except where objects are evicted apart):
        what an offload tier behind it need not read from its device."""
        return self.objects_per_page if page_hash in self else 0

    def offload_objects(self, hashes: Iterable[int]) -> int:
        """Objects of these held pages a read takes from an offload device: none without one."""
        return 0


STORE_MODELS: Registry[type[StoreModel]] = Registry("storage eviction model", f"{KNOB_FIELD}.eviction")


def knob_readers(key: str) -> list[str]:
    """The store models that read the knob ``key``, in registry order."""
    return [n for n in STORE_MODELS.names() if key in STORE_MODELS.get(n).knobs]


# Each knob's range (low, high, whether low itself is allowed): a fraction of the store, or seconds.
KNOB_RANGES: dict[str, tuple[float, float, bool]] = {
    "high_watermark": (0.0, 1.0, False),
    "low_watermark": (0.0, 1.0, False),
    "evict_ratio": (0.0, 1.0, False),
    "lease_s": (0.0, 1e9, True),  # 0: a read orders a page like a write and protects nothing
    "interval_s": (0.0, 1e9, False),
}


@STORE_MODELS.register("lru")
class PageLRU(StoreModel):
    """Exact page LRU: a hit query and a re-written page become most recent; each new page beyond
    capacity evicts the least recent one (hf3fs's metadata server; the simulator's first rule)."""

    name = "lru"

    def _setup(self) -> None:
        self._pages: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._pages)

    def __contains__(self, page_hash: int) -> bool:
        return page_hash in self._pages

    def prefix_hits(self, hashes: list[int], *, touch: bool = True) -> int:
        """Leading hashes present (read; with ``touch`` the hits become most recently used)."""
        n = 0
        pages = self._pages
        for h in hashes:
            if h not in pages:
                break
            if touch:
                pages.move_to_end(h)
            n += 1
        return n

    def put(self, hashes: Iterable[int]) -> int:
        """Store pages (mutates); evicts least recently used pages beyond capacity. Returns pages added."""
        pages = self._pages
        added = 0
        for h in hashes:
            if h in pages:
                pages.move_to_end(h)
                continue
            if self.capacity is not None:
                if self.capacity == 0:
                    continue
                while len(pages) >= self.capacity:
                    pages.popitem(last=False)
                    self.evicted_pages += 1
            pages[h] = None
            added += 1
        return added


@STORE_MODELS.register("file")
class FileStore(StoreModel):
    """SGLang's HiCacheFile without ``max_size`` (its default): no eviction at all. A write to a full
    disk fails (ENOSPC): that page and the rest of its backup are lost, what is stored stays. The disk
    is shared by every rank writing its files to it."""

    name = "file"

    capacity_scope = "shared"

    def _setup(self) -> None:
        self._pages: dict[int, None] = {}

    def __len__(self) -> int:
        return len(self._pages)

    def __contains__(self, page_hash: int) -> bool:
        return page_hash in self._pages

    def prefix_hits(self, hashes: list[int], *, touch: bool = True) -> int:
        """Leading hashes present (reads change nothing: nothing is ever evicted)."""
        return _leading(hashes, self._pages)

    def put(self, hashes: Iterable[int]) -> int:
        """Store pages until the disk is full; the first that does not fit ends the backup."""
        pages, cap = self._pages, self.capacity
        added = 0
        hashes = list(hashes)
        for i, h in enumerate(hashes):
            if h in pages:
                continue
            if cap is not None and len(pages) >= cap:
                self.refused_pages += sum(1 for x in hashes[i:] if x not in pages)
                break
            pages[h] = None
            added += 1
        return added


@STORE_MODELS.register("file_lru")
class FileLRUStore(PageLRU):
    """SGLang's HiCacheFile with ``max_size`` (its LRUFileEvictor, one per rank): a read and a
    re-written page become most recent; a new page that would cross the cap first evicts the least
    recent pages until the store holds at most ``low_watermark`` x cap less that page."""

    name = "file_lru"
    knobs: ClassVar[dict[str, float]] = {"low_watermark": 0.9}

    def put(self, hashes: Iterable[int]) -> int:
        """Store pages (mutates); crossing the cap evicts down to the low watermark. Returns pages added."""
        pages, cap = self._pages, self.capacity
        added = 0
        hashes = list(hashes)
        for i, h in enumerate(hashes):
            if h in pages:
                pages.move_to_end(h)
                continue
            if cap is not None and len(pages) + 1 > cap:
                target = max(0, int(cap * self.params["low_watermark"]) - 1)
                self.eviction_batches += len(pages) > target
                while len(pages) > target:
                    pages.popitem(last=False)
                    self.evicted_pages += 1
                if len(pages) + 1 > cap:  # a page larger than the cap: refused, the backup stops
                    self.refused_pages += len(hashes) - i
                    break
            pages[h] = None
            added += 1
        return added


class _MooncakeMaster(StoreModel):
    """What both Mooncake models share (master_service.cpp): each stored item (a page, or one object
    of it) has an eviction key, its lease deadline and the grant that set it; a lease never shrinks;
    the eviction thread's trigger. The pool is one for all ranks (``capacity_scope``)."""

    capacity_scope = "shared"

    def _setup(self) -> None:
        # item -> (lease deadline, grant number): the eviction key, smaller first.
        self._keys: dict = {}
        self._grants = 0
        self._need_eviction = False
        # A batch that found every item leased needs no retry before the first lease ends or a write.
        self._idle_until = -math.inf

    def _grant(self, item: Any, deadline: float) -> None:
        """Extend ``item``'s lease to ``deadline`` (a lease never shrinks)."""
        key = self._keys[item]
        if deadline > key[0]:
            self._grants += 1
            self._keys[item] = (deadline, self._grants)

    def _batch_target(self, now: float, cap: int | None) -> float | None:
        """The share of the ``cap`` items a batch due by ``now`` evicts: when over the watermark (or
        after a failed write), with something stored, and not waiting for a lease to end; None when
        no batch is due."""
        if not cap:
            return None
        used = len(self._keys)
        high, ratio = self.params["high_watermark"], self.params["evict_ratio"]
        if used / cap <= high and not self._need_eviction:
            return None
        if not used:  # nothing to evict (Mooncake drops the request too)
            self._need_eviction = False
            return None
        if now < self._idle_until:
            return None
        return max(ratio, used / cap - high + ratio)

    def _queried(self, hashes: list[int], n: int) -> list[int]:
        """The hashes SGLang's ``batch_exists`` asked about when the first ``n`` hit: ``batch_pages``
        at a time, up to the batch holding the first miss."""
        end = len(hashes) if n == len(hashes) else min(len(hashes), (n // self.batch_pages + 1) * self.batch_pages)
        return hashes[:end]


@STORE_MODELS.register("mooncake")
class MooncakeStore(_MooncakeMaster):
    """Mooncake Store's memory pool (master_service.cpp BatchEvict, EvictionThreadFunc, PutEnd,
    GrantReadLease). Each page's objects (K and V of every writing rank) share one eviction key, its
    lease deadline: the write time after a put, ``now + lease_s`` after a read or an existence check
    (never moved back). Whenever more than ``high_watermark`` of the pool is used (the eviction thread
    polls every 10 ms: here before every write and query), one batch evicts at least
    ``ceil(pages x max(evict_ratio, used - high_watermark + evict_ratio))`` pages, oldest keys first,
    among pages whose lease has run out; leased pages are never evicted. A write to a full pool fails,
    ends that backup, and makes the next check evict even below the watermark.

    The pool is one for all ranks, so its capacity is shared (``capacity_scope``). Keys are ordered by
    deadline, then by the order the grants happened (Mooncake stamps each object with the system
    clock, so no two tie)."""

    name = "mooncake"
    knobs: ClassVar[dict[str, float]] = {"high_watermark": 0.90, "evict_ratio": 0.05, "lease_s": 10.0}

    # ``_keys``: page hash -> its eviction key.

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, page_hash: int) -> bool:
        return page_hash in self._keys

    def _maintain(self, now: float) -> None:
        """What the eviction thread has done by ``now``: one batch when over the watermark (or after a
        failed write), taking only pages whose lease ended."""
        target = self._batch_target(now, self.capacity)
        if target is None:
            return
        want = math.ceil(len(self._keys) * target)
        expired = [(key, h) for h, key in self._keys.items() if key[0] <= now]
        if not expired:  # every page leased: the thread retries later (need_eviction stays set)
            self._idle_until = min(key[0] for key in self._keys.values())
            return
        for _key, h in heapq.nsmallest(min(want, len(expired)), expired):
            del self._keys[h]
        self.evicted_pages += min(want, len(expired))
        self.eviction_batches += 1
        self._need_eviction = False

    def prefix_hits(self, hashes: list[int], *, touch: bool = True) -> int:
        """Leading hashes present. With ``touch`` (a real ``batch_exists``) every present page of the
        batches SGLang queried (``batch_pages`` at a time, up to the batch holding the first miss) gets
        a lease of ``lease_s``."""
        now = self.clock()
        self._maintain(now)
        pages = self._keys
        n = _leading(hashes, pages)
        if touch:
            deadline = now + self.params["lease_s"]
            for h in self._queried(hashes, n):
                if h in pages:
                    self._grant(h, deadline)
        return n

    def put(self, hashes: Iterable[int]) -> int:
        """Store pages: a present one is leased (SGLang checks existence first), a new one is keyed by
        its write time. The first write to a full pool fails and ends the backup."""
        now = self.clock()
        pages, cap = self._keys, self.capacity
        lease = now + self.params["lease_s"]
        added = 0
        hashes = list(hashes)
        for i, h in enumerate(hashes):
            if h in pages:
                self._grant(h, lease)
                continue
            self._maintain(now)
            if cap is not None and len(pages) >= cap:
                self._need_eviction = cap > 0
                self.refused_pages += sum(1 for x in hashes[i:] if x not in pages)
                break
            self._grants += 1
            pages[h] = (now, self._grants)
            self._idle_until = -math.inf
            added += 1
        return added


#: Mooncake's metadata shards (master_service.h kNumShards): an object's shard is a hash of its key.
MOONCAKE_SHARDS = 1024
_MASK64 = (1 << 64) - 1


def _mix64(x: int) -> int:
    """A fixed 64-bit mixer (splitmix64's finaliser): where an object's key hash falls, the same in
    every run (Python's own ``hash`` of an int is the int)."""
    x &= _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


@STORE_MODELS.register("mooncake_sharded")
class MooncakeShardedStore(_MooncakeMaster):
    """Mooncake Store up to v0.3.11 (master_service.cpp BatchEvict before the global candidate pass of
    v0.3.12): the same trigger, keys and leases as ``mooncake``, but a batch walks the 1024 metadata
    shards from a random one and, in each, evicts the expired objects with the oldest keys up to the
    running quota ``ceil(objects seen so far x target) - evicted so far`` (every object tied with the
    last one chosen goes too); if the batch fell short of its lower bound, a second pass takes the
    oldest of the skipped ones. With ~20 objects a shard that is about each shard's oldest object: an
    approximate LRU spread over every chain, where the exact one takes one chain's whole prefix.

    Objects, not pages, are keyed and evicted: a page is ``objects_per_page`` objects (K and V of every
    writing rank, each in the shard its key hashes to) and is a hit only while all of them are present.
    A put re-writes only a page's missing objects (SGLang checks existence first, which leases the
    present ones). Defaults are v0.3.10-v0.3.11's: watermark 0.95, ratio 0.05, lease 5 s. The random
    start shard is drawn from a fixed seed."""

    name = "mooncake_sharded"
    knobs: ClassVar[dict[str, float]] = {"high_watermark": 0.95, "evict_ratio": 0.05, "lease_s": 5.0}

    def _setup(self) -> None:
        super()._setup()  # ``_keys``: (page, object) -> its eviction key
        cap = self.capacity
        self.capacity_objects = None if cap is None else cap * self.objects_per_page
        self._present: dict[int, int] = {}  # page -> objects present
        self._full = 0  # pages with every object present
        self._shards: list[dict[tuple[int, int], None]] = [{} for _ in range(MOONCAKE_SHARDS)]
        self._rng = random.Random(MOONCAKE_SHARDS)
        self.evicted_objects = 0

    def __len__(self) -> int:
        return self._full

    def __contains__(self, page_hash: int) -> bool:
        return self._present.get(page_hash, 0) == self.objects_per_page

    @staticmethod
    def _shard(obj: tuple[int, int]) -> int:
        return _mix64(obj[0] * 0x9E3779B97F4A7C15 + obj[1]) % MOONCAKE_SHARDS

    def _add(self, obj: tuple[int, int], now: float) -> None:
        self._idle_until = -math.inf
        self._grants += 1
        self._keys[obj] = (now, self._grants)
        self._shards[self._shard(obj)][obj] = None
        h = obj[0]
        n = self._present.get(h, 0) + 1
        self._present[h] = n
        if n == self.objects_per_page:
            self._full += 1

    def _drop(self, obj: tuple[int, int]) -> None:
        del self._keys[obj]
        del self._shards[self._shard(obj)][obj]
        h = obj[0]
        n = self._present[h]
        if n == self.objects_per_page:
            self._full -= 1
            self.evicted_pages += 1
        if n == 1:
            del self._present[h]
        else:
            self._present[h] = n - 1
        self.evicted_objects += 1

    def _maintain(self, now: float) -> None:
        """One batch when over the watermark (or after a failed write), shard by shard."""
        cap = self.capacity_objects
        if not cap:  # unbounded (or no room at all): never a batch, as _batch_target says
            return
        target = self._batch_target(now, cap)
        if target is None:
            return
        lower = max(target * 0.5, len(self._keys) / cap - self.params["high_watermark"])
        keys = self._keys
        if all(key[0] > now for key in keys.values()):  # every object leased: retry when one ends
            self._idle_until = min(key[0] for key in keys.values())
            return
        start = self._rng.randrange(MOONCAKE_SHARDS)
        seen = evicted = 0
        skipped: list[tuple[float, int]] = []
        for i in range(MOONCAKE_SHARDS):
            shard = self._shards[(start + i) % MOONCAKE_SHARDS]
            seen += len(shard)
            quota = math.ceil(seen * target) - evicted
            expired = [obj for obj in shard if keys[obj][0] <= now]
            if quota <= 0 or not expired:
                skipped.extend(keys[obj] for obj in expired)
                continue
            cutoff = heapq.nsmallest(min(quota, len(expired)), (keys[obj] for obj in expired))[-1]
            for obj in expired:
                if keys[obj] <= cutoff:
                    self._drop(obj)
                    evicted += 1
                else:
                    skipped.append(keys[obj])
        more = min(math.ceil(seen * lower) - evicted, len(skipped))
        if more > 0:
            cutoff = heapq.nsmallest(more, skipped)[-1]
            for i in range(MOONCAKE_SHARDS):
                shard = self._shards[(start + i) % MOONCAKE_SHARDS]
                for obj in [o for o in shard if keys[o][0] <= now and keys[o] <= cutoff]:
                    if more <= 0:
                        break
                    self._drop(obj)
                    evicted += 1
                    more -= 1
                if more <= 0:
                    break
        if evicted:
            self.eviction_batches += 1
            self._need_eviction = False

    def _objects(self, h: int) -> list[tuple[int, int]]:
        return [(h, j) for j in range(self.objects_per_page)]

    def resident_objects(self, page_hash: int) -> int:
        """Objects of the page still in the pool (K and V are evicted apart)."""
        return self._present.get(page_hash, 0)

    def prefix_hits(self, hashes: list[int], *, touch: bool = True) -> int:
        """Leading pages with every object present. With ``touch`` every present object of the batches
        SGLang queried gets a lease of ``lease_s``."""
        now = self.clock()
        self._maintain(now)
        n = 0
        for h in hashes:
            if self._present.get(h, 0) != self.objects_per_page:
                break
            n += 1
        if touch:
            deadline = now + self.params["lease_s"]
            for h in self._queried(hashes, n):
                if h in self._present:
                    for obj in self._objects(h):
                        if obj in self._keys:
                            self._grant(obj, deadline)
        return n

    def put(self, hashes: Iterable[int]) -> int:
        """Write each page's missing objects (present ones are leased by the existence check); the
        first object that finds the pool full fails and ends the backup."""
        now = self.clock()
        lease = now + self.params["lease_s"]
        cap = self.capacity_objects
        added = 0
        hashes = list(hashes)
        for i, h in enumerate(hashes):
            was_full = h in self
            for obj in self._objects(h):
                if obj in self._keys:
                    self._grant(obj, lease)
                    continue
                self._maintain(now)
                if cap is not None and len(self._keys) >= cap:
                    self._need_eviction = cap > 0
                    self.refused_pages += sum(1 for x in hashes[i:] if x not in self)
                    return added
                self._add(obj, now)
            if not was_full and h in self:
                added += 1
        return added


#: Pages the NIXL cleaner deletes between two looks at the disk (HiCacheL3Cleaner's recheck_groups).
NIXL_RECHECK_PAGES = 50


@STORE_MODELS.register("nixl")
class NixlStore(StoreModel):
    """SGLang's NIXL file backend with its HiCacheL3Cleaner (on by default): every ``interval_s``,
    if the disk is at least ``high_watermark`` full, delete pages (all ranks' files of a page form one
    group) oldest write first, 50 at a time, until below ``low_watermark``. Reads do not change a
    file's age, re-writes do. Between checks a write to a full disk fails and ends that backup."""

    name = "nixl"
    knobs: ClassVar[dict[str, float]] = {"high_watermark": 0.80, "low_watermark": 0.70, "interval_s": 30.0}
    capacity_scope = "shared"

    def _setup(self) -> None:
        self._pages: OrderedDict[int, None] = OrderedDict()  # oldest write first
        self._next_check = 0.0

    @classmethod
    def _check_together(cls, params: Mapping[str, Any]) -> None:
        """The cleaner refuses to start unless its low watermark is below its high one."""
        if params["low_watermark"] >= params["high_watermark"]:
            raise ConfigError(
                f"{KNOB_FIELD}.low_watermark",
                f"must be below high_watermark ({params['high_watermark']}), got {params['low_watermark']}",
            )

    def __len__(self) -> int:
        return len(self._pages)

    def __contains__(self, page_hash: int) -> bool:
        return page_hash in self._pages

    def _maintain(self, now: float) -> None:
        """Run the cleaner check due by ``now`` (checks with no write between them find the same disk,
        so one stands for all of them)."""
        if now < self._next_check:
            return
        interval = self.params["interval_s"]
        self._next_check = (math.floor(now / interval) + 1) * interval
        cap, pages = self.capacity, self._pages
        if not cap or len(pages) < self.params["high_watermark"] * cap:
            return
        low = self.params["low_watermark"] * cap
        self.eviction_batches += 1
        while pages and len(pages) >= low:
            for _ in range(min(NIXL_RECHECK_PAGES, len(pages))):
                pages.popitem(last=False)
                self.evicted_pages += 1

    def prefix_hits(self, hashes: list[int], *, touch: bool = True) -> int:
        """Leading hashes present (a read leaves a file's age as it was)."""
        self._maintain(self.clock())
        return _leading(hashes, self._pages)

    def put(self, hashes: Iterable[int]) -> int:
        """Write pages (a present one is re-written: youngest again); the first that finds the disk full
        fails and ends the backup."""
        self._maintain(self.clock())
        pages, cap = self._pages, self.capacity
        added = 0
        hashes = list(hashes)
        for i, h in enumerate(hashes):
            if h in pages:
                pages.move_to_end(h)
                continue
            if cap is not None and len(pages) >= cap:
                self.refused_pages += sum(1 for x in hashes[i:] if x not in pages)
                break
            pages[h] = None
            added += 1
        return added


class OffloadedStore:
    """A store with an offload device behind it (Mooncake's ``enable_offload``): every page the store
    accepts is also written to the device, and a page the store later evicts stays readable there.

    Mooncake v0.3.10 (docs/reference/sglang-hicache-semantics.md, section 3.7): the master queues every
    object at ``PutEnd`` for offload and holds its memory replica (refcount) until the real client's
    heartbeat has written it to SSD, so no accepted object leaves memory before it is on disk; an
    eviction drops only the memory replica, the object's disk replica keeps it present
    (``ExistKey`` counts any complete replica); a read of a disk-only object is served from the disk and
    does not bring it back into memory. The device's own capacity (``capacity_pages``, None: unbounded)
    evicts nothing: the bucket backend's default policy is ``none``, so a full disk refuses the offload
    and the page then lives in the pool alone.

    Reads: ``prefix_hits`` is the leading run of pages held in the pool or on the device; the pool's
    own rule sees a read of the pool pages of the batches SGLang queried (their leases).
    ``offload_objects(hashes)`` counts the objects such a read must take from the device (what the
    pool no longer holds): the timed world charges them at the device's rate."""

    def __init__(self, pool: StoreModel, capacity_pages: int | None) -> None:
        if capacity_pages is not None and capacity_pages < 0:
            raise ValueError(f"offload capacity_pages must be >= 0 or None, got {capacity_pages}")
        self.pool = pool
        self.capacity = capacity_pages
        self._disk: set[int] = set()
        self._pool_only: set[int] = set()  # pages the device refused (full): in the pool alone, while it keeps them
        #: Pages the device could not take (full).
        self.refused_pages = 0
        #: Objects reads took from the device (a prefetch's batches, counted at its hit query).
        self.read_objects = 0

    @property
    def objects_per_page(self) -> int:
        return self.pool.objects_per_page

    @property
    def batch_pages(self) -> int:
        return self.pool.batch_pages

    def __len__(self) -> int:
        return len(self._disk) + sum(1 for h in self._pool_only if h in self.pool)

    def __contains__(self, page_hash: int) -> bool:
        return page_hash in self._disk or page_hash in self.pool

    def prefix_hits(self, hashes: list[int], *, touch: bool = True) -> int:
        """Leading pages held in the pool or on the device. With ``touch`` the pool's rule sees a read
        of its own pages among the batches SGLang queried (``batch_pages`` at a time, up to the batch
        holding the first miss)."""
        n = _leading(hashes, self)
        if touch:
            end = len(hashes) if n == len(hashes) else min(len(hashes), (n // self.batch_pages + 1) * self.batch_pages)
            self.pool.prefix_hits([h for h in hashes[:end] if h in self.pool], touch=True)
        return n

    def offload_objects(self, hashes: Iterable[int]) -> int:
        """Objects of these (held) pages a read takes from the device: those the pool no longer has."""
        per = self.objects_per_page
        n = sum(per - self.pool.resident_objects(h) for h in hashes)
        self.read_objects += n
        return n

    def put(self, hashes: Iterable[int]) -> int:
        """Store pages in the pool; every page it accepted goes to the device too (while it has room),
        also one the pool evicted again within this write (Mooncake holds an object in memory until it
        is offloaded). Refused pages (a full pool: the suffix the pool counts as refused) go nowhere.
        Returns pages new to the store (pool or device)."""
        hashes = list(hashes)
        before = sum(1 for h in hashes if h in self)
        refused_before = self.pool.refused_pages
        self.pool.put(hashes)
        refused_n = self.pool.refused_pages - refused_before
        absent = [h for h in hashes if h not in self.pool]
        refused = set(absent[len(absent) - min(refused_n, len(absent)) :]) if refused_n else set()
        disk, cap = self._disk, self.capacity
        for h in hashes:
            if h in disk or h in self._pool_only or h in refused:
                continue
            if cap is not None and len(disk) >= cap:
                self.refused_pages += 1
                self._pool_only.add(h)
                continue
            disk.add(h)
        return sum(1 for h in hashes if h in self) - before

    def report(self) -> dict[str, int]:
        """The pool's counters, and the device's: pages on it, pages it refused, objects read from it."""
        return {
            **self.pool.report(),
            "storage_offload_pages_held": len(self._disk),
            "storage_offload_refused_pages": self.refused_pages,
            "storage_offload_read_objects": self.read_objects,
        }


def build_store(
    eviction: str,
    capacity_pages: int | None,
    params: Mapping[str, Any] | None = None,
    *,
    clock: Callable[[], float] | None = None,
    batch_pages: int = 128,
    objects_per_page: int = 1,
    offload: bool = False,
    offload_capacity_pages: int | None = None,
) -> StoreModel | OffloadedStore:
    """The L3 store a configuration names: its ``STORE_MODELS`` model, behind an offload device when
    ``offload`` is set."""
    pool = STORE_MODELS.get(eviction)(
        capacity_pages, params, clock=clock, batch_pages=batch_pages, objects_per_page=objects_per_page
    )
    return OffloadedStore(pool, offload_capacity_pages) if offload else pool
