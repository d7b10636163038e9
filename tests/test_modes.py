"""Every registered workload kind runs in both modes, with every invariant checked. ``CASES`` is the
test case of each kind (a small section and the hit rate its reuse guarantees): a kind registered in
``workloads/kinds/`` without a case here fails ``test_every_registered_kind_has_a_case``."""

from __future__ import annotations

import pytest

from hicache_sim.runner import simulate
from hicache_sim.scenario import Scenario
from hicache_sim.workloads.kinds import WORKLOAD_KINDS

#: kind -> (its small ``workload`` section, the total hit rate its prefix reuse guarantees at least).
CASES = {
    "trace": ({"trace": {"limit": 60}}, 0.0),  # a trace promises no reuse
    "multiturn": (
        {
            "multiturn": {
                "num_clients": 6,
                "num_rounds": 3,
                "request_length": 256,
                "output_length": 16,
                "request_rate": 20.0,
                "max_parallel": 4,
            }
        },
        0.1,
    ),
    "shared_prefix": (
        {
            "shared_prefix": {
                "num_groups": 3,
                "prompts_per_group": 4,
                "system_prompt_length": 512,
                "question_length": 64,
                "output_length": 16,
                "request_rate": 20.0,
            }
        },
        0.1,
    ),
    "long_context": (
        {
            "long_context": {
                "num_documents": 3,
                "queries_per_document": 2,
                "context_length": 2048,
                "output_length": 16,
                "request_rate": 5.0,
            }
        },
        0.1,
    ),
    "bench_serving": (  # independent prompts: only the warm-up's copy of prompt 0 is reused
        {"bench_serving": {"num_prompts": 12, "random_input_len": 512, "random_output_len": 16, "max_concurrency": 4}},
        0.0,
    ),
    "poisson_synthetic": (
        {"poisson_synthetic": {"num_requests": 40, "input_length": 512, "output_length": 16, "request_rate": 20.0}},
        0.0,
    ),
}


def test_every_registered_kind_has_a_case():
    names = WORKLOAD_KINDS.names()
    missing = [k for k in names if k not in CASES]
    assert not missing, f"workload kinds without a test case in tests/test_modes.py CASES: {missing}"
    assert sorted(CASES) == sorted(names), "a case for a kind that is not registered"


@pytest.mark.parametrize("mode", ["instant", "timed"])
@pytest.mark.parametrize("kind", WORKLOAD_KINDS.names())
def test_every_workload_in_both_modes(kind, mode):
    sc = Scenario.model_validate(
        {
            "mode": mode,
            "seed": 2,
            "cache": {"page_size": 64, "device_tokens": 64 * 160, "host_ratio": 1.0, "storage_backend": "local_nvme"},
            "scheduler": {"chunked_prefill_size": 512, "max_prefill_tokens": 1024},
            "workload": {"kind": kind, **CASES[kind][0]},
        }
    )
    out = simulate(sc, check_invariants=True)
    s = out.summary
    assert s["requests"] == len(out.requests) > 0
    # Exactly the requests whose prompt exceeds the 160-page device pool are rejected (only the trace
    # has such prompts), every other one is served, and the summary counts the table's rows.
    req = out.requests
    assert ((req["status"] == "rejected") == (req["prompt_pages"] > 160)).all()
    assert (req["status"].isin(["finished", "rejected"])).all()
    assert s["requests_rejected"] == int((req["prompt_pages"] > 160).sum())
    assert s["requests_finished"] == int((req["status"] == "finished").sum())
    hits = out.requests[[f"{t}_hit_tokens" for t in ("device", "host", "storage")]].sum(axis=1)
    assert (hits <= out.requests["prompt_tokens"]).all()
    assert 0.0 <= s["hit_rate"]["total"] <= 1.0
    if mode == "timed":
        assert s["ttft_s"]["p50"] is not None and s["ttft_s"]["p50"] > 0
    assert s["hit_rate"]["total"] >= CASES[kind][1]
