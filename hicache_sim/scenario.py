"""Scenario YAML schema (pydantic, unknown keys are errors), ``--set`` overrides, and resolution of a
scenario into the plain objects the core, the world and the replay use.

Units in names: ``*_tokens``, ``*_gb`` (1e9 bytes), ``*_gbps`` (1e9 bytes/s), ``*_mib`` (2**20 bytes), ``*_us``,
``*_s``.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .calibration_file import COMPUTE_FIELDS, Calibration, load_calibration
from .core import (
    EVICTION_STRATEGIES,
    HOST_EVICTION_RULES,
    PREFETCH_STOP_POLICIES,
    WRITE_POLICIES,
    CacheConfig,
    ConfigError,
)
from .core.sizing import ModelDims, host_pool_tokens, kv_bytes_per_token
from .linkmodel import LinkParams
from .memory import GIB, MIB, MemoryPlan, default_cuda_graph_max_bs, default_mem_fraction_static
from .presets import (
    GPUS,
    IO_BACKENDS,
    LINKS,
    MEM_LAYOUTS,
    MODELS,
    STORAGE,
    WEIGHT_BYTES,
    GPUPreset,
    ModelPreset,
    effective_io,
)


class ScenarioError(ValueError):
    """Bad scenario input: one line naming the file, the field and what was expected."""


# Simulated time is a float of seconds: a single cost beyond this makes the world's microsecond steps
# vanish under rounding (events stop advancing time), so per-operation costs are bounded here.
MAX_COST_US = 1e9


class _Strict(BaseModel):
    # Infinity and NaN are never a size, a rate or a fraction: refuse them at the field.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


def _in_registry(registry, value: str) -> str:
    if value not in registry:
        raise ValueError(f"unknown {registry.kind} {value!r}; supported: {', '.join(registry.names())}")
    return value


# ------------------------------------------------------------------------------------------ model


class ModelSpec(_Strict):
    """A model preset, optionally with fields overridden, or explicit dimensions."""

    preset: str | None = Field(None, description="model preset name (see `hicache-sim run --help`)")
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
    dtype: Literal["bf16", "fp16", "fp8", "fp32"] = Field("bf16", description="KV cache dtype")

    @field_validator("preset")
    @classmethod
    def _preset_known(cls, v: str | None) -> str | None:
        return None if v is None else _in_registry(MODELS, v)

    def resolve(self) -> ModelPreset:
        """Preset with overrides applied, or a model from explicit dimensions."""
        fields = {k: v for k, v in self.model_dump().items() if v is not None and k not in ("preset", "dtype")}
        if self.preset is not None:
            base = MODELS.get(self.preset)
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


class StorageSpec(_Strict):
    """Storage (L3) link; unset fields come from the backend preset (cache.storage_backend)."""

    read_gbps: float | None = Field(None, gt=0, description="storage -> host GB/s")
    write_gbps: float | None = Field(None, gt=0, description="host -> storage GB/s")
    latency_us: float | None = Field(None, ge=0, le=MAX_COST_US, description="latency per batch (query or I/O), us")
    capacity_gb: float | None = Field(None, ge=0, description="storage capacity, GB (0: unbounded)")


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
    cuda_context_mib: float = Field(
        1024.0, ge=0, description="GPU memory in use before the weights load (CUDA context, NCCL), MiB; estimate"
    )
    mfu: float | None = Field(None, gt=0, le=1, description="shorthand: sets linear_mfu and attention_mfu both")
    linear_mfu: float = Field(0.7, gt=0, le=1, description="fraction of peak FLOP/s the linear layers reach")
    attention_mfu: float = Field(0.6, gt=0, le=1, description="fraction of peak FLOP/s attention reaches")
    hbm_efficiency: float = Field(0.8, gt=0, le=1, description="fraction of peak HBM bandwidth decode reaches")
    step_overhead_us: float = Field(200.0, ge=0, le=MAX_COST_US, description="fixed cost per scheduler step, us")
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
}


class CacheSpec(_Strict):
    page_size: int = Field(64, gt=0, description="tokens per page")
    device_tokens: int | None = Field(None, gt=0, description="device KV pool, tokens (default: from GPU memory)")
    host_ratio: float | None = Field(None, ge=0, description="host pool = ratio x device pool")
    host_size_gb: float | None = Field(None, ge=0, description="host pool in GB per rank (overrides ratio)")
    host_tokens: int | None = Field(None, ge=0, description="host pool, exact tokens (page multiple)")
    host_alignment: Literal["up_plus_one", "down", "exact"] = Field(
        "up_plus_one", description="host pool page alignment: 2026 (+1 page), mid-2025 (down)"
    )
    write_policy: str = Field("write_through", description="write_through | write_through_selective | write_back")
    host_eviction: str = Field("evicted_only", description="evicted_only | reclaim_mirrors | boundary")
    host_memory_mode: Literal["cache", "buffer_only"] = Field("cache", description="host as cache or buffer")
    eviction_policy: str = Field("lru", description="lru | lfu | fifo | mru | filo | priority | slru")
    eviction_policy_config: dict[str, Any] = Field(default_factory=dict, description="e.g. protected_threshold")
    eviction_granularity: Literal["node", "page"] = Field("node", description="whole leaf nodes or exact pages")
    io_backend: Literal["kernel", "direct"] = Field("kernel", description="host<->device copy backend")
    mem_layout: Literal["layer_first", "page_first", "page_first_direct"] = Field(
        "page_first", description="host KV layout"
    )
    storage_backend: str = Field("none", description="none or a storage preset")
    prefetch_policy: str = Field("timeout", description="best_effort | wait_complete | timeout")
    prefetch_threshold: int = Field(256, ge=0, description="smallest prefetch worth issuing, tokens")
    prefetch_timeout_base_s: float | None = Field(None, ge=0, description="timeout base (default by semantics)")
    prefetch_timeout_per_ki_token_s: float | None = Field(None, ge=0, description="timeout per 1024 tokens")
    prefetch_timeout_max_s: float | None = Field(None, ge=0, description="timeout cap")
    load_back_threshold: int = Field(10, ge=0, description="smallest load-back, tokens")
    semantics: Literal["2025", "2026"] = Field("2026", description="upstream era where behaviour changed")
    evict_amount: Literal["need", "deficit"] | None = Field(None, description="override of the era's rule")
    parent_backup: Literal["none", "skip", "chain"] | None = Field(None, description="override")
    host_backup_eviction: Literal["full_retry", "shortfall"] | None = Field(None, description="override")
    prefetch_flow: Literal["prealloc", "after_hit"] | None = Field(None, description="override")
    write_back_eviction: Literal["staged", "unified"] | None = Field(None, description="override")
    checkpoint_hits: Literal["never", "past_inserted"] | None = Field(None, description="override")

    @field_validator(*_REGISTRY_FIELDS)
    @classmethod
    def _registered(cls, v: str, info) -> str:
        """Policy names come from the core's registries (the same ones the CLI help lists)."""
        if info.field_name == "storage_backend" and v == "none":
            return v
        return _in_registry(_REGISTRY_FIELDS[info.field_name], v)

    @model_validator(mode="after")
    def _one_host_size(self) -> CacheSpec:
        given = [k for k in ("host_ratio", "host_size_gb", "host_tokens") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"give one of host_ratio, host_size_gb, host_tokens (got {', '.join(given)})")
        return self


# -------------------------------------------------------------------------------------- scheduler


class SchedulerSpec(_Strict):
    chunked_prefill_size: int | None = Field(8192, gt=0, description="prefill chunk, tokens (null: whole prompt)")
    max_running_requests: int = Field(256, gt=0, description="cap on requests in the running batch")
    max_prefill_tokens: int = Field(16384, gt=0, description="new prefill tokens per step")
    reserve_last_token: bool = Field(True, description="match at most input - 1 tokens, as SGLang")
    insert_output: bool = Field(True, description="cache output tokens too when a request finishes (timed)")


# --------------------------------------------------------------------------------------- workload


class TraceSpec(_Strict):
    path: str = Field("builtin:mooncake/conversation_trace.jsonl", description="file, or builtin:<name>")
    format: Literal["mooncake", "bailian", "azure"] = Field("mooncake", description="trace format")
    limit: int | None = Field(None, gt=0, description="first N requests only")
    time_scale: float = Field(1.0, gt=0, le=1e6, description="multiply arrival times (0.5 = twice the load)")
    block_size: int | None = Field(
        None, gt=0, description="tokens per hash id (default: 512 mooncake, 16 bailian; trace convert's --block-size)"
    )


class MultiturnSpec(_Strict):
    """SGLang bench_multiturn: clients with growing histories."""

    num_clients: int = Field(256, gt=0)
    num_rounds: int = Field(5, gt=0)
    request_length: int = Field(512, gt=0, description="tokens of the first prompt and of each new question")
    output_length: int = Field(64, gt=0)
    request_rate: float = Field(1.0, gt=0, description="requests/s")
    max_parallel: int = Field(128, gt=0, description="in-flight cap")
    distribution: Literal["poisson", "uniform"] = Field("poisson")
    round_barrier: bool = Field(False, description="round r+1 starts when every client finished round r")
    range_ratio: float = Field(1.0, gt=0, le=1, description="lengths vary uniformly in [ratio x L, L]")

    def size_estimate(self) -> tuple[int, int]:
        """(requests, prompt tokens summed over them): round r's prompt holds r + 1 questions and r answers."""
        rounds = self.num_rounds
        per_client = self.request_length * rounds * (rounds + 1) // 2 + self.output_length * rounds * (rounds - 1) // 2
        return self.num_clients * self.num_rounds, self.num_clients * per_client


class SharedPrefixSpec(_Strict):
    num_groups: int = Field(32, gt=0)
    prompts_per_group: int = Field(16, gt=0)
    system_prompt_length: int = Field(2048, gt=0)
    question_length: int = Field(128, gt=0)
    output_length: int = Field(128, gt=0)
    request_rate: float = Field(4.0, gt=0)

    def size_estimate(self) -> tuple[int, int]:
        n = self.num_groups * self.prompts_per_group
        return n, n * (self.system_prompt_length + self.question_length)


class LongContextSpec(_Strict):
    num_documents: int = Field(20, gt=0)
    queries_per_document: int = Field(5, gt=0)
    context_length: int = Field(32768, gt=0)
    question_length: int = Field(64, gt=0)
    output_length: int = Field(64, gt=0)
    request_rate: float = Field(1.0, gt=0)
    order: Literal["grouped", "round_robin"] = Field("round_robin")

    def size_estimate(self) -> tuple[int, int]:
        n = self.num_documents * self.queries_per_document
        return n, n * (self.context_length + self.question_length)


class PoissonSpec(_Strict):
    num_requests: int = Field(1000, gt=0)
    request_rate: float = Field(4.0, gt=0)
    input_length: int = Field(2048, gt=0)
    output_length: int = Field(256, gt=0)
    shared_fraction: float = Field(0.5, ge=0, le=1, description="share of each prompt that is a common prefix")
    num_prefixes: int = Field(8, gt=0)
    lengths_from: str | None = Field(None, description="azure trace file or builtin: for arrivals and lengths")

    def size_estimate(self) -> tuple[int, int]:
        return self.num_requests, self.num_requests * self.input_length


class WorkloadSpec(_Strict):
    kind: Literal["trace", "multiturn", "shared_prefix", "long_context", "poisson_synthetic"] = "trace"
    partial_pages: Literal["keep", "drop"] = Field("keep", description="last partial page cached or not")
    trace: TraceSpec = Field(default_factory=TraceSpec)
    multiturn: MultiturnSpec = Field(default_factory=MultiturnSpec)
    shared_prefix: SharedPrefixSpec = Field(default_factory=SharedPrefixSpec)
    long_context: LongContextSpec = Field(default_factory=LongContextSpec)
    poisson_synthetic: PoissonSpec = Field(default_factory=PoissonSpec)


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
    workload: WorkloadSpec = Field(default_factory=WorkloadSpec)
    metrics: MetricsSpec = Field(default_factory=MetricsSpec)
    sweep: dict[str, list[Any]] = Field(default_factory=dict, description="dotted key -> values")

    @field_validator("sweep")
    @classmethod
    def _sweep_values_distinct(cls, v: dict[str, list[Any]]) -> dict[str, list[Any]]:
        """A value listed twice would run the same point twice (or, resumed, once under two rows)."""
        for key, values in v.items():
            seen: list[Any] = []
            for value in values:
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
        if chunk is not None and chunk < page:
            raise ValueError(
                f"scheduler.chunked_prefill_size ({chunk}) is smaller than cache.page_size ({page}): "
                "no chunk could hold one page; raise the chunk size or lower the page size"
            )
        return self

    @field_validator("model", mode="before")
    @classmethod
    def _model_name(cls, v: Any) -> Any:
        return {"preset": v} if isinstance(v, str) else v


# ------------------------------------------------------------------------------------ resolution


@dataclass
class Resolved:
    """A scenario turned into the objects the simulator runs on. Sizes and bytes are per GPU rank
    (one tensor-parallel rank of one pipeline stage): ``bytes_per_token`` counts the KV of the
    ``stage_layers`` layers that rank holds."""

    scenario: Scenario
    model: ModelPreset
    gpu: GPUPreset
    bytes_per_token: int
    device_tokens: int
    host_tokens: int
    cache: CacheConfig
    links: dict[str, LinkParams]
    storage_read_Bps: float
    storage_write_Bps: float
    storage_latency_s: float
    memory: MemoryPlan | None = None
    io_backend: str = ""  # the io backend and host layout SGLang runs (after its rewrites)
    mem_layout: str = ""
    stage_layers: int = 0
    compute_knobs: dict[str, float] = field(default_factory=dict)
    calibration: Calibration | None = None
    warnings: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.stage_layers = self.stage_layers or self.model.num_layers
        self.io_backend = self.io_backend or self.scenario.cache.io_backend
        self.mem_layout = self.mem_layout or self.scenario.cache.mem_layout

    @property
    def page_bytes(self) -> int:
        return self.bytes_per_token * self.cache.page_size

    @property
    def kv_factor(self) -> int:
        return 1 if self.model.attention == "mla" else 2

    @property
    def request_overhead_s(self) -> float:
        return self.compute_knobs.get("request_overhead_us", self.scenario.hardware.request_overhead_us) * 1e-6


def model_dims(model: ModelPreset, dtype: str, layers: int | None = None) -> ModelDims:
    """Attention dims of ``model`` (``layers``: the layers one pipeline stage holds; default all)."""
    return ModelDims(
        num_layers=model.num_layers if layers is None else layers,
        attention=model.attention,
        num_kv_heads=model.num_kv_heads,
        head_dim=model.head_dim,
        kv_lora_rank=model.kv_lora_rank,
        qk_rope_head_dim=model.qk_rope_head_dim,
        dtype=dtype,
    )


def check_tp(model: ModelPreset, tp: int) -> None:
    """SGLang's tensor-parallel rule: attention heads split evenly over the ranks, and KV heads either
    split evenly or (more ranks than KV heads) replicated a whole number of times."""
    if model.q_heads % tp:
        raise ConfigError(
            "hardware.tp",
            f"{tp} does not divide the {model.q_heads} attention heads of {model.name}; SGLang refuses it",
        )
    if model.attention == "mha":
        kv = model.num_kv_heads
        if (kv >= tp and kv % tp) or (kv < tp and tp % kv):
            raise ConfigError(
                "hardware.tp",
                f"{tp} neither divides nor is a multiple of the {kv} KV heads of {model.name}; SGLang refuses it",
            )


def check_pp(model: ModelPreset, pp: int) -> None:
    """Pipeline stages hold equal layer counts here: SGLang also splits unevenly (the last stages take
    one layer more), which the simulator does not model, so ``pp`` must divide the layers."""
    if pp > model.num_layers or model.num_layers % pp:
        raise ConfigError(
            "hardware.pp",
            f"{pp} does not divide the {model.num_layers} layers of {model.name}; the simulator models "
            "equal pipeline stages only (choose a divisor)",
        )


# Compute knobs a calibration file may carry, with their scenario field (same name and unit).
COMPUTE_KNOBS = tuple(COMPUTE_FIELDS)


def compute_knobs(hw: HardwareSpec, cal: Calibration | None) -> dict[str, float]:
    """Each compute knob: the scenario's value when set there (``mfu`` sets both efficiencies), else
    the calibration file's, else the default."""
    given = set(hw.model_fields_set)
    if hw.mfu is not None:
        given |= {"linear_mfu", "attention_mfu"}
    out = {}
    for k in COMPUTE_KNOBS:
        if k in given:
            out[k] = hw.mfu if k in ("linear_mfu", "attention_mfu") and hw.mfu is not None else getattr(hw, k)
        elif cal is not None and k in cal.compute:
            out[k] = cal.compute[k]
        else:
            out[k] = getattr(hw, k)
    return out


def memory_plan(sc: Scenario, model: ModelPreset, gpu: GPUPreset) -> MemoryPlan:
    """One rank's memory as SGLang profiles it (see :mod:`hicache_sim.memory`)."""
    hw = sc.hardware
    mem_mib = hw.memory_mib or gpu.memory_mib
    weights = model.params_b * 1e9 * WEIGHT_BYTES[model.weights_dtype] / (hw.tp * hw.pp)
    if hw.mem_fraction_static is not None:
        mfs, source = hw.mem_fraction_static, "given"
    else:
        chunk = sc.scheduler.chunked_prefill_size or sc.scheduler.max_prefill_tokens
        bs = hw.cuda_graph_max_bs or default_cuda_graph_max_bs(mem_mib, hw.tp)
        mfs, source = default_mem_fraction_static(mem_mib, chunk, bs, hw.tp, hw.pp), "SGLang default"
        if mfs <= 0:
            raise ConfigError(
                "hardware.mem_fraction_static",
                f"SGLang's default keeps nothing of {mem_mib} MiB for weights and KV (its activation and "
                "CUDA-graph reserve is larger); give mem_fraction_static",
            )
    return MemoryPlan(mem_mib * MIB, int(hw.cuda_context_mib * MIB), weights, mfs, source)


def resolve(sc: Scenario, *, strict: bool = False) -> Resolved:
    """Sizes in pages, policies, link and storage parameters. Raises ConfigError on an impossible mix."""
    try:
        model = sc.model.resolve()
    except ValueError as e:
        raise ConfigError("model", str(e)) from None
    hw = sc.hardware
    gpu = GPUS.get(hw.gpu)
    check_tp(model, hw.tp)
    check_pp(model, hw.pp)
    stage_layers = model.num_layers // hw.pp
    dims = model_dims(model, sc.model.dtype, stage_layers)
    bpt = kv_bytes_per_token(dims, hw.tp)
    c = sc.cache
    page = c.page_size
    warnings: list[str] = []
    memory = memory_plan(sc, model, gpu)
    ranks = f"tp {hw.tp} x pp {hw.pp}"
    if c.device_tokens is not None:
        device_tokens = c.device_tokens // page * page
        if device_tokens * bpt > memory.kv_pool_bytes:
            warnings.append(
                f"device pool of {device_tokens} tokens is {device_tokens * bpt / GIB:.1f} GiB per GPU, more than "
                f"the {max(memory.kv_pool_bytes, 0) / GIB:.1f} GiB {gpu.name} leaves for KV at {ranks} "
                f"({memory.describe()}): no such GPU holds it (raise hardware.tp or pp, or lower cache.device_tokens)"
            )
    else:
        device_tokens = memory.kv_tokens(bpt, page)
        if device_tokens < page:
            raise ConfigError(
                "hardware.mem_fraction_static",
                f"{model.name} leaves no KV pool on {gpu.name} at {ranks} ({memory.describe()}); "
                "raise tp or pp, or give cache.device_tokens",
            )
    if device_tokens < page:
        raise ConfigError("cache.device_tokens", f"device pool must hold at least one page ({page} tokens)")
    if c.host_ratio is None and c.host_size_gb is None and c.host_tokens is None:
        ratio = 1.2 if c.host_memory_mode == "buffer_only" else 2.0
        sizing = host_pool_tokens(device_tokens, page, host_ratio=ratio, alignment=c.host_alignment)
    else:
        sizing = host_pool_tokens(
            device_tokens,
            page,
            host_ratio=c.host_ratio,
            host_size_gb=c.host_size_gb,
            host_tokens=c.host_tokens,
            bytes_per_token=bpt,
            alignment=c.host_alignment,
        )
    if sizing.warning:
        warnings.append(sizing.warning)
    storage_on = c.storage_backend != "none"
    st = STORAGE.get(c.storage_backend) if storage_on else None
    cap_gb = hw.storage.capacity_gb if hw.storage.capacity_gb is not None else (st.capacity_gb if st else 0.0)
    storage_pages = int(cap_gb * 1e9 // (bpt * page)) if storage_on and cap_gb > 0 else None
    cache = CacheConfig(
        page_size=page,
        device_pages=device_tokens // page,
        host_pages=sizing.host_tokens // page,
        write_policy=c.write_policy,
        host_eviction=c.host_eviction,
        host_memory_mode=c.host_memory_mode,
        eviction_policy=c.eviction_policy,
        eviction_policy_config=dict(c.eviction_policy_config),
        eviction_granularity=c.eviction_granularity,
        load_back_threshold_tokens=c.load_back_threshold,
        storage=storage_on,
        storage_capacity_pages=storage_pages,
        prefetch_policy=c.prefetch_policy,
        prefetch_threshold_tokens=c.prefetch_threshold,
        prefetch_timeout_base_s=c.prefetch_timeout_base_s,
        prefetch_timeout_per_ki_token_s=c.prefetch_timeout_per_ki_token_s,
        prefetch_timeout_max_s=c.prefetch_timeout_max_s,
        semantics=c.semantics,
        evict_amount=c.evict_amount,
        parent_backup=c.parent_backup,
        host_backup_eviction=c.host_backup_eviction,
        prefetch_flow=c.prefetch_flow,
        write_back_eviction=c.write_back_eviction,
        checkpoint_hits=c.checkpoint_hits,
        bytes_per_page=bpt * page,
        strict=strict,
    )
    cal = None
    if hw.calibration:
        cal = load_calibration(resolve_builtin(hw.calibration, "calibration"))
    io, layout, note = effective_io(c.io_backend, c.mem_layout)
    if note:
        warnings.append(note)
    links = _link_params(io, layout, sc, gpu, cal)
    hs = hw.storage
    return Resolved(
        scenario=sc,
        model=model,
        gpu=gpu,
        bytes_per_token=bpt,
        device_tokens=device_tokens,
        host_tokens=sizing.host_tokens,
        cache=cache,
        links=links,
        storage_read_Bps=(hs.read_gbps or (st.read_gbps if st else 1.0)) * 1e9,
        storage_write_Bps=(hs.write_gbps or (st.write_gbps if st else 1.0)) * 1e9,
        storage_latency_s=(hs.latency_us if hs.latency_us is not None else (st.latency_us if st else 0.0)) * 1e-6,
        memory=memory,
        io_backend=io,
        mem_layout=layout,
        stage_layers=stage_layers,
        compute_knobs=compute_knobs(hw, cal),
        calibration=cal,
        warnings=warnings,
    )


def _link_params(io: str, layout: str, sc: Scenario, gpu: GPUPreset, cal: Calibration | None) -> dict[str, LinkParams]:
    """Per direction ('h2d', 'd2h') link parameters for io backend ``io`` and host layout ``layout``:
    the calibration file's group, else the link preset's curve for the backend with the scenario's
    overrides."""
    p = sc.hardware.pcie
    curve = LINKS.get(p.preset or gpu.pcie).curve(io)
    given = {
        "latency_s": None if p.latency_us is None else p.latency_us * 1e-6,
        "half_efficiency_bytes": p.half_efficiency_bytes,
        "segment_overhead_s": None if p.segment_overhead_us is None else p.segment_overhead_us * 1e-6,
    }
    out = {}
    for direction, gbps in (("h2d", p.h2d_gbps), ("d2h", p.d2h_gbps)):
        params = cal.get(direction, io, layout) if cal is not None else None
        if params is None:
            bandwidth = None if gbps is None else gbps * 1e9
            over = {k: v for k, v in {**given, "bandwidth_Bps": bandwidth}.items() if v is not None}
            params = dataclasses.replace(curve.params(direction, layout), **over)
        out[direction] = params
    return out


# --------------------------------------------------------------------------------- load / override


def _fmt_loc(loc: tuple) -> str:
    return ".".join(str(x) for x in loc)


def validation_message(path: str, err: ValidationError) -> str:
    """One line: file, field and what was expected (first error; the count of others)."""
    first = err.errors()[0]
    loc = _fmt_loc(first.get("loc", ()))
    msg = first.get("msg", "invalid").removeprefix("Value error, ")
    if first.get("type") == "extra_forbidden":
        msg = "unknown key"
    more = len(err.errors()) - 1
    tail = f" (and {more} more error{'s' if more > 1 else ''})" if more else ""
    return f"{path}: {loc}: {msg}{tail}" if loc else f"{path}: {msg}{tail}"


def parse_override(text: str) -> tuple[list[str], Any]:
    """``a.b.c=value`` -> (['a','b','c'], YAML-parsed value). An empty value is refused: it would
    silently unset the field."""
    if "=" not in text:
        raise ScenarioError(f"--set {text!r}: expected dotted.key=value")
    key, raw = text.split("=", 1)
    parts = [k for k in key.strip().split(".") if k]
    if not parts:
        raise ScenarioError(f"--set {text!r}: empty key")
    if not raw.strip():
        raise ScenarioError(f"--set {text!r}: empty value; expected a value (null unsets an optional field)")
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        value = raw
    return parts, value


def _merge(into: dict, value: dict) -> None:
    """Deep-merge ``value`` into ``into`` (mutates): a mapping given to --set updates a section, it
    does not replace it."""
    for k, v in value.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = v


def apply_override(data: dict, parts: list[str], value: Any) -> None:
    """Set a dotted key in a nested dict, creating mappings on the way (mutates ``data``). A mapping
    value is merged into an existing mapping (``--set 'cache={host_ratio: 2}'`` keeps the other cache
    keys)."""
    node = data
    for p in parts[:-1]:
        nxt = node.get(p)
        if nxt is None:
            nxt = node[p] = {}
        if isinstance(nxt, str) and p == "model":
            nxt = node[p] = {"preset": nxt}
        if not isinstance(nxt, dict):
            raise ScenarioError(f"--set {'.'.join(parts)}: {p} is not a mapping")
        node = nxt
    last = parts[-1]
    if isinstance(value, dict) and isinstance(node.get(last), dict):
        _merge(node[last], value)
    elif isinstance(value, dict) and isinstance(node.get(last), str) and last == "model":
        node[last] = {"preset": node[last], **value}
    else:
        node[last] = value


def load_scenario_data(path: str | Path) -> dict:
    """Read a scenario YAML into a dict (``builtin:NAME`` reads a scenario shipped with the package)."""
    p = resolve_builtin(path, "scenarios")
    if p.is_dir():
        raise ScenarioError(f"{path}: is a folder; expected a scenario YAML file")
    if not p.is_file():
        raise ScenarioError(f"{path}: scenario file not found")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ScenarioError(f"{path}: not UTF-8 text (byte {e.start}); expected a scenario YAML file") from None
    except OSError as e:
        raise ScenarioError(f"{path}: cannot read ({(e.strerror or type(e).__name__).lower()})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or "invalid YAML"
        raise ScenarioError(f"{path}{where}: YAML syntax error: {problem}") from None
    if data is None:
        raise ScenarioError(f"{path}: empty scenario; expected a mapping (name, model, cache, workload, ...)")
    if not isinstance(data, dict):
        raise ScenarioError(f"{path}: expected a mapping at the top level")
    return data


def build_scenario(data: dict, source: str, overrides: list[str] = ()) -> Scenario:
    """Validate data (after ``--set`` overrides) into a Scenario; ScenarioError names file and field."""
    data = copy.deepcopy(data)
    for text in overrides:
        parts, value = parse_override(text)
        apply_override(data, parts, value)
    try:
        return Scenario.model_validate(data)
    except ValidationError as e:
        raise ScenarioError(validation_message(source, e)) from None


def load_scenario(path: str | Path, overrides: list[str] = ()) -> Scenario:
    """Read, override and validate a scenario file."""
    return build_scenario(load_scenario_data(path), str(path), overrides)


PACKAGE_DATA = Path(__file__).resolve().parent / "data"


def resolve_builtin(path: str | Path, kind: str) -> Path:
    """``builtin:NAME`` -> the packaged file under data/<kind>/ (scenarios, traces or calibration)."""
    s = str(path)
    if s.startswith("builtin:"):
        name = s[len("builtin:") :]
        if kind in ("scenarios", "calibration") and not name.endswith(".yaml"):
            name += ".yaml"
        return PACKAGE_DATA / kind / name
    return Path(s)


def scenario_dump(sc: Scenario) -> dict:
    """The resolved scenario as plain data (written beside results)."""
    return sc.model_dump(mode="json")


__all__ = [
    "IO_BACKENDS",
    "MEM_LAYOUTS",
    "Resolved",
    "Scenario",
    "ScenarioError",
    "build_scenario",
    "load_scenario",
    "resolve",
]
