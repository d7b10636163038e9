"""``auto`` scheduler limits resolve as sglang 0.5.23 resolves a flag left unset. Each expected value
is worked out by hand from SGLang's rule:

- ``--chunked-prefill-size``: ``handle_gpu_memory_settings`` (arg_groups/memory_hook.py) by the
  memory the GPU reports, in MiB: 2048 below 20 GiB, 4096 below 60 GiB, 8192 below 160 GiB, else 16384.
- decode ``cuda_graph_max_bs`` (same function): 8 below 20 GiB; below 35 GiB 48 (160 from 4 TP
  ranks); below 60 GiB 32 (160); below 160 GiB 256 (512); else 512; lowered to an explicit
  ``--max-running-requests``.
- ``--max-running-requests``: ``resolve_max_num_reqs`` (mem_cache/kv_cache_configurator.py): unset,
  ``int(pool tokens / context_len x 512)`` clamped to [2048, 4096]; given or not, at most
  ``pool tokens // 2``.
"""

from __future__ import annotations

import pytest
from test_sim_support import resolved

from hicache_sim.core import ConfigError
from hicache_sim.hardware.memory import default_mem_fraction_static
from hicache_sim.sglang.convert import from_command, to_command
from hicache_sim.sim import SchedulerPolicy

AUTO = {"chunked_prefill_size": "auto", "max_running_requests": "auto"}
LLAMA = "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct"


def _r(gpu="h200", tp=1, model="llama-3.1-8b", memory_mib=None, cache=None, **sched):
    hw = {"gpu": gpu, "tp": tp} | ({"memory_mib": memory_mib} if memory_mib else {})
    return resolved(model=model, hardware=hw, cache=cache or {}, scheduler={**AUTO, **sched})


@pytest.mark.parametrize(
    ("gpu", "memory_mib", "want"),
    [
        ("h200", None, 8192),  # 143,771 MiB < 160 x 1024 = 163,840
        ("h100", None, 8192),  # 81,559 < 163,840 and >= 60 x 1024 = 61,440
        ("b200", None, 16384),  # 183,359 >= 163,840
        ("l40s", None, 4096),  # 46,068 < 61,440
        ("a10", None, 4096),  # 23,028 < 61,440 (4096 below 35 GiB too)
        ("a10", 20479, 2048),  # below 20 x 1024 = 20,480
        ("a10", 20480, 4096),  # the bound is strict
    ],
)
def test_auto_chunked_prefill_size_follows_gpu_memory(gpu, memory_mib, want):
    model = "qwen2.5-7b" if gpu == "a10" else "llama-3.1-8b"
    assert _r(gpu, model=model, memory_mib=memory_mib).chunked_prefill_size == want


@pytest.mark.parametrize(
    ("gpu", "tp", "model", "want"),
    [
        ("h200", 1, "llama-3.1-8b", 256),
        ("h200", 4, "llama-3.1-70b", 512),  # from 4 TP ranks
        ("l40s", 1, "qwen2.5-7b", 32),  # below 60 GiB
        ("a10", 1, "qwen2.5-7b", 48),  # below 35 GiB (24 before 0.5.23)
        ("a10", 4, "qwen2.5-7b", 160),
        ("b200", 1, "llama-3.1-8b", 512),
    ],
)
def test_auto_cuda_graph_max_bs_follows_gpu_memory_and_tp(gpu, tp, model, want):
    r = _r(gpu, tp, model)
    assert r.cuda_graph_max_bs == want
    # and it is what the default mem_fraction_static reserves for (2 MiB per batch size)
    mem = r.gpu.memory_mib
    assert r.memory.mem_fraction_static == default_mem_fraction_static(mem, r.chunked_prefill_size, want, tp, 1)


def test_an_explicit_max_running_requests_lowers_the_graph_batch_size():
    assert _r(max_running_requests=100).cuda_graph_max_bs == 100  # 256 on an H200, capped by the flag
    assert _r(max_running_requests=300).cuda_graph_max_bs == 256  # a larger cap changes nothing
    assert _r().cuda_graph_max_bs == 256  # auto is not a given flag: no cap
    given = resolved(hardware={"gpu": "h200", "cuda_graph_max_bs": 200}, scheduler={"max_running_requests": 100})
    assert given.cuda_graph_max_bs == 200  # a given batch size is kept


@pytest.mark.parametrize(
    ("model", "pool", "given", "want"),
    [
        ("llama-3.1-8b", 400_000, "auto", 2048),  # 400000 / 131072 x 512 = 1562 -> raised to 2048
        ("llama-3.1-8b", 1_200_000, "auto", 4096),  # 4687 -> lowered to 4096
        ("qwen2.5-7b", 200_000, "auto", 3125),  # 200000 / 32768 x 512 = 3125, inside the clamp
        ("llama-3.1-8b", 3_008, "auto", 1504),  # 2048 is more than half the pool: 3008 // 2
        ("llama-3.1-8b", 400_000, 256, 256),  # given: kept
        ("llama-3.1-8b", 320, 256, 160),  # given, but more than half the pool: 320 // 2
    ],
)
def test_max_running_requests_follows_the_pool(model, pool, given, want):
    r = _r(model=model, max_running_requests=given, cache={"device_tokens": pool})
    assert r.device_tokens == pool
    assert r.max_running_requests == want
    lowered = [w for w in r.warnings if "max_running_requests" in w]
    assert bool(lowered) == (given != "auto" and want < given)


def test_the_timed_scheduler_runs_the_resolved_limits():
    r = _r(cache={"device_tokens": 400_000})
    pol = SchedulerPolicy.from_resolved(r)
    assert (pol.chunked_prefill_tokens, pol.max_running_requests) == (8192, 2048)
    off = _r(chunked_prefill_size=-1, max_running_requests=7)
    assert SchedulerPolicy.from_resolved(off).chunked_prefill_tokens is None
    assert SchedulerPolicy.from_resolved(off).max_running_requests == 7


CUSTOM = {"num_layers": 4, "num_kv_heads": 8, "head_dim": 128, "q_heads": 32, "params_b": 1.0}


def test_auto_running_cap_needs_a_context_length_in_timed_mode():
    with pytest.raises(ConfigError, match=r"scheduler\.max_running_requests: auto .* set model\.context_len"):
        resolved(model=CUSTOM, cache={"device_tokens": 64_000}, scheduler=AUTO)
    r = resolved(model={**CUSTOM, "context_len": 8192}, cache={"device_tokens": 64_000}, scheduler=AUTO)
    assert r.max_running_requests == 4000  # 64000 / 8192 x 512 = 4000
    instant = resolved(mode="instant", model=CUSTOM, cache={"device_tokens": 64_000}, scheduler=AUTO)
    assert instant.max_running_requests == 0  # instant mode has no running batch: not derived


def test_an_auto_chunk_smaller_than_a_page_is_refused():
    with pytest.raises(ConfigError, match=r"scheduler\.chunked_prefill_size: auto is 8192 tokens on h200"):
        _r(cache={"page_size": 16384, "device_tokens": 16384 * 40, "host_tokens": 0})


def test_flags_left_unset_stay_unset_through_a_round_trip():
    conv = from_command(LLAMA)
    assert conv.scenario.scheduler.chunked_prefill_size == "auto"
    assert conv.scenario.scheduler.max_running_requests == "auto"
    tokens, _ = to_command(conv.scenario)
    assert "--chunked-prefill-size" not in tokens and "--max-running-requests" not in tokens
    given = from_command(f"{LLAMA} --chunked-prefill-size 8192 --max-running-requests 2048")
    tokens, _ = to_command(given.scenario)
    # given flags are written back even when equal to SGLang's value (a given cap also caps the graphs)
    assert tokens[-4:] == ["--chunked-prefill-size", "8192", "--max-running-requests", "2048"]


# --------------------------------------------------------------- host memory auto-sizing
#
# sglang 0.5.23 mem_cache/hicache_auto_size.py (auto_size_hicache) with pool_host/base.py
# (host_memory_budget_bytes): with no --hicache-ratio / --hicache-size, ratio = min(2, budget x 0.95 /
# device pool bytes), budget = (host memory - 10 GiB) // ranks x --hicache-host-memory-fraction; the
# device pool's bytes count its size + page rows (MHATokenToKVPool.get_kv_size_bytes).

GIB = 1 << 30


def _hosted(host_gib=None, fraction=0.8, tp=1, **cache):
    hw = {"gpu": "h200", "tp": tp} | ({"host_memory_gib": host_gib} if host_gib else {})
    base = {"device_tokens": 64 * 4000, "host_tokens": None, "host_memory_fraction": fraction}
    base["host_alignment"] = "up_plus_one"
    return resolved(model="llama-3.1-8b", hardware=hw, cache={**base, **cache})


def test_the_default_host_ratio_shrinks_to_fit_the_host_memory():
    bpt = 131072  # llama-3.1-8b, tp 1: 32 layers x 8 heads x 128 x 2 (k, v) x 2 bytes
    dev = 64 * 4000
    budget = (60 * GIB - 10 * GIB) // 1 * 0.8
    ratio = budget * 0.95 / ((dev + 64) * bpt)  # 38 GiB over a 31.3 GiB pool: 1.215, below 2
    assert 1.2 < ratio < 1.22
    r = _hosted(60)
    assert r.host_tokens == (int(dev * ratio) // 64 + 1) * 64  # SGLang's up_plus_one page alignment
    assert any("lowers its default ratio 2.0 to" in w for w in r.warnings)
    # 8 ranks share the same host: each gets an eighth (tp 8 also splits the KV: 1/8 the bytes a token)
    r8 = _hosted(60, tp=8, device_tokens=8 * dev)
    ratio8 = (60 * GIB - 10 * GIB) // 8 * 0.8 * 0.95 / ((8 * dev + 64) * bpt // 8)
    assert ratio8 < 1.22
    assert r8.host_tokens == (int(8 * dev * ratio8) // 64 + 1) * 64


def test_host_memory_sizing_applies_only_to_the_default_ratio():
    plenty = _hosted(4096)
    assert plenty.host_tokens == (dev2 := 2 * 64 * 4000) + 64  # fits: ratio 2 kept
    assert _hosted(None).host_tokens == dev2 + 64  # host memory not given: not modelled
    assert _hosted(60, host_ratio=2.0).host_tokens == dev2 + 64  # a given ratio is kept, as SGLang keeps it
    assert _hosted(60, fraction=0.4).host_tokens < _hosted(60).host_tokens
    with pytest.raises(ConfigError, match=r"hardware\.host_memory_gib: 10.0 GiB leaves no host memory"):
        _hosted(10)


def test_host_memory_fraction_round_trips_through_the_launch_flags():
    conv = from_command(f"{LLAMA} --enable-hierarchical-cache --hicache-host-memory-fraction 0.5")
    assert conv.scenario.cache.host_memory_fraction == 0.5
    assert any("set hardware.host_memory_gib" in n for n in conv.notes)
    tokens, _ = to_command(conv.scenario)
    assert tokens[tokens.index("--hicache-host-memory-fraction") + 1] == "0.5"
    assert "--hicache-host-memory-fraction" not in to_command(from_command(f"{LLAMA} --enable-hicache").scenario)[0]
