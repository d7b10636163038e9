"""GPU memory: the device KV pool SGLang would allocate on one rank.

SGLang measures free memory twice, in GiB (``2**30`` bytes): before loading the weights (``pre``) and
after (``post``); the KV pool gets ``post - pre x (1 - mem_fraction_static)`` bytes, i.e. the share
``1 - mem_fraction_static`` of ``pre`` is kept back for activations, CUDA graphs and the rest, and the
pool is that many bytes divided by the KV bytes of one token (whole tokens, then whole pages).

Modelled here: ``pre = capacity - context`` (the capacity the device reports, less the CUDA context
and communicator buffers created before the first reading: an estimate, ``hardware.cuda_context_mib``)
and ``post = pre - weights`` (the weights of this rank's layers, nothing else allocated in between).
When ``mem_fraction_static`` is not given it follows SGLang's default rule: reserve 512 MiB + 1.5 MiB
per token of the prefill chunk (at least 2048 tokens) + 2 MiB per CUDA-graph batch size + 1 GiB per 8
ranks of TP x PP, at least 10 GiB on GPUs above 60 GiB, and keep ``(capacity - reserve) / capacity``
(rounded to 3 decimals). Not modelled: speculative-decoding and DP-attention reserves, multimodal
adjustments, memory used by the weights beyond parameters x bytes (scales, buffers).
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1 << 20
GIB = 1 << 30

# SGLang's default CUDA-graph batch size by GPU memory (MiB upper bounds), below and from 4 TP ranks.
_GRAPH_BS = ((20 * 1024, 8, 8), (35 * 1024, 24, 80), (60 * 1024, 32, 160), (160 * 1024, 256, 512))
_GRAPH_BS_LARGEST = 512


# SGLang's default --chunked-prefill-size by GPU memory (MiB upper bounds; sglang 0.5.23
# arg_groups/memory_hook.py): 2k on small cards, 4k up to A100-40G, 8k on H100/H200, 16k above.
_CHUNK = ((20 * 1024, 2048), (60 * 1024, 4096), (160 * 1024, 8192))
_CHUNK_LARGEST = 16384


def default_chunked_prefill_size(memory_mib: float) -> int:
    """SGLang's ``chunked_prefill_size`` when the user gives none, from the GPU memory."""
    for below, tokens in _CHUNK:
        if memory_mib < below:
            return tokens
    return _CHUNK_LARGEST


def default_cuda_graph_max_bs(memory_mib: float, tp: int) -> int:
    """SGLang's ``cuda_graph_max_bs`` when the user gives none, from the GPU memory and TP size."""
    for below, small_tp, large_tp in _GRAPH_BS:
        if memory_mib < below:
            return small_tp if tp < 4 else large_tp
    return _GRAPH_BS_LARGEST


def default_mem_fraction_static(
    memory_mib: float, chunked_prefill_tokens: int, cuda_graph_max_bs: int, tp: int, pp: int
) -> float:
    """SGLang's default ``mem_fraction_static``: (memory - reserve) / memory, rounded to 3 decimals."""
    reserve = 512.0 + max(chunked_prefill_tokens, 2048) * 1.5 + cuda_graph_max_bs * 2.0 + tp * pp / 8 * 1024
    if memory_mib > 60 * 1024:
        reserve = max(reserve, 10 * 1024.0)
    return round((memory_mib - reserve) / memory_mib, 3)


@dataclass(frozen=True)
class MemoryPlan:
    """One rank's memory as SGLang's profiling sees it (bytes)."""

    capacity_bytes: int
    context_bytes: int
    weight_bytes: float
    mem_fraction_static: float
    mem_fraction_source: str  # "given" | "SGLang default"

    @property
    def pre_load_free_bytes(self) -> float:
        return float(self.capacity_bytes - self.context_bytes)

    @property
    def reserved_bytes(self) -> float:
        """What ``1 - mem_fraction_static`` keeps back (activations, CUDA graphs, ...)."""
        return self.pre_load_free_bytes * (1.0 - self.mem_fraction_static)

    @property
    def kv_pool_bytes(self) -> float:
        """``post - pre x (1 - mem_fraction_static)``; negative when the weights do not fit."""
        return self.pre_load_free_bytes - self.weight_bytes - self.reserved_bytes

    def kv_tokens(self, bytes_per_token: int, page_size: int) -> int:
        """Tokens the pool holds, in whole pages (0 when nothing fits)."""
        if self.kv_pool_bytes <= 0:
            return 0
        return int(self.kv_pool_bytes) // bytes_per_token // page_size * page_size

    def describe(self) -> str:
        """One line for messages: where each number comes from."""
        return (
            f"{self.capacity_bytes / GIB:.2f} GiB reported, {self.context_bytes / GIB:.2f} GiB context, "
            f"{self.weight_bytes / GIB:.2f} GiB weights, mem_fraction_static {self.mem_fraction_static} "
            f"({self.mem_fraction_source}) keeps back {self.reserved_bytes / GIB:.2f} GiB"
        )
