"""Per-request cost outside the GPU, and pipeline parallelism in the timed world (issue 10): a request
reaches the scheduler ``request_overhead_us`` after it arrives; under PP a prefill micro-batch holds
the first stage for one stage time and its first token comes after all stages, so one request is no
faster than on one GPU while a queue of them flows through the pipeline."""

from __future__ import annotations

import pytest
from test_sim_support import FixedCompute, req, resolved

from hicache_sim.sim import run_timed
from hicache_sim.workloads.synthetic import Workload

T = 0.010  # seconds of one pipeline stage per prefill micro-batch


def _queue(n: int, out: int = 1) -> Workload:
    """``n`` requests of 4 distinct pages each, all arriving at 0 (one micro-batch each, see below)."""
    return Workload([req(f"r{i}", 0.0, range(100 * i + 1, 100 * i + 5), out=out) for i in range(n)])


def _ttfts(res) -> list[float]:
    return [x["ttft_s"] for x in sorted(res.requests, key=lambda x: x["rid"])]


# A chunk budget of one prompt (4 pages of 64 tokens): every prefill batch holds one request.
ONE_PER_BATCH = {"chunked_prefill_size": 256, "max_prefill_tokens": 256}


def test_request_overhead_delays_the_scheduler_by_exactly_that_much():
    wl = Workload([req("a", 0.5, range(1, 5))])
    base = run_timed(resolved(), wl, compute=FixedCompute(T))
    slow = run_timed(resolved(hardware={"request_overhead_us": 5000}), wl, compute=FixedCompute(T))
    (b,), (s,) = base.requests, slow.requests
    assert s["arrival_s"] == b["arrival_s"] == 0.5
    assert s["ttft_s"] - b["ttft_s"] == pytest.approx(0.005, abs=1e-12)
    assert b["ttft_s"] == pytest.approx(T)


def test_one_request_crosses_every_stage_pipeline_does_not_shorten_its_prefill():
    wl = Workload([req("a", 0.0, range(1, 5))])
    one_gpu = run_timed(resolved(), wl, compute=FixedCompute(2 * T))
    two_stages = run_timed(resolved(hardware={"pp": 2}), wl, compute=FixedCompute(T, pp=2))
    assert _ttfts(one_gpu) == pytest.approx([2 * T])
    assert _ttfts(two_stages) == pytest.approx([2 * T])


def test_a_queue_flows_through_the_pipeline_one_stage_time_apart():
    n = 6
    one_gpu = run_timed(resolved(scheduler=ONE_PER_BATCH), _queue(n), compute=FixedCompute(2 * T))
    two = run_timed(
        resolved(scheduler=ONE_PER_BATCH, hardware={"pp": 2}),
        _queue(n),
        compute=FixedCompute(T, pp=2),
        check_invariants=True,
    )
    assert _ttfts(one_gpu) == pytest.approx([2 * T * (k + 1) for k in range(n)])
    # micro-batch k enters the first stage at k T and leaves the second at (k + 2) T
    assert _ttfts(two) == pytest.approx([T * (k + 2) for k in range(n)])
    assert two.counters["prefill_steps"] == n


def test_pipelined_requests_decode_and_finish():
    res = run_timed(
        resolved(scheduler=ONE_PER_BATCH, hardware={"pp": 4}),
        _queue(5, out=20),
        compute=FixedCompute(T, decode_s=0.002, pp=4),
        check_invariants=True,
    )
    assert [x["status"] for x in res.requests] == ["finished"] * 5
    assert all(x["output_tokens"] == 20 for x in res.requests)
    # every first token came after four stage times of its own micro-batch
    assert min(_ttfts(res)) == pytest.approx(4 * T)


def test_a_pipelined_decode_step_pays_the_step_overhead_once_per_micro_batch():
    # Two 4-page prompts in one prefill batch on pp = 2: the first stage takes T + O (one overhead),
    # the second T more, so both first tokens come at 2T + O. Each decode step then runs two
    # micro-batches of one request: 2 O of scheduling + D, for the 4 remaining tokens.
    o, d, n = 0.0005, 0.002, 5
    wl = Workload([req("a", 0.0, range(1, 5), out=n), req("b", 0.0, range(100, 104), out=n)])
    res = run_timed(
        resolved(hardware={"pp": 2}),
        wl,
        compute=FixedCompute(T, decode_s=d, pp=2, step_overhead_s=o),
        check_invariants=True,
    )
    assert _ttfts(res) == pytest.approx([2 * T + o] * 2, abs=1e-12)
    assert [x["e2e_s"] for x in res.requests] == pytest.approx([2 * T + o + (n - 1) * (2 * o + d)] * 2, abs=1e-12)


def test_a_chunked_prompt_under_pp_is_scheduled_once_per_chunk():
    """A 12-page prompt under a 4-page chunk budget: three chunks, each entering the pipeline when the
    previous one leaves the first stage (not when it leaves the last), none scheduled twice. Before the
    chunk's progress was taken at the first stage, the next plan saw the in-flight chunk again and
    re-ran it, and the request ended pending with its prefix locked."""
    wl = Workload([req("long", 0.0, range(1, 13), out=3), req("short", 0.0, range(50, 54), out=3)])
    res = run_timed(
        resolved(scheduler=ONE_PER_BATCH, hardware={"pp": 2}),
        wl,
        compute=FixedCompute(T, decode_s=0.002, pp=2),
        check_invariants=True,
    )
    by = {x["rid"]: x for x in res.requests}
    assert [by[k]["status"] for k in ("long", "short")] == ["finished", "finished"]
    assert res.counters["prefill_tokens"] == 16 * 64  # every prompt token prefilled exactly once
    assert res.counters["prefill_steps"] == 4
    # chunks of "long" enter at 0, T, 2T; its last chunk leaves the second stage at 4T
    assert by["long"]["ttft_s"] == pytest.approx(4 * T)
