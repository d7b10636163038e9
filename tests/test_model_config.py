"""A model from its checkpoint's config.json (``model: {config: ...}``), as SGLang 0.5.23 reads it; the
presets held against the config.json of their published checkpoint; the message when a model leaves no
KV pool. Bad config files are rows of tests/test_bad_input.py (MODEL_CONFIG_CASES)."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from conftest import TINY_SCENARIO, invoke

from hicache_sim.core import ConfigError
from hicache_sim.hardware.hfconfig import MODELS_DIR, model_from_config
from hicache_sim.hardware.memory import GIB
from hicache_sim.hardware.presets import MODELS, WEIGHT_BYTES
from hicache_sim.scenario import Scenario, load_scenario, load_scenario_data, resolve

VENDORED = sorted(p.parent.name for p in MODELS_DIR.glob("*/config.json"))
#: Presets without a vendored config.json, and why (their figures cite docs/reference/hardware-and-models.md).
NOT_VENDORED = {
    # The copies at hand are the base checkpoints' (max_position_embeddings 131072; 7.6155 / 72.705 B
    # parameters and the KV shape as the presets); the presets follow the Instruct checkpoints' 32768.
    "qwen2.5-7b": "no copy of Qwen/Qwen2.5-7B-Instruct's config.json at hand",
    "qwen2.5-72b": "no copy of Qwen/Qwen2.5-72B-Instruct's config.json at hand",
    "qwen3-14b": "no copy of the published config.json at hand",
    "glm-4.5": "no copy of the published config.json at hand",
}
#: What the KV pool and the compute model read; each must come out of config.json as the preset has it.
SHAPE = (
    "num_layers",
    "attention",
    "num_kv_heads",
    "head_dim",
    "q_heads",
    "kv_lora_rank",
    "qk_rope_head_dim",
    "weights_dtype",
    "hidden_size",
    "num_experts",
    "experts_per_token",
    "moe_intermediate_size",
    "shared_experts",
    "dense_layers",
    "context_len",
)


def scenario(model: dict | str, **hardware) -> Scenario:
    return Scenario.model_validate({**TINY_SCENARIO, "model": model, "hardware": hardware})


def half_unit(written: float) -> float:
    """Half a unit of the last digit a preset writes (8.03 -> 0.005, 235.0 -> 0.5): its rounding."""
    exponent = Decimal(repr(written)).normalize().as_tuple().exponent
    return 0.5 * 10.0 ** max(exponent, 0 if float(written).is_integer() else exponent)


def test_every_preset_has_a_vendored_config_or_a_reason():
    """A preset added without its checkpoint's config.json (or a reason here) fails."""
    assert set(MODELS.names()) == set(VENDORED) | set(NOT_VENDORED)
    assert not set(VENDORED) & set(NOT_VENDORED)


@pytest.mark.parametrize("name", VENDORED)
def test_vendored_config_gives_the_preset(name):
    """KV bytes per token (tp 1 and 8), weight bytes and every shape field: config.json against the preset.
    The preset's parameter count is the model card's rounded figure: the count from the config's
    dimensions rounds to it."""
    preset = MODELS.get(name)
    derived = model_from_config(str(MODELS_DIR / name / "config.json"))
    assert {k: getattr(derived, k) for k in SHAPE} == {k: getattr(preset, k) for k in SHAPE}
    assert abs(derived.params_b - preset.params_b) <= half_unit(preset.params_b)
    for tp in (1, 8):
        cfg = resolve(scenario({"config": f"builtin:{name}"}, tp=tp, gpu="h200"))
        pre = resolve(scenario(name, tp=tp, gpu="h200"))
        assert cfg.bytes_per_token == pre.bytes_per_token
        tolerance = half_unit(preset.params_b) * 1e9 * WEIGHT_BYTES[preset.weights_dtype] / tp
        assert abs(cfg.memory.weight_bytes - pre.memory.weight_bytes) <= tolerance


def test_deepseek_v3_preset_is_fp8_like_its_checkpoint():
    """The published DeepSeek-V3 checkpoint stores fp8 weights (quantization_config), as R1's: 78.9 GiB per
    rank at TP 8, not 158: 671 B parameters / 8 at 1 B, plus the 0.92 B of MLA down-projections every
    rank holds whole (hardware/params.py) x 7/8."""
    plan = resolve(scenario("deepseek-v3", gpu="h200", tp=8)).memory
    assert MODELS.get("deepseek-v3").weights_dtype == "fp8"
    assert plan.weight_bytes == pytest.approx(671e9 / 8 + 923_592_704 * 7 / 8)


def _write(folder: Path, config: dict, name: str = "config.json") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps(config))
    return path


LLAMA_LIKE = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 1024,
    "intermediate_size": 4096,
    "num_hidden_layers": 4,
    "num_attention_heads": 16,
    "vocab_size": 1000,
    "max_position_embeddings": 4096,
    "torch_dtype": "bfloat16",
}


@pytest.mark.parametrize(
    ("extra", "kv_heads", "head_dim"),
    [
        ({}, 16, 64),  # no KV-head key: as many as attention heads; head_dim = hidden / heads
        ({"num_key_value_heads": 4}, 4, 64),
        ({"num_key_value_heads": 4, "head_dim": 128}, 4, 128),
        ({"multi_query_group_num": 2}, 2, 64),  # ChatGLM's name for it
        ({"num_kv_heads": 8, "num_key_value_heads": 4}, 8, 64),  # SGLang's order: num_kv_heads first
        ({"multi_query": True, "num_key_value_heads": 4}, 1, 64),
    ],
)
def test_gqa_heads_and_width_as_sglang_reads_them(tmp_path, extra, kv_heads, head_dim):
    m = model_from_config(str(_write(tmp_path, {**LLAMA_LIKE, **extra})))
    assert (m.attention, m.num_kv_heads, m.head_dim) == ("mha", kv_heads, head_dim)
    r = resolve(scenario({"config": str(tmp_path / "config.json")}))
    assert r.bytes_per_token == 2 * 4 * kv_heads * head_dim * 2


def test_mla_is_chosen_by_architecture_not_by_the_keys(tmp_path):
    """SGLang gives an MLA pool to the architectures it lists (DeepseekV3ForCausalLM, ...), whatever keys
    another architecture carries."""
    mla = {"kv_lora_rank": 256, "qk_rope_head_dim": 32, "qk_nope_head_dim": 64, "v_head_dim": 64, "q_lora_rank": None}
    v3 = model_from_config(
        str(_write(tmp_path / "a", {**LLAMA_LIKE, **mla, "architectures": ["DeepseekV3ForCausalLM"]}))
    )
    assert (v3.attention, v3.kv_lora_rank, v3.qk_rope_head_dim, v3.head_dim) == ("mla", 256, 32, 96)
    assert resolve(scenario({"config": str(tmp_path / "a")}, tp=4)).bytes_per_token == 4 * (256 + 32) * 2
    llama = model_from_config(str(_write(tmp_path / "b", {**LLAMA_LIKE, **mla})))
    assert llama.attention == "mha"


@pytest.mark.parametrize(
    ("extra", "context"),
    [
        ({}, 4096),
        ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, 16384),  # the factor extends it
        ({"rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 1024}}, 4096),
        ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, 4096),
        ({"max_sequence_length": 2000}, 2000),  # the first length key SGLang looks for wins
        ({"max_position_embeddings": None}, 2048),  # none: SGLang's 2048
    ],
)
def test_context_length_as_sglang_derives_it(tmp_path, extra, context):
    assert model_from_config(str(_write(tmp_path, {**LLAMA_LIKE, **extra}))).context_len == context


@pytest.mark.parametrize(
    ("extra", "dtype"),
    [
        ({}, "bf16"),
        ({"torch_dtype": "float16"}, "fp16"),
        ({"torch_dtype": "float32"}, "fp16"),  # SGLang runs a float32 checkpoint in float16
        ({"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}, "fp8"),
        ({"quantization_config": {"quant_method": "modelopt", "quant_algo": "FP8"}}, "fp8"),
        (
            {
                "quantization_config": {
                    "quant_method": "compressed-tensors",
                    "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float"}}},
                }
            },
            "fp8",
        ),
    ],
)
def test_weights_dtype_from_quantization_config_or_torch_dtype(tmp_path, extra, dtype):
    assert model_from_config(str(_write(tmp_path, {**LLAMA_LIKE, **extra}))).weights_dtype == dtype


def test_parameters_are_counted_from_the_dimensions(tmp_path):
    """Embeddings and LM head (one when tied), q/k/v/o, gate/up/down, two norms a layer and the final one;
    a MoE counts every routed expert once and a token's top-k in its active parameters."""
    hidden, inter, layers, vocab = 1024, 4096, 4, 1000
    per_layer = 4 * hidden * hidden + 3 * hidden * inter + 2 * hidden
    dense = model_from_config(str(_write(tmp_path / "d", {**LLAMA_LIKE, "tie_word_embeddings": True})))
    assert dense.params_b * 1e9 == pytest.approx(vocab * hidden + layers * per_layer + hidden)
    moe = {"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 512}
    m = model_from_config(str(_write(tmp_path / "m", {**LLAMA_LIKE, **moe, "architectures": ["Qwen3MoeForCausalLM"]})))
    routed = layers * 8 * 3 * hidden * 512
    rest = 2 * vocab * hidden + layers * (4 * hidden * hidden + hidden * 8 + 2 * hidden) + hidden
    assert m.params_b * 1e9 == pytest.approx(rest + routed)
    assert m.active_params_b * 1e9 == pytest.approx(rest + routed * 2 / 8)
    assert (m.num_experts, m.experts_per_token, m.moe_intermediate_size) == (8, 2, 512)


def test_fields_beside_config_override_it(tmp_path):
    _write(tmp_path, LLAMA_LIKE)
    r = resolve(scenario({"config": str(tmp_path), "context_len": 1000, "weights_dtype": "fp8"}))
    assert (r.model.context_len, r.model.weights_dtype) == (1000, "fp8")


def test_relative_config_is_found_beside_the_scenario_file(tmp_path, monkeypatch):
    _write(tmp_path / "models" / "tiny", LLAMA_LIKE)
    (tmp_path / "sc").mkdir()
    sc_file = tmp_path / "sc" / "s.yaml"
    sc_file.write_text(yaml.safe_dump({**TINY_SCENARIO, "model": {"config": "../models/tiny/config.json"}}))
    monkeypatch.chdir(tmp_path / "models")  # not the scenario's folder
    sc = load_scenario(sc_file)
    assert Path(sc.model.config) == (tmp_path / "models" / "tiny" / "config.json").resolve()
    assert resolve(sc).model.name == "tiny"
    result = invoke("validate", sc_file)
    assert result.exit_code == 0, result.output
    # a sweep over configs is read the same way
    data = {**TINY_SCENARIO, "model": {"config": "../models/tiny"}, "sweep": {"model.config": ["../models/tiny"]}}
    sc_file.write_text(yaml.safe_dump(data))
    assert load_scenario_data(sc_file)["sweep"]["model.config"] == [str((tmp_path / "models" / "tiny").resolve())]


def test_from_sglang_reads_a_local_model_folder(tmp_path):
    """--model-path naming a local folder with a config.json is read from it (the folder's name is no
    preset's); sglang-args gives the folder back."""
    folder = tmp_path / "my-finetune"
    _write(folder, {**LLAMA_LIKE, "num_key_value_heads": 4})
    out = tmp_path / "s.yaml"
    launch = ["python", "-m", "sglang.launch_server", "--model-path", str(folder), "--enable-hierarchical-cache"]
    result = invoke("from-sglang", "--gpu", "h100", "--out", out, "--", *launch)
    assert result.exit_code == 0, result.output
    sc = load_scenario(out)
    assert sc.model.config == str((folder / "config.json").resolve()) and sc.model.preset is None
    assert resolve(sc).bytes_per_token == 2 * 4 * 4 * 64 * 2
    back = invoke("sglang-args", out)
    assert f"--model-path {folder}" in back.output


# SGLang's benchmark/hicache/run_tiered_cache_bench_wts.sh, case 2 (L1 + L2), with its defaults: TP 8,
# page 64, a 128 GB host pool per rank, write_through, page_first; MODEL_PATH /nfs/DeepSeek-V3.
TIERED_CACHE_BENCH = [
    *("python", "-m", "sglang.launch_server", "--enable-cache-report", "--enable-metrics"),
    *("--model-path", "/nfs/DeepSeek-V3", "--host", "0.0.0.0", "--tp-size", "8", "--page-size", "64"),
    *("--enable-hierarchical-cache", "--hicache-size", "128", "--hicache-write-policy", "write_through"),
    *("--hicache-mem-layout", "page_first"),
]


def test_deepseek_v3_from_sglangs_tiered_cache_bench_simulates(tmp_path):
    out = tmp_path / "dsv3.yaml"
    result = invoke("from-sglang", "--gpu", "h200", "--out", out, "--", *TIERED_CACHE_BENCH)
    assert result.exit_code == 0, result.output
    sc = load_scenario(out, ["mode=instant", "workload.trace.limit=40"])
    r = resolve(sc)
    assert r.model.name == "deepseek-v3" and r.memory.weight_bytes / GIB == pytest.approx(78.87, abs=0.01)
    assert r.device_tokens > 0
    run = invoke(
        "run",
        out,
        "--out",
        tmp_path / "run",
        "--no-figures",
        "--set",
        "mode=instant",
        "--set",
        "workload.trace.limit=40",
    )
    assert run.exit_code == 0, run.output


def _no_pool(model: str, **hardware) -> str:
    with pytest.raises(ConfigError, match="leaves no KV pool") as e:
        resolve(scenario(model, **hardware).model_copy(update={"cache": Scenario().cache}))
    return str(e.value)


def _remedies(message: str) -> list[str]:
    return re.findall(r"--(tp|pp)-size (\d+)", message)


@pytest.mark.parametrize(
    ("model", "hardware", "named", "absent"),
    [
        # bf16 weights over 4 ranks: more TP or PP ranks, or an fp8 checkpoint, all help
        ("llama-3.1-405b", {"gpu": "h200", "tp": 4}, ["189.01 GiB of bf16 weights per rank", "fp8"], []),
        # fp8 already, 61 layers (no PP split): only 16 TP ranks or a larger GPU help
        (
            "deepseek-r1",
            {"gpu": "h100", "tp": 8},
            ["78.87 GiB of fp8 weights per rank", "--tp-size 16", "h200"],
            ["--pp-size", "fp8 checkpoint"],
        ),
    ],
)
def test_no_pool_names_weights_and_only_remedies_that_help(model, hardware, named, absent):
    message = _no_pool(model, **hardware)
    for text in named:
        assert text in message
    for text in [*absent, "raise tp or pp"]:
        assert text not in message
    for flag, n in _remedies(message):  # every proposed split does leave a pool
        r = resolve(scenario(model, **{**hardware, flag: int(n)}).model_copy(update={"cache": Scenario().cache}))
        assert r.device_tokens > 0


def test_result_identity_follows_the_config_files_content(tmp_path):
    """A sweep resumes a point only when its inputs are unchanged: the config.json's bytes are one."""
    from hicache_sim.output.identity import input_files
    from hicache_sim.scenario import scenario_dump

    path = _write(tmp_path, LLAMA_LIKE)
    dump = scenario_dump(scenario({"config": str(path)}))
    before = input_files(dump, None)["model.config"]
    _write(tmp_path, {**LLAMA_LIKE, "num_hidden_layers": 16})
    assert input_files(dump, None)["model.config"] != before
