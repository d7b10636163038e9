"""Shared fixtures and small helpers for the tests (import helpers with ``from conftest import ...``)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from hicache_sim.core import CacheConfig, HiCache, check
from hicache_sim.workloads.traces import load_mooncake, vendored_trace

# A small instant scenario (60 requests of the conversation trace) for CLI and bad-input tests.
TINY_SCENARIO = {
    "name": "tiny",
    "mode": "instant",
    "model": "llama-3.1-8b",
    "cache": {"page_size": 512, "device_tokens": 512 * 300, "host_ratio": 0.5, "host_alignment": "exact"},
    "scheduler": {"chunked_prefill_size": None},
    "workload": {"kind": "trace", "trace": {"path": "builtin:mooncake/conversation_trace.jsonl", "limit": 60}},
}


def invoke(*args):
    """Run the ``hicache-sim`` CLI in-process with string arguments."""
    from hicache_sim.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


def assert_user_error(result, *fragments: str) -> None:
    """A user's mistake: exit code 2, no traceback, exactly one ``error:`` line holding every fragment."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [ln for ln in result.output.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, result.output
    for frag in fragments:
        assert frag in lines[0], lines[0]


def new_cache(page_size: int = 4, device_pages: int = 16, host_pages: int = 0, **kw) -> HiCache:
    """A strict HiCache (double frees raise) with small defaults; keyword arguments go to CacheConfig."""
    return HiCache(CacheConfig(page_size, device_pages, host_pages, strict=True, **kw))


def put(cache: HiCache, keys: list[int], *, chunked: bool = False, priority: int = 0) -> int:
    """Insert ``keys`` as a finished request would: reuse the device prefix, allocate the rest (evicting
    when short), insert, free the duplicates. Returns insert's prefix (pages already on device)."""
    m = cache.match_prefix(keys)
    have = len(m.device_pages)
    cache.inc_lock_ref(m.last_device_node)
    new = cache.alloc_device(len(keys) - have)
    cache.dec_lock_ref(m.last_device_node)
    assert new is not None, f"no device room for {len(keys) - have} pages"
    pages = list(m.device_pages) + new
    prefix = cache.insert(keys, pages, chunked=chunked, priority=priority)
    if prefix > have:
        cache.device.free(pages[have:prefix])
    return prefix


def node_at(cache: HiCache, keys: list[int]):
    """The node whose key ends exactly at ``keys`` (walks children without touching anything)."""
    node, pos = cache.root, 0
    while pos < len(keys):
        node = node.children[keys[pos]]
        assert keys[pos : pos + len(node.key)] == node.key, f"no node boundary at {keys}"
        pos += len(node.key)
    return node


def settle(cache: HiCache, held=()) -> None:
    """Complete every transfer in flight (and those they spawn), then check every invariant."""
    cache.drain()
    cache.take_transfers()
    check(cache, held_device_pages=held)


@pytest.fixture(scope="session")
def synthetic_trace():
    """Mooncake synthetic trace (3,993 requests) at page size 512: one block = one page."""
    return load_mooncake(vendored_trace("mooncake/synthetic_trace.jsonl"), 512)


@pytest.fixture(scope="session")
def conversation_trace():
    """Mooncake conversation trace (12,031 requests) at page size 512."""
    return load_mooncake(vendored_trace("mooncake/conversation_trace.jsonl"), 512)


def pytest_collection_modifyitems(config, items):
    """Skip tests marked ``gpu`` when no CUDA device is present (torch missing counts as none)."""
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in gpu_items:
        item.add_marker(skip)


# GLM-5.2's attention as its config.json gives it (MLA latent 512 + rope 64 over 78 layers, fp8 KV) with
# DSA indexer keys: 128 one-byte keys and one fp32 scale per 128 per token and layer (pool_host/dsa.py).
GLM5 = {
    "num_layers": 78,
    "attention": "mla",
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "q_heads": 64,
    "head_dim": 192,
    "params_b": 744,
    "active_params_b": 40,
    "weights_dtype": "fp8",
    "index_head_dim": 128,
    "dtype": "fp8",
}
