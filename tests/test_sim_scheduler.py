"""The SGLang-like scheduler: retraction, chunked prefill, continuous batching, max running requests,
prefetch gating, output caching and closed-loop multi-turn clients."""

from __future__ import annotations

import itertools

import pytest
from test_sim_support import FixedCompute, req, resolved, scenario, spaced, workload_of

from hicache_sim.core.tree import chain_hashes
from hicache_sim.scenario import resolve
from hicache_sim.sim import World, run_timed
from hicache_sim.sim.metrics import RequestRecord
from hicache_sim.sim.requests import SimRequest
from hicache_sim.workloads.synthetic import Workload


def _rows(res) -> dict[str, dict]:
    return {x["rid"]: x for x in res.requests}


def _retraction_world() -> Workload:
    # L's output exceeds the 4096-token clip SGLang reserves, so admission over-commits the pool and
    # decode runs out of pages once the others grow.
    reqs = [req("L", 0.0, range(1, 2), out=8000), req("S", 0.0, range(100, 101), out=700)]
    reqs += [req(f"W{i}", 0.0, range(1000 * (i + 1), 1000 * (i + 1) + 16), out=1500) for i in range(8)]
    return Workload(reqs)


def test_decode_out_of_pages_retracts_and_the_request_restarts_from_its_prefix():
    r = resolved(cache={"device_tokens": 200 * 64, "host_tokens": 400 * 64})
    wl = _retraction_world()
    res = run_timed(r, wl, check_invariants=True)
    rows = _rows(res)
    assert res.counters["retractions"] >= 1
    assert all(x["status"] == "finished" for x in rows.values())
    retracted = [x for x in rows.values() if x["retractions"]]
    assert retracted and sum(x["retractions"] for x in retracted) == res.counters["retractions"]
    # Each retraction re-admits the request (a second match of its prompt in the core's count).
    assert res.counters["requests"] >= len(wl.requests) + res.counters["retractions"]
    for x in retracted:
        assert x["first_token_s"] < x["finish_s"]  # TTFT is its first token, before the retraction
    # Retracted output is recomputed, not regenerated: decode tokens cover every output token once,
    # less the ones re-prefilled.
    assert res.counters["decode_tokens"] <= sum(q.output_tokens - 1 for q in wl.requests)


def test_chunked_prefill_runs_a_long_prompt_in_budget_sized_chunks():
    r = resolved(cache={"device_tokens": 400 * 64, "host_tokens": 800 * 64})
    compute = FixedCompute(prefill_s=0.1)
    res = run_timed(r, Workload([req("long", 0.0, range(1, 301), out=3)]), compute=compute, check_invariants=True)
    x = _rows(res)["long"]
    assert res.counters["prefill_steps"] == 3  # 19,200 tokens in 8,192-token chunks
    assert res.counters["prefill_tokens"] == 300 * 64
    assert x["ttft_s"] == pytest.approx(3 * compute.prefill_s)
    assert res.counters["decode_steps"] == 2 and res.counters["decode_tokens"] == 2
    assert x["e2e_s"] == pytest.approx(3 * compute.prefill_s + 2 * compute.decode_s)


def test_continuous_batching_decodes_all_running_requests_together():
    r = resolved(cache={"device_tokens": 400 * 64, "host_tokens": 800 * 64})
    compute = FixedCompute(prefill_s=0.01, decode_s=0.001)
    wl = Workload([req(f"q{i}", 0.0, range(100 * i + 1, 100 * i + 9), out=50) for i in range(6)])
    res = run_timed(r, wl, compute=compute)
    assert res.counters["prefill_steps"] == 1  # all six fit one prefill batch
    assert res.counters["decode_steps"] == 49 and res.counters["decode_tokens"] == 6 * 49
    finish = [x["finish_s"] for x in res.requests]
    assert max(finish) == min(finish) == pytest.approx(0.01 + 49 * 0.001)


def test_max_running_requests_caps_the_batch():
    r = resolved(cache={"device_tokens": 400 * 64, "host_tokens": 800 * 64}, scheduler={"max_running_requests": 2})
    wl = Workload([req(f"q{i}", 0.0, range(100 * i + 1, 100 * i + 9), out=20) for i in range(6)])
    peak = [0]

    def watch(world: World) -> None:
        peak[0] = max(peak[0], world.scheduler.running)

    res = World(r, wl, compute=FixedCompute(prefill_s=0.01)).run(observer=watch)
    assert peak[0] == 2
    admits = sorted(x["admit_s"] for x in res.requests)
    assert admits[0] == admits[1] < admits[2]


def test_wait_complete_prefetch_holds_the_request_until_its_storage_read_arrived():
    lc = {
        "kind": "long_context",
        "long_context": {
            "num_documents": 4,
            "queries_per_document": 3,
            "context_length": 4096,
            "question_length": 64,
            "output_length": 16,
        },
    }
    sc = scenario(
        workload=lc,
        cache={
            "device_tokens": 9216,
            "host_tokens": 8192,
            "storage_backend": "local_nvme",
            "prefetch_policy": "wait_complete",
        },
        hardware={"storage": {"read_gbps": 1.0}},
    )
    r = resolve(sc, strict=True)
    res = run_timed(r, spaced(workload_of(sc), 60.0), check_invariants=True)
    served = [x for x in res.requests if x["storage_hit_pages"]]
    assert served
    for x in served:
        read_s = x["storage_hit_pages"] * r.page_bytes / r.storage_read_Bps
        assert x["prefetch_wait_s"] >= read_s + r.storage_latency_s
        assert x["queue_s"] >= x["prefetch_wait_s"]


def test_caching_the_output_lets_the_next_turn_hit_it():
    mt = {
        "kind": "multiturn",
        "multiturn": {
            "num_clients": 4,
            "num_rounds": 3,
            "request_length": 512,
            "output_length": 256,
            "max_parallel": 4,
        },
    }
    hit = {}
    for insert in (True, False):
        sc = scenario(
            workload=mt, cache={"device_tokens": 32768, "host_tokens": 32768}, scheduler={"insert_output": insert}
        )
        res = run_timed(resolve(sc, strict=True), workload_of(sc), check_invariants=True)
        hit[insert] = sum(x["device_hit_tokens"] for x in res.requests)
    assert hit[True] > hit[False] > 0


def test_closed_loop_clients_wait_for_their_answer_and_respect_max_parallel():
    mt = {
        "kind": "multiturn",
        "multiturn": {
            "num_clients": 6,
            "num_rounds": 3,
            "request_length": 256,
            "output_length": 32,
            "request_rate": 100.0,
            "max_parallel": 3,
        },
    }
    sc = scenario(workload=mt, cache={"device_tokens": 16384, "host_tokens": 16384})
    res = run_timed(resolve(sc), workload_of(sc))
    rows = res.requests
    by_client: dict[str, list[dict]] = {}
    for x in rows:
        by_client.setdefault(x["rid"].split("r")[0], []).append(x)
    for turns in by_client.values():
        turns.sort(key=lambda x: int(x["rid"].split("r")[1]))
        for a, b in itertools.pairwise(turns):
            assert b["arrival_s"] >= a["finish_s"]
    for x in rows:  # at each send, fewer than max_parallel others were in flight
        t = x["arrival_s"]
        in_flight = sum(1 for y in rows if y is not x and y["arrival_s"] <= t < y["finish_s"])
        assert in_flight < 3


def test_round_barrier_starts_a_round_after_every_client_finished_the_previous_one():
    mt = {
        "kind": "multiturn",
        "multiturn": {
            "num_clients": 5,
            "num_rounds": 3,
            "request_length": 256,
            "output_length": 32,
            "request_rate": 100.0,
            "max_parallel": 5,
            "round_barrier": True,
        },
    }
    sc = scenario(workload=mt, cache={"device_tokens": 16384, "host_tokens": 16384})
    rows = run_timed(resolve(sc), workload_of(sc)).requests
    for rnd in (1, 2):
        prev_end = max(x["finish_s"] for x in rows if x["rid"].endswith(f"r{rnd - 1}"))
        assert min(x["arrival_s"] for x in rows if x["rid"].endswith(f"r{rnd}")) >= prev_end


def test_a_decoding_request_shares_its_prompt_with_later_requests():
    # SGLang inserts the prompt after the prefill (cache_unfinished_req): B, arriving while A decodes,
    # hits A's prompt on the device although A has not finished.
    r = resolved(cache={"device_tokens": 400 * 64, "host_tokens": 800 * 64})
    compute = FixedCompute(prefill_s=0.01, decode_s=0.01)
    wl = Workload([req("A", 0.0, range(1, 33), out=500), req("B", 0.5, range(1, 33), out=2)])
    rows = _rows(run_timed(r, wl, compute=compute, check_invariants=True))
    assert rows["B"]["arrival_s"] < rows["A"]["finish_s"]
    assert rows["B"]["device_hit_pages"] == 31  # all but the page holding its last token


# ------------------------------------------------------------------ storage re-asks (0.5.23)


def _queued(world, rid: str, keys: list[int]):
    q = req(rid, 0.0, keys)
    r = SimRequest(q, RequestRecord(q), list(keys), len(keys), 0, q.input_tokens)
    world.scheduler._push_waiting(r, front=False)
    return r


def test_a_best_effort_miss_asks_storage_again_after_the_poll_interval_but_never_for_the_queue_head():
    """SGLang 0.5.23 (``StoragePrefetchRetries``): a best_effort prefetch checked before its hit query
    answered ends empty and is a miss poll; the request asks storage again ``poll_interval`` prefill
    passes after the pass that first sees the miss, at most ``max_attempts`` times, and the queue head
    is never held back for it (its re-ask is dropped). Interval 2, attempts 1: H (head) and B both miss
    at pass 0; pass 1 drops H's and schedules B's for pass 3; pass 3 re-asks B; B's second miss is
    past its one attempt and is dropped at the next pass."""
    r = resolved(
        cache={
            "storage_backend": "local_nvme",
            "prefetch_policy": "best_effort",
            "prefetch_retry_poll_interval": 2,
            "prefetch_retry_max_attempts": 1,
        }
    )
    world = World(r, Workload([]))
    s, cache = world.scheduler, world.cache
    cache.storage.put(chain_hashes(None, list(range(100, 120))))
    head, b = _queued(world, "H", list(range(1, 21))), _queued(world, "B", list(range(100, 120)))
    for x in (head, b):
        s._start_prefetch(x)
        assert cache.check_prefetch_progress(x.req.rid, 0.0)  # best_effort: ends at once, query unanswered
    s._note_prefetch_misses()
    assert set(s._retries) == {head, b}
    s._reissue_prefetches()  # pass 1
    assert s._retries == {b: 3} and "B" not in cache.ongoing_prefetch
    s._reissue_prefetches()  # pass 2
    assert "B" not in cache.ongoing_prefetch
    s._reissue_prefetches()  # pass 3: B asks again
    assert "B" in cache.ongoing_prefetch and b.prefetch_reissues == 1 and s.counters["prefetch_reissues"] == 1
    assert cache.check_prefetch_progress("B", 0.0)
    s._note_prefetch_misses()
    s._reissue_prefetches()  # past max_attempts: admitted with what it has
    assert s._retries == {} and "B" not in cache.ongoing_prefetch


def test_the_2025_era_never_asks_storage_again():
    """0.5.2 and earlier had no re-ask: the era's interval is 0."""
    world = World(resolved(cache={"storage_backend": "local_nvme", "semantics": "2025"}), Workload([]))
    assert world.scheduler.retry_interval == 0 and world.scheduler.retry_max == 0
