"""Tensor-parallel all-reduce time by message size: SGLang's custom kernels below its 8 MiB cap on
NVLink GPUs, NCCL above with a bus bandwidth that rises with the size (fitted once to measured 8-GPU
nccl-tests tables), the peak at every size on PCIe cards. Numbers derived by hand in the comments."""

from __future__ import annotations

import pytest
from test_sim_support import resolved

from hicache_sim.hardware.allreduce import MIB, AllReduceParams, allreduce_kernel, allreduce_time
from hicache_sim.sim import ComputeModel
from validation import allreduce_fit

# Qwen3-235B-A22B: hidden 4096, one bf16 row is 8 KiB per token; 94 layers, two all-reduces each.
ROW = 4096 * 2
ALLREDUCES = 188


def _h800_tp8(**hardware) -> ComputeModel:
    return ComputeModel.from_resolved(
        resolved(
            model="qwen3-235b-a22b",
            hardware={"gpu": "h800", "tp": 8, **hardware},
            cache={"device_tokens": 64 * 100},
        )
    )


def _one(m: ComputeModel, nbytes: int) -> float:
    """Seconds of one all-reduce of ``nbytes`` in the model's step time (whole tokens of 8 KiB)."""
    assert nbytes % ROW == 0
    return m.allreduce_time(nbytes // ROW) / ALLREDUCES


def test_4_mib_runs_the_custom_two_stage_kernel_on_h800_tp8():
    # 512 tokens = 4 MiB < 8 MiB, 8 ranks, >= 256 KiB: SGLang's two-stage custom kernel:
    # 19.9 us + 1.75 x 4,194,304 B / (0.705 x 215 GB/s) = 19.9 + 48.4 = 68.3 us (was 10 + 34.1 us).
    m = _h800_tp8()
    assert _one(m, 4 * MIB) == pytest.approx(68.33e-6, rel=1e-3)


def test_a_prefill_message_runs_nccl_below_its_peak_bus_bandwidth_on_h800_tp8():
    # 2,152 tokens = 17,629,184 B = 16.81 MiB >= 8 MiB: NCCL, busbw 215 / (1 + (12.93 / 16.81)^0.6276)
    # = 116.3 GB/s (54% of the peak): 10 us + 1.75 x 17,629,184 / 116.3e9 = 275.2 us (was 153.5 us).
    m = _h800_tp8()
    assert _one(m, 2152 * ROW) == pytest.approx(275.19e-6, rel=1e-3)
    # The research note's estimate from the same tables by fraction of peak: 281-299 us.
    assert 0.9 * 281e-6 < _one(m, 2152 * ROW) < 299e-6


def test_the_custom_cap_is_strict_at_8_mib():
    p = AllReduceParams(peak_Bps=215e9, latency_s=10e-6)
    assert allreduce_kernel(p, 8 * MIB - 1, 8) == "custom_2stage"
    assert allreduce_kernel(p, 8 * MIB, 8) == "nccl"
    # 8 MiB - 1 B: 19.9 us + 1.75 x 8,388,607 / (0.705 x 215e9) = 116.75 us; 8 MiB through NCCL at
    # 215 / (1 + (12.93 / 8)^0.6276) = 91.4 GB/s: 10 + 160.6 = 170.57 us.
    assert allreduce_time(p, 8 * MIB - 1, 8) == pytest.approx(116.75e-6, rel=1e-4)
    assert allreduce_time(p, 8 * MIB, 8) == pytest.approx(170.57e-6, rel=1e-4)


def test_sglang_picks_the_kernel_by_size_and_ranks():
    p = AllReduceParams(peak_Bps=480e9, latency_s=10e-6)
    # One stage below 256 KiB at 8 and 6 ranks, below 512 KiB at 4, at every size below the cap at 2.
    assert [allreduce_kernel(p, 256 * 1024 - 1, n) for n in (8, 6, 4, 2)] == ["custom_1stage"] * 4
    assert [allreduce_kernel(p, 256 * 1024, n) for n in (8, 6, 4, 2)] == ["custom_2stage"] * 2 + ["custom_1stage"] * 2
    assert allreduce_kernel(p, 512 * 1024, 4) == "custom_2stage"
    assert allreduce_kernel(p, 8 * MIB - 1, 2) == "custom_1stage"
    # No custom kernel at 3, 5 or 7 ranks, nor when SGLang's custom all-reduce is off (cap 0).
    assert {allreduce_kernel(p, 1024, n) for n in (3, 5, 7)} == {"nccl"}
    off = AllReduceParams(peak_Bps=480e9, latency_s=10e-6, custom_max_bytes=0.0)
    assert allreduce_kernel(off, 1024, 8) == "nccl"


def test_custom_kernels_match_vllm_24111_h100_tp8_rows():
    # vLLM PR #24111, H100 x 8, bf16: two stages 25 / 26 / 28 / 46 us, one stage 13 / 20 / 31 / 56 us at
    # 0.5 / 1 / 2 / 4 MiB. The old 10 us + bytes / 480 GB/s gave 11.9 / 13.8 / 17.6 / 25.3 us.
    p = AllReduceParams(peak_Bps=480e9, latency_s=10e-6)
    sizes = [MIB // 2, MIB, 2 * MIB, 4 * MIB]
    two = [allreduce_time(p, s, 8) for s in sizes]
    assert two == pytest.approx([25e-6, 26e-6, 28e-6, 46e-6], rel=0.1)
    from hicache_sim.hardware.allreduce import KERNELS

    one = [KERNELS.get("custom_1stage").time(p, s, 8) for s in sizes]
    assert one == pytest.approx([13e-6, 20e-6, 31e-6, 56e-6], rel=0.027)


def test_no_tensor_parallelism_no_allreduce_cost():
    m = ComputeModel.from_resolved(resolved(model="qwen3-235b-a22b", hardware={"gpu": "h800"}))
    assert m.allreduce_time(2152) == 0.0
    assert allreduce_time(AllReduceParams(peak_Bps=215e9, latency_s=10e-6), 2152 * ROW, 1) == 0.0


def test_overrides_move_the_nccl_curve_and_the_custom_cap():
    base = _one(_h800_tp8(), 2152 * ROW)
    # A half-peak size of 4 MiB: busbw 215 / (1 + (4 / 16.81)^0.6276) = 152.9 GB/s: 10 + 201.8 us.
    early = _one(_h800_tp8(allreduce_half_peak_mib=4.0), 2152 * ROW)
    assert early == pytest.approx(211.77e-6, rel=1e-3) and early < base
    # Exponent 1, half 12.93 MiB: busbw 215 x 16.81 / (16.81 + 12.93) = 121.5 GB/s: 10 + 253.9 us.
    steep = _one(_h800_tp8(allreduce_curve_exponent=1.0), 2152 * ROW)
    assert steep == pytest.approx(263.9e-6, rel=1e-3)
    # Custom all-reduce off: 4 MiB goes through NCCL, 215 / (1 + (12.93 / 4)^0.6276) = 69.6 GB/s.
    off = _one(_h800_tp8(custom_allreduce_max_mib=0), 4 * MIB)
    assert off == pytest.approx(10e-6 + 1.75 * 4 * MIB / 69.62e9, rel=1e-3)


def test_pcie_cards_keep_the_peak_at_every_size():
    # L20 (no NVLink): 10 us + bytes / 20.6 GB/s at tp 2 (ring factor 1), small or large.
    m = ComputeModel.from_resolved(resolved(model="qwen3-8b", hardware={"gpu": "l20", "tp": 2}))
    for tokens in (1, 2152):
        assert m.allreduce_time(tokens) == pytest.approx(72 * (10e-6 + tokens * ROW / 20.6e9), rel=1e-9)


def test_the_shipped_curve_is_the_fit_and_fits_both_tables_as_documented():
    from hicache_sim.hardware.allreduce import NCCL_EXPONENT, NCCL_HALF_PEAK_MIB

    half, exponent = allreduce_fit.fit()
    assert pytest.approx(half, abs=0.005) == NCCL_HALF_PEAK_MIB
    assert pytest.approx(exponent, abs=0.00005) == NCCL_EXPONENT
    worst, median = allreduce_fit.summary(NCCL_HALF_PEAK_MIB, NCCL_EXPONENT)
    assert worst < 0.080 and median < 0.043
    # One parameter (busbw = peak S / (S + h)) cannot serve both tables: 22% off at best.
    one_h, _ = allreduce_fit.fit(exponent=1.0)
    assert allreduce_fit.summary(one_h, 1.0)[0] > 0.21
