"""GPU compute time of a scheduler step: a roofline over the model x GPU presets.

Prefill of ``n`` new tokens after ``c`` tokens already in the KV cache:
    FLOPs  = 2 x active_params x n  +  4 x layers x attn_width x (n x c + n (n + 1) / 2)
    bytes  = weights + KV of the context read once
    time   = max(FLOPs / (peak x mfu), bytes / (HBM x hbm_efficiency))
Decode of a batch of ``B`` requests holding ``K`` KV tokens in total:
    time   = max((weights read + K x kv_bytes) / (HBM x eff), (2 x active x B + 4 x layers x W x K) / (peak x mfu))
Both are per GPU with tensor parallelism ``tp`` (weights, FLOPs and KV split across ranks). A step
also pays ``step_overhead_s`` (scheduling, kernel launch), once.

The model is a class with a small interface (``prefill_time``, ``decode_time``, ``num_layers``,
``step_overhead_s``) so a calibrated model can replace it; ``ComputeParams.with_overrides`` takes
the fields a calibration file measures.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from ..scenario import Resolved

BYTES_PER_PARAM = 2  # bf16 weights


@dataclass(frozen=True)
class ComputeParams:
    """Roofline inputs, per GPU rank. Units: FLOP/s, bytes/s, bytes, seconds."""

    peak_flops: float
    mfu: float
    hbm_Bps: float
    hbm_efficiency: float
    step_overhead_s: float
    num_layers: int
    active_params: float
    weight_bytes: float
    attn_width: int
    kv_bytes_per_token: float
    tp: int = 1

    def __post_init__(self) -> None:
        for name in ("peak_flops", "mfu", "hbm_Bps", "hbm_efficiency", "num_layers", "tp"):
            if getattr(self, name) <= 0:
                raise ValueError(f"compute.{name} must be > 0, got {getattr(self, name)}")
        for name in ("step_overhead_s", "active_params", "weight_bytes", "attn_width", "kv_bytes_per_token"):
            if getattr(self, name) < 0:
                raise ValueError(f"compute.{name} must be >= 0, got {getattr(self, name)}")

    @classmethod
    def from_resolved(cls, r: Resolved) -> ComputeParams:
        """Preset roofline of the scenario's model on its GPU, with the hardware section's knobs."""
        hw = r.scenario.hardware
        m = r.model
        tp = hw.tp
        return cls(
            peak_flops=r.gpu.bf16_tflops * 1e12,
            mfu=hw.mfu,
            hbm_Bps=r.gpu.hbm_gbps * 1e9,
            hbm_efficiency=hw.hbm_efficiency,
            step_overhead_s=hw.step_overhead_us * 1e-6,
            num_layers=m.num_layers,
            active_params=m.active_params_b * 1e9 / tp,
            weight_bytes=m.params_b * 1e9 * BYTES_PER_PARAM / tp,
            attn_width=m.q_heads * m.head_dim // tp,
            kv_bytes_per_token=float(r.bytes_per_token),
            tp=tp,
        )

    def with_overrides(self, **changes: float) -> ComputeParams:
        """A copy with some fields replaced (a calibration's measured values)."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ValueError(f"unknown compute parameter(s): {', '.join(sorted(unknown))}")
        return dataclasses.replace(self, **changes)


class StepTimeModel(Protocol):
    """What the scheduler needs from a compute model."""

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
        self._flops = params.peak_flops * params.mfu
        self._hbm = params.hbm_Bps * params.hbm_efficiency
        self._attn = 4.0 * params.num_layers * params.attn_width

    @classmethod
    def from_resolved(cls, r: Resolved, **overrides: float) -> ComputeModel:
        """Preset model of a resolved scenario, optionally with calibrated fields."""
        params = ComputeParams.from_resolved(r)
        return cls(params.with_overrides(**overrides) if overrides else params)

    def prefill_time(self, chunks: Iterable[tuple[int, int]]) -> float:
        """Seconds to prefill ``(new_tokens, cached_context_tokens)`` chunks in one batch."""
        p = self.params
        flops = 0.0
        context = 0
        for n, c in chunks:
            flops += 2.0 * p.active_params * n + self._attn * (n * c + n * (n + 1) / 2.0)
            context += c
        if flops == 0.0:
            return 0.0
        memory = p.weight_bytes + context * p.kv_bytes_per_token
        return max(flops / self._flops, memory / self._hbm)

    def decode_time(self, batch_size: int, kv_tokens: int) -> float:
        """Seconds of one decode step for ``batch_size`` requests holding ``kv_tokens`` in total."""
        if batch_size <= 0:
            return 0.0
        p = self.params
        # A MoE batch touches at most all experts; a dense model reads every weight each step.
        weights = min(p.weight_bytes, BYTES_PER_PARAM * p.active_params * batch_size)
        memory = weights + kv_tokens * p.kv_bytes_per_token
        flops = 2.0 * p.active_params * batch_size + self._attn * kv_tokens
        return max(memory / self._hbm, flops / self._flops)
