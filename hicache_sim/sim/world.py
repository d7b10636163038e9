"""The timed world: one HiCache, PCIe and storage links, a compute model and an SGLang-like scheduler
in a SimPy environment, fed by the workload's arrival process.

``run_timed`` builds the world, runs it until no event is left, checks conservation (every arrival
finished or rejected with a reason; nothing left locked, pinned or in flight; bytes per link equal
to the bytes of the core's transfers) and returns a :class:`TimedResult`. Everything lives in the
World instance: two simulations in one process never share state, and the same scenario and seed
give identical results (SimPy orders same-time events by priority and insertion; no wall clock).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import simpy

from ..core import ConfigError, HiCache, check
from ..simconfig import HasSimConfig
from ..workloads import Request
from ..workloads.lazy import rids_known_unique
from ..workloads.synthetic import Workload
from ..workloads.workload import MAX_CLOCK_S
from .arrivals import arrivals_for
from .compute import ComputeModel, StepTimeModel
from .engine import Scheduler
from .links import Link, offload_params, storage_params
from .metrics import RequestRecord, TimeSeries, TransferLog
from .requests import SimRequest
from .transport import KVLayout, Transport


class SimulationError(RuntimeError):
    """The timed run ended in an inconsistent state (a bug, or a deadlock): the message says what."""


@dataclass
class TimedResult:
    """Output of one timed run. ``requests`` are in workload order; times in simulated seconds."""

    requests: list[dict]
    timeseries: list[dict]
    links: dict[str, dict]
    sim_time_s: float
    cache: HiCache
    counters: dict
    transfer_log: TransferLog = field(repr=False, default_factory=TransferLog)

    @property
    def transfers(self) -> list[dict]:
        """Transfer log rows: Transfer.record() plus start_s, end_s, duration_s (built on demand)."""
        return self.transfer_log.records()


class RequestLedger:
    """The requests of one run as they finish: counts (done, finished, rejected, rejected without a
    reason), and each done request's row handed to ``on_row`` once no earlier request (workload order)
    waits for it, its record then dropped. Shared by the one-engine world and the data-parallel front."""

    page: int
    progress: Callable[[int], None] | None
    arrivals: Any

    def _init_ledger(self, n: int, on_row: Callable[[dict], None] | None) -> None:
        # A record lives from its arrival until it and every request before it in workload order are
        # done; then its row goes to ``on_row`` (or the kept list) and the record is dropped. Memory
        # holds the requests in flight, not the run.
        self.records: list[RequestRecord | None] = [None] * n
        self.rows: list[dict] = []
        self.on_row = on_row if on_row is not None else self.rows.append
        self._emitted = 0
        self.n_arrived = 0
        self.n_finished = 0
        self.n_rejected = 0
        self.no_reason: list[str] = []
        self.n_done = 0

    def _complete(self, r: SimRequest) -> None:
        """``r`` is done (finished or rejected): count it, hand on the rows it unblocks, tell the sender."""
        self.n_done += 1
        rec = r.rec
        if rec.status == "finished":
            self.n_finished += 1
        elif rec.status == "rejected":
            self.n_rejected += 1
            if not rec.reason:
                self.no_reason.append(rec.req.rid)
        self._emit()
        if self.progress is not None:
            self.progress(self.n_done)
        self.arrivals.on_done(r.req)

    def _emit(self) -> None:
        """Hand on the rows of the done requests that no earlier request (workload order) waits for."""
        recs = self.records
        k = self._emitted
        while k < len(recs):
            rec = recs[k]
            if rec is None or rec.status not in ("finished", "rejected"):
                break
            self.on_row(rec.as_dict(self.page))
            self._row_emitted(k)
            recs[k] = None
            k += 1
        self._emitted = k

    def _row_emitted(self, k: int) -> None:
        """Called after request ``k``'s row is handed on (the data-parallel front records its rank)."""


class World(RequestLedger):
    """Wiring of one timed simulation (see module docstring)."""

    #: False for an attention-DP rank: the lockstep (sim/lockstep.py) drives its scheduler instead.
    runs_own_scheduler = True

    def __init__(
        self,
        resolved: HasSimConfig,
        workload: Workload,
        *,
        compute: StepTimeModel | None = None,
        check_invariants: bool = False,
        progress: Callable[[int], None] | None = None,
        on_row: Callable[[dict], None] | None = None,
        keep_transfers: bool = True,
        env: simpy.Environment | None = None,
    ) -> None:
        # A resolved scenario or a SimConfig: the world reads only the plain dataclasses.
        self.config = cfg = resolved.sim_config()
        self.workload = workload
        self.progress = progress
        self.check_invariants = check_invariants
        # A given env: one data-parallel rank of several sharing one clock (sim/dp.py).
        self.env = env = env if env is not None else simpy.Environment()
        self.cache = cache = HiCache(cfg.cache)
        self.page = cfg.cache.page_size
        sharing = cfg.pcie_sharing
        self.links = {
            "h2d": Link(env, "h2d", cfg.links["h2d"], sharing),
            "d2h": Link(env, "d2h", cfg.links["d2h"], sharing),
            "storage_read": Link(env, "storage_read", storage_params(cfg.storage_read_Bps, cfg.storage_latency_s)),
            "storage_write": Link(env, "storage_write", storage_params(cfg.storage_write_Bps, cfg.storage_latency_s)),
        }
        if cfg.cache.storage_offload:
            # The store's offload disk: one thread of its real client reads a batch's objects one after
            # another (Mooncake BucketStorageBackend::BatchLoad), so one object read's latency is link time.
            self.links["storage_offload"] = Link(
                env,
                "storage_offload",
                offload_params(cfg.storage_offload_read_Bps, cfg.storage_offload_latency_s),
                "fifo",
            )
        self.log = TransferLog(keep=keep_transfers)
        self.request_overhead_s = cfg.request_overhead_s
        # One rank's links and KV: the layers of one pipeline stage (all stages move their share at once).
        layout = KVLayout(
            cfg.mem_layout, cfg.stage_layers, cfg.kv_factor, cfg.cache.page_size, cfg.kv_heads_per_rank, cfg.side_copies
        )
        self.transport = Transport(
            env,
            cache,
            self.links,
            layout,
            on_ack=lambda t: self.scheduler.on_ack(t),
            on_progress=lambda: self.scheduler.wake(),
            log=self.log,
        )
        self.compute = compute if compute is not None else ComputeModel(cfg.compute)
        self.policy = cfg.scheduler
        self.scheduler = Scheduler(
            env,
            cache,
            self.compute,
            self.transport,
            self.policy,
            storage_latency_s=cfg.storage_latency_s,
            on_done=self._done,
            check_invariants=check_invariants,
        )
        n = len(workload.requests)
        if not rids_known_unique(workload.requests) and len({r.rid for r in workload.requests}) != n:
            raise SimulationError("request ids are not unique in the workload")
        self._init_ledger(n, on_row)
        self.events = 0
        self.timeseries = TimeSeries(
            cfg.timeseries_interval_s,
            cache,
            self.links,
            lambda: (self.scheduler.n_waiting, self.scheduler.running),
        )
        ts = self.timeseries
        self.scheduler.horizon = lambda: min(env.peek(), ts.next_s)
        self.arrivals = arrivals_for(env, workload, self._deliver)
        if self.runs_own_scheduler:
            env.process(self.scheduler.run())

    # --------------------------------------------------------------------------- requests

    def _deliver(self, i: int, req: Request) -> None:
        rec = RequestRecord(req, arrival_s=self.env.now)
        self.records[i] = rec
        self.n_arrived += 1
        r = SimRequest(
            req,
            rec,
            list(req.page_keys),
            req.match_limit(self.page, self.policy.reserve_last_token),
            i,
            seq_tokens=req.input_tokens,
        )
        reason = self._never_fits(req)
        if reason:
            self.scheduler.reject(r, reason)
        elif self.request_overhead_s > 0:
            # HTTP, tokenisation and the hops to the scheduler: it sees the request this much later.
            self.env.timeout(self.request_overhead_s).callbacks.append(lambda _ev: self.scheduler.submit(r))
        else:
            self.scheduler.submit(r)

    def _never_fits(self, req: Request) -> str:
        """Why the request can never be admitted, or ''. Mirrors the scheduler's budget check."""
        device_tokens = self.config.cache.device_pages * self.page
        out = min(max(1, req.output_tokens), self.policy.clip_max_new_tokens)
        if req.input_tokens + out + self.page >= device_tokens:
            return (
                f"prompt of {req.input_tokens} tokens + {out} reserved output tokens + one page of slack "
                f"does not fit the device pool of {device_tokens} tokens"
            )
        peak = math.ceil((req.input_tokens + max(1, req.output_tokens) - 1) / self.page)
        pool = self.config.cache.device_pages
        if peak > pool:
            return f"needs {peak} device pages at its last token; the device pool has {pool}"
        return ""

    def _done(self, r: SimRequest) -> None:
        self._complete(r)

    # -------------------------------------------------------------------------------- run

    def run(self, observer: Callable[[World], None] | None = None) -> TimedResult:
        """Run to the end; ``observer(world)`` (tests) is called after every event."""
        env = self.env
        ts = self.timeseries
        peek = env.peek
        step = env.step
        events = 0
        inf = math.inf
        horizon = MAX_CLOCK_S
        while True:
            t = peek()
            if t > horizon:  # one test for the common path: the end (inf) or past the clock
                if t == inf:
                    break
                self._past_the_clock(t)
            if t >= ts.next_s:
                ts.before(t)
            step()
            events += 1
            if observer is not None:
                observer(self)
        self.engine_events = events
        self.events = events + self.scheduler.merged_steps  # as if one timeout per decode step
        self.verify()
        return self.result()

    def _past_the_clock(self, t: float) -> None:
        """Stop a run whose next event lies past :data:`MAX_CLOCK_S`: there the float clock no longer
        resolves the world's small waits (a wait rounds to nothing), so the results would be noise."""
        n = len(self.workload.requests)
        raise ConfigError(
            "simulated time",
            f"the next event is at {t:.4g} s with {self.n_done} of {n} requests done; a timed run must end "
            f"before {MAX_CLOCK_S:.0f} s (97 days), where the float clock of seconds still resolves 1 ns; "
            "check the workload's span (trace timestamps and time_scale, request_rate) and the hardware's "
            "speeds (hardware.pcie, hardware.storage, hardware.calibration, compute efficiencies)",
        )

    def pool_usage(self) -> dict[str, int]:
        """Pages in use per pool, and the pages the tree and the running requests account for."""
        c = self.cache
        return {
            "device_used": c.device.used(),
            "device_size": c.device.size,
            "host_used": c.host.used(),
            "host_size": c.host.size,
            "device_in_tree": c.evictable_pages + c.protected_pages,
            "device_held": len(self.scheduler.held_device_pages()),
        }

    # ------------------------------------------------------------------------------- checks

    def verify(self) -> None:
        """Conservation at the end of the run; raises SimulationError listing every violation."""
        problems: list[str] = []
        c = self.cache
        n = len(self.workload.requests)
        arrived, finished, rejected = self.n_arrived, self.n_finished, self.n_rejected
        if arrived != n:
            problems.append(f"{n - arrived} of {n} requests never arrived (closed loop stalled)")
        if finished + rejected != arrived:
            stuck = [r.req.rid for r in self.records if r is not None and r.status not in ("finished", "rejected")]
            problems.append(
                f"{arrived} arrived but {finished} finished and {rejected} were rejected; "
                f"stuck: {stuck[:5]} (waiting {self.scheduler.n_waiting}, running "
                f"{self.scheduler.running})"
            )
        if self.no_reason:
            problems.append(f"rejected without a reason: {self.no_reason[:5]}")
        if c.inflight:
            problems.append(f"{len(c.inflight)} transfers still in flight")
        for name in ("ongoing_prefetch", "staged_prefetch", "ongoing_write", "ongoing_load"):
            left = getattr(c, name, None)
            if left:
                problems.append(f"cache.{name} not empty at the end ({len(left)})")
        if getattr(c, "buffer_queue", None):
            problems.append(f"{len(c.buffer_queue)} buffer_only write intents never flushed")
        locked = [(x.id, x.lock_ref, x.host_ref) for x in c.iter_nodes() if x.lock_ref or x.host_ref]
        if locked:
            problems.append(f"{len(locked)} nodes still locked or pinned (id, lock_ref, host_ref): {locked[:5]}")
        if c.root.lock_ref != 1:
            problems.append(f"root lock_ref is {c.root.lock_ref}, expected 1")
        in_tree = c.evictable_pages + c.protected_pages
        if c.device.used() != in_tree:
            problems.append(f"device pool has {c.device.used()} pages in use but the tree owns {in_tree}")
        host_tree = c.residency_walk()["host_pages"]
        if c.host.used() != host_tree:
            problems.append(f"host pool has {c.host.used()} pages in use but the tree owns {host_tree}")
        tp = self.transport
        for name, link in self.links.items():
            expect = tp.issued_bytes[name] - tp.skipped_bytes[name]
            if link.bytes != expect:
                problems.append(f"link {name} moved {link.bytes} bytes but the core's transfers say {expect}")
        if problems:
            raise SimulationError("timed run ended inconsistent: " + "; ".join(problems))
        if self.check_invariants:
            check(c)

    def result(self) -> TimedResult:
        t_end = self.env.now
        core = self.cache.counter_values()
        world = dict(self.scheduler.counters)
        world["transfers_revoked_unstarted"] = self.transport.skipped
        world["events"] = self.events
        clash = set(core) & set(world)
        if clash:
            raise SimulationError(f"counter names used by both the core and the world: {sorted(clash)}")
        return TimedResult(
            requests=self.rows,
            timeseries=self.timeseries.rows,
            links={name: link.stats(t_end) for name, link in self.links.items()},
            sim_time_s=t_end,
            cache=self.cache,
            counters={**core, **world},
            transfer_log=self.log,
        )


def run_timed(
    resolved: HasSimConfig,
    workload: Workload,
    *,
    check_invariants: bool = False,
    progress: Callable[[int], None] | None = None,
    compute: StepTimeModel | None = None,
    observer: Callable[[World], None] | None = None,
    on_row: Callable[[dict], None] | None = None,
    keep_transfers: bool = True,
) -> TimedResult:
    """Simulate ``workload`` on the resolved scenario (or a :class:`~hicache_sim.simconfig.SimConfig`) in time.

    ``check_invariants`` runs the core's ``check`` after every scheduler step (slow; tests).
    ``progress(n)`` is called with the number of requests done (finished or rejected) so far.
    ``compute`` replaces the preset roofline (e.g. a calibrated model); ``observer(world)`` is
    called after every simulation event (tests sample pool occupancy with it). ``on_row(row)``
    takes each request's row in workload order as soon as it and every earlier one are done (then
    ``TimedResult.requests`` stays empty: a streamed run holds no per-request rows);
    ``keep_transfers=False`` keeps no transfer log.
    """
    world = World(
        resolved,
        workload,
        compute=compute,
        check_invariants=check_invariants,
        progress=progress,
        on_row=on_row,
        keep_transfers=keep_transfers,
    )
    return world.run(observer)
