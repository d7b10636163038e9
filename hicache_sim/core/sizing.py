"""KV bytes per token and pool sizes, as SGLang computes them.

Units are stated in every name: ``*_tokens``, ``*_pages``, ``*_bytes``. Host pool sizing follows the
host KV pool constructor: a size in GB overrides the ratio; the result is page-aligned either *down*
(mid-2025) or *up with one extra page even when already aligned* (2026). A host smaller than the
device is legal (SGLang warns); callers get the warning text back instead of a print.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ConfigError
from .semantics import CAPACITY_FORMULAS

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1, "fp32": 4}


@dataclass(frozen=True)
class ModelDims:
    """Attention dimensions that decide KV bytes per token.

    ``attention`` is ``"mha"`` (MHA/GQA: K and V per kv head) or ``"mla"`` (one latent of
    ``kv_lora_rank + qk_rope_head_dim`` per layer, replicated on every TP rank).
    """

    num_layers: int
    attention: str = "mha"
    num_kv_heads: int = 0
    head_dim: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    dtype: str = "bf16"

    def __post_init__(self) -> None:
        if self.num_layers <= 0:
            raise ConfigError("model.num_layers", f"must be > 0, got {self.num_layers}")
        if self.attention not in ("mha", "mla"):
            raise ConfigError("model.attention", f"expected 'mha' or 'mla', got {self.attention!r}")
        if self.dtype not in DTYPE_BYTES:
            raise ConfigError("model.dtype", f"expected one of {sorted(DTYPE_BYTES)}, got {self.dtype!r}")
        if self.attention == "mha" and (self.num_kv_heads <= 0 or self.head_dim <= 0):
            raise ConfigError("model", "MHA/GQA needs num_kv_heads > 0 and head_dim > 0")
        if self.attention == "mla" and self.kv_lora_rank + self.qk_rope_head_dim <= 0:
            raise ConfigError("model", "MLA needs kv_lora_rank + qk_rope_head_dim > 0")


def kv_bytes_per_token(dims: ModelDims, tp: int = 1) -> int:
    """KV bytes one token occupies on one TP rank (bytes).

    MHA/GQA: 2 (K and V) x layers x kv_heads x head_dim x itemsize, kv heads split over TP ranks
    (never below one head per rank). MLA: (kv_lora_rank + rope dim) x layers x itemsize, replicated.
    """
    if tp <= 0:
        raise ConfigError("hardware.tp", f"must be > 0, got {tp}")
    item = DTYPE_BYTES[dims.dtype]
    if dims.attention == "mla":
        return (dims.kv_lora_rank + dims.qk_rope_head_dim) * dims.num_layers * item
    heads_per_rank = max(1, dims.num_kv_heads // tp)
    return 2 * dims.num_layers * heads_per_rank * dims.head_dim * item


#: DeepSeek sparse attention quantises its indexer keys to one byte each in blocks of this many, with one
#: fp32 scale per block (SGLang ``DSATokenToKVPool.quant_block_size``).
DSA_INDEX_QUANT_BLOCK = 128


def dsa_indexer_bytes_per_token(index_head_dim: int, num_layers: int) -> int:
    """Bytes of one token's indexer keys over ``num_layers`` layers (bytes; 0 without an indexer).

    Per layer: ``index_head_dim`` one-byte key elements plus a 4-byte scale per quantisation block, as
    SGLang's DSA pools store them (``pool_host/dsa.py`` ``dsa_indexer_bytes_per_token_per_layer``); the
    same on every TP rank (the indexer has one key head).
    """
    if index_head_dim <= 0:
        return 0
    return (index_head_dim + index_head_dim // DSA_INDEX_QUANT_BLOCK * 4) * num_layers


def bytes_per_layer_per_token(dims: ModelDims, tp: int = 1) -> int:
    """Bytes of one token in one layer (bytes); the unit of a per-layer load-back copy."""
    return kv_bytes_per_token(dims, tp) // dims.num_layers


ALIGNMENTS = ("up_plus_one", "down", "exact")


@dataclass(frozen=True)
class HostSizing:
    """Result of host pool sizing: the page-aligned size and any warning SGLang would log."""

    host_tokens: int
    warning: str | None


def host_pool_tokens(
    device_tokens: int,
    page_size: int,
    *,
    host_ratio: float | None = None,
    host_size_gb: float | None = None,
    host_tokens: int | None = None,
    bytes_per_token: int | None = None,
    alignment: str = "up_plus_one",
) -> HostSizing:
    """Host pool size in tokens, as SGLang's host KV pool computes it.

    Exactly one of ``host_ratio``, ``host_size_gb`` (GB = 1e9 bytes, needs ``bytes_per_token``)
    or ``host_tokens`` must be given. ``host_tokens`` is taken as is (it must be page-aligned).
    Otherwise the raw size is ``int(host_size_gb * 1e9 // bytes_per_token)`` or
    ``int(device_tokens * host_ratio)``, then aligned: ``up_plus_one`` (2026: ``size // page + 1``
    pages, one page more even when aligned), ``down`` (mid-2025: ``size // page`` pages).
    """
    given = [
        name
        for name, v in (("host_ratio", host_ratio), ("host_size_gb", host_size_gb), ("host_tokens", host_tokens))
        if v is not None
    ]
    if len(given) != 1:
        raise ConfigError("cache", f"give exactly one of host_ratio, host_size_gb, host_tokens; got {given}")
    if page_size <= 0:
        raise ConfigError("cache.page_size", f"must be > 0, got {page_size}")
    if alignment not in ALIGNMENTS:
        raise ConfigError("cache.host_alignment", f"expected one of {ALIGNMENTS}, got {alignment!r}")
    if host_tokens is not None:
        if host_tokens < 0 or host_tokens % page_size:
            raise ConfigError(
                "cache.host_tokens", f"must be >= 0 and a multiple of page_size {page_size}, got {host_tokens}"
            )
        size = host_tokens
    else:
        if host_size_gb is not None:
            if host_size_gb < 0:
                raise ConfigError("cache.host_size_gb", f"must be >= 0, got {host_size_gb}")
            if not bytes_per_token:
                raise ConfigError("cache.host_size_gb", "needs the model's bytes per token")
            raw = int(host_size_gb * 1e9 // bytes_per_token)
        else:
            assert host_ratio is not None
            if host_ratio < 0:
                raise ConfigError("cache.host_ratio", f"must be >= 0, got {host_ratio}")
            raw = int(device_tokens * host_ratio)
        if alignment == "up_plus_one":
            size = (raw // page_size + 1) * page_size
        elif alignment == "down":
            size = raw // page_size * page_size
        else:
            size = raw
            if size % page_size:
                raise ConfigError("cache.host_alignment", f"'exact' needs a page-aligned size, got {size} tokens")
    warning = None
    if 0 < size <= device_tokens:
        warning = (
            f"host pool ({size} tokens) is not larger than the device pool ({device_tokens} "
            "tokens): L2 cache effectiveness is reduced"
        )
    return HostSizing(size, warning)


def prefetch_capacity_limit_tokens(host_tokens: int, device_tokens: int, formula: str) -> int:
    """Tokens of storage prefetch allowed in flight (SGLang ``prefetch_capacity_limit``).

    ``2025``: ``int(0.8 * (host - device))`` (<= 0 when host <= device: prefetch never issued).
    ``2026``: ``int(0.5 * host)`` in cache mode. ``2026_buffer_only``: ``int(0.9 * host)``.
    """
    return CAPACITY_FORMULAS.get(formula).limit_tokens(host_tokens, device_tokens)


def prefetch_timeout_s(hit_tokens: int, base_s: float, per_ki_token_s: float, max_s: float | None) -> float:
    """Seconds after which a timeout-policy prefetch may be terminated.

    2025: ``base + per_ki * tokens / 1024``; 2026 caps it at ``max``. ``hit_tokens`` counts the
    pages the storage query found (0 before the query returns, so the timeout is then ``base``).
    """
    t = base_s + per_ki_token_s * hit_tokens / 1024.0
    return t if max_s is None else min(max_s, t)
