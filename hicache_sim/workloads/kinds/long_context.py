"""``long_context``: document QA, each query a long document plus a question (bench_long_context)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ..workload import Workload
from .registry import WORKLOAD_KINDS, BuildContext, KindSpec, WorkloadKind


class LongContextSpec(KindSpec):
    num_documents: int = Field(20, gt=0)
    queries_per_document: int = Field(5, gt=0)
    context_length: int = Field(32768, gt=0)
    question_length: int = Field(64, gt=0)
    output_length: int = Field(64, gt=0)
    request_rate: float = Field(1.0, gt=0)
    order: Literal["grouped", "round_robin"] = Field("round_robin")

    def size_estimate(self) -> tuple[int, int]:
        n = self.num_documents * self.queries_per_document
        return n, n * (self.context_length + self.question_length)


def build(spec: LongContextSpec, ctx: BuildContext) -> Workload:
    from .. import synthetic  # numpy: imported when this kind is built

    return synthetic.long_context(spec, ctx.page_size, ctx.seed, ctx.partial_pages)


WORKLOAD_KINDS.add("long_context", WorkloadKind(LongContextSpec, build, "document QA over long contexts"))
