"""``multiturn``: SGLang bench_multiturn's clients with growing histories, sent by its closed loop."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ..workload import Workload
from .registry import WORKLOAD_KINDS, BuildContext, KindSpec, WorkloadKind


class MultiturnSpec(KindSpec):
    """SGLang ``benchmark/hicache/bench_multiturn.py``: clients with growing histories, sent by its
    closed loop. Field names and defaults are bench_multiturn's options (``--num-clients`` ->
    ``num_clients``, ...)."""

    num_clients: int = Field(256, gt=0, description="--num-clients: concurrent clients (conversations)")
    num_rounds: int = Field(5, gt=0, description="--num-rounds: turns per client")
    min_rounds: int = Field(
        0, ge=0, description="--min-rounds: fewest turns of a client (0 = max_rounds, or num_rounds if both are 0)"
    )
    max_rounds: int = Field(
        0,
        ge=0,
        description="--max-rounds: most turns of a client (0 = min_rounds, or num_rounds if both are 0); "
        "with min < max each client's count is drawn uniformly in [min, max] before anything else",
    )
    request_length: int = Field(512, gt=0, description="--request-length: tokens of each client's first prompt")
    sub_question_input_length: int = Field(
        0, ge=0, description="--sub-question-input-length: tokens of each later question; 0 = request_length"
    )
    output_length: int = Field(64, gt=0, description="--output-length: answer tokens per request")
    range_ratio: float = Field(
        1.0,
        gt=0,
        le=1,
        description="--range-ratio: every prompt, question and answer length is drawn uniformly from "
        "[max(1, int(ratio x L)), L] (1 = fixed lengths)",
    )
    request_rate: float = Field(
        1.0, gt=0, description="--request-rate: requests/s; the sender sleeps one gap after each pop attempt"
    )
    distribution: Literal["poisson", "uniform"] = Field(
        "poisson", description="--distribution: gaps exponential with mean 1/rate, or uniform in [0, 2/rate]"
    )
    max_parallel: int = Field(
        128, gt=0, description="--max-parallel: in-flight cap; at the cap the sender retries every 50 ms"
    )
    ready_queue_policy: Literal["random", "fifo"] = Field(
        "random",
        description="--ready-queue-policy: the sender pops a uniformly drawn ready client (seeded) or the "
        "one ready longest",
    )
    round_barrier: bool = Field(
        False, description="--enable-round-barrier: round r+1 is sent only after every request of round r finished"
    )
    round_barrier_pause_s: float = Field(
        10.0,
        ge=0,
        le=1e6,
        description="with the barrier, idle seconds before the next round is released (bench_multiturn "
        "sends a heartbeat request and sleeps 10 s; the heartbeat is not simulated)",
    )
    seed: int | None = Field(
        None,
        description="--seed (bench_multiturn's default is 1): seeds the ready queue and the gaps "
        "(one Python random stream, drawn as bench_multiturn draws it) and the lengths; null = the scenario seed",
    )

    @model_validator(mode="after")
    def _round_range(self) -> MultiturnSpec:
        lo, hi = self.round_range()
        if lo > hi:
            raise ValueError(f"min_rounds ({lo}) must be <= max_rounds ({hi})")
        return self

    def round_range(self) -> tuple[int, int]:
        """(fewest, most) turns per client, resolved as bench_multiturn resolves its options."""
        lo, hi = self.min_rounds, self.max_rounds
        if lo == 0 and hi == 0:
            return self.num_rounds, self.num_rounds
        return (lo or hi), (hi or lo)

    def size_estimate(self) -> tuple[int, int]:
        """(requests, prompt tokens summed over them): round r's prompt holds the first prompt, r
        questions and r answers (lengths and round counts at their maximum)."""
        rounds = self.round_range()[1]
        sub = self.sub_question_input_length or self.request_length
        later = rounds * (rounds - 1) // 2  # questions and answers summed over the rounds' histories
        per_client = self.request_length * rounds + (sub + self.output_length) * later
        return self.num_clients * rounds, self.num_clients * per_client


def build(spec: MultiturnSpec, ctx: BuildContext) -> Workload:
    from .. import synthetic  # numpy: imported when this kind is built

    return synthetic.multiturn(spec, ctx.page_size, ctx.seed, ctx.partial_pages)


WORKLOAD_KINDS.add("multiturn", WorkloadKind(MultiturnSpec, build, "SGLang bench_multiturn (closed loop)"))
