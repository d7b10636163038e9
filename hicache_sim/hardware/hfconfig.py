"""A model from its checkpoint's ``config.json``, read as SGLang 0.5.23 reads it.

What SGLang takes from the file (``srt/configs/model_config.py``): the text sub-config of a multimodal
checkpoint (``text_config``, ``llm_config``, ``language_config``, ``thinker_config``); ``head_dim``,
else ``hidden_size // num_attention_heads``; KV heads from the first of ``n_head_kv``, ``num_kv_heads``,
``num_key_value_heads``, ``multi_query_group_num``, ``num_attention_groups`` (``multi_query``: one),
else the attention heads; MLA (one latent of ``kv_lora_rank + qk_rope_head_dim`` per layer) for the
architectures SGLang runs with an MLA pool; the context length from the first of
``max_sequence_length``, ``seq_length``, ``max_seq_len``, ``model_max_length``,
``max_position_embeddings``, times the rope scaling factor unless the scaling keeps an
``original_max_position_embeddings`` or is llama3's (``get_context_length``); the weights dtype from
``quantization_config`` (its ``quant_method``), else ``torch_dtype`` / ``dtype`` (float32 or none:
SGLang runs float16).

Parameters are counted from the dimensions (SGLang loads the weights; it never counts them):
embeddings, LM head unless tied, per layer attention (MHA/GQA: q, k, v, o and the q, k, v biases where
SGLang's class has them, ``QKV_BIAS``; MLA: the q low-rank pair or q, the kv low-rank pair, o; the
formulas in :mod:`hicache_sim.hardware.params`), norms, and the MLP: dense ``3 x hidden x
intermediate``, a MoE layer's routed experts, router and shared experts. Other biases are left out (a
few millionths of the total). The architecture, vocabulary and tying are kept: they decide what a GPU
holds under attention DP (:mod:`hicache_sim.hardware.params`). The
multi-token-prediction layers a checkpoint may carry (``num_nextn_predict_layers``, kept as
``nextn_layers``, their NextN module's parameters as ``nextn_params_b``) are not loaded without
speculative decoding, and are not in ``params_b``. Weight bytes are
parameters x the dtype's bytes, the rule the presets use (an fp8 checkpoint's bf16 embeddings and fp32
block scales are not told apart).

A speculative draft's config.json (``--speculative-draft-model-path``) is read by ``draft_from_config``
for what its KV pools need: its KV layers (SGLang's ``eagle_draft_num_layers``: the draft's
``num_nextn_predict_layers`` when it has the key, else its ``num_hidden_layers``;
``model_executor/model_runner_components/spec_aux_hidden_state.py`` ``_resolve_eagle_aux_hidden_state``),
whether it is an MTP head (the key non-zero: HiCache packs its layers into the target's host pool), and
its attention shape, read as for a target.

Refused, one line naming the file and key: a missing or malformed key, an architecture SGLang 0.5.23
does not load (``data/sglang/architectures-0.5.23.json``), a quantisation other than fp8, and the
layouts the simulator has no pool for (sliding-window or linear-attention hybrids, the DeepSeek
sparse-attention indexer, MoE layers other than a dense prefix).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from .params import mha_attention_params, mla_attention_params
from .presets import ModelPreset

SGLANG_VERSION = "0.5.23"
_DATA = Path(__file__).resolve().parent.parent / "data"
MODELS_DIR = _DATA / "models"

# Architectures SGLang 0.5.23 gives an MLA KV pool whose cell is (kv_lora_rank + qk_rope_head_dim) x
# layers (model_config.py _derive_model_shapes; DeepSeek V3.2's indexer and Longcat's doubled attention
# layers are refused below).
MLA_ARCHITECTURES = frozenset(
    {
        "DeepseekV2ForCausalLM",
        "DeepseekV3ForCausalLM",
        "Glm4MoeLiteForCausalLM",
        "MistralLarge3ForCausalLM",
        "KimiK25ForConditionalGeneration",
        "KimiVLForConditionalGeneration",
        "GigaChat35ForCausalLM",
        "SarvamMLAForCausalLM",
        "MiniCPM3ForCausalLM",
        "DeepseekVL2ForCausalLM",
    }
)
TEXT_CONFIG_KEYS = ("text_config", "llm_config", "language_config", "thinker_config")
KV_HEAD_KEYS = ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num", "num_attention_groups")
CONTEXT_KEYS = ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length", "max_position_embeddings")
CONTEXT_DEFAULT = 2048
TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp16", None: "fp16"}
EXPERT_COUNT_KEYS = ("n_routed_experts", "num_experts", "num_local_experts")
# The multi-token-prediction layers a checkpoint carries (SGLang ModelConfig.num_nextn_predict_layers).
NEXTN_KEY = "num_nextn_predict_layers"
#: Checkpoints SGLang 0.5.23 reads as a one-layer MTP draft whatever their file says: read as a draft, its
#: ``ModelConfig._config_draft_model`` renames the class to its MTP module and sets ``num_nextn_predict_layers
#: = 1`` (configs/model_config.py 1072-1077 Glm5Next, 1094-1096 MiMo-V2, 1134-1136 Qwen3-Next, 1139-1148
#: Qwen4-Exp, 1155-1157 Qwen3-MoE, 1159-1181 Qwen3.5 / InternS2, 1183-1188 EXAONE-MoE, 1190-1203 Nemotron-H,
#: 1205-1211 HY-V3 / V4; DeepSeek-V4's, 1061, only for some algorithms, is left out).
DRAFT_MTP_REWRITES = frozenset(
    {
        "Glm5NextForConditionalGeneration",
        "MiMoV2ForCausalLM",
        "MiMoV2FlashForCausalLM",
        "Qwen3NextForCausalLM",
        "Qwen4ExpForConditionalGeneration",
        "Qwen3MoeForCausalLM",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
        "Qwen3_5ForCausalLM",
        "Qwen3_5MoeForCausalLM",
        "InternS2PreviewForConditionalGeneration",
        "InternS2MobiusForConditionalGeneration",
        "ExaoneMoEForCausalLM",
        "ExaoneMoeForCausalLM",
        "NemotronH_Omni_Reasoning_V3",
        "NemotronHForCausalLM",
        "NemotronHPuzzleForCausalLM",
        "HYV3ForCausalLM",
        "HYV4ForCausalLM",
    }
)


class ModelConfigError(ValueError):
    """A config.json the simulator cannot read as SGLang would: names the file and the key."""


def _fp8_compressed(q: dict) -> bool:
    groups = q.get("config_groups") or {}
    weights = [g.get("weights") or {} for g in groups.values() if isinstance(g, dict)]
    return bool(weights) and all(w.get("num_bits") == 8 and w.get("type") == "float" for w in weights)


# quantization_config.quant_method -> does this config store fp8 weights (SGLang's fp8 linear methods).
# Any other method (int4/int8, fp4, awq, gptq, ...) is refused: the simulator has bf16, fp16 and fp8.
QUANT_METHODS: dict[str, Callable[[dict], bool]] = {
    "fp8": lambda q: True,
    "fbgemm_fp8": lambda q: True,
    "w8a8_fp8": lambda q: True,
    "modelopt": lambda q: str(q.get("quant_algo", "")).upper() == "FP8",
    "compressed-tensors": _fp8_compressed,
}

# Layouts with pools beside (or instead of) one full-attention KV pool: (key, test on its value, why).
UNMODELLED: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    ("index_topk", lambda v: v is not None, "DeepSeek sparse attention keeps an indexer cache per token"),
    (
        "layer_types",
        lambda v: isinstance(v, list) and any(t != "full_attention" for t in v),
        "sliding-window or linear-attention layers keep pools of their own",
    ),
    ("full_attention_interval", lambda v: v is not None, "linear-attention layers keep state pools of their own"),
    ("sliding_window_pattern", lambda v: v is not None, "sliding-window layers keep a pool of their own"),
    ("attn_type_list", lambda v: isinstance(v, list) and any(v), "linear-attention layers keep state pools"),
    ("use_sliding_window", lambda v: v is True, "sliding-window layers keep a pool of their own"),
    ("mlp_only_layers", lambda v: bool(v), "dense layers between MoE layers are not modelled (only a dense prefix)"),
    ("decoder_sparse_step", lambda v: v not in (None, 1), "MoE on every n-th layer is not modelled"),
    ("moe_layer_freq", lambda v: v not in (None, 1), "MoE on every n-th layer is not modelled"),
)


@lru_cache(maxsize=1)
def sglang_architectures() -> frozenset[str]:
    """Architectures SGLang 0.5.23 registers (``tools/extract_sglang_architectures.py``)."""
    data = json.loads((_DATA / "sglang" / f"architectures-{SGLANG_VERSION}.json").read_text())
    return frozenset(data["architectures"])


def config_path(value: str) -> str:
    """A scenario's ``model.config``: ``builtin:NAME`` is the config.json vendored under
    data/models/NAME/; anything else a path (a relative one was made relative to the scenario file when
    the scenario was read)."""
    if value.startswith("builtin:"):
        return str(MODELS_DIR / value.removeprefix("builtin:") / "config.json")
    return value


class _Reader:
    """Typed access to one config (and its text sub-config), every error naming file and key."""

    def __init__(self, path: str, top: dict, text: dict, where: str) -> None:
        self.path, self.top, self.text, self.where = path, top, text, where

    def fail(self, key: str, what: str) -> ModelConfigError:
        return ModelConfigError(f"{self.path}: {self.where}{key}: {what}")

    def get(self, key: str, default: Any = None) -> Any:
        return self.text.get(key, default)

    def int(self, key: str, default: int | None = None, low: int = 1) -> int:
        v = self.text.get(key)
        if v is None:
            if default is None:
                raise self.fail(key, "missing; expected an integer")
            return default
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise self.fail(key, f"expected an integer >= {low}, got {v!r}")
        return v

    def first_int(self, keys: tuple[str, ...]) -> int | None:
        for k in keys:
            if self.text.get(k) is not None:
                return self.int(k)
        return None


def _open(path: str) -> dict:
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelConfigError(f"{p}: config.json not found") from None
    except OSError as e:
        raise ModelConfigError(f"{p}: cannot read ({(e.strerror or type(e).__name__).lower()})") from None
    except UnicodeDecodeError as e:
        raise ModelConfigError(f"{p}: not UTF-8 text (byte {e.start}); expected a config.json") from None
    except json.JSONDecodeError as e:
        raise ModelConfigError(f"{p}: line {e.lineno}: not JSON ({e.msg}); expected a config.json") from None
    if not isinstance(data, dict):
        raise ModelConfigError(f"{p}: expected a JSON object (a checkpoint's config.json)")
    return data


def _reader(path: str, data: dict) -> _Reader:
    archs = data.get("architectures")
    if not isinstance(archs, list) or not archs or not all(isinstance(a, str) for a in archs):
        raise ModelConfigError(f"{path}: architectures: missing; expected the list SGLang picks the model class from")
    unknown = [a for a in archs if a not in sglang_architectures()]
    if unknown:
        raise ModelConfigError(
            f"{path}: architectures: {unknown[0]!r} is not a model SGLang {SGLANG_VERSION} loads "
            "(hicache_sim/data/sglang/architectures-0.5.23.json lists those it does)"
        )
    for key in TEXT_CONFIG_KEYS:
        sub = data.get(key)
        if isinstance(sub, dict):
            return _Reader(path, data, sub, f"{key}.")
    return _Reader(path, data, data, "")


def _check_modelled(r: _Reader) -> None:
    for key, applies, why in UNMODELLED:
        if applies(r.get(key)):
            raise r.fail(key, f"{r.get(key)!r}: {why}; the simulator models one full-attention KV pool")


def weights_dtype(r: _Reader) -> str:
    """bf16 / fp16 / fp8: how the checkpoint stores its linear weights (``quantization_config`` first)."""
    q = r.top.get("quantization_config") or r.top.get("compression_config")
    if q is not None:
        method = q.get("quant_method") if isinstance(q, dict) else None
        check = QUANT_METHODS.get(method) if isinstance(method, str) else None
        if check is None or not check(q):
            raise ModelConfigError(
                f"{r.path}: quantization_config.quant_method: {method!r} is not an fp8 checkpoint; the simulator "
                f"sizes bf16, fp16 and fp8 weights (fp8 methods read: {', '.join(QUANT_METHODS)})"
            )
        return "fp8"
    dtype = r.top.get("torch_dtype", r.top.get("dtype"))
    if not (dtype is None or isinstance(dtype, str)) or dtype not in TORCH_DTYPES:
        raise ModelConfigError(f"{r.path}: torch_dtype: {dtype!r}; expected one of bfloat16, float16, float32")
    return TORCH_DTYPES[dtype]


def context_length(r: _Reader) -> int:
    """SGLang's ``get_context_length``: the first length key, times a rope factor that extends it."""
    scaling = r.get("rope_scaling")
    factor = 1
    extends = isinstance(scaling, dict) and "original_max_position_embeddings" not in scaling
    if extends and scaling.get("rope_type") != "llama3":
        factor = scaling.get("factor", 1)
    for key in CONTEXT_KEYS:
        if r.get(key) is not None:
            return int(factor * r.int(key))
    return CONTEXT_DEFAULT


# Whether SGLang's class for an architecture gives the q, k and v projections biases: Qwen2 always
# (models/qwen2.py QKVParallelLinear bias=True), Qwen2-MoE by config.json qkv_bias (default true,
# models/qwen2_moe.py 1002), the others by attention_bias (llama.py, qwen3.py, qwen3_moe.py, glm4_moe.py).
QKV_BIAS: dict[str, Callable[[_Reader], bool]] = {
    "Qwen2ForCausalLM": lambda r: True,
    "Qwen2MoeForCausalLM": lambda r: bool(r.get("qkv_bias", True)),
}


def _qkv_bias(r: _Reader) -> bool:
    return bool(r.get("attention_bias", False))


def _attention(r: _Reader, arch: str, hidden: int, heads: int) -> dict[str, Any]:
    """Attention shape (KV bytes), the fields that count its parameters, and per-layer attention
    parameters (:mod:`hicache_sim.hardware.params`)."""
    if arch in MLA_ARCHITECTURES:
        lora, rope = r.int("kv_lora_rank"), r.int("qk_rope_head_dim", low=0)
        nope, v = r.int("qk_nope_head_dim", low=0), r.int("v_head_dim")
        q_lora = r.get("q_lora_rank") or 0
        return dict(
            attention="mla",
            num_kv_heads=1,
            head_dim=nope + rope,
            kv_lora_rank=lora,
            qk_rope_head_dim=rope,
            q_lora_rank=q_lora,
            v_head_dim=v,
            params=mla_attention_params(hidden, heads, q_lora, lora, rope, nope, v),
        )
    head_dim = r.get("head_dim") or hidden // heads
    v_dim = r.get("v_head_dim") or head_dim
    if v_dim != head_dim:
        raise r.fail("v_head_dim", f"{v_dim} differs from head_dim {head_dim}; the simulator's K and V are one width")
    kv = 1 if r.get("multi_query") else (r.first_int(KV_HEAD_KEYS) or heads)
    bias = QKV_BIAS.get(arch, _qkv_bias)(r)
    params = mha_attention_params(hidden, heads, kv, head_dim, bias)
    return dict(attention="mha", num_kv_heads=kv, head_dim=head_dim, attention_bias=bias, params=params)


def _moe(r: _Reader, hidden: int, layers: int) -> dict[str, Any]:
    """Expert fields and MLP parameters of every layer (dense prefix, then MoE layers)."""
    experts = r.first_int(EXPERT_COUNT_KEYS) or 0
    dense_width = r.int("intermediate_size") if not experts or r.get("first_k_dense_replace") else 0
    if not experts:
        return dict(mlp=layers * 3 * hidden * dense_width, routed=0.0, fields={}, layer_mlp=3 * hidden * dense_width)
    top_k = r.int("num_experts_per_tok")
    width = r.int("moe_intermediate_size") if r.get("moe_intermediate_size") is not None else r.int("intermediate_size")
    dense = r.int("first_k_dense_replace", default=0, low=0)
    shared = r.int("n_shared_experts", default=0, low=0)
    shared_width = shared * width or r.int("shared_expert_intermediate_size", default=0, low=0)
    moe_layers = layers - dense
    routed = moe_layers * experts * 3 * hidden * width
    per_moe_layer = (
        hidden * experts + 3 * hidden * shared_width + (hidden if r.get("shared_expert_intermediate_size") else 0)
    )
    mlp = dense * 3 * hidden * dense_width + routed + moe_layers * per_moe_layer
    fields = dict(
        num_experts=experts,
        experts_per_token=top_k,
        moe_intermediate_size=width,
        shared_experts=shared or (1 if shared_width else 0),
        dense_layers=dense,
    )
    layer_mlp = experts * 3 * hidden * width + per_moe_layer  # one MoE layer's
    return dict(mlp=mlp, routed=routed * top_k / experts, routed_all=routed, fields=fields, layer_mlp=layer_mlp)


def _mtp_params(layers: int, hidden: int, vocab: int, attention: int, mlp: int) -> int:
    """Parameters of ``layers`` multi-token-prediction layers as SGLang builds a NextN draft
    (``models/deepseek_nextn.py``): per layer one decoder layer of the target's last kind, ``eh_proj``
    (2 x hidden -> hidden) and four norms; once its own embedding, head and final norm (resident while the
    pools are sized: SGLang shares the target's only after, ``eagle_worker_v2.py`` ``init_lm_head``)."""
    if not layers:
        return 0
    return layers * (attention + mlp + 2 * hidden * hidden + 4 * hidden) + 2 * vocab * hidden + hidden


def model_from_config(path: str, name: str | None = None) -> ModelPreset:
    """The model a checkpoint's ``config.json`` (or the folder holding it) describes, as SGLang reads it.
    Raises ModelConfigError naming the file and key."""
    data = _open(path)
    shown = str(Path(path) / "config.json") if Path(path).is_dir() else path
    r = _reader(shown, data)
    _check_modelled(r)
    arch = data["architectures"][0]
    layers, heads, hidden = r.int("num_hidden_layers"), r.int("num_attention_heads"), r.int("hidden_size")
    vocab = r.int("vocab_size")
    att = _attention(r, arch, hidden, heads)
    moe = _moe(r, hidden, layers)
    tied = bool(r.get("tie_word_embeddings", r.top.get("tie_word_embeddings", False)))
    norms = layers * 2 * hidden + hidden
    att_params = att.pop("params")
    total = vocab * hidden * (1 if tied else 2) + layers * att_params + moe["mlp"] + norms
    active = total - moe.get("routed_all", 0.0) + moe["routed"]
    file = Path(shown).resolve()
    label = name or (file.parent.name if file.name == "config.json" else file.stem) or "config"
    nextn = 0 if r.get(NEXTN_KEY) is None else r.int(NEXTN_KEY, low=0)
    return ModelPreset(
        name=label,
        num_layers=layers,
        q_heads=heads,
        params_b=total / 1e9,
        active_params_b=active / 1e9,
        weights_dtype=weights_dtype(r),
        hidden_size=hidden,
        context_len=context_length(r),
        nextn_layers=nextn,
        nextn_params_b=_mtp_params(nextn, hidden, vocab, att_params, moe["layer_mlp"]) / 1e9,
        architecture=arch,
        vocab_size=vocab,
        tied_embeddings=tied,
        **att,
        **moe["fields"],
    )


@dataclass(frozen=True)
class DraftConfig:
    """What a speculative draft's config.json gives its KV pools: the KV layers SGLang charges, whether it
    is an MTP head (``num_nextn_predict_layers`` present), and one layer's attention shape."""

    path: str
    architecture: str
    layers: int
    mtp: bool
    attention: str
    num_kv_heads: int
    head_dim: int
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    params_b: float = 0.0  # weights resident while SGLang sizes the pools, billions
    weights_dtype: str = "bf16"


def draft_from_config(path: str) -> DraftConfig:
    """A draft checkpoint's config.json (or the folder holding it), read as SGLang 0.5.23 reads a draft for
    its KV pools. Raises ModelConfigError naming the file and key."""
    data = _open(path)
    shown = str(Path(path) / "config.json") if Path(path).is_dir() else path
    r = _reader(shown, data)
    arch = data["architectures"][0]
    heads, hidden = r.int("num_attention_heads"), r.int("hidden_size")
    att = _attention(r, arch, hidden, heads)
    rewritten = arch in DRAFT_MTP_REWRITES
    nextn = 1 if rewritten else r.get(NEXTN_KEY)
    layers = 1 if rewritten else r.int(NEXTN_KEY, low=0) if nextn is not None else r.int("num_hidden_layers")
    vocab, mlp = r.int("vocab_size"), _moe(r, hidden, layers)["layer_mlp"]
    if nextn:
        params = _mtp_params(layers, hidden, vocab, att["params"], mlp)
    else:  # a head or a small model: its layers, its embedding and head (an EAGLE3 head's own vocabulary)
        head = r.int("draft_vocab_size", default=vocab)
        params = layers * (att["params"] + mlp + 2 * hidden) + vocab * hidden + head * hidden + hidden
    return DraftConfig(
        path=str(Path(shown).resolve()),
        architecture=arch,
        layers=layers,
        mtp=bool(nextn),  # SGLang packs a draft whose num_nextn_predict_layers is truthy
        attention=att["attention"],
        num_kv_heads=att["num_kv_heads"],
        head_dim=att["head_dim"],
        kv_lora_rank=att.get("kv_lora_rank", 0),
        qk_rope_head_dim=att.get("qk_rope_head_dim", 0),
        params_b=params / 1e9,
        weights_dtype=weights_dtype(r),
    )
