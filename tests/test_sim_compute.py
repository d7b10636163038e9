"""The roofline compute model: linear and attention terms with their own efficiencies, decode memory
vs compute bound, presets from the model x GPU tables, tensor and pipeline parallelism, overrides for
calibration."""

from __future__ import annotations

import math

import pytest
from test_sim_support import resolved

from hicache_sim.sim import ComputeModel, ComputeParams

#: The roofline alone: no per-layer host floor for prefill, no per-layer decode cost (tested on their own
#: below), so the tests of the roofline's terms compare against those terms only.
ROOFLINE = {"prefill_graph_us_per_layer": 0.0, "prefill_eager_us_per_layer": 0.0, "decode_us_per_layer": 0.0}


@pytest.fixture(scope="module")
def params() -> ComputeParams:
    return ComputeParams.from_resolved(resolved(hardware=ROOFLINE))


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
    # 671 B / 8 at 1 B a parameter, plus the 0.92 B MLA down-projections every rank holds whole x 7/8
    assert p.bytes_per_param == 1.0 and p.weight_bytes == pytest.approx(671e9 / 8 + 923_592_704 * 7 / 8)
    bf16 = ComputeParams.from_resolved(
        resolved(
            model={"preset": "deepseek-r1", "weights_dtype": "bf16"}, hardware={"tp": 8}, cache={"device_tokens": 6400}
        )
    )
    assert bf16.linear_peak_flops == bf16.peak_flops
    assert bf16.weight_bytes == pytest.approx(2 * (671e9 / 8 + 923_592_704 * 7 / 8))


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
    # Half the work per rank, plus two all-reduces per layer of 8192 bf16 rows of 4096 (64 MiB, above
    # SGLang's 8 MiB custom all-reduce cap: NCCL), ring factor 2 (2 - 1) / 2 = 1, at NCCL's bus
    # bandwidth for 64 MiB on H200, 475 / (1 + (12.93 / 64)^0.6276) = 347.6 GB/s, 10 us each:
    # 64 x (10 us + 193.1 us).
    busbw = 475e9 / (1 + (12.93 / 64) ** 0.6276)
    assert busbw == pytest.approx(347.6e9, rel=1e-3)
    allreduce = 2 * 32 * (10e-6 + 8192 * 4096 * 2 * 1.0 / busbw)
    assert allreduce == pytest.approx(13.0e-3, rel=1e-3)
    # Both ranks run the two norms per layer on the whole residual stream (8 bf16 rows of 4096, 32
    # layers: 2 MiB per token, at 0.8 x 4.8 TB/s): halving the per-GPU time took half of that away.
    norms = 8192 * 32 * 8 * 4096 * 2 / (4800e9 * 0.8)
    assert norms == pytest.approx(4.474e-3, rel=1e-3)
    want = one.prefill_time(chunk) / 2 + norms / 2 + allreduce
    assert tp2.prefill_time(chunk) == pytest.approx(want, rel=1e-6)
    # A stage holds half the layers (and does half the work) but the request crosses both stages.
    assert pp2.num_layers == 16 and pp2.pp == 2
    assert pp2.prefill_time(chunk) == pytest.approx(one.prefill_time(chunk) / 2, rel=1e-6)
    assert pp2.prefill_latency(chunk) == pytest.approx(one.prefill_time(chunk), rel=1e-6)


def test_pipeline_decode_keeps_the_per_token_latency_and_splits_the_kv_reads():
    one = ComputeModel.from_resolved(resolved(hardware=ROOFLINE))
    pp4 = ComputeModel.from_resolved(resolved(hardware={"pp": 4, **ROOFLINE}))
    p1 = one.params
    hbm = p1.hbm_Bps * p1.hbm_efficiency
    # One request: its token crosses four stages of a quarter of the weights each.
    assert pp4.decode_time(1, 1000) == pytest.approx(one.decode_time(1, 1000), rel=1e-9)
    # A full batch: four micro-batches in flight, every stage reads its weights once per micro-batch
    # (all weights once per token in all) and a quarter of the KV of a quarter of the requests.
    b, kv = 64, 64 * 4000
    assert pp4.decode_time(b, kv) == pytest.approx((p1.weight_bytes + kv * p1.kv_bytes_per_token / 4) / hbm)
    assert pp4.decode_time(b, kv) < one.decode_time(b, kv)


def test_a_pipeline_decode_step_pays_the_scheduler_overhead_per_micro_batch():
    """Under PP the scheduler runs one pass per decode micro-batch: ``min(pp, batch)`` overheads a step
    (one for a single request), the same charge the engine makes (the mutation pass found a single
    overhead per step surviving)."""
    pp4 = ComputeModel.from_resolved(resolved(hardware={"pp": 4, "step_overhead_us": 200.0, **ROOFLINE}))
    over = pp4.step_overhead_s
    assert over == pytest.approx(200e-6)
    assert pp4.decode_step_s(64, 64 * 4000) == pytest.approx(4 * over + pp4.decode_time(64, 64 * 4000), rel=1e-12)
    assert pp4.decode_step_s(2, 8000) == pytest.approx(2 * over + pp4.decode_time(2, 8000), rel=1e-12)
    assert pp4.decode_step_s(1, 4000) == pytest.approx(over + pp4.decode_time(1, 4000), rel=1e-12)


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


def _qwen3_235b_on_8_h800() -> ComputeModel:
    return ComputeModel.from_resolved(
        resolved(model="qwen3-235b-a22b", hardware={"gpu": "h800", "tp": 8}, cache={"device_tokens": 64 * 100})
    )


def test_moe_preset_splits_routed_experts_from_the_rest():
    # Qwen3-235B-A22B config.json: 94 layers, 128 experts of 1536 over hidden 4096, top 8: routed
    # 94 x 128 x 3 x 4096 x 1536 = 227.1 B of 235 B, 14.2 B of the 22 B active; one rank of 8 holds 1/8.
    p = _qwen3_235b_on_8_h800().params
    assert p.routed_params == pytest.approx(94 * 128 * 3 * 4096 * 1536 / 8)
    assert (p.num_experts, p.experts_per_token, p.hidden_size) == (128, 8, 4096)
    assert p.allreduce_Bps == 215e9 and p.moe_mfu == 0.25


def test_moe_prefill_runs_routed_experts_at_the_grouped_gemm_efficiency_plus_tp_allreduces():
    m = _qwen3_235b_on_8_h800()
    n = 8192
    routed_active = 94 * 8 * 3 * 4096 * 1536 / 8  # per token, per rank
    dense_active = 22e9 / 8 - routed_active
    # The grouped GEMM runs each expert's rows padded to blocks of 64 (below): 543.3 rows per expert
    # on average where 8192 x 8 / 128 = 512 tokens reach it.
    rows = 128 * _padded_rows_exact(n, 16, 64)
    assert rows / 128 == pytest.approx(543.3, abs=0.05)
    routed = 2 * rows * routed_active / 8 / (989.4e12 * 0.25)
    linear = 2 * n * dense_active / (989.4e12 * 0.7) + routed
    attention = 4 * 94 * (64 * 128 // 8) * (n * (n + 1) / 2) / (989.4e12 * 0.6)
    # 8192 tokens reach every expert: the step reads all 58.75 GB of the rank's weights, 21.9 ms at
    # 0.8 x 3.35 TB/s, less than the compute.
    memory = 235e9 * 2 / 8 / (3350e9 * 0.8)
    assert memory < linear + attention
    # 2 x 94 all-reduces of 8192 x 4096 bf16 (64 MiB: NCCL), ring 2 x 7 / 8, 10 us each, at NCCL's bus
    # bandwidth for 64 MiB on H800, 215 / (1 + (12.93 / 64)^0.6276) = 157.3 GB/s (215 at large sizes).
    busbw = 215e9 / (1 + (12.93 / 64) ** 0.6276)
    allreduce = 188 * (10e-6 + n * 4096 * 2 * 1.75 / busbw)
    assert allreduce == pytest.approx(0.1422, rel=1e-3)
    # Every rank runs the two norms (8 rows of 4096) and the top-8 combine (8 expert rows written by
    # the down projection, read by the sum, 1 row written: 17 rows) per token and layer: 25 bf16 rows
    # of 4096 = 200 KiB, x 94 layers = 19.25 MB per token; TP 8 took 1/8 of it off the per-GPU figure.
    unsplit = 7 / 8 * n * 94 * 25 * 4096 * 2 / (3350e9 * 0.8)
    assert unsplit == pytest.approx(0.0515, rel=1e-2)
    assert m.prefill_time([(n, 0)]) == pytest.approx(linear + attention + unsplit + allreduce, rel=1e-9)


def _padded_rows_exact(tokens: int, one_in: int, block: int) -> float:
    """E[ceil(X / block) x block] for X ~ Binomial(tokens, 1 / one_in), summed over every x directly
    (the code sums block-spaced tails of a log-gamma pmf): the pmf by its ratio recurrence from
    P(X = 0) = q^tokens, which stays above the smallest double up to tokens of ~10,000 at one_in 16,
    and an exactly rounded sum (the big-integer sum this replaces took seconds at 8,192 tokens)."""
    q = (one_in - 1) / one_in
    assert tokens * math.log(q) > -700, "q^tokens would underflow: use a smaller case"
    ratio = 1 / (one_in - 1)  # p / q
    pmf, terms = q**tokens, []
    for x in range(tokens + 1):
        terms.append(pmf * (-(-x // block) * block))
        pmf *= (tokens - x) / (x + 1) * ratio
    return math.fsum(terms)


def test_fused_moe_pads_each_experts_rows_to_whole_blocks():
    # SGLang's fused MoE sorts the step's (token, expert) pairs by expert and pads each expert's rows
    # to a multiple of BLOCK_SIZE_M (moe_align_block_size): 16 rows while the step has at most as
    # many tokens as experts, 64 above (the default config). A 2,152-token prefill sends 134.5 tokens
    # to each of the 128 experts on average; padded to blocks of 64 that is 172.8 rows: the grouped
    # GEMM does 1 / 0.778 of the useful work. 32,768 tokens (2,048 per expert): 0.985.
    m = _qwen3_235b_on_8_h800()
    rows = m.expert_rows(2152)
    assert rows == pytest.approx(128 * _padded_rows_exact(2152, 16, 64), rel=1e-9)
    assert 2152 * 8 / rows == pytest.approx(0.778, abs=1e-3)
    assert 32768 * 8 / m.expert_rows(32768) == pytest.approx(0.985, abs=1e-3)
    # One decode token: its 8 experts, each one block of 16 rows.
    assert m.expert_rows(1) == pytest.approx(8 * 16)
    # 128 tokens still take blocks of 16, 129 blocks of 64.
    assert m.expert_rows(128) == pytest.approx(128 * _padded_rows_exact(128, 16, 16), rel=1e-9)
    assert m.expert_rows(129) == pytest.approx(128 * _padded_rows_exact(129, 16, 64), rel=1e-9)
    # The routed GEMM time follows the padded rows, the rest of the model does not.
    per_row = 94 * 3 * 4096 * 1536 / 8 / (989.4e12 * 0.25)
    dense = 2 * 2152 * (22e9 / 8 - 94 * 8 * 3 * 4096 * 1536 / 8) / (989.4e12 * 0.7)
    assert m.linear_time(2152) == pytest.approx(dense + 2 * rows * per_row, rel=1e-9)
    # A dense model has no expert rows.
    assert ComputeModel(ComputeParams.from_resolved(resolved())).expert_rows(2152) == 0.0


def test_moe_decode_reads_only_the_experts_its_tokens_reach():
    m = _qwen3_235b_on_8_h800()
    p = m.params
    hbm = 3350e9 * 0.8
    routed_bytes = p.routed_params * 2
    dense_bytes = 235e9 * 2 / 8 - routed_bytes
    # One token's all-reduce (8 KiB) runs SGLang's one-stage custom kernel: 7.2 us + its bytes below.
    ar = 188 * 7.2e-6
    # One token reaches exactly its 8 of 128 experts per layer: 1/16 of the routed weights.
    assert m.experts_touched(1) == pytest.approx(8)
    unsplit = 7 / 8 * 94 * 25 * 4096 * 2 / hbm  # one token's norms and top-8 combine (above)
    fixed = 94 * 47e-6  # each layer's small kernels (hardware.decode_us_per_layer)
    one = (dense_bytes + routed_bytes / 16) / hbm + unsplit + ar + 188 * 4096 * 2 * 1.75 / (0.311 * 215e9) + fixed
    assert m.decode_time(1, 0) == pytest.approx(one, rel=1e-9)
    # 64 tokens miss an expert with probability (120/128)^64 = 1.6%: 125.9 experts read.
    assert m.experts_touched(64) == pytest.approx(128 * (1 - (15 / 16) ** 64))
    assert m.experts_touched(64) == pytest.approx(125.95, abs=0.01)
    # A dense model reads every weight whatever the batch.
    dense = ComputeModel(ComputeParams.from_resolved(resolved()))
    assert dense.weights_read(1) == dense.params.weight_bytes == pytest.approx(8.03e9 * 2)


def test_no_allreduce_without_tensor_parallelism(params):
    m = ComputeModel(params)
    assert m.allreduce_time(8192) == 0.0
    tp8 = ComputeModel.from_resolved(resolved(hardware={"tp": 8}))
    # 64 all-reduces of one 4096-wide bf16 row through SGLang's one-stage custom kernel: its 7.2 us
    # fixed cost dominates (0.47 ms per decode step).
    assert tp8.allreduce_time(1) == pytest.approx(64 * (7.2e-6 + 4096 * 2 * 1.75 / (0.311 * 475e9)))


def test_moe_fields_that_contradict_the_model_size_are_refused():
    from hicache_sim.scenario.resolve import ConfigError

    with pytest.raises(ConfigError, match="experts_per_token"):
        resolved(model={"preset": "qwen3-235b-a22b", "experts_per_token": 200}, hardware={"tp": 8})
    with pytest.raises(ConfigError, match="routed experts alone"):
        resolved(model={"preset": "qwen3-235b-a22b", "num_experts": 256}, hardware={"tp": 8})


def test_unsplit_bytes_are_full_width_rows_that_tp_does_not_split():
    from hicache_sim.hardware.presets import MODELS
    from hicache_sim.sim.compute import unsplit_bytes_per_token

    # Llama-3.1-8B: two residual-add RMSNorms per layer, each reads and writes the hidden and residual
    # rows: 8 rows of 4096 bf16 x 32 layers = 2 MiB per token.
    assert unsplit_bytes_per_token(MODELS.get("llama-3.1-8b"), 32) == 32 * 8 * 4096 * 2 == 2_097_152
    # Qwen3-235B-A22B: + the top-8 combine (8 expert rows written, read, 1 row written) in all 94 layers.
    assert unsplit_bytes_per_token(MODELS.get("qwen3-235b-a22b"), 94) == 94 * 25 * 4096 * 2
    # DeepSeek-R1: 61 layers of 7168, the first 3 dense: 8 x 61 + 17 x 58 = 1,474 rows per token.
    assert unsplit_bytes_per_token(MODELS.get("deepseek-r1"), 61) == pytest.approx(1474 * 7168 * 2)
    # The same on every rank whatever the TP size; a pipeline stage moves its own layers' share.
    tp4 = ComputeParams.from_resolved(
        resolved(model="qwen3-235b-a22b", hardware={"gpu": "h800", "tp": 4}, cache={"device_tokens": 6400})
    )
    assert _qwen3_235b_on_8_h800().params.unsplit_bytes_per_token == tp4.unsplit_bytes_per_token
    assert ComputeParams.from_resolved(resolved(hardware={"pp": 2})).unsplit_bytes_per_token == 16 * 8 * 4096 * 2


def test_unsplit_kernels_add_only_what_tp_took_away(params):
    # One GPU: the per-GPU efficiencies already hold the norms; nothing is added.
    assert ComputeModel(params).unsplit_time(8192) == 0.0
    # TP 8: 7/8 of the traffic comes back, so TP 8 of the same step costs more than 1/8 of TP 1's.
    m8 = _qwen3_235b_on_8_h800()
    assert m8.unsplit_time(1) == pytest.approx(7 / 8 * 94 * 25 * 4096 * 2 / (3350e9 * 0.8))


def test_a_short_eager_prefill_waits_for_the_host_issuing_its_layers():
    """SGLang runs a prefill forward eagerly (no prefill CUDA graph) as Python issuing each layer's
    kernels: a 1-token DeepSeek-V3 forward took 82.6 ms over 61 layers (sgl-project/sglang#12160), so a
    prefill lasts at least layers x 1.35 ms however little GPU work it has; a long one is GPU-bound."""
    eager = ComputeModel.from_resolved(resolved(scheduler={"cuda_graph_backend_prefill": "disabled"}))
    graph = ComputeModel.from_resolved(resolved())  # auto: breakable, 0.38 ms per layer
    roof = ComputeModel.from_resolved(resolved(hardware=ROOFLINE))
    assert eager.prefill_time([(1, 0)]) == pytest.approx(32 * 1.35e-3)
    assert graph.prefill_time([(1, 0)]) == pytest.approx(32 * 0.38e-3)
    assert roof.prefill_time([(1, 0)]) < graph.prefill_time([(1, 0)])
    long = [(32768, 0)]
    assert roof.prefill_time(long) > 32 * 1.35e-3
    assert eager.prefill_time(long) == graph.prefill_time(long) == roof.prefill_time(long)


def test_the_prefill_graph_backend_resolves_as_sglang_0523_resolves_it():
    assert resolved().prefill_graph == "breakable"
    assert resolved(hardware={"pp": 2}).prefill_graph == "disabled"  # PP turns the default off
    assert resolved(hardware={"pp": 2}, scheduler={"cuda_graph_backend_prefill": "full"}).prefill_graph == "full"
    pp2 = ComputeModel.from_resolved(resolved(hardware={"pp": 2}))
    assert pp2.prefill_time([(1, 0)]) == pytest.approx(16 * 1.35e-3)  # 16 layers per stage, eager
    # DeepSeek (MLA) on a B200 runs trtllm_mla, for which SGLang turns the prefill graph off
    r1 = dict(model="deepseek-r1", hardware={"gpu": "b200", "tp": 8}, cache={"device_tokens": 64 * 100})
    assert resolved(**r1).prefill_graph == "disabled"
    assert resolved(**{**r1, "hardware": {"gpu": "h200", "tp": 8}}).prefill_graph == "breakable"
    assert resolved(model="qwen3-235b-a22b", hardware={"gpu": "b200", "tp": 8}).prefill_graph == "breakable"


def test_every_decode_step_pays_its_layers_small_kernels():
    base = ComputeModel.from_resolved(resolved(hardware=ROOFLINE))
    with_fixed = ComputeModel.from_resolved(resolved())
    for batch, kv in ((1, 1000), (64, 64 * 4000)):
        assert with_fixed.decode_time(batch, kv) - base.decode_time(batch, kv) == pytest.approx(32 * 47e-6)
    pp4 = ComputeModel.from_resolved(resolved(hardware={"pp": 4}))
    pp4_roof = ComputeModel.from_resolved(resolved(hardware={"pp": 4, **ROOFLINE}))
    # one token crosses the four stages of 8 layers: the same 32 layers' cost
    assert pp4.decode_time(1, 1000) - pp4_roof.decode_time(1, 1000) == pytest.approx(32 * 47e-6)


# --- attention backends with a rule (hardware/attention.py) ----------------------------------------

#: Qwen3-8B on one A100-SXM4-40GB under --attention-backend triton, as the Mooncake SSD-offload case runs it.
TRITON_A100 = {"gpu": "a100-40g", "tp": 1, "attention_backend": "triton", **ROOFLINE}


def test_triton_prefill_rereads_the_prefix_once_per_query_head_and_tile():
    """SGLang 0.5.23's triton extend kernel on sm80 at head dim 128 takes BLOCK_M 128; each of 32 query
    heads x ceil(4096 / 128) = 32 tiles streams the 28,672 cached tokens' K and V of its KV head (2 x 128
    x 2 B) with an int64 index each, then the new tokens' K and V up to its own tile's end; Q in and O
    out once. Derived by hand, per layer, times 36 layers; the kernel is then HBM-bound (1.2 x its FLOPs
    time at the preset efficiencies) and the step is GEMMs + that kernel."""
    r = resolved(model={"preset": "qwen3-8b"}, hardware=TRITON_A100)
    p = ComputeParams.from_resolved(r)
    assert (p.attn_tile_rows, p.attn_heads, p.attn_kv_bytes, p.attn_index_bytes) == (128, 32, 512.0, 8.0)
    n, c = 4096, 28672
    prefix = 32 * c * (512 + 8)  # 32 tiles
    extend = sum(min(n, 128 * (m + 1)) for m in range(32)) * 512  # causal: up to each tile's end
    per_layer = 32 * (prefix + extend) + n * 4096 * 2 * 2
    assert ComputeModel(p).attention_bytes([(n, c)]) == 36 * per_layer
    hbm = 1555e9 * 0.8
    flops = 4 * 36 * 4096 * (n * c + n * (n + 1) / 2)
    kernel = max(flops / (312e12 * 0.6), 36 * per_layer / hbm)
    assert 36 * per_layer / hbm / (flops / (312e12 * 0.6)) == pytest.approx(1.2, abs=0.02)  # memory-bound
    linear = 2 * p.active_params * n / (312e12 * 0.7)
    assert ComputeModel(p).prefill_time([(n, c)]) == pytest.approx(max(linear, p.weight_bytes / hbm) + kernel)
    # A tile the new tokens do not fill is still one program: 200 tokens are 2 tiles, reading 128 + 200.
    assert ComputeModel(p).attention_bytes([(200, 1000)]) == 36 * (
        32 * (2 * 1000 * 520 + (128 + 200) * 512) + 200 * 4096 * 4
    )


def test_backends_without_a_rule_keep_the_roofline_and_decode_is_unchanged():
    """SGLang's default (no backend given), flashinfer and fa3 have no rule: the same step times to the
    bit. triton changes prefill only; an MLA model under triton runs other kernels and keeps the roofline."""
    base = ComputeModel.from_resolved(resolved(model={"preset": "qwen3-8b"}, hardware={"gpu": "a100-40g"}))
    for backend in ("flashinfer", "fa3"):
        other = resolved(model={"preset": "qwen3-8b"}, hardware={"gpu": "a100-40g", "attention_backend": backend})
        m = ComputeModel.from_resolved(other)
        assert m.params == base.params
        assert m.prefill_time([(4096, 28672)]) == base.prefill_time([(4096, 28672)])
    triton = ComputeModel.from_resolved(resolved(model={"preset": "qwen3-8b"}, hardware=TRITON_A100))
    plain = ComputeModel.from_resolved(
        resolved(model={"preset": "qwen3-8b"}, hardware={"gpu": "a100-40g", "tp": 1, **ROOFLINE})
    )
    assert triton.prefill_time([(4096, 28672)]) > plain.prefill_time([(4096, 28672)])
    assert triton.decode_time(16, 16 * 30000) == plain.decode_time(16, 16 * 30000)
    mla = resolved(model={"preset": "deepseek-v3"}, hardware={"gpu": "h200", "tp": 8, "attention_backend": "triton"})
    assert ComputeParams.from_resolved(mla).attn_tile_rows == 0


def test_every_gpu_preset_has_an_architecture_the_triton_rule_knows():
    """A GPU preset added without its architecture would fail only under --attention-backend triton."""
    from hicache_sim.hardware.attention import ATTENTION_RULES, GPU_ARCH
    from hicache_sim.hardware.presets import GPUS

    assert set(GPU_ARCH) == set(GPUS.names())
    rule = ATTENTION_RULES.get("triton")
    # sglang 0.5.23 _get_block_sizes_for_extend_attention at head dims 64 / 128 / 256 / 576
    want = {"sm80": (128, 128, 64, 32), "sm86": (64, 64, 64, 32), "sm90": (128, 128, 64, 32), "sm100": (64, 64, 64, 16)}
    for arch, rows in want.items():
        assert tuple(rule.tile_rows(arch, d) for d in (64, 128, 256, 576)) == rows, arch
    assert rule.tile_rows("gfx942", 128) == 64


def test_decode_attention_flops_count_once_the_step_is_compute_bound():
    """A decode step is max(bytes / HBM, FLOPs / peak): with the KV reads taken out (0 bytes a token) and
    a long context, the step is compute-bound and each cached token adds its attention FLOPs,
    4 x layers x width, at the attention efficiency (the mutation pass found this term untested: real
    presets decode memory-bound)."""
    from dataclasses import replace

    p = replace(ComputeParams.from_resolved(resolved()), kv_bytes_per_token=0.0)
    m = ComputeModel(p)
    per_token = 4.0 * p.num_layers * p.attn_width / (p.peak_flops * p.attention_mfu)
    b, kv1, kv2 = 8, 10_000_000, 20_000_000
    assert m.weights_read(b) / (p.hbm_Bps * p.hbm_efficiency) < per_token * kv1  # compute-bound at both points
    assert m.decode_time(b, kv2) - m.decode_time(b, kv1) == pytest.approx(per_token * (kv2 - kv1), rel=1e-9)
