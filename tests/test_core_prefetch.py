"""Storage (L3) prefetch: threshold, capacity limit (2025 / 2026 / buffer_only formulas), stop policies
best_effort / wait_complete / timeout with the timeout formula, terminate idempotence, revoke
(reference sections 2.10, 2.11, 3.3-3.5; invariants 17 and 18)."""

from __future__ import annotations

import pytest
from conftest import new_cache, node_at, put, settle

from hicache_sim.core import TransferKind, check
from hicache_sim.core.prefetch_op import HOST_PIN, LOCK_PIN, NO_PIN
from hicache_sim.core.sizing import prefetch_capacity_limit_tokens, prefetch_timeout_s
from hicache_sim.core.tree import chain_hashes

P = 16  # page size: the 256-token threshold is 16 pages


def storage_cache(**kw):
    kw.setdefault("device_pages", 64)
    kw.setdefault("host_pages", 128)
    return new_cache(page_size=P, storage=True, **kw)


def store(c, keys, parent_hash=None):
    """Put pages into storage as if an earlier run had written them (root-anchored chain)."""
    c.storage.put(chain_hashes(parent_hash, keys))


KEYS = list(range(100, 140))  # 40 pages


# ------------------------------------------------------------------------------------ threshold


@pytest.mark.parametrize(("pages", "issued"), [(15, False), (16, True)])
def test_prefetch_threshold_is_256_tokens(pages, issued):
    c = storage_cache()
    op = c.prefetch("r", c.root, KEYS[:pages], 0.0)
    assert (op is not None) is issued
    assert c.counters.prefetch_below_threshold == (0 if issued else 1)
    assert c.prefetch_occupied_pages == (pages if issued else 0)


def test_prefetch_threshold_is_at_least_one_page():
    c = storage_cache(prefetch_threshold_tokens=0)
    assert c.prefetch_threshold_pages == 1
    assert c.prefetch("r", c.root, [1], 0.0) is not None


def test_no_storage_no_prefetch():
    c = new_cache(page_size=P, device_pages=64, host_pages=128)
    assert c.prefetch("r", c.root, KEYS, 0.0) is None


# ------------------------------------------------------------------------------- capacity limit


def test_capacity_limit_formulas():
    assert prefetch_capacity_limit_tokens(3000, 1000, "2025") == int(0.8 * 2000)
    assert prefetch_capacity_limit_tokens(1000, 1000, "2025") == 0
    assert prefetch_capacity_limit_tokens(500, 1000, "2025") == -400
    assert prefetch_capacity_limit_tokens(3001, 1000, "2026") == 1500
    assert prefetch_capacity_limit_tokens(3001, 1000, "2026_buffer_only") == int(0.9 * 3001)


@pytest.mark.parametrize(
    ("semantics", "mode", "limit_pages"),
    [
        ("2025", "cache", int(0.8 * (128 - 64) * P) // P),
        ("2026", "cache", 64),
        ("2026", "buffer_only", int(0.9 * 128 * P) // P),
    ],
)
def test_capacity_limit_per_mode(semantics, mode, limit_pages):
    c = storage_cache(semantics=semantics, host_memory_mode=mode)
    assert c.prefetch_capacity_limit_pages() == limit_pages


def test_prefetch_stops_issuing_once_occupied_reaches_the_limit():
    c = storage_cache()  # 2026 cache mode: half the host, 64 pages
    assert c.prefetch("a", c.root, list(range(1000, 1040)), 0.0) is not None  # 40 < 64 occupied
    assert c.prefetch("b", c.root, list(range(2000, 2040)), 0.0) is not None  # 40 < 64 before issue
    assert c.prefetch_occupied_pages == 80
    assert c.prefetch("c", c.root, list(range(3000, 3020)), 0.0) is None
    assert c.counters.prefetch_rate_limited == 1
    c.release_prefetch("a")
    assert c.prefetch_occupied_pages == 40
    assert c.prefetch("c", c.root, list(range(3000, 3020)), 0.0) is not None
    check(c)


@pytest.mark.parametrize("host_pages", [32, 64])
def test_2025_formula_with_host_not_larger_than_device_never_prefetches(host_pages):
    """Invariant 18 / reference 5.2: 0.8 (host - device) <= 0, so every prefetch is rate-limited."""
    c = storage_cache(semantics="2025", device_pages=64, host_pages=host_pages)
    store(c, KEYS)
    for i in range(5):
        assert c.prefetch(f"r{i}", c.root, KEYS, float(i)) is None
    assert c.counters.prefetch_issued == 0 and c.counters.prefetch_rate_limited == 5


def test_2026_formula_prefetches_with_host_smaller_than_device():
    c = storage_cache(semantics="2026", device_pages=64, host_pages=40)
    assert c.prefetch("r", c.root, KEYS[:16], 0.0) is not None


def test_buffer_only_limit_counts_real_host_usage_less_write_staging():
    c = storage_cache(host_memory_mode="buffer_only", host_pages=20)  # limit int(0.9 * 20 pages) = 18
    assert c.prefetch_capacity_limit_pages() == 18
    hold = c.host.alloc(18)  # e.g. bounce pages of other prefetches
    assert c.prefetch("r", c.root, KEYS[:16], 0.0) is None
    c.host.free(hold)
    assert c.prefetch("r", c.root, KEYS[:16], 0.0) is not None


# --------------------------------------------------------------------------------- query and IO


def test_prefetch_2026_allocates_host_only_for_the_hits_and_reads_in_batches():
    c = storage_cache(storage_batch_pages=8)
    store(c, KEYS[:20])
    op = c.prefetch("r", c.root, KEYS, 0.0)
    assert op.host_pages is None and c.host.used() == 0  # nothing allocated before the query
    assert c.prefetch_query("r") == 20
    assert c.host.used() == 20 and op.hit_pages == 20
    ts = c.take_transfers()
    assert [t.pages for t in ts] == [8, 8, 4] and all(t.kind is TransferKind.S2H for t in ts)
    assert [h for t in ts for h in t.page_hashes] == op.hashes[:20]
    check(c)


def test_prefetch_2025_reserves_host_before_the_query_and_trims_to_the_hit():
    c = storage_cache(semantics="2025")
    store(c, KEYS[:20])
    op = c.prefetch("r", c.root, KEYS, 0.0)
    assert len(op.host_pages) == 40 and c.host.used() == 40
    assert c.prefetch_query("r") == 20
    assert c.host.used() == 20
    check(c)


def test_completed_prefetch_enters_the_tree_as_host_only_and_counts_as_a_storage_hit():
    c = storage_cache(prefetch_policy="wait_complete")
    store(c, KEYS[:20])
    c.prefetch("r", c.root, KEYS, 0.0)
    c.prefetch_query("r")
    settle(c)
    assert c.check_prefetch_progress("r", 0.0)
    node = node_at(c, KEYS[:20])
    assert node.state() == "H" and node.hashes == chain_hashes(None, KEYS[:20])
    assert c.counters.prefetch_completed == 1 and c.counters.prefetch_inserted_pages == 20
    assert c.prefetch_occupied_pages == 0
    st = c.begin_request("r", KEYS, 40)
    assert st.device_hit == 0 and st.host_hit == 0 and st.storage_hit == 20
    c.abort_request(st)
    check(c)


def test_prefetched_pages_already_in_the_tree_are_freed_as_duplicates():
    c = storage_cache(prefetch_policy="wait_complete")
    store(c, KEYS[:20])
    c.prefetch("r", c.root, KEYS, 0.0)
    c.prefetch_query("r")
    c.drain()
    put(c, KEYS[:8])  # meanwhile another request cached the first 8 pages
    settle(c)
    assert c.check_prefetch_progress("r", 0.0)
    assert c.counters.prefetch_duplicate_pages == 8 and c.counters.prefetch_inserted_pages == 12
    settle(c)
    # The request reads all 20 pages from host, but only the 12 the prefetch added came from storage:
    # the other 8 were host copies already (SGLang counts a prefetch's inserted pages as L3 hits).
    c.evict(100)
    st = c.begin_request("r", KEYS, 40)
    assert (st.device_hit, st.host_hit, st.storage_hit) == (0, 8, 12)
    c.abort_request(st)
    check(c)


def test_end_to_end_storage_round_trip():
    """Written through to storage, evicted from device and host, prefetched back."""
    c = storage_cache(prefetch_policy="wait_complete")
    put(c, KEYS[:20])
    settle(c)
    assert all(h in c.storage for h in node_at(c, KEYS[:20]).hashes)
    c.evict(100)
    c.evict_host(100)
    assert c.root.children == {}
    c.prefetch("r", c.root, KEYS[:20], 0.0)
    assert c.prefetch_query("r") == 20
    settle(c)
    assert c.check_prefetch_progress("r", 0.0)
    assert c.match_prefix(KEYS[:20]).host_hit_pages == 20


# -------------------------------------------------------------------------------- stop policies


def started(policy, hit=32, batch=8, **kw):
    c = storage_cache(prefetch_policy=policy, storage_batch_pages=batch, **kw)
    store(c, KEYS[:hit])
    op = c.prefetch("r", c.root, KEYS, 10.0)
    c.prefetch_query("r")
    return c, op, c.take_transfers()


def test_best_effort_stops_at_once_before_the_query():
    c = storage_cache(prefetch_policy="best_effort")
    store(c, KEYS)
    c.prefetch("r", c.root, KEYS, 0.0)
    assert c.check_prefetch_progress("r", 0.0)
    assert c.counters.prefetch_revoked == 1 and c.prefetch_occupied_pages == 0
    check(c)


def test_best_effort_keeps_what_arrived():
    c, _op, ts = started("best_effort")
    c.complete(ts[0])
    assert c.check_prefetch_progress("r", 10.0)
    assert c.counters.prefetch_terminated == 1 and c.counters.prefetch_inserted_pages == 8
    assert node_at(c, KEYS[:8]).state() == "H"
    assert c.host.used() == 8  # pages beyond what arrived were freed
    for t in ts[1:]:
        c.complete(t)  # late batches of a terminated prefetch change nothing
    assert c.host.used() == 8 and c.counters.prefetch_pages == 8
    check(c)


def test_wait_complete_never_stops_early():
    c, _op, ts = started("wait_complete")
    for t in ts[:-1]:
        c.complete(t)
    for now in (10.0, 100.0, 1e9):
        assert not c.check_prefetch_progress("r", now)
    c.complete(ts[-1])
    assert c.check_prefetch_progress("r", 11.0)
    assert c.counters.prefetch_completed == 1 and c.counters.prefetch_terminated == 0
    check(c)


def test_wait_complete_with_an_empty_hit_is_revoked_at_the_query():
    c = storage_cache(prefetch_policy="wait_complete")
    c.prefetch("r", c.root, KEYS, 0.0)
    assert c.prefetch_query("r") == 0
    assert c.counters.prefetch_revoked == 1 and "r" not in c.ongoing_prefetch
    assert c.check_prefetch_progress("r", 0.0)


@pytest.mark.parametrize(
    ("semantics", "expected"), [("2025", 1.0 + 0.25 * 32 * P / 1024), ("2026", 2.0 + 0.1 * 32 * P / 1024)]
)
def test_timeout_formula_and_boundary(semantics, expected):
    c, op, ts = started("timeout", semantics=semantics)
    assert c.prefetch_timeout(op) == pytest.approx(expected)
    c.complete(ts[0])
    assert not c.check_prefetch_progress("r", 10.0 + expected - 1e-6)  # elapsed must exceed it
    assert c.check_prefetch_progress("r", 10.0 + expected + 1e-6)
    assert c.counters.prefetch_terminated == 1 and c.counters.prefetch_inserted_pages == 8
    check(c)


def test_timeout_completes_early_when_every_page_arrived():
    c, _op, ts = started("timeout")
    for t in ts:
        c.complete(t)
    assert c.check_prefetch_progress("r", 10.0)


def test_timeout_function():
    assert prefetch_timeout_s(0, 2.0, 0.1, 30.0) == 2.0  # before the query returns: base
    assert prefetch_timeout_s(1024, 2.0, 0.1, 30.0) == pytest.approx(2.1)
    assert prefetch_timeout_s(10**7, 2.0, 0.1, 30.0) == 30.0  # 2026 caps at max
    assert prefetch_timeout_s(10**7, 1.0, 0.25, None) == pytest.approx(1.0 + 0.25 * 10**7 / 1024)
    # Monotone in hit pages.
    ts = [prefetch_timeout_s(n * 64, 2.0, 0.1, 30.0) for n in range(0, 10000, 37)]
    assert ts == sorted(ts)


def test_timeout_settings_override_the_era_defaults():
    c, op, _ts = started(
        "timeout", prefetch_timeout_base_s=5.0, prefetch_timeout_per_ki_token_s=1.0, prefetch_timeout_max_s=5.2
    )
    assert c.prefetch_timeout(op) == pytest.approx(5.2)


# ----------------------------------------------------------------------------- terminate, revoke


def test_terminate_is_idempotent():
    c, op, ts = started("best_effort")
    c.complete(ts[0])
    assert c.terminate_prefetch(op) == 8
    state = (c.host.available(), c.prefetch_occupied_pages, dict(c.counters.as_dict()))
    assert c.terminate_prefetch(op) == 0
    assert c.check_prefetch_progress("r", 99.0)
    c.release_prefetch("r")
    assert (c.host.available(), c.prefetch_occupied_pages, c.counters.as_dict()) == state
    check(c)


def test_revoke_releases_the_anchor_and_every_reserved_page():
    c = storage_cache(semantics="2025")
    put(c, [1, 2])
    settle(c)
    anchor = node_at(c, [1, 2])
    parent_hash = anchor.hashes[-1]
    store(c, KEYS[:4], parent_hash)  # below the 16-page threshold
    c.prefetch("r", anchor, KEYS, 0.0)
    assert anchor.host_ref == 1 and c.host.used() == 2 + 40
    assert c.prefetch_query("r") == 0
    assert anchor.host_ref == 0 and c.host.used() == 2 and c.prefetch_occupied_pages == 0
    assert c.counters.prefetch_revoked == 1
    check(c)


@pytest.mark.parametrize(("pin", "counter"), [(HOST_PIN, "host_ref"), (LOCK_PIN, "lock_ref"), (NO_PIN, None)])
def test_each_anchor_pin_holds_and_gives_back_what_it_guards(pin, counter):
    """A pin raises the one count it guards on the anchor (host pin: host_ref, device lock: lock_ref,
    the root's: none), ``held`` reads that count, and release puts every count back."""
    c = storage_cache()
    put(c, [1, 2])
    settle(c)
    node = node_at(c, [1, 2])
    before = (node.host_ref, node.lock_ref)
    pin.hold(c, node)
    raised = {name for name, was in zip(("host_ref", "lock_ref"), before) if getattr(node, name) != was}
    assert raised == ({counter} if counter else set())
    assert pin.held(node)
    pin.release(c, node)
    assert (node.host_ref, node.lock_ref) == before
    assert pin.held(node) == (counter is None)
    check(c)


def test_abort_revokes_and_late_batches_are_ignored():
    c, _op, ts = started("wait_complete")
    c.complete(ts[0])
    c.release_prefetch("r")
    assert c.host.used() == 0 and c.prefetch_occupied_pages == 0
    for t in ts[1:]:
        c.complete(t)
    assert c.root.children == {} and c.counters.prefetch_inserted_pages == 0
    check(c)


def test_a_cache_mode_prefetch_never_starts_below_a_node_without_host_copy():
    """SGLang's scheduler issues a cache-mode prefetch only when the match ends at the root or on a
    host-backed node (``_prefetch_kvcache``), under every write policy: under write_back a fresh node
    is D-only, so nothing starts and nothing is pinned. Its storage pages stay where they are."""
    c = storage_cache(write_policy="write_back")
    put(c, [1, 2])
    anchor = node_at(c, [1, 2])
    store(c, KEYS[:16], anchor.hashes[-1])
    assert anchor.state() == "D"
    assert c.prefetch("r", anchor, KEYS[:16], 0.0) is None
    assert anchor.lock_ref == 0 and anchor.host_ref == 0 and c.prefetch_occupied_pages == 0
    assert c.counters.prefetch_unbacked_anchor == 1 and c.counters.prefetch_issued == 0
    check(c)


def test_a_buffer_only_prefetch_pins_its_device_anchor_with_a_lock():
    """buffer_only backs nothing up to host, so the anchor is a device node: held by a device lock
    until the prefetch ends."""
    c = storage_cache(host_memory_mode="buffer_only")
    put(c, [1, 2])
    anchor = node_at(c, [1, 2])
    assert anchor.host_value is None
    assert c.prefetch("r", anchor, KEYS[:16], 0.0) is not None
    assert anchor.lock_ref == 1 and anchor.host_ref == 0
    check(c)
    c.release_prefetch("r")
    assert anchor.lock_ref == 0
    check(c)


# ---------------------------------------------------------- host room for a storage hit


def three_host_only_copies(semantics: str):
    """Page size 1, device 4, host 8: A, B, C (2 pages each, written back in that order) are H-only,
    2 host pages free, and a 4-page run X sits in storage below the root. (A host larger than the
    device keeps the 2025 capacity formula, 0.8 x (host - device), above zero.)"""
    c = new_cache(
        page_size=1,
        device_pages=4,
        host_pages=8,
        write_policy="write_back",
        storage=True,
        prefetch_threshold_tokens=1,
        prefetch_policy="wait_complete",
        semantics=semantics,
    )
    for keys in ([1, 2], [3, 4], [5, 6]):
        put(c, keys)
        assert c.evict(2) == 2
        c.drain()
    assert c.host.available() == 2
    c.storage.put(chain_hashes(None, [7, 8, 9, 10]))
    return c


def test_a_storage_hit_short_of_host_room_evicts_its_whole_length():
    """SGLang 0.5.23 (``HybridCacheController.allocate_storage_hit``) calls ``evict_host`` with the
    whole hit when the host is short, not the shortfall: a 4-page hit with 2 pages free evicts A and
    B (4 pages, LRU), leaving C and 6 free pages; the hit takes 4 of them. A shortfall eviction
    would have evicted A only."""
    c = three_host_only_copies("2026")
    assert c.prefetch("x", c.root, [7, 8, 9, 10], 0.0) is not None
    assert c.prefetch_query("x") == 4
    assert 1 not in c.root.children and 3 not in c.root.children
    assert node_at(c, [5, 6]).state() == "H"
    assert c.host.available() == 2 and c.counters.host_evicted_pages == 4
    settle(c)


@pytest.mark.parametrize(("semantics", "fetched"), [("2026", 6), ("2025", 0)])
def test_a_partial_storage_hit_only_where_the_flow_allows_it(semantics, fetched):
    """A 10-page run in storage, host 8 with A, B, C H-only: evicting 10 frees all 6, 8 pages free,
    still short. 0.5.23 (after_hit) takes what is free when it reaches the threshold (``allow_partial``):
    8 pages; 0.5.2 (prealloc) gave up and issued nothing."""
    c = three_host_only_copies(semantics)
    keys = list(range(20, 30))
    c.storage.put(chain_hashes(None, keys))
    op = c.prefetch("y", c.root, keys, 0.0)
    if semantics == "2026":
        assert c.prefetch_query("y") == 8
        assert c.counters.failed_host_allocations == 1 and c.counters.host_evicted_pages == 6
    else:
        assert op is None and c.counters.failed_host_allocations == 1
    settle(c)
