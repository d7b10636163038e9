"""Presets: models, GPUs, host links (per io backend) and storage backends, from public figures.

Every number cites its source in ``docs/reference/hardware-and-models.md`` (models: the checkpoint's
``config.json``; GPUs: the vendor datasheet and the memory the device reports; links: the copy
measurements of section 4.1). A calibration file measured with the replay harness overrides the link
numbers here, and may carry compute parameters too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from ..core.errors import ConfigError
from ..core.registry import Registry
from ..core.stores import STORE_MODELS
from .linkmodel import LinkParams

#: The host layouts the replay harness performs and calibration measures (``HOST_LAYOUTS`` below has
#: every layout the transfer model knows).
MEM_LAYOUTS = ("layer_first", "page_first", "page_first_direct")
WEIGHT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0}


@dataclass(frozen=True)
class ModelPreset:
    """Attention shape (KV bytes) and size (compute roofline, weights memory) of a model.

    ``params_b``: parameters in billions (weights memory); ``active_params_b``: per token (MoE).
    ``q_heads`` x ``head_dim`` is the attention width used for the attention FLOPs term (for MLA
    ``head_dim`` is the query/key head dimension, nope + rope). ``weights_dtype``: how the checkpoint
    stores the linear weights (its bytes per parameter, and whether fp8 tensor cores run them).
    ``hidden_size``: the residual width, what a tensor-parallel all-reduce carries per token (0: taken
    as ``q_heads x head_dim``). Mixture of experts (config.json): ``num_experts`` routed experts of
    ``moe_intermediate_size`` each (gate, up and down projections: ``3 x hidden x width`` parameters),
    ``experts_per_token`` of them per token (top-k), in every layer but the first ``dense_layers``;
    ``shared_experts`` always run (their parameters are in the non-routed part). 0 experts: dense.
    ``context_len``: the checkpoint's ``max_position_embeddings`` (0: unknown), which SGLang's default
    ``--max-running-requests`` is derived from. ``index_head_dim``: DeepSeek sparse attention's indexer
    key width (config.json ``index_head_dim``; 0: no indexer), whose per-token keys SGLang keeps in a
    pool beside the KV pool, mirrored on the host by HiCache. ``nextn_layers``: the multi-token-prediction
    layers the checkpoint carries (config.json ``num_nextn_predict_layers``; 0: none), the draft SGLang
    runs for ``--speculative-algorithm NEXTN`` / ``EAGLE`` without a draft model path
    (:mod:`hicache_sim.hardware.speculative`); not loaded, and not counted, without one;
    ``nextn_params_b``: their parameters with the NextN module's own embedding and head, billions.
    What attention DP leaves whole on a GPU (:mod:`hicache_sim.hardware.params`): ``architecture``, the
    SGLang model class (config.json ``architectures[0]``; "": not given), which decides the group each
    part is sharded over; ``vocab_size`` and ``tied_embeddings`` (one table for embedding and LM head);
    ``attention_bias`` (q, k and v projections with biases); MLA's ``q_lora_rank`` (0: one q projection)
    and ``v_head_dim`` (0: ``head_dim - qk_rope_head_dim``).
    """

    name: str
    num_layers: int
    num_kv_heads: int
    head_dim: int
    q_heads: int
    params_b: float
    active_params_b: float
    attention: str = "mha"
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    weights_dtype: str = "bf16"
    hidden_size: int = 0
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    shared_experts: int = 0
    dense_layers: int = 0
    context_len: int = 0
    index_head_dim: int = 0
    nextn_layers: int = 0
    nextn_params_b: float = 0.0
    architecture: str = ""
    vocab_size: int = 0
    tied_embeddings: bool = False
    attention_bias: bool = False
    q_lora_rank: int = 0
    v_head_dim: int = 0

    @property
    def hidden(self) -> int:
        """Residual width (all-reduce message per token)."""
        return self.hidden_size or self.q_heads * self.head_dim

    @property
    def moe_layers(self) -> int:
        """Layers with routed experts."""
        return self.num_layers - self.dense_layers if self.num_experts else 0

    @property
    def routed_params_b(self) -> float:
        """Parameters of every routed expert of every MoE layer, billions (read when touched)."""
        return self.moe_layers * self.num_experts * 3 * self.hidden * self.moe_intermediate_size / 1e9


MODELS: Registry[ModelPreset] = Registry("model preset", "model")
# DeepSeek-V3 / R1 config.json: hidden 7168, 256 routed experts of 2048, top 8, one shared expert, the
# first 3 layers dense (first_k_dense_replace). Both checkpoints store the linear weights in fp8 (e4m3,
# 128x128 blocks: quantization_config), which is what lets 671 B parameters fit on eight 141 GB GPUs.
_DEEPSEEK_V3 = ModelPreset(
    "deepseek-v3",
    61,
    1,
    192,
    128,
    671.0,
    37.0,
    attention="mla",
    kv_lora_rank=512,
    qk_rope_head_dim=64,
    hidden_size=7168,
    num_experts=256,
    experts_per_token=8,
    moe_intermediate_size=2048,
    shared_experts=1,
    dense_layers=3,
    weights_dtype="fp8",
    context_len=163840,  # max_position_embeddings
    nextn_layers=1,  # num_nextn_predict_layers: one MTP layer
    nextn_params_b=13.46,  # that layer (its MoE, MLA), eh_proj, norms, embedding and head, from config.json
    architecture="DeepseekV3ForCausalLM",
    vocab_size=129280,
    q_lora_rank=1536,
    v_head_dim=128,
)
# context_len: each checkpoint's config.json max_position_embeddings (what SGLang derives the default
# --max-running-requests from). architecture, vocab_size, attention_bias: config.json architectures[0],
# vocab_size, and whether SGLang's class for it gives q, k and v biases (Qwen2 always; the others by
# config.json attention_bias, false for Llama-3.1 and Qwen3, true for GLM-4.5); no preset ties its
# embeddings (tie_word_embeddings false).
_LLAMA3 = dict(architecture="LlamaForCausalLM", vocab_size=128256)
_QWEN25 = dict(architecture="Qwen2ForCausalLM", vocab_size=152064, attention_bias=True)
_QWEN3 = dict(architecture="Qwen3ForCausalLM", vocab_size=151936)
_QWEN3_MOE = dict(architecture="Qwen3MoeForCausalLM", vocab_size=151936)
for _m in (
    ModelPreset("llama-3.1-8b", 32, 8, 128, 32, 8.03, 8.03, hidden_size=4096, context_len=131072, **_LLAMA3),
    ModelPreset("llama-3.1-70b", 80, 8, 128, 64, 70.6, 70.6, hidden_size=8192, context_len=131072, **_LLAMA3),
    ModelPreset("llama-3.1-405b", 126, 8, 128, 128, 405.9, 405.9, hidden_size=16384, context_len=131072, **_LLAMA3),
    ModelPreset("qwen2.5-7b", 28, 4, 128, 28, 7.6, 7.6, hidden_size=3584, context_len=32768, **_QWEN25),
    ModelPreset("qwen2.5-72b", 80, 8, 128, 64, 72.7, 72.7, hidden_size=8192, context_len=32768, **_QWEN25),
    ModelPreset("qwen3-8b", 36, 8, 128, 32, 8.2, 8.2, hidden_size=4096, context_len=40960, **_QWEN3),
    ModelPreset("qwen3-14b", 40, 8, 128, 40, 14.8, 14.8, hidden_size=5120, context_len=40960, **_QWEN3),
    ModelPreset("qwen3-32b", 64, 8, 128, 64, 32.8, 32.8, hidden_size=5120, context_len=40960, **_QWEN3),
    ModelPreset(
        "qwen3-30b-a3b",
        48,
        4,
        128,
        32,
        30.5,
        3.3,
        hidden_size=2048,
        num_experts=128,
        experts_per_token=8,
        moe_intermediate_size=768,
        context_len=40960,
        **_QWEN3_MOE,
    ),
    ModelPreset(
        "qwen3-235b-a22b",
        94,
        4,
        128,
        64,
        235.0,
        22.0,
        hidden_size=4096,
        num_experts=128,
        experts_per_token=8,
        moe_intermediate_size=1536,
        context_len=40960,
        **_QWEN3_MOE,
    ),
    ModelPreset(
        "glm-4.5",
        92,
        8,
        128,
        96,
        355.0,
        32.0,
        hidden_size=5120,
        num_experts=160,
        experts_per_token=8,
        moe_intermediate_size=1536,
        shared_experts=1,
        dense_layers=3,
        context_len=131072,
        architecture="Glm4MoeForCausalLM",
        vocab_size=151552,
        attention_bias=True,
        # One MTP layer (num_nextn_predict_layers 1; Megatron-Bridge's GLM 4.5 page: "MTP with 1 layer"),
        # counted as hfconfig counts a NextN module: one MoE layer (160 experts and the shared one of 1536,
        # the router), its attention with q/k/v biases, eh_proj, norms, its own embedding and head.
        nextn_layers=1,
        nextn_params_b=5.54,
    ),
    _DEEPSEEK_V3,
    # DeepSeek-R1 is the V3 architecture and quantisation.
    replace(_DEEPSEEK_V3, name="deepseek-r1"),
):
    MODELS.add(_m.name, _m)


@dataclass(frozen=True)
class GPUPreset:
    """One GPU: dense tensor TFLOP/s (bf16, and fp8 where the GPU has it), HBM GB/s, the memory the
    device reports (MiB, as ``nvidia-smi`` / ``rocm-smi`` print it: what SGLang's profiling starts
    from) with where that figure comes from, its host link preset, and the all-reduce bus bandwidth
    of 8 such GPUs in one node at large messages (GB/s, nccl-tests' ``busbw``: a ring all-reduce of ``S``
    bytes over ``n`` ranks takes ``2 (n - 1) / n x S / busbw``) with the fabric that connects them, which
    decides the all-reduce kernels SGLang runs and their size curves (``hardware/allreduce.py``)."""

    name: str
    bf16_tflops: float
    fp8_tflops: float | None
    hbm_gbps: float
    memory_mib: int
    memory_source: str
    pcie: str
    allreduce_busbw_gbps: float
    allreduce_fabric: str = "nvlink"

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib << 20


GPUS: Registry[GPUPreset] = Registry("gpu preset", "hardware.gpu")
# All-reduce bus bandwidth at large messages (8 GPUs): measured on H800 (215, NVIDIA/nccl#1374), H200
# (475, NVIDIA/nccl-tests#272) and A100 (231.6 at 8 GiB, Azure/AI-benchmarking-guide ND A100 v4); H100
# 480 as NCCL's developer states for 8 GPUs with NVLink SHARP (NVIDIA/nccl-tests#212), H20 the same
# NVLink 4. Elsewhere an estimate: 0.82 of the per-direction link rate (#212: 370 of 450 GB/s with
# ring), B200 900, MI300X 7 x 64 GB/s, PCIe cards Gen4 25.1. Smaller messages reach less
# (hardware/allreduce.py).
for _g in (
    GPUPreset("h100", 989.4, 1978.9, 3350.0, 81559, "nvidia-smi, H100 80GB HBM3", "gen5", 480.0),
    GPUPreset("h800", 989.4, 1978.9, 3350.0, 81559, "nvidia-smi, NVIDIA H800 (80 GB)", "gen5", 215.0),
    GPUPreset("h200", 989.4, 1978.9, 4800.0, 143771, "nvidia-smi, NVIDIA H200", "gen5", 475.0),
    GPUPreset("h20", 148.0, 296.0, 4000.0, 97871, "nvidia-smi, NVIDIA H20 (96 GB)", "gen5", 480.0),
    GPUPreset("h20-141g", 148.0, 296.0, 4800.0, 143771, "nvidia-smi, NVIDIA H20-3e (141 GB)", "gen5", 480.0),
    GPUPreset("a100", 312.0, None, 2039.0, 81920, "nvidia-smi, A100 80GB", "gen4", 231.6),
    GPUPreset("a100-40g", 312.0, None, 1555.0, 40960, "nvidia-smi, A100-SXM4-40GB", "gen4", 231.6),
    GPUPreset("a10", 125.0, None, 600.0, 23028, "nvidia-smi, NVIDIA A10 (24 GB, ECC on)", "gen4", 20.6, "pcie"),
    GPUPreset("l20", 119.5, 239.0, 864.0, 46068, "nvidia-smi, NVIDIA L20 (48 GB, ECC on)", "gen4", 20.6, "pcie"),
    GPUPreset("l40s", 362.0, 733.0, 864.0, 46068, "nvidia-smi, L40S (48 GB, ECC on)", "gen4", 20.6, "pcie"),
    GPUPreset("b200", 2250.0, 4500.0, 8000.0, 183359, "nvidia-smi, NVIDIA B200", "gen5", 738.0),
    GPUPreset(
        "mi300x", 1307.4, 2614.9, 5300.0, 196288, "rocm-smi, 205,822,885,888 B VRAM total", "gen5_rocm", 367.0, "xgmi"
    ),
):
    GPUS.add(_g.name, _g)


@dataclass(frozen=True)
class CopyCurve:
    """How one io backend moves KV over one host link.

    ``h2d_gbps`` / ``d2h_gbps``: peak (1e9 B/s) per direction. ``launch_us``: fixed cost of one copy
    operation (a layer-by-layer load issues one per layer). ``half_efficiency_bytes``: contiguous piece
    size at which the backend reaches half of its peak, per host layout (efficiency s / (s + h)).
    ``segment_overhead_us``: cost of each contiguous piece (one DMA call per piece for ``direct``).
    """

    h2d_gbps: float
    d2h_gbps: float
    launch_us: float
    half_efficiency_bytes: tuple[tuple[str, float], ...]
    segment_overhead_us: float

    def half_efficiency(self, layout: str) -> float:
        return dict(self.half_efficiency_bytes)[layout]

    def params(self, direction: str, layout: str) -> LinkParams:
        """The link model's parameters for one direction (``h2d`` / ``d2h``) and host layout."""
        return LinkParams(
            bandwidth_Bps=(self.h2d_gbps if direction == "h2d" else self.d2h_gbps) * 1e9,
            latency_s=self.launch_us / 1e6,
            half_efficiency_bytes=self.half_efficiency(layout),
            segment_overhead_s=self.segment_overhead_us / 1e6,
        )


@dataclass(frozen=True)
class HostLayout:
    """A host KV pool layout (``--hicache-mem-layout``) as SGLang 0.5.23 builds and copies it
    (mem_cache/pool_host/mha.py and mla.py, and the sgl-kernel kvcacheio kernels they call): the io
    backends that copy it (after SGLang's rewrites, ``effective_io``), the attention kinds whose host
    pool has it, and ``pieces(kv_factor, page_size, heads)``: the contiguous pieces one page of one
    layer moves in either direction (``heads``: KV heads per rank). ``refused``: why the simulator does
    not run it (empty: it does). ``rewrites``: an io backend SGLang does not copy this layout with ->
    the (io backend, layout) it runs instead and its warning. ``page_objects``: a page's layers lie
    together, as a store of page objects reads them (``STORAGE_LAYOUT_RULES``)."""

    name: str
    io_backends: tuple[str, ...]
    attention: tuple[str, ...]
    pieces: Callable[[int, int, int], int]
    refused: str = ""
    rewrites: Mapping[str, tuple[str, str, str]] = field(default_factory=dict)
    page_objects: bool = True


HOST_LAYOUTS: Registry[HostLayout] = Registry("host memory layout", "cache.mem_layout")
for _lay in (
    # [kv, layer, token, head, dim]: a page of one layer is one run per K and V (both backends).
    HostLayout("layer_first", ("kernel", "direct"), ("mha", "mla"), lambda kv, page, heads: kv, page_objects=False),
    # [kv, token, layer, head, dim]: the kernel moves each layer's rows of a page, K and V apart.
    HostLayout(
        "page_first",
        ("kernel",),
        ("mha", "mla"),
        lambda kv, page, heads: kv,
        rewrites={
            "direct": (
                "direct",
                "page_first_direct",
                "direct io backend with page_first: SGLang uses page_first_direct",
            )
        },
    ),
    # [kv, page, layer, token, head, dim]: one copy per page, layer and K / V (kv outermost: K and V of a
    # page's layer lie apart; SGLang 0.5.10 memory_pool_host.py L354-361, 0.5.23 pool_host/mha.py; the
    # kernel's batched copy lists 2 x pages pieces a layer, MLA's one buffer 1 x pages).
    HostLayout(
        "page_first_direct",
        ("direct",),
        ("mha", "mla"),
        lambda kv, page, heads: kv,
        rewrites={
            "kernel": (
                "direct",
                "page_first_direct",
                "kernel io backend does not support page_first_direct: SGLang uses direct",
            )
        },
    ),
    # [kv, page, head, token, layer, dim]: the page-head kernels (transfer_kv_per_layer_ph_lf on load,
    # transfer_kv_all_layer_lf_ph on backup) copy one head of one token of one layer at a time, K and
    # V apart: head_dim x itemsize bytes each. MHA host pools only; the direct backend raises on it.
    HostLayout("page_head", ("kernel",), ("mha",), lambda kv, page, heads: kv * page * heads),
    # The MLA pool's split K (latent) / V (rope) buffers for Ascend: only the kernel_ascend io backend
    # copies them (kernel and direct raise at the first transfer), and MHA pools do not build it.
    HostLayout(
        "page_first_kv_split",
        ("kernel_ascend",),
        ("mla",),
        lambda kv, page, heads: 1,
        refused="SGLang 0.5.23 copies it only with --hicache-io-backend kernel_ascend (Ascend NPUs, MLA "
        "models); the simulator models the kernel and direct io backends",
    ),
):
    HOST_LAYOUTS.add(_lay.name, _lay)


def _same_for_layouts(h: float) -> tuple[tuple[str, float], ...]:
    return tuple((lay, h) for lay in HOST_LAYOUTS.names())


@dataclass(frozen=True)
class LinkPreset:
    """A host<->device link: one copy curve per io backend (SGLang's ``--hicache-io-backend``)."""

    name: str
    kernel: CopyCurve
    direct: CopyCurve

    def curve(self, io_backend: str) -> CopyCurve:
        """This link's copy curve for ``io_backend`` (an ``IO_BACKEND_MODELS`` name)."""
        return IO_BACKEND_MODELS.get(io_backend).curve(self)


@dataclass(frozen=True)
class IoBackend:
    """An io backend (``--hicache-io-backend``) as the transfer model takes it. ``curve``: its copy curve
    on a link. ``pieces_in_one_launch``: the kernel moves many pieces in one launch, so a piece's cost
    shows as lost efficiency (``half_efficiency_bytes``); otherwise each piece is a copy call of its own
    with a fixed cost (``segment_overhead``). ``page_layout``: the page-object host layout it copies
    where a store needs page objects (SGLang rewrites layer_first to it)."""

    name: str
    curve: Callable[[LinkPreset], CopyCurve]
    pieces_in_one_launch: bool
    page_layout: str


IO_BACKEND_MODELS: Registry[IoBackend] = Registry("io backend", "cache.io_backend")
IO_BACKEND_MODELS.add("kernel", IoBackend("kernel", lambda link: link.kernel, True, "page_first"))
IO_BACKEND_MODELS.add("direct", IoBackend("direct", lambda link: link.direct, False, "page_first_direct"))
#: The io backends the transfer model runs.
IO_BACKENDS = tuple(IO_BACKEND_MODELS.names())


def effective_io(
    io_backend: str, layout: str, storage: str = "", era: str = "2026", *, attention: str = "mha"
) -> tuple[str, str, str]:
    """(io backend, host layout, note) after SGLang's compatibility rewrites: the kernel backend cannot
    drive page_first_direct (SGLang switches to direct), direct copies of page_first run as
    page_first_direct, and a Mooncake store needs page objects (``STORAGE_LAYOUT_RULES``).
    ``storage`` is SGLang's ``--hicache-storage-backend`` name, ``era`` the cache semantics,
    ``attention`` the model's (mha or mla). ``note`` is SGLang's warning, or empty. A layout SGLang
    cannot build or copy as asked (``HOST_LAYOUTS``) raises ConfigError saying why."""
    lay = HOST_LAYOUTS.get(layout)
    if lay.refused:
        raise ConfigError("cache.mem_layout", f"{layout}: {lay.refused}")
    if attention not in lay.attention:
        raise ConfigError(
            "cache.mem_layout",
            f"{layout}: SGLang 0.5.23 builds it only for {' and '.join(lay.attention).upper()} host pools "
            f"(this model's attention is {attention.upper()})",
        )
    notes = []
    rewrite = lay.rewrites.get(io_backend)
    if rewrite is not None:
        io_backend, layout, note = rewrite
        notes.append(note)
    rule = STORAGE_LAYOUT_RULES.get((era, storage))
    if rule is not None:
        new_io, new_layout = rule(io_backend, layout)
        if (new_io, new_layout) != (io_backend, layout):
            notes.append(f"{storage} storage backend: SGLang uses {new_io} io with {new_layout} host layout")
            io_backend, layout = new_io, new_layout
    if io_backend not in HOST_LAYOUTS.get(layout).io_backends:
        raise ConfigError(
            "cache.io_backend",
            f"{io_backend} cannot copy the {layout} host layout in SGLang 0.5.23 (it raises at the first "
            f"transfer; no rewrite): use {' or '.join(HOST_LAYOUTS.get(layout).io_backends)}",
        )
    return io_backend, layout, "; ".join(notes)


def _mooncake_2025(io_backend: str, layout: str) -> tuple[str, str]:
    # SGLang 0.5.2 server_args (read from its PyPI wheel): a mooncake backend forces the kernel io
    # backend and the page_first layout, whatever was asked.
    return "kernel", "page_first"


def _page_objects_2026(io_backend: str, layout: str) -> tuple[str, str]:
    # SGLang 0.5.23 arg_groups/hicache_hook.resolve_storage_layout_compatibility: mooncake and
    # npu_memcache cannot read a layer_first host pool; it becomes page_first under the kernel
    # backend, page_first_direct under direct.
    if HOST_LAYOUTS.get(layout).page_objects:
        return io_backend, layout
    return io_backend, IO_BACKEND_MODELS.get(io_backend).page_layout


# (cache semantics era, SGLang storage backend) -> rewrite of (io backend, layout).
STORAGE_LAYOUT_RULES: dict[tuple[str, str], Callable[[str, str], tuple[str, str]]] = {
    ("2025", "mooncake"): _mooncake_2025,
    ("2026", "mooncake"): _page_objects_2026,
    ("2026", "npu_memcache"): _page_objects_2026,
}


# Kernel backend (SGLang's per-layer gather/scatter kernels, many small pieces in one launch): peak
# H2D 35.2 / D2H 52.8 GB/s (SM copies on H100, NVIDIA/nvbandwidth#24); half efficiency at 499 B
# (layer_first host) and 1047 B (page_first host), solved from 8192 items of 656 B moving at 28.4 and
# 19.6 GB/s on H20 (sgl-project/sglang#37231) with 10 us per launch; 10 us per launch from fitting
# sgl-project/sglang#40278's per-layer loads (8 launches of 2048..32768 tokens: ~9 us each).
# page_head: the page-head kernel copies each item (one head of one token and layer) with the same
# one-warp copy as the page_first kernel's items, so it takes page_first's curve at its smaller piece.
_KERNEL_HALF = (("layer_first", 499.0), ("page_first", 1047.0), ("page_first_direct", 1047.0), ("page_head", 1047.0))
# Direct backend (one cudaMemcpyAsync per contiguous piece): ~50 GB/s one direction with large
# pieces on Gen5 (vLLM blog, H100); 5 us per piece, the low end of the 5-7 us per cudaMemcpyAsync
# call measured for small copies (DualPath, arXiv 2602.21548, section 5.2); no efficiency term (the
# per-call cost is the whole per-piece loss); 10 us per transfer (estimate).
LINKS: Registry[LinkPreset] = Registry("pcie preset", "hardware.pcie.preset")
for _link in (
    LinkPreset(
        "gen5",
        kernel=CopyCurve(35.2, 52.8, 10.0, _KERNEL_HALF, 0.0),
        direct=CopyCurve(50.0, 50.0, 10.0, _same_for_layouts(0.0), 5.0),
    ),
    # Gen4 x16 (31.5 GB/s theoretical): SM-copy H2D 25.1 GB/s on A100 (NVIDIA/nvbandwidth#42), taken
    # for both directions and both backends; per-piece and per-launch costs as Gen5 (estimate: they are
    # GPU and driver costs, not link costs).
    LinkPreset(
        "gen4",
        kernel=CopyCurve(25.1, 25.1, 10.0, _KERNEL_HALF, 0.0),
        direct=CopyCurve(25.1, 25.1, 10.0, _same_for_layouts(0.0), 5.0),
    ),
    # Gen5 on ROCm (MI300X): the HiCache kernel reaches 55 GB/s H2D with 8+ blocks (sgl-project/sglang
    # #37635; SGLang's HIP default is 32 blocks, #39036), taken for D2H too; its small-piece curve from
    # MI300X transfers of 4 KB / 16 KB items at 14.2 / 29.9 GB/s (sgl-project/sglang#31741, the Mamba
    # state kernel: h ~ 12 KB); direct: 0.5 / 2.2 GB/s for the same items, ~8 us per hipMemcpyAsync
    # piece (#31741).
    LinkPreset(
        "gen5_rocm",
        kernel=CopyCurve(55.0, 55.0, 10.0, _same_for_layouts(12288.0), 0.0),
        direct=CopyCurve(50.0, 50.0, 10.0, _same_for_layouts(0.0), 8.0),
    ),
):
    LINKS.add(_link.name, _link)


@dataclass(frozen=True)
class StoragePreset:
    """A storage (L3) backend: read/write GB/s, per-batch latency (us), default capacity (GB), the
    ``--hicache-storage-backend`` value that runs it in SGLang (``sglang-args`` prints it), and what
    the backend does when full (``eviction``: a ``STORE_MODELS`` name, its source in
    docs/reference/sglang-hicache-semantics.md section 3.7). ``disk``: a local disk, which a store
    that offloads (``offloads``: Mooncake's ``enable_offload``) can name as its offload device
    (``hardware.storage.offload.device``; ``latency_us`` is then one object read's)."""

    name: str
    read_gbps: float
    write_gbps: float
    latency_us: float
    capacity_gb: float
    sglang_backend: str = ""
    eviction: str = "lru"
    disk: bool = False
    offloads: bool = False

    def __post_init__(self) -> None:
        if not self.sglang_backend:
            object.__setattr__(self, "sglang_backend", self.name)
        STORE_MODELS.get(self.eviction)


STORAGE: Registry[StoragePreset] = Registry("storage backend", "cache.storage_backend")
for _s in (
    # SGLang's backend names (sglang 0.5.23 --hicache-storage-backend) for the backends modelled:
    # file (HiCacheFile: one file per page under a local folder) on a PCIe Gen4 x4 NVMe, ~7 GB/s
    # read, ~5 GB/s write, ~80 us (BLIS nvme_gen4 defaults). Started without max_size it never
    # evicts: a full disk fails the write (eviction "file"; with max_size: "file_lru").
    StoragePreset("file", 7.0, 5.0, 80.0, 2000.0, eviction="file"),
    # Distributed file/object stores over RDMA: 3FS-like (hf3fs: its metadata server is an exact
    # page LRU per rank) and Mooncake-store-like (capacity: the pool all ranks share; batch eviction
    # over the high watermark, leases).
    StoragePreset("hf3fs", 20.0, 10.0, 200.0, 20000.0, eviction="lru"),
    # Mooncake offloads to a local disk with enable_offload (master and real client; v0.3.10 on).
    StoragePreset("mooncake", 25.0, 12.0, 150.0, 20000.0, eviction="mooncake", offloads=True),
    # nixl: NIXL's storage plugins write local files (POSIX, GDS); taken as the file backend's local
    # Gen4 NVMe (estimate: no published HiCache-over-NIXL figure). Its cleaner deletes the oldest
    # writes from 80 % of the disk down to 70 %, every 30 s.
    StoragePreset("nixl", 7.0, 5.0, 80.0, 2000.0, eviction="nixl"),
    # Disks for the file backend: the Gen4 NVMe above, and a Gen5 x4 enterprise NVMe (PM1743): 13 GB/s
    # read, 6.6 GB/s write.
    StoragePreset("local_nvme", 7.0, 5.0, 80.0, 2000.0, sglang_backend="file", eviction="file", disk=True),
    StoragePreset("nvme_gen5", 13.0, 6.6, 80.0, 4000.0, sglang_backend="file", eviction="file", disk=True),
    # sim: SGLang's own no-I/O backend (storage/sim_storage.py, SimHiCacheStorage), what it tests an L3
    # with. Each rank keeps the page keys it wrote, no bound and nothing evicted (capacity 0: unbounded;
    # "file" without a cap evicts nothing either), and sleeps op latency + bytes / rate per batch, a hit
    # query too. Its figures are its extra-config keys' defaults: sim_write_gbps 5.0, sim_read_gbps the
    # write rate, sim_op_latency_us 100 (per rank); from-sglang reads them from the extra config.
    StoragePreset("sim", 5.0, 5.0, 100.0, 0.0, eviction="file"),
):
    STORAGE.add(_s.name, _s)
# The name earlier scenarios used for hf3fs.
STORAGE.alias("3fs", "hf3fs")
