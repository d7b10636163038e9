"""What the timed world runs on, as plain frozen dataclasses: the scheduler's policy, the compute
model's parameters, the links and the sampling interval (:class:`SimConfig`).

``scenario/simconfig.py`` builds a :class:`SimConfig` from a resolved scenario (``Resolved.sim_config()``);
``sim/`` reads only these classes, never the pydantic scenario, so the world can be driven without a
YAML file and the floors stay one way: ``sim/`` never imports ``hicache_sim.scenario``
(tests/test_core_imports.py). This module imports neither simpy nor pydantic: resolving a scenario for
an instant run loads neither.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from .core.config import CacheConfig
from .hardware.allreduce import CUSTOM_MAX_MIB, MIB, NCCL_EXPONENT, NCCL_HALF_PEAK_MIB
from .hardware.linkmodel import LinkParams
from .hardware.presets import ModelPreset

# Activations (the residual stream, expert outputs) are bf16 whatever the weights' dtype.
ACTIVATION_BYTES = 2


class HasSimConfig(Protocol):
    """Anything that gives the world its configuration: a resolved scenario (``Resolved``)."""

    def sim_config(self) -> SimConfig: ...


@dataclass(frozen=True)
class SpecRound:
    """Speculative decoding's round, timed (``sim/compute.py`` ``ComputeModel.spec_round_time``):
    ``num_steps``, ``topk`` and ``num_draft_tokens`` as SGLang resolves them, ``accept_len`` the mean tokens a request
    gets per round, and ``draft`` the :class:`ComputeParams` fields that make the target's roofline the
    draft model's (``hardware/speculative.py`` ``draft_compute_fields``; empty: no draft forward, NGRAM)."""

    num_steps: int
    topk: int
    num_draft_tokens: int
    accept_len: float
    draft: tuple[tuple[str, float], ...] = ()


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
    # Mixture of experts (0 experts: dense): this rank's routed-expert parameters (every expert of
    # its layers, a 1/tp slice of each), experts per layer, top-k, and the grouped GEMMs' efficiency.
    routed_params: float = 0.0
    num_experts: int = 0
    experts_per_token: int = 0
    moe_mfu: float = 0.25
    # Tensor-parallel all-reduce: residual width, large-message bus bandwidth (B/s), fixed cost of one
    # NCCL collective, NCCL's size curve (half-peak size in bytes, exponent), SGLang's custom
    # all-reduce cap (bytes, 0: none) and the fabric whose kernels run (hardware/allreduce.py).
    hidden_size: int = 0
    allreduce_Bps: float = 0.0
    allreduce_latency_s: float = 0.0
    allreduce_half_peak_bytes: float = NCCL_HALF_PEAK_MIB * MIB
    allreduce_exponent: float = NCCL_EXPONENT
    custom_allreduce_max_bytes: float = CUSTOM_MAX_MIB * MIB
    allreduce_fabric: str = "nvlink"
    # HBM bytes per token of the kernels TP does not split (norms, top-k combine), this rank's layers.
    unsplit_bytes_per_token: float = 0.0
    # Host seconds to issue one layer of a prefill forward (eager, or between a prefill graph's breaks):
    # a prefill takes at least num_layers x this, however little GPU work it has.
    prefill_host_s_per_layer: float = 0.0
    # GPU seconds per layer of a decode step beyond the roofline: its small kernels' fixed durations.
    decode_s_per_layer: float = 0.0
    # An attention backend with a rule (ATTENTION_RULES; 0 rows: none): query rows per program tile,
    # query heads per rank, bytes of K and V of one head, one token and layer, and of the page index
    # per prefix token.
    attn_tile_rows: int = 0
    attn_heads: int = 0
    attn_kv_bytes: float = 0.0
    attn_index_bytes: float = 0.0
    # Speculative decoding's round (None: a decode step emits one token per request).
    spec: SpecRound | None = None

    def __post_init__(self) -> None:
        for name in ("peak_flops", "linear_mfu", "attention_mfu", "hbm_Bps", "hbm_efficiency", "num_layers"):
            if getattr(self, name) <= 0:
                raise ValueError(f"compute.{name} must be > 0, got {getattr(self, name)}")
        for name in ("tp", "pp", "bytes_per_param"):
            if getattr(self, name) <= 0:
                raise ValueError(f"compute.{name} must be > 0, got {getattr(self, name)}")
        for name in (
            "step_overhead_s",
            "active_params",
            "weight_bytes",
            "attn_width",
            "kv_bytes_per_token",
            "routed_params",
            "allreduce_latency_s",
            "custom_allreduce_max_bytes",
            "unsplit_bytes_per_token",
            "prefill_host_s_per_layer",
            "decode_s_per_layer",
            "attn_tile_rows",
            "attn_heads",
            "attn_kv_bytes",
            "attn_index_bytes",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"compute.{name} must be >= 0, got {getattr(self, name)}")
        for name in ("moe_mfu", "allreduce_half_peak_bytes", "allreduce_exponent"):
            if getattr(self, name) <= 0:
                raise ValueError(f"compute.{name} must be > 0, got {getattr(self, name)}")
        if self.tp > 1 and self.allreduce_Bps <= 0:
            raise ValueError(f"compute.allreduce_Bps must be > 0 with tp {self.tp}, got {self.allreduce_Bps}")
        if self.num_experts and not 0 < self.experts_per_token <= self.num_experts:
            raise ValueError(f"compute.experts_per_token must be in 1..{self.num_experts}")
        if self.routed_params * self.bytes_per_param > self.weight_bytes:
            raise ValueError("compute.routed_params exceed the weights")
        for name in ("linear_mfu", "attention_mfu", "hbm_efficiency", "moe_mfu"):
            if getattr(self, name) > 1:
                raise ValueError(f"compute.{name} must be <= 1, got {getattr(self, name)}")

    @classmethod
    def from_resolved(cls, r: HasSimConfig) -> ComputeParams:
        """Preset roofline of a resolved scenario's model on its GPU, one rank of ``tp x pp`` (built by
        ``scenario/simconfig.py``: the hardware knobs as resolved, scenario else calibration file else
        defaults)."""
        return r.sim_config().compute

    def with_overrides(self, **changes: float) -> ComputeParams:
        """A copy with some fields replaced (a calibration's measured values)."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ValueError(f"unknown compute parameter(s): {', '.join(sorted(unknown))}")
        fields: dict[str, Any] = dict(changes)
        return dataclasses.replace(self, **fields)


def unsplit_bytes_per_token(model: ModelPreset, layers: int) -> float:
    """HBM bytes one token moves on every rank, whatever the TP size, in ``layers`` layers: two
    residual-add RMSNorms per layer (read hidden and residual, write both: 8 bf16 rows of ``hidden``)
    and, in the MoE share of the layers, the top-k combine (``k`` expert rows written by the down
    projection and read by the sum, one row written: ``2 k + 1`` rows)."""
    hidden = model.hidden
    moe_share = model.moe_layers / model.num_layers
    rows = 8 + moe_share * (2 * model.experts_per_token + 1)
    return float(layers * rows * hidden * ACTIVATION_BYTES)


@dataclass(frozen=True)
class SchedulerPolicy:
    """Scheduler settings: the scenario's ``scheduler`` section plus SGLang's constants."""

    chunked_prefill_tokens: int | None = 8192
    max_running_requests: int = 256
    max_prefill_tokens: int = 16384
    reserve_last_token: bool = True
    insert_output: bool = True
    clip_max_new_tokens: int = 4096  # CLIP_MAX_NEW_TOKENS_ESTIMATION
    init_new_token_ratio: float = 0.7  # SGLANG_INIT_NEW_TOKEN_RATIO x schedule_conservativeness (1.0)
    min_new_token_ratio_factor: float = 0.14  # SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR: floor = 0.7 x 0.14
    new_token_ratio_decay_steps: int = 600
    retract_decode_steps: int = 20
    retract_to: str = "back"  # SGLang appends retracted requests to the waiting queue
    schedule_policy: str = "fcfs"
    seed: int = 0  # the scenario's: seeds the random schedule policy's shuffles

    @classmethod
    def from_resolved(cls, r: HasSimConfig) -> SchedulerPolicy:
        """The policy a resolved scenario gives (built by ``scenario/simconfig.py``)."""
        return r.sim_config().scheduler

    @property
    def min_new_token_ratio(self) -> float:
        return min(1.0, self.init_new_token_ratio * self.min_new_token_ratio_factor)

    @property
    def new_token_ratio_decay(self) -> float:
        return (self.init_new_token_ratio - self.min_new_token_ratio) / self.new_token_ratio_decay_steps


@dataclass(frozen=True)
class SideCopy:
    """A host pool beside the KV pool whose rows every PCIe copy moves with the KV, as SGLang 0.5.23's
    cache controller does (``mem_cache/hybrid_cache/hybrid_cache_controller.py`` ``_l2_transfers``,
    ``_l2_load_transfers``): a packed MTP draft's layers, a DSA indexer's keys, a draft's own pool.
    ``bytes_per_token``: what it adds to each token a transfer moves (already in the cache's
    ``bytes_per_page``); ``layers``: its layers, each one more per-layer copy of a load-back; ``pieces``:
    contiguous pieces per page and layer; ``own_copy``: a copy operation of its own (a pool of its own
    is one more launch of a backup; packed rows ride in the KV pool's)."""

    name: str
    bytes_per_token: int
    layers: int
    pieces: int
    own_copy: bool


@dataclass(frozen=True)
class SimConfig:
    """Everything one timed world (one DP rank, and the controller in front of the ranks) reads.
    Sizes per GPU rank; units: bytes/s, seconds."""

    cache: CacheConfig
    links: Mapping[str, LinkParams]  # "h2d" and "d2h" (PCIe), from presets or a calibration file
    pcie_sharing: str  # how concurrent copies share a PCIe direction (sim/links.py)
    storage_read_Bps: float
    storage_write_Bps: float
    storage_latency_s: float
    storage_offload_read_Bps: float  # the store's offload disk (0 without one)
    storage_offload_latency_s: float
    request_overhead_s: float  # a request reaches the scheduler this long after it arrives
    mem_layout: str  # the host layout SGLang runs (after its rewrites): pieces per copy
    stage_layers: int  # layers of one pipeline stage: what one rank's copies move
    kv_factor: int  # KV tensors per layer (2: K and V; 1: MLA's latent)
    kv_heads_per_rank: int
    timeseries_interval_s: float  # the time series' sampling grid
    scheduler: SchedulerPolicy
    compute: ComputeParams
    dp_ranks: int = 1  # data-parallel ranks, each a world of its own behind the controller
    attn_dp: int = 1  # attention-DP groups among them: they step in lockstep (sim/lockstep.py)
    load_balance_method: str = "round_robin"  # the controller's router (core/routing.py)
    side_copies: tuple[SideCopy, ...] = ()  # host pools beside the KV pool each PCIe copy moves too

    def sim_config(self) -> SimConfig:
        """Itself: a SimConfig is accepted wherever a resolved scenario is."""
        return self
