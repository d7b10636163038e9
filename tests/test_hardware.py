"""Hardware presets and their resolution (issue 10): copy curves by io backend, GPU memory as SGLang
profiles it, pipeline-parallel sizing, model presets, and compute parameters from a calibration file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from hicache_sim.core import ConfigError
from hicache_sim.hardware.calibration import CalibrationError, load_calibration
from hicache_sim.hardware.linkmodel import segments_for
from hicache_sim.hardware.memory import MIB
from hicache_sim.hardware.presets import GPUS, LINKS, MODELS
from hicache_sim.scenario import build_scenario, resolve
from hicache_sim.sim import ComputeParams

BASE = {"mode": "timed", "model": "llama-3.1-8b", "hardware": {"gpu": "h100"}, "cache": {"page_size": 64}}


def resolved(**sections):
    data = {**BASE, **{k: {**BASE.get(k, {}), **v} if isinstance(v, dict) else v for k, v in sections.items()}}
    return resolve(build_scenario(data, "s"))


# ------------------------------------------------------------------------------ copy curves


def _load_seconds(r, tokens: int) -> float:
    """One layer-by-layer H2D load of ``tokens`` tokens (one page each: page_size 1) alone on the link."""
    segs = segments_for(tokens, r.mem_layout, r.stage_layers, r.kv_factor)
    return r.links["h2d"].time(tokens * r.bytes_per_token, segs, launches=r.stage_layers)


def test_kernel_backend_moves_small_pieces_near_peak_where_direct_pays_per_piece():
    # Page size 1 on Llama-3.1-8B: 2 KiB pieces (one token, one layer, K or V).
    kernel = resolved(cache={"page_size": 1})
    direct = resolved(cache={"page_size": 1, "io_backend": "direct", "mem_layout": "layer_first"})
    h2d = kernel.links["h2d"]
    assert h2d.efficiency(2048) == pytest.approx(2048 / (2048 + 1047))  # ~66% (64 KiB rule: 3%)
    assert h2d.efficiency(2048) > 0.6
    assert direct.links["h2d"].segment_overhead_s == 5e-6 and direct.links["h2d"].half_efficiency_bytes == 0
    t_kernel, t_direct = _load_seconds(kernel, 4096), _load_seconds(direct, 4096)
    gbps = 4096 * kernel.bytes_per_token / t_kernel / 1e9
    assert 20 < gbps < 35.2  # a 4096-token load moves at most of the kernel's 35.2 GB/s H2D peak
    assert t_direct > 50 * t_kernel  # 262,144 pieces x 5 us


def test_kernel_curve_reproduces_the_public_h20_measurement():
    # sgl-project/sglang#37231: 8192 items of 656 B, layer_first -> page_first per layer, 19.56 GB/s.
    d2h = LINKS.get("gen5").kernel.params("d2h", "page_first")
    nbytes = 8192 * 656
    assert nbytes / d2h.time(nbytes, 8192) / 1e9 == pytest.approx(19.56, rel=0.02)
    lf = LINKS.get("gen5").kernel.params("d2h", "layer_first")
    assert nbytes / lf.time(nbytes, 8192) / 1e9 == pytest.approx(28.40, rel=0.02)


def test_each_backend_has_its_own_peak_and_launch_cost_and_overrides_apply():
    k, d = resolved().links, resolved(cache={"io_backend": "direct", "mem_layout": "layer_first"}).links
    assert (k["h2d"].bandwidth_Bps, k["d2h"].bandwidth_Bps) == (35.2e9, 52.8e9)
    assert (d["h2d"].bandwidth_Bps, d["d2h"].bandwidth_Bps) == (50e9, 50e9)
    over = resolved(hardware={"pcie": {"half_efficiency_bytes": 4096, "h2d_gbps": 40, "latency_us": 3}}).links
    assert over["h2d"].half_efficiency_bytes == 4096 and over["h2d"].bandwidth_Bps == 40e9
    assert over["h2d"].latency_s == pytest.approx(3e-6) and over["d2h"].bandwidth_Bps == 52.8e9
    assert resolved(hardware={"gpu": "mi300x"}).links["h2d"].bandwidth_Bps == 55e9  # its own link preset


def test_sglang_rewrites_unsupported_io_and_layout_pairs():
    r = resolved(cache={"io_backend": "kernel", "mem_layout": "page_first_direct"})
    assert (r.io_backend, r.mem_layout) == ("direct", "page_first_direct")
    assert any("SGLang uses direct" in w for w in r.warnings)
    r = resolved(cache={"io_backend": "direct", "mem_layout": "page_first"})
    assert (r.io_backend, r.mem_layout) == ("direct", "page_first_direct")
    assert r.links["h2d"].segment_overhead_s == 5e-6


def test_a_mooncake_store_gets_the_page_layout_sglang_gives_it():
    # 2026 (sglang 0.5.23 resolve_storage_layout_compatibility): layer_first becomes page_first under
    # the kernel backend, page_first_direct under direct; other layouts and other stores are kept.
    moon = {"storage_backend": "mooncake", "mem_layout": "layer_first"}
    r = resolved(cache=moon)
    assert (r.io_backend, r.mem_layout) == ("kernel", "page_first")
    assert r.links["h2d"].half_efficiency_bytes == 1047.0  # the page_first curve, not layer_first's 499
    assert any("mooncake storage backend" in w for w in r.warnings)
    r = resolved(cache={**moon, "io_backend": "direct"})
    assert (r.io_backend, r.mem_layout) == ("direct", "page_first_direct")
    r = resolved(cache={"storage_backend": "local_nvme", "mem_layout": "layer_first"})
    assert (r.io_backend, r.mem_layout) == ("kernel", "layer_first")
    # 2025 (sglang 0.5.2 server_args): a mooncake store forces kernel + page_first, whatever was asked.
    r = resolved(cache={**moon, "io_backend": "direct", "semantics": "2025"})
    assert (r.io_backend, r.mem_layout) == ("kernel", "page_first")
    r = resolved(cache={**moon, "io_backend": "direct"})
    assert r.io_backend == "direct"  # 2026 keeps the io backend


# ------------------------------------------------------------------------------ GPU memory


def test_capacity_is_what_the_device_reports_not_decimal_gigabytes():
    h100 = GPUS.get("h100")
    assert h100.memory_mib == 81559 and h100.memory_bytes == 81559 * MIB  # "80 GB" is 79.65 GiB
    assert GPUS.get("h200").memory_mib == 143771 and GPUS.get("mi300x").memory_bytes == 205_822_885_888


def test_kv_pool_is_sglangs_profile_formula():
    r = resolved(hardware={"mem_fraction_static": 0.88})
    pre = 81559 * MIB - 1024 * MIB  # capacity less the CUDA context
    weights = 8.03e9 * 2
    expect = int(pre - weights - pre * (1 - 0.88)) // 131072 // 64 * 64
    assert r.device_tokens == expect
    assert r.memory.mem_fraction_source == "given"
    # the old rule (0.88 x 80e9 bytes - weights) gives a different pool
    assert r.device_tokens != int(0.88 * 80e9 - weights) // 131072 // 64 * 64


@pytest.mark.parametrize(
    ("gpu", "chunk", "tp", "want"),
    [
        # reserve = 512 + 1.5 x max(chunk, 2048) + 2 x graph bs + 1024 x tp x pp / 8 MiB, >= 10 GiB above 60 GiB
        ("h100", 8192, 1, round((81559 - (512 + 12288 + 512 + 128)) / 81559, 3)),
        ("h200", 8192, 8, round((143771 - (512 + 12288 + 1024 + 1024)) / 143771, 3)),
        ("h200", 2048, 1, round((143771 - 10240) / 143771, 3)),  # the 10 GiB floor
        # graph bs 48 below 35 GiB (sglang 0.5.23 memory_hook.py; it was 24 before)
        ("a10", 2048, 1, round((23028 - (512 + 3072 + 96 + 128)) / 23028, 3)),
    ],
)
def test_default_mem_fraction_static_is_sglangs_rule(gpu, chunk, tp, want):
    model = "llama-3.1-70b" if tp == 8 else "qwen3-8b" if gpu == "a10" else "llama-3.1-8b"
    r = resolved(model=model, hardware={"gpu": gpu, "tp": tp}, scheduler={"chunked_prefill_size": chunk})
    assert r.memory.mem_fraction_static == want and r.memory.mem_fraction_source == "SGLang default"


def test_weights_that_do_not_fit_are_refused_naming_the_numbers():
    with pytest.raises(ConfigError, match=r"hardware.mem_fraction_static.*deepseek-r1.*h100 at tp 8 x pp 1.*78.87 GiB"):
        resolved(model="deepseek-r1", hardware={"tp": 8})
    assert resolved(model="deepseek-r1", hardware={"gpu": "h200", "tp": 8}).device_tokens > 500_000  # fp8 fits


# ------------------------------------------------------------------------ pipeline parallel


def test_pipeline_stages_split_layers_weights_and_kv():
    one, two = (
        resolved(hardware={"mem_fraction_static": 0.88}),
        resolved(hardware={"mem_fraction_static": 0.88, "pp": 2}),
    )
    assert two.stage_layers == 16 and two.bytes_per_token == one.bytes_per_token // 2
    assert two.memory.weight_bytes == pytest.approx(one.memory.weight_bytes / 2)
    pre = 81559 * MIB - 1024 * MIB
    assert two.device_tokens == int(pre * 0.88 - 8.03e9) // 65536 // 64 * 64 > 2 * one.device_tokens
    assert ComputeParams.from_resolved(two).num_layers == 16


def test_pp_must_divide_the_layers():
    with pytest.raises(ConfigError, match=r"hardware.pp: 3 does not divide the 32 layers"):
        resolved(hardware={"pp": 3})


# ---------------------------------------------------------------------------- model presets


#: KV bytes per token (bf16, one rank) of every model preset, from each checkpoint's config.json:
#: 2 (K and V) x num_hidden_layers x num_key_value_heads x head_dim x 2 bytes; MLA (DeepSeek V3/R1)
#: caches one latent (kv_lora_rank 512) plus the rope key (qk_rope_head_dim 64) per layer.
CONFIG_JSON_KV_BYTES = {
    "llama-3.1-8b": 2 * 32 * 8 * 128 * 2,
    "llama-3.1-70b": 2 * 80 * 8 * 128 * 2,
    "llama-3.1-405b": 2 * 126 * 8 * 128 * 2,
    "qwen2.5-7b": 2 * 28 * 4 * 128 * 2,
    "qwen2.5-72b": 2 * 80 * 8 * 128 * 2,
    "qwen3-8b": 2 * 36 * 8 * 128 * 2,
    "qwen3-14b": 2 * 40 * 8 * 128 * 2,
    "qwen3-32b": 2 * 64 * 8 * 128 * 2,
    "qwen3-30b-a3b": 2 * 48 * 4 * 128 * 2,
    "qwen3-235b-a22b": 2 * 94 * 4 * 128 * 2,  # 188 KiB
    "glm-4.5": 2 * 92 * 8 * 128 * 2,
    "deepseek-v3": 61 * (512 + 64) * 2,
    "deepseek-r1": 61 * (512 + 64) * 2,  # MLA: one latent + rope key per layer, no per-head K/V
}


def test_every_model_preset_has_its_config_json_kv_bytes():
    """A preset added to hardware/presets.py without its config.json figure here fails."""
    assert set(MODELS.names()) == set(CONFIG_JSON_KV_BYTES)


@pytest.mark.parametrize(("name", "kv_bytes"), sorted(CONFIG_JSON_KV_BYTES.items()))
def test_model_presets_give_config_json_kv_bytes(name, kv_bytes):
    r = resolved(model=name, cache={"device_tokens": 64 * 10})
    assert r.bytes_per_token == kv_bytes


def test_mla_kv_is_replicated_over_tp_and_split_over_pp():
    tp8 = resolved(model="deepseek-r1", hardware={"gpu": "h200", "tp": 8})
    assert tp8.bytes_per_token == 61 * 576 * 2 and tp8.kv_factor == 1
    with pytest.raises(ConfigError, match="61 layers"):
        resolved(model="deepseek-r1", hardware={"gpu": "h200", "tp": 8, "pp": 2})


# ------------------------------------------------------------ compute parameters from a file


def _calibration(tmp_path, compute) -> str:
    path = tmp_path / "cal.yaml"
    data = {"kind": "hicache-sim-calibration", "version": 1, "device": "x", "source": "y", "groups": []}
    if compute is not None:
        data["compute"] = compute
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_calibration_file_carries_compute_parameters(tmp_path):
    cal = _calibration(tmp_path, {"linear_mfu": 0.42, "attention_mfu": 0.33, "step_overhead_us": 80})
    r = resolved(hardware={"calibration": cal})
    p = ComputeParams.from_resolved(r)
    assert (p.linear_mfu, p.attention_mfu, p.step_overhead_s) == (0.42, 0.33, pytest.approx(80e-6))
    assert p.hbm_efficiency == 0.8  # not in the file: the default
    # a value the scenario sets itself wins over the file
    mine = ComputeParams.from_resolved(resolved(hardware={"calibration": cal, "linear_mfu": 0.5}))
    assert (mine.linear_mfu, mine.attention_mfu) == (0.5, 0.33)
    assert load_calibration(cal).to_data()["compute"]["linear_mfu"] == 0.42  # survives a save


def test_calibration_file_carries_the_allreduce_curve(tmp_path):
    # A measured NCCL curve from the machine: half-peak at 4 MiB, exponent 1.
    cal = _calibration(tmp_path, {"allreduce_half_peak_mib": 4.0, "allreduce_curve_exponent": 1.0})
    p = ComputeParams.from_resolved(resolved(hardware={"calibration": cal}))
    assert (p.allreduce_half_peak_bytes, p.allreduce_exponent) == (4.0 * 2**20, 1.0)
    mine = ComputeParams.from_resolved(resolved(hardware={"calibration": cal, "allreduce_curve_exponent": 0.5}))
    assert mine.allreduce_exponent == 0.5  # the scenario's own value wins


BAD_COMPUTE = {
    "zero exponent": (
        {"allreduce_curve_exponent": 0},
        "compute.allreduce_curve_exponent: expected a number in (0, 10]",
    ),
    "efficiency above 1": ({"linear_mfu": 1.5}, "compute.linear_mfu: expected a number in (0, 1]"),
    "efficiency 0": ({"attention_mfu": 0}, "compute.attention_mfu: expected a number in (0, 1]"),
    "negative overhead": ({"step_overhead_us": -1}, "compute.step_overhead_us: expected a number in [0, 1e+09]"),
    "unknown field": ({"mfu": 0.5}, "compute.mfu: unknown field"),
    "not a mapping": ([0.5], "compute: expected a mapping"),
}


@pytest.mark.parametrize(("compute", "fragment"), BAD_COMPUTE.values(), ids=BAD_COMPUTE.keys())
def test_bad_compute_section_names_the_field(tmp_path, compute, fragment):
    with pytest.raises(CalibrationError, match=re.escape(fragment)):
        load_calibration(_calibration(tmp_path, compute))


def test_validate_prints_where_the_kv_pool_comes_from(tmp_path):
    from conftest import invoke

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**BASE, "hardware": {"gpu": "h200", "pp": 2}}))
    out = invoke("validate", path).output
    assert "GPU h200 at tp 1 x pp 2: 140.40 GiB reported, 1.00 GiB context, 7.48 GiB weights" in out
    assert "mem_fraction_static 0.906 (SGLang default)" in out


def _link_calibration(tmp_path, **fields) -> str:
    row = {"direction": "h2d", "io_backend": "kernel", "layout": "layer_first", "bandwidth_Bps": 5e10}
    row |= {"latency_s": 1e-5, "half_efficiency_bytes": 1000.0, "segment_overhead_s": 0.0} | fields
    path = tmp_path / "cal.yaml"
    data = {"kind": "hicache-sim-calibration", "version": 1, "device": "x", "source": "y", "groups": [row]}
    path.write_text(yaml.safe_dump(data))
    return str(path)


# A NaN or an enormous link cost used to be accepted and left a timed run polling forever.
BAD_LINK = {
    "nan bandwidth": ({"bandwidth_Bps": float("nan")}, "groups[0].bandwidth_Bps: expected a number in [1e+06, 1e+15]"),
    "inf bandwidth": ({"bandwidth_Bps": float("inf")}, "groups[0].bandwidth_Bps: expected a number in [1e+06, 1e+15]"),
    "zero bandwidth": ({"bandwidth_Bps": 0}, "groups[0].bandwidth_Bps: expected a number in [1e+06, 1e+15]"),
    "nan latency": ({"latency_s": float("nan")}, "groups[0].latency_s: expected a number in [0, 1000]"),
    "huge latency": ({"latency_s": 1e9}, "groups[0].latency_s: expected a number in [0, 1000]"),
    "nan segment cost": ({"segment_overhead_s": float("nan")}, "groups[0].segment_overhead_s: expected a number"),
    "negative piece size": ({"half_efficiency_bytes": -1}, "groups[0].half_efficiency_bytes: expected a number"),
    "boolean latency": ({"latency_s": True}, "groups[0].latency_s: expected a number"),
}


@pytest.mark.parametrize(("fields", "fragment"), BAD_LINK.values(), ids=BAD_LINK.keys())
def test_bad_link_group_names_the_field(tmp_path, fields, fragment):
    with pytest.raises(CalibrationError, match=re.escape(fragment)):
        load_calibration(_link_calibration(tmp_path, **fields))


def test_a_good_link_group_loads_and_a_binary_file_is_refused(tmp_path):
    cal = load_calibration(_link_calibration(tmp_path))
    assert cal.get("h2d", "kernel", "layer_first").bandwidth_Bps == 5e10
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"kind: \xff\xfe\n")
    with pytest.raises(CalibrationError, match="not UTF-8 text"):
        load_calibration(binary)


def test_a_calibration_field_given_twice_is_refused_with_its_line(tmp_path):
    """PyYAML keeps the last of two equal keys silently; a calibration must say each value once."""
    good = Path(_link_calibration(tmp_path)).read_text()
    assert good.startswith("device: x\n")
    dup = tmp_path / "dup.yaml"
    dup.write_text("device: a\n" + good)
    with pytest.raises(CalibrationError, match=r"dup.yaml:2: not valid YAML: found duplicate key 'device'"):
        load_calibration(dup)
