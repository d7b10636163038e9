"""KV bytes per token, host pool sizing (reference 1.5) and configuration validation."""

from __future__ import annotations

import pytest

from hicache_sim.core import CacheConfig, ConfigError
from hicache_sim.core.sizing import ModelDims, bytes_per_layer_per_token, host_pool_tokens, kv_bytes_per_token

LLAMA_31_8B = ModelDims(num_layers=32, attention="mha", num_kv_heads=8, head_dim=128, dtype="bf16")
LLAMA_31_70B = ModelDims(num_layers=80, attention="mha", num_kv_heads=8, head_dim=128, dtype="bf16")
DEEPSEEK_V3 = ModelDims(num_layers=61, attention="mla", kv_lora_rank=512, qk_rope_head_dim=64, dtype="bf16")


# ---------------------------------------------------------------------------------- bytes per token


def test_gqa_bytes_per_token():
    assert kv_bytes_per_token(LLAMA_31_8B) == 2 * 32 * 8 * 128 * 2 == 131072
    assert bytes_per_layer_per_token(LLAMA_31_8B) == 4096


def test_gqa_kv_heads_split_over_tp_but_never_below_one_head():
    assert kv_bytes_per_token(LLAMA_31_70B, tp=1) == 327680
    assert kv_bytes_per_token(LLAMA_31_70B, tp=4) == 327680 // 4
    assert kv_bytes_per_token(LLAMA_31_70B, tp=8) == 327680 // 8
    assert kv_bytes_per_token(LLAMA_31_70B, tp=16) == 327680 // 8  # one kv head per rank, replicated


def test_mla_bytes_per_token_is_one_latent_per_layer_replicated_over_tp():
    assert kv_bytes_per_token(DEEPSEEK_V3) == (512 + 64) * 61 * 2 == 70272
    assert kv_bytes_per_token(DEEPSEEK_V3, tp=8) == 70272


def test_fp8_halves_the_bytes():
    dims = ModelDims(num_layers=32, attention="mha", num_kv_heads=8, head_dim=128, dtype="fp8")
    assert kv_bytes_per_token(dims) == 65536


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"num_layers": 0, "num_kv_heads": 8, "head_dim": 128}, "model.num_layers"),
        ({"num_layers": 32, "attention": "gqa", "num_kv_heads": 8, "head_dim": 128}, "model.attention"),
        ({"num_layers": 32, "num_kv_heads": 8, "head_dim": 128, "dtype": "int3"}, "model.dtype"),
        ({"num_layers": 32, "num_kv_heads": 0, "head_dim": 128}, "model"),
        ({"num_layers": 32, "attention": "mla"}, "model"),
    ],
)
def test_invalid_model_dims_raise_config_error(kwargs, field):
    with pytest.raises(ConfigError) as e:
        ModelDims(**kwargs)
    assert e.value.field == field


def test_tp_must_be_positive():
    with pytest.raises(ConfigError, match=r"hardware\.tp"):
        kv_bytes_per_token(LLAMA_31_8B, tp=0)


# -------------------------------------------------------------------------------------- host pool


def test_ratio_adds_one_page_even_when_aligned():
    # 2026: page_num = int(device * ratio) // page + 1
    assert host_pool_tokens(1024, 64, host_ratio=1.0).host_tokens == 1024 + 64
    assert host_pool_tokens(1000, 64, host_ratio=2.0).host_tokens == (2000 // 64 + 1) * 64 == 2048
    assert host_pool_tokens(1000, 1, host_ratio=2.0).host_tokens == 2001


def test_ratio_align_down_2025():
    assert host_pool_tokens(1024, 64, host_ratio=1.0, alignment="down").host_tokens == 1024
    assert host_pool_tokens(1000, 64, host_ratio=2.0, alignment="down").host_tokens == 1984


def test_ratio_truncates_before_aligning():
    # int(1000 * 0.333) = 333 -> 333 // 64 + 1 = 6 pages
    assert host_pool_tokens(1000, 64, host_ratio=0.333).host_tokens == 384


def test_size_gb_overrides_through_bytes_per_token():
    got = host_pool_tokens(1024, 64, host_size_gb=1.0, bytes_per_token=131072)
    assert got.host_tokens == (int(1e9 // 131072) // 64 + 1) * 64 == 7680
    got = host_pool_tokens(10**6, 64, host_size_gb=1.0, bytes_per_token=70272, alignment="down")
    assert got.host_tokens == int(1e9 // 70272) // 64 * 64


def test_exact_tokens_are_taken_as_is():
    assert host_pool_tokens(1024, 64, host_tokens=4096).host_tokens == 4096
    with pytest.raises(ConfigError, match="host_tokens"):
        host_pool_tokens(1024, 64, host_tokens=4000)


@pytest.mark.parametrize("ratio", [0.5, 0.99])
def test_host_smaller_than_device_warns_never_raises(ratio):
    got = host_pool_tokens(8192, 64, host_ratio=ratio)
    assert got.host_tokens < 8192
    assert got.warning is not None and "not larger than the device" in got.warning


def test_host_larger_than_device_does_not_warn():
    assert host_pool_tokens(8192, 64, host_ratio=2.0).warning is None
    # Align-up: ratio 1.0 ends one page above the device, so it does not warn either.
    assert host_pool_tokens(8192, 64, host_ratio=1.0).warning is None
    assert host_pool_tokens(8192, 64, host_ratio=1.0, alignment="down").warning is not None


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({}, "cache"),
        ({"host_ratio": 2.0, "host_tokens": 64}, "cache"),
        ({"host_ratio": -1.0}, "cache.host_ratio"),
        ({"host_size_gb": -1.0, "bytes_per_token": 1}, "cache.host_size_gb"),
        ({"host_size_gb": 1.0}, "cache.host_size_gb"),
        ({"host_ratio": 1.0, "alignment": "sideways"}, "cache.host_alignment"),
        ({"host_ratio": 0.3, "alignment": "exact"}, "cache.host_alignment"),
    ],
)
def test_invalid_sizing_raises_config_error(kwargs, field):
    with pytest.raises(ConfigError) as e:
        host_pool_tokens(1000, 64, **kwargs)
    assert e.value.field == field


# ------------------------------------------------------------------------------------ CacheConfig


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"page_size": 0}, "cache.page_size"),
        ({"device_pages": 0}, "cache.device_pages"),
        ({"host_pages": -1}, "cache.host_pages"),
        ({"storage_batch_pages": 0}, "cache.storage_batch_pages"),
        ({"load_back_threshold_tokens": -1}, "cache.load_back_threshold_tokens"),
        ({"prefetch_threshold_tokens": -5}, "cache.prefetch_threshold_tokens"),
        ({"write_policy": "write_around"}, "cache.write_policy"),
        ({"eviction_policy": "random"}, "cache.eviction_policy"),
        ({"host_eviction": "evict_all"}, "cache.host_eviction"),
        ({"prefetch_policy": "never"}, "cache.prefetch_policy"),
        ({"host_memory_mode": "swap"}, "cache.host_memory_mode"),
        ({"eviction_granularity": "token"}, "cache.eviction_granularity"),
        ({"semantics": "2024"}, "cache.semantics"),
        ({"evict_amount": "all"}, "cache.evict_amount"),
        ({"parent_backup": "maybe"}, "cache.parent_backup"),
        ({"host_backup_eviction": "x"}, "cache.host_backup_eviction"),
        ({"prefetch_flow": "x"}, "cache.prefetch_flow"),
        ({"storage": True, "storage_capacity_pages": -1}, "cache.storage_capacity_pages"),
        ({"host_memory_mode": "buffer_only"}, "cache.host_memory_mode"),
        ({"host_memory_mode": "buffer_only", "storage": True, "write_policy": "write_back"}, "cache.write_policy"),
        ({"host_memory_mode": "buffer_only", "storage": True, "host_pages": 0}, "cache.host_pages"),
    ],
)
def test_invalid_cache_config_raises_config_error_naming_the_field(kwargs, field):
    base = {"page_size": 16, "device_pages": 64, "host_pages": 128}
    base.update(kwargs)
    with pytest.raises(ConfigError) as e:
        CacheConfig(**base)
    assert e.value.field == field
    assert str(e.value).startswith(field)


def test_unknown_policy_error_lists_what_is_supported():
    with pytest.raises(ConfigError, match="Supported: lru, lfu, fifo, mru, filo, priority, slru"):
        CacheConfig(16, 64, 128, eviction_policy="random")


def test_semantics_overrides_apply_field_by_field():
    cfg = CacheConfig(16, 64, 128, semantics="2025", parent_backup="skip")
    sem = cfg.resolved_semantics
    assert (sem.evict_amount.name, sem.parent_backup.name, sem.host_backup_eviction.name, sem.prefetch_flow.name) == (
        "need",
        "skip",
        "full_retry",
        "prealloc",
    )
    assert cfg.timeout_base_s == 1.0 and cfg.timeout_per_ki_token_s == 0.25 and cfg.timeout_max_s is None
    cfg = CacheConfig(16, 64, 128)
    assert cfg.timeout_base_s == 2.0 and cfg.timeout_per_ki_token_s == 0.1 and cfg.timeout_max_s == 30.0


def test_every_registered_semantic_variant_is_accepted_and_resolved_to_its_behaviour():
    """The allowed override values are the registries' names, and each resolves to its own object."""
    from hicache_sim.core.semantics import SEMANTIC_CHOICES, SEMANTIC_VARIANTS

    for name, registry in SEMANTIC_VARIANTS.items():
        assert SEMANTIC_CHOICES[name] == tuple(registry.names())
        for value in registry.names():
            sem = CacheConfig(16, 64, 128, semantics="2025", **{name: value}).resolved_semantics
            assert getattr(sem, name) is registry.get(value)
    with pytest.raises(ConfigError) as e:
        CacheConfig(16, 64, 128, prefetch_flow="eager")
    assert e.value.field == "cache.prefetch_flow" and "expected one of prealloc, after_hit; got 'eager'" in str(e.value)
