"""Attention kernels whose tiling the compute model knows, per SGLang ``--attention-backend``.

A rule says how one backend's prefill attention kernel splits its work into programs and what each
program reads, so ``sim/compute.py`` can count the kernel's bytes (``ComputeModel.attention_bytes``).
SGLang 0.5.23's triton extend kernel (``kernels/ops/attention/extend_attention.py``) runs one program
per (request, query head, tile of ``BLOCK_M`` new tokens); each program streams the request's whole
cached prefix (K and V of its KV head, gathered token by token through an int64 page index), then the
new tokens' K and V up to the end of its own tile. Nothing is shared between the query heads of a GQA
group or between tiles. A backend with no rule here (SGLang's defaults: flashinfer on Ampere and Ada,
fa3 on Hopper, trtllm_mha on Blackwell, aiter on ROCm) keeps the compute model's roofline.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..core.registry import Registry

#: The architecture of each GPU preset, as the attention kernels pick their tiles by it (CUDA compute
#: capability, or the ROCm gfx target).
GPU_ARCH = {
    "h100": "sm90",
    "h800": "sm90",
    "h200": "sm90",
    "h20": "sm90",
    "h20-141g": "sm90",
    "a100": "sm80",
    "a100-40g": "sm80",
    "a10": "sm86",
    "l20": "sm89",
    "l40s": "sm89",
    "b200": "sm100",
    "mi300x": "gfx942",
}

#: SGLang 0.5.23's triton extend kernel's query tile (BLOCK_M) per architecture: ((largest qk head
#: dim, BLOCK_M), ...) in order (``_get_block_sizes_for_extend_attention``, extend_attention.py lines
#: 48-142; sm86 / sm89 have the smaller shared memory, gfx942 takes the HIP default).
TRITON_EXTEND_BLOCK_M = {
    "sm80": ((128, 128), (256, 64), (math.inf, 32)),
    "sm86": ((128, 64), (256, 64), (math.inf, 32)),
    "sm89": ((128, 64), (256, 64), (math.inf, 32)),
    "sm90": ((128, 128), (256, 64), (math.inf, 32)),
    "sm100": ((256, 64), (math.inf, 16)),
    "gfx942": ((math.inf, 64),),
}


@dataclass(frozen=True)
class AttentionRule:
    """How one backend's prefill attention kernel tiles its work: the query tile each program holds
    (per architecture and head dim) and the bytes of the page-table index it loads per prefix token.
    Every program re-reads the K and V it attends to (no sharing between query heads or tiles)."""

    block_m: dict[str, tuple[tuple[float, int], ...]]
    index_bytes: int
    source: str

    def tile_rows(self, arch: str, head_dim: int) -> int:
        """BLOCK_M on ``arch`` for a qk head dim of ``head_dim``."""
        return next(rows for top, rows in self.block_m[arch] if head_dim <= top)


ATTENTION_RULES: Registry[AttentionRule] = Registry("attention-backend rule", "hardware.attention_backend")
ATTENTION_RULES.add(
    "triton",
    AttentionRule(
        TRITON_EXTEND_BLOCK_M,
        8,  # the prefix's kv_indices are int64 (srt/layers/attention/triton_backend.py lines 1076-1080)
        "sglang 0.5.23 kernels/ops/attention/extend_attention.py: grid (request, query head, BLOCK_M tile) "
        "line 1075; prefix stage (whole prefix, K and V gathered by kv_indices) lines 533-716; extend stage "
        "(causal, up to the tile's end) lines 717-872; BLOCK_M lines 48-142; num_stages 1 line 1076",
    ),
)
