"""Presets: models, GPUs, PCIe links and storage backends, from public figures.

Sources: ``hicache_sim/data/reference/hardware-and-models.md`` (copied from the project's reference
notes). A calibration file measured with the replay harness overrides the link numbers here.
"""

from __future__ import annotations

from dataclasses import dataclass

from .core.registry import Registry


@dataclass(frozen=True)
class ModelPreset:
    """Attention shape (KV bytes) and size (compute roofline) of a model.

    ``params_b``: parameters in billions (weights memory); ``active_params_b``: per token (MoE).
    ``q_heads`` x ``head_dim`` is the attention width used for the attention FLOPs term.
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


MODELS: Registry[ModelPreset] = Registry("model preset", "model")
for _m in (
    ModelPreset("llama-3.1-8b", 32, 8, 128, 32, 8.03, 8.03),
    ModelPreset("llama-3.1-70b", 80, 8, 128, 64, 70.6, 70.6),
    ModelPreset("qwen2.5-7b", 28, 4, 128, 28, 7.6, 7.6),
    ModelPreset("qwen2.5-72b", 80, 8, 128, 64, 72.7, 72.7),
    ModelPreset("qwen3-8b", 36, 8, 128, 32, 8.2, 8.2),
    ModelPreset("qwen3-32b", 64, 8, 128, 64, 32.8, 32.8),
    ModelPreset("qwen3-30b-a3b", 48, 4, 128, 32, 30.5, 3.3),
    ModelPreset("deepseek-v3", 61, 1, 192, 128, 671.0, 37.0, attention="mla", kv_lora_rank=512, qk_rope_head_dim=64),
):
    MODELS.add(_m.name, _m)


@dataclass(frozen=True)
class GPUPreset:
    """One GPU: dense bf16 TFLOP/s, HBM GB/s and GB, and its host link (PCIe generation)."""

    name: str
    bf16_tflops: float
    hbm_gbps: float
    memory_gb: float
    pcie: str


GPUS: Registry[GPUPreset] = Registry("gpu preset", "hardware.gpu")
for _g in (
    GPUPreset("h100", 989.0, 3350.0, 80.0, "gen5"),
    GPUPreset("h200", 989.0, 4800.0, 141.0, "gen5"),
    GPUPreset("a100", 312.0, 2039.0, 80.0, "gen4"),
    GPUPreset("h20", 148.0, 4000.0, 96.0, "gen5"),
    GPUPreset("l40s", 362.0, 864.0, 48.0, "gen4"),
):
    GPUS.add(_g.name, _g)


@dataclass(frozen=True)
class LinkPreset:
    """Host<->device link per direction: peak GB/s (1e9 B/s), fixed latency (us) per transfer, the
    contiguous-segment size (bytes) at which efficiency reaches half of peak, and per-segment cost (us)
    by io backend."""

    name: str
    h2d_gbps: float
    d2h_gbps: float
    latency_us: float
    half_efficiency_bytes: float
    segment_overhead_us_kernel: float
    segment_overhead_us_direct: float


# Gen5 x16: 63 GB/s theoretical, ~50 GB/s achieved one direction with >= 2 MB chunks (vLLM blog);
# SM-copy asymmetry H2D < D2H seen with nvbandwidth. Gen4 x16: 31.5 GB/s theoretical, ~25 achieved.
LINKS: Registry[LinkPreset] = Registry("pcie preset", "hardware.pcie.preset")
LINKS.add("gen5", LinkPreset("gen5", 50.0, 50.0, 10.0, 65536.0, 0.02, 2.0))
LINKS.add("gen4", LinkPreset("gen4", 25.0, 25.0, 10.0, 65536.0, 0.02, 2.0))


@dataclass(frozen=True)
class StoragePreset:
    """A storage (L3) backend: read/write GB/s, per-batch latency (us), default capacity (GB)."""

    name: str
    read_gbps: float
    write_gbps: float
    latency_us: float
    capacity_gb: float


STORAGE: Registry[StoragePreset] = Registry("storage backend", "cache.storage_backend")
for _s in (
    # PCIe Gen4 x4 NVMe ~7 GB/s read, ~5 GB/s write, ~80 us (BLIS nvme_gen4 defaults).
    StoragePreset("local_nvme", 7.0, 5.0, 80.0, 2000.0),
    # Gen5 x4 enterprise NVMe (PM1743): 13 GB/s read, 6.6 GB/s write.
    StoragePreset("nvme_gen5", 13.0, 6.6, 80.0, 4000.0),
    # Distributed file/object stores over RDMA: 3FS-like and Mooncake-store-like (per-node share).
    StoragePreset("3fs", 20.0, 10.0, 200.0, 20000.0),
    StoragePreset("mooncake", 25.0, 12.0, 150.0, 20000.0),
):
    STORAGE.add(_s.name, _s)

IO_BACKENDS = ("kernel", "direct")
MEM_LAYOUTS = ("layer_first", "page_first", "page_first_direct")
