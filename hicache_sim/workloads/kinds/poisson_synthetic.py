"""``poisson_synthetic``: Poisson arrivals over shared prefixes, optionally with an Azure trace's
arrivals and lengths."""

from __future__ import annotations

from pydantic import Field

from ..traces import load_azure, trace_path
from ..workload import Workload
from .registry import WORKLOAD_KINDS, BuildContext, KindSpec, WorkloadKind


class PoissonSpec(KindSpec):
    num_requests: int = Field(1000, gt=0)
    request_rate: float = Field(4.0, gt=0)
    input_length: int = Field(2048, gt=0)
    output_length: int = Field(256, gt=0)
    shared_fraction: float = Field(0.5, ge=0, le=1, description="share of each prompt that is a common prefix")
    num_prefixes: int = Field(8, gt=0)
    lengths_from: str | None = Field(None, description="azure trace file or builtin: for arrivals and lengths")

    def size_estimate(self) -> tuple[int, int]:
        return self.num_requests, self.num_requests * self.input_length


def build(spec: PoissonSpec, ctx: BuildContext) -> Workload:
    rows = load_azure(trace_path(spec.lengths_from, ctx.base_dir)) if spec.lengths_from else None
    from .. import synthetic  # numpy: imported when this kind is built

    return synthetic.poisson_synthetic(spec, ctx.page_size, ctx.seed, ctx.partial_pages, rows)


WORKLOAD_KINDS.add("poisson_synthetic", WorkloadKind(PoissonSpec, build, "Poisson arrivals over shared prefixes"))
