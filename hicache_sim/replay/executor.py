"""Execute transfers as real copies between the pools and time each one.

Two io backends, as SGLang has them (reference 3.6):

- ``kernel``: one batched gather on the source side (``index_select`` over page indices into a
  staging buffer), one bulk copy, one batched scatter on the destination side (``index_copy_``).
  Its cost grows with bytes, barely with the number of pages.
- ``direct``: one ``copy_`` per contiguous piece (page x layer x K/V), the pieces
  ``linkmodel.segments_for`` counts. Its cost grows with pieces.

H2D load-back runs per layer by default (SGLang loads layer by layer so prefill can start on layer
0), or whole; D2H backup moves all layers at once. On CUDA each direction has its own stream, the
host pool and staging are pinned, and the stream part is timed with CUDA events (a D2H kernel's
host-side scatter, which runs on the CPU after the copy, is added with perf_counter). On CPU the
same sequence runs on CPU tensors, timed with a host clock (CPU ops are synchronous): elapsed time, or
this thread's CPU time (``clock="cpu"``, what the sweep and validate-model use on one torch thread). Index tensors
are built before the clock starts: timing covers the copy, not Python bookkeeping.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass

import pandas as pd
import torch

from ..hardware.linkmodel import segments_for
from ..hardware.presets import IO_BACKEND_MODELS, IO_BACKENDS
from .pools import DEFAULT_POOL_BYTES, KVPools, ReplayError, device_label

DEFAULT_FLUSH_BYTES = 64 << 20
"""CPU cache flush before each measured copy: twice a large server L3 slice (see flush_caches)."""

REPLAYED_KINDS = ("d2h", "h2d")
"""Transfer kinds that cross the host<->device link; storage kinds (s2h, h2s) are skipped."""


@dataclass(frozen=True)
class Timing:
    """One executed transfer: seconds, and the separately issued operations (link-model latencies)."""

    duration_s: float
    launches: int


CPU_CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}
"""Host clocks for CPU copies. ``wall``: elapsed time. ``cpu``: this thread's CPU time, which leaves
out the slices the scheduler gives to other processes: on a loaded machine a copy longer than a
slice is descheduled mid-copy and its wall time measures the neighbours (see ``replay.sweep``)."""


def default_clock(cpu_threads: int | None) -> str:
    """The host clock for CPU copies on ``cpu_threads`` torch threads: this thread's CPU time when
    there is one (the copy then runs on this thread alone), else elapsed time."""
    return "cpu" if cpu_threads == 1 else "wall"


class _Clock:
    """Times one operation: CUDA events on ``stream`` on GPU, the host clock ``now`` on CPU."""

    def __init__(self, stream, now=time.perf_counter) -> None:
        self.stream = stream
        self.now = now
        if stream is not None:
            self.ev0 = torch.cuda.Event(enable_timing=True)
            self.ev1 = torch.cuda.Event(enable_timing=True)

    def start(self) -> None:
        if self.stream is None:
            self.t0 = self.now()
        else:
            self.ev0.record(self.stream)

    def stop(self) -> float:
        """Seconds since ``start``, after everything issued on the stream has finished."""
        if self.stream is None:
            return self.now() - self.t0
        self.ev1.record(self.stream)
        self.ev1.synchronize()
        return self.ev0.elapsed_time(self.ev1) / 1e3


class Executor:
    """Performs D2H and H2D transfers between ``pools`` with one io backend.

    Logged page indices larger than a (down-sized) pool wrap modulo its size. Kernel-style transfers
    larger than the staging cap are split into chunks, each one more launch.
    """

    def __init__(
        self,
        pools: KVPools,
        io_backend: str,
        *,
        max_staging_bytes: int | None = None,
        flush_bytes: int | None = None,
        clock: str = "wall",
    ) -> None:
        if io_backend not in IO_BACKENDS:
            raise ReplayError(f"io_backend {io_backend!r}: expected one of {', '.join(IO_BACKENDS)}")
        if clock not in CPU_CLOCKS:
            raise ReplayError(f"clock {clock!r}: expected one of {', '.join(CPU_CLOCKS)}")
        self.now = CPU_CLOCKS[clock]
        self.pools = pools
        self.io_backend = io_backend
        # The kernel backend gathers a layer's pieces in one launch; the direct one copies piece by piece.
        self._one_launch = IO_BACKEND_MODELS.get(io_backend).pieces_in_one_launch
        self.device = pools.device
        self.cuda = pools.device.type == "cuda"
        cap = max_staging_bytes if max_staging_bytes is not None else DEFAULT_POOL_BYTES[device_label(self.device)]
        self.chunk_pages = max(1, cap // pools.shape.page_bytes)
        self.h2d_stream = torch.cuda.Stream(self.device) if self.cuda else None
        self.d2h_stream = torch.cuda.Stream(self.device) if self.cuda else None
        self._host_stage = torch.empty(0, dtype=pools.shape.torch_dtype)
        if flush_bytes is None:
            flush_bytes = 0 if self.cuda else DEFAULT_FLUSH_BYTES
        self._flush = torch.empty(flush_bytes, dtype=torch.uint8)
        self._flushes = 0
        self._dev_stage = torch.empty(0, dtype=pools.shape.torch_dtype, device=self.device)

    # ---------------------------------------------------------------------------- public API

    def d2h(self, device_pages: Sequence[int], host_pages: Sequence[int]) -> Timing:
        """Back up device pages into host pages (all layers), timed."""
        d, h = self._slots(device_pages, host_pages)
        if self._one_launch:
            return self._kernel_d2h(d, h)
        return self._direct(self.pools.device_view(), self.pools.host_view(), d, h, False, self.d2h_stream)

    def h2d(self, host_pages: Sequence[int], device_pages: Sequence[int], *, per_layer: bool = True) -> Timing:
        """Load host pages into device pages, layer by layer (``per_layer``) or all at once, timed."""
        d, h = self._slots(device_pages, host_pages)
        if self._one_launch:
            return self._kernel_h2d(h, d, per_layer)
        return self._direct(self.pools.host_view(), self.pools.device_view(), h, d, per_layer, self.h2d_stream)

    def flush_caches(self) -> None:
        """Overwrite a buffer larger than the CPU's last-level cache (untimed; no-op on CUDA).

        KV pages being backed up or loaded back were last touched long ago: measuring every copy
        from a cold cache is closer to that, and far less noisy than whatever the previous copy left.
        """
        if self._flush.numel():
            self._flushes += 1
            self._flush.fill_(self._flushes & 0xFF)

    def segments(self, pages: int) -> int:
        """Contiguous pieces a transfer of ``pages`` pages moves (the link model's count)."""
        s = self.pools.shape
        return segments_for(pages, self.pools.layout, s.num_layers, s.kv_factor)

    def execute(self, record: Mapping, *, per_layer: bool = True) -> dict | None:
        """Run one transfer-log record; its measurement row, or None for a storage transfer."""
        kind = str(record["kind"])
        if kind not in REPLAYED_KINDS:
            return None
        tid = record.get("id")
        dev, host = _page_list(record.get("device_pages")), _page_list(record.get("host_pages"))
        pages = int(record["pages"])
        if len(dev) != pages or len(host) != pages:
            raise ReplayError(f"transfer {tid}: pages={pages} but {len(dev)} device and {len(host)} host page indices")
        page_bytes = self.pools.shape.page_bytes
        if int(record["bytes"]) != pages * page_bytes:
            raise ReplayError(
                f"transfer {tid}: the log says {int(record['bytes'])} bytes, the pools give "
                f"{pages} x {page_bytes}; the transfer log and the scenario do not match"
            )
        self.flush_caches()
        if kind == "d2h":
            t = self.d2h(dev, host)
            granularity = "whole"
        else:
            t = self.h2d(host, dev, per_layer=per_layer)
            granularity = "per_layer" if per_layer else "whole"
        row = self.row(kind, pages, t, granularity)
        row.update(transfer_id=tid, reason=record.get("reason", ""))
        return row

    def row(self, direction: str, pages: int, t: Timing, granularity: str) -> dict:
        """A measurement row (the columns ``hicache-sim calibrate`` reads)."""
        s = self.pools.shape
        return {
            "direction": direction,
            "pages": pages,
            "bytes": pages * s.page_bytes,
            "segments": self.segments(pages),
            "launches": t.launches,
            "granularity": granularity,
            "layout": self.pools.layout,
            "io_backend": self.io_backend,
            "device": device_label(self.device),
            "page_size": s.page_size,
            "page_bytes": s.page_bytes,
            "num_layers": s.num_layers,
            "kv_factor": s.kv_factor,
            "duration_s": t.duration_s,
        }

    # ---------------------------------------------------------------------------- internals

    def _slots(self, device_pages: Sequence[int], host_pages: Sequence[int]) -> tuple[list[int], list[int]]:
        nd, nh = self.pools.device_pages, self.pools.host_pages
        return [int(p) % nd for p in device_pages], [int(p) % nh for p in host_pages]

    def _stream(self, stream):
        """Run on ``stream`` after what the default stream has queued (index tensors, pool fills)."""
        if stream is None:
            return nullcontext()
        stream.wait_stream(torch.cuda.current_stream(self.device))
        return torch.cuda.stream(stream)

    def _staging(self, n_pages: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Host staging (pinned on CUDA) and device staging for ``n_pages`` pages, grown on demand.

        On CPU the device staging is the host staging: there is no second memory to copy into.
        """
        need = n_pages * self.pools.shape.page_elements
        if self._host_stage.numel() < need:
            self._host_stage = torch.empty(need, dtype=self.pools.shape.torch_dtype, pin_memory=self.cuda)
            if self.cuda:
                self._dev_stage = torch.empty(need, dtype=self.pools.shape.torch_dtype, device=self.device)
                torch.cuda.synchronize(self.device)
        return self._host_stage, (self._dev_stage if self.cuda else self._host_stage)

    def _chunks(self, src: list[int], dst: list[int]) -> list[tuple[list[int], list[int]]]:
        """(source slots, destination slots) per chunk of at most ``chunk_pages`` pages."""
        step = self.chunk_pages
        return [(src[i : i + step], dst[i : i + step]) for i in range(0, len(src), step)]

    def _kernel_d2h(self, d: list[int], h: list[int]) -> Timing:
        s = self.pools.shape
        dv, hv = self.pools.device_view(), self.pools.host_view()
        total, launches = 0.0, 0
        for dc, hc in self._chunks(d, h):
            n = len(dc)
            host_stage, dev_stage = self._staging(n)
            shape = (s.kv_factor, s.num_layers, n, s.page_size, s.heads, s.head_dim)
            numel = n * s.page_elements
            hstage, dstage = host_stage[:numel].view(shape), dev_stage[:numel].view(shape)
            didx = torch.tensor(dc, dtype=torch.int64, device=self.device)
            hidx = torch.tensor(hc, dtype=torch.int64)
            clock = _Clock(self.d2h_stream, self.now)
            with self._stream(self.d2h_stream):
                clock.start()
                torch.index_select(dv, 2, didx, out=dstage)
                if self.cuda:
                    hstage.copy_(dstage, non_blocking=True)
                elapsed = clock.stop()
            t0 = self.now()
            hv.index_copy_(2, hidx, hstage)  # host-side scatter: CPU work on both device kinds
            total += elapsed + self.now() - t0
            launches += 1
        return Timing(total, launches)

    def _kernel_h2d(self, h: list[int], d: list[int], per_layer: bool) -> Timing:
        s = self.pools.shape
        dv, hv = self.pools.device_view(), self.pools.host_view()
        total, launches = 0.0, 0
        for hc, dc in self._chunks(h, d):
            n = len(hc)
            host_stage, dev_stage = self._staging(n)
            numel = n * s.page_elements
            didx = torch.tensor(dc, dtype=torch.int64, device=self.device)
            hidx = torch.tensor(hc, dtype=torch.int64)
            clock = _Clock(self.h2d_stream, self.now)
            if per_layer:  # staging (L, pages, kv, ...): each layer's slice contiguous, pages first
                shape = (s.num_layers, n, s.kv_factor, s.page_size, s.heads, s.head_dim)
                hstage, dstage = host_stage[:numel].view(shape), dev_stage[:numel].view(shape)
                with self._stream(self.h2d_stream):
                    clock.start()  # on an idle stream: the host-side gathers fall inside the interval
                    for layer in range(s.num_layers):
                        # one gather and one scatter per layer, over a pages-first view of the layer
                        torch.index_select(hv[:, layer].movedim(1, 0), 0, hidx, out=hstage[layer])
                        if self.cuda:
                            dstage[layer].copy_(hstage[layer], non_blocking=True)
                        dv[:, layer].movedim(1, 0).index_copy_(0, didx, dstage[layer])
                    total += clock.stop()
                launches += s.num_layers
            else:
                shape = (s.kv_factor, s.num_layers, n, s.page_size, s.heads, s.head_dim)
                hstage, dstage = host_stage[:numel].view(shape), dev_stage[:numel].view(shape)
                with self._stream(self.h2d_stream):
                    clock.start()
                    torch.index_select(hv, 2, hidx, out=hstage)
                    if self.cuda:
                        dstage.copy_(hstage, non_blocking=True)
                    dv.index_copy_(2, didx, dstage)
                    total += clock.stop()
                launches += 1
        return Timing(total, launches)

    def _direct(
        self, src: torch.Tensor, dst: torch.Tensor, s_slots: list[int], d_slots: list[int], per_layer: bool, stream
    ) -> Timing:
        """One ``copy_`` per piece; on CUDA asynchronous on ``stream`` (pinned host memory)."""
        shape = self.pools.shape
        pairs = list(zip(s_slots, d_slots))
        clock = _Clock(stream, self.now)
        with self._stream(stream):
            clock.start()
            for layer in range(shape.num_layers):
                # K and V of a layer's page are apart in every layout (SGLang copies them as two pieces)
                views = [(src[kv, layer], dst[kv, layer]) for kv in range(shape.kv_factor)]
                for s_view, d_view in views:
                    for sp, dp in pairs:
                        d_view[dp].copy_(s_view[sp], non_blocking=True)
            elapsed = clock.stop()
        return Timing(elapsed, shape.num_layers if per_layer else 1)


def _page_list(value) -> list[int]:
    """Page indices from a log cell: a list, a numpy array (parquet) or nothing."""
    if value is None:
        return []
    return [int(x) for x in value]


def execute_log(
    records: Iterable[Mapping],
    executor: Executor,
    *,
    per_layer: bool = True,
    limit: int | None = None,
    progress: Callable[[], None] | None = None,
) -> pd.DataFrame:
    """Execute the host<->device transfers of a transfer log in order; one measurement row each.

    ``limit`` stops after that many executed transfers; storage transfers are skipped silently
    (the caller can count them). Rows carry the log's ``transfer_id`` and ``reason``.
    """
    rows = []
    for rec in records:
        if limit is not None and len(rows) >= limit:
            break
        row = executor.execute(rec, per_layer=per_layer)
        if row is not None:
            rows.append(row)
            if progress is not None:
                progress()
    return pd.DataFrame(rows)
