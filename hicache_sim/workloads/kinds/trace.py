"""``trace``: a recorded trace (Mooncake or Bailian JSONL with prefix-chained block ids, Azure CSV
with arrivals and lengths only)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ..errors import WorkloadError
from ..records import Request
from ..traces import load_azure, load_bailian, load_mooncake, trace_path
from ..workload import Workload
from .registry import WORKLOAD_KINDS, BuildContext, KindSpec, WorkloadKind

#: The loader of each format with block ids (page keys from the trace).
BLOCK_LOADERS = {"mooncake": load_mooncake, "bailian": load_bailian}


class TraceSpec(KindSpec):
    path: str = Field("builtin:mooncake/conversation_trace.jsonl", description="file, or builtin:<name>")
    format: Literal["mooncake", "bailian", "azure"] = Field("mooncake", description="trace format")
    limit: int | None = Field(None, gt=0, description="first N requests only")
    time_scale: float = Field(1.0, gt=0, le=1e6, description="multiply arrival times (0.5 = twice the load)")
    block_size: int | None = Field(
        None, gt=0, description="tokens per hash id (default: 512 mooncake, 16 bailian; trace convert's --block-size)"
    )


def build(spec: TraceSpec, ctx: BuildContext) -> Workload:
    """The trace's requests, open loop at their own timestamps."""
    path = trace_path(spec.path, ctx.base_dir)
    if spec.format in BLOCK_LOADERS:
        load = BLOCK_LOADERS[spec.format]
        blocks = {} if spec.block_size is None else {"block_size": spec.block_size}
        reqs = load(
            path, ctx.page_size, partial_pages=ctx.partial_pages, limit=spec.limit, time_scale=spec.time_scale, **blocks
        )
    else:
        from ..synthetic import stream_keys  # numpy: imported for an Azure trace only

        rows = load_azure(path, limit=spec.limit, time_scale=spec.time_scale)
        # No prefix identity in the Azure trace: every request's pages are its own.
        reqs = [
            Request(f"a{i}", ts, inp, out, stream_keys(hash((ctx.seed, 9, i)), inp, ctx.page_size, ctx.partial_pages))
            for i, (ts, inp, out) in enumerate(rows)
        ]
    if not reqs:
        raise WorkloadError(str(path), None, "trace has no requests")
    return Workload(reqs)


WORKLOAD_KINDS.add("trace", WorkloadKind(TraceSpec, build, "a recorded trace"))
