"""Speculative decoding's draft KV (``model.speculative``, ``hardware/speculative.py``): the device pool
holds fewer tokens by the draft's share, HiCache mirrors the draft on the host (packed into the KV pool
for an MTP head, a pool of its own otherwise), the pre-flight counts it, and the launch flags are read and
written back. Every figure is derived by hand from SGLang 0.5.23's sizing
(docs/reference/sglang-speculative.md)."""

from __future__ import annotations

import json

import pytest
from conftest import assert_user_error, invoke

from hicache_sim.core import ConfigError
from hicache_sim.hardware.hfconfig import MODELS_DIR, model_from_config
from hicache_sim.hardware.presets import MODELS
from hicache_sim.hardware.speculative import SPEC_ALGORITHMS
from hicache_sim.scenario import build_scenario, load_scenario, resolve, scenario_dump
from hicache_sim.scenario.preflight import node_check
from hicache_sim.sglang import from_command, to_command
from hicache_sim.sglang.flags import parse_command

DSV3 = "python -m sglang.launch_server --model-path /nfs/DeepSeek-V3 --tp-size 8 --page-size 64"
LLAMA = "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct"

# DeepSeek-V3 at TP 8, bf16 KV: MLA's one latent of 512 + 64 per layer, 61 layers, replicated on every rank.
DSV3_BPT = (512 + 64) * 61 * 2  # 70272
# SGLang adds int(cell x draft layers / layers) for its one MTP layer: one target layer's 1152 bytes.
DSV3_DRAFT = int(DSV3_BPT * 1 / 61)  # 1152
# Its NextN module's parameters (config.json), resident when SGLang profiles the memory: the MLA attention
# (q low-rank pair with its norm, kv_a, its norm, kv_b, o), one MoE layer (256 routed experts of 2048,
# router, one shared expert), eh_proj (2h -> h), four norms, and its own embedding, head and final norm.
H, VOCAB = 7168, 129280
DSV3_MTP_PARAMS = (
    (H * 1536 + 1536 + 1536 * 128 * 192) + H * 576 + 512 + 512 * 128 * 256 + 128 * 128 * H
    + (256 * 3 * H * 2048 + H * 256 + 3 * H * 2048)
    + 2 * H * H + 4 * H
    + 2 * VOCAB * H + H
)  # fmt: skip
# Llama-3.1-8B at TP 1: K and V of 8 heads of 128 over 32 layers, bf16.
LLAMA_BPT = 2 * 32 * 8 * 128 * 2  # 131072
# Its EAGLE3 head (one Llama layer, 8 KV heads of 128): the device cell pays one *target* layer, SGLang's
# assumption; the host pool of its own holds the head's real row.
EAGLE3_HEAD = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "num_hidden_layers": 1,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "hidden_size": 4096,
    "head_dim": 128,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "draft_vocab_size": 32000,
    "torch_dtype": "bfloat16",
}
EAGLE3_HOST = 2 * 1 * 8 * 128 * 2  # 4096
# Its weights (bf16): one layer's q, k, v, o and MLP, two norms, the embedding, a head over its own 32000
# tokens, the final norm.
EAGLE3_PARAMS = (
    (4096 * 4096 + 2 * 4096 * 1024 + 4096 * 4096) + 3 * 4096 * 14336 + 2 * 4096
    + 128256 * 4096 + 32000 * 4096 + 4096
)  # fmt: skip


def _aligned(tokens: int, page: int) -> int:
    """SGLang's host pool alignment (2026): size // page + 1 pages."""
    return (tokens // page + 1) * page


def _draft_folder(tmp_path, config: dict):
    folder = tmp_path / "draft"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return folder


#: Per algorithm, for DeepSeek-V3 at TP 8 without a draft path: does the target's cell pay for draft KV,
#: and is the draft packed into the host KV pool (a new algorithm without its row fails).
EXPECTED = {
    "eagle": (DSV3_DRAFT, True),
    "nextn": (DSV3_DRAFT, True),
    "eagle3": None,  # needs a draft model path
    "standalone": None,  # needs a draft model path
    "ngram": (0, False),  # no draft model, no draft KV
}


def test_every_algorithm_is_covered():
    assert set(SPEC_ALGORITHMS.names()) == set(EXPECTED)
    for name, expected in EXPECTED.items():
        data = {"name": "x", "model": {"preset": "deepseek-v3", "speculative": {"algorithm": name}}}
        data["hardware"] = {"gpu": "h200", "tp": 8}
        if expected is None:
            with pytest.raises(ConfigError, match="needs a draft model"):
                resolve(build_scenario(data, "x"))
            continue
        r = resolve(build_scenario(data, "x"))
        assert (r.draft.device_bpt, r.draft.packed) == expected, name


def test_deepseek_presets_carry_their_mtp_layer_as_the_published_config():
    for name in ("deepseek-v3", "deepseek-r1"):
        assert MODELS.get(name).nextn_layers == 1
        assert model_from_config(str(MODELS_DIR / name / "config.json")).nextn_layers == 1
    assert model_from_config(str(MODELS_DIR / "llama-3.1-8b" / "config.json")).nextn_layers == 0


def test_nextn_device_pool_holds_fewer_tokens_by_the_draft_share():
    """The NextN module's weights (fp8, split over the 8 ranks) are in memory when SGLang profiles it, and
    the pool divides what is left by the target's cell plus one MTP layer."""
    plain = resolve(from_command(DSV3).scenario)
    spec = resolve(from_command(DSV3 + " --speculative-algorithm NEXTN").scenario)
    assert spec.bytes_per_token == plain.bytes_per_token == DSV3_BPT
    preset = MODELS.get("deepseek-v3").nextn_params_b * 1e9  # the count rounded as the presets round
    assert model_from_config(str(MODELS_DIR / "deepseek-v3")).nextn_params_b * 1e9 == DSV3_MTP_PARAMS
    assert abs(preset - DSV3_MTP_PARAMS) <= 0.005e9
    assert spec.memory.weight_bytes - plain.memory.weight_bytes == pytest.approx(preset * 1 / 8)
    assert spec.memory.kv_pool_bytes == pytest.approx(plain.memory.kv_pool_bytes - preset / 8)
    pool = int(spec.memory.kv_pool_bytes)
    assert plain.device_tokens == int(plain.memory.kv_pool_bytes) // DSV3_BPT // 64 * 64
    assert spec.device_tokens == pool // (DSV3_BPT + DSV3_DRAFT) // 64 * 64
    assert spec.device_tokens < plain.device_tokens


def test_nextn_preflight_counts_the_packed_draft_host_rows():
    """--hicache-ratio 2: the host pool keeps its token count per device token, each row wider by the MTP
    layer; --hicache-size 128: the same bytes buy fewer tokens."""
    line = DSV3 + " --enable-hierarchical-cache --speculative-algorithm NEXTN"
    r = resolve(from_command(line + " --hicache-ratio 2", node_memory_gib=1800).scenario)
    device = int(r.memory.kv_pool_bytes) // (DSV3_BPT + DSV3_DRAFT) // 64 * 64
    host = _aligned(device * 2, 64)
    node = node_check(r)
    assert r.host_tokens == host
    assert [(p.name, p.bytes) for p in node.pools] == [("KV+MTP draft", host * (DSV3_BPT + DSV3_DRAFT))]
    assert node.pinned_bytes == 8 * host * (DSV3_BPT + DSV3_DRAFT)
    sized = resolve(from_command(line + " --hicache-size 128").scenario)
    assert sized.host_tokens == _aligned(128 * 10**9 // (DSV3_BPT + DSV3_DRAFT), 64)


def test_eagle3_line_with_a_local_draft_config(tmp_path):
    """A local EAGLE3 head: the target's cell pays one target layer; the head's own host pool (one slot per
    KV host slot) comes beside --hicache-size, and tips a node that held the KV pool alone."""
    folder = _draft_folder(tmp_path, EAGLE3_HEAD)
    base = LLAMA + " --enable-hierarchical-cache --hicache-size 100"
    line = f"{base} --speculative-algorithm EAGLE3 --speculative-draft-model-path {folder}"
    plain = resolve(from_command(base, node_memory_gib=105).scenario)
    conv = from_command(line, node_memory_gib=105)
    r = resolve(conv.scenario)
    assert conv.scenario.model.speculative.config == str(folder / "config.json")
    assert r.memory.weight_bytes - resolve(
        conv.scenario.model_copy(update={"model": plain.scenario.model})
    ).memory.weight_bytes == pytest.approx(EAGLE3_PARAMS * 2)
    pool = int(r.memory.kv_pool_bytes)
    assert r.device_tokens == pool // (LLAMA_BPT + LLAMA_BPT // 32)
    host = _aligned(100 * 10**9 // LLAMA_BPT, 1)
    assert r.host_tokens == host
    node = node_check(r)
    assert [(p.name, p.bytes) for p in node.pools] == [("KV", host * LLAMA_BPT), ("draft", host * EAGLE3_HOST)]
    assert not node_check(plain).overcommits and node.overcommits
    assert any("draft" in line for line in node.lines())


def test_eagle_with_an_mtp_draft_folder_is_packed_and_an_eagle_head_is_not(tmp_path):
    mtp = json.loads((MODELS_DIR / "deepseek-v3" / "config.json").read_text())
    folder = _draft_folder(tmp_path, mtp)
    r = resolve(from_command(f"{DSV3} --speculative-algorithm EAGLE --speculative-draft-model-path {folder}").scenario)
    assert (r.draft.layers, r.draft.packed, r.draft.host_bpt) == (1, True, DSV3_DRAFT)
    head = {**EAGLE3_HEAD, "architectures": ["LlamaForCausalLMEagle"]}
    (folder / "config.json").write_text(json.dumps(head))
    r = resolve(from_command(f"{LLAMA} --speculative-algorithm EAGLE --speculative-draft-model-path {folder}").scenario)
    assert (r.draft.packed, r.draft.own_pool_bpt) == (False, EAGLE3_HOST)


def test_a_checkpoint_sglang_reads_as_an_mtp_draft_is_one_packed_layer():
    """Read as a draft, SGLang 0.5.23 rewrites a Qwen3-MoE checkpoint to its MTP module with
    num_nextn_predict_layers = 1 (configs/model_config.py 1155-1157), whatever its file says: one draft
    layer, packed for EAGLE, the cell one target layer wider: Qwen3-30B-A3B's 48 layers x 4 KV heads x 128
    x K and V x 2 bytes = 98304 B a token, + 98304 / 48 = 2048. It was read as a 48-layer draft with a host
    pool of its own (the cell twice as wide)."""
    data = {
        "name": "x",
        "model": {"preset": "qwen3-30b-a3b", "speculative": {"algorithm": "eagle", "config": "builtin:qwen3-30b-a3b"}},
    }
    draft = resolve(build_scenario(data, "x")).draft
    assert (draft.layers, draft.packed, draft.device_bpt, draft.host_bpt) == (1, True, 2048, 2048)


def test_speculative_decoding_caps_running_requests_at_48_unless_given():
    assert resolve(from_command(DSV3 + " --speculative-algorithm NGRAM").scenario).max_running_requests == 48
    given = from_command(DSV3 + " --speculative-algorithm NEXTN --max-running-requests 64").scenario
    assert resolve(given).max_running_requests == 64


def test_flags_round_trip_through_sglang_args(tmp_path):
    folder = _draft_folder(tmp_path, EAGLE3_HEAD)
    for line, flags in (
        (DSV3 + " --speculative-algorithm nextn", {"--speculative-algorithm": "NEXTN"}),
        (
            f"{LLAMA} --speculative-algorithm eagle3 --speculative-draft-model {folder}",
            {"--speculative-algorithm": "EAGLE3", "--speculative-draft-model-path": str(folder)},
        ),
    ):
        conv = from_command(line)
        assert any("time effects" in n for n in conv.notes)
        tokens, _ = to_command(conv.scenario)
        args = parse_command(tokens).args  # every value as SGLang 0.5.23's parser takes it
        assert {k: args.get(k) for k in flags} == flags


def test_without_speculative_decoding_nothing_changes():
    """Default none: no draft, the written scenario without the new keys (committed results stay)."""
    sc = build_scenario({"name": "x", "model": "deepseek-v3", "hardware": {"tp": 8}}, "x")
    assert resolve(sc).draft.host_bpt == 0
    assert not {"speculative", "nextn_layers"} & set(scenario_dump(sc)["model"])


def test_bad_speculative_input_is_one_line(tmp_path):
    out = tmp_path / "s.yaml"
    result = invoke("from-sglang", "--out", out, "--", *f"{DSV3} --speculative-algorithm MEDUSA".split())
    assert_user_error(result, "--speculative-algorithm MEDUSA", "SGLang 0.5.23 refuses it")
    assert not out.exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    line = f"{LLAMA} --speculative-algorithm EAGLE3 --speculative-draft-model-path {empty}"
    assert_user_error(invoke("from-sglang", "--", *line.split()), str(empty), "not a local folder holding config.json")
    line = f"{DSV3} --speculative-algorithm DFLASH"
    assert_user_error(invoke("from-sglang", "--", *line.split()), "DFLASH", "not modelled")
    scenario = tmp_path / "bad.yaml"
    scenario.write_text("name: bad\nmodel: {preset: deepseek-v3, speculative: {algorithm: medusa}}\n")
    assert_user_error(invoke("validate", scenario), "model.speculative.algorithm", "eagle")
    (tmp_path / "x").mkdir()
    bad = _draft_folder(tmp_path / "x", {**EAGLE3_HEAD, "num_key_value_heads": "eight"})
    scenario.write_text(
        f"name: bad\nmodel: {{preset: llama-3.1-8b, speculative: {{algorithm: eagle3, config: {bad}}}}}\n"
    )
    assert_user_error(invoke("validate", scenario), "num_key_value_heads")


def test_a_relative_draft_config_is_found_beside_the_scenario_and_is_an_input(tmp_path, monkeypatch):
    """model.speculative.config relative to the scenario file (not the working folder); its content is in
    the result identity like model.config's, so an edited draft config is not taken for a computed point."""
    from hicache_sim.output.identity import input_files
    from hicache_sim.scenario import load_scenario

    _draft_folder(tmp_path, EAGLE3_HEAD)
    path = tmp_path / "s.yaml"
    path.write_text("name: s\nmodel: {preset: llama-3.1-8b, speculative: {algorithm: eagle3, config: draft}}\n")
    monkeypatch.chdir(tmp_path.parent)
    sc = load_scenario(path)
    assert resolve(sc).draft.own_pool_bpt == EAGLE3_HOST
    before = input_files(scenario_dump(sc), tmp_path)["model.speculative.config"]
    (tmp_path / "draft" / "config.json").write_text(json.dumps({**EAGLE3_HEAD, "num_key_value_heads": 4}))
    assert input_files(scenario_dump(load_scenario(path)), tmp_path)["model.speculative.config"] != before


def test_validate_names_the_packed_draft_in_the_host_pool(tmp_path):
    out = tmp_path / "s.yaml"
    line = DSV3 + " --enable-hierarchical-cache --speculative-algorithm NEXTN"
    assert invoke("from-sglang", "--out", out, "--node-memory", 1000, "--", *line.split()).exit_code == 0
    result = invoke("validate", out)
    assert result.exit_code == 0, result.output
    assert "(KV+MTP draft " in result.output
    # the model line's bytes per token are the target's: the draft's share is its own line
    assert "draft: nextn, 1 layer(s), +1152 B/token on the device" in result.output
    assert "packed into the host KV pool's rows" in result.output


def test_an_explicit_model_with_mtp_layers_counts_the_given_module():
    data = {
        "name": "x",
        "model": {
            "num_layers": 32,
            "params_b": 8.0,
            "num_kv_heads": 8,
            "head_dim": 128,
            "q_heads": 32,
            "nextn_layers": 1,
            "nextn_params_b": 0.5,
            "speculative": {"algorithm": "nextn"},
        },
        "hardware": {"gpu": "h200"},
    }
    r = resolve(build_scenario(data, "x"))
    plain = resolve(build_scenario({**data, "model": {**data["model"], "speculative": None}}, "x"))
    assert r.memory.weight_bytes - plain.memory.weight_bytes == pytest.approx(0.5e9 * 2)
    assert (r.draft.device_bpt, r.draft.packed) == (2 * 8 * 128 * 2, True)  # one target layer, packed


def test_an_eagle3_draft_under_attention_dp_is_split_over_its_attention_group(tmp_path):
    """SGLang 0.5.23 runs an EAGLE3 draft whole inside one attention-DP group (legacy_draft_parallel_spec:
    SINGLE_GROUP; speculative/draft_parallel.py), so its weights are split over tp / attn_dp ranks, not tp:
    at tp 4 / attn_dp 2, half of them per GPU where plain TP 4 holds a quarter."""
    _draft_folder(tmp_path, EAGLE3_HEAD)
    path = tmp_path / "s.yaml"
    spec = "speculative: {algorithm: eagle3, config: draft}"
    weights = {}
    for attn_dp in (1, 2):
        path.write_text(
            f"name: s\nmodel: {{preset: qwen3-8b, {spec}}}\nhardware: {{gpu: h200, tp: 4, attn_dp: {attn_dp}}}\n"
        )
        weights[attn_dp] = resolve(load_scenario(path)).draft.weight_bytes
    assert weights[1] == pytest.approx(EAGLE3_PARAMS * 2 / 4, rel=1e-12)
    assert weights[2] == pytest.approx(EAGLE3_PARAMS * 2 / 2, rel=1e-12)


def test_glm_45_runs_its_mtp_layer_as_the_nextn_draft():
    """SGLang serves GLM-4.5 with --speculative-algorithm EAGLE and no draft path (the draft is the target's
    own MTP layer, speculative_hook.py 1120-1150): the preset carries the one layer, its NextN module
    counted as a config.json's would be (the MoE layer, attention with biases, eh_proj, norms, embedding
    and head: 5.54 B)."""
    from hicache_sim.hardware.hfconfig import _mtp_params
    from hicache_sim.hardware.params import attention_params

    m = MODELS.get("glm-4.5")
    attention = attention_params(m) // m.num_layers
    moe = 160 * 3 * 5120 * 1536 + 5120 * 160 + 3 * 5120 * 1536  # experts, router, shared expert
    assert round(_mtp_params(1, 5120, 151552, attention, moe) / 1e9, 2) == m.nextn_params_b
    sc = build_scenario(
        {
            "name": "g",
            "model": {"preset": "glm-4.5", "speculative": {"algorithm": "eagle"}},
            "hardware": {"gpu": "h200", "tp": 8},
        },
        "test",
        [],
    )
    draft = resolve(sc).draft
    assert draft.layers == 1 and draft.packed
    assert draft.weight_bytes == pytest.approx(5.54e9 * 2 / 8)  # bf16 over tp 8


def test_the_no_pool_remedy_counts_the_drafts_weights_at_both_sizes():
    """DeepSeek-V3 NEXTN with attention DP 8 leaves no pool on an H100: the --tp-size remedy states the
    weights per rank, the draft's included, as the no-pool line does, now and at the proposed size."""
    sc = build_scenario(
        {
            "name": "d",
            "model": {"preset": "deepseek-v3", "speculative": {"algorithm": "nextn"}},
            "hardware": {"gpu": "h100", "tp": 8, "attn_dp": 8},
        },
        "test",
        [],
    )
    with pytest.raises(ConfigError) as e:
        resolve(sc)
    message = str(e.value)
    total = message.split(" GiB of fp8 weights per rank")[0].rsplit(" ", 1)[1]
    assert f"weights per rank {total} -> " in message
