"""GPU compute time of a scheduler step: a roofline over the model x GPU presets.

Prefill of ``n`` new tokens after ``c`` tokens already in the KV cache, on one rank:
    linear    = 2 x n x dense_active / (linear_peak x linear_mfu)
                + 2 x rows(n) x (routed_active / k) / (linear_peak x moe_mfu)     (rows: padded, below)
    attention = 4 x layers x attn_width x (n x c + n (n + 1) / 2)       (QK^T and PV, causal)
    bytes     = non-routed weights + the routed experts the n tokens reach + KV of the context
    allreduce = 2 x layers x allreduce_time(n x hidden x 2 B, tp)     (tp > 1; hardware/allreduce.py)
    unsplit   = (tp - 1) / tp x n x layers x 2 B x (8 hidden + moe_share x (2 k + 1) hidden) / (HBM x eff)
    gpu       = max(linear + attention / (peak x attention_mfu), bytes / (HBM x hbm_efficiency)) + unsplit + allreduce
    time      = max(gpu, layers x host_per_layer)                      (the host floor, below)
The efficiencies differ: a short prompt is GEMM work, a long one attention work, and a MoE's routed
experts run as grouped GEMMs far below a dense GEMM. A MoE's routed experts are ``routed_params``;
``routed_active = routed_params x k / E`` of them run per token, the rest of ``active_params`` is
dense; a step reads an expert only if one of its ``T`` tokens picks it, ``E (1 - (1 - k / E)^T)`` of
the ``E`` experts on average (uniform routing). The fused MoE computes each expert's tokens padded up
to whole blocks of ``BLOCK_SIZE_M`` rows, so ``rows(T)`` is ``E x E[ceil(X / block) x block]`` with
``X ~ Binomial(T, k / E)``, not ``T x k``: 0.78 of the rows are useful at 2,152 tokens over 128
experts, 0.985 at the 32,768 of the ``moe_mfu`` measurement. ``linear_peak`` is the fp8 tensor peak when the
model's weights are fp8 and the GPU has fp8 tensor cores, else the bf16 peak (attention runs in bf16).
The all-reduces (after attention and after the MLP, not overlapped with compute) carry one bf16
residual row per token, through the kernel SGLang picks for that message size (its custom all-reduce
below 8 MiB on NVLink, NCCL above, whose bus bandwidth rises with the size). ``unsplit`` is the memory traffic of
the kernels tensor parallelism does not split, because every rank holds the whole residual stream
after each all-reduce: the two residual-add RMSNorms of a layer (each reads the hidden and residual
rows and writes both: 8 rows of ``hidden``), and in a MoE layer the top-k combine (the down projection
writes ``k`` full-width rows per token, one per chosen expert, SGLang's ``intermediate_cache3`` of shape
``(tokens, k, hidden)``; the sum reads them and writes one row). They run as separate memory-bound
kernels between the GEMMs. The efficiencies are figures for one GPU running the whole model (the GEMM
and fused-MoE measurements, the 0.7 estimate that covers norms and activations), so at ``tp = 1`` these
kernels are inside them; TP divides the linear term by ``tp`` but not these kernels, so the model adds
back the ``(tp - 1) / tp`` of their time that the division took away.
The host floor: SGLang issues a prefill forward's kernels from Python, layer by layer, ahead of the
GPU; a prefill with little GPU work waits for the host instead (sgl-project/sglang#12160: a 1-token
DeepSeek-V3 prefill forward took 82.6 ms eager, 23.1 ms in a prefill CUDA graph: 1.35 and 0.38 ms for
each of its 61 layers; ``hardware.prefill_eager_us_per_layer`` / ``prefill_graph_us_per_layer``, by
the backend ``scheduler.cuda_graph_backend_prefill`` resolves to). Decode runs in CUDA graphs.
Decode of a batch of ``B`` requests holding ``K`` KV tokens in total:
    time   = max((weights read for B tokens + K x kv_bytes) / (HBM x eff), linear + attention) + unsplit(B)
             + allreduce(B) + layers x decode_per_layer
A decode step runs as a CUDA graph, but each of a layer's small kernels (norms, rope, top-k, the
activation, attention metadata) still takes microseconds: ``hardware.decode_us_per_layer`` (47 us: an
nsys kernel table of Qwen3-30B-A3B decode on an H200 sums to 77.6 us per layer against 30 us of weight
reads, sglang-omni#379; Llama-3-8B at batch 1 runs 46 us per layer over its weight time,
sgl-project/sglang#1401).

Speculative decoding (``ComputeParams.spec``, set only with ``model.speculative.accept_len``): a round is
``num_steps - 1`` draft forwards over ``B x topk`` rows, the target's verify over ``B x num_draft_tokens``
rows and the draft's extend over the same rows, each a CUDA-graph forward of the decode roofline
(``graph_forward``; the draft's is the target's with its layers, weights and KV: ``SpecRound.draft``);
the decode loop emits one token per request per step, so each step is charged the round and its
overhead over ``accept_len`` (a mean rate; docs/reference/sglang-speculative.md section 7). Under
attention DP a lockstep step where no group extends is a round for every group, each of its forwards a
lockstep forward over every group's rows (``spec_lockstep_time``).

Every parameter is per rank: tensor parallelism ``tp`` splits weights, FLOPs and KV heads; pipeline
parallelism ``pp`` gives each stage ``layers / pp`` layers (and their weights and KV). Under PP a
prefill micro-batch occupies each stage for ``prefill_time`` (what it returns) and reaches the last
stage after ``pp`` times that (``prefill_latency``); a decode step keeps the pipeline full with up to
``pp`` micro-batches of ``B / pp`` requests, so every request gets its next token after ``pp`` stage
times of its micro-batch. Activation transfers between stages are not modelled.
A step also pays ``step_overhead_s`` (scheduling, kernel launch), once per micro-batch.

Attention backends whose prefill kernel the model knows (``ATTENTION_RULES``, keyed by
``hardware.attention_backend``) time their attention as a kernel of its own, a roofline over the bytes
its tiling reads: ``attention = max(FLOPs / (peak x attention_mfu), bytes / (HBM x hbm_efficiency))``
and ``gpu = max(linear, weights / (HBM x eff)) + attention + unsplit + allreduce``. SGLang 0.5.23's
triton extend kernel (``kernels/ops/attention/extend_attention.py``) runs one program per (request,
query head, tile of ``BLOCK_M`` new tokens); each program streams the request's whole cached prefix,
K and V of its KV head, gathered token by token through the page table (an int64 slot index per
token), then the new tokens' K and V up to its own tile (causal), so a chunk of ``n`` new tokens
after ``c`` cached ones reads per layer (``kv = 2 x head_dim x kv_bytes``: K and V of one head and token)
    heads x (ceil(n / BLOCK_M) x c x (kv + 8) + sum_m min(n, (m + 1) BLOCK_M) x kv)
plus Q read and O written once (``heads``: query heads per rank; nothing shared between the query
heads of a GQA group or between tiles). ``BLOCK_M`` is the kernel's per-architecture, per-head-dim
table (``TRITON_EXTEND_BLOCK_M``). The bytes are counted at HBM: no credit for the L2 hits of
programs that read the same tile at the same time, an upper bound on the traffic, which SGLang's own
measurement supports for this kernel (sgl-project/sglang#34461: doubling BLOCK_M, which halves these
re-reads and leaves the FLOPs, cut the kernel 43 % on MI350X). A backend without a rule (SGLang's
defaults: flashinfer on Ampere and Ada, fa3 on Hopper, trtllm_mha on Blackwell) keeps the roofline
above, which reads the context's KV once per step. Decode is not affected by the rule.

Attention-DP groups stepping together (``sim/lockstep.py``): every group's GPUs compute their own
group's attention (its heads split over the group's ``tp / attn_dp`` GPUs, ``attn_width`` per GPU) and
the linear layers, the MoE and the unsplit kernels over the rows every group sends (``lockstep_rows``:
SGLang's gathered buffer), so a GPU of group ``g`` runs the roofline above with the shared terms over
those rows and the attention terms of its own batch; the step ends when the slowest group is done:
    gpu_g  = max(linear(R) + attention_g, (weights(R) + KV_g) / (HBM x eff))     (a rule: as above)
    gpu    = max_g gpu_g + unsplit(R) + allreduce(R)
    time   = max(gpu, host floor) if any group extends, else gpu + layers x decode_per_layer
The gather before the MLP and the scatter after it are the two collectives ``allreduce`` counts per
layer (SGLang's SUM_LEN buffer is all-reduced over the tp group both times; a MAX_LEN buffer's
all-gather and reduce-scatter are charged as those all-reduces). One group gives ``prefill_time`` /
``decode_time`` exactly. The attention projections' FLOPs stay in the linear term over ``R`` at ``1 / tp``:
the same per-GPU FLOPs as a group's own tokens at ``1 / (tp / attn_dp)`` when the groups are balanced,
fewer than the busiest group's otherwise. Their bytes are the GPU's share (``weight_bytes``: the parts a
model class shards over the attention group counted at ``tp / attn_dp``, ``hardware/params.py``), read
every step like the rest of the non-routed weights.

The model is a class with a small interface (``prefill_time``, ``decode_time``, ``num_layers``,
``step_overhead_s``, ``pp``) so a calibrated model can replace it; ``ComputeParams.with_overrides``
takes the fields a calibration file measures.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ..hardware.allreduce import KERNELS, AllReduceParams, allreduce_kernel, allreduce_time
from ..simconfig import ACTIVATION_BYTES, ComputeParams, HasSimConfig, SpecRound, unsplit_bytes_per_token

#: A forward's rows: whole requests in a lockstep group, a mean (a micro-batch's share) in one engine.
Rows = TypeVar("Rows", int, float)
#: One forward's shape: (rows, attention (query, key) pairs, KV tokens read).
Shape = tuple[Rows, float, float]

# ComputeParams and unsplit_bytes_per_token live in ..simconfig (what resolve builds); named here too.
__all__ = [
    "ACTIVATION_BYTES",
    "ComputeModel",
    "ComputeParams",
    "GroupWork",
    "StepTimeModel",
    "moe_block_m",
    "padded_rows",
    "unsplit_bytes_per_token",
]


def moe_block_m(tokens: int, experts: int) -> int:
    """Token rows per block of the Triton fused MoE for a step of ``tokens``: its default config takes
    16 while the step has no more tokens than experts and 64 above (the tuned H100 table for 128
    experts of 192 columns also uses 64 at 512-2048 tokens)."""
    return 16 if tokens <= experts else 64


@functools.lru_cache(maxsize=16384)
def padded_rows(tokens: int, share: float, block: int) -> float:
    """Expected rows one expert computes when each of ``tokens`` tokens picks it with probability
    ``share`` and its row count is rounded up to whole ``block`` s: ``block x sum_j P(X > j block)``,
    ``X ~ Binomial(tokens, share)``."""
    if tokens == 0 or share <= 0.0:
        return 0.0
    if share >= 1.0:
        return float(-(-tokens // block) * block)
    log_q, log_p = math.log1p(-share), math.log(share)
    cdf = 0.0  # P(X <= x), accumulated over the pmf
    rows = 0.0
    mean = tokens * share
    top = min(tokens, int(mean + 12.0 * math.sqrt(mean * (1.0 - share)) + block + 1))
    for x in range(top + 1):
        log_pmf = math.lgamma(tokens + 1) - math.lgamma(x + 1) - math.lgamma(tokens - x + 1) + x * log_p
        cdf += math.exp(log_pmf + (tokens - x) * log_q)
        if x % block == 0:
            rows += block * max(0.0, 1.0 - cdf)  # P(X > x) for x = j block
    return rows


@dataclass(frozen=True, slots=True)
class GroupWork:
    """One attention-DP group's batch in a lockstep step: the rows it sends to the MLP (new tokens of
    its prefill chunks, or its decode batch size; 0: an idle batch), the causal (query, key) pairs its
    attention computes, the KV tokens it reads, the bytes its attention kernel moves under a backend
    rule (prefill only) and whether it extends (prefill) or decodes."""

    tokens: int = 0
    pairs: float = 0.0
    kv_read: float = 0.0
    kernel_bytes: float = 0.0
    extend: bool = False


IDLE = GroupWork()


class StepTimeModel(Protocol):
    """What the scheduler needs from a compute model (``pp``: pipeline stages, 1 when absent)."""

    num_layers: int
    step_overhead_s: float

    def prefill_time(self, chunks: Iterable[tuple[int, int]]) -> float: ...

    def decode_time(self, batch_size: int, kv_tokens: int) -> float: ...


class ComputeModel:
    """Roofline step times from :class:`ComputeParams` (GPU time only; overhead is separate)."""

    def __init__(self, params: ComputeParams) -> None:
        self.params = params
        self.num_layers = params.num_layers
        self.step_overhead_s = params.step_overhead_s
        self.pp = params.pp
        linear_peak = params.linear_peak_flops or params.peak_flops
        self._linear = linear_peak * params.linear_mfu
        self._experts = linear_peak * params.moe_mfu
        self._attention = params.peak_flops * params.attention_mfu
        self._hbm = params.hbm_Bps * params.hbm_efficiency
        self._attn = 4.0 * params.num_layers * params.attn_width
        k, e = params.experts_per_token, params.num_experts
        self._routed_active = params.routed_params * k / e if e else 0.0
        self._dense_active = params.active_params - self._routed_active
        self._routed_bytes = params.routed_params * params.bytes_per_param
        self._dense_bytes = params.weight_bytes - self._routed_bytes
        tp = params.tp
        # Two all-reduces per layer (after attention, after the MLP or experts), each of one bf16
        # residual row per token.
        self._allreduces = 2 * params.num_layers if tp > 1 else 0
        self._ar_bytes_per_token = params.hidden_size * ACTIVATION_BYTES
        self._ar = AllReduceParams(
            peak_Bps=params.allreduce_Bps,
            latency_s=params.allreduce_latency_s,
            half_peak_bytes=params.allreduce_half_peak_bytes,
            exponent=params.allreduce_exponent,
            custom_max_bytes=params.custom_allreduce_max_bytes,
            fabric=params.allreduce_fabric,
        )
        # What dividing the per-GPU efficiencies' work by tp took away from the kernels TP does not split.
        self._unsplit_per_token = (tp - 1) / tp * params.unsplit_bytes_per_token / self._hbm
        # The host issues a prefill's kernels layer by layer ahead of the GPU: the forward lasts as long
        # as the slower of the two (the host's part runs concurrently with the GPU's).
        self._prefill_floor = params.num_layers * params.prefill_host_s_per_layer
        self._decode_fixed = params.num_layers * params.decode_s_per_layer
        # A backend with a rule reads each new token's Q and writes its O once: bf16 rows of attn_width.
        self._qo_bytes = 2.0 * params.attn_width * ACTIVATION_BYTES
        # Speculative decoding timed: each simulated decode step is a round over accept_len (module docstring).
        self._spec = params.spec
        self._draft: ComputeModel | None = None
        if params.spec is not None:
            self.step_overhead_s = params.step_overhead_s / params.spec.accept_len
            if params.spec.draft:
                draft_fields: dict[str, Any] = dict(params.spec.draft)  # the draft's own roofline inputs
                self._draft = ComputeModel(dataclasses.replace(params, spec=None, **draft_fields))

    @classmethod
    def from_resolved(cls, r: HasSimConfig, **overrides: float) -> ComputeModel:
        """Preset model of a resolved scenario (or a SimConfig), optionally with calibrated fields."""
        params = r.sim_config().compute
        return cls(params.with_overrides(**overrides) if overrides else params)

    def experts_touched(self, tokens: float) -> float:
        """Expected distinct routed experts of one layer that ``tokens`` tokens reach (uniform routing:
        each expert is missed by a token with probability ``1 - k / E``); all of them for a dense model."""
        p = self.params
        if not p.num_experts:
            return 0.0
        return p.num_experts * (1.0 - (1.0 - p.experts_per_token / p.num_experts) ** tokens)

    def weights_read(self, tokens: float) -> float:
        """Bytes of weights one step over ``tokens`` tokens reads: the non-routed part, and each routed
        expert some token reaches (an expert no token picks stays in HBM unread)."""
        if not self.params.num_experts:
            return self.params.weight_bytes
        return self._dense_bytes + self._routed_bytes * self.experts_touched(tokens) / self.params.num_experts

    def expert_rows(self, tokens: float) -> float:
        """Rows the fused-MoE grouped GEMM computes for ``tokens`` tokens: each expert's tokens padded
        up to a whole block of ``moe_block_m(tokens)`` rows (SGLang's ``moe_align_block_size``), in
        expectation over uniform routing; ``tokens x k`` without padding, 0 for a dense model."""
        p = self.params
        if not p.num_experts:
            return 0.0
        t = max(0, round(tokens))
        return p.num_experts * padded_rows(t, p.experts_per_token / p.num_experts, moe_block_m(t, p.num_experts))

    def linear_time(self, tokens: float) -> float:
        """GEMM seconds for ``tokens`` tokens: the routed experts on their padded rows at the
        grouped-GEMM efficiency, the rest (attention projections, shared experts, dense layers) at the
        linear efficiency."""
        dense = 2.0 * tokens * self._dense_active / self._linear
        if not self.params.num_experts:
            return dense
        per_row = self._routed_active / self.params.experts_per_token
        return dense + 2.0 * self.expert_rows(tokens) * per_row / self._experts

    def unsplit_time(self, tokens: float) -> float:
        """Seconds of the memory-bound kernels TP does not split (norms, top-k combine) for ``tokens``,
        beyond the ``1 / tp`` share the per-GPU efficiencies already count (0 without TP)."""
        return tokens * self._unsplit_per_token

    def allreduce_time(self, tokens: float) -> float:
        """Seconds of tensor-parallel all-reduces for a step over ``tokens`` tokens (0 without TP)."""
        if not self._allreduces:
            return 0.0
        return self._allreduces * allreduce_time(self._ar, tokens * self._ar_bytes_per_token, self.params.tp)

    def prefill_time(self, chunks: Iterable[tuple[int, int]]) -> float:
        """Seconds one rank (one pipeline stage) spends on ``(new_tokens, cached_context_tokens)`` chunks
        prefilled in one batch."""
        p = self.params
        tokens = 0
        pairs = 0.0
        context = 0
        kernel_bytes = 0.0  # under an attention rule
        for n, c in chunks:
            tokens += n
            pairs += n * c + n * (n + 1) / 2.0
            context += c
            if p.attn_tile_rows:
                kernel_bytes += self._chunk_attention_bytes(n, c)
        if tokens == 0:
            return 0.0
        if p.attn_tile_rows:
            # The attention kernel as its own roofline over the bytes its tiling reads.
            dense = max(self.linear_time(tokens), self.weights_read(tokens) / self._hbm)
            attention = max(self._attn * pairs / self._attention, kernel_bytes / self._hbm)
            gpu = dense + attention + self.unsplit_time(tokens) + self.allreduce_time(tokens)
            return max(gpu, self._prefill_floor)
        compute = self.linear_time(tokens) + self._attn * pairs / self._attention
        memory = self.weights_read(tokens) + context * p.kv_bytes_per_token
        gpu = max(compute, memory / self._hbm) + self.unsplit_time(tokens) + self.allreduce_time(tokens)
        return max(gpu, self._prefill_floor)

    def attention_bytes(self, chunks: Iterable[tuple[int, int]]) -> float:
        """HBM bytes this rank's prefill attention kernel reads and writes for ``(new, cached)`` chunks
        under the backend's rule (0 without one): every program (query head x tile of ``attn_tile_rows``
        new tokens) reads the whole cached prefix's K and V of its KV head with one page index per
        token, then the new tokens' K and V up to the end of its own tile; Q read and O written once."""
        if not self.params.attn_tile_rows:
            return 0.0
        return sum(self._chunk_attention_bytes(n, c) for n, c in chunks)

    def _chunk_attention_bytes(self, n: int, c: int) -> float:
        p = self.params
        rows = p.attn_tile_rows
        tiles = -(-n // rows)
        prefix = tiles * c * (p.attn_kv_bytes + p.attn_index_bytes)
        extend = (rows * tiles * (tiles + 1) // 2 - (tiles * rows - n)) * p.attn_kv_bytes
        return p.num_layers * (p.attn_heads * (prefix + extend) + n * self._qo_bytes)

    def prefill_latency(self, chunks: Iterable[tuple[int, int]]) -> float:
        """Seconds from the first stage starting a prefill batch to the last stage finishing it."""
        return self.pp * self.prefill_time(chunks)

    def decode_time(self, batch_size: int, kv_tokens: int) -> float:
        """Seconds until every one of ``batch_size`` requests (``kv_tokens`` in total) has its next token:
        one decode step, or under PP ``pp`` stage times of one of its micro-batches."""
        if batch_size <= 0:
            return 0.0
        micro = min(self.pp, batch_size)
        return self.pp * self._decode_stage(batch_size / micro, kv_tokens / micro)

    def decode_step_s(self, batch_size: int, kv_tokens: int) -> float:
        """One decode step as the engine charges it (``sim/engine.py``): ``decode_time`` and the
        scheduler's ``step_overhead_s`` once per micro-batch."""
        return self.step_overhead_s * min(self.pp, batch_size) + self.decode_time(batch_size, kv_tokens)

    def spec_step_s(self, batch_size: int, kv_tokens: int, accept_len: float) -> float:
        """One speculative round (its scheduler overhead and GPU time) over ``accept_len`` tokens a
        request: the mean seconds per emitted token a server log's decode line times."""
        return (self.params.step_overhead_s + self.spec_round_time(batch_size, kv_tokens)) / accept_len

    def _decode_stage(self, batch: float, kv_tokens: float) -> float:
        if self._spec is not None:
            return self.spec_round_time(batch, kv_tokens) / self._spec.accept_len
        return self.graph_forward(batch, kv_tokens, kv_tokens)

    def graph_forward(self, rows: float, kv_read: float, pairs: float) -> float:
        """GPU seconds of one forward run as a CUDA graph (a decode step, a speculative verify or draft
        forward) over ``rows`` token rows that read ``kv_read`` KV tokens once and whose attention
        computes ``pairs`` (query, key) pairs: the decode roofline and its fixed per-layer cost."""
        p = self.params
        memory = self.weights_read(rows) + kv_read * p.kv_bytes_per_token
        compute = self.linear_time(rows) + self._attn * pairs / self._attention
        gpu = max(memory / self._hbm, compute) + self.unsplit_time(rows) + self.allreduce_time(rows)
        return gpu + self._decode_fixed

    def spec_round_time(self, batch: float, kv_tokens: float) -> float:
        """GPU seconds of one speculative round of ``batch`` requests holding ``kv_tokens`` (SGLang 0.5.23
        ``eagle_worker_v2.py`` ``forward_batch_generation``): ``num_steps - 1`` draft forwards over
        ``batch x topk`` rows, the target's verify over ``batch x num_draft_tokens`` rows, the draft's
        extend over the same rows; each request's KV read once per forward, every draft row attending
        it and the tree before it (``n (n + 1) / 2`` pairs per request)."""
        s = self._round()
        (rows, pairs, kv_read), (step_rows, step_pairs, step_kv) = self._round_shapes(batch, kv_tokens)
        total = self.graph_forward(rows, kv_read, pairs)  # verify
        d = self._draft
        if d is not None:
            step = d.graph_forward(step_rows, step_kv, step_pairs)
            total += (s.num_steps - 1) * step + d.graph_forward(rows, kv_read, pairs)  # draft steps, extend
        return total

    def _round(self) -> SpecRound:
        if self._spec is None:
            raise ValueError("no speculative round: ComputeParams.spec is None")
        return self._spec

    def _round_shapes(self, batch: Rows, kv_tokens: float) -> tuple[Shape[Rows], Shape[Rows]]:
        """The two forward shapes of a speculative round over a decode batch of ``batch`` requests holding
        ``kv_tokens``, each ``(rows, attention pairs, KV tokens read)``: the verify (and the draft's
        extend) over ``num_draft_tokens`` rows a request, each attending its KV and the tree before it
        (``n (n + 1) / 2`` pairs a request), and one draft step over ``topk`` rows a request."""
        s = self._round()
        n, k = s.num_draft_tokens, s.topk
        verify = (batch * n, n * kv_tokens + batch * n * (n + 1) / 2.0, kv_tokens + batch * n)
        return verify, (batch * k, k * kv_tokens, kv_tokens)

    # ------------------------------------------------------------------ attention-DP lockstep

    def group_prefill(self, chunks: Iterable[tuple[int, int]]) -> GroupWork:
        """A group's prefill batch of ``(new_tokens, cached_context_tokens)`` chunks as lockstep work."""
        tokens = 0
        pairs = 0.0
        context = 0
        kernel_bytes = 0.0
        rule = bool(self.params.attn_tile_rows)
        for n, c in chunks:
            tokens += n
            pairs += n * c + n * (n + 1) / 2.0
            context += c
            if rule:
                kernel_bytes += self._chunk_attention_bytes(n, c)
        return GroupWork(tokens, pairs, context, kernel_bytes, extend=True)

    def group_decode(self, batch_size: int, kv_tokens: int) -> GroupWork:
        """A group's decode batch as lockstep work (each request attends its KV once)."""
        return GroupWork(batch_size, float(kv_tokens), float(kv_tokens))

    def lockstep_rows(self, tokens: Sequence[int], extend: bool, attn_tp: int) -> int:
        """Rows of the buffer the groups gather for the MLP (SGLang 0.5.23 ``prepare_mlp_sync_batch``
        and ``DpPaddingMode.get_dp_padding_mode``): each group's tokens rounded up to a multiple of
        ``attn_tp``; summed (SUM_LEN) when any group extends, or when no group is idle and the summed
        bf16 rows fit the custom all-reduce; else padded to the largest group's (MAX_LEN, ``max x
        groups``) when that costs at most twice the sum."""
        aligned = [-(-t // attn_tp) * attn_tp for t in tokens]
        total, most, width = sum(aligned), max(aligned), len(aligned)
        if extend or width <= 1:
            return total
        nbytes = total * self._ar_bytes_per_token
        custom = KERNELS.get(allreduce_kernel(self._ar, nbytes, self.params.tp)).custom
        if min(aligned) > 0 and custom:
            return total
        return most * width if total * 2 >= most * width else total

    def lockstep_time(self, groups: Sequence[GroupWork], attn_tp: int) -> float:
        """GPU seconds of one lockstep step of every attention-DP group (see the module docstring): the
        slowest group's attention beside the MLP over every group's rows, the gather and scatter, and the
        host floor when any group extends (the step runs eager) or the decode graph's fixed cost; with
        speculative decoding timed, the step's round (:meth:`spec_lockstep_time`)."""
        if self._spec is not None:
            return self.spec_lockstep_time(groups, attn_tp)
        return self.lockstep_forward(groups, attn_tp)

    def spec_lockstep_time(self, groups: Sequence[GroupWork], attn_tp: int) -> float:
        """GPU seconds per simulated step of a speculative lockstep step (docs/reference/sglang-speculative.md
        section 7, attention DP). All groups decoding: one round for every group, each forward of it a
        lockstep forward whose MLP rows are every group's (SGLang scales each group's request count by the
        forward's tokens per request): ``num_steps - 1`` draft forwards (``batch x topk`` rows), the
        target's verify and the draft's extend (``batch x num_draft_tokens`` rows), the slowest group's
        attention setting each; over ``accept_len``. A group extends: every group runs the target forward
        of its batch (decode rows as one-token extends) and the draft's extend over the same rows, one
        token a decoding request, not divided."""
        s = self._round()
        d = self._draft
        if any(g.extend for g in groups):
            total = self.lockstep_forward(groups, attn_tp)
            if d is not None:
                scale = d.num_layers / self.num_layers  # the kernel's bytes are per layer
                draft = [dataclasses.replace(g, kernel_bytes=g.kernel_bytes * scale) for g in groups]
                total += d.lockstep_forward(draft, attn_tp)
            return total
        shapes = [self._round_shapes(g.tokens, g.kv_read) for g in groups]
        verify = [GroupWork(*v) for v, _ in shapes]
        total = self.lockstep_forward(verify, attn_tp)
        if d is not None:
            steps = [GroupWork(*step) for _, step in shapes]
            total += (s.num_steps - 1) * d.lockstep_forward(steps, attn_tp) + d.lockstep_forward(verify, attn_tp)
        return total / s.accept_len

    def lockstep_forward(self, groups: Sequence[GroupWork], attn_tp: int) -> float:
        """GPU seconds of one lockstep forward of every group's work (:meth:`lockstep_time` without a
        speculative round)."""
        extend = any(g.extend for g in groups)
        rows = self.lockstep_rows([g.tokens for g in groups], extend, attn_tp)
        if rows == 0:
            return 0.0
        p = self.params
        linear = self.linear_time(rows)
        weights = self.weights_read(rows)
        slowest = 0.0
        for g in groups:
            if g.extend and p.attn_tile_rows:
                attention = max(self._attn * g.pairs / self._attention, g.kernel_bytes / self._hbm)
                gpu = max(linear, weights / self._hbm) + attention
            else:
                compute = linear + self._attn * g.pairs / self._attention
                gpu = max(compute, (weights + g.kv_read * p.kv_bytes_per_token) / self._hbm)
            slowest = max(slowest, gpu)
        gpu = slowest + self.unsplit_time(rows) + self.allreduce_time(rows)
        if extend:
            return max(gpu, self._prefill_floor)
        return gpu + self._decode_fixed
