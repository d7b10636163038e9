"""``bench_serving``: SGLang ``python -m sglang.bench_serving``, after a warm-up request, under a
concurrency cap: ``--dataset-name random`` (independent prompts of drawn lengths at a request rate) or
``--dataset-name mooncake`` (a Mooncake trace's sessions at the trace's own times, prompts built from
their hash ids as bench_serving builds them: ``workloads/mooncake_serving.py``)."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, field_validator, model_validator

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
    """SGLang ``bench_serving.py`` with its random or mooncake dataset. Field names and defaults are its
    options (``--random-input-len`` -> ``random_input_len``, ...), as in SGLang 0.5.7 (random) and
    0.5.23 (mooncake)."""

    dataset_name: Literal["random", "mooncake"] = Field(
        "random",
        description="--dataset-name: random (lengths drawn as bench_serving draws them) or mooncake (a "
        "Mooncake trace replayed at its timestamps, prompts built from its hash ids; the random_* fields "
        "and request_rate are then not read, as bench_serving ignores them)",
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
    dataset_path: str | None = Field(
        None,
        description="--dataset-path (mooncake): the trace file, or builtin:<name>; null = the file "
        "--mooncake-workload names (bench_serving downloads it; conversation and synthetic ship with hicache-sim)",
    )
    mooncake_workload: Literal["mooncake", "conversation", "synthetic", "toolagent"] = Field(
        "conversation", description="--mooncake-workload: which Mooncake FAST'25 trace, when dataset_path is null"
    )
    mooncake_slowdown_factor: float = Field(
        1.0, gt=0, le=1e6, description="--mooncake-slowdown-factor: send times x this (2 = half the load)"
    )
    mooncake_num_rounds: int = Field(
        1,
        gt=0,
        le=1000,
        description="--mooncake-num-rounds: requests per trace record, all sent at its time; round r resends "
        "rounds 1..r-1 with placeholder answers",
    )
    tokenizer: str | None = Field(
        None,
        description="--tokenizer (mooncake): a local tokenizer.json or model folder counting the prompt "
        "tokens; null = the built-in word-level count (each word, and each group of up to 3 digits, one token)",
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

    @model_validator(mode="after")
    def _mooncake_fields(self) -> BenchServingSpec:
        """The mooncake options change nothing with the random dataset, and earlier runs are random runs:
        refuse what would be silently ignored."""
        if self.dataset_name == "random":
            for name in MOONCAKE_ONLY:
                if getattr(self, name) != type(self).model_fields[name].default:
                    raise ValueError(f"{name}: only read with dataset_name: mooncake")
        elif self.earlier_runs:
            raise ValueError("earlier_runs: only with dataset_name: random (they are random-dataset runs)")
        return self

    def rate(self) -> float:
        """The request rate as a float (``math.inf`` when every request is sent at once)."""
        return math.inf if self.request_rate == "inf" else float(self.request_rate)

    def size_estimate(self) -> tuple[int, int]:
        """(requests, prompt tokens) at their maximum: every prompt at ``random_input_len``."""
        if self.dataset_name == "mooncake":  # lengths come from the trace: its builder checks the pages
            return self.num_prompts * self.mooncake_num_rounds + self.warmup_requests, 0
        n = self.num_prompts + self.warmup_requests
        earlier = sum(r.num_prompts for r in self.earlier_runs)
        tokens = n * self.random_input_len + sum(r.num_prompts * r.random_input_len for r in self.earlier_runs)
        return n + earlier, tokens


#: Fields only the mooncake dataset reads.
MOONCAKE_ONLY = ("dataset_path", "mooncake_workload", "mooncake_slowdown_factor", "mooncake_num_rounds", "tokenizer")


def _random(spec: BenchServingSpec, ctx: BuildContext) -> Workload:
    from .. import synthetic  # numpy: imported when this kind is built

    return synthetic.bench_serving(spec, ctx.page_size, ctx.seed, ctx.partial_pages)


def _mooncake(spec: BenchServingSpec, ctx: BuildContext) -> Workload:
    from .. import mooncake_serving

    return mooncake_serving.build(spec, ctx)


#: ``dataset_name`` -> its builder.
DATASETS = {"random": _random, "mooncake": _mooncake}


def build(spec: BenchServingSpec, ctx: BuildContext) -> Workload:
    return DATASETS[spec.dataset_name](spec, ctx)


WORKLOAD_KINDS.add(
    "bench_serving",
    WorkloadKind(BenchServingSpec, build, "SGLang bench_serving, random or mooncake dataset (concurrency-capped)"),
)
