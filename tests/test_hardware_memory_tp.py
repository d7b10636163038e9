"""The memory in use on a rank before the weights load (issue 29 item 7, hardware/commmem.py): the CUDA
context, plus at TP > 1 what SGLang's parallel groups hold on the GPU's interconnect, by default; a
measured ``hardware.cuda_context_mib`` replaces both."""

from __future__ import annotations

import statistics

import pytest
from conftest import assert_user_error, invoke

from hicache_sim.scenario import build_scenario, resolve

MIB = 1 << 20


def _resolved(gpu: str, tp: int, **hw):
    data = {
        "name": "t",
        "mode": "instant",
        "model": {"preset": "llama-3.1-8b"},
        "hardware": {"gpu": gpu, "tp": tp, "mem_fraction_static": 0.9, **hw},
    }
    return resolve(build_scenario(data, "t"))


def test_at_tp_one_only_the_cuda_context_is_in_use():
    """TP-1 pools are what they were: 1 GiB in use before the weights on every GPU."""
    for gpu in ("h100", "h200", "l40s", "mi300x"):
        assert _resolved(gpu, 1).memory.context_bytes == 1024 * MIB


def test_at_tp_above_one_the_parallel_groups_shrink_the_pool_by_mem_fraction_static_times_their_size():
    """SGLang reads free memory after its parallel groups are up: what they hold comes off ``pre``, so the
    pool loses ``mem_fraction_static`` times it (not all of it: the reserve shrinks too). Without the
    term the two pools below are equal."""
    modelled = _resolved("h200", 8).memory
    one_gib = _resolved("h200", 8, cuda_context_mib=1024).memory
    extra = modelled.context_bytes - one_gib.context_bytes
    assert extra > 1024 * MIB
    assert one_gib.kv_pool_bytes - modelled.kv_pool_bytes == pytest.approx(0.9 * extra, rel=1e-9)


def test_the_term_is_the_median_of_the_counted_readings_of_the_gpus_interconnect():
    from hicache_sim.hardware.commmem import CUDA_CONTEXT_MIB, READINGS

    for gpu, fabric in (("h100", "nvlink"), ("b200", "nvlink"), ("l40s", "pcie"), ("a10", "pcie")):
        got = [r.distributed_gib for r in READINGS if r.counted and r.fabric == fabric]
        assert len(got) >= 3
        want = (CUDA_CONTEXT_MIB + statistics.median(got) * 1024) * MIB
        assert _resolved(gpu, 4).memory.context_bytes == int(want)


def test_the_term_does_not_grow_with_tp():
    """A ring or chain connects each rank to one previous and one next rank per channel whatever the
    number of ranks: the same figure at tp 2 and tp 8."""
    assert _resolved("h100", 2).memory.context_bytes == _resolved("h100", 8).memory.context_bytes


def test_an_interconnect_without_a_public_reading_counts_nothing():
    """MI300X (RCCL over xGMI): no public reading, only the CUDA context."""
    assert _resolved("mi300x", 8).memory.context_bytes == 1024 * MIB


def test_a_given_cuda_context_mib_replaces_the_whole_figure():
    """A measured reading (capacity less a log's ``Load weight begin. avail mem``) is used as it is."""
    m = _resolved("h200", 8, cuda_context_mib=3184.6).memory
    assert m.context_bytes == int(3184.6 * MIB)
    assert "hardware.cuda_context_mib" in m.describe()
    assert "nvlink communicators" in _resolved("h200", 8).memory.describe()


def test_counted_readings_are_single_node_and_say_where_they_come_from():
    from hicache_sim.hardware.commmem import INTERCONNECTS, READINGS

    assert len(READINGS) >= 6
    for r in READINGS:
        assert r.source and r.fabric in INTERCONNECTS and r.distributed_gib > 0
        if r.counted:
            assert r.nnodes == 1, r
        else:
            assert r.note, r


def test_a_negative_cuda_context_mib_is_refused_in_one_line(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(
        "name: s\nmode: instant\nmodel: llama-3.1-8b\nhardware: {gpu: h100, tp: 2, cuda_context_mib: -5}\n"
        "workload: {kind: trace, trace: {path: builtin:mooncake/conversation_trace.jsonl, limit: 5}}\n"
    )
    assert_user_error(invoke("validate", p), "hardware.cuda_context_mib")
