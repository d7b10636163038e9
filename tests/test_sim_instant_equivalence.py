"""Under no load (same order, each request done before the next arrives) the timed world's hits per
tier equal instant mode's, request by request. Under time pressure they may differ only because of
timing; one such difference is shown on purpose: a prefetch timeout shorter than the storage read."""

from __future__ import annotations

import pytest
from test_sim_support import hits, scenario, spaced, workload_of

from hicache_sim.instant import run_instant
from hicache_sim.scenario import resolve
from hicache_sim.sim import run_timed

LONG_CONTEXT = {
    "kind": "long_context",
    "long_context": {
        "num_documents": 4,
        "queries_per_document": 3,
        "context_length": 4096,
        "question_length": 64,
        "output_length": 16,
    },
}
MULTITURN = {
    "kind": "multiturn",
    "multiturn": {"num_clients": 6, "num_rounds": 3, "request_length": 512, "output_length": 64, "max_parallel": 6},
}

CASES = {
    "long_context_host": dict(workload=LONG_CONTEXT, cache={"device_tokens": 9216, "host_tokens": 32768}),
    "long_context_storage": dict(
        workload=LONG_CONTEXT, cache={"device_tokens": 9216, "host_tokens": 8192, "storage_backend": "local_nvme"}
    ),
    "multiturn_write_through": dict(
        workload=MULTITURN, cache={"device_tokens": 4096, "host_tokens": 8192}, scheduler={"insert_output": False}
    ),
    "multiturn_write_back_storage": dict(
        workload=MULTITURN,
        cache={
            "device_tokens": 4096,
            "host_tokens": 2048,
            "write_policy": "write_back",
            "storage_backend": "local_nvme",
        },
        scheduler={"insert_output": False},
    ),
    "multiturn_buffer_only": dict(
        workload=MULTITURN,
        cache={"device_tokens": 4096, "host_tokens": 2048, "storage_backend": "3fs", "host_memory_mode": "buffer_only"},
        scheduler={"insert_output": False},
    ),
}


def _both(sc, gap_s: float):
    r = resolve(sc, strict=True)
    wl = spaced(workload_of(sc), gap_s)
    timed = run_timed(r, wl, check_invariants=True)
    inst = run_instant(
        r.cache,
        wl.requests,
        chunk_pages=sc.scheduler.chunked_prefill_size // sc.cache.page_size,
        reserve_last_token=sc.scheduler.reserve_last_token,
    )
    want = [
        (q.rid, inst.device_hit[i], inst.host_hit[i], inst.storage_hit[i])
        for i, q in enumerate(wl.requests)
        if q.rid not in inst.rejected
    ]
    return timed, inst, want


@pytest.mark.parametrize("name", sorted(CASES))
def test_no_load_hits_equal_instant_mode_request_by_request(name):
    timed, _inst, want = _both(scenario(**CASES[name]), gap_s=60.0)
    got = hits(timed.requests)
    assert got == want
    assert sum(d + h + s for _, d, h, s in got) > 0  # the case has hits to compare
    assert timed.counters["retractions"] == 0


def test_each_case_exercises_its_tier():
    tiers = {
        "long_context_host": 2,
        "long_context_storage": 3,
        "multiturn_write_through": 2,
        "multiturn_write_back_storage": 2,
        "multiturn_buffer_only": 3,
    }
    for name, tier in tiers.items():
        _, _, want = _both(scenario(**CASES[name]), gap_s=60.0)
        assert sum(w[tier] for w in want) > 0, name


def test_prefetch_timeout_shorter_than_the_storage_read_loses_storage_hits():
    sc = scenario(**CASES["long_context_storage"])
    _, _, want = _both(sc, gap_s=60.0)
    slow = scenario(**CASES["long_context_storage"], hardware={"storage": {"read_gbps": 0.05}})
    slow.cache.prefetch_timeout_base_s = 0.002
    slow.cache.prefetch_timeout_per_ki_token_s = 0.0
    timed, _inst, want_slow = _both(slow, gap_s=60.0)
    assert want_slow == want  # instant mode has no time: the same hits
    instant_storage = sum(w[3] for w in want)
    timed_storage = sum(g[3] for g in hits(timed.requests))
    assert instant_storage > 0 and timed_storage < instant_storage
    assert timed.counters["prefetch_terminated"] + timed.counters["prefetch_revoked"] > 0
    waits = [x["prefetch_wait_s"] for x in timed.requests if x["prefetch_wait_s"]]
    assert waits and max(waits) < 0.01  # nobody waited for the slow read beyond the timeout (and a step)
