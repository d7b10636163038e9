"""What the timed world records: one row per request, time series sampled on a fixed simulated-time
grid, and the transfer log (each core Transfer with its simulated start and end)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..core import HiCache, Transfer
from ..workloads import Request
from .links import Link


@dataclass(slots=True)
class RequestRecord:
    """Timestamps (simulated s) and hits of one request. Hits are those found at its first admission
    (a retracted request's later re-admissions would count its own checkpoints as hits)."""

    req: Request
    arrival_s: float | None = None
    admit_s: float | None = None
    prefetch_done_s: float | None = None
    first_token_s: float | None = None
    finish_s: float | None = None
    load_wait_s: float = 0.0
    prompt_pages: int = 0
    device_hit_pages: int = 0
    host_hit_pages: int = 0
    storage_hit_pages: int = 0
    retractions: int = 0
    status: str = "pending"
    reason: str = ""

    def as_dict(self, page_size: int) -> dict:
        """The row of ``TimedResult.requests``. Token hits follow the page prefix device, host, storage."""
        r = self.req
        d, h, s = self.device_hit_pages, self.host_hit_pages, self.storage_hit_pages
        td = r.page_tokens(page_size, d)
        th = r.page_tokens(page_size, d + h) - td
        ts = r.page_tokens(page_size, d + h + s) - td - th
        arrival = self.arrival_s

        def since(t: float | None) -> float | None:
            return None if t is None or arrival is None else t - arrival

        prefetch_wait = since(self.prefetch_done_s)
        return {
            "rid": r.rid,
            "arrival_s": arrival,
            "admit_s": self.admit_s,
            "first_token_s": self.first_token_s,
            "finish_s": self.finish_s,
            "queue_s": since(self.admit_s),
            "prefetch_wait_s": prefetch_wait
            if prefetch_wait is not None
            else (0.0 if self.admit_s is not None else None),
            "load_wait_s": self.load_wait_s if self.admit_s is not None else None,
            "ttft_s": since(self.first_token_s),
            "e2e_s": since(self.finish_s),
            "input_tokens": r.input_tokens,
            "output_tokens": r.output_tokens,
            "prompt_pages": self.prompt_pages or len(r.page_keys),
            "device_hit_pages": d,
            "host_hit_pages": h,
            "storage_hit_pages": s,
            "device_hit_tokens": td,
            "host_hit_tokens": th,
            "storage_hit_tokens": ts,
            "retractions": self.retractions,
            "status": self.status,
            "reason": self.reason,
        }


UTIL_LINKS = ("h2d", "d2h", "storage_read", "storage_write")
MAX_GAP_SAMPLES = 1000


class TimeSeries:
    """Samples on the grid ``k x interval``; each sample is the state just before the first event at
    or after its time, so pool occupancy and utilisation are exact on the grid."""

    def __init__(
        self, interval_s: float, cache: HiCache, links: dict[str, Link], queues: Callable[[], tuple[int, int]]
    ) -> None:
        self.interval_s = interval_s
        self.cache = cache
        self.links = links
        self.queues = queues
        self.rows: list[dict] = []
        self.next_s = 0.0
        self._busy_prev = {name: 0.0 for name in UTIL_LINKS}
        self._span = interval_s

    def before(self, t_next: float) -> None:
        """Record every grid point up to ``t_next`` (the time of the event about to run). Nothing changes
        between events, so across an idle gap of more than ``MAX_GAP_SAMPLES`` grid points only its first
        and last points are recorded: memory stays bounded whatever the simulated span."""
        k = round(self.next_s / self.interval_s)
        while self.next_s <= t_next:
            self._sample(self.next_s)
            last = int(t_next // self.interval_s)
            step = last - k if last - k > MAX_GAP_SAMPLES else 1
            k += step
            self._span = step * self.interval_s
            self.next_s = k * self.interval_s

    def _sample(self, t: float) -> None:
        c = self.cache
        res = c.residency()
        waiting, running = self.queues()
        row = {
            "t_s": t,
            "device_pages": res["device_pages"],
            "host_pages": res["host_pages"],
            "mirror_pages": res["mirror_pages"],
            "device_used_pages": c.device.used(),
            "host_used_pages": c.host.used(),
            "waiting": waiting,
            "running": running,
        }
        span = self._span if self.rows else 0.0
        for name in UTIL_LINKS:
            link = self.links.get(name)
            busy = link.busy_until(t) if link is not None else 0.0
            row[f"{name}_util"] = (busy - self._busy_prev[name]) / span if span > 0 else 0.0
            self._busy_prev[name] = busy
        self.rows.append(row)


class TransferLog:
    """Every transfer the core issued, with simulated start and end (None when never started).
    ``keep=False`` only counts them: a run that writes no transfer log holds none."""

    def __init__(self, keep: bool = True) -> None:
        self.keep = keep
        self.count = 0
        self._rows: list[tuple[Transfer, float | None, float | None]] = []

    def add(self, t: Transfer, start_s: float | None, end_s: float | None) -> None:
        self.count += 1
        if self.keep:
            self._rows.append((t, start_s, end_s))

    def __len__(self) -> int:
        return self.count

    def records(self) -> list[dict]:
        """Transfer.record() plus start_s, end_s, duration_s, in completion order."""
        out = []
        for t, start, end in self._rows:
            rec = t.record()
            rec["start_s"] = start
            rec["end_s"] = end
            rec["duration_s"] = None if start is None or end is None else end - start
            out.append(rec)
        return out
