"""Speculative decoding's draft model in memory, as SGLang 0.5.23 sizes it: its weights and KV on the
device, its KV on the host.

Only memory is modelled: the draft's weights and KV make the target's device pool hold fewer tokens and
HiCache mirror more bytes per host token, which every transfer of a page and every stored page carry
(``scenario/resolve.py`` ``side_copies``). What speculative decoding does to time (draft steps, verify
batches, accept length) is not: a simulated decode step still emits one token per request.

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


#: Algorithms the simulator sizes (scenario ``model.speculative.algorithm``).
SPEC_ALGORITHMS: Registry[SpecAlgorithm] = Registry("speculative algorithm", "model.speculative.algorithm")
SPEC_ALGORITHMS.add("eagle", SpecAlgorithm("eagle", "EAGLE", True, "optional", True))
SPEC_ALGORITHMS.add("nextn", SpecAlgorithm("nextn", "NEXTN", True, "optional", True))
SPEC_ALGORITHMS.add("eagle3", SpecAlgorithm("eagle3", "EAGLE3", True, "required", False, single_group=True))
SPEC_ALGORITHMS.add("standalone", SpecAlgorithm("standalone", "STANDALONE", True, "required", False))
SPEC_ALGORITHMS.add("ngram", SpecAlgorithm("ngram", "NGRAM", False, "none", False))

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
    KV heads on the rank, what a copy of the draft's pages moves apart (``resolve.side_copies``)."""

    algorithm: str
    layers: int
    device_bpt: int
    host_bpt: int
    packed: bool
    weight_bytes: float = 0.0
    kv_tensors: int = 1
    kv_heads: int = 1

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
    weights = draft.params_b * 1e9 * WEIGHT_BYTES[draft.weights_dtype] / split
    if draft.layers == 0:  # SGLang charges no KV for a draft of 0 KV layers
        return DraftKV(algo.name, 0, 0, 0, False, weights)
    target_bpt = kv_bytes_per_token(_dims(target.attention, target, dtype, stage_layers), attn_tp)
    device = int(target_bpt * draft.layers / stage_layers) if algo.draft_kv else 0
    host = kv_bytes_per_token(_dims(draft.attention, draft, dtype, draft.layers), attn_tp)
    mla = draft.attention == "mla"
    tensors, heads = (1, 1) if mla else (2, max(1, draft.num_kv_heads // attn_tp))
    return DraftKV(algo.name, draft.layers, device, host, algo.packs_mtp and draft.mtp, weights, tensors, heads)


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
