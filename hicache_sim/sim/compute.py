"""GPU compute time of a scheduler step: a roofline over the model x GPU presets.

Prefill of ``n`` new tokens after ``c`` tokens already in the KV cache, on one rank:
    linear    = 2 x active_params x n                                  (GEMMs)
    attention = 4 x layers x attn_width x (n x c + n (n + 1) / 2)       (QK^T and PV, causal)
    bytes     = weights + KV of the context read once
    time      = max(linear / (linear_peak x linear_mfu) + attention / (peak x attention_mfu),
                    bytes / (HBM x hbm_efficiency))
The two efficiencies differ: a short prompt is GEMM work, a long one attention work, and kernels
reach different fractions of peak on them. ``linear_peak`` is the fp8 tensor peak when the model's
weights are fp8 and the GPU has fp8 tensor cores, else the bf16 peak (attention runs in bf16).
Decode of a batch of ``B`` requests holding ``K`` KV tokens in total:
    time   = max((weights read + K x kv_bytes) / (HBM x eff), linear / ... + attention / ...)

Every parameter is per rank: tensor parallelism ``tp`` splits weights, FLOPs and KV heads; pipeline
parallelism ``pp`` gives each stage ``layers / pp`` layers (and their weights and KV). Under PP a
prefill micro-batch occupies each stage for ``prefill_time`` (what it returns) and reaches the last
stage after ``pp`` times that (``prefill_latency``); a decode step keeps the pipeline full with up to
``pp`` micro-batches of ``B / pp`` requests, so every request gets its next token after ``pp`` stage
times of its micro-batch. Activation transfers between stages are not modelled.
A step also pays ``step_overhead_s`` (scheduling, kernel launch), once per micro-batch.

The model is a class with a small interface (``prefill_time``, ``decode_time``, ``num_layers``,
``step_overhead_s``, ``pp``) so a calibrated model can replace it; ``ComputeParams.with_overrides``
takes the fields a calibration file measures.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from ..hardware.presets import WEIGHT_BYTES
from ..scenario import Resolved, compute_knobs


@dataclass(frozen=True)
class ComputeParams:
    """Roofline inputs, per GPU rank. Units: FLOP/s, bytes/s, bytes, seconds."""

    peak_flops: float
    linear_mfu: float
    attention_mfu: float
    hbm_Bps: float
    hbm_efficiency: float
    step_overhead_s: float
    num_layers: int
    active_params: float
    weight_bytes: float
    attn_width: int
    kv_bytes_per_token: float
    tp: int = 1
    pp: int = 1
    linear_peak_flops: float = 0.0  # 0: the bf16 peak
    bytes_per_param: float = 2.0

    def __post_init__(self) -> None:
        for name in ("peak_flops", "linear_mfu", "attention_mfu", "hbm_Bps", "hbm_efficiency", "num_layers"):
            if getattr(self, name) <= 0:
                raise ValueError(f"compute.{name} must be > 0, got {getattr(self, name)}")
        for name in ("tp", "pp", "bytes_per_param"):
            if getattr(self, name) <= 0:
                raise ValueError(f"compute.{name} must be > 0, got {getattr(self, name)}")
        for name in ("step_overhead_s", "active_params", "weight_bytes", "attn_width", "kv_bytes_per_token"):
            if getattr(self, name) < 0:
                raise ValueError(f"compute.{name} must be >= 0, got {getattr(self, name)}")
        for name in ("linear_mfu", "attention_mfu", "hbm_efficiency"):
            if getattr(self, name) > 1:
                raise ValueError(f"compute.{name} must be <= 1, got {getattr(self, name)}")

    @classmethod
    def from_resolved(cls, r: Resolved) -> ComputeParams:
        """Preset roofline of the scenario's model on its GPU, one rank of ``tp x pp``, with the
        hardware knobs as resolved (scenario, else calibration file, else defaults)."""
        hw = r.scenario.hardware
        k = r.compute_knobs or compute_knobs(hw, None)
        m = r.model
        ranks = hw.tp * hw.pp
        per_param = WEIGHT_BYTES[m.weights_dtype]
        fp8 = m.weights_dtype == "fp8" and r.gpu.fp8_tflops is not None
        return cls(
            peak_flops=r.gpu.bf16_tflops * 1e12,
            linear_peak_flops=(r.gpu.fp8_tflops if fp8 else r.gpu.bf16_tflops) * 1e12,
            linear_mfu=k["linear_mfu"],
            attention_mfu=k["attention_mfu"],
            hbm_Bps=r.gpu.hbm_gbps * 1e9,
            hbm_efficiency=k["hbm_efficiency"],
            step_overhead_s=k["step_overhead_us"] * 1e-6,
            num_layers=r.stage_layers,
            active_params=m.active_params_b * 1e9 / ranks,
            weight_bytes=m.params_b * 1e9 * per_param / ranks,
            attn_width=m.q_heads * m.head_dim // hw.tp,
            kv_bytes_per_token=float(r.bytes_per_token),
            tp=hw.tp,
            pp=hw.pp,
            bytes_per_param=per_param,
        )

    def with_overrides(self, **changes: float) -> ComputeParams:
        """A copy with some fields replaced (a calibration's measured values)."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ValueError(f"unknown compute parameter(s): {', '.join(sorted(unknown))}")
        return dataclasses.replace(self, **changes)


class StepTimeModel(Protocol):
    """What the scheduler needs from a compute model (``pp``: pipeline stages, 1 when absent)."""

    num_layers: int
    step_overhead_s: float

    def prefill_time(self, chunks: Iterable[tuple[int, int]]) -> float: ...

    def decode_time(self, batch_size: int, kv_tokens: int) -> float: ...


class ComputeModel:
    """Roofline step times from :class:`ComputeParams` (GPU time only; overhead is separate)."""

    def __init__(self, params: ComputeParams) -> None:
        self.params = params
        self.num_layers = params.num_layers
        self.step_overhead_s = params.step_overhead_s
        self.pp = params.pp
        self._linear = (params.linear_peak_flops or params.peak_flops) * params.linear_mfu
        self._attention = params.peak_flops * params.attention_mfu
        self._hbm = params.hbm_Bps * params.hbm_efficiency
        self._attn = 4.0 * params.num_layers * params.attn_width

    @classmethod
    def from_resolved(cls, r: Resolved, **overrides: float) -> ComputeModel:
        """Preset model of a resolved scenario, optionally with calibrated fields."""
        params = ComputeParams.from_resolved(r)
        return cls(params.with_overrides(**overrides) if overrides else params)

    def prefill_time(self, chunks: Iterable[tuple[int, int]]) -> float:
        """Seconds one rank (one pipeline stage) spends on ``(new_tokens, cached_context_tokens)`` chunks
        prefilled in one batch."""
        p = self.params
        tokens = 0
        pairs = 0.0
        context = 0
        for n, c in chunks:
            tokens += n
            pairs += n * c + n * (n + 1) / 2.0
            context += c
        if tokens == 0:
            return 0.0
        compute = 2.0 * p.active_params * tokens / self._linear + self._attn * pairs / self._attention
        memory = p.weight_bytes + context * p.kv_bytes_per_token
        return max(compute, memory / self._hbm)

    def prefill_latency(self, chunks: Iterable[tuple[int, int]]) -> float:
        """Seconds from the first stage starting a prefill batch to the last stage finishing it."""
        return self.pp * self.prefill_time(chunks)

    def decode_time(self, batch_size: int, kv_tokens: int) -> float:
        """Seconds until every one of ``batch_size`` requests (``kv_tokens`` in total) has its next token:
        one decode step, or under PP ``pp`` stage times of one of its micro-batches."""
        if batch_size <= 0:
            return 0.0
        micro = min(self.pp, batch_size)
        return self.pp * self._decode_stage(batch_size / micro, kv_tokens / micro)

    def _decode_stage(self, batch: float, kv_tokens: float) -> float:
        p = self.params
        # A MoE batch touches at most all experts; a dense model reads every weight each step.
        weights = min(p.weight_bytes, p.bytes_per_param * p.active_params * batch)
        memory = weights + kv_tokens * p.kv_bytes_per_token
        compute = 2.0 * p.active_params * batch / self._linear + self._attn * kv_tokens / self._attention
        return max(memory / self._hbm, compute)
