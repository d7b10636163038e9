"""The weights one GPU holds under attention DP (issue 29 item 5): SGLang 0.5.23 shards a DP-attention
model's attention projections (and the DeepSeek / Qwen / GLM classes' embedding) over one attention
group of ``tp / attn_dp`` ranks, the MLP, experts and LM head over all ``tp`` ranks; so the weights per
GPU grow and the device pool shrinks by the same bytes. Counts below are written out from each model's
config.json dimensions; ``docs/reference/sglang-data-parallel.md`` section 7 has the rule's lines."""

from __future__ import annotations

import json

import pytest
from conftest import TINY_SCENARIO

from hicache_sim.core import ConfigError
from hicache_sim.hardware.hfconfig import MODELS_DIR, model_from_config, sglang_architectures
from hicache_sim.hardware.params import (
    ATTN_TP,
    DEFAULT_SPLIT,
    TP,
    WEIGHT_SPLITS,
    attention_params,
    replicated_params,
    split_of,
    weight_share,
)
from hicache_sim.hardware.presets import MODELS, WEIGHT_BYTES, ModelPreset
from hicache_sim.scenario import Scenario, resolve
from hicache_sim.sim.compute import ComputeModel

VENDORED = sorted(p.parent.name for p in MODELS_DIR.glob("*/config.json"))

# DeepSeek-V3 config.json: hidden 7168, 128 heads, q_lora_rank 1536, kv_lora_rank 512, qk_rope_head_dim 64,
# qk_nope_head_dim 128, v_head_dim 128, 61 layers, vocab 129280; fp8 (1 byte a parameter).
DSV3_Q = 7168 * 1536 + 1536 + 1536 * 128 * (128 + 64)  # q_a, q_a_layernorm, q_b
DSV3_KV = 7168 * (512 + 64) + 512 + 512 * 128 * (128 + 128)  # kv_a with the rope key, kv_a_layernorm, kv_b
DSV3_ATTENTION = 61 * (DSV3_Q + DSV3_KV + 128 * 128 * 7168)  # and o
DSV3_EMBEDDING = 129280 * 7168
# q_a and kv_a (with the rope key) and their norms are ReplicatedLinear: whole on every rank at any tp.
DSV3_REPLICATED = 61 * (7168 * 1536 + 1536 + 7168 * (512 + 64) + 512)
# Llama-3.1: q and o hidden x hidden, k and v hidden x 8 KV heads x 128.
LLAMA_8B_ATTENTION = 32 * (2 * 4096 * 4096 + 2 * 4096 * 8 * 128)
LLAMA_70B_ATTENTION = 80 * (2 * 8192 * 8192 + 2 * 8192 * 8 * 128)
# Qwen3-8B: 32 q heads x 128 = 4096 = hidden, 8 KV heads, 36 layers, vocab 151936.
QWEN3_8B_ATTENTION = 36 * (2 * 4096 * 4096 + 2 * 4096 * 8 * 128)
QWEN3_8B_EMBEDDING = 151936 * 4096


def scenario(model: str | dict, **hardware) -> Scenario:
    """An instant scenario whose device pool SGLang's memory profile sizes (no device_tokens given)."""
    cache = {"page_size": 64, "host_ratio": 2.0}
    return Scenario.model_validate({**TINY_SCENARIO, "model": model, "cache": cache, "hardware": hardware})


def test_attention_parameters_by_hand():
    """11.41 B for DeepSeek-V3's MLA (config.json and preset alike), 1.34 B / 12.08 B for Llama-3.1-8B / 70B."""
    assert DSV3_ATTENTION == 11_413_547_008
    for name, count in (
        ("deepseek-v3", DSV3_ATTENTION),
        ("llama-3.1-8b", LLAMA_8B_ATTENTION),
        ("llama-3.1-70b", LLAMA_70B_ATTENTION),
        ("qwen3-8b", QWEN3_8B_ATTENTION),
    ):
        assert attention_params(MODELS.get(name)) == count, name
        assert attention_params(model_from_config(str(MODELS_DIR / name / "config.json"))) == count, name


@pytest.mark.parametrize("name", VENDORED)
def test_preset_split_fields_match_its_config(name):
    """What decides a GPU's share under attention DP comes out of the vendored config.json as the preset has it."""
    preset, derived = MODELS.get(name), model_from_config(str(MODELS_DIR / name / "config.json"))
    fields = ("architecture", "vocab_size", "tied_embeddings", "attention_bias", "q_lora_rank")
    assert {k: getattr(derived, k) for k in fields} == {k: getattr(preset, k) for k in fields}
    assert attention_params(derived) == attention_params(preset)
    for tp, attn_dp in ((8, 8), (8, 2), (2, 2)):
        pre, cfg = weight_share(preset, tp, 1, attn_dp), weight_share(derived, tp, 1, attn_dp)
        assert cfg.on_attn_tp == pre.on_attn_tp


def test_every_preset_names_a_class_sglang_loads_and_the_table_reads():
    """A preset without its SGLang class would fall to the default split silently."""
    for name in MODELS.names():
        arch = MODELS.get(name).architecture
        assert arch in WEIGHT_SPLITS.names(), name
    assert set(WEIGHT_SPLITS.names()) <= sglang_architectures()


def test_deepseek_v3_tp8_attn_dp8_on_h200_holds_the_whole_attention():
    """Every GPU holds the whole MLA attention and embedding (12.34 B, fp8: 1 B each), the rest / 8:
    94.67 GB, 10.80 GB more than plain TP 8; the device pool loses the same bytes (70,272 B a token, whole
    pages of 64)."""
    # one mem_fraction_static for both (SGLang's default for plain TP 8 here), so the pools differ by the
    # weights alone; attention DP's own reserve is test_attention_dp_reserve_lowers_the_default_fraction
    plain = resolve(scenario("deepseek-v3", gpu="h200", tp=8, mem_fraction_static=0.811))
    dpa = resolve(scenario("deepseek-v3", gpu="h200", tp=8, attn_dp=8, mem_fraction_static=0.811))
    whole = DSV3_ATTENTION + DSV3_EMBEDDING
    weights = whole + (671e9 - whole) / 8
    assert weights == 94_672_697_792
    assert dpa.memory.weight_bytes == pytest.approx(weights, rel=1e-12)
    # plain TP 8 already holds the replicated down-projections whole
    plain_weights = DSV3_REPLICATED + (671e9 - DSV3_REPLICATED) / 8
    assert plain.memory.weight_bytes == pytest.approx(plain_weights, rel=1e-12)
    assert dpa.memory.weight_bytes - plain.memory.weight_bytes == pytest.approx(9_989_554_176, rel=1e-12)
    pool = dpa.memory.pre_load_free_bytes - weights - dpa.memory.reserved_bytes
    assert dpa.bytes_per_token == 70_272
    assert dpa.device_tokens == int(pool) // 70_272 // 64 * 64 == 355_264
    plain_pool = plain.memory.pre_load_free_bytes - plain_weights - plain.memory.reserved_bytes
    assert plain.device_tokens == int(plain_pool) // 70_272 // 64 * 64  # more tokens where attention is split
    assert plain.device_tokens > 1.35 * dpa.device_tokens
    # At attn_dp 2 (groups of 4 GPUs) the attention and embedding are split four ways, but for the
    # replicated down-projections, whole on each GPU.
    quarter = resolve(scenario("deepseek-v3", gpu="h200", tp=8, attn_dp=2)).memory.weight_bytes
    split = whole - DSV3_REPLICATED
    assert quarter == pytest.approx(DSV3_REPLICATED + split / 4 + (671e9 - whole) / 8, rel=1e-12)


def test_llama_keeps_tp_weights_and_qwen3_does_not_at_tp2_attn_dp2():
    """SGLang's Llama builds its attention and embedding over the whole tp group even under attention DP
    (models/llama.py): 8.03 GB / 2 as at plain TP 2. Qwen3-8B's attention and embedding are over the group
    of tp / attn_dp = 1 GPU (models/qwen3.py, qwen2.py): bf16, 2 B a parameter."""
    llama = resolve(scenario("llama-3.1-8b", gpu="h200", tp=2, attn_dp=2)).memory.weight_bytes
    assert llama == resolve(scenario("llama-3.1-8b", gpu="h200", tp=2)).memory.weight_bytes == 8.03 * 1e9 * 2 / 2
    qwen = resolve(scenario("qwen3-8b", gpu="h200", tp=2, attn_dp=2, mem_fraction_static=0.9))
    whole = QWEN3_8B_ATTENTION + QWEN3_8B_EMBEDDING
    assert qwen.memory.weight_bytes == pytest.approx((whole + (8.2e9 - whole) / 2) * 2, rel=1e-12)
    plain = resolve(scenario("qwen3-8b", gpu="h200", tp=2, mem_fraction_static=0.9))
    moved = qwen.memory.weight_bytes - plain.memory.weight_bytes
    assert plain.memory.kv_pool_bytes - qwen.memory.kv_pool_bytes == pytest.approx(moved, rel=1e-9)


@pytest.mark.parametrize("name", sorted(MODELS.names()))
@pytest.mark.parametrize(("tp", "pp"), [(1, 1), (2, 1), (8, 1), (4, 2)])
def test_attn_dp_1_is_plain_tp_float_for_float(name, tp, pp):
    """Without attention DP the share is params / (tp x pp), float for float (results stay byte-identical),
    except for the parts every rank holds whole at tp > 1 (MLA's down-projections)."""
    m = MODELS.get(name)
    per = WEIGHT_BYTES[m.weights_dtype]
    whole = replicated_params(m) if tp > 1 else 0
    if not whole:
        assert weight_share(m, tp, pp).bytes == m.params_b * 1e9 * per / (tp * pp)
    else:
        expected = (whole + (m.params_b * 1e9 - whole) / tp) / pp * per
        assert weight_share(m, tp, pp).bytes == pytest.approx(expected, rel=1e-12)


def test_mla_down_projections_are_whole_on_every_rank():
    """DeepSeek-V3's q_a / kv_a (ReplicatedLinear, models/deepseek_v2.py) are 0.92 B parameters, on every
    rank at any tp: at tp 8 in fp8 0.81 GB per GPU more than params / 8; an MHA model has none."""
    m = MODELS.get("deepseek-v3")
    assert replicated_params(m) == DSV3_REPLICATED == 923_592_704
    extra = weight_share(m, 8, 1).bytes - 671e9 / 8
    assert extra == pytest.approx(DSV3_REPLICATED * 7 / 8, rel=1e-9)
    assert replicated_params(MODELS.get("llama-3.1-70b")) == 0
    assert weight_share(m, 1, 1).bytes == 671e9  # one rank holds everything once


def test_compute_model_reads_the_weights_a_gpu_holds():
    """The per-step weight reads (lockstep or not) are the GPU's share: DeepSeek-V3 decode at tp 8 /
    attn_dp 8 reads the whole attention every step."""
    r = resolve(scenario({"preset": "deepseek-v3"}, gpu="h200", tp=8, attn_dp=8))
    params = ComputeModel.from_resolved(r).params
    assert params.weight_bytes == r.memory.weight_bytes == pytest.approx(94_672_697_792, rel=1e-12)


def test_no_pool_message_says_the_attention_group_holds_its_share():
    """mem_fraction_static 0.62 leaves DeepSeek-V3 a pool at plain TP 8 and none at attn_dp 8 on an H200;
    the message shows the split, not params / ranks."""
    assert resolve(scenario("deepseek-v3", gpu="h200", tp=8, mem_fraction_static=0.62)).device_tokens > 0
    with pytest.raises(
        ConfigError, match=r"88\.17 GiB of fp8 weights per rank \(0\.92 B on every rank \+ 11\.42 B attention-group"
    ):
        resolve(scenario("deepseek-v3", gpu="h200", tp=8, attn_dp=8, mem_fraction_static=0.62))


def test_a_model_without_a_known_class_takes_the_default_split():
    """A model typed in the scenario (no class): attention over the attention group, embedding and head
    over tp; a count above its params_b is capped there (every parameter on the group)."""
    typed = {"num_layers": 4, "params_b": 1.0, "q_heads": 16, "num_kv_heads": 4, "head_dim": 128}
    model = Scenario.model_validate({**TINY_SCENARIO, "model": typed}).model.resolve()
    assert split_of(model) is DEFAULT_SPLIT and (DEFAULT_SPLIT.attention, DEFAULT_SPLIT.embedding) == (ATTN_TP, TP)
    attention = 4 * (2 * 2048 * 2048 + 2 * 2048 * 4 * 128)
    assert weight_share(model, 4, 1, 2).bytes == pytest.approx((attention / 2 + (1e9 - attention) / 4) * 2)
    tiny = ModelPreset("tiny", 4, 4, 128, 16, 0.01, 0.01, hidden_size=2048)
    share = weight_share(tiny, 4, 1, 4)
    assert (share.on_attn_tp, share.on_tp, share.bytes) == (0.01e9, 0.0, 0.01e9 * 2)


SMALL = {
    "hidden_size": 1024,
    "intermediate_size": 4096,
    "num_hidden_layers": 4,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "vocab_size": 1000,
    "max_position_embeddings": 4096,
    "torch_dtype": "bfloat16",
}


@pytest.mark.parametrize(
    ("extra", "bias"),
    [
        ({"architectures": ["LlamaForCausalLM"]}, False),
        ({"architectures": ["LlamaForCausalLM"], "attention_bias": True}, True),
        ({"architectures": ["Qwen2ForCausalLM"]}, True),  # models/qwen2.py: bias=True whatever the config
        (
            {"architectures": ["Qwen2MoeForCausalLM"], "qkv_bias": False, "num_experts": 4, "num_experts_per_tok": 2},
            False,
        ),
    ],
)
def test_qkv_biases_as_sglangs_class_builds_them(tmp_path, extra, bias):
    """q (16 x 64) and k, v (4 x 64 each) biases, 1,536 a layer, where the class has them: in the
    attention count and, for a dense model, in its parameters (embedding and head, 4 layers of attention,
    MLP and two norms, the final norm)."""
    (tmp_path / "config.json").write_text(json.dumps({**SMALL, **extra}))
    m = model_from_config(str(tmp_path))
    per_layer = 2 * 1024 * 1024 + 2 * 1024 * 256 + (1024 + 2 * 256 if bias else 0)
    assert (m.attention_bias, attention_params(m)) == (bias, 4 * per_layer)
    if not m.num_experts:
        dense = 2 * 1000 * 1024 + 4 * (per_layer + 3 * 1024 * 4096 + 2 * 1024) + 1024
        assert m.params_b * 1e9 == pytest.approx(dense, rel=1e-12)


def test_a_tied_head_is_the_embeddings_table():
    """One vocab x hidden table for a tied model: over the attention group with Qwen3's embedding, no second
    table over tp."""
    qwen = MODELS.get("qwen3-8b")
    tied = ModelPreset(**{**qwen.__dict__, "tied_embeddings": True, "params_b": qwen.params_b - 0.622329856})
    assert (
        weight_share(tied, 2, 1, 2).on_attn_tp
        == weight_share(qwen, 2, 1, 2).on_attn_tp
        == QWEN3_8B_ATTENTION + QWEN3_8B_EMBEDDING
    )
    assert weight_share(tied, 2, 1, 2).on_tp == pytest.approx(weight_share(qwen, 2, 1, 2).on_tp - QWEN3_8B_EMBEDDING)


def test_attention_dp_reserve_lowers_the_default_fraction():
    """SGLang 0.5.23 keeps 3 MiB per decode-graph batch size and attention-DP group back for padding, 1.5
    more above a max_bs of 300 (arg_groups/memory_hook.py 370-378), before the 10 GiB floor: DeepSeek-V3
    at tp 8 on an H200 (143,771 MiB, graph max_bs 512, this scenario's 16,384-token prefill budget)."""
    base = 512 + 16384 * 1.5 + 512 * 2 + 8 / 8 * 1024
    for attn_dp, extra in ((1, 0.0), (2, 512 * 2 * 4.5), (8, 512 * 8 * 4.5)):
        r = resolve(scenario("deepseek-v3", gpu="h200", tp=8, attn_dp=attn_dp))
        assert r.cuda_graph_max_bs == 512
        assert r.memory.mem_fraction_static == round((143_771 - base - extra) / 143_771, 3), attn_dp
    small = resolve(scenario("llama-3.1-8b", gpu="h200", tp=2, attn_dp=2))  # max_bs 256: 3 MiB only
    assert small.memory.mem_fraction_static == round(
        (143_771 - (512 + 16384 * 1.5 + 256 * 2 + 256) - 256 * 2 * 3) / 143_771, 3
    )


def test_a_class_not_built_for_attention_dp_is_named():
    """Llama builds its attention over the whole tp group (models/llama.py): under attention DP resolve
    says so in one warning; Qwen3, built for it, gets none."""
    llama = resolve(scenario("llama-3.1-8b", gpu="h200", tp=2, attn_dp=2))
    assert any("LlamaForCausalLM builds its attention over the whole tp group" in w for w in llama.warnings)
    assert not any(
        "builds its attention" in w for w in resolve(scenario("qwen3-8b", gpu="h200", tp=2, attn_dp=2)).warnings
    )
    assert not any("builds its attention" in w for w in resolve(scenario("llama-3.1-8b", gpu="h200", tp=2)).warnings)


def test_attention_dp_under_pipeline_stages_says_it_steps_apart():
    """The lockstep is modelled at pp 1 (sim/dp.py): a timed run at pp > 1 says its groups step on their own."""
    timed = scenario("qwen3-8b", gpu="h200", tp=2, pp=2, attn_dp=2).model_copy(update={"mode": "timed"})
    assert any("step on their own here" in w for w in resolve(timed).warnings)
    flat = scenario("qwen3-8b", gpu="h200", tp=2, attn_dp=2).model_copy(update={"mode": "timed"})
    assert not any("step on their own here" in w for w in resolve(flat).warnings)
