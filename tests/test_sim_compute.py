"""The roofline compute model: linear and attention terms with their own efficiencies, decode memory
vs compute bound, presets from the model x GPU tables, tensor and pipeline parallelism, overrides for
calibration."""

from __future__ import annotations

import pytest
from test_sim_support import resolved

from hicache_sim.sim import ComputeModel, ComputeParams


@pytest.fixture(scope="module")
def params() -> ComputeParams:
    return ComputeParams.from_resolved(resolved())


def _linear_and_attention(p: ComputeParams, n: int, c: int) -> tuple[float, float]:
    """FLOPs of the GEMMs and of attention for ``n`` new tokens after ``c`` cached ones (independent)."""
    return 2 * p.active_params * n, 4 * p.num_layers * p.attn_width * (n * c + n * (n + 1) / 2)


def test_preset_comes_from_model_and_gpu(params):
    # Llama-3.1-8B on an H200: 989.4 TFLOP/s dense bf16, 4.8 TB/s, 8.03 B parameters in bf16, 32 x 4096.
    assert params.peak_flops == 989.4e12 and params.hbm_Bps == 4800e9
    assert params.linear_peak_flops == params.peak_flops  # bf16 weights run on the bf16 peak
    assert params.weight_bytes == pytest.approx(8.03e9 * 2) and params.num_layers == 32
    assert params.attn_width == 32 * 128 and params.kv_bytes_per_token == 131072
    assert (params.linear_mfu, params.attention_mfu) == (0.7, 0.6)


def test_prefill_is_linear_plus_attention_each_at_its_own_efficiency(params):
    m = ComputeModel(params)
    p = params
    n, c = 8192, 4096
    lin, att = _linear_and_attention(p, n, c)
    want = lin / (p.peak_flops * p.linear_mfu) + att / (p.peak_flops * p.attention_mfu)
    assert m.prefill_time([(n, c)]) == pytest.approx(want)
    # A cached context makes the same new tokens cost more (attention), never less.
    assert m.prefill_time([(n, 32768)]) > m.prefill_time([(n, 0)])
    # Batched chunks add up.
    assert m.prefill_time([(n, 0), (n, 0)]) == pytest.approx(2 * m.prefill_time([(n, 0)]))


def test_attention_efficiency_moves_long_prompts_and_barely_short_ones(params):
    slow_attention = ComputeModel(params.with_overrides(attention_mfu=params.attention_mfu / 2))
    base = ComputeModel(params)
    short, long_ = [(1024, 0)], [(8192, 100_000)]
    assert slow_attention.prefill_time(long_) / base.prefill_time(long_) > 1.6  # attention-bound
    assert slow_attention.prefill_time(short) / base.prefill_time(short) < 1.1  # GEMM-bound
    slow_linear = ComputeModel(params.with_overrides(linear_mfu=params.linear_mfu / 2))
    assert slow_linear.prefill_time(short) / base.prefill_time(short) > 1.8
    assert slow_linear.prefill_time(long_) / base.prefill_time(long_) < 1.25


def test_mfu_shorthand_sets_both_efficiencies():
    p = ComputeParams.from_resolved(resolved(hardware={"mfu": 0.45}))
    assert (p.linear_mfu, p.attention_mfu) == (0.45, 0.45)


def test_fp8_weights_run_the_linear_layers_on_the_fp8_peak():
    p = ComputeParams.from_resolved(
        resolved(model="deepseek-r1", hardware={"tp": 8}, cache={"device_tokens": 64 * 100})
    )
    assert p.linear_peak_flops == 1978.9e12 and p.peak_flops == 989.4e12
    assert p.bytes_per_param == 1.0 and p.weight_bytes == pytest.approx(671e9 / 8)
    bf16 = ComputeParams.from_resolved(
        resolved(
            model={"preset": "deepseek-r1", "weights_dtype": "bf16"}, hardware={"tp": 8}, cache={"device_tokens": 6400}
        )
    )
    assert bf16.linear_peak_flops == bf16.peak_flops and bf16.weight_bytes == pytest.approx(2 * 671e9 / 8)


def test_tiny_prefill_is_bound_by_reading_the_weights(params):
    m = ComputeModel(params)
    assert m.prefill_time([(1, 0)]) == pytest.approx(params.weight_bytes / (params.hbm_Bps * params.hbm_efficiency))


def test_decode_is_memory_bound_for_small_batches_and_grows_with_kv(params):
    m = ComputeModel(params)
    hbm = params.hbm_Bps * params.hbm_efficiency
    assert m.decode_time(1, 1000) == pytest.approx((params.weight_bytes + 1000 * 131072) / hbm)
    assert m.decode_time(64, 64 * 4000) > m.decode_time(64, 64 * 1000) > m.decode_time(1, 1000)
    assert m.decode_time(0, 0) == 0.0


def test_tensor_parallel_splits_one_requests_prefill_pipeline_parallel_does_not():
    one = ComputeModel.from_resolved(resolved())
    tp2 = ComputeModel.from_resolved(resolved(hardware={"tp": 2}))
    pp2 = ComputeModel.from_resolved(resolved(hardware={"pp": 2}))
    chunk = [(8192, 0)]
    # Half the work per rank, plus two all-reduces per layer of 8192 bf16 rows of 4096 over H200's
    # 475 GB/s bus bandwidth, ring factor 2 (2 - 1) / 2 = 1, 10 us each: 64 x (10 us + 141.3 us).
    allreduce = 2 * 32 * (10e-6 + 8192 * 4096 * 2 * 1.0 / 475e9)
    assert allreduce == pytest.approx(9.68e-3, rel=1e-3)
    assert tp2.prefill_time(chunk) == pytest.approx(one.prefill_time(chunk) / 2 + allreduce, rel=1e-6)
    # A stage holds half the layers (and does half the work) but the request crosses both stages.
    assert pp2.num_layers == 16 and pp2.pp == 2
    assert pp2.prefill_time(chunk) == pytest.approx(one.prefill_time(chunk) / 2, rel=1e-6)
    assert pp2.prefill_latency(chunk) == pytest.approx(one.prefill_time(chunk), rel=1e-6)


def test_pipeline_decode_keeps_the_per_token_latency_and_splits_the_kv_reads():
    one = ComputeModel.from_resolved(resolved())
    pp4 = ComputeModel.from_resolved(resolved(hardware={"pp": 4}))
    p1 = one.params
    hbm = p1.hbm_Bps * p1.hbm_efficiency
    # One request: its token crosses four stages of a quarter of the weights each.
    assert pp4.decode_time(1, 1000) == pytest.approx(one.decode_time(1, 1000), rel=1e-9)
    # A full batch: four micro-batches in flight, every stage reads its weights once per micro-batch
    # (all weights once per token in all) and a quarter of the KV of a quarter of the requests.
    b, kv = 64, 64 * 4000
    assert pp4.decode_time(b, kv) == pytest.approx((p1.weight_bytes + kv * p1.kv_bytes_per_token / 4) / hbm)
    assert pp4.decode_time(b, kv) < one.decode_time(b, kv)


def test_overrides_replace_fields_and_reject_unknown_ones(params):
    m = ComputeModel(params.with_overrides(linear_mfu=params.linear_mfu / 2, attention_mfu=params.attention_mfu / 2))
    assert m.prefill_time([(8192, 0)]) == pytest.approx(2 * ComputeModel(params).prefill_time([(8192, 0)]))
    with pytest.raises(ValueError, match="unknown compute parameter"):
        params.with_overrides(flux_capacitor=1.0)
    with pytest.raises(ValueError, match="linear_mfu"):
        params.with_overrides(linear_mfu=0.0)
    with pytest.raises(ValueError, match="attention_mfu"):
        params.with_overrides(attention_mfu=1.5)


def test_a_short_prefill_after_a_long_context_is_bound_by_reading_it(params):
    # One new token after 200,000 cached ones: compute is tiny, the step reads the weights and the
    # context's KV once: (16.06 GB + 200,000 x 131,072 B) / (4.8 TB/s x efficiency).
    m = ComputeModel(params)
    p = params
    c = 200_000
    want = (p.weight_bytes + c * p.kv_bytes_per_token) / (p.hbm_Bps * p.hbm_efficiency)
    lin, att = _linear_and_attention(p, 1, c)
    assert lin / (p.peak_flops * p.linear_mfu) + att / (p.peak_flops * p.attention_mfu) < want
    assert m.prefill_time([(1, c)]) == pytest.approx(want)
