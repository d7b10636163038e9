"""Microbenchmark sweep: the measurements ``hicache-sim calibrate`` fits the link model to.

The link model has three identifiable costs (per operation, per contiguous piece, per byte), so the
sweep varies what separates them: page counts 1..4,096 (log-spaced; bytes and pieces) and page sizes
16/64/256 (piece size at a given byte count), for every host layout and io backend, D2H whole (as
SGLang backs up) and H2D per layer (as SGLang loads back; ``h2d_granularities`` adds whole loads,
whose per-operation cost differs on CPU, so mixing both in one group blurs the latency). Pages are
random slots (a pool after churn is fragmented), the points run in a seeded random order (drift from
other load on the machine spreads over all sizes instead of biasing one), every measurement starts
from a flushed CPU cache, and each repeat is a separate pass over the whole grid (a point's repeats
are minutes apart, so their median rejects a stretch of heavy load).

On CPU each copy is timed by this thread's CPU time (``clock="cpu"``, one torch thread), not by
elapsed time. On a loaded machine the scheduler deschedules the sweep for other processes' slices:
a copy shorter than a slice usually runs whole, a longer one (here above ~2 MB) waits out
neighbours mid-copy, so elapsed time bends the size curve the model is fitted to (measured under
load average 8: copies of 128 KB-2 MB at 0.3-0.7x the fit, above 2 MB at 1.3-2.2x; held-out
median error 62 %); CPU time leaves those waits out (load average 6-8: held-out median 5.4 %;
``results/calibration/README.md``). What it keeps is the slowdown while running (memory and cache shared with
neighbours), so a loaded machine still calibrates slower than an idle one. ``reference=True``
also times a fixed reference copy before each point and divides out the drift it shows
(``calibration.drift``); measured, it did not lower the held-out error (the slowdown that remains
depends on the copy's size, which one factor cannot follow), so it is off by default.

The default model is deliberately small (2 layers, 1 KV head of 32) so the full sweep runs on two CPU
cores in about a minute; a scenario's real dimensions can be given instead (``KVShape``).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import pandas as pd
import torch

from ..calibration.drift import DEFAULT_WINDOW, normalise_drift
from ..hardware.presets import IO_BACKENDS, MEM_LAYOUTS
from .executor import Executor, ReplayError, default_clock
from .pools import KVShape, allocate_pools, cpu_threads, device_name

DEFAULT_PAGE_COUNTS = tuple(2**i for i in range(13))  # 1, 2, 4, ..., 4096
REFERENCE_BYTES = 256 << 10
"""The reference copy: 256 KiB, in cache (see ``_Reference``)."""
REFERENCE_TRIES = 3


@dataclass(frozen=True)
class SweepConfig:
    """The grid. ``shape.page_size`` is replaced by each of ``page_sizes``."""

    page_counts: tuple[int, ...] = DEFAULT_PAGE_COUNTS
    page_sizes: tuple[int, ...] = (16, 64, 256)
    layouts: tuple[str, ...] = MEM_LAYOUTS
    io_backends: tuple[str, ...] = IO_BACKENDS
    directions: tuple[str, ...] = ("d2h", "h2d")
    h2d_granularities: tuple[str, ...] = ("per_layer",)  # as SGLang loads back (and the world models)
    repeats: int = 3
    warmup: int = 0  # > 0: one unrecorded pass over the grid first (caches are flushed before every run anyway)
    shape: KVShape = field(
        default_factory=lambda: KVShape(num_layers=2, kv_factor=2, heads=1, head_dim=32, page_size=16)
    )
    seed: int = 0
    max_pool_bytes: int | None = None
    cpu_threads: int | None = 1  # torch threads on CPU (see pools.cpu_threads); None: torch's default
    clock: str | None = None  # host clock of CPU copies (executor.CPU_CLOCKS); None: see host_clock
    reference: bool = False  # time the drift reference before each point (calibration.drift)
    reference_window: int = DEFAULT_WINDOW

    def host_clock(self) -> str:
        """The clock CPU copies are timed with: this thread's CPU time when torch runs one thread
        (the copy then runs on this thread alone), else elapsed time."""
        if self.clock is None:
            return default_clock(self.cpu_threads)
        if self.clock == "cpu" and self.cpu_threads != 1:
            raise ReplayError(
                f"clock cpu counts this thread's CPU time only: it needs 1 torch thread, not {self.cpu_threads}"
            )
        return self.clock

    def uses_reference(self, device: torch.device) -> bool:
        """Whether the sweep times the drift reference on ``device``."""
        return self.reference

    def limited(self, max_pages: int) -> SweepConfig:
        """The same grid with page counts up to ``max_pages`` (a smaller, faster sweep)."""
        counts = tuple(c for c in self.page_counts if c <= max_pages) or (1,)
        return replace(self, page_counts=counts)

    def operations(self) -> list[tuple[str, str]]:
        """(direction, granularity) pairs measured per page count."""
        ops = []
        for d in self.directions:
            grans = self.h2d_granularities if d == "h2d" else ("whole",)
            ops.extend((d, g) for g in grans)
        return ops

    def size(self) -> int:
        """Measurements the sweep records (before pool caps drop any page count)."""
        per = len(self.page_counts) * len(self.operations()) * self.repeats
        return per * len(self.page_sizes) * len(self.layouts) * len(self.io_backends)


def sweep_metadata(cfg: SweepConfig, df: pd.DataFrame, device: torch.device, wall_s: float) -> dict:
    """What ``sweep.json`` records beside the measurements: the grid, the model, the device, the time."""
    s = cfg.shape
    return {
        "device": device.type,
        "device_name": str(df["device_name"].iloc[0]) if len(df) else "",
        "rows": len(df),
        "wall_s": round(wall_s, 1),
        "page_counts": list(cfg.page_counts),
        "page_sizes": list(cfg.page_sizes),
        "layouts": list(cfg.layouts),
        "io_backends": list(cfg.io_backends),
        "operations": [list(op) for op in cfg.operations()],
        "repeats": cfg.repeats,
        "seed": cfg.seed,
        "model": {
            "num_layers": s.num_layers,
            "kv_factor": s.kv_factor,
            "heads": s.heads,
            "head_dim": s.head_dim,
            "dtype": s.dtype,
        },
        "cpu_threads": cfg.cpu_threads,
        "clock": cfg.host_clock() if device.type == "cpu" else "cuda events",
        "reference": {"bytes": REFERENCE_BYTES, "window": cfg.reference_window} if cfg.uses_reference(device) else None,
    }


def run_sweep(cfg: SweepConfig, device: torch.device, *, progress: Callable[[int], None] | None = None) -> pd.DataFrame:
    """Run the grid on ``device``; one row per measurement (plus ``repeat`` and ``point``).

    Page counts a capped pool cannot hold are skipped (``progress`` still advances for them). Rows
    are in measurement order (``seq``) and keep the raw duration (``duration_raw_s``); with the
    reference, ``reference_s`` and ``drift_factor`` too, and ``duration_s`` is drift-corrected.
    """
    with cpu_threads(cfg.cpu_threads if device.type == "cpu" else None):
        df = _run(cfg, device, progress, _Reference(device) if cfg.uses_reference(device) else None)
    df["duration_raw_s"] = df["duration_s"] if len(df) else pd.Series(dtype=float)
    if "reference_s" in df.columns and len(df):
        df = normalise_drift(df, cfg.reference_window)
    return df


class _Reference:
    """The drift reference: the fastest of ``REFERENCE_TRIES`` back-to-back copies of a
    ``REFERENCE_BYTES`` buffer that lives in cache (the first copy warms it, untimed).

    A copy in cache measures what the machine gives this process at that moment (its share of a
    core, the clock, a sibling hyperthread's load) and not the memory state the previous point left
    (a cold 1 MiB reference took 124 to 190 us on a quiet machine depending on the previous copy's
    size); the fastest of a few rejects a tick lost by one of them. It runs before the cache flush,
    so the measured copy starts from the same state as without a reference.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.src = torch.ones(REFERENCE_BYTES, dtype=torch.uint8, pin_memory=device.type == "cuda")
        self.dst = torch.empty(REFERENCE_BYTES, dtype=torch.uint8, device=device)

    def _copy(self) -> float:
        t0 = time.perf_counter()
        self.dst.copy_(self.src)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter() - t0

    def time(self) -> float:
        self._copy()
        return min(self._copy() for _ in range(REFERENCE_TRIES))


def _run(
    cfg: SweepConfig, device: torch.device, progress: Callable[[int], None] | None, ref: _Reference | None
) -> pd.DataFrame:
    rng = random.Random(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    rows: list[dict] = []
    name = device_name(device)
    slots: dict[tuple, tuple[list[int], list[int]]] = {}  # (page size, layout, io, op, count) -> pages
    # On CUDA torch's host threads are not limited (host-side scatters may run on several): elapsed time.
    clock = cfg.host_clock() if device.type == "cpu" else "wall"
    for rep in range(-min(cfg.warmup, 1), cfg.repeats):
        # One pass over the whole grid per repeat: a configuration's repeats lie minutes apart, so the
        # median of its repeats rejects a stretch of heavy load on a shared machine rather than
        # inheriting it (repeats back to back share the machine's state and drift together).
        for page_size in cfg.page_sizes:
            shape = replace(cfg.shape, page_size=page_size)
            for layout in cfg.layouts:
                want = max(cfg.page_counts)
                pools = allocate_pools(shape, layout, want, want, device, max_pool_bytes=cfg.max_pool_bytes)
                for io in cfg.io_backends:
                    ex = Executor(pools, io, max_staging_bytes=cfg.max_pool_bytes, clock=clock)
                    counts = [c for c in cfg.page_counts if c <= min(pools.device_pages, pools.host_pages)]
                    skipped = (len(cfg.page_counts) - len(counts)) * len(cfg.operations())
                    if counts:
                        _warm_up(ex, max(counts))
                    points = [(op, c) for op in cfg.operations() for c in counts]
                    rng.shuffle(points)
                    for (direction, gran), count in points:
                        key = (page_size, layout, io, direction, gran, count)
                        if key not in slots:
                            dev = torch.randperm(pools.device_pages, generator=gen)[:count].tolist()
                            host = torch.randperm(pools.host_pages, generator=gen)[:count].tolist()
                            slots[key] = (dev, host)
                        dev, host = slots[key]
                        ref_s = ref.time() if ref is not None else None
                        ex.flush_caches()
                        if direction == "d2h":
                            t = ex.d2h(dev, host)
                        else:
                            t = ex.h2d(host, dev, per_layer=gran == "per_layer")
                        if rep < 0:
                            continue
                        row = ex.row(direction, count, t, gran)
                        row.update(repeat=rep, device_name=name, seq=len(rows))
                        if ref_s is not None:
                            row["reference_s"] = ref_s
                        rows.append(row)
                        if progress is not None:
                            progress(1)
                    if progress is not None and skipped and rep >= 0:
                        progress(skipped)
                del pools
    return pd.DataFrame(rows)


def _warm_up(ex: Executor, pages: int) -> None:
    """One unrecorded transfer each way at the largest size: grows staging, warms caches and code."""
    slots = list(range(pages))
    ex.d2h(slots, slots)
    ex.h2d(slots, slots, per_layer=False)
