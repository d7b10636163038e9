"""GPU memory: the device KV pool SGLang would allocate on one rank.

SGLang measures free memory twice, in GiB (``2**30`` bytes): before loading the weights (``pre``) and
after (``post``); the KV pool gets ``post - pre x (1 - mem_fraction_static)`` bytes, i.e. the share
``1 - mem_fraction_static`` of ``pre`` is kept back for activations, CUDA graphs and the rest, and the
pool is that many bytes divided by the KV bytes of one token (whole tokens, then whole pages).

Modelled here: ``pre = capacity - context`` (the capacity the device reports, less what is in use before
the first reading: the CUDA context and, at TP > 1, what SGLang's parallel groups hold, by interconnect,
from public logs (``hardware/commmem.py``); ``hardware.cuda_context_mib`` replaces it with a measured
figure) and ``post = pre - weights`` (the weights of this rank's layers, nothing else allocated in
between). So memory in use before the reading shrinks the pool by ``mem_fraction_static`` times its size,
memory allocated between the readings by all of it; the CUDA graphs are captured after both and live
in the ``1 - mem_fraction_static`` reserve.
When ``mem_fraction_static`` is not given it follows SGLang's default rule: reserve 512 MiB + 1.5 MiB
per token of the prefill chunk (at least 2048 tokens) + 2 MiB per CUDA-graph batch size + 1 GiB per 8
ranks of TP x PP, at least 10 GiB on GPUs above 60 GiB, and keep ``(capacity - reserve) / capacity``
(rounded to 3 decimals); with attention DP, 3 MiB (4.5 above 300) more per decode-graph batch size and
group, before the 10 GiB floor. Not modelled: speculative-decoding reserves, 0.5.23's prefill-graph
reserve, multimodal adjustments, memory used by the weights beyond parameters x bytes (scales, buffers).
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1 << 20
GIB = 1 << 30

# SGLang's defaults for the flags a user leaves unset, as sglang 0.5.23 derives them. By GPU memory
# (MiB, upper bounds): the decode CUDA-graph batch size below and from 4 TP ranks, and the prefill chunk.
# Source: arg_groups/memory_hook.py, handle_gpu_memory_settings.
_GRAPH_BS = ((20 * 1024, 8, 8), (35 * 1024, 48, 160), (60 * 1024, 32, 160), (160 * 1024, 256, 512))
_GRAPH_BS_LARGEST = 512
_CHUNK = ((20 * 1024, 2048), (60 * 1024, 4096), (160 * 1024, 8192))
_CHUNK_LARGEST = 16384
# mem_cache/kv_cache_configurator.py, resolve_max_num_reqs: the pool's tokens per context length x 512,
# clamped to [2048, 4096].
_REQS_PER_CONTEXT = 512
_REQS_CLAMP = (2048, 4096)


def default_chunked_prefill_size(memory_mib: float) -> int:
    """SGLang's ``chunked_prefill_size`` when the user gives none, from the GPU memory: 2048 below
    20 GiB, 4096 below 60, 8192 below 160, else 16384 (``handle_gpu_memory_settings``)."""
    for below, tokens in _CHUNK:
        if memory_mib < below:
            return tokens
    return _CHUNK_LARGEST


def default_cuda_graph_max_bs(memory_mib: float, tp: int, max_running_requests: int | None = None) -> int:
    """SGLang's decode ``cuda_graph_max_bs`` when the user gives none, from the GPU memory and TP size,
    lowered to ``--max-running-requests`` when that flag is given and smaller
    (``handle_gpu_memory_settings``)."""
    bs = _GRAPH_BS_LARGEST
    for below, small_tp, large_tp in _GRAPH_BS:
        if memory_mib < below:
            bs = small_tp if tp < 4 else large_tp
            break
    return bs if max_running_requests is None else min(bs, max_running_requests)


def max_running_requests(pool_tokens: int, context_len: int, given: int | None = None) -> int:
    """The running-request cap SGLang's scheduler ends up with (``resolve_max_num_reqs``): the given
    ``--max-running-requests``, else ``pool_tokens / context_len x 512`` clamped to [2048, 4096];
    either way at most half the pool's tokens (and at least 1)."""
    if given is None:
        low, high = _REQS_CLAMP
        given = max(min(int(pool_tokens / context_len * _REQS_PER_CONTEXT), high), low)
    return max(1, min(given, pool_tokens // 2))


def default_mem_fraction_static(
    memory_mib: float, chunked_prefill_tokens: int, cuda_graph_max_bs: int, tp: int, pp: int, attn_dp: int = 1
) -> float:
    """SGLang's default ``mem_fraction_static``: (memory - reserve) / memory, rounded to 3 decimals. With
    attention DP the decode graphs' padding takes 3 MiB per batch size and group, 4.5 above 300
    (``reserve_for_graph_mb``, ``arg_groups/memory_hook.py`` 370-378 in 0.5.23)."""
    reserve = 512.0 + max(chunked_prefill_tokens, 2048) * 1.5 + cuda_graph_max_bs * 2.0 + tp * pp / 8 * 1024
    if attn_dp > 1:
        reserve += cuda_graph_max_bs * attn_dp * (4.5 if cuda_graph_max_bs > 300 else 3.0)
    if memory_mib > 60 * 1024:
        reserve = max(reserve, 10 * 1024.0)
    return round((memory_mib - reserve) / memory_mib, 3)


@dataclass(frozen=True)
class MemoryPlan:
    """One rank's memory as SGLang's profiling sees it (bytes)."""

    capacity_bytes: int
    context_bytes: int  # in use before the weights: CUDA context and, at TP > 1, the parallel groups
    weight_bytes: float
    mem_fraction_static: float
    mem_fraction_source: str  # "given" | "SGLang default"
    context_source: str = "hardware.cuda_context_mib"  # where context_bytes comes from

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
            f"({self.mem_fraction_source}) keeps back {self.reserved_bytes / GIB:.2f} GiB; in use before the "
            f"weights: {self.context_source}"
        )
