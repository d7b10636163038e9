"""The scenario YAML schema (pydantic; unknown keys are errors): one spec class per section.

Units in names: ``*_tokens``, ``*_gb`` (1e9 bytes), ``*_gbps`` (1e9 bytes/s), ``*_mib`` (2**20 bytes), ``*_us``,
``*_s``.
"""

from __future__ import annotations

import numbers
import os
from typing import Any, Literal

from pydantic import Field, create_model, field_validator, model_serializer, model_validator

from ..core import (
    EVICTION_STRATEGIES,
    HOST_EVICTION_RULES,
    PREFETCH_STOP_POLICIES,
    WRITE_POLICIES,
)
from ..core.routing import ROUTERS, check_method
from ..core.schedule import check_policy
from ..core.semantics import (
    CHECKPOINT_HITS,
    EVICT_AMOUNTS,
    HOST_BACKUP_EVICTIONS,
    PARENT_BACKUPS,
    PREFETCH_FLOWS,
    SEMANTIC_VARIANTS,
    SEMANTICS,
    WRITE_BACK_EVICTIONS,
)
from ..core.stores import STORE_MODELS, knob_readers
from ..hardware.allreduce import CUSTOM_MAX_MIB, NCCL_EXPONENT, NCCL_HALF_PEAK_MIB
from ..hardware.hfconfig import DraftConfig, config_path, draft_from_config, model_from_config
from ..hardware.nodes import MAX_NODE_GIB, parse_node_memory
from ..hardware.presets import (
    GPUS,
    HOST_LAYOUTS,
    IO_BACKENDS,
    LINKS,
    MODELS,
    STORAGE,
    ModelPreset,
)
from ..hardware.speculative import SPEC_ALGORITHMS
from ..strict import StrictSpec
from ..workloads.kinds import WORKLOAD_KINDS


class ScenarioError(ValueError):
    """Bad scenario input: one line naming the file, the field and what was expected."""


# Simulated time is a float of seconds: a single cost beyond this makes the world's microsecond steps
# vanish under rounding (events stop advancing time), so per-operation costs are bounded here.
MAX_COST_US = 1e9


class _Strict(StrictSpec):
    """A scenario section (see :class:`StrictSpec`)."""


def _in_registry(registry, value: str) -> str:
    if value not in registry:
        raise ValueError(f"unknown {registry.kind} {value!r}; supported: {', '.join(registry.names())}")
    return value


# ------------------------------------------------------------------------------------------ model


class SpeculativeSpec(_Strict):
    """Speculative decoding (``--speculative-algorithm`` and its draft model): what its draft KV takes
    on the device and the host, and with ``accept_len`` its time (a round's draft steps, verify and draft
    extend over accept_len tokens a request; hardware/speculative.py). Without ``accept_len`` decode
    still emits one token per request per step at the plain decode's time."""

    algorithm: str = Field(
        ...,
        description="SGLang --speculative-algorithm, lower case: eagle, nextn (SGLang's alias of eagle), eagle3, "
        "standalone, ngram; the draft's KV shrinks the device pool and rides on the host pools",
    )
    config: str | None = Field(
        None,
        description="the draft checkpoint's config.json or the folder holding it (--speculative-draft-model-path; "
        "relative: to the scenario file; builtin:NAME as model.config): its KV layers and shape; unset: the target's "
        "MTP layers (model.nextn_layers) for eagle / nextn",
    )
    num_layers: int | None = Field(None, ge=0, description="draft KV layers (overrides the draft's config)")
    mtp: bool | None = Field(
        None, description="the draft is an MTP head (its config has num_nextn_predict_layers): HiCache packs it"
    )
    attention: Literal["mha", "mla"] | None = Field(None, description="draft attention (default: its config's)")
    num_kv_heads: int | None = Field(None, gt=0, description="draft KV heads (MHA/GQA)")
    head_dim: int | None = Field(None, gt=0, description="draft head dimension")
    kv_lora_rank: int | None = Field(None, ge=0, description="draft MLA latent rank")
    qk_rope_head_dim: int | None = Field(None, ge=0, description="draft MLA rope dimension")
    params_b: float | None = Field(
        None, ge=0, description="draft parameters, billions (weights memory; default: counted from its config)"
    )
    num_steps: int | None = Field(
        None, ge=1, description="--speculative-num-steps (unset with the next two: SGLang's auto-choice by model)"
    )
    eagle_topk: int | None = Field(None, ge=1, description="--speculative-eagle-topk: draft branches per step")
    num_draft_tokens: int | None = Field(
        None, ge=1, description="--speculative-num-draft-tokens: verify rows per request (num_steps + 1 at topk 1)"
    )
    accept_len: float | None = Field(
        None,
        ge=1,
        description="mean tokens a request gets per round (SGLang's log prints it as 'accept len'; calibrate "
        "SERVER_LOG reports it), 1 to num_draft_tokens; unset: speculative decoding's time is not modelled",
    )

    @field_validator("algorithm")
    @classmethod
    def _algorithm_known(cls, v: str) -> str:
        return _in_registry(SPEC_ALGORITHMS, v)

    @field_validator("config")
    @classmethod
    def _config_readable(cls, v: str | None) -> str | None:
        """Read the file now, so a bad one is one line naming the file and key."""
        if v is not None:
            draft_from_config(config_path(v))
        return v

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> dict[str, Any]:
        """Written beside results with the fields that were given only."""
        out = handler(self)
        return {k: v for k, v in out.items() if v is not None}

    def draft(self, target: ModelPreset) -> DraftConfig | None:
        """The draft model: its config.json with the fields given here overriding it, the target's shape
        for fields a draft given by layers alone leaves out, or None (no draft named)."""
        shape = (
            "num_layers",
            "mtp",
            "attention",
            "num_kv_heads",
            "head_dim",
            "kv_lora_rank",
            "qk_rope_head_dim",
            "params_b",
        )
        given = {k: getattr(self, k) for k in shape if getattr(self, k) is not None}
        if self.config is not None:
            base = draft_from_config(config_path(self.config))
        elif given:
            if "num_layers" not in given:
                raise ValueError(
                    "a draft given by dimensions needs num_layers (or config); the target's own MTP module's "
                    "parameters are model.nextn_params_b"
                )
            base = DraftConfig(
                "",
                "",
                0,
                False,
                target.attention,
                target.num_kv_heads,
                target.head_dim,
                target.kv_lora_rank,
                target.qk_rope_head_dim,
                0.0,
                target.weights_dtype,
            )
        else:
            return None
        renamed = {("layers" if k == "num_layers" else k): v for k, v in given.items()}
        return DraftConfig(**{**base.__dict__, **renamed})


class ModelSpec(_Strict):
    """A model preset or a checkpoint's config.json, optionally with fields overridden, or explicit
    dimensions."""

    preset: str | None = Field(None, description="model preset name (see `hicache-sim run --help`)")
    config: str | None = Field(
        None,
        description="a checkpoint's config.json or the folder holding it (relative: to the scenario file; "
        "builtin:NAME: hicache_sim/data/models/NAME): layers, heads, MLA ranks, experts, context length and "
        "weights dtype as SGLang reads them; fields given beside it override it",
    )
    num_layers: int | None = Field(None, gt=0, description="transformer layers")
    attention: Literal["mha", "mla"] | None = Field(None, description="mha (MHA/GQA) or mla")
    num_kv_heads: int | None = Field(None, gt=0, description="KV heads (MHA/GQA)")
    head_dim: int | None = Field(None, gt=0, description="head dimension")
    q_heads: int | None = Field(None, gt=0, description="query heads (attention FLOPs)")
    kv_lora_rank: int | None = Field(None, ge=0, description="MLA latent rank")
    qk_rope_head_dim: int | None = Field(None, ge=0, description="MLA rope dimension")
    params_b: float | None = Field(None, gt=0, description="parameters, billions (weights memory)")
    active_params_b: float | None = Field(None, gt=0, description="active parameters per token, billions")
    weights_dtype: Literal["bf16", "fp16", "fp8"] | None = Field(
        None, description="dtype of the linear weights (default: the preset's checkpoint, else bf16)"
    )
    hidden_size: int | None = Field(None, gt=0, description="residual width (default: q_heads x head_dim)")
    num_experts: int | None = Field(None, ge=0, description="routed experts per MoE layer (0: dense)")
    experts_per_token: int | None = Field(None, ge=0, description="routed experts per token (top-k)")
    moe_intermediate_size: int | None = Field(None, ge=0, description="width of one routed expert")
    shared_experts: int | None = Field(None, ge=0, description="experts every token runs (non-routed part)")
    dense_layers: int | None = Field(None, ge=0, description="leading layers with a dense MLP instead of experts")
    context_len: int | None = Field(
        None, gt=0, description="context length, tokens (config max_position_embeddings; default: the preset's)"
    )
    index_head_dim: int | None = Field(
        None, ge=0, description="DeepSeek sparse attention indexer key width (config index_head_dim; 0: none)"
    )
    nextn_layers: int | None = Field(
        None, ge=0, description="MTP layers the checkpoint carries (config num_nextn_predict_layers; 0: none)"
    )
    nextn_params_b: float | None = Field(
        None,
        ge=0,
        description="parameters of the MTP (NextN) draft module, billions (its weights with speculative decoding)",
    )
    dtype: Literal["bf16", "fp16", "fp8", "fp32"] = Field("bf16", description="KV cache dtype")
    speculative: SpeculativeSpec | None = Field(
        None,
        description="speculative decoding (--speculative-algorithm, --speculative-draft-model-path): the draft's "
        "KV on the device and the host; its rounds' time (draft steps, verify, draft extend) with accept_len",
    )

    @field_validator("preset")
    @classmethod
    def _preset_known(cls, v: str | None) -> str | None:
        return None if v is None else _in_registry(MODELS, v)

    @field_validator("config")
    @classmethod
    def _config_readable(cls, v: str | None) -> str | None:
        """Read the file now, so a bad one is one line of ``validate`` naming the file and key."""
        if v is not None:
            model_from_config(config_path(v))
        return v

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> dict[str, Any]:
        """Written beside results without ``index_head_dim`` and the speculative fields when unset (those files
        stay as they were)."""
        out = handler(self)
        for key in ("index_head_dim", "nextn_layers", "nextn_params_b", "speculative"):
            if getattr(self, key) is None:
                out.pop(key, None)
        return out

    @model_validator(mode="after")
    def _one_base(self) -> ModelSpec:
        if self.preset is not None and self.config is not None:
            raise ValueError("give preset or config, not both (fields beside either override it)")
        return self

    def resolve(self) -> ModelPreset:
        """Preset or config.json with overrides applied, or a model from explicit dimensions."""
        skip = ("preset", "config", "dtype", "speculative")
        fields = {k: v for k, v in self.model_dump().items() if v is not None and k not in skip}
        if self.preset is not None or self.config is not None:
            base = MODELS.get(self.preset) if self.preset else model_from_config(config_path(self.config))
            return ModelPreset(**{**base.__dict__, **fields})
        need = ["num_layers", "params_b"]
        missing = [k for k in need if k not in fields]
        if missing:
            raise ValueError(f"explicit model needs {', '.join(missing)} (or a preset)")
        fields.setdefault("attention", "mha")
        fields.setdefault("num_kv_heads", 1)
        fields.setdefault("head_dim", 128)
        fields.setdefault("q_heads", fields["num_kv_heads"])
        fields.setdefault("active_params_b", fields["params_b"])
        return ModelPreset(name="custom", **fields)


# --------------------------------------------------------------------------------------- hardware


class PCIeSpec(_Strict):
    """Host<->device link. Unset fields come from the GPU's link preset, for the scenario's io backend
    (cache.io_backend: each backend has its own peak, launch cost and small-piece curve)."""

    preset: str | None = Field(None, description="gen4, gen5 or gen5_rocm (default: the GPU's)")
    h2d_gbps: float | None = Field(None, gt=0, description="peak host->device GB/s")
    d2h_gbps: float | None = Field(None, gt=0, description="peak device->host GB/s")
    latency_us: float | None = Field(
        None, ge=0, le=MAX_COST_US, description="fixed cost per copy operation (launch), us"
    )
    half_efficiency_bytes: float | None = Field(None, ge=0, description="piece size at half of peak, bytes")
    segment_overhead_us: float | None = Field(None, ge=0, le=MAX_COST_US, description="cost per contiguous piece, us")
    sharing: Literal["processor", "fifo"] = Field(
        "processor", description="concurrent transfers of one direction share bandwidth, or queue"
    )

    @field_validator("preset")
    @classmethod
    def _preset_known(cls, v: str | None) -> str | None:
        return None if v is None else _in_registry(LINKS, v)


class OffloadSpec(_Strict):
    """The disk a store offloads to (Mooncake ``enable_offload``): every page the store accepts is also
    written there, and a page the store evicts stays readable from it at the disk's rate. Unset fields
    come from the device's preset."""

    device: str = Field(
        "local_nvme",
        description="the disk class: a storage preset that is a local disk "
        f"({' | '.join(n for n in STORAGE.names() if STORAGE.get(n).disk)})",
    )
    read_gbps: float | None = Field(None, gt=0, description="disk -> store GB/s (default: the device's)")
    latency_us: float | None = Field(
        None, ge=0, le=MAX_COST_US, description="one object read's latency, us (default: the device's)"
    )
    capacity_gb: float | None = Field(
        None, ge=0, description="disk space the store may use, GB, all writing ranks together (0: unbounded)"
    )

    @field_validator("device")
    @classmethod
    def _device_is_a_disk(cls, v: str) -> str:
        _in_registry(STORAGE, v)
        if not STORAGE.get(v).disk:
            disks = ", ".join(n for n in STORAGE.names() if STORAGE.get(n).disk)
            raise ValueError(f"{v!r} is not a local disk; disks: {disks}")
        return v


class StorageSpec(_Strict):
    """Storage (L3) link and store; unset fields come from the backend preset (cache.storage_backend).
    The eviction knobs apply to the models that read them (docs/reference/sglang-hicache-semantics.md,
    section 3.7); one the chosen model does not read is refused."""

    read_gbps: float | None = Field(None, gt=0, description="storage -> host GB/s")
    write_gbps: float | None = Field(None, gt=0, description="host -> storage GB/s")
    latency_us: float | None = Field(None, ge=0, le=MAX_COST_US, description="latency per batch (query or I/O), us")
    capacity_gb: float | None = Field(
        None,
        ge=0,
        description="storage capacity, GB (0: unbounded); one rank's for lru and file_lru, the pool or disk "
        "all writing ranks share for file, mooncake, mooncake_sharded and nixl",
    )
    eviction: str | None = Field(
        None,
        description=f"what a full store does: {' | '.join(STORE_MODELS.names())} (default: the backend's)",
    )
    high_watermark: float | None = Field(
        None,
        gt=0,
        le=1,
        description="fill that starts eviction: mooncake -eviction_high_watermark_ratio (0.90; mooncake_sharded "
        "0.95), nixl l3_cleaner_high_watermark (80 %: 0.80)",
    )
    low_watermark: float | None = Field(
        None,
        gt=0,
        le=1,
        description="fill eviction brings the store down to: file_lru eviction_ratio (0.9), nixl "
        "l3_cleaner_low_watermark (70 %: 0.70)",
    )
    evict_ratio: float | None = Field(
        None, gt=0, le=1, description="share of objects one eviction batch takes: mooncake -eviction_ratio (0.05)"
    )
    lease_s: float | None = Field(
        None,
        ge=0,
        le=1e9,
        description="how long a read protects a page from eviction, s: mooncake -default_kv_lease_ttl (10 s; "
        "mooncake_sharded, Mooncake <= 0.3.11: 5 s)",
    )
    interval_s: float | None = Field(
        None, gt=0, le=1e9, description="seconds between two looks at the disk: nixl's cleaner (30 s)"
    )
    offload: OffloadSpec | None = Field(
        None,
        description="a disk the store offloads every page to (Mooncake enable_offload; the backends that "
        f"do: {', '.join(n for n in STORAGE.names() if STORAGE.get(n).offloads)}); absent: none",
    )

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> dict[str, Any]:
        """Written beside results without ``offload`` when there is none (those files stay as they were)."""
        out = handler(self)
        if self.offload is None:
            out.pop("offload", None)
        return out

    @field_validator("eviction")
    @classmethod
    def _eviction_known(cls, v: str | None) -> str | None:
        return None if v is None else _in_registry(STORE_MODELS, v)

    def eviction_params(self) -> dict[str, float]:
        """The eviction knobs given (the model's defaults fill the rest)."""
        return {k: getattr(self, k) for k in STORE_KNOBS if getattr(self, k) is not None}


#: StorageSpec fields that are a store model's knobs (``STORE_MODELS[...].knobs``).
STORE_KNOBS = ("high_watermark", "low_watermark", "evict_ratio", "lease_s", "interval_s")


class HardwareSpec(_Strict):
    """The GPUs and their costs. Compute efficiencies and overheads left unset take a calibration
    file's values (``hardware.calibration``), else the defaults below (sources in
    docs/reference/hardware-and-models.md)."""

    gpu: str = Field("h200", description="GPU preset")
    memory_mib: int | None = Field(
        None, gt=0, description="GPU memory the device reports (nvidia-smi memory.total, MiB); default: the preset's"
    )
    tp: int = Field(1, gt=0, description="tensor-parallel ranks (KV split across them for MHA/GQA)")
    pp: int = Field(
        1, gt=0, description="pipeline-parallel stages (SGLang --pp-size): layers, weights and KV split evenly"
    )
    dp: int = Field(
        1,
        gt=0,
        description="data-parallel replicas of the tp x pp group (SGLang --dp-size without --enable-dp-attention), "
        "each with its own KV pool, host pool and radix tree; requests are spread over them by "
        "load_balance_method (hicache_sim/sim/dp.py)",
    )
    attn_dp: int = Field(
        1,
        gt=0,
        description="attention data-parallel groups inside the tp ranks (SGLang --attn-dp-size, or the deprecated "
        "--dp-size N --enable-dp-attention): each group of tp / attn_dp ranks has its own KV pool, host pools and "
        "radix tree and its own requests; the chunked prefill is split over the groups",
    )
    load_balance_method: str = Field(
        "round_robin",
        description="how requests are spread over the dp x attn_dp ranks (SGLang --load-balance-method): "
        "round_robin, total_requests, total_tokens (those two read the ranks' queues: timed mode); auto is "
        "round_robin",
    )
    nnodes: int = Field(
        1, gt=0, description="nodes the tp x pp ranks span (SGLang --nnodes): the node memory check counts one's share"
    )
    mem_fraction_static: float | None = Field(
        None,
        gt=0,
        le=1,
        description="share of free GPU memory for weights + KV pool (default: SGLang's rule from the GPU "
        "memory, prefill chunk, CUDA-graph batch size, tp and pp)",
    )
    cuda_graph_max_bs: int | None = Field(
        None, gt=0, description="largest CUDA-graph batch, for the default mem_fraction_static (default: SGLang's)"
    )
    cuda_context_mib: float | None = Field(
        None,
        ge=0,
        description="GPU memory in use on a rank before the weights load, MiB: null (default) models it as "
        "the CUDA context (1024) plus, at tp > 1, what SGLang's parallel groups hold on the GPU's interconnect "
        "(hardware/commmem.py: the median of public logs' 'Init torch distributed ends. mem usage'); a number "
        "replaces both (a log's GPU capacity less its 'Load weight begin. avail mem')",
    )
    host_memory_gib: float | None = Field(
        None,
        gt=0,
        description="host memory the engine may use (what SGLang reads: available RAM within the cgroup "
        "limit), GiB, or a node preset name (p5.48xlarge, dgx-h100, ...: its installed memory, an upper "
        "bound; hardware/nodes.py); with it SGLang's default host ratio shrinks until every rank's host pool "
        "fits (cache.host_memory_fraction); default: not modelled, the default ratio is kept",
    )
    mfu: float | None = Field(None, gt=0, le=1, description="shorthand: sets linear_mfu and attention_mfu both")
    linear_mfu: float = Field(0.7, gt=0, le=1, description="fraction of peak FLOP/s the linear layers reach")
    attention_mfu: float = Field(0.6, gt=0, le=1, description="fraction of peak FLOP/s attention reaches")
    hbm_efficiency: float = Field(0.8, gt=0, le=1, description="fraction of peak HBM bandwidth decode reaches")
    moe_mfu: float = Field(
        0.25, gt=0, le=1, description="fraction of the linear peak the grouped expert GEMMs of a MoE reach"
    )
    allreduce_busbw_gbps: float | None = Field(
        None, gt=0, description="tensor-parallel all-reduce bus bandwidth, GB/s (default: the GPU preset's)"
    )
    allreduce_latency_us: float = Field(
        10.0,
        ge=0,
        le=MAX_COST_US,
        description="fixed cost of one tensor-parallel all-reduce through NCCL (or over PCIe), us; SGLang's "
        "custom all-reduce kernels below custom_allreduce_max_mib have their own measured costs",
    )
    allreduce_half_peak_mib: float = Field(
        NCCL_HALF_PEAK_MIB,
        gt=0,
        le=1e6,
        description="message size at which NCCL's all-reduce reaches half of its peak bus bandwidth on "
        "NVLink GPUs, MiB: busbw(S) = peak / (1 + (half / S)^allreduce_curve_exponent); default fitted "
        "to measured 8 x H200 and 8 x A100 nccl-tests tables",
    )
    allreduce_curve_exponent: float = Field(
        NCCL_EXPONENT,
        gt=0,
        le=10,
        description="how steeply NCCL's all-reduce bus bandwidth rises with message size (1: the "
        "saturating S / (S + half) of a PCIe copy; the measured curves rise more slowly)",
    )
    custom_allreduce_max_mib: float = Field(
        CUSTOM_MAX_MIB,
        ge=0,
        le=1e6,
        description="SGLang runs its custom all-reduce for messages strictly below this size on 2, 4, 6 "
        "or 8 NVLink GPUs, NCCL above, MiB (SGLang's _MAX_CAR_SIZE, 8 MiB on CUDA); 0: never "
        "(--disable-custom-all-reduce)",
    )
    attention_backend: str | None = Field(
        None,
        min_length=1,
        description="SGLang --attention-backend the deployment runs (null: SGLang's choice for the model "
        "and GPU). Written back by sglang-args. A backend whose prefill kernel has a rule "
        "(hicache_sim/hardware/attention.py: triton) times that kernel as a roofline over the bytes its "
        "tiling reads (every program re-reads the cached prefix); any other runs attention at "
        "attention_mfu (fit it with hicache-sim calibrate SERVER_LOG)",
    )
    step_overhead_us: float = Field(200.0, ge=0, le=MAX_COST_US, description="fixed cost per scheduler step, us")
    decode_us_per_layer: float = Field(
        47.0,
        ge=0,
        le=MAX_COST_US,
        description="GPU time per layer of a decode step beyond the roofline, us: its small kernels "
        "(norms, rope, top-k, activation, attention metadata) run for microseconds each whatever the "
        "batch (sglang-omni#379 kernel table, Qwen3-30B-A3B on H200: 77.6 us per layer against 30 us of "
        "weight reads; sgl-project/sglang#1401, Llama-3-8B batch 1: 46 us per layer over the weight time)",
    )
    prefill_eager_us_per_layer: float = Field(
        1350.0,
        ge=0,
        le=MAX_COST_US,
        description="host time to issue one layer of a prefill forward run eagerly (no prefill CUDA "
        "graph), us: the forward takes at least layers x this (sgl-project/sglang#12160: DeepSeek-V3, "
        "61 layers, 1 new token, 82.6 ms)",
    )
    prefill_graph_us_per_layer: float = Field(
        380.0,
        ge=0,
        le=MAX_COST_US,
        description="the same floor with a prefill CUDA graph, us per layer (sgl-project/sglang#12160: "
        "23.1 ms for the same forward)",
    )
    request_overhead_us: float = Field(
        1000.0,
        ge=0,
        le=MAX_COST_US,
        description="per-request cost outside the GPU (HTTP, tokenisation, scheduling hops) before the "
        "scheduler sees it, us",
    )
    pcie: PCIeSpec = Field(default_factory=PCIeSpec)
    storage: StorageSpec = Field(default_factory=StorageSpec)
    calibration: str | None = Field(None, description="calibration file (hicache-sim calibrate)")

    @field_validator("gpu")
    @classmethod
    def _gpu_known(cls, v: str) -> str:
        return _in_registry(GPUS, v)

    @field_validator("load_balance_method")
    @classmethod
    def _method_known(cls, v: str) -> str:
        return ROUTERS.canonical(check_method(v))

    @field_validator("host_memory_gib", mode="before")
    @classmethod
    def _node_preset_as_gib(cls, v: Any) -> Any:
        """A node preset's name stands for its installed memory; numbers go on to the GiB checks (one past
        what a node can address is refused here: its bytes could overflow)."""
        too_large = isinstance(v, int | float) and not isinstance(v, bool) and v > MAX_NODE_GIB
        return parse_node_memory(v).gib if isinstance(v, str) or too_large else v

    @model_validator(mode="after")
    def _dp_layout(self) -> HardwareSpec:
        """SGLang 0.5.23 refuses replicas with attention DP inside them, and groups that do not split tp."""
        if self.dp > 1 and self.attn_dp > 1:
            raise ValueError(
                f"hardware.dp {self.dp} with hardware.attn_dp {self.attn_dp}: SGLang 0.5.23 refuses data-parallel "
                "replicas combined with attention data parallelism; set one of them to 1"
            )
        if self.tp % self.attn_dp:
            raise ValueError(f"hardware.attn_dp {self.attn_dp} does not divide hardware.tp {self.tp} (SGLang refuses)")
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> dict[str, Any]:
        """Written beside results without the data-parallel fields at their defaults (those files stay
        as they were)."""
        out = handler(self)
        for key, default in (("dp", 1), ("nnodes", 1), ("attn_dp", 1), ("load_balance_method", "round_robin")):
            if out.get(key) == default:
                out.pop(key)
        return out

    @model_validator(mode="after")
    def _one_efficiency_form(self) -> HardwareSpec:
        both = [k for k in ("linear_mfu", "attention_mfu") if k in self.model_fields_set]
        if self.mfu is not None and both:
            raise ValueError(f"give mfu (both efficiencies) or {' and '.join(both)}, not both")
        return self


# ------------------------------------------------------------------------------------------ cache


# CacheSpec fields whose value must name an entry of a registry.
_REGISTRY_FIELDS = {
    "write_policy": WRITE_POLICIES,
    "host_eviction": HOST_EVICTION_RULES,
    "eviction_policy": EVICTION_STRATEGIES,
    "prefetch_policy": PREFETCH_STOP_POLICIES,
    "storage_backend": STORAGE,
    "mem_layout": HOST_LAYOUTS,
    "semantics": SEMANTICS,
    **SEMANTIC_VARIANTS,  # each code-era variant a config may override, with its registry (core/semantics.py)
}


def _choices(registry) -> str:
    """A registry's names for a field description: the schema never lists them by hand."""
    return " | ".join(registry.names())


class CacheSpec(_Strict):
    page_size: int = Field(1, gt=0, description="tokens per page (SGLang's --page-size default: 1)")
    device_tokens: int | None = Field(None, gt=0, description="device KV pool, tokens (default: from GPU memory)")
    host_ratio: float | None = Field(None, ge=0, description="host pool = ratio x device pool")
    host_size_gb: float | None = Field(None, ge=0, description="host pool in GB per rank (overrides ratio)")
    host_tokens: int | None = Field(None, ge=0, description="host pool, exact tokens (page multiple)")
    host_alignment: Literal["up_plus_one", "down", "exact"] = Field(
        "up_plus_one", description="host pool page alignment: 2026 (+1 page), mid-2025 (down)"
    )
    write_policy: str = Field("write_through", description=_choices(WRITE_POLICIES))
    host_eviction: str = Field("evicted_only", description=_choices(HOST_EVICTION_RULES))
    host_memory_mode: Literal["cache", "buffer_only"] = Field("cache", description="host as cache or buffer")
    host_memory_fraction: float = Field(
        0.8,
        gt=0,
        le=1,
        description="share of hardware.host_memory_gib (less SGLang's 10 GiB reserve) the host pools of all "
        "ranks may take when no host size is given (SGLang --hicache-host-memory-fraction)",
    )
    eviction_policy: str = Field("lru", description=_choices(EVICTION_STRATEGIES))
    eviction_policy_config: dict[str, Any] = Field(
        default_factory=dict,
        description="slru: protected_threshold; tlru: threshold, next_prompt_estimate (tokens, threshold larger)",
    )
    eviction_granularity: Literal["node", "page"] = Field("node", description="whole leaf nodes or exact pages")
    io_backend: Literal[IO_BACKENDS] = Field("kernel", description="host<->device copy backend")
    mem_layout: str = Field(
        "page_first",
        description=f"host KV layout: {_choices(HOST_LAYOUTS)} (what each io backend and model can copy: "
        "hardware/presets.py HOST_LAYOUTS)",
    )
    storage_backend: str = Field("none", description="none or a storage preset")
    prefetch_policy: str = Field("timeout", description=_choices(PREFETCH_STOP_POLICIES))
    prefetch_threshold: int = Field(256, ge=0, description="smallest prefetch worth issuing, tokens")
    prefetch_timeout_base_s: float | None = Field(None, ge=0, description="timeout base (default by semantics)")
    prefetch_timeout_per_ki_token_s: float | None = Field(None, ge=0, description="timeout per 1024 tokens")
    prefetch_timeout_max_s: float | None = Field(None, ge=0, description="timeout cap")
    prefetch_retry_poll_interval: int | None = Field(
        None,
        ge=0,
        description="prefill passes before a prefetch that found nothing yet asks storage again "
        "(--hicache-storage-prefetch-retry-poll-interval; era default: 8 in 2026, 0 = never in 2025)",
    )
    prefetch_retry_max_attempts: int | None = Field(
        None,
        ge=0,
        description="storage re-asks a queued request may make "
        "(--hicache-storage-prefetch-retry-max-attempts; era default: 8 in 2026, 0 in 2025)",
    )
    load_back_threshold: int = Field(10, ge=0, description="smallest load-back, tokens")
    semantics: str = Field("2026", description=f"upstream era where behaviour changed: {_choices(SEMANTICS)}")
    evict_amount: str | None = Field(None, description=f"override of the era's rule: {_choices(EVICT_AMOUNTS)}")
    parent_backup: str | None = Field(None, description=f"override: {_choices(PARENT_BACKUPS)}")
    host_backup_eviction: str | None = Field(None, description=f"override: {_choices(HOST_BACKUP_EVICTIONS)}")
    prefetch_flow: str | None = Field(None, description=f"override: {_choices(PREFETCH_FLOWS)}")
    write_back_eviction: str | None = Field(None, description=f"override: {_choices(WRITE_BACK_EVICTIONS)}")
    checkpoint_hits: str | None = Field(None, description=f"override: {_choices(CHECKPOINT_HITS)}")

    @field_validator("semantics", mode="before")
    @classmethod
    def _era_as_name(cls, v: Any) -> Any:
        """An era is a name that reads as a year: ``semantics: 2025`` (YAML's int, or ``--set``'s) is "2025"."""
        return str(v) if isinstance(v, int) and not isinstance(v, bool) else v

    @field_validator(*_REGISTRY_FIELDS)
    @classmethod
    def _registered(cls, v: str | None, info) -> str | None:
        """Policy names come from the core's registries (the same ones the CLI help lists); an era
        override left out (None) takes the era's."""
        if v is None or (info.field_name == "storage_backend" and v == "none"):
            return v
        return _in_registry(_REGISTRY_FIELDS[info.field_name], v)

    @model_validator(mode="after")
    def _policy_config_fits_the_policy(self) -> CacheSpec:
        """``eviction_policy_config``: a key no strategy reads is a typo; the chosen strategy's keys must
        be counts (SGLang fails at start on a bad one). A key only another strategy reads is ignored, as
        SGLang ignores it."""
        readers = {k: n for n in EVICTION_STRATEGIES.names() for k in EVICTION_STRATEGIES.get(n).config_keys}
        allowed = EVICTION_STRATEGIES.get(self.eviction_policy).config_keys
        for key, value in self.eviction_policy_config.items():
            if key not in readers:
                known = ", ".join(f"{k} ({n})" for k, n in readers.items()) or "none"
                raise ValueError(f"eviction_policy_config: unknown key {key!r}; known: {known}")
            if key in allowed and (not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 0):
                raise ValueError(f"eviction_policy_config.{key}: expected a non-negative integer, got {value!r}")
        why = EVICTION_STRATEGIES.get(self.eviction_policy).config_error(self.eviction_policy_config)
        if why is not None:
            raise ValueError(f"eviction_policy_config: {why}")
        return self

    @model_validator(mode="after")
    def _one_host_size(self) -> CacheSpec:
        given = [k for k in ("host_ratio", "host_size_gb", "host_tokens") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"give one of host_ratio, host_size_gb, host_tokens (got {', '.join(given)})")
        return self


# -------------------------------------------------------------------------------------- scheduler


AUTO = "auto"


def _count_or_auto(v: Any, other: str = "") -> Any:
    """A positive integer or ``auto``, said in one line (a union's errors would list both members)."""
    if v == AUTO:
        return v
    if isinstance(v, numbers.Integral) and not isinstance(v, bool) and v > 0:
        return int(v)
    raise ValueError(f"expected a positive integer or auto{' ' + other if other else ''}, got {v!r}")


class SchedulerSpec(_Strict):
    """The scheduler flags. ``auto`` (the default) is SGLang's value for a flag left unset, derived as
    sglang 0.5.23 derives it (see :mod:`hicache_sim.hardware.memory`)."""

    chunked_prefill_size: int | Literal["auto"] | None = Field(
        AUTO,
        description="prefill chunk, tokens (auto: SGLang's by GPU memory; null or -1, SGLang's spelling: "
        "whole prompt, no chunking)",
    )
    max_running_requests: int | Literal["auto"] = Field(
        AUTO,
        description="cap on requests in the running batch (auto: SGLang's from the pool and the model's "
        "context length; either way at most half the pool's tokens)",
    )
    max_prefill_tokens: int = Field(16384, gt=0, description="new prefill tokens per step")
    schedule_policy: str = Field(
        "fcfs", description="waiting-queue order before each prefill batch (SGLang --schedule-policy; timed mode)"
    )
    cuda_graph_backend_prefill: Literal["auto", "breakable", "full", "disabled"] = Field(
        AUTO,
        description="--cuda-graph-backend-prefill (auto: SGLang 0.5.23's, breakable, disabled under PP; "
        "SGLang 0.5.9 and earlier ran prefill eagerly by default: disabled)",
    )
    reserve_last_token: bool = Field(True, description="match at most input - 1 tokens, as SGLang")
    insert_output: bool = Field(True, description="cache output tokens too when a request finishes (timed)")

    @field_validator("chunked_prefill_size", mode="before")
    @classmethod
    def _minus_one_disables(cls, v: Any) -> Any:
        """SGLang's ``--chunked-prefill-size -1`` means no chunking, as null does here."""
        v = None if v == -1 and not isinstance(v, bool) else v
        return v if v is None else _count_or_auto(v, "or null / -1 (no chunking)")

    @field_validator("max_running_requests", mode="before")
    @classmethod
    def _count(cls, v: Any) -> Any:
        return _count_or_auto(v)

    @field_validator("schedule_policy")
    @classmethod
    def _policy_known(cls, v: str) -> str:
        return check_policy(v)


# --------------------------------------------------------------------------------------- workload


def _workload_spec() -> type[_Strict]:
    """``workload``: ``kind`` chooses one registered kind; each kind has its section ``workload.<kind>``."""
    names = tuple(WORKLOAD_KINDS.names())
    fields: dict[str, Any] = {
        "kind": (Literal[names], Field("trace", description=f"which section is the workload: {', '.join(names)}")),
        "partial_pages": (
            Literal["keep", "drop"],
            Field("keep", description="last partial page cached or not"),
        ),
    }
    for name in names:
        kind = WORKLOAD_KINDS.get(name)
        fields[name] = (kind.spec, Field(default_factory=kind.spec, description=kind.description))
    return create_model("WorkloadSpec", __base__=_Strict, __doc__=_workload_spec.__doc__, **fields)


WorkloadSpec = _workload_spec()


# A generated workload holds one key per prompt page of every request in memory (about 100 bytes
# each with its list slot): 20 million pages is about 2 GB, the most a laptop run should take.
MAX_GENERATED_PAGES = 20_000_000
MAX_GENERATED_REQUESTS = 10_000_000


class MetricsSpec(_Strict):
    warmup_fraction: float = Field(0.0, ge=0, lt=1, description="first share of requests not measured")
    timeseries_interval_s: float = Field(1.0, gt=1e-6, le=1e6, description="sampling period of time series (timed)")
    transfer_log: bool = Field(False, description="write transfers.parquet")


class Scenario(_Strict):
    """A complete simulation: model, hardware, cache, scheduler, workload, metrics, optional sweep."""

    name: str = "scenario"
    description: str = ""
    seed: int = 0
    mode: Literal["instant", "timed"] = "instant"
    model: ModelSpec = Field(default_factory=lambda: ModelSpec(preset="llama-3.1-8b"))
    hardware: HardwareSpec = Field(default_factory=HardwareSpec)
    cache: CacheSpec = Field(default_factory=CacheSpec)
    scheduler: SchedulerSpec = Field(default_factory=SchedulerSpec)
    workload: WorkloadSpec = Field(default_factory=WorkloadSpec)  # type: ignore[valid-type]
    metrics: MetricsSpec = Field(default_factory=MetricsSpec)
    sweep: dict[str, list[Any]] = Field(default_factory=dict, description="dotted key -> values")

    @field_validator("name")
    @classmethod
    def _name_is_one_folder(cls, v: str) -> str:
        """The name becomes ``results/<name>``: only one plain path component may (never ``results/``
        itself, a parent of it, or a path elsewhere)."""
        if v in ("", ".", "..") or any(c in v for c in "/\\\0") or os.path.isabs(v):
            raise ValueError(f"{v!r}: expected one plain folder name (no '/' or '\\', not '', '.' or '..')")
        return v

    @field_validator("sweep")
    @classmethod
    def _sweep_values_distinct(cls, v: dict[str, list[Any]]) -> dict[str, list[Any]]:
        """Each value is one scalar (a mapping or list cannot be a column of the table or a line of the
        figure: sweep the key inside it), listed once (twice would run the same point twice or, resumed,
        once under two rows)."""
        for key, values in v.items():
            seen: list[Any] = []
            for value in values:
                if isinstance(value, (dict, list)):
                    kind = "a mapping" if isinstance(value, dict) else "a list"
                    raise ValueError(
                        f"key {key!r}: expected a number, a name, true/false or null per value, got {kind} "
                        f"({value!r}); sweep the dotted key inside it instead (e.g. cache.host_ratio)"
                    )
                if value in seen:
                    raise ValueError(f"key {key!r} lists the value {value!r} twice")
                seen.append(value)
        return v

    @model_validator(mode="after")
    def _workload_fits_memory(self) -> Scenario:
        """A generated workload is built in memory before anything runs: refuse one that cannot fit."""
        kind = self.workload.kind
        spec = getattr(self.workload, kind, None)
        if kind == "trace" or not hasattr(spec, "size_estimate"):
            return self
        n, tokens = spec.size_estimate()
        pages = -(-tokens // self.cache.page_size)
        if n > MAX_GENERATED_REQUESTS or pages > MAX_GENERATED_PAGES:
            raise ValueError(
                f"workload.{kind}: would generate {n:,} requests of {pages:,} prompt pages in all; "
                f"at most {MAX_GENERATED_REQUESTS:,} requests and {MAX_GENERATED_PAGES:,} pages "
                "(lower the counts or lengths, or raise cache.page_size)"
            )
        return self

    @model_validator(mode="after")
    def _chunk_holds_a_page(self) -> Scenario:
        """SGLang truncates a chunk to whole pages: a chunk budget below one page admits nothing."""
        chunk, page = self.scheduler.chunked_prefill_size, self.cache.page_size
        if isinstance(chunk, int) and chunk < page:
            raise ValueError(
                f"scheduler.chunked_prefill_size ({chunk}) is smaller than cache.page_size ({page}): "
                "no chunk could hold one page; raise the chunk size or lower the page size"
            )
        return self

    @model_validator(mode="after")
    def _store_knobs_fit_the_model(self) -> Scenario:
        """An eviction knob the store model does not read would change nothing: refuse it, naming the
        models that read it (the model is hardware.storage.eviction, else the backend preset's)."""
        hs, backend = self.hardware.storage, self.cache.storage_backend
        name = hs.eviction or (STORAGE.get(backend).eviction if backend != "none" else None)
        for key in hs.eviction_params():
            if name is None:
                raise ValueError(f"hardware.storage.{key}: no storage tier (cache.storage_backend is none)")
            model = STORE_MODELS.get(name)
            if key not in model.knobs:
                readers = ", ".join(knob_readers(key))
                raise ValueError(
                    f"hardware.storage.{key}: the {name} store model does not read it (models that do: {readers}; "
                    "choose one with hardware.storage.eviction)"
                )
        if name is not None:
            try:
                STORE_MODELS.get(name).check_params(hs.eviction_params())
            except ValueError as e:
                raise ValueError(str(e)) from None
        if hs.offload is not None:
            if backend == "none":
                raise ValueError("hardware.storage.offload: no storage tier (cache.storage_backend is none)")
            if not STORAGE.get(backend).offloads:
                does = ", ".join(n for n in STORAGE.names() if STORAGE.get(n).offloads)
                raise ValueError(
                    f"hardware.storage.offload: the {backend} backend does not offload to a disk (backends that do: "
                    f"{does})"
                )
        return self

    @field_validator("model", mode="before")
    @classmethod
    def _model_name(cls, v: Any) -> Any:
        return {"preset": v} if isinstance(v, str) else v
