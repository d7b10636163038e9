"""Speculative decoding's draft model as SGLang 0.5.23 sizes and runs it: its weights and KV on the
device, its KV on the host, and the shape of a round.

Memory: the draft's weights and KV make the target's device pool hold fewer tokens and HiCache mirror
more bytes per host token, which every transfer of a page and every stored page carry
(``scenario/resolve.py`` ``side_copies``). Time, only with ``model.speculative.accept_len`` (the mean
tokens a request gets per round, which the simulator cannot derive): a round's draft steps, verify and
draft extend (``round_steps``, ``draft_compute_fields``; ``sim/compute.py``
``ComputeModel.spec_round_time``) charged as round time / accept_len per simulated decode step.
Without it a decode step emits one token per request at the plain decode's time.

Per algorithm (``SPEC_ALGORITHMS``; sources in docs/reference/sglang-speculative.md):

- weights: SGLang loads the draft before it profiles the memory (``managers/scheduler.py``
  ``init_model_worker``), so the draft's weights (parameters x the weight dtype's bytes over the ranks, the
  target's rule) come out of the KV pool too.
- device: EAGLE, EAGLE3, NEXTN (SGLang's alias of EAGLE) and STANDALONE charge the draft's KV in the
  target's per-token cell, scaled from the target's own layers: ``cell += int(cell x draft_layers /
  layers)`` (``model_executor/pool_configurator.py`` ``DefaultPoolConfigurator``); the draft's pool then
  takes the target's token count. NGRAM has no draft model and no draft KV.
- host: HiCache packs an MTP draft (EAGLE / NEXTN whose draft has ``num_nextn_predict_layers``) into the
  target's host KV pool, one more row per draft layer (``speculative/base_spec_worker.py``
  ``_can_pack_hicache_mtp``, ``mem_cache/pool_host/mla.py``): ``--hicache-size`` then buys fewer tokens.
  Any other draft (EAGLE with an EAGLE head, EAGLE3, STANDALONE) gets a host pool of its own with one
  slot per target host slot (``hybrid_pool_assembler.py`` ``build_full_draft_pools``), beside
  ``--hicache-size``. Either way auto-sizing counts the draft's device bytes
  (``mem_cache/hicache_auto_size.py`` ``_estimate_hicache_bytes``).
- scheduler: with ``--max-running-requests`` unset SGLang sets it to 48 (``arg_groups/speculative_hook.py``
  ``_handle_eagle_family``, ``_handle_ngram``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core import ConfigError
from ..core.registry import Registry
from ..core.sizing import ModelDims, kv_bytes_per_token
from .hfconfig import DraftConfig
from .presets import WEIGHT_BYTES, ModelPreset


@dataclass(frozen=True)
class SpecAlgorithm:
    """One ``--speculative-algorithm`` as SGLang 0.5.23 runs it, for its memory.

    ``sglang``: the flag value written back; ``draft_kv``: the draft writes KV the target's cell pays
    for; ``draft``: ``required`` (a draft model path), ``optional`` (without one the target's MTP layers
    are the draft) or ``none`` (no draft model); ``packs_mtp``: HiCache packs an MTP draft into the
    target's host pool (SGLang's ``is_eagle() and not is_eagle3()``); ``running_default``: the
    ``--max-running-requests`` SGLang sets when it is unset; ``single_group``: under attention DP the draft
    runs whole inside one attention group, its weights split over that group's ranks only (SGLang's
    ``legacy_draft_parallel_spec``: EAGLE3; ``speculative/draft_parallel.py`` 17-67), where the others
    take the target's layout."""

    name: str
    sglang: str
    draft_kv: bool
    draft: str
    packs_mtp: bool
    running_default: int | None = 48
    single_group: bool = False
    fixed_steps: tuple[int, int, int] | None = None  # (steps, topk, draft tokens) SGLang sets when unset
    draft_forward: bool = True  # a draft model runs forwards each round (NGRAM drafts on the CPU)


#: Algorithms the simulator sizes (scenario ``model.speculative.algorithm``).
SPEC_ALGORITHMS: Registry[SpecAlgorithm] = Registry("speculative algorithm", "model.speculative.algorithm")
SPEC_ALGORITHMS.add("eagle", SpecAlgorithm("eagle", "EAGLE", True, "optional", True))
SPEC_ALGORITHMS.add("nextn", SpecAlgorithm("nextn", "NEXTN", True, "optional", True))
SPEC_ALGORITHMS.add("eagle3", SpecAlgorithm("eagle3", "EAGLE3", True, "required", False, single_group=True))
# STANDALONE: (3, 1, 4) whatever the model (speculative_hook.py ``_auto_choose_speculative_params``);
# NGRAM: top-k = --speculative-ngram-max-bfs-breadth (10), 12 draft tokens, steps 12 // 10 (``_handle_ngram``).
SPEC_ALGORITHMS.add(
    "standalone", SpecAlgorithm("standalone", "STANDALONE", True, "required", False, fixed_steps=(3, 1, 4))
)
SPEC_ALGORITHMS.add(
    "ngram", SpecAlgorithm("ngram", "NGRAM", False, "none", False, fixed_steps=(1, 10, 12), draft_forward=False)
)

#: ``(--speculative-num-steps, --speculative-eagle-topk, --speculative-num-draft-tokens)`` SGLang 0.5.23
#: picks for the EAGLE family when all three are unset, by the target's ``architectures[0]``
#: (``arg_groups/speculative_hook.py`` ``_auto_choose_speculative_params``); any other: ``AUTO_STEPS_DEFAULT``.
AUTO_STEPS: dict[str, tuple[int, int, int]] = {
    "LlamaForCausalLM": (5, 4, 8),
    "Grok1ForCausalLM": (5, 4, 8),
    "Grok1VForCausalLM": (5, 4, 8),
}
AUTO_STEPS_DEFAULT = (3, 1, 4)

#: Every ``--speculative-algorithm`` SGLang 0.5.23 accepts (``speculative/spec_info.py``
#: ``SpeculativeAlgorithm`` members and the NEXTN alias; case-insensitive), and why those the simulator
#: does not size are refused.
SGLANG_ALGORITHMS = (
    "EAGLE",
    "EAGLE3",
    "NEXTN",
    "STANDALONE",
    "NGRAM",
    "DFLASH",
    "DSPARK",
    "UNO",
    "FROZEN_KV_MTP",
    "NONE",
)
NOT_MODELLED = {
    "DFLASH": "its draft KV is sized from the draft's own geometry (dflash_utils), not modelled",
    "DSPARK": "its draft KV is sized from the draft's own geometry (dflash_utils), not modelled",
    "UNO": "not modelled",
    "FROZEN_KV_MTP": "a Gemma4 assistant draft reading the target's KV, not modelled",
}


@dataclass(frozen=True)
class DraftKV:
    """The draft on one rank: ``device_bpt`` bytes per token added to the target's device cell,
    ``host_bpt`` mirrored per host token, ``packed`` into the target's host KV pool (else a host pool
    of its own), and ``weight_bytes`` of its weights resident when SGLang profiles the memory.
    ``kv_tensors`` and ``kv_heads``: one host row's KV tensors per layer (K and V, or MLA's latent) and
    KV heads on the rank, what a copy of the draft's pages moves apart (``resolve.side_copies``).
    ``params``: its parameters on the rank (what its forwards compute over); ``target_layers``: the draft
    is the target's own MTP layers (of the target's kind: a MoE target's MTP layer routes experts)."""

    algorithm: str
    layers: int
    device_bpt: int
    host_bpt: int
    packed: bool
    weight_bytes: float = 0.0
    kv_tensors: int = 1
    kv_heads: int = 1
    params: float = 0.0
    target_layers: bool = False

    @property
    def packed_bpt(self) -> int:
        """Bytes per token the draft adds to the target's host KV pool rows (what ``--hicache-size`` buys)."""
        return self.host_bpt if self.packed else 0

    @property
    def own_pool_bpt(self) -> int:
        """Bytes per token of the draft's own host pool (0 when packed or none)."""
        return 0 if self.packed else self.host_bpt


NO_DRAFT = DraftKV("none", 0, 0, 0, False)


def draft_kv(
    algorithm: str | None,
    target: ModelPreset,
    draft: DraftConfig | None,
    *,
    dtype: str,
    stage_layers: int,
    attn_tp: int,
    pp: int = 1,
    attn_dp: int = 1,
    ranks: int = 1,
) -> DraftKV:
    """The draft KV one rank holds for ``algorithm`` (None: no speculative decoding) with the draft model
    ``draft`` (None: none given; the target's MTP layers serve where the algorithm allows), its weights
    split over ``ranks`` (tp x pp) as the target's are. Raises ConfigError where SGLang would refuse the
    launch or the simulator does not model it."""
    if algorithm is None:
        return NO_DRAFT
    algo = SPEC_ALGORITHMS.get(algorithm)
    field = "model.speculative"
    if algo.draft == "none":
        if draft is not None:
            raise ConfigError(f"{field}.config", f"{algo.sglang} has no draft model; remove the draft")
        return DraftKV(algo.name, 0, 0, 0, False)
    if algo.name == "standalone" and attn_dp > 1:
        raise ConfigError("hardware.attn_dp", "SGLang 0.5.23 refuses STANDALONE speculative decoding with DP attention")
    if pp > 1:
        raise ConfigError(
            "hardware.pp", "speculative decoding is modelled at pp 1 (SGLang runs the draft on the last stage)"
        )
    if target.index_head_dim:
        raise ConfigError(field, "a draft beside a DSA indexer pool is not modelled")
    own = draft is None
    if draft is None:
        if algo.draft == "required" or not target.nextn_layers:
            raise ConfigError(
                f"{field}.config",
                f"{algo.sglang} needs a draft model (--speculative-draft-model-path: its config.json)"
                + ("" if algo.draft == "required" else f"; {target.name} has no MTP layers (num_nextn_predict_layers)"),
            )
        draft = DraftConfig(
            "",
            "",
            target.nextn_layers,
            True,
            target.attention,
            target.num_kv_heads,
            target.head_dim,
            target.kv_lora_rank,
            target.qk_rope_head_dim,
            target.nextn_params_b,
            target.weights_dtype,
        )
    # A single-group draft under attention DP is split over its attention group (tp / attn_dp ranks) only.
    split = attn_tp if algo.single_group and attn_dp > 1 else ranks
    params = draft.params_b * 1e9 / split
    weights = params * WEIGHT_BYTES[draft.weights_dtype]
    if draft.layers == 0:  # SGLang charges no KV for a draft of 0 KV layers
        return DraftKV(algo.name, 0, 0, 0, False, weights, params=params, target_layers=own)
    target_bpt = kv_bytes_per_token(_dims(target.attention, target, dtype, stage_layers), attn_tp)
    device = int(target_bpt * draft.layers / stage_layers) if algo.draft_kv else 0
    host = kv_bytes_per_token(_dims(draft.attention, draft, dtype, draft.layers), attn_tp)
    mla = draft.attention == "mla"
    tensors, heads = (1, 1) if mla else (2, max(1, draft.num_kv_heads // attn_tp))
    packed = algo.packs_mtp and draft.mtp
    return DraftKV(algo.name, draft.layers, device, host, packed, weights, tensors, heads, params, own)


def _dims(attention: str, shape: ModelPreset | DraftConfig, dtype: str, layers: int) -> ModelDims:
    return ModelDims(
        num_layers=layers,
        attention=attention,
        num_kv_heads=shape.num_kv_heads,
        head_dim=shape.head_dim,
        kv_lora_rank=shape.kv_lora_rank,
        qk_rope_head_dim=shape.qk_rope_head_dim,
        dtype=dtype,
    )


def running_default(algorithm: str | None) -> int | None:
    """``--max-running-requests`` SGLang sets for ``algorithm`` when the flag is unset (None: its own rule)."""
    return None if algorithm is None else SPEC_ALGORITHMS.get(algorithm).running_default


@dataclass(frozen=True)
class RoundSteps:
    """One speculative round's shape as SGLang 0.5.23 resolves the flags: ``num_steps`` draft steps
    (``num_steps - 1`` draft forwards, the first token comes from the previous draft extend), ``topk``
    branches per step, ``num_draft_tokens`` rows per request in verify and draft extend."""

    num_steps: int
    topk: int
    num_draft_tokens: int


def round_steps(
    algorithm: str,
    architecture: str,
    num_steps: int | None,
    topk: int | None,
    num_draft_tokens: int | None,
) -> RoundSteps:
    """The round SGLang runs for these flags (None: unset): its auto-choice when all three are unset
    (``_auto_choose_speculative_params``; NGRAM's and STANDALONE's fixed values), then
    ``num_draft_tokens = num_steps + 1`` at top-k 1 (``_handle_eagle_family``). Raises ConfigError where
    SGLang would fail: the EAGLE family given top-k or draft tokens without steps (its assert), steps
    without top-k (``None > 1``), or top-k above 1 without draft tokens."""
    algo = SPEC_ALGORITHMS.get(algorithm)
    field = "model.speculative"
    given = (num_steps, topk, num_draft_tokens)
    if algo.name == "ngram":
        base = algo.fixed_steps or AUTO_STEPS_DEFAULT
        top = base[1] if topk is None else topk
        drafts = base[2] if num_draft_tokens is None else num_draft_tokens
        steps = drafts // top if num_steps is None else num_steps
        return RoundSteps(steps, top, drafts)
    if all(v is None for v in given):
        return RoundSteps(*(algo.fixed_steps or AUTO_STEPS.get(architecture, AUTO_STEPS_DEFAULT)))
    if num_steps is None or topk is None or (num_draft_tokens is None and topk != 1):
        raise ConfigError(
            f"{field}.num_steps",
            "give num_steps, eagle_topk and num_draft_tokens together (num_draft_tokens may be left out at "
            "eagle_topk 1), or none (SGLang auto-chooses all three)",
        )
    # At top-k 1 SGLang sets the draft tokens to steps + 1 whatever was given.
    return RoundSteps(num_steps, topk, num_steps + 1 if topk == 1 else num_draft_tokens)  # type: ignore[arg-type]


def draft_compute_fields(
    draft: DraftKV,
    target_layers: int,
    routed_params: float,
    num_experts: int,
    experts_per_token: int,
    unsplit_bytes_per_token: float,
) -> dict[str, float | int]:
    """The compute-model fields that make the target's roofline the draft's (``sim/compute.py``
    ``ComputeParams``; the rest, GPU and knobs, stay the target's): its layers, parameters, weight bytes
    and KV bytes on the rank. The target's own MTP layers are layers of its kind: a MoE target's route
    its experts (its routed parameters per layer); a draft model of its own is dense. The kernels TP
    does not split are the target's per layer. Raises ConfigError for a draft of no layers."""
    if draft.layers <= 0:
        raise ConfigError("model.speculative.num_layers", "a draft of 0 layers has no forward to time (accept_len)")
    share = draft.layers / target_layers
    routed = routed_params * share if draft.target_layers and num_experts else 0.0
    return {
        "num_layers": draft.layers,
        "weight_bytes": draft.weight_bytes,
        "routed_params": routed,
        "num_experts": num_experts if routed else 0,
        "experts_per_token": experts_per_token if routed else 0,
        "active_params": draft.params - routed + (routed * experts_per_token / num_experts if routed else 0.0),
        "kv_bytes_per_token": float(draft.device_bpt),
        "unsplit_bytes_per_token": unsplit_bytes_per_token * share,
        "pp": 1,
    }
