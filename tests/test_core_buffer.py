"""Host memory mode buffer_only: host is a staging buffer between GPU and storage (reference 5.6;
invariants 5 and 22)."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import new_cache, node_at, put, settle

from hicache_sim.core import ConfigError, TransferKind, check
from hicache_sim.core.policies import HOST_MEMORY_MODES
from hicache_sim.core.tree import chain_hashes
from hicache_sim.scenario import build_scenario, resolve

P = 16


def buffer_cache(**kw):
    kw.setdefault("device_pages", 32)
    kw.setdefault("host_pages", 10)
    return new_cache(page_size=P, storage=True, host_memory_mode="buffer_only", **kw)


def flush_all(c):
    """Stage and complete writes until the queue is empty (the scheduler's ticks)."""
    for _ in range(100):
        c.flush_pending_writes()
        c.drain()
        if not c.buffer_queue:
            break
    c.take_transfers()


def test_a_node_never_gets_a_host_copy_and_device_eviction_deletes():
    c = buffer_cache()
    put(c, [1, 2, 3])
    put(c, [1, 2, 3, 4])
    flush_all(c)
    assert all(n.host_value is None for n in c.iter_nodes())
    assert c.evict(100) == 4
    assert c.root.children == {} and c.counters.device_deleted_pages == 4
    assert c.host.used() == 0
    check(c)


def test_write_path_intent_stage_store():
    c = buffer_cache()
    put(c, [1, 2, 3])
    node = node_at(c, [1, 2, 3])
    assert len(c.buffer_queue) == 1 and c.counters.buffer_intents == 1
    assert c.take_transfers() == [] and node.lock_ref == 0  # unpinned while queued
    assert c.flush_pending_writes() == 3
    (stage,) = c.take_transfers()
    assert stage.kind is TransferKind.D2H and stage.reason == "buffer_stage"
    assert stage.device_pages == node.value and node.lock_ref == 1
    assert c.host.used() == 3 and c.buffer_staged_pages == 3
    check(c)
    c.complete(stage)
    (store,) = c.take_transfers()
    assert store.kind is TransferKind.H2S and store.page_hashes == node.hashes and node.lock_ref == 0
    assert len(c.storage) == 0
    c.complete(store)
    assert all(h in c.storage for h in node.hashes)
    assert c.host.used() == 0 and c.buffer_staged_pages == 0  # staging freed at the storage ack
    assert node.host_value is None
    check(c)


def test_already_durable_nodes_are_not_written_again():
    c = buffer_cache()
    put(c, [1, 2, 3])
    flush_all(c)
    put(c, [1, 2, 3])
    assert not c.buffer_queue


def test_live_window_limits_staging_but_always_admits_the_head():
    c = buffer_cache(host_pages=10)  # live window max(2, 10 - 0 - 1) = 9 pages
    for k in (10, 20, 30):
        put(c, [k, k + 1, k + 2, k + 3])
    assert c.flush_pending_writes() == 8  # 4 + 4; the third would exceed 9
    assert len(c.buffer_queue) == 1
    settle(c)
    assert c.flush_pending_writes() == 4
    settle(c)
    assert c.host.used() == 0


def test_prefetch_in_flight_shrinks_the_write_window():
    c = buffer_cache(host_pages=10)
    c.prefetch_occupied_pages = 8  # as if loads were in flight: window max(2, 10 - 8 - 1) = 2
    for k in (10, 20):
        put(c, [k, k + 1, k + 2, k + 3])
    assert c.flush_pending_writes() == 4  # the head item goes even though it exceeds the window
    assert len(c.buffer_queue) == 1
    c.prefetch_occupied_pages = 0


def test_one_intent_per_node_while_its_write_is_queued_or_in_flight():
    c = buffer_cache()
    put(c, [1, 2, 3])
    put(c, [1, 2, 3])
    assert len(c.buffer_queue) == 1
    c.flush_pending_writes()
    put(c, [1, 2, 3])  # staged, not yet durable
    assert not c.buffer_queue and c.counters.buffer_intents == 1
    flush_all(c)
    assert c.counters.storage_backups == 1


def test_stale_intents_are_dropped():
    c = buffer_cache()
    put(c, [1, 2])
    put(c, [1, 2, 3])
    assert len(c.buffer_queue) == 2
    c.evict(100)  # both nodes deleted before the flush
    assert c.flush_pending_writes() == 0
    assert not c.buffer_queue and c.counters.buffer_intents_dropped == 2
    assert c.buffer_backlog_pages == 0
    check(c)


def test_a_dropped_intent_cascades_to_its_queued_descendants():
    c = buffer_cache()
    put(c, [1, 2, 3, 4])
    put(c, [1, 2, 3, 4, 5])  # covered: its parent's write is queued
    assert len(c.buffer_queue) == 2
    c.match_prefix([1, 2, 9])  # splits the parent: its intent is stale
    assert c.flush_pending_writes() == 0
    # The child's parent is neither durable nor being written: writing it would leave a hole.
    assert not c.buffer_queue and c.counters.buffer_intents_dropped == 2 and len(c.storage) == 0
    check(c)


def test_a_child_whose_parent_write_was_dropped_is_dropped_too():
    c = buffer_cache(host_pages=4)
    put(c, [1, 2, 3, 4, 5, 6])  # oversize for a 4-page host: dropped
    put(c, [1, 2, 3, 4, 5, 6, 7])  # the parent again (dropped), then the child: not covered
    assert not c.buffer_queue and c.counters.buffer_intents_dropped == 3


def test_an_intent_larger_than_the_host_never_blocks_the_queue():
    c = buffer_cache(host_pages=4)
    put(c, [1, 2, 3, 4, 5, 6])  # 6 pages can never be staged in a 4-page host
    put(c, [9])
    flush_all(c)
    assert not c.buffer_queue
    assert chain_hashes(None, [9])[0] in c.storage
    assert c.counters.buffer_intents_dropped == 1


def test_write_backlog_is_capped_at_twice_the_device_pool():
    c = buffer_cache(device_pages=4, host_pages=4)  # at most 8 pages of queued intents
    for k in range(5):
        put(c, [100 + 2 * k, 101 + 2 * k])  # no flush: evicted nodes' intents stay queued (stale)
    assert c.buffer_backlog_pages == 8 and c.counters.buffer_intents_dropped == 1
    flush_all(c)
    assert c.buffer_backlog_pages == 0 and c.host.used() == 0
    check(c)


def staged_prefetch():
    """A buffer_only cache whose request "r" has 20 prefetched pages parked (all in storage)."""
    c = buffer_cache(host_pages=40)
    keys = list(range(100, 120))
    c.storage.put(chain_hashes(None, keys))
    c.prefetch("r", c.root, keys, 0.0)
    c.prefetch_query("r")
    c.drain()
    c.check_prefetch_progress("r", 100.0)
    return c, keys


def test_staged_prefetch_is_consumed_at_admission():
    c = buffer_cache(host_pages=40)
    keys = list(range(100, 120))
    c.storage.put(chain_hashes(None, keys))
    c.prefetch("r", c.root, keys, 0.0)
    assert c.prefetch_query("r") == 20
    c.drain()
    c.take_transfers()
    assert c.check_prefetch_progress("r", 100.0)
    # Parked in host bounce pages: no tree node, no host copy anywhere.
    assert "r" in c.staged_prefetch and c.root.children == {} and c.host.used() == 20
    check(c)
    st = c.begin_request("r", keys, 20)
    assert st.storage_hit == 20 and st.device_hit == 0 and len(st.pages) == 20
    (load,) = c.take_transfers()
    assert load.kind is TransferKind.H2D and load.reason == "buffer_load"
    assert c.match_prefix(keys).device_pages == st.pages
    c.complete(load)
    assert c.host.used() == 0
    c.finish_request(st)
    flush_all(c)
    assert c.host.used() == 0
    check(c)


def test_staged_prefetch_of_an_aborted_request_is_freed():
    c, _ = staged_prefetch()
    c.release_staged_prefetch("r")
    assert c.host.used() == 0 and not c.staged_prefetch
    check(c)


def test_staged_prefetch_that_no_longer_fits_the_match_is_dropped():
    c, keys = staged_prefetch()
    put(c, keys[:4])  # meanwhile the request's match moved below the anchor
    flush_all(c)
    st = c.begin_request("r", keys, 20)
    assert st.storage_hit == 0 and st.device_hit == 4 and c.host.used() == 0
    c.abort_request(st)
    check(c)


# ---------------------------------------------------------------- write_back in buffer_only


@pytest.mark.parametrize(
    ("mode", "runs", "noted"), [("buffer_only", "write_through", True), ("cache", "write_back", False)]
)
def test_buffer_only_runs_write_back_as_write_through_with_a_note(mode, runs, noted):
    """SGLang 0.5.23 accepts ``--hicache-write-policy write_back`` with buffer_only and resolves it to
    write_through at start-up (``validate_hicache_host_memory_mode``); a scenario does the same and
    says so. In cache mode write_back stays."""
    data = {"cache": {"host_memory_mode": mode, "write_policy": "write_back", "storage_backend": "file"}}
    r = resolve(build_scenario(data, "s"))
    assert r.cache.write_policy == runs
    assert any("SGLang runs write_through in buffer_only mode" in w for w in r.warnings) is noted


def test_the_core_takes_only_what_the_server_runs():
    """The resolution is the scenario's (the server's start-up); a core config asking buffer_only to
    write back is a caller's mistake, named."""
    with pytest.raises(ConfigError, match="buffer_only runs write_back as write_through"):
        new_cache(host_pages=8, storage=True, host_memory_mode="buffer_only", write_policy="write_back")


@pytest.mark.parametrize(("mode", "fetched"), [("buffer_only", 0), ("cache", 16)])
def test_a_buffer_only_storage_hit_is_whole_or_nothing(mode, fetched):
    """A 20-page storage hit with 16 host pages: cache mode takes the 16 free pages (0.5.23's
    ``allow_partial``, 16 pages is the threshold); the buffer pipeline asks for the whole hit and,
    short of it, fetches nothing."""
    c = new_cache(page_size=P, device_pages=64, host_pages=16, storage=True, host_memory_mode=mode)
    keys = list(range(100, 120))
    c.storage.put(chain_hashes(None, keys))
    assert c.prefetch("r", c.root, keys, 0.0) is not None
    assert c.prefetch_query("r") == fetched
    c.drain()
    c.take_transfers()
    check(c)


# ---------------------------------------------------------------- the mode as an object


@pytest.fixture
def staging_clone():
    """buffer_only's attributes registered under another name (taken out again afterwards)."""
    name = "staging_clone"
    HOST_MEMORY_MODES.add(name, dataclasses.replace(HOST_MEMORY_MODES.get("buffer_only"), name=name))
    yield name
    del HOST_MEMORY_MODES._items[name]


def _staging_life(mode: str) -> tuple[dict, list[str], int]:
    """Writes staged and stored, an eviction, a whole-or-nothing storage hit, a parked prefetch consumed
    at admission: the counters, the transfers' reasons and the prefetch capacity of one run in ``mode``."""
    c = new_cache(page_size=P, device_pages=32, host_pages=20, storage=True, host_memory_mode=mode)
    reasons: list[str] = []
    put(c, [1, 2, 3])
    put(c, [1, 2, 3, 4])
    for _ in range(10):
        c.flush_pending_writes()
        for t in c.take_transfers():
            reasons.append(t.reason)
            c.complete(t)
    c.evict(100)
    keys = list(range(100, 124))  # 24 pages with 20 host pages: the buffer asks for all or none
    c.storage.put(chain_hashes(None, keys))
    c.prefetch("whole", c.root, keys, 0.0)
    c.prefetch_query("whole")
    c.release_prefetch("whole")
    c.prefetch("r", c.root, keys[:16], 0.0)
    c.prefetch_query("r")
    for t in c.take_transfers():
        reasons.append(t.reason)
        c.complete(t)
    c.check_prefetch_progress("r", 100.0)
    st = c.begin_request("r", keys[:16], 16)
    for t in c.take_transfers():
        reasons.append(t.reason)
        c.complete(t)
    c.abort_request(st)
    check(c)
    return c.counters.as_dict(), reasons, c.prefetch_capacity_limit_pages()


def test_the_core_reads_the_host_memory_mode_by_its_attributes_not_its_name(staging_clone):
    """A mode with buffer_only's attributes under another name runs exactly as buffer_only (writes
    staged, eviction deletes, whole-or-nothing storage hits, prefetches parked until admission, the
    2026 buffer capacity formula, write_back refused), and differently from cache mode."""
    clone, buffer = _staging_life(staging_clone), _staging_life("buffer_only")
    assert clone == buffer
    assert buffer != _staging_life("cache")
    assert "buffer_stage" in buffer[1] and "buffer_load" in buffer[1]
    with pytest.raises(ConfigError, match=f"{staging_clone} runs write_back as write_through"):
        new_cache(host_pages=8, storage=True, host_memory_mode=staging_clone, write_policy="write_back")
