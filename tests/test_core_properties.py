"""Property-based tests: random operation sequences on random small configurations, with ``check()``
after every step, page conservation on both pools, and liveness once everything is released
(reference section 8). Every write policy x host-eviction rule x granularity x semantics, host
smaller and larger than the device, cache and buffer_only host memory."""

from __future__ import annotations

import math
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hicache_sim.core import (
    EVICTION_STRATEGIES,
    PREFETCH_STOP_POLICIES,
    SEMANTICS,
    CacheConfig,
    HiCache,
    check,
)
from hicache_sim.core.policies import (
    EVICTION_GRANULARITIES,
    HOST_EVICTION_RULES,
    HOST_MEMORY_MODES,
    WRITE_POLICIES,
)
from hicache_sim.core.tree import chain_hashes
from hicache_sim.instant import run_instant
from hicache_sim.workloads import Request

# CI runs the same 600 derandomised examples every time; `HYPOTHESIS_PROFILE=deep python -m pytest -q
# tests/test_core_properties.py` draws 20,000 fresh ones per test (minutes), which finds rare states the
# fixed set misses. Failures it finds become hand-built regression cases (test_core_regressions.py).
# The random-operations property splits its budget over the (write policy, host rule) pairs below.
_COMMON = {
    "deadline": None,
    "database": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}
settings.register_profile("ci", max_examples=600, derandomize=True, **_COMMON)
settings.register_profile("deep", max_examples=20_000, derandomize=False, **_COMMON)
SETTINGS = settings.get_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
# Every (write policy, host rule) pair gets its own share of the examples: drawn jointly, with the
# semantics, host size and mode on top, a pair whose bugs need all of them at once (boundary under
# write_back, 2026, a host tier) came up in 7 of the 600 fixed examples, too few to reach its states.
PAIRS = [(w, h) for w in WRITE_POLICIES.names() for h in HOST_EVICTION_RULES.names()]
PAIR_SETTINGS = settings(SETTINGS, max_examples=max(1, SETTINGS.max_examples // len(PAIRS)))


@st.composite
def configs(draw, write_policy: str | None = None, host_rule: str | None = None):
    # Every axis is drawn from its registry: a new policy, rule, mode or era is covered the day it lands.
    # The tests fix the write policy and host rule (PAIRS): their interactions need each pair reached.
    can_buffer = write_policy is None or not WRITE_POLICIES.get(write_policy).backup_at_eviction
    buffer_only = can_buffer and draw(st.booleans()) and draw(st.booleans())  # a quarter of the runs
    if write_policy is None:
        write_policy = draw(
            st.sampled_from(
                [n for n in WRITE_POLICIES.names() if not (buffer_only and WRITE_POLICIES.get(n).backup_at_eviction)]
            )
        )
    device = draw(st.integers(4, 24))
    host_kind = draw(st.sampled_from(["none", "smaller", "larger"] if not buffer_only else ["smaller", "larger"]))
    host = {"none": 0, "smaller": draw(st.integers(1, device)), "larger": draw(st.integers(device + 1, 3 * device))}[
        host_kind
    ]
    page_size = draw(st.sampled_from([1, 4]))
    policy = draw(st.sampled_from(EVICTION_STRATEGIES.names()))
    # The strategy's own knobs (slru's protected_threshold, tlru's token threshold and estimate).
    policy_config = {k: draw(st.integers(0, 12)) for k in EVICTION_STRATEGIES.get(policy).config_keys}
    return CacheConfig(
        page_size=page_size,
        device_pages=device,
        host_pages=host,
        write_policy=write_policy,
        host_eviction=host_rule or draw(st.sampled_from(HOST_EVICTION_RULES.names())),
        host_memory_mode="buffer_only" if buffer_only else "cache",
        eviction_policy=policy,
        eviction_policy_config=policy_config,
        eviction_granularity=draw(st.sampled_from(list(EVICTION_GRANULARITIES))),
        semantics=draw(st.sampled_from(SEMANTICS.names())),
        storage=buffer_only or draw(st.booleans()),
        storage_batch_pages=draw(st.sampled_from([1, 2, 128])),
        prefetch_policy=draw(st.sampled_from(PREFETCH_STOP_POLICIES.names())),
        prefetch_threshold_tokens=page_size * draw(st.integers(1, 3)),
        prefetch_timeout_base_s=1.0,
        load_back_threshold_tokens=draw(st.sampled_from([1, 10])),
        strict=True,
    )


sequences = st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=8), min_size=1, max_size=6)
OPS = (
    "request",
    "request",
    "request",
    "finish",
    "abort",
    "evict",
    "evict",
    # Host eviction and acks three and two times over: the states a host rule can break (a tracked
    # D+H node, loaded back or re-attached, above an H-only child, then a partial host eviction)
    # need a loaded chain acknowledged and then the host pressed before anything else moves it.
    "evict_host",
    "evict_host",
    "evict_host",
    "lock",
    "unlock",
    "pin",
    "pin",
    "unpin",
    "load_back",
    "load_back",
    "prefetch",
    "prefetch",
    "query",
    "progress",
    "progress",
    "release",
    "complete",
    "complete",
    "complete",
    "drain",
    "drain",
    "flush",
    "store",
    "store",
)
ops_lists = st.lists(
    st.tuples(st.integers(0, len(OPS) - 1), st.integers(0, 999), st.integers(0, 999)),
    min_size=40,
    max_size=80,  # fewer ops rarely reach those states
)


class Driver:
    """Applies decoded operations to one cache and checks it after each."""

    def __init__(self, config: CacheConfig, seqs: list[list[int]]) -> None:
        self.c = HiCache(config)
        self.seqs = seqs
        self.running = []  # RequestState of admitted, unfinished requests
        self.locked = []  # nodes locked by the test
        self.pinned = []  # nodes host-pinned by the test
        self.prefetching = []  # request ids with a prefetch issued
        self.n = 0
        self.now = 0.0

    def keys(self, a: int, b: int) -> list[int]:
        seq = self.seqs[a % len(self.seqs)]
        return seq[: 1 + b % len(seq)]

    def held(self) -> list[int]:
        return [p for s in self.running for p in s.pages[s.cached :]]

    # One method per operation; a and b are raw draws, decoded modulo the choices at hand.
    def op_request(self, a, b):
        c = self.c
        keys = self.keys(a, b)
        self.n += 1
        rid = (
            f"r{self.n}"
            if b % 3
            else (self.prefetching[a % len(self.prefetching)] if self.prefetching else f"r{self.n}")
        )
        if rid in self.prefetching:
            if not c.check_prefetch_progress(rid, self.now):
                return
            self.prefetching.remove(rid)
        limit = len(keys) - (b % 2)
        s = c.begin_request(rid, keys, limit)
        if b % 5:
            c.load_host_hit(s, mem_quota_pages=None if b % 7 else a % 8)
        if not c.extend_request(s, len(keys) - len(s.pages)):
            c.abort_request(s)
            return
        chunk = 1 + a % 3
        for end in range(len(s.pages) + chunk, len(keys), chunk):
            if a % 4 == 0:
                c.checkpoint_request(s, end)
        if b % 4 == 0:
            self.running.append(s)
        else:
            c.finish_request(s)
            if a % 3:
                c.drain(self.now)  # as the scheduler's next check_hicache_events would

    def op_finish(self, a, b):
        if self.running:
            self.c.finish_request(self.running.pop(a % len(self.running)))

    def op_abort(self, a, b):
        if self.running:
            self.c.abort_request(self.running.pop(a % len(self.running)))

    def op_evict(self, a, b):
        c = self.c
        before = c.evictable_pages
        got = c.evict(1 + a % 10)
        assert got >= 0
        if c.config.write_policy != "write_back" and not c.host_rule.demotes:
            assert got == before - c.evictable_pages  # invariant 13: returned == decrease of evictable

    def op_evict_host(self, a, b):
        self.c.evict_host(1 + a % 10)

    def op_lock(self, a, b):
        nodes = [n for n in self.c.iter_nodes() if n.value is not None]
        if nodes:
            node = nodes[a % len(nodes)]
            self.c.inc_lock_ref(node)
            self.locked.append(node)

    def op_unlock(self, a, b):
        if self.locked:
            self.c.dec_lock_ref(self.locked.pop(a % len(self.locked)))

    def op_pin(self, a, b):
        nodes = [n for n in self.c.iter_nodes() if n.host_value is not None and (b % 2 or n.value is None)]
        if nodes:
            node = nodes[a % len(nodes)]
            self.c.protect_host(node)
            self.pinned.append(node)

    def op_unpin(self, a, b):
        if self.pinned:
            self.c.release_host(self.pinned.pop(a % len(self.pinned)))

    def op_load_back(self, a, b):
        nodes = [n for n in self.c.iter_nodes() if n.value is None]
        if nodes:
            node = nodes[a % len(nodes)]
            last = self.c.load_back(node, None if b % 3 else b % 12)
            assert last is None or last is node

    def op_prefetch(self, a, b):
        c = self.c
        if c.storage is None:
            return
        keys = self.keys(a, b)
        m = c.match_prefix(keys)
        self.n += 1
        rid = f"r{self.n}"
        if c.prefetch(rid, m.last_node, keys[m.device_hit_pages + m.host_hit_pages :], self.now) is not None:
            self.prefetching.append(rid)
            if b % 2:
                c.prefetch_query(rid)

    def op_query(self, a, b):
        if self.prefetching:
            self.c.prefetch_query(self.prefetching[a % len(self.prefetching)])

    def op_progress(self, a, b):
        if self.prefetching:
            self.now += (b % 40) / 10
            rid = self.prefetching[a % len(self.prefetching)]
            if self.c.check_prefetch_progress(rid, self.now) and self.c.config.host_memory_mode == "cache":
                self.prefetching.remove(rid)

    def op_release(self, a, b):
        if self.prefetching:
            rid = self.prefetching.pop(a % len(self.prefetching))
            self.c.release_prefetch(rid)
            self.c.release_staged_prefetch(rid)

    def op_complete(self, a, b):
        if self.c.inflight:
            ts = list(self.c.inflight.values())
            self.c.complete(ts[a % len(ts)], self.now)  # acknowledgements may arrive out of order

    def op_drain(self, a, b):
        self.c.drain(self.now)

    def op_flush(self, a, b):
        self.c.flush_pending_writes()

    def op_store(self, a, b):
        if self.c.storage is not None:
            self.c.storage.put(chain_hashes(None, self.keys(a, b)))

    # ------------------------------------------------------------------------------------ checks

    def check(self) -> None:
        c = self.c
        check(c, held_device_pages=self.held())
        # Page conservation, counted independently of check(): every page is free or has one owner.
        nodes = c.iter_nodes()
        dev = sum(len(n.value) for n in nodes if n.value is not None) + len(self.held())
        assert dev + c.device.available() == c.device.size
        host = sum(len(n.host_value) for n in nodes if n.host_value is not None)
        host += sum(len(op.host_pages or []) for op in c.ongoing_prefetch.values())
        host += sum(len(p) for _n, p, _h in c._buffer_writes.values())
        host += sum(len(sp.host_pages) for sp in c.staged_prefetch.values())
        host += sum(len(p) for p in c._buffer_loads.values())
        assert host + c.host.available() == c.host.size
        # Every candidate has a live heap entry (a candidate without one could never be evicted).
        for heap, cands in ((c._dev_heap, c._dev_cands), (c._host_heap, c._host_cands)):
            live = {node for k, _i, _p, node in heap if cands.get(node) == k}
            assert live == set(cands), "a candidate lost its heap entry"
        assert c.prefetch_occupied_pages >= 0
        # The residency counters the mutators keep agree with a walk of the tree.
        assert c.residency() == c.residency_walk()

    def teardown(self) -> None:
        """Release everything, complete everything; then the cache must be able to empty itself."""
        c = self.c
        for s in self.running:
            c.finish_request(s)
        self.running.clear()
        for node in self.locked:
            c.dec_lock_ref(node)
        for node in self.pinned:
            c.release_host(node)
        self.locked.clear()
        self.pinned.clear()
        for rid in self.prefetching:
            c.release_prefetch(rid)
            c.release_staged_prefetch(rid)
        self.prefetching.clear()
        for _ in range(50):
            c.drain(self.now)
            c.flush_pending_writes()
            if not c.inflight and not c.buffer_queue:
                break
        self.check()
        nodes = c.iter_nodes()
        assert all(n.lock_ref == 0 and n.host_ref == 0 for n in nodes)
        assert c.protected_pages == 0
        assert not c.buffer_queue and c.buffer_staged_pages == 0 and not c.staged_prefetch
        if c.host_mode.stages:
            assert c.host.available() == c.host.size  # invariant 22: host usage returns to 0 when idle
        # Liveness: with nothing pinned, every device page and then every host page can be reclaimed.
        for _ in range(20):  # an eviction may back a parent up first; that copy holds it until its ack
            if not c.evict(math.inf) and not c.drain():
                break
        assert c.device.available() == c.device.size
        c.evict_host(math.inf)
        assert c.host.available() == c.host.size
        assert c.root.children == {}
        self.check()


def run(config, seqs, ops) -> Driver:
    d = Driver(config, seqs)
    d.check()
    for code, a, b in ops:
        getattr(d, "op_" + OPS[code])(a, b)
        d.check()
    d.teardown()
    return d


@pytest.mark.parametrize(("write_policy", "host_rule"), PAIRS)
def test_random_operations_keep_every_invariant(write_policy, host_rule):
    _random_operations(write_policy, host_rule)


def _random_operations(write_policy: str, host_rule: str) -> None:
    @PAIR_SETTINGS
    @given(configs(write_policy, host_rule), sequences, ops_lists)
    def body(config, seqs, ops):
        _check_random_operations(config, seqs, ops)

    body()


def _check_random_operations(config, seqs, ops):
    d = run(config, seqs, ops)
    c = d.c
    if config.semantics == "2025" and config.host_pages <= config.device_pages:
        assert c.counters.prefetch_issued == 0  # invariant 18: the 2025 formula disables prefetch
    if config.host_memory_mode == "buffer_only":
        assert c.counters.host_mirror_reclaimed_pages == 0 and c.counters.host_deleted_pages == 0


@SETTINGS
@given(
    configs(),
    sequences,
    st.lists(st.tuples(st.integers(0, 99), st.integers(1, 12), st.integers(0, 3)), min_size=20, max_size=80),
    st.sampled_from([None, 1, 2, 3]),
    st.booleans(),
)
@pytest.mark.slow  # several seconds (issue 30: slow tests marked; CI still runs them)
def test_random_request_streams_in_instant_mode(config, seqs, reqs, chunk_pages, reserve_last_token):
    """Whole request streams (match, load-back, prefetch, chunked checkpoints, finish, with every ack
    drained between requests) on the same random configurations; invariants after every request."""
    requests = []
    for i, (s, n, short) in enumerate(reqs):
        seq = seqs[s % len(seqs)]
        keys = tuple((seq * 2)[: min(n, 2 * len(seq))])
        tokens = len(keys) * config.page_size - min(short, config.page_size - 1)
        requests.append(Request(f"q{i}", float(i), tokens, 1, keys))

    driver = Driver(config, seqs)

    def after(i, cache):
        driver.c = cache
        driver.check()

    res = run_instant(
        config,
        requests,
        chunk_pages=chunk_pages,
        reserve_last_token=reserve_last_token,
        check_invariants=True,
        on_request=after,
    )
    c = res.cache
    for i, r in enumerate(requests):
        hits = res.device_hit[i] + res.host_hit[i] + res.storage_hit[i]
        assert hits <= r.match_limit(config.page_size, reserve_last_token)
    assert c.counters.requests == len(requests)
    if config.semantics == "2025" and config.host_pages <= config.device_pages:
        assert c.counters.prefetch_issued == 0
    driver.c = c
    driver.teardown()


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(
    st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=10), min_size=1, max_size=12),
    st.sampled_from(["node", "page"]),
)
def test_insert_match_round_trip_without_eviction(seqs, granularity):
    """Invariant 12: with room for everything, insert returns the device prefix matched before it, and
    a match returns exactly the pages inserted for that prefix."""
    c = HiCache(CacheConfig(1, 200, 0, eviction_granularity=granularity, strict=True))
    owner: dict[tuple[int, ...], int] = {}  # prefix -> device page holding its last key
    for keys in seqs:
        m = c.match_prefix(keys)
        pages = list(m.device_pages) + c.device.alloc(len(keys) - len(m.device_pages))
        assert c.insert(keys, pages) == len(m.device_pages)
        for i in range(len(keys)):
            owner.setdefault(tuple(keys[: i + 1]), pages[i])
        got = c.match_prefix(keys).device_pages
        assert got == [owner[tuple(keys[: i + 1])] for i in range(len(keys))]
        check(c)
    assert c.device.used() == len(owner)


def test_every_host_memory_mode_is_drawn():
    """configs() draws buffer_only by a coin toss: a new host memory mode needs its own draw there."""
    assert set(HOST_MEMORY_MODES.names()) == {"cache", "buffer_only"}
