"""Resolution of a validated scenario into the plain objects the core, the world and the replay use:
pool sizes in pages, the cache configuration, link and storage parameters, compute knobs."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..core import (
    CacheConfig,
    ConfigError,
)
from ..core.policies import HOST_MEMORY_MODES
from ..core.routing import ROUTERS
from ..core.sizing import ModelDims, dsa_indexer_bytes_per_token, host_pool_tokens, kv_bytes_per_token
from ..core.stores import STORE_MODELS
from ..hardware.calibration import COMPUTE_FIELDS, Calibration, load_calibration
from ..hardware.commmem import in_use_before_weights_mib
from ..hardware.linkmodel import LinkParams, segments_for
from ..hardware.memory import (
    GIB,
    MIB,
    MemoryPlan,
    default_chunked_prefill_size,
    default_cuda_graph_max_bs,
    default_mem_fraction_static,
    max_running_requests,
)
from ..hardware.params import TP as TP_GROUP
from ..hardware.params import split_of, weight_bytes_per_gpu, weight_share
from ..hardware.presets import (
    GPUS,
    LINKS,
    STORAGE,
    WEIGHT_BYTES,
    GPUPreset,
    ModelPreset,
    effective_io,
)
from ..hardware.speculative import (
    NO_DRAFT,
    SPEC_ALGORITHMS,
    DraftKV,
    RoundSteps,
    draft_kv,
    round_steps,
    running_default,
)
from ..simconfig import SideCopy, SimConfig
from .load import resolve_builtin
from .schema import AUTO, CacheSpec, HardwareSpec, Scenario


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
    # The store's offload disk, when it has one: read rate and one object read's latency.
    storage_offload_read_Bps: float = 0.0
    storage_offload_latency_s: float = 0.0
    # The scheduler limits SGLang runs with (``auto`` resolved as sglang 0.5.23 resolves an unset flag).
    chunked_prefill_size: int | None = None
    max_running_requests: int = 0
    cuda_graph_max_bs: int = 0
    prefill_graph: str = "breakable"  # the prefill CUDA-graph backend SGLang runs (PREFILL_FLOOR_KNOB)
    io_backend: str = ""  # the io backend and host layout SGLang runs (after its rewrites)
    mem_layout: str = ""
    stage_layers: int = 0
    compute_knobs: dict[str, float] = field(default_factory=dict)
    calibration: Calibration | None = None
    warnings: list[str] = field(default_factory=list)
    draft: DraftKV = NO_DRAFT  # speculative decoding's draft KV per token (hardware/speculative.py)
    # Host pools beside the KV pool that every transfer moves with it (side_copies): their bytes are in
    # cache.bytes_per_page and the store's page, not in bytes_per_token / page_bytes (the KV pool's).
    side_copies: tuple[SideCopy, ...] = ()

    def __post_init__(self) -> None:
        self.stage_layers = self.stage_layers or self.model.num_layers
        self.io_backend = self.io_backend or self.scenario.cache.io_backend
        self.mem_layout = self.mem_layout or self.scenario.cache.mem_layout

    @property
    def page_bytes(self) -> int:
        """One page of the KV pool (the target's KV only; a transfer moves ``transfer_page_bytes``)."""
        return self.bytes_per_token * self.cache.page_size

    @property
    def transfer_page_bytes(self) -> int:
        """What one page's transfer moves and a store keeps: the KV and every pool beside it."""
        return self.cache.bytes_per_page

    @property
    def kv_factor(self) -> int:
        return kv_tensors(self.model)

    @property
    def kv_heads_per_rank(self) -> int:
        """KV heads one rank's pool holds (MLA: its one latent), what a page_head copy moves apart."""
        return kv_heads(self.model, self.scenario.hardware)

    @property
    def dp_ranks(self) -> int:
        """Data-parallel ranks, each with its own pools, tree and requests: replicas x attention-DP groups."""
        return self.scenario.hardware.dp * self.scenario.hardware.attn_dp

    @property
    def request_overhead_s(self) -> float:
        return self.compute_knobs.get("request_overhead_us", self.scenario.hardware.request_overhead_us) * 1e-6

    def sim_config(self) -> SimConfig:
        """What the timed world runs on, as plain dataclasses (scheduler policy, compute parameters,
        links, sampling interval): ``sim/`` reads this, never the scenario (:mod:`.simconfig`)."""
        from .simconfig import sim_config  # it imports this module

        return sim_config(self)


def speculative_round(sc: Scenario, model: ModelPreset) -> RoundSteps | None:
    """The speculative round SGLang runs (hardware/speculative.py ``round_steps``) when its time is
    modelled (``model.speculative.accept_len`` given), else None; ConfigError where it cannot be."""
    spec = sc.model.speculative
    if spec is None:
        return None
    steps = round_steps(spec.algorithm, model.architecture, spec.num_steps, spec.eagle_topk, spec.num_draft_tokens)
    if spec.accept_len is None:
        return None  # the flags checked as SGLang checks them, the time not modelled
    if spec.accept_len > steps.num_draft_tokens:
        raise ConfigError(
            "model.speculative.accept_len",
            f"{spec.accept_len} exceeds num_draft_tokens {steps.num_draft_tokens} (a round verifies that many per "
            "request); expected 1 to it",
        )
    return steps


def speculative_draft(sc: Scenario, model: ModelPreset) -> DraftKV:
    """The draft KV per token of ``sc.model.speculative`` on one rank (NO_DRAFT without it)."""
    spec, hw = sc.model.speculative, sc.hardware
    if spec is None:
        return NO_DRAFT
    try:
        draft = spec.draft(model)
    except ValueError as e:
        raise ConfigError("model.speculative", str(e)) from None
    return draft_kv(
        spec.algorithm,
        model,
        draft,
        dtype=sc.model.dtype,
        stage_layers=model.num_layers // hw.pp,
        attn_tp=attn_tp(hw),
        pp=hw.pp,
        attn_dp=hw.attn_dp,
        ranks=hw.tp * hw.pp,
    )


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


def check_nodes(hw: HardwareSpec) -> None:
    """SGLang's rule for ``--nnodes``: the tp x pp ranks split evenly over the nodes."""
    if (hw.tp * hw.pp) % hw.nnodes:
        raise ConfigError(
            "hardware.nnodes", f"{hw.nnodes} does not divide tp x pp = {hw.tp * hw.pp} ranks; SGLang refuses it"
        )


def check_moe(model: ModelPreset) -> None:
    """A MoE's expert fields must describe a model of the stated size: top-k within the experts, an
    expert width, and routed parameters (all of them; the active top-k) within the totals."""
    if not model.num_experts:
        return
    if not 0 < model.experts_per_token <= model.num_experts or model.moe_intermediate_size <= 0:
        raise ConfigError(
            "model.experts_per_token",
            f"{model.name}: a MoE needs 1 <= experts_per_token <= num_experts ({model.num_experts}) and a "
            "moe_intermediate_size > 0",
        )
    if model.dense_layers >= model.num_layers:
        raise ConfigError("model.dense_layers", f"{model.dense_layers} leaves no MoE layer of {model.num_layers}")
    routed = model.routed_params_b
    active = routed * model.experts_per_token / model.num_experts
    if routed > model.params_b or active > model.active_params_b:
        raise ConfigError(
            "model.num_experts",
            f"{model.name}: the routed experts alone hold {routed:.1f} B parameters ({active:.1f} B per token), "
            f"more than params_b {model.params_b} / active_params_b {model.active_params_b}",
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


#: The host-cost knob of a prefill forward, by the prefill CUDA-graph backend SGLang runs: eager (no
#: graph) issues every kernel from Python, a graph replays the pieces between its breaks.
PREFILL_FLOOR_KNOB = {
    "disabled": "prefill_eager_us_per_layer",
    "breakable": "prefill_graph_us_per_layer",
    "full": "prefill_graph_us_per_layer",
}


#: When sglang 0.5.23 turns its default breakable prefill graph off (``arg_groups/cuda_graph_hook.py``):
#: (why, does it apply to (scenario, model)). The first that applies wins.
PREFILL_GRAPH_OFF = (
    # apply_cuda_graph_compatibility: PP prefill graph replay is opt-in
    ("pipeline parallelism", lambda sc, model: sc.hardware.pp > 1),
    # disable_prefill_cuda_graph_for_deepseek_trtllm_mla: DeepSeek-V3-architecture (MLA) models on
    # sm100 (the b200 preset) default to the trtllm_mla backend, which a prefill graph would regress
    ("DeepSeek MLA on trtllm_mla (sm100)", lambda sc, model: model.attention == "mla" and sc.hardware.gpu == "b200"),
)


def prefill_graph_backend(sc: Scenario, model: ModelPreset) -> str:
    """``--cuda-graph-backend-prefill`` as SGLang runs it: the scenario's, or for ``auto`` sglang
    0.5.23's default, breakable, unless a rule of ``PREFILL_GRAPH_OFF`` turns it off."""
    given = sc.scheduler.cuda_graph_backend_prefill
    if given != AUTO:
        return given
    return "disabled" if any(applies(sc, model) for _, applies in PREFILL_GRAPH_OFF) else "breakable"


def attn_tp(hw: HardwareSpec) -> int:
    """Ranks one attention group spans: tp, or tp / attn_dp with attention DP, whose groups each hold
    every token of their requests (MHA/GQA KV heads split over these ranks only; sglang 0.5.23
    ``derive_attn_tp_size``)."""
    return hw.tp // hw.attn_dp


def check_dp_mode(sc: Scenario, storage: StorageParams) -> None:
    """Instant mode has no queues and replays one DP rank after another: it can route only by a method
    that reads no load, and cannot let the ranks share one store in time order (both need mode: timed)."""
    hw = sc.hardware
    if sc.mode != "instant" or hw.dp * hw.attn_dp == 1:
        return
    method = hw.load_balance_method
    if ROUTERS.get(method).needs_load:
        raise ConfigError(
            "hardware.load_balance_method",
            f"{method} sends each request to the rank with the least load (its running and waiting requests), "
            "which only a timed run has: use mode: timed, or round_robin in instant mode",
        )
    if storage.on and STORE_MODELS.get(storage.eviction).capacity_scope == "shared":
        raise ConfigError(
            "mode",
            f"the {hw.dp * hw.attn_dp} DP ranks share one L3 store ({storage.eviction}), which each reads as the "
            "others fill it: instant mode replays one rank after another, so use mode: timed",
        )


def attn_dp_chunk(chunk: int | None, attn_dp: int) -> int | None:
    """Each attention-DP group's prefill chunk: SGLang divides ``--chunked-prefill-size`` by the groups
    after sizing memory with the whole one (``handle_data_parallelism``)."""
    return chunk if chunk is None or attn_dp == 1 else chunk // attn_dp


def chunked_prefill_size(sc: Scenario, gpu: GPUPreset) -> int | None:
    """The prefill chunk SGLang runs: the scenario's, or for ``auto`` its default by GPU memory
    (sglang 0.5.23 ``handle_gpu_memory_settings``); None: no chunking."""
    chunk = sc.scheduler.chunked_prefill_size
    if chunk != AUTO:
        return chunk
    chunk = default_chunked_prefill_size(sc.hardware.memory_mib or gpu.memory_mib)
    if chunk < sc.cache.page_size:
        raise ConfigError(
            "scheduler.chunked_prefill_size",
            f"auto is {chunk} tokens on {gpu.name}, smaller than cache.page_size ({sc.cache.page_size}): no "
            "chunk could hold one page; give a chunk size of at least one page, or -1",
        )
    return chunk


def cuda_graph_max_bs(sc: Scenario, gpu: GPUPreset) -> int:
    """The decode CUDA-graph batch size SGLang reserves memory for: the scenario's, else its default
    by GPU memory and TP, lowered to an explicit ``max_running_requests``."""
    hw = sc.hardware
    if hw.cuda_graph_max_bs is not None:
        return hw.cuda_graph_max_bs
    given = sc.scheduler.max_running_requests
    return default_cuda_graph_max_bs(hw.memory_mib or gpu.memory_mib, hw.tp, None if given == AUTO else given)


def running_cap(sc: Scenario, model: ModelPreset, device_tokens: int, warnings: list[str]) -> int:
    """The running-request cap SGLang ends with for this pool (appends to ``warnings`` when it lowers a
    given value). ``auto`` needs the model's context length; without one it is 0 (not derived) in
    instant mode, which has no running batch, and an error in timed mode."""
    given = sc.scheduler.max_running_requests
    spec = sc.model.speculative
    if given == AUTO and (spec_default := running_default(spec and spec.algorithm)) is not None:
        given = spec_default  # SGLang sets it when speculative decoding is on and the flag is unset
    if given == AUTO and not model.context_len:
        if sc.mode == "instant":
            return 0
        raise ConfigError(
            "scheduler.max_running_requests",
            f"auto is derived from the model's context length, which {model.name} does not give: set "
            "model.context_len, or give max_running_requests",
        )
    # A given cap is the whole server's: each attention-DP group takes its share (sglang 0.5.23
    # KVCacheConfigurator.resolve_max_num_reqs); SGLang's own estimate is per group already.
    per_group = None if given == AUTO else max(1, given // sc.hardware.attn_dp)
    cap = max_running_requests(device_tokens, model.context_len, per_group)
    if per_group is not None and cap < per_group:
        warnings.append(
            f"scheduler.max_running_requests {given} is more than half the device pool's {device_tokens} "
            f"tokens: SGLang lowers it to {cap}"
        )
    return cap


def memory_plan(sc: Scenario, model: ModelPreset, gpu: GPUPreset, chunk: int | None, graph_bs: int) -> MemoryPlan:
    """One rank's memory as SGLang profiles it (see :mod:`hicache_sim.hardware.memory`), for the prefill
    chunk (None: no chunking) and decode CUDA-graph batch size SGLang runs."""
    hw = sc.hardware
    mem_mib = hw.memory_mib or gpu.memory_mib
    # Under attention DP the attention (and some classes' embedding) is sharded over tp / attn_dp only.
    weights = weight_bytes_per_gpu(model, hw.tp, hw.pp, hw.attn_dp)
    weights += speculative_draft(sc, model).weight_bytes  # loaded before SGLang profiles the memory
    if hw.mem_fraction_static is not None:
        mfs, source = hw.mem_fraction_static, "given"
    else:
        reserve_chunk = chunk or sc.scheduler.max_prefill_tokens
        mfs = default_mem_fraction_static(mem_mib, reserve_chunk, graph_bs, hw.tp, hw.pp, hw.attn_dp)
        source = "SGLang default"
        if mfs <= 0:
            raise ConfigError(
                "hardware.mem_fraction_static",
                f"SGLang's default keeps nothing of {mem_mib} MiB for weights and KV (its activation and "
                "CUDA-graph reserve is larger); give mem_fraction_static",
            )
    if hw.cuda_context_mib is not None:
        in_use, where = hw.cuda_context_mib, "hardware.cuda_context_mib"
    else:
        in_use, where = in_use_before_weights_mib(gpu.allreduce_fabric, hw.tp)
    return MemoryPlan(mem_mib * MIB, int(in_use * MIB), weights, mfs, source, where)


# Host pool ratio when the scenario gives no host size, per host memory mode: SGLang's ``--hicache-ratio``
# default (2.0), smaller for a staging buffer (buffer_only: 1.2); the modes' own values.
DEFAULT_HOST_RATIO = {name: HOST_MEMORY_MODES.get(name).default_host_ratio for name in HOST_MEMORY_MODES.names()}
# Storage bandwidth when neither the scenario nor a storage preset gives one (GB/s); storage off.
NO_STORAGE_GBPS = 1.0


@dataclass(frozen=True)
class StorageParams:
    """The L3 tier as the world sees it: off, or a capacity (None: unbounded), its costs, and what it
    does when full (a ``STORE_MODELS`` name and the knobs the scenario set)."""

    on: bool
    capacity_pages: int | None
    read_Bps: float
    write_Bps: float
    latency_s: float
    eviction: str = "lru"
    eviction_params: dict[str, float] = dataclasses.field(default_factory=dict)
    objects_per_page: int = 1
    # The disk the store offloads to (hardware.storage.offload): off, or its capacity (None: unbounded),
    # read rate and one object read's latency.
    offload: bool = False
    offload_capacity_pages: int | None = None
    offload_read_Bps: float = 0.0
    offload_latency_s: float = 0.0


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
    check_nodes(hw)
    check_moe(model)
    stage_layers = model.num_layers // hw.pp
    bpt = kv_bytes_per_token(model_dims(model, sc.model.dtype, stage_layers), attn_tp(hw))
    draft = speculative_draft(sc, model)
    if speculative_round(sc, model) and SPEC_ALGORITHMS.get(draft.algorithm).draft_forward and not draft.layers:
        raise ConfigError("model.speculative.accept_len", "a draft of 0 layers has no forward to time")
    warnings: list[str] = []
    if hw.attn_dp > 1 and split_of(model).attention == TP_GROUP:
        warnings.append(
            f"hardware.attn_dp {hw.attn_dp}: SGLang 0.5.23's {model.architecture} builds its attention over the "
            f"whole tp group, not for attention DP (its layer boundary sums the attention over one group: "
            f"{split_of(model).source}); the run shows a class built for it, with this model's weights per GPU"
        )
    if hw.attn_dp > 1 and hw.pp > 1 and sc.mode == "timed":
        warnings.append(
            f"hardware.attn_dp {hw.attn_dp} at pp {hw.pp}: the attention-DP groups step on their own here; SGLang "
            "steps them together (sim/lockstep.py models that at pp 1 only), so TTFT is optimistic"
        )
    chunk, graph_bs = chunked_prefill_size(sc, gpu), cuda_graph_max_bs(sc, gpu)
    memory = memory_plan(sc, model, gpu, chunk, graph_bs)
    chunk = attn_dp_chunk(chunk, hw.attn_dp)
    device_tokens = _device_tokens(sc, model, gpu, bpt + draft.device_bpt, memory, warnings)
    running = running_cap(sc, model, device_tokens, warnings)
    # A packed draft widens the host KV pool's rows; a draft pool of its own is counted by auto-sizing.
    host_side_bpt = indexer_bytes_per_token(model, stage_layers) + draft.own_pool_bpt
    host_tokens = _host_tokens(sc, device_tokens, bpt + draft.packed_bpt, warnings, host_side_bpt)
    store = STORAGE.get(sc.cache.storage_backend).sglang_backend if sc.cache.storage_backend != "none" else ""
    io, layout, note = effective_io(
        sc.cache.io_backend, sc.cache.mem_layout, store, sc.cache.semantics, attention=model.attention
    )
    sides = side_copies(model, draft, stage_layers, layout, sc.cache.page_size, kv_heads(model, hw))
    moved_bpt = bpt + sum(c.bytes_per_token for c in sides)  # what a transfer and a stored page carry
    storage = _storage(sc, moved_bpt, model)
    check_dp_mode(sc, storage)
    policy = _write_policy(sc.cache, warnings)
    cache = _cache_config(sc.cache, policy, device_tokens, host_tokens, storage, moved_bpt, strict)
    cal = load_calibration(resolve_builtin(hw.calibration, "calibration")) if hw.calibration else None
    if note:
        warnings.append(note)
    timed_links = cal is not None and sc.mode == "timed"  # instant mode moves no bytes over a link
    if timed_links and (note := cal.coverage_note(hw.calibration, io, layout, hw.pcie.preset or gpu.pcie)):
        warnings.append(note)
    return Resolved(
        scenario=sc,
        model=model,
        gpu=gpu,
        bytes_per_token=bpt,
        device_tokens=device_tokens,
        host_tokens=host_tokens,
        cache=cache,
        links=_link_params(io, layout, sc, gpu, cal),
        storage_read_Bps=storage.read_Bps,
        storage_write_Bps=storage.write_Bps,
        storage_latency_s=storage.latency_s,
        storage_offload_read_Bps=storage.offload_read_Bps,
        storage_offload_latency_s=storage.offload_latency_s,
        memory=memory,
        chunked_prefill_size=chunk,
        max_running_requests=running,
        cuda_graph_max_bs=graph_bs,
        prefill_graph=prefill_graph_backend(sc, model),
        io_backend=io,
        mem_layout=layout,
        stage_layers=stage_layers,
        compute_knobs=compute_knobs(hw, cal),
        calibration=cal,
        warnings=warnings,
        draft=draft,
        side_copies=sides,
    )


def _device_tokens(
    sc: Scenario, model: ModelPreset, gpu: GPUPreset, bpt: int, memory: MemoryPlan, warnings: list[str]
) -> int:
    """Device pool in tokens (whole pages): the scenario's, with a warning when no such GPU holds it,
    else what SGLang's memory profile leaves for KV (appends to ``warnings``)."""
    hw, page = sc.hardware, sc.cache.page_size
    ranks = f"tp {hw.tp} x pp {hw.pp}"
    if sc.cache.device_tokens is not None:
        device_tokens = sc.cache.device_tokens // page * page
        if device_tokens * bpt > memory.kv_pool_bytes:
            warnings.append(
                f"device pool of {device_tokens} tokens is {device_tokens * bpt / GIB:.1f} GiB per GPU, more than "
                f"the {max(memory.kv_pool_bytes, 0) / GIB:.1f} GiB {gpu.name} leaves for KV at {ranks} "
                f"({memory.describe()}): no such GPU holds it (raise hardware.tp or pp, or lower cache.device_tokens)"
            )
    else:
        device_tokens = memory.kv_tokens(bpt, page)
        if device_tokens < page:
            raise ConfigError("hardware.mem_fraction_static", no_pool_message(sc, model, gpu, memory))
    if device_tokens < page:
        raise ConfigError("cache.device_tokens", f"device pool must hold at least one page ({page} tokens)")
    return device_tokens


def _pool_tokens(sc: Scenario, model: ModelPreset, gpu: GPUPreset) -> int:
    """Device pool (tokens) SGLang's profiling leaves ``model`` on ``gpu`` at ``sc``'s tp x pp; 0: none.
    Raises ConfigError where SGLang refuses the split itself."""
    hw = sc.hardware
    check_tp(model, hw.tp)
    check_pp(model, hw.pp)
    bpt = kv_bytes_per_token(model_dims(model, sc.model.dtype, model.num_layers // hw.pp), attn_tp(hw))
    bpt += speculative_draft(sc, model).device_bpt
    plan = memory_plan(sc, model, gpu, chunked_prefill_size(sc, gpu), cuda_graph_max_bs(sc, gpu))
    return plan.kv_tokens(bpt, sc.cache.page_size)


def _holds(sc: Scenario, model: ModelPreset, on: GPUPreset, **hardware: object) -> bool:
    """Would SGLang leave at least one page of KV on ``on`` with these hardware fields changed?"""
    trial = sc.model_copy(update={"hardware": sc.hardware.model_copy(update=hardware)})
    try:
        return _pool_tokens(trial, model, on) >= sc.cache.page_size
    except ConfigError:
        return False


# Most ranks a remedy proposes (eight nodes of eight GPUs).
MAX_RANKS = 64


def _more_tp(sc: Scenario, model: ModelPreset, gpu: GPUPreset) -> str | None:
    hw = sc.hardware
    for tp in range(hw.tp + 1, MAX_RANKS // hw.pp + 1):
        if _holds(sc, model, gpu, tp=tp):
            return f"--tp-size {tp} (hardware.tp; {_weights_move(sc, model, tp=tp)})"
    return None


def _more_pp(sc: Scenario, model: ModelPreset, gpu: GPUPreset) -> str | None:
    hw = sc.hardware
    for pp in range(hw.pp + 1, MAX_RANKS // hw.tp + 1):
        if _holds(sc, model, gpu, pp=pp):
            return f"--pp-size {pp} (hardware.pp; {_weights_move(sc, model, pp=pp)})"
    return None


def _weights_move(sc: Scenario, model: ModelPreset, *, tp: int | None = None, pp: int | None = None) -> str:
    """Weights per rank (a speculative draft's included) now and with ``tp`` / ``pp`` ranks: what every
    rank holds whole does not shrink."""
    hw = sc.hardware

    def per_rank(trial_tp: int, trial_pp: int) -> float:
        trial = sc.model_copy(update={"hardware": hw.model_copy(update={"tp": trial_tp, "pp": trial_pp})})
        try:
            draft = speculative_draft(trial, model).weight_bytes
        except ConfigError:
            draft = 0.0
        return weight_bytes_per_gpu(model, trial_tp, trial_pp, hw.attn_dp) + draft

    now, then = per_rank(hw.tp, hw.pp), per_rank(tp or hw.tp, pp or hw.pp)
    return f"weights per rank {now / GIB:.2f} -> {then / GIB:.2f} GiB"


def _larger_gpu(sc: Scenario, model: ModelPreset, gpu: GPUPreset) -> str | None:
    mib = sc.hardware.memory_mib or gpu.memory_mib
    gpus = (GPUS.get(name) for name in GPUS.names())
    bigger = sorted((g for g in gpus if g.memory_mib > mib), key=lambda g: (g.memory_mib, g.name))
    fits = [g.name for g in bigger if _holds(sc, model, g, gpu=g.name, memory_mib=None)]
    return f"a GPU with more memory at the same ranks (hardware.gpu: {', '.join(fits)})" if fits else None


def _fp8_weights(sc: Scenario, model: ModelPreset, gpu: GPUPreset) -> str | None:
    if WEIGHT_BYTES[model.weights_dtype] <= WEIGHT_BYTES["fp8"]:
        return None
    fp8 = dataclasses.replace(model, weights_dtype="fp8")
    if not _holds(sc, fp8, gpu):
        return None
    return "an fp8 checkpoint of the model (model.weights_dtype: fp8, or its config.json: half the weight bytes)"


def _mem_fraction(sc: Scenario, model: ModelPreset, gpu: GPUPreset) -> str | None:
    for mfs in (0.85, 0.88, 0.9, 0.92, 0.94):
        if mfs > (sc.hardware.mem_fraction_static or 0.0) and _holds(sc, model, gpu, mem_fraction_static=mfs):
            return f"--mem-fraction-static {mfs} (hardware.mem_fraction_static; less kept back for activations)"
    return None


#: What could give a model that leaves no KV pool one, each tried in the scenario's place; the message
#: lists those that would (a remedy that cannot help is never printed).
NO_POOL_REMEDIES = (_more_tp, _more_pp, _larger_gpu, _fp8_weights, _mem_fraction)


def no_pool_message(sc: Scenario, model: ModelPreset, gpu: GPUPreset, memory: MemoryPlan) -> str:
    """Why no KV pool is left (the weight bytes per rank and their dtype) and the changes that would
    leave one, each checked with the same memory profile."""
    hw = sc.hardware
    share = weight_share(model, hw.tp, hw.pp, hw.attn_dp).describe()
    weights = f"{memory.weight_bytes / GIB:.2f} GiB of {model.weights_dtype} weights per rank ({share})"
    draft = speculative_draft(sc, model)
    if draft.weight_bytes or draft.device_bpt:  # the share above is the target's: say what the draft adds
        weights += (
            f", the speculative draft's {draft.weight_bytes / GIB:.2f} GiB of them, and its KV "
            f"{draft.device_bpt} B a token in the cell (model.speculative; an MTP module: model.nextn_params_b)"
        )
    helps = [r for r in (remedy(sc, model, gpu) for remedy in NO_POOL_REMEDIES) if r]
    advice = (
        f"any of these leaves one: {'; '.join(helps)}"
        if helps
        else f"no tp / pp split up to {MAX_RANKS} ranks, larger GPU preset or fp8 checkpoint leaves one"
    )
    return (
        f"{model.name} leaves no KV pool on {gpu.name} at tp {hw.tp} x pp {hw.pp}: {weights} "
        f"({memory.describe()}); {advice}; to simulate a pool no such GPU holds, give cache.device_tokens"
    )


# SGLang's host-memory auto-sizing (mem_cache/hicache_auto_size.py, pool_host/base.py): 10 GiB of the
# host kept back, the rest split over the ranks of the machine, and 5 % slack for page rounding.
HOST_RESERVE_BYTES = 10 * GIB
HOST_SLACK_FRACTION = 0.05


def sglang_ranks_per_host(hw: HardwareSpec) -> int:
    """The ranks SGLang 0.5.23 splits a node's host memory over (``ranks_per_host``): one replica's
    ``tp x pp`` over ``nnodes``, at least 1."""
    return max(1, hw.tp * hw.pp // hw.nnodes)


def indexer_bytes_per_token(model: ModelPreset, layers: int) -> int:
    """The DSA indexer bytes of one token over ``layers`` layers (0: the model has no indexer)."""
    return dsa_indexer_bytes_per_token(model.index_head_dim, layers)


def kv_heads(model: ModelPreset, hw: HardwareSpec) -> int:
    """KV heads one rank's pool holds (MLA: its one latent), what a page_head copy moves apart."""
    if model.attention == "mla":
        return 1
    return max(1, model.num_kv_heads // attn_tp(hw))


def _packed_draft(model: ModelPreset, draft: DraftKV, layers: int, pieces: int) -> SideCopy | None:
    """An MTP draft packed into the KV pool's rows (``pool_host/mla.py``: ``layer_num`` = target + draft
    layers): its rows ride in the KV pool's page and its backup kernel; a load copies each draft layer
    on its own (``_l2_load_transfers``, ``is_draft``)."""
    if not draft.packed_bpt:
        return None
    return SideCopy("MTP draft", draft.packed_bpt, draft.layers, pieces, own_copy=False)


def _indexer(model: ModelPreset, draft: DraftKV, layers: int, pieces: int) -> SideCopy | None:
    """DSA indexer keys: a pool of its own whose indices follow the KV pool's (``pool_host/dsa.py``
    ``DSAIndexerPoolHost``, ``SidecarPoolSpec(INDEXER, KV)``), copied page by page: one piece per page and
    layer (``_get_indexer_page_indices``)."""
    per_token = indexer_bytes_per_token(model, layers)
    return SideCopy("DSA indexer", per_token, layers, 1, own_copy=True) if per_token else None


def _draft_pool(model: ModelPreset, draft: DraftKV, layers: int, pieces: int) -> SideCopy | None:
    """A draft's host pool of its own (``hybrid_pool_assembler.py`` ``build_full_draft_pools``:
    ``SidecarPoolSpec(DRAFT, KV)``), in the KV pool's layout with the draft's own row."""
    if not draft.own_pool_bpt:
        return None
    return SideCopy("draft", draft.own_pool_bpt, draft.layers, pieces, own_copy=True)


#: Pools beside the KV pool that SGLang 0.5.23 moves with every page (D2H backup, H2D load-back, storage
#: backup and prefetch), each built from the model, the draft, the stage's layers and the pieces per page
#: and layer of its row (the KV row's for a packed draft, the draft's for its own pool).
SIDE_COPIES = (
    (_packed_draft, "kv"),
    (_indexer, "kv"),
    (_draft_pool, "draft"),
)


def side_copies(
    model: ModelPreset, draft: DraftKV, layers: int, layout: str, page_size: int, heads: int
) -> tuple[SideCopy, ...]:
    """The pools beside the KV pool one rank's transfers move (empty for a model without any), in host
    layout ``layout``: the bytes they add per token, their layers and pieces (``SimConfig.side_copies``)."""
    out = []
    for build, row in SIDE_COPIES:
        kv, h = (kv_tensors(model), heads) if row == "kv" else (draft.kv_tensors, draft.kv_heads)
        pieces = segments_for(1, layout, 1, kv, page_size=page_size, heads=h)
        copy = build(model, draft, layers, pieces)
        if copy is not None:
            out.append(copy)
    return tuple(out)


def default_host_ratio(sc: Scenario, device_tokens: int, bpt: int, warnings: list[str], indexer_bpt: int = 0) -> float:
    """The host ratio SGLang takes when no host size is given: 2 (1.2 in buffer_only), lowered so the
    host pools fit ``hardware.host_memory_gib`` when given (``auto_size_hicache``): per rank,
    ``(host memory - 10 GiB) // ranks per host x host_memory_fraction x 0.95`` over the device bytes the
    host mirrors (the KV pool's and the DSA indexer's ``size + page`` rows). Appends to ``warnings``
    when it lowers the ratio."""
    c, hw = sc.cache, sc.hardware
    ratio = DEFAULT_HOST_RATIO[c.host_memory_mode]
    if hw.host_memory_gib is None:
        return ratio
    ranks = sglang_ranks_per_host(hw)
    budget = int((int(hw.host_memory_gib * GIB) - HOST_RESERVE_BYTES) // ranks * c.host_memory_fraction)
    fits = budget * (1 - HOST_SLACK_FRACTION) / ((device_tokens + c.page_size) * (bpt + indexer_bpt))
    if fits <= 0:
        raise ConfigError(
            "hardware.host_memory_gib",
            f"{hw.host_memory_gib:.1f} GiB leaves no host memory after SGLang's 10 GiB reserve; give more, or a "
            "host size (cache.host_ratio, host_size_gb or host_tokens)",
        )
    if fits < ratio:
        warnings.append(
            f"host pool: SGLang lowers its default ratio {ratio} to {fits:.3f} so the host pools of {ranks} "
            f"rank(s) fit {c.host_memory_fraction} of {hw.host_memory_gib:.1f} GiB less its 10 GiB reserve"
        )
    return min(ratio, fits)


def _host_tokens(sc: Scenario, device_tokens: int, bpt: int, warnings: list[str], indexer_bpt: int = 0) -> int:
    """Host pool in tokens, sized as SGLang sizes it from ratio, GB or tokens (appends to ``warnings``)."""
    c = sc.cache
    if c.host_ratio is None and c.host_size_gb is None and c.host_tokens is None:
        ratio = default_host_ratio(sc, device_tokens, bpt, warnings, indexer_bpt)
        sizing = host_pool_tokens(device_tokens, c.page_size, host_ratio=ratio, alignment=c.host_alignment)
    else:
        sizing = host_pool_tokens(
            device_tokens,
            c.page_size,
            host_ratio=c.host_ratio,
            host_size_gb=c.host_size_gb,
            host_tokens=c.host_tokens,
            bytes_per_token=bpt,
            alignment=c.host_alignment,
        )
    if sizing.warning:
        warnings.append(sizing.warning)
    return sizing.host_tokens


def kv_tensors(model: ModelPreset) -> int:
    """KV tensors per layer of a page: K and V, or MLA's one latent."""
    return 1 if model.attention == "mla" else 2


def storage_writers(sc: Scenario, model: ModelPreset) -> int:
    """Ranks that write their own copy of each page to storage: every TP and PP rank (of one attention
    group under attention DP), but under MLA only TP rank 0 of each stage (the others skip the backup:
    their KV is the same). A Mooncake page is
    K and V objects per writer (MLA: one latent object)."""
    return sc.hardware.pp if model.attention == "mla" else attn_tp(sc.hardware) * sc.hardware.pp


def _storage(sc: Scenario, bpt: int, model: ModelPreset) -> StorageParams:
    """The storage tier: the scenario's values, else the backend preset's. A store whose capacity is
    one pool (or disk) for every writing rank holds this rank's pages in its share of it."""
    backend, hs = sc.cache.storage_backend, sc.hardware.storage
    st = STORAGE.get(backend) if backend != "none" else None
    cap_gb = hs.capacity_gb if hs.capacity_gb is not None else (st.capacity_gb if st else 0.0)
    eviction = hs.eviction or (st.eviction if st else "lru")
    writers = storage_writers(sc, model)
    share = writers if STORE_MODELS.get(eviction).capacity_scope == "shared" else 1
    page_bytes = bpt * sc.cache.page_size * share
    off = hs.offload if st is not None else None
    disk = STORAGE.get(off.device) if off is not None else None
    off_gb = off.capacity_gb if off is not None and off.capacity_gb is not None else (disk.capacity_gb if disk else 0)
    return StorageParams(
        on=st is not None,
        capacity_pages=int(cap_gb * 1e9 // page_bytes) if st is not None and cap_gb > 0 else None,
        read_Bps=(hs.read_gbps or (st.read_gbps if st else NO_STORAGE_GBPS)) * 1e9,
        write_Bps=(hs.write_gbps or (st.write_gbps if st else NO_STORAGE_GBPS)) * 1e9,
        latency_s=(hs.latency_us if hs.latency_us is not None else (st.latency_us if st else 0.0)) * 1e-6,
        eviction=eviction,
        eviction_params=hs.eviction_params(),
        objects_per_page=writers * kv_tensors(model),
        # The disk is one for every rank writing to it (one real client's), like a shared pool.
        offload=off is not None,
        offload_capacity_pages=int(off_gb * 1e9 // (bpt * sc.cache.page_size * writers)) if off_gb > 0 else None,
        offload_read_Bps=(off.read_gbps or disk.read_gbps) * 1e9 if off is not None and disk else 0.0,
        offload_latency_s=(off.latency_us if off.latency_us is not None else disk.latency_us) * 1e-6
        if off is not None and disk
        else 0.0,
    )


def _write_policy(c: CacheSpec, warnings: list[str]) -> str:
    """The write policy SGLang runs: buffer_only resolves write_back to write_through at start-up, as
    SGLang 0.5.23 does (with its info line); appends the note to ``warnings``."""
    mode = HOST_MEMORY_MODES.get(c.host_memory_mode)
    runs = mode.runs(c.write_policy)
    if runs == c.write_policy:
        return runs
    warnings.append(
        f"cache.write_policy {c.write_policy}: SGLang runs {runs} in {mode.name} mode (the host only stages "
        "pages for storage), so this run uses it"
    )
    return runs


def _cache_config(
    c: CacheSpec,
    write_policy: str,
    device_tokens: int,
    host_tokens: int,
    storage: StorageParams,
    bpt: int,
    strict: bool,
) -> CacheConfig:
    """The core's configuration: pool sizes in pages and the cache section's policies."""
    page = c.page_size
    return CacheConfig(
        page_size=page,
        device_pages=device_tokens // page,
        host_pages=host_tokens // page,
        write_policy=write_policy,
        host_eviction=c.host_eviction,
        host_memory_mode=c.host_memory_mode,
        eviction_policy=c.eviction_policy,
        eviction_policy_config=dict(c.eviction_policy_config),
        eviction_granularity=c.eviction_granularity,
        load_back_threshold_tokens=c.load_back_threshold,
        storage=storage.on,
        storage_capacity_pages=storage.capacity_pages,
        storage_eviction=storage.eviction,
        storage_eviction_params=dict(storage.eviction_params),
        storage_objects_per_page=storage.objects_per_page,
        storage_offload=storage.offload,
        storage_offload_capacity_pages=storage.offload_capacity_pages,
        prefetch_policy=c.prefetch_policy,
        prefetch_threshold_tokens=c.prefetch_threshold,
        prefetch_timeout_base_s=c.prefetch_timeout_base_s,
        prefetch_timeout_per_ki_token_s=c.prefetch_timeout_per_ki_token_s,
        prefetch_timeout_max_s=c.prefetch_timeout_max_s,
        prefetch_retry_poll_interval=c.prefetch_retry_poll_interval,
        prefetch_retry_max_attempts=c.prefetch_retry_max_attempts,
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
