"""``trace``: a recorded trace (Mooncake or Bailian JSONL with prefix-chained block ids, Azure CSV
with arrivals and lengths only)."""

from __future__ import annotations

from array import array
from functools import partial
from typing import Literal

from pydantic import Field

from ..errors import WorkloadError
from ..lazy import LazyRequests
from ..records import Request
from ..traces import load_azure, open_bailian, open_mooncake, trace_path
from ..workload import Workload
from .registry import WORKLOAD_KINDS, BuildContext, KindSpec, WorkloadKind

#: The loader of each format with block ids (page keys from the trace).
BLOCK_LOADERS = {"mooncake": open_mooncake, "bailian": open_bailian}


class TraceSpec(KindSpec):
    path: str = Field("builtin:mooncake/conversation_trace.jsonl", description="file, or builtin:<name>")
    format: Literal["mooncake", "bailian", "azure"] = Field("mooncake", description="trace format")
    limit: int | None = Field(None, gt=0, description="first N requests only")
    time_scale: float = Field(1.0, gt=0, le=1e6, description="multiply arrival times (0.5 = twice the load)")
    block_size: int | None = Field(
        None, gt=0, description="tokens per hash id (default: 512 mooncake, 16 bailian; trace convert's --block-size)"
    )


def build(spec: TraceSpec, ctx: BuildContext) -> Workload:
    """The trace's requests, open loop at their own timestamps, each built from the file when read
    (``workloads/lazy.py``): a long trace is never held whole."""
    path = trace_path(spec.path, ctx.base_dir)
    if spec.format in BLOCK_LOADERS:
        load = BLOCK_LOADERS[spec.format]
        blocks = {} if spec.block_size is None else {"block_size": spec.block_size}
        reqs = load(
            path, ctx.page_size, partial_pages=ctx.partial_pages, limit=spec.limit, time_scale=spec.time_scale, **blocks
        )
    else:
        rows = load_azure(path, limit=spec.limit, time_scale=spec.time_scale)
        make = partial(_azure_request, rows, ctx)
        reqs = LazyRequests(len(rows), make, array("d", (t for t, _, _ in rows)), unique_rids=True)
    if not reqs:
        raise WorkloadError(str(path), None, "trace has no requests")
    return Workload(reqs)


def _azure_request(rows: list[tuple[float, int, int]], ctx: BuildContext, i: int) -> Request:
    """Row ``i`` of an Azure trace. No prefix identity in the Azure trace: every request's pages are its own."""
    from ..synthetic import stream_keys  # numpy: imported for an Azure trace only

    ts, inp, out = rows[i]
    return Request(f"a{i}", ts, inp, out, stream_keys(hash((ctx.seed, 9, i)), inp, ctx.page_size, ctx.partial_pages))


WORKLOAD_KINDS.add("trace", WorkloadKind(TraceSpec, build, "a recorded trace"))
