"""``bench_serving``: SGLang ``python -m sglang.bench_serving --dataset-name random``: independent prompts
of drawn lengths, sent at a request rate under a concurrency cap, after a warm-up request."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, field_validator

from ..workload import Workload
from .registry import WORKLOAD_KINDS, BuildContext, KindSpec, WorkloadKind


class EarlierRun(KindSpec):
    """A bench_serving run made before this one on the same server (no cache flush in between): with
    the same seed its prompt i starts with the same tokens as this run's prompt i (both are cut from
    the same sampled conversation), so what it left cached is hit."""

    random_input_len: int = Field(gt=0, description="that run's --random-input-len")
    random_output_len: int = Field(1024, gt=0, description="that run's --random-output-len (its answers stay cached)")
    num_prompts: int = Field(gt=0, le=1_000_000, description="that run's --num-prompts")
    random_range_ratio: float = Field(0.0, ge=0, le=1, description="that run's --random-range-ratio")
    max_concurrency: int | None = Field(None, gt=0, description="that run's --max-concurrency")


class BenchServingSpec(KindSpec):
    """SGLang ``bench_serving.py`` with its random dataset. Field names and defaults are its options
    (``--random-input-len`` -> ``random_input_len``, ...), as in SGLang 0.5.7."""

    dataset_name: Literal["random"] = Field(
        "random", description="--dataset-name: only random (lengths drawn as bench_serving draws them)"
    )
    num_prompts: int = Field(1000, gt=0, le=10_000_000, description="--num-prompts: requests in the run")
    random_input_len: int = Field(1024, gt=0, description="--random-input-len: most prompt tokens")
    random_output_len: int = Field(1024, gt=0, description="--random-output-len: most answer tokens")
    random_range_ratio: float = Field(
        0.0,
        ge=0,
        le=1,
        description="--random-range-ratio: prompt and answer lengths uniform in [max(1, int(r L)), L]",
    )
    answer_floor: Literal[0, 1] = Field(
        1,
        description="least answer length: bench_serving draws answers from [max(1, int(r L)), L] since "
        "SGLang 0.5.7, from [int(r L), L] up to 0.5.6 (give 0 to replay such a run; a 0-token answer is "
        "simulated as 1)",
    )
    request_rate: float | Literal["inf"] = Field(
        "inf", description="--request-rate: requests/s, Poisson gaps; inf sends every request at once"
    )
    max_concurrency: int | None = Field(
        None, gt=0, description="--max-concurrency: in-flight cap (a semaphore the requests queue on)"
    )
    warmup_requests: int = Field(
        1,
        ge=0,
        le=1000,
        description="--warmup-requests: copies of the first prompt (answers of at most 32 tokens) sent "
        "before the run and not measured; their prompt stays cached (no --flush-cache)",
    )
    seed: int | None = Field(
        None, description="--seed (bench_serving's default is 1): numpy's global seed; null = the scenario seed"
    )
    earlier_runs: list[EarlierRun] = Field(
        default_factory=list,
        description="bench_serving runs made before this one on the same server with the same seed, in "
        "order: each sends its prompts (unmeasured, with their answers, at its concurrency) after the one "
        "before it finished, then this run's warm-up follows, so the cache holds what they left",
    )

    @field_validator("request_rate", mode="before")
    @classmethod
    def _infinite_rate(cls, v: object) -> object:
        """YAML's ``.inf`` and the strings inf / infinity mean bench_serving's default (all at once)."""
        if isinstance(v, float) and math.isinf(v) and v > 0:
            return "inf"
        if isinstance(v, str) and v.strip().lower() in ("inf", "+inf", "infinity", ".inf"):
            return "inf"
        return v

    @field_validator("request_rate")
    @classmethod
    def _positive_rate(cls, v: float | str) -> float | str:
        if v != "inf" and not v > 0:
            raise ValueError("must be a positive number of requests per second or 'inf'")
        return v

    def rate(self) -> float:
        """The request rate as a float (``math.inf`` when every request is sent at once)."""
        return math.inf if self.request_rate == "inf" else float(self.request_rate)

    def size_estimate(self) -> tuple[int, int]:
        """(requests, prompt tokens) at their maximum: every prompt at ``random_input_len``."""
        n = self.num_prompts + self.warmup_requests
        earlier = sum(r.num_prompts for r in self.earlier_runs)
        tokens = n * self.random_input_len + sum(r.num_prompts * r.random_input_len for r in self.earlier_runs)
        return n + earlier, tokens


def build(spec: BenchServingSpec, ctx: BuildContext) -> Workload:
    from .. import synthetic  # numpy: imported when this kind is built

    return synthetic.bench_serving(spec, ctx.page_size, ctx.seed, ctx.partial_pages)


WORKLOAD_KINDS.add(
    "bench_serving",
    WorkloadKind(BenchServingSpec, build, "SGLang bench_serving, random dataset (concurrency-capped)"),
)
