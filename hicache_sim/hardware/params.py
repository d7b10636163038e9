"""The weights one GPU holds: a model's attention parameters counted from its dimensions, and the group
of ranks SGLang 0.5.23 shards each part of the model over.

Without attention DP every part is sharded over the ``tp`` ranks of a pipeline stage: ``params / (tp x
pp)`` per GPU. With ``--attn-dp-size N`` a model class that builds its attention for it shards the
attention projections over one attention group only (``tp / N`` ranks, SGLang's ``attn_tp_size``), and
some classes shard the input embedding there too; the MLP, the experts and the LM head (without
``--enable-dp-lm-head``, which the simulator does not take) stay over all ``tp`` ranks. Which class does
what is data (``WEIGHT_SPLITS``, by config.json ``architectures[0]``), read from each model file of the
0.5.23 wheel; ``docs/reference/sglang-data-parallel.md`` section 7 has the lines.

Attention parameters of one layer (SGLang's module for it; norms of the low-rank latents included):
    MHA / GQA  hidden x q_heads x head_dim (q) + 2 x hidden x kv_heads x head_dim (k, v)
               + q_heads x head_dim x hidden (o) + q_heads x head_dim + 2 x kv_heads x head_dim (q, k, v
               biases, where the model has them)
    MLA        with q_lora_rank r: hidden x r + r + r x heads x (nope + rope)   (q_a, its norm, q_b)
               without:           hidden x heads x (nope + rope)                (q)
               + hidden x (kv_lora + rope) + kv_lora + kv_lora x heads x (nope + v) + heads x v x hidden
                 (kv_a with the rope key, its norm, kv_b, o)
where ``nope = head_dim - qk_rope_head_dim`` (``head_dim`` is MLA's query/key width) and ``v`` the value
head width. Weight bytes are parameters x the dtype's bytes, the presets' rule, for every part.

Some parts are whole on every rank at any tp (``replicated_params``): the DeepSeek-V2 family's MLA
down-projections (``fused_qkv_a_proj_with_mqa`` / ``kv_a_proj_with_mqa`` are ``ReplicatedLinear``,
``models/deepseek_v2.py`` 2070-2076, 2095-2101) with the latents' norms: ``hidden x (q_lora + kv_lora +
rope) + q_lora + kv_lora`` a layer, 0.92 B parameters for DeepSeek-V3, about 0.8 GB per GPU at tp 8 in
fp8 that ``params / tp`` would leave out.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.registry import Registry
from .presets import WEIGHT_BYTES, ModelPreset

#: The groups a part can be sharded over: every tp rank of a stage, or one attention group's tp / attn_dp.
TP, ATTN_TP = "tp", "attn_tp"


@dataclass(frozen=True)
class WeightSplit:
    """Where one SGLang model class shards its weights under attention DP (``TP`` or ``ATTN_TP``): the
    attention projections, the input embedding and the LM head (a tied head is the embedding's table);
    everything else is over ``TP``. ``source``: the 0.5.23 model file and lines that build them."""

    attention: str
    embedding: str
    lm_head: str
    source: str


WEIGHT_SPLITS: Registry[WeightSplit] = Registry("weight split", "model architecture")
# The DeepSeek-V2 family builds q_b / q, kv_b and o over attn_tp (its q_a / kv_a down-projections are
# ReplicatedLinear: whole on every rank with or without attention DP, counted here with the attention),
# and its embedding over attn_tp under DP attention (get_embedding_tp_kwargs).
_DEEPSEEK = WeightSplit(
    ATTN_TP,
    ATTN_TP,
    TP,
    "models/deepseek_v2.py 2051-2058, 2078-2094, 2145-2162, 2943-2947, 3291-3297; "
    "layers/vocab_parallel_embedding.py 178-185",
)
_QWEN2_MOE = WeightSplit(ATTN_TP, ATTN_TP, TP, "models/qwen2_moe.py 911-949, 1115-1121, 1238-1244")
for _arch, _split in (
    ("DeepseekV2ForCausalLM", _DEEPSEEK),
    ("DeepseekV3ForCausalLM", _DEEPSEEK),
    # Llama builds its attention over the whole tp group (get_parallel().tp_size, the linear layers'
    # default group) and its embedding with the default group: attention DP leaves its weights as TP's.
    ("LlamaForCausalLM", WeightSplit(TP, TP, TP, "models/llama.py 181-222, 432-437, 573-579")),
    # Qwen2 (dense): attention over tp as Llama's, the embedding over attn_tp under DP attention.
    ("Qwen2ForCausalLM", WeightSplit(TP, ATTN_TP, TP, "models/qwen2.py 165-200, 369-375, 539-544")),
    ("Qwen3ForCausalLM", WeightSplit(ATTN_TP, ATTN_TP, TP, "models/qwen3.py 164-212, 582-587; qwen2.py 369-375")),
    ("Qwen2MoeForCausalLM", _QWEN2_MOE),
    (
        "Qwen3MoeForCausalLM",
        WeightSplit(ATTN_TP, ATTN_TP, TP, "models/qwen3_moe.py 502-541, 1017-1023; qwen2_moe.py 1115-1121"),
    ),
    ("Glm4MoeForCausalLM", WeightSplit(ATTN_TP, ATTN_TP, TP, "models/glm4_moe.py 234-273, 880-884, 999-1005")),
):
    WEIGHT_SPLITS.add(_arch, _split)

#: A class not in the table (or a model typed without one): attention over the attention group, as a
#: class built for DP attention has it (the layer boundary's default sum group, layers/layer_boundary/
#: factories.py 433-445); embedding and head over tp, VocabParallelEmbedding's and ParallelLMHead's default.
DEFAULT_SPLIT = WeightSplit(ATTN_TP, TP, TP, "layers/layer_boundary/factories.py 433-445 (default)")


def split_of(model: ModelPreset) -> WeightSplit:
    """The model class's split (``DEFAULT_SPLIT`` when its architecture is not in ``WEIGHT_SPLITS``)."""
    if model.architecture in WEIGHT_SPLITS.names():
        return WEIGHT_SPLITS.get(model.architecture)
    return DEFAULT_SPLIT


def mha_attention_params(hidden: int, heads: int, kv_heads: int, head_dim: int, bias: bool = False) -> int:
    """One MHA / GQA layer's q, k, v and o projections (and the q, k, v biases when ``bias``)."""
    q, kv = heads * head_dim, kv_heads * head_dim
    return hidden * q + 2 * hidden * kv + q * hidden + (q + 2 * kv if bias else 0)


def mla_attention_params(hidden: int, heads: int, q_lora: int, kv_lora: int, rope: int, nope: int, v: int) -> int:
    """One MLA layer: the q low-rank pair and its norm (or one q projection when ``q_lora`` is 0), kv_a
    with the rope key, its norm, kv_b and o."""
    q = hidden * q_lora + q_lora + q_lora * heads * (nope + rope) if q_lora else hidden * heads * (nope + rope)
    return q + hidden * (kv_lora + rope) + kv_lora + kv_lora * heads * (nope + v) + heads * v * hidden


def attention_params(model: ModelPreset) -> int:
    """Attention parameters of every layer of ``model``, from its dimensions."""
    if model.attention == "mla":
        nope = model.head_dim - model.qk_rope_head_dim
        per_layer = mla_attention_params(
            model.hidden,
            model.q_heads,
            model.q_lora_rank,
            model.kv_lora_rank,
            model.qk_rope_head_dim,
            nope,
            model.v_head_dim or nope,
        )
    else:
        per_layer = mha_attention_params(
            model.hidden, model.q_heads, model.num_kv_heads, model.head_dim, model.attention_bias
        )
    return model.num_layers * per_layer


def replicated_params(model: ModelPreset) -> int:
    """Parameters every rank holds whole whatever the tp: an MLA model's down-projections (q_a with its
    norm, kv_a with the rope key and its norm; ``ReplicatedLinear`` in SGLang's DeepSeek-V2 family)."""
    if model.attention != "mla":
        return 0
    q_a = model.hidden * model.q_lora_rank + model.q_lora_rank if model.q_lora_rank else 0
    kv_a = model.hidden * (model.kv_lora_rank + model.qk_rope_head_dim) + model.kv_lora_rank
    return model.num_layers * (q_a + kv_a)


def embedding_params(model: ModelPreset) -> tuple[int, int]:
    """(input embedding, LM head) parameters: ``vocab x hidden`` each, the head 0 when tied to the
    embedding (one table); both 0 when the model gives no vocabulary."""
    table = model.vocab_size * model.hidden
    return table, 0 if model.tied_embeddings else table


@dataclass(frozen=True)
class WeightShare:
    """One GPU's weights: the parameters sharded over one attention group of ``attn_tp`` ranks, those
    over all ``tp`` ranks, those whole on every rank (``replicated``), and the bytes per GPU of a pipeline
    stage of ``pp``."""

    on_attn_tp: float
    on_tp: float
    tp: int
    attn_tp: int
    pp: int
    bytes_per_param: float
    replicated: float = 0.0

    @property
    def bytes(self) -> float:
        """Weight bytes on one GPU."""
        if not self.on_attn_tp and not self.replicated:  # every part over tp: the plain TP formula
            return self.on_tp * self.bytes_per_param / (self.tp * self.pp)
        sharded = self.on_attn_tp / self.attn_tp + self.on_tp / self.tp
        return (self.replicated + sharded) / self.pp * self.bytes_per_param

    def describe(self) -> str:
        """The split in words, for messages: ``671 B parameters x 1 B / 8 ranks`` without attention DP."""
        stages = f" / pp {self.pp}" if self.pp > 1 else ""
        if not self.on_attn_tp and not self.replicated:
            ranks = self.tp * self.pp
            return f"{self.on_tp / 1e9:g} B parameters x {self.bytes_per_param:g} B / {ranks} rank{'s' * (ranks > 1)}"
        whole = f"{self.replicated / 1e9:.2f} B on every rank + " if self.replicated else ""
        group = (
            f"{self.on_attn_tp / 1e9:.2f} B attention-group parameters / {self.attn_tp} + " if self.on_attn_tp else ""
        )
        return f"{whole}{group}{self.on_tp / 1e9:.2f} B / tp {self.tp}{stages}, x {self.bytes_per_param:g} B"


def weight_share(model: ModelPreset, tp: int, pp: int, attn_dp: int = 1) -> WeightShare:
    """What one GPU of ``tp x pp`` holds with ``attn_dp`` attention-DP groups: the parts the model's class
    shards over the attention group (``split_of``) at ``tp / attn_dp`` ranks, the rest at ``tp``. At
    ``attn_dp`` 1 the two groups are one and the share is ``params / (tp x pp)``. Parts counted from the
    dimensions are capped at the model's ``params_b`` (a model typed with fewer parameters than its
    dimensions give keeps the whole of them on the attention group)."""
    total = model.params_b * 1e9
    per_param = WEIGHT_BYTES[model.weights_dtype]
    whole = min(float(replicated_params(model)), total) if tp > 1 else 0.0
    if attn_dp == 1:
        return WeightShare(0.0, total - whole, tp, tp, pp, per_param, whole)
    split = split_of(model)
    embed, head = embedding_params(model)
    attention = attention_params(model) - replicated_params(model)
    parts = ((split.attention, attention), (split.embedding, embed), (split.lm_head, head))
    grouped = min(float(sum(n for group, n in parts if group == ATTN_TP)), total - whole)
    return WeightShare(grouped, total - whole - grouped, tp, tp // attn_dp, pp, per_param, whole)


def weight_bytes_per_gpu(model: ModelPreset, tp: int, pp: int, attn_dp: int = 1) -> float:
    """Weight bytes one GPU holds (see :func:`weight_share`)."""
    return weight_share(model, tp, pp, attn_dp).bytes
