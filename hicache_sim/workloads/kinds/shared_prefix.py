"""``shared_prefix``: groups of prompts sharing a system prompt (generated shared prefix)."""

from __future__ import annotations

from pydantic import Field

from ..workload import Workload
from .registry import WORKLOAD_KINDS, BuildContext, KindSpec, WorkloadKind


class SharedPrefixSpec(KindSpec):
    num_groups: int = Field(32, gt=0)
    prompts_per_group: int = Field(16, gt=0)
    system_prompt_length: int = Field(2048, gt=0)
    question_length: int = Field(128, gt=0)
    output_length: int = Field(128, gt=0)
    request_rate: float = Field(4.0, gt=0)

    def size_estimate(self) -> tuple[int, int]:
        n = self.num_groups * self.prompts_per_group
        return n, n * (self.system_prompt_length + self.question_length)


def build(spec: SharedPrefixSpec, ctx: BuildContext) -> Workload:
    from .. import synthetic  # numpy: imported when this kind is built

    return synthetic.shared_prefix(spec, ctx.page_size, ctx.seed, ctx.partial_pages)


WORKLOAD_KINDS.add("shared_prefix", WorkloadKind(SharedPrefixSpec, build, "groups sharing a system prompt"))
