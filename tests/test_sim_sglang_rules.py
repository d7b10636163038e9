"""The timed scheduler's retraction and admission rules, case by case, against SGLang's formulas.

Each case is built by hand on a page-size-1 cache (a decoding request needs one new page every step)
and its expected outcome is computed from SGLang's rules:

- ``retract_decode``: sort the running batch by (output tokens, -prompt tokens), descending and
  stable, and pop from the end: fewest output first, then the longest prompt, then the last in batch
  order. Pop at least one, then until the pages the remaining requests need for the next step fit the
  free and evictable pool; keep one. ``new_token_ratio`` becomes
  min(1, (output so far + 20 x remaining) / sum of max_new_tokens) over the remaining requests.
- ``update_running_batch``: a decode batch without retraction lowers the ratio by
  (0.7 - 0.7 x 0.14) / 600, floored at 0.7 x 0.14; the idle loop resets it to 0.7.
- ``PrefillAdder``: a request is admitted when new tokens + min(remaining output, 4096) + one page
  < free + evictable - offset, its prefix locked; the offset holds the running requests' remaining
  output, each clipped at 4096, times the ratio, and for each admitted request one page plus
  min(max_new_tokens, 4096) (its whole output, also when it was retracted with some written).
"""

from __future__ import annotations

import pytest
import simpy
from conftest import new_cache, put, settle
from test_sim_support import FixedCompute

from hicache_sim.sim.engine import Scheduler, SchedulerPolicy
from hicache_sim.sim.metrics import RequestRecord
from hicache_sim.sim.requests import SimRequest
from hicache_sim.workloads import Request

CLIP = 4096
DECAY = (0.7 - 0.7 * 0.14) / 600


class _NoTransport:
    def dispatch(self, transfers) -> None:
        pass


def _sim_request(rid: str, key0: int, prompt: int, out: int, *, generated: int = 0, index: int = 0) -> SimRequest:
    """A request with a ``prompt``-token prompt (one page per token) that wrote ``generated`` tokens."""
    q = Request(rid, 0.0, prompt, out, tuple(range(key0, key0 + prompt)))
    r = SimRequest(q, RequestRecord(q), list(q.page_keys), prompt, index, seq_tokens=prompt + generated)
    r.generated = generated
    return r


def _scheduler(device_pages: int, page_size: int = 1, **policy) -> Scheduler:
    cache = new_cache(page_size=page_size, device_pages=device_pages, host_pages=0)
    return Scheduler(
        simpy.Environment(),
        cache,
        FixedCompute(prefill_s=0.01),
        _NoTransport(),
        SchedulerPolicy(**policy),
        storage_latency_s=0.0,
        on_done=lambda r: None,
    )


def _decoding(s: Scheduler, r: SimRequest) -> SimRequest:
    """``r`` holds one page per token of its sequence and decodes (joins the batch now)."""
    st = s.cache.begin_request(r.req.rid, r.keys, 0)
    assert s.cache.extend_request(st, r.seq_tokens)
    r.st = st
    s.decoding.join(r)
    return r


# ------------------------------------------------------------------------------- retraction


def test_retraction_order_fewest_output_then_longest_prompt_then_last_in_batch():
    # Batch order P, R, S, Q with (output, prompt) P (5, 100), R (2, 300), S (2, 300), Q (2, 100).
    # Sorted descending: P, Q, R, S (R before S: stable); popped from the end: S, R, Q, P.
    # S joined after R but has the lower workload index: the batch order decides, not the index.
    s = _scheduler(device_pages=2000)
    spec = [("P", 5, 100, 0), ("R", 2, 300, 3), ("S", 2, 300, 2), ("Q", 2, 100, 1)]
    for i, (rid, gen, prompt, index) in enumerate(spec):
        _decoding(s, _sim_request(rid, 1000 * (i + 1), prompt, out=50, generated=gen, index=index))
    order = []
    while s.decoding:
        v = s.decoding.victim()
        order.append(v.req.rid)
        s.decoding.leave(v)
    assert order == ["S", "R", "Q", "P"]


def test_retraction_stops_once_the_remaining_requests_next_pages_fit():
    # A (prompt 50, 9 out), B (50, 8), C (1, 3), D (1, 3), each holding one page per prompt token, out
    # 100 each; the pool is full: 4 pages needed, 0 free. Retract D (first; 1 page back, 3 needed),
    # then C (2 free, 2 needed): stop. The ratio: (9 + 8 + 20 x 2) / (100 + 100) = 0.285, not decayed.
    s = _scheduler(device_pages=102)
    for i, (rid, prompt, gen) in enumerate([("A", 50, 9), ("B", 50, 8), ("C", 1, 3), ("D", 1, 3)]):
        r = _sim_request(rid, 1000 * (i + 1), prompt, out=100, generated=gen)
        r.seq_tokens = prompt  # its KV: the prompt only (the output's pages are not the point here)
        _decoding(s, r)
    assert s.cache.device.available() == 0
    step = s._form_decode()
    assert step is not None and step.batch_size == 2
    assert [r.req.rid for r in s.decoding] == ["A", "B"]
    assert s.counters["retractions"] == 2
    assert [r.req.rid for r, _ in s.waiting] == ["D", "C"]  # appended in retraction order
    # SGLang re-prefills origin_input_ids + output_ids: prompt 1 + 3 written tokens each.
    assert [r.seq_tokens for r, _ in s.waiting] == [4, 4]
    assert s.new_token_ratio == pytest.approx((9 + 8 + 20 * 2) / 200, abs=0)
    assert s.cache.device.available() == 0  # the two freed pages went to A's and B's next tokens


def test_one_retraction_when_the_victim_frees_enough():
    # P (prompt 10, 5 out), R (30, 2), S (30, 2), Q (10, 2); 3 pages free, 4 needed. SGLang pops S
    # (32 pages back) and stops: 35 free for 3 needed. (Holding back 20 decode steps per remaining
    # request, 60 pages, would retract R too.)
    s = _scheduler(device_pages=15 + 32 + 32 + 12 + 3)
    for i, (rid, prompt, gen) in enumerate([("P", 10, 5), ("R", 30, 2), ("S", 30, 2), ("Q", 10, 2)]):
        _decoding(s, _sim_request(rid, 1000 * (i + 1), prompt, out=100, generated=gen))
    assert s.cache.device.available() == 3
    s._form_decode()
    assert [r.req.rid for r, _ in s.waiting] == ["S"]
    assert s.new_token_ratio == pytest.approx((5 + 2 + 2 + 20 * 3) / 300, abs=0)


def test_the_ratio_decays_on_a_decode_batch_without_retraction():
    s = _scheduler(device_pages=100)
    _decoding(s, _sim_request("A", 1, 10, out=50))
    for k in range(1, 4):
        step = s._form_decode()
        assert step is not None
        assert s.new_token_ratio == pytest.approx(0.7 - k * DECAY)
        s._after_decode(step)


def test_the_ratio_floor_is_0_14_of_the_initial_ratio():
    pol = SchedulerPolicy()
    assert pol.min_new_token_ratio == pytest.approx(0.098)
    s = _scheduler(device_pages=100)
    _decoding(s, _sim_request("A", 1, 10, out=50))
    s.new_token_ratio = 0.0985
    s._form_decode()
    assert s.new_token_ratio == pytest.approx(0.098)


def test_an_idle_scheduler_resets_the_ratio():
    from test_sim_support import req, resolved

    from hicache_sim.sim import World
    from hicache_sim.workloads.synthetic import Workload

    r = resolved(cache={"device_tokens": 400 * 64, "host_tokens": 800 * 64})
    wl = Workload([req("a", 0.0, range(1, 3), out=50), req("b", 10.0, range(100, 102), out=2)])
    seen = []
    world = World(r, wl, compute=FixedCompute(prefill_s=0.01))
    world.run(observer=lambda w: seen.append(w.scheduler.new_token_ratio))
    # a decodes 49 steps (the ratio falls 49 decays); idle until b arrives: b starts at 0.7 again.
    assert min(seen) == pytest.approx(0.7 - 49 * DECAY)
    assert world.scheduler.new_token_ratio == 0.7


# -------------------------------------------------------------------------------- admission


def _admit(s: Scheduler, *waiting: SimRequest) -> list[bool]:
    """Queue ``waiting`` in order, form one prefill batch; which of them it admitted."""
    for r in waiting:
        s._push_waiting(r, front=False)
    s._form_prefill()
    return [r.st is not None for r in waiting]


@pytest.mark.parametrize(("device_pages", "admitted"), [(3179, True), (3178, False)])
def test_admission_holds_back_the_running_requests_clipped_remaining_output(device_pages, admitted):
    # Running: M1 (prompt 10, wrote 100 of 5000: 4900 to go, clipped to 4096) and M2 (10, 100 of 300:
    # 200 to go); offset 0.7 x (4096 + 200) = 3007.2. W (prompt 100, out 50) needs 100 + 50 + 1 = 151
    # < (D - 20) - 3007.2, i.e. D >= 3179.
    s = _scheduler(device_pages)
    for i, out in enumerate([5000, 300]):
        r = _sim_request(f"M{i}", 1000 * (i + 1), 10, out=out, generated=100)
        r.seq_tokens = 10
        _decoding(s, r)
    assert s.decoding.reserved_tokens() == 4096 + 200 and s.new_token_ratio == 0.7
    assert _admit(s, _sim_request("W", 50_000, 100, out=50)) == [admitted]
    assert s.batch_full != admitted  # refused for memory: no new prefill until something frees pages


@pytest.mark.parametrize(("device_pages", "admitted"), [(297, True), (296, False)])
def test_an_admitted_request_reserves_its_whole_clipped_output_and_a_page(device_pages, admitted):
    # R was retracted after writing 40 of 50 tokens: it re-prefills 100 + 40 tokens, its check holds
    # back its 10 remaining tokens, but once admitted it reserves min(50, 4096) + 1 page. W (prompt 100,
    # out 4) then needs 100 + 4 + 1 = 105 < D - 140 - 51, i.e. D >= 297 (D >= 257 if R reserved 10).
    s = _scheduler(device_pages)
    r = _sim_request("R", 1, 100, out=50, generated=40)
    w = _sim_request("W", 10_000, 100, out=4)
    assert _admit(s, r, w) == [True, admitted]
    assert len(r.st.pages) == 140


@pytest.mark.parametrize(("device_pages", "admitted"), [(106, True), (105, False)])
def test_admission_counts_the_matched_prefix_as_locked(device_pages, admitted):
    # The tree holds K (50 pages, unlocked: evictable). W's prompt is K + 50 new tokens, out 4: 50 + 4 +
    # 1 = 55 must be < free + evictable - K's 50 pages (SGLang re-checks with the prefix locked) = D - 50.
    s = _scheduler(device_pages)
    put(s.cache, list(range(1, 51)))
    assert s.cache.evictable_pages == 50
    w = _sim_request("W", 1, 100, out=4)
    assert _admit(s, w) == [admitted]
    # Refused with nothing admitted and nothing running: SGLang's hierarchical-cache scheduler does not
    # mark the batch full (only when some request can be served).
    assert s.batch_full is False
    if admitted:
        assert w.st.device_hit == 50


@pytest.mark.parametrize(("chunked", "admitted"), [(8192, [True, True, False]), (None, [True, False, False])])
def test_max_prefill_tokens_with_and_without_chunked_prefill(chunked, admitted):
    # max_prefill_tokens 150, three waiting 100-token prompts. With chunked prefill SGLang checks the
    # input budget after each admission (budget_state): 150 - 100 > 0, go on; 50 - 100 <= 0, stop.
    # Without it a further request whose input reaches what is left is refused: 100 >= 50.
    s = _scheduler(1000, max_prefill_tokens=150, chunked_prefill_tokens=chunked)
    reqs = [_sim_request(f"W{i}", 1000 * (i + 1), 100, out=4) for i in range(3)]
    assert _admit(s, *reqs) == admitted


def test_a_chunk_is_cut_at_a_page_boundary():
    # Page 4, chunked_prefill_size 10: a 30-token prompt's first chunk is 10 // 4 x 4 = 8 tokens.
    s = _scheduler(100, page_size=4, chunked_prefill_tokens=10)
    q = Request("L", 0.0, 30, 5, tuple(range(1, 9)))
    r = SimRequest(q, RequestRecord(q), list(q.page_keys), 8, 0, seq_tokens=30)
    s._push_waiting(r, front=False)
    step = s._form_prefill()
    assert [(c.start, c.end, c.final) for c in step.chunks] == [(0, 8, False)]
    assert len(r.st.pages) == 2


def test_kv_tokens_of_a_decode_step_count_each_members_cache_and_current_token():
    # A joins with 10 tokens, B with 30 one step later: the step after that attends to 10 + 2 + 30 + 1.
    s = _scheduler(200)
    a = _decoding(s, _sim_request("A", 1, 10, out=50))
    assert s.decoding.kv_tokens_next() == 11
    s._after_decode(s._form_decode())
    _decoding(s, _sim_request("B", 1000, 30, out=50))
    assert s.decoding.kv_tokens_next() == 12 + 31
    assert s.decoding.generated(a) == 1


def test_without_chunked_prefill_the_input_budget_charges_only_what_is_not_on_host():
    # max_prefill_tokens 150, no chunked prefill. W1 (100 new tokens) leaves 50. W2's 100-token prompt
    # has its first 60 tokens on host only (backed up, then evicted from the device): SGLang charges
    # real_input = 100 - 60 = 40 < 50, so W2 joins the batch (charged its whole 100 it would not: 100 >= 50).
    cache = new_cache(page_size=1, device_pages=1000, host_pages=1000)
    put(cache, list(range(5000, 5060)))
    settle(cache)
    assert cache.evict(60) == 60
    settle(cache)
    s = Scheduler(
        simpy.Environment(),
        cache,
        FixedCompute(prefill_s=0.01),
        _NoTransport(),
        SchedulerPolicy(max_prefill_tokens=150, chunked_prefill_tokens=None),
        storage_latency_s=0.0,
        on_done=lambda r: None,
    )
    w1 = _sim_request("W1", 1, 100, out=4)
    keys = tuple(range(5000, 5060)) + tuple(range(9000, 9040))
    q = Request("W2", 0.0, 100, 4, keys)
    w2 = SimRequest(q, RequestRecord(q), list(keys), 100, 1, seq_tokens=100)
    assert _admit(s, w1, w2) == [True, True]
    assert w2.st.host_hit == 60 and w2.st.device_hit == 0


def test_a_lone_request_that_cannot_grow_is_rejected_not_left_waiting():
    # L decodes alone and holds all 20 pages; its next token needs a 21st. Nothing else to retract and
    # no transfer in flight that could give pages back: SGLang's only way out is to drop it.
    s = _scheduler(device_pages=20)
    r = _decoding(s, _sim_request("L", 1, 20, out=50))
    assert s.cache.device.available() == 0
    assert s._form_decode() is None
    assert r.rec.status == "rejected" and r.st is None
    assert s.counters["rejected_requests"] == 1 and s.counters["retractions"] == 0
    assert len(s.decoding) == 0 and s.cache.device.available() == 20  # its pages came back


def test_a_skipped_prefetch_wakes_the_scheduler_at_its_timeout():
    # 2026 semantics: timeout = 2.0 s + 0.1 s per 1024 hit tokens, capped at 30 s. A prefetch that
    # started at 0.5 s with 2048 hit tokens (page size 1) may stop at 0.5 + 2.0 + 0.2 = 2.7 s; the
    # wake is armed at 1.0 s (when the request was skipped) for that absolute time, once.
    from hicache_sim.core.prefetch_op import PrefetchOp

    s = _scheduler(device_pages=16)
    env = s.env
    env.run(until=1.0)
    s.cache.ongoing_prefetch["R"] = PrefetchOp("R", s.cache.root, "none", [], [], start_time=0.5, hit_pages=2048)
    rang = []
    s.wake = lambda: rang.append(env.now)
    s._wake_at_prefetch_timeout("R")
    s._wake_at_prefetch_timeout("R")  # skipped again before the timeout: no second timer
    env.run()
    assert rang == [pytest.approx(2.7, abs=1e-8)]
