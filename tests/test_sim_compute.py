"""The roofline compute model: prefill linear + attention terms, decode memory vs compute bound,
presets from the model x GPU tables, overrides for calibration."""

from __future__ import annotations

import pytest
from test_sim_support import resolved

from hicache_sim.sim import ComputeModel, ComputeParams


@pytest.fixture(scope="module")
def params() -> ComputeParams:
    return ComputeParams.from_resolved(resolved())


def test_preset_comes_from_model_and_gpu(params):
    # Llama-3.1-8B on an H200: 989 TFLOP/s, 4.8 TB/s, 8.03 B parameters in bf16, 32 layers x 4096.
    assert params.peak_flops == 989e12 and params.hbm_Bps == 4800e9
    assert params.weight_bytes == pytest.approx(8.03e9 * 2) and params.num_layers == 32
    assert params.attn_width == 32 * 128 and params.kv_bytes_per_token == 131072


def test_prefill_is_linear_plus_attention_over_cached_context(params):
    m = ComputeModel(params)
    p = params
    n, c = 8192, 4096
    flops = 2 * p.active_params * n + 4 * p.num_layers * p.attn_width * (n * c + n * (n + 1) / 2)
    assert m.prefill_time([(n, c)]) == pytest.approx(flops / (p.peak_flops * p.mfu))
    # A cached context makes the same new tokens cost more (attention), never less.
    assert m.prefill_time([(n, 32768)]) > m.prefill_time([(n, 0)])
    # Batched chunks add up.
    assert m.prefill_time([(n, 0), (n, 0)]) == pytest.approx(2 * m.prefill_time([(n, 0)]))


def test_tiny_prefill_is_bound_by_reading_the_weights(params):
    m = ComputeModel(params)
    assert m.prefill_time([(1, 0)]) == pytest.approx(params.weight_bytes / (params.hbm_Bps * params.hbm_efficiency))


def test_decode_is_memory_bound_for_small_batches_and_grows_with_kv(params):
    m = ComputeModel(params)
    hbm = params.hbm_Bps * params.hbm_efficiency
    assert m.decode_time(1, 1000) == pytest.approx((params.weight_bytes + 1000 * 131072) / hbm)
    assert m.decode_time(64, 64 * 4000) > m.decode_time(64, 64 * 1000) > m.decode_time(1, 1000)
    assert m.decode_time(0, 0) == 0.0


def test_tensor_parallel_splits_the_work():
    one = ComputeModel.from_resolved(resolved())
    two = ComputeModel.from_resolved(resolved(hardware={"tp": 2}))
    assert two.prefill_time([(8192, 0)]) == pytest.approx(one.prefill_time([(8192, 0)]) / 2, rel=1e-6)


def test_overrides_replace_fields_and_reject_unknown_ones(params):
    m = ComputeModel(params.with_overrides(mfu=params.mfu / 2))
    assert m.prefill_time([(8192, 0)]) == pytest.approx(2 * ComputeModel(params).prefill_time([(8192, 0)]))
    with pytest.raises(ValueError, match="unknown compute parameter"):
        params.with_overrides(flux_capacitor=1.0)
    with pytest.raises(ValueError, match="mfu"):
        params.with_overrides(mfu=0.0)
