"""Attention-DP groups step in lockstep (sim/lockstep.py; SGLang 0.5.23 prepare_mlp_sync_batch_raw,
dp_gather / dp_scatter): a group's request waits for the shared step, the MLP of a step sees every
group's tokens, an idle group runs an idle batch only while another group has work, and ``--dp-size``
replicas stay independent."""

from __future__ import annotations

import pytest

from hicache_sim.sim import ComputeModel
from hicache_sim.sim.compute import IDLE
from hicache_sim.sim.dp import DPWorld
from hicache_sim.workloads.synthetic import Workload
from tests.test_sim_support import PAGE, req, resolved

# Per-group prefill chunk 8192 // 2 = 4096 tokens (SGLang divides it by attn_dp); room for the prompts.
CACHE = {"device_tokens": 1000 * PAGE, "host_tokens": 1000 * PAGE}


def _resolved(**hardware):
    return resolved(cache=CACHE, hardware={"tp": 2, **hardware})


def _run(requests, **hardware):
    """Round robin: the first request goes to rank 0, the second to rank 1, and so on."""
    return DPWorld(_resolved(**hardware), Workload(requests), check_invariants=True).run()


def _rows(res) -> dict[str, dict]:
    return {r["rid"]: r for r in res.total.requests}


def test_a_short_request_on_an_idle_group_waits_for_the_other_group_s_prefill_step():
    """A 128-page prompt (two 4096-token chunks) reaches group 0 at 0; a one-page prompt reaches group 1
    just after. Group 1 forms its batch only when the shared step ends (the next loop turn of every
    group), so its first token comes after group 0's first chunk and with its second: at least the
    first chunk's own prefill time plus its own. Stepping alone it would take its own prefill only."""
    res = _run([req("long", 0.0, range(1, 129), out=1), req("short", 1e-6, [1000], out=1)], attn_dp=2)
    compute = ComputeModel.from_resolved(_resolved(attn_dp=2))
    chunk = compute.prefill_time([(4096, 0)])
    own = compute.prefill_time([(PAGE, 0)])
    rows = _rows(res)
    assert rows["short"]["ttft_s"] >= chunk + own - 1e-6
    # It is served with the long prompt's second chunk: both first tokens come at that step's end.
    assert rows["short"]["ttft_s"] + 1e-6 == pytest.approx(rows["long"]["ttft_s"])


def test_plain_dp_replicas_stay_independent():
    """--dp-size replicas are separate tp groups: the short request runs at once on its own replica."""
    res = _run([req("long", 0.0, range(1, 129), out=1), req("short", 1e-6, [1000], out=1)], dp=2)
    compute = ComputeModel.from_resolved(_resolved(dp=2))
    assert _rows(res)["short"]["ttft_s"] == pytest.approx(compute.prefill_time([(PAGE, 0)]))
    assert all("idle_steps" not in rank.counters for rank in res.ranks)


def test_a_decoding_group_slows_down_while_the_other_group_prefills():
    """Group 0 decodes 64 tokens; group 1 gets a 128-page prompt meanwhile. Each of group 0's decode
    steps during that prefill is one shared step of the prefill's length, so its request ends later
    than with group 1 idle (where only its own decode steps count)."""
    alone = _rows(_run([req("decode", 0.0, [1], out=64)], attn_dp=2))["decode"]
    beside = _rows(_run([req("decode", 0.0, [1], out=64), req("prefill", 0.01, range(100, 228), out=1)], attn_dp=2))[
        "decode"
    ]
    compute = ComputeModel.from_resolved(_resolved(attn_dp=2))
    # Two shared steps carry the prefill's two 4096-token chunks, each in place of a decode step of at
    # most 128 KV tokens (64 prompt + 64 output).
    longest_decode = compute.decode_step_s(1, 128)
    assert beside["e2e_s"] - alone["e2e_s"] >= 2 * (compute.prefill_time([(4096, 0)]) - longest_decode)


def test_no_group_steps_when_none_has_work():
    """Requests far apart: every shared step has exactly one busy group, the other runs an idle batch;
    between requests nothing steps (no idle batch without work anywhere)."""
    res = _run([req(f"r{i}", 5.0 * i, [10 * i + 1, 10 * i + 2], out=4) for i in range(4)], attn_dp=2)
    c0, c1 = (rank.counters for rank in res.ranks)
    assert c0["steps"] > 0 and c1["steps"] > 0
    # Stepping on their own, no group would run an idle batch (no counter: 0).
    assert (c0.get("idle_steps", 0), c1.get("idle_steps", 0)) == (c1["steps"], c0["steps"])
    assert res.total.sim_time_s < 5.0 * 3 + 1.0


def test_the_mlp_of_a_step_sees_every_group_s_tokens():
    """The same group batch steps longer when the other group sends rows to the MLP: a 2048-token
    prefill beside another group's 2048 new tokens costs the linear layers of 4096 rows, its attention
    only its own."""
    compute = ComputeModel.from_resolved(_resolved(attn_dp=2))
    own = compute.group_prefill([(2048, 0)])
    alone = compute.lockstep_time([own, IDLE], attn_tp=1)
    beside = compute.lockstep_time([own, compute.group_prefill([(2048, 0)])], attn_tp=1)
    assert alone == pytest.approx(compute.prefill_time([(2048, 0)]))
    assert beside - alone == pytest.approx(
        compute.linear_time(4096)
        - compute.linear_time(2048)
        + compute.unsplit_time(4096)
        - compute.unsplit_time(2048)
        + compute.allreduce_time(4096)
        - compute.allreduce_time(2048),
        rel=1e-9,
    )


def test_one_group_is_the_single_rank_step():
    """With one group's work the lockstep formula is the compute model's own prefill and decode time."""
    compute = ComputeModel.from_resolved(_resolved(attn_dp=2))
    chunks = [(1000, 3000), (200, 0)]
    assert compute.lockstep_time([compute.group_prefill(chunks)], attn_tp=1) == compute.prefill_time(chunks)
    assert compute.lockstep_time([compute.group_decode(16, 40000)], attn_tp=1) == compute.decode_time(16, 40000)


@pytest.mark.parametrize(
    ("tokens", "extend", "attn_tp", "fabric", "rows"),
    [
        ([100, 0], True, 1, "nvlink", 100),  # an extend in the step: SUM_LEN
        ([8, 8], False, 1, "nvlink", 16),  # decode, no idle group, fits the custom all-reduce: SUM_LEN
        ([1, 7], False, 1, "nvlink", 8),  # uneven but fits the custom all-reduce: SUM_LEN
        ([1, 7], False, 1, "pcie", 14),  # no custom all-reduce: 2 x 8 >= 7 x 2, MAX_LEN
        ([8, 0], False, 1, "nvlink", 16),  # an idle group: cost rule, 2 x 8 >= 8 x 2, MAX_LEN
        ([0, 0, 0, 10], False, 1, "nvlink", 10),  # 2 x 10 < 10 x 4: SUM_LEN
        ([0, 10, 10, 10], False, 1, "nvlink", 40),  # 2 x 30 >= 10 x 4: MAX_LEN
        ([3, 0], False, 2, "nvlink", 8),  # rounded up to attn_tp first: [4, 0], MAX_LEN
    ],
)
def test_gathered_rows_follow_sglang_s_padding_mode(tokens, extend, attn_tp, fabric, rows):
    """DpPaddingMode.get_dp_padding_mode and prepare_mlp_sync_batch, by hand."""
    base = ComputeModel.from_resolved(_resolved(attn_dp=2)).params
    compute = ComputeModel(base.with_overrides(tp=8, allreduce_fabric=fabric))
    assert compute.lockstep_rows(tokens, extend, attn_tp) == rows


def test_a_lockstep_run_is_deterministic():
    reqs = [req(f"r{i}", 0.01 * i, range(10 * i + 1, 10 * i + 9), out=8) for i in range(8)]
    a = _run(reqs, attn_dp=2)
    b = _run(reqs, attn_dp=2)
    assert a.total.requests == b.total.requests
    assert a.total.counters == b.total.counters
