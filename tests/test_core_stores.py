"""The storage (L3) store models: what each backend does when full, derived by hand on small stores.

Every model runs the same script in the guard (``EXPECTED_SURVIVORS``: a new model without its row
fails), and each has its own test of the rule that sets it apart. Pages are small ints; a fake clock
gives the times. The sharded Mooncake model places object ``(page, j)`` in shard ``page x opp + j`` and
starts every batch at shard 0 here (``_placed``), so its walk can be followed by hand; its real placement
is a fixed hash (``test_sharded_placement_is_a_fixed_spread``).
"""

from __future__ import annotations

import pytest

from hicache_sim.core import CacheConfig, ConfigError
from hicache_sim.core.pools import StorageIndex
from hicache_sim.core.stores import (
    MOONCAKE_SHARDS,
    STORE_MODELS,
    MooncakeShardedStore,
    PageLRU,
    StoreModel,
)
from hicache_sim.instant import run_instant
from hicache_sim.workloads import Request


class Clock:
    """Simulated time the test moves by hand."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class _StartAtZero:
    """Stands for the model's seeded draw of the shard a batch starts from."""

    @staticmethod
    def randrange(n: int) -> int:
        return 0


def _placed(store: StoreModel) -> StoreModel:
    """A sharded store with hand-known placement: object (page, j) in shard page x opp + j, every batch
    starting at shard 0 (other models are returned as they are)."""
    if isinstance(store, MooncakeShardedStore):
        opp = store.objects_per_page
        store._shard = lambda obj: (obj[0] * opp + obj[1]) % MOONCAKE_SHARDS  # type: ignore[method-assign]
        store._rng = _StartAtZero()  # type: ignore[assignment]
    return store


def make(name: str, capacity: int | None, clock: Clock, params: dict | None = None, opp: int = 1) -> StoreModel:
    return _placed(STORE_MODELS.get(name)(capacity, params, clock=clock, objects_per_page=opp))


def P(*ranges: tuple[int, int] | int) -> list[int]:
    """Page numbers from inclusive ranges and single pages: P((1, 4), 11) = [1, 2, 3, 4, 11]."""
    out: list[int] = []
    for r in ranges:
        out += list(range(r[0], r[1] + 1)) if isinstance(r, tuple) else [r]
    return out


# ------------------------------------------------------------------------------ the guard

# One script on a store of 20 pages, each model with its defaults (one object per page):
#   t=0  put 1..16         t=1  query 1..4        t=2  put 17..24
#   t=3  query 11          t=5  put 25, 26        t=40 query 1, put 27
# and the pages left, derived by hand:
#
# lru: touch order after t=1 is 5..16, 1..4; 17..20 fill it, 21..24 evict 5..8; t=3 makes 11 most
#   recent; 25, 26 evict 9, 10; t=40 touches 1, 27 evicts 12. Left: 1-4, 11, 13-27.
# file: no eviction. 17..20 fill the disk, 21 fails and ends that backup (21..24 lost), 25, 26 and
#   27 fail too. Left: 1-20.
# file_lru (low 0.9 -> a crossing write evicts down to int(20 x 0.9) - 1 = 17): 21 evicts 5, 6, 7;
#   22, 23 fit; 24 evicts 8, 9, 10; t=3 touches 11; 25, 26 fit (20); t=40 touches 1, 27 evicts 12,
#   13, 14. Left: 1-4, 11, 15-27.
# mooncake (watermark 0.9, ratio 0.05, lease 10 s): keys are the write time, or read + 10 s. t=1
#   leases 1..4 to 11. 17, 18, 19 go in (19/20 = 0.95 is above 0.9 only once 19 are stored): before
#   20, one batch of ceil(19 x (0.95 - 0.9 + 0.05)) = 2 evicts the oldest keys 5, 6; likewise 7, 8
#   before 22 and 9, 10 before 24. t=3 leases 11 to 13. Before 26 (t=5): 12, 13 (11 is leased).
#   t=40: 18 pages, no batch. Left: 1-4, 11, 14-27.
# nixl (checks at t = 0, 30, 60, ...; 80 % / 70 % of 20 = 16 / 14): the check at t=0 finds it empty.
#   17..20 fill the disk; 21..24, 25, 26 fail. The check due at t=30 runs at t=40 (before the query):
#   20 >= 16, it deletes a group of 50 (the whole disk) and stops below 14. 1 misses; 27 goes in.
#   Left: 27.
# mooncake_sharded (0.95, 0.05, lease 5 s; page i in shard i, walk from shard 0): t=1 leases 1..4
#   to 6. 17..20 go in (19/20 = 0.95 is not above 0.95). Before 21: target 1.0 - 0.95 + 0.05, a
#   double just above 0.1; the running quota ceil(seen x target) - evicted gives 1 at shard 1 (page 1
#   leased: nothing), 5 (evicts 5), 10 (10 x target is just above 1: evicts 10) and 20 (evicts 20).
#   Before 24 (18 + 21, 22, 23 = 20): 6 at seen 5, 12 at seen 10, 23 at seen 20. t=3 leases 11 to
#   8; 25, 26 fill it (20). Before the query at t=40 (everything expired): 1 (seen 1), 14 (seen 10),
#   26 (seen 20); 1 then misses, 27 goes in. Left: 2-4, 7-9, 11, 13, 15-19, 21, 22, 24, 25, 27.
EXPECTED_SURVIVORS = {
    "lru": P((1, 4), 11, (13, 27)),
    "file": P((1, 20)),
    "file_lru": P((1, 4), 11, (15, 27)),
    "mooncake": P((1, 4), 11, (14, 27)),
    "nixl": P(27),
    "mooncake_sharded": P((2, 4), (7, 9), 11, 13, (15, 19), 21, 22, 24, 25, 27),
}
# Hits of the t=40 query of page 1.
EXPECTED_LAST_HIT = {"lru": 1, "file": 1, "file_lru": 1, "mooncake": 1, "nixl": 0, "mooncake_sharded": 0}


def run_script(store: StoreModel, clock: Clock) -> int:
    """The guard's script; returns the hits of the last query."""
    for t, op, pages in (
        (0, "put", P((1, 16))),
        (1, "query", P((1, 4))),
        (2, "put", P((17, 24))),
        (3, "query", P(11)),
        (5, "put", P(25, 26)),
        (40, "query", P(1)),
    ):
        clock.t = t
        hits = store.put(pages) if op == "put" else store.prefix_hits(pages)
    store.put(P(27))
    return hits


def test_every_registered_store_model_is_covered():
    assert set(STORE_MODELS.names()) == set(EXPECTED_SURVIVORS) == set(EXPECTED_LAST_HIT)


@pytest.mark.parametrize("name", STORE_MODELS.names())
def test_store_model_on_the_common_script(name):
    clock = Clock()
    store = make(name, 20, clock)
    assert run_script(store, clock) == EXPECTED_LAST_HIT[name]
    left = [p for p in range(1, 28) if p in store]
    assert left == EXPECTED_SURVIVORS[name]
    assert len(store) == len(left)


@pytest.mark.parametrize("name", STORE_MODELS.names())
def test_unbounded_store_keeps_everything(name):
    clock = Clock()
    store = make(name, None, clock)
    run_script(store, clock)
    assert [p for p in range(1, 28) if p in store] == P((1, 27))
    assert store.evicted_pages == store.refused_pages == 0


# ------------------------------------------------------------------------- one rule each


def test_lru_evicts_the_least_recent_page_one_at_a_time():
    """Capacity 3: 1, 2, 3; the query makes 1 most recent, so 4 evicts 2 (and only 2)."""
    s = StorageIndex(3)
    assert isinstance(s, PageLRU)
    assert s.put([1, 2, 3]) == 3
    assert s.prefix_hits([1]) == 1
    assert s.put([4]) == 1
    assert [p for p in range(1, 5) if p in s] == [1, 3, 4] and s.evicted_pages == 1


def test_file_store_never_evicts_and_a_full_disk_ends_the_backup():
    """Capacity 3 (SGLang's HiCacheFile without max_size): 1, 2 fit; of [3, 4, 5] only 3 does, and 4
    failing ends that backup (5 is not written either). [1, 6]: 1 is already there, 6 fails."""
    s = make("file", 3, Clock())
    s.put([1, 2])
    assert s.put([3, 4, 5]) == 1
    assert s.put([1, 6]) == 0
    assert [p for p in range(1, 7) if p in s] == [1, 2, 3]
    assert s.evicted_pages == 0 and s.refused_pages == 3


def test_file_lru_crossing_the_cap_evicts_down_to_the_low_watermark():
    """max_size 10 pages, eviction_ratio 0.9: 1..10 fill it, the query makes 1 most recent; 11 would
    cross the cap, so the least recent go until int(10 x 0.9) - 1 = 8 remain (2 and 3), then 11 goes
    in. A page LRU would have evicted 2 alone."""
    s = make("file_lru", 10, Clock())
    s.put(P((1, 10)))
    s.prefix_hits([1])
    s.put([11])
    assert [p for p in range(1, 12) if p in s] == P(1, (4, 11)) and s.evicted_pages == 2


def test_mooncake_evicts_a_batch_once_over_the_high_watermark():
    """100 pages, watermark 0.9, ratio 0.05, all written at t=0. 91 pages are stored before 0.9 is
    exceeded; the write of 92 finds 91/100 above it: one batch takes ceil(91 x (0.91 - 0.9 + 0.05)) =
    ceil(5.46) = 6 pages, the 6 oldest writes (1-6), though the pool had room. A page LRU evicts none."""
    s = make("mooncake", 100, Clock())
    s.put(P((1, 92)))
    assert [p for p in range(1, 93) if p in s] == P((7, 92))
    assert s.evicted_pages == 6 and s.eviction_batches == 1


def test_mooncake_never_evicts_a_leased_page_and_orders_reads_by_lease_end():
    """10 pages. t=0: 1..9; t=1: all 9 read (leased to 11); t=2: 10 fills the pool. t=3: before 11 a
    batch of ceil(10 x 0.15) = 2 finds only 10 out of lease: it evicts 10 alone. t=12 (leases over):
    before 12 a batch of 2 takes the oldest keys: 11 (written at 3) before 1 (its lease ended at 11),
    although 11 is the most recent access."""
    clock = Clock()
    s = make("mooncake", 10, clock)
    s.put(P((1, 9)))
    clock.t = 1
    assert s.prefix_hits(P((1, 9))) == 9
    clock.t = 2
    s.put([10])
    clock.t = 3
    s.put([11])
    assert [p for p in range(1, 12) if p in s] == P((1, 9), 11)
    clock.t = 12
    s.put([12])
    assert [p for p in range(1, 13) if p in s] == P((2, 9), 12)


def test_mooncake_full_pool_of_leased_pages_refuses_the_write():
    """Watermark 1.0 (Mooncake's default until its PR #820, Sept 2025: evict only after a failed write),
    4 pages, all read at t=1 (leased to 11). t=2: the pool is full, 5 fails and ends its backup (6 is
    lost too). t=3: the failed write makes the thread evict, ceil(4 x 0.05) = 1 page, but every lease
    runs: nothing goes, 5 fails again. t=12: the oldest lease (1) goes and 5 fits."""
    clock = Clock()
    s = make("mooncake", 4, clock, {"high_watermark": 1.0})
    s.put(P((1, 4)))
    clock.t = 1
    s.prefix_hits(P((1, 4)))
    clock.t = 2
    assert s.put([5, 6]) == 0 and s.refused_pages == 2
    clock.t = 3
    assert s.put([5]) == 0 and s.refused_pages == 3 and s.evicted_pages == 0
    clock.t = 12
    assert s.put([5]) == 1
    assert [p for p in range(1, 7) if p in s] == [2, 3, 4, 5]


def test_mooncake_query_leases_the_batches_sglang_asked_about():
    """SGLang asks batch_exists 128 pages at a time and stops after the batch holding the first miss:
    pages present after the miss in that batch are leased too, a later batch's are not."""
    clock = Clock()
    s = make("mooncake", None, clock)
    pages = P((1, 300))
    s.put([p for p in pages if p != 5])
    clock.t = 1
    assert s.prefix_hits(pages) == 4
    keys = s._keys
    assert keys[6][0] == keys[128][0] == 11.0  # queried (first batch, after the miss)
    assert keys[129][0] == 0.0  # the second batch was never asked


def test_mooncake_sharded_evicts_objects_spread_over_every_chain():
    """Mooncake <= 0.3.11, K and V per page (object (p, 0) in shard 2p, (p, 1) in 2p + 1), 10 pages = 20
    objects, all written at t=0. Before 11: 20/20 > 0.95, target a double just above 0.1; from shard 0
    the running quota is 1 at seen 1 (evicts K of 1), seen 10 (V of 5) and seen 20 (V of 10). Pages 1, 5
    and 10 are lost though half of each stays; 11's two objects fit (17, 18 -> 19). A global oldest-first
    batch (``mooncake``) would have taken pages 1 and 2 whole."""
    clock = Clock()
    s = make("mooncake_sharded", 10, clock, opp=2)
    s.put(P((1, 10)))
    clock.t = 1
    assert s.put([11]) == 1
    assert [p for p in range(1, 12) if p in s] == P((2, 4), (6, 9), 11)
    assert s.evicted_objects == 3 and s.evicted_pages == 3 and len(s._keys) == 19
    assert s.prefix_hits(P((1, 3))) == 0 and s.prefix_hits(P((2, 6))) == 3
    # A re-write puts back only the missing object (the existence check leases the other): 20 objects.
    clock.t = 2
    assert s.put([1]) == 1 and 1 in s and len(s._keys) == 20


def test_nixl_cleaner_deletes_oldest_writes_in_groups_of_fifty_at_its_period():
    """200 pages (80 % = 160, 70 % = 140), checks at t = 0, 30, 60. t=0: 1..170 (the check at 0 saw an
    empty disk). t=10: 1 is read (its age is unchanged), t=20: 1 is written again (youngest). The check
    due at 30 runs at t=31: 170 >= 160, one group of 50 (2..51, the oldest writes) brings it to 120 <
    140. Until a check, a full disk refuses: at t=32, 171..250 fill it to 200 and 251..260 fail."""
    clock = Clock()
    s = make("nixl", 200, clock)
    s.put(P((1, 170)))
    clock.t = 10
    assert s.prefix_hits([1]) == 1
    clock.t = 20
    s.put([1])
    clock.t = 31
    assert s.prefix_hits([2]) == 0
    assert [p for p in range(1, 171) if p in s] == P(1, (52, 170)) and s.evicted_pages == 50
    clock.t = 32
    assert s.put(P((171, 260))) == 80 and s.refused_pages == 10 and len(s) == 200


def test_sharded_placement_is_a_fixed_spread():
    """The real placement: the same shard in every run, K and V of a page apart, 1024 shards used."""
    a = MooncakeShardedStore(None, objects_per_page=2)
    shards = {MooncakeShardedStore._shard((p, j)) for p in range(4000) for j in (0, 1)}
    assert len(shards) == MOONCAKE_SHARDS
    assert a._shard((12345, 0)) == MooncakeShardedStore._shard((12345, 0)) != a._shard((12345, 1))


@pytest.mark.parametrize("name", STORE_MODELS.names())
def test_same_calls_give_the_same_store(name):
    """No draw depends on anything but the calls (the sharded model's start shard has a fixed seed)."""
    runs = []
    for _ in range(2):
        clock = Clock()
        s = STORE_MODELS.get(name)(50, None, clock=clock, objects_per_page=2)
        for t in range(30):
            clock.t = 3.0 * t
            s.prefix_hits(list(range(t, t + 10)))
            s.put(list(range(7 * t, 7 * t + 9)))
        runs.append(([p for p in range(300) if p in s], s.evicted_pages, s.refused_pages))
    assert runs[0] == runs[1]


# ------------------------------------------------------------------------------ knobs and wiring


@pytest.mark.parametrize(
    ("name", "params", "field", "fragment"),
    [
        ("lru", {"lease_s": 5}, "hardware.storage.lease_s", "models that do: mooncake, mooncake_sharded"),
        ("mooncake", {"low_watermark": 0.5}, "hardware.storage.low_watermark", "file_lru, nixl"),
        ("mooncake", {"evict_ratio": 0}, "hardware.storage.evict_ratio", "(0.0, 1.0]"),
        ("mooncake", {"high_watermark": 1.5}, "hardware.storage.high_watermark", "got 1.5"),
        ("nixl", {"low_watermark": 0.9}, "hardware.storage.low_watermark", "below high_watermark (0.8)"),
        ("nixl", {"interval_s": True}, "hardware.storage.interval_s", "finite number"),
    ],
)
def test_bad_knobs_name_their_field(name, params, field, fragment):
    with pytest.raises(ConfigError) as e:
        CacheConfig(
            page_size=1,
            device_pages=4,
            host_pages=4,
            storage=True,
            storage_eviction=name,
            **{"storage_eviction_params": params},
        )
    assert e.value.field == field and fragment in str(e.value)


def test_unknown_model_lists_the_models():
    with pytest.raises(ConfigError, match="Supported: lru, file, file_lru, mooncake, mooncake_sharded, nixl"):
        CacheConfig(page_size=1, device_pages=4, host_pages=4, storage=True, storage_eviction="fifo")


def test_cache_builds_the_configured_model_on_its_clock():
    from hicache_sim.core import HiCache

    c = HiCache(
        CacheConfig(
            page_size=1,
            device_pages=8,
            host_pages=8,
            storage=True,
            storage_capacity_pages=10,
            storage_eviction="mooncake",
            storage_eviction_params={"lease_s": 3.0},
        )
    )
    assert type(c.storage).__name__ == "MooncakeStore" and c.storage.params["lease_s"] == 3.0
    c.now = 7.5
    assert c.storage.clock() == 7.5


def test_instant_mode_clock_is_the_arrival_time():
    """Instant mode has no transfer time, but a store's leases see each request's arrival."""
    cfg = CacheConfig(page_size=1, device_pages=64, host_pages=64, storage=True, storage_eviction="mooncake")
    reqs = [Request(f"r{i}", 2.5 * i, 4, 1, list(range(10 * i, 10 * i + 4))) for i in range(4)]
    res = run_instant(cfg, reqs)
    assert res.cache.now == 7.5


# ------------------------------------------------------------------------------ scenario wiring

# What each storage preset does when full (SGLang 0.5.23 + the Mooncake of its time): a new preset
# without its row fails.
EXPECTED_PRESET_MODEL = {
    "file": "file",
    "local_nvme": "file",
    "nvme_gen5": "file",
    "hf3fs": "lru",
    "mooncake": "mooncake",
    "nixl": "nixl",
    "sim": "file",  # SGLang's sim backend: keys only, uncapped, nothing evicted
}


def _resolved(cache: dict, hardware: dict | None = None, model: str = "llama-3.1-8b"):
    from hicache_sim.scenario import resolve
    from hicache_sim.scenario.schema import Scenario

    sc = Scenario.model_validate(
        {
            "model": model,
            "hardware": {"gpu": "h200", **(hardware or {})},
            "cache": {"page_size": 64, "device_tokens": 64 * 1000, **cache},
        }
    )
    return resolve(sc).cache


def test_every_storage_preset_names_its_store_model():
    from hicache_sim.hardware.presets import STORAGE

    assert {n: STORAGE.get(n).eviction for n in STORAGE.names()} == EXPECTED_PRESET_MODEL
    for name, model in EXPECTED_PRESET_MODEL.items():
        assert _resolved({"storage_backend": name}).storage_eviction == model


def test_a_shared_pool_is_divided_among_the_ranks_that_write_it():
    """Llama-3.1-8B at TP 2: 65,536 B per token per rank, 4 MiB a 64-token page. A 100 GB Mooncake pool
    holds both ranks' K and V objects: 100e9 // (2 x 4 MiB) = 11,920 of this rank's pages, 4 objects
    each. As one rank's file (hf3fs, lru) it is 100e9 // 4 MiB = 23,841 pages. DeepSeek-V3 (MLA, TP 8):
    only rank 0 writes its one latent object (70,272 B per token): 100e9 // (64 x 70,272) = 22,235."""
    storage = {"storage": {"capacity_gb": 100}}
    c = _resolved({"storage_backend": "mooncake"}, {"tp": 2, **storage})
    assert (c.storage_capacity_pages, c.storage_objects_per_page) == (11920, 4)
    c = _resolved({"storage_backend": "hf3fs"}, {"tp": 2, **storage})
    assert (c.storage_capacity_pages, c.storage_eviction) == (23841, "lru")
    c = _resolved({"storage_backend": "mooncake"}, {"tp": 8, **storage}, model="deepseek-v3")
    assert (c.storage_capacity_pages, c.storage_objects_per_page) == (22235, 1)


def test_scenario_picks_a_model_and_its_knobs():
    c = _resolved(
        {"storage_backend": "mooncake"},
        {"storage": {"eviction": "mooncake_sharded", "high_watermark": 0.95, "lease_s": 5}},
    )
    assert c.storage_eviction == "mooncake_sharded"
    assert c.storage_eviction_params == {"high_watermark": 0.95, "lease_s": 5.0}


def test_a_runs_counters_say_what_the_store_did():
    """A 2-page LRU store fed by write-through backups of three 1-page prompts holds 2 pages and has
    evicted 1 (page-at-a-time: no eviction pass counted); the counters a run writes carry it, with the
    core's own (storage_backup_pages 3)."""
    config = CacheConfig(1, 8, 8, storage=True, storage_capacity_pages=2)
    requests = [Request(f"r{i}", float(i), 1, 1, (10 * i,)) for i in range(3)]
    res = run_instant(config, requests, reserve_last_token=False)
    c = res.cache.counter_values()
    assert c["storage_backup_pages"] == 3
    assert (c["storage_pages_held"], c["storage_evicted_pages"], c["storage_refused_pages"]) == (2, 1, 0)
    assert c["storage_eviction_batches"] == 0
    no_store = run_instant(CacheConfig(1, 8, 8), requests, reserve_last_token=False).cache.counter_values()
    assert not any(k.startswith("storage_pages") or k.startswith("storage_evicted") for k in no_store)
