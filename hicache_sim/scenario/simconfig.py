"""A resolved scenario as the plain dataclasses the timed world runs on (:class:`~hicache_sim.simconfig.SimConfig`):
the scheduler policy (the ``scheduler`` section with SGLang's values for what it leaves ``auto``), the
compute model's roofline parameters (presets and knobs), the links, the storage and the sampling interval.
``Resolved.sim_config()`` calls :func:`sim_config`; ``sim/`` never reads the pydantic scenario."""

from __future__ import annotations

from ..core.sizing import DTYPE_BYTES
from ..hardware.allreduce import MIB
from ..hardware.attention import ATTENTION_RULES, GPU_ARCH
from ..hardware.params import weight_bytes_per_gpu
from ..hardware.presets import WEIGHT_BYTES
from ..hardware.speculative import SPEC_ALGORITHMS, draft_compute_fields
from ..simconfig import ComputeParams, SchedulerPolicy, SimConfig, SpecRound, unsplit_bytes_per_token
from .resolve import PREFILL_FLOOR_KNOB, Resolved, attn_tp, compute_knobs, speculative_round


def sim_config(r: Resolved) -> SimConfig:
    """Everything the timed world reads from ``r`` (built again on each call: ``Resolved`` is mutable)."""
    sc = r.scenario
    return SimConfig(
        cache=r.cache,
        links=r.links,
        pcie_sharing=sc.hardware.pcie.sharing,
        storage_read_Bps=r.storage_read_Bps,
        storage_write_Bps=r.storage_write_Bps,
        storage_latency_s=r.storage_latency_s,
        storage_offload_read_Bps=r.storage_offload_read_Bps,
        storage_offload_latency_s=r.storage_offload_latency_s,
        request_overhead_s=r.request_overhead_s,
        mem_layout=r.mem_layout,
        stage_layers=r.stage_layers,
        kv_factor=r.kv_factor,
        kv_heads_per_rank=r.kv_heads_per_rank,
        timeseries_interval_s=sc.metrics.timeseries_interval_s,
        scheduler=scheduler_policy(r),
        compute=compute_params(r),
        dp_ranks=r.dp_ranks,
        attn_dp=sc.hardware.attn_dp,
        load_balance_method=sc.hardware.load_balance_method,
        side_copies=r.side_copies,
    )


def scheduler_policy(r: Resolved) -> SchedulerPolicy:
    """The scenario's scheduler section with SGLang's values for what it leaves ``auto``."""
    sc = r.scenario
    s = sc.scheduler
    return SchedulerPolicy(
        chunked_prefill_tokens=r.chunked_prefill_size,
        max_running_requests=r.max_running_requests,
        max_prefill_tokens=s.max_prefill_tokens,
        reserve_last_token=s.reserve_last_token,
        insert_output=s.insert_output,
        schedule_policy=s.schedule_policy,
        seed=sc.seed,
        # Attention DP scales --schedule-conservativeness by 0.3 (sglang 0.5.23 handle_data_parallelism).
        init_new_token_ratio=SchedulerPolicy.init_new_token_ratio * (0.3 if sc.hardware.attn_dp > 1 else 1.0),
    )


def compute_params(r: Resolved) -> ComputeParams:
    """Preset roofline of the scenario's model on its GPU, one rank of ``tp x pp``, with the
    hardware knobs as resolved (scenario, else calibration file, else defaults)."""
    hw = r.scenario.hardware
    k = r.compute_knobs or compute_knobs(hw, None)
    m = r.model
    ranks = hw.tp * hw.pp
    per_param = WEIGHT_BYTES[m.weights_dtype]
    fp8 = m.weights_dtype == "fp8" and r.gpu.fp8_tflops is not None
    tiling = attention_tiling(r)
    return ComputeParams(
        peak_flops=r.gpu.bf16_tflops * 1e12,
        linear_peak_flops=(r.gpu.fp8_tflops if fp8 and r.gpu.fp8_tflops is not None else r.gpu.bf16_tflops) * 1e12,
        linear_mfu=k["linear_mfu"],
        attention_mfu=k["attention_mfu"],
        hbm_Bps=r.gpu.hbm_gbps * 1e9,
        hbm_efficiency=k["hbm_efficiency"],
        step_overhead_s=k["step_overhead_us"] * 1e-6,
        num_layers=r.stage_layers,
        active_params=m.active_params_b * 1e9 / ranks,
        # Per GPU: under attention DP the attention is sharded over the group only (hardware/params.py).
        weight_bytes=weight_bytes_per_gpu(m, hw.tp, hw.pp, hw.attn_dp),
        # Query heads are split over one attention group's GPUs (tp, or tp / attn_dp with attention DP).
        attn_width=m.q_heads * m.head_dim // attn_tp(hw),
        kv_bytes_per_token=float(r.bytes_per_token),
        tp=hw.tp,
        pp=hw.pp,
        bytes_per_param=per_param,
        routed_params=m.routed_params_b * 1e9 / ranks,
        num_experts=m.num_experts,
        experts_per_token=m.experts_per_token,
        moe_mfu=k["moe_mfu"],
        hidden_size=m.hidden,
        allreduce_Bps=(hw.allreduce_busbw_gbps or r.gpu.allreduce_busbw_gbps) * 1e9,
        allreduce_latency_s=k["allreduce_latency_us"] * 1e-6,
        allreduce_half_peak_bytes=k["allreduce_half_peak_mib"] * MIB,
        allreduce_exponent=k["allreduce_curve_exponent"],
        custom_allreduce_max_bytes=hw.custom_allreduce_max_mib * MIB,
        allreduce_fabric=r.gpu.allreduce_fabric,
        unsplit_bytes_per_token=unsplit_bytes_per_token(m, r.stage_layers),
        prefill_host_s_per_layer=k[PREFILL_FLOOR_KNOB[r.prefill_graph]] * 1e-6,
        decode_s_per_layer=k["decode_us_per_layer"] * 1e-6,
        attn_tile_rows=tiling[0],
        attn_heads=tiling[1],
        attn_kv_bytes=tiling[2],
        attn_index_bytes=tiling[3],
        spec=spec_round(r),
    )


def spec_round(r: Resolved) -> SpecRound | None:
    """Speculative decoding's round for the compute model (None: its time not modelled, no accept_len)."""
    steps = speculative_round(r.scenario, r.model)
    spec = r.scenario.model.speculative
    if steps is None or spec is None or spec.accept_len is None:
        return None
    draft: tuple[tuple[str, float], ...] = ()
    if SPEC_ALGORITHMS.get(spec.algorithm).draft_forward:
        m, ranks = r.model, r.scenario.hardware.tp * r.scenario.hardware.pp
        fields = draft_compute_fields(
            r.draft,
            r.stage_layers,
            m.routed_params_b * 1e9 / ranks,
            m.num_experts,
            m.experts_per_token,
            unsplit_bytes_per_token(m, r.stage_layers),
        )
        draft = tuple(sorted(fields.items()))
    return SpecRound(steps.num_steps, steps.topk, steps.num_draft_tokens, spec.accept_len, draft)


def attention_tiling(r: Resolved) -> tuple[int, int, float, float]:
    """The scenario's attention backend's rule as ``ComputeParams`` fields (query rows per program
    tile, query heads per rank, K and V bytes of one head and token, index bytes per prefix token);
    zeros (the roofline) when the backend is SGLang's default or has no rule, or the model's
    attention is MLA (its prefill runs other kernels)."""
    backend = r.scenario.hardware.attention_backend
    if backend is None or backend not in ATTENTION_RULES or r.model.attention != "mha":
        return 0, 0, 0.0, 0.0
    rule = ATTENTION_RULES.get(backend)
    head_dim = r.model.head_dim
    return (
        rule.tile_rows(GPU_ARCH[r.gpu.name], head_dim),
        r.model.q_heads // attn_tp(r.scenario.hardware),
        2.0 * head_dim * DTYPE_BYTES[r.scenario.model.dtype],
        float(rule.index_bytes),
    )
