"""Data-parallel ranks in one timed world: one engine (HiCache, links, scheduler) per DP rank on one SimPy
clock, and SGLang's DataParallelController in front of them.

SGLang 0.5.23 starts ``--dp-size`` replicas of the tp x pp group, or with attention DP (``--attn-dp-size``,
or the deprecated ``--dp-size N --enable-dp-attention``) N attention groups inside the tp ranks; either way
each DP rank runs its own scheduler over its own KV pool, host pool and radix tree, and the controller
sends each request to one rank (:mod:`hicache_sim.core.routing`). So a prefix cached on one rank is a miss
on the others: a session's hit rate depends on where its turns land.

:class:`DPWorld` holds the arrival process, the request records and their in-order rows (as
:class:`~hicache_sim.sim.world.World` does for one rank), and a :class:`RankWorld` per rank: a World on
the shared clock whose finished requests are reported back here. Dispatch happens when the request
reaches the controller (after ``request_overhead_s``); the load-aware methods read each rank's live
queues and KV use (SGLang reads the snapshot each scheduler last published, after every prefill batch,
every 15th decode batch and when idle: the simulator reads the state itself, throttled to SGLang's
20 ms like the real reads).

Attention-DP groups (``attn_dp`` > 1) run their MLP / MoE together: every forward is one collective step
of all groups, an idle group with an empty batch, and the experts see every group's tokens. Their
schedulers are driven by one :class:`~hicache_sim.sim.lockstep.Lockstep` loop instead of a process each
(``--dp-size`` replicas stay independent, as SGLang runs them). Not modelled: pipeline stages under
attention DP (``pp`` > 1: each group steps on its own) and the weights per GPU, which are those of plain
TP (attention weights are split over the group only in SGLang).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import simpy

from ..core import ConfigError
from ..core.routing import ROUTERS, RankLoad, Router
from ..core.stores import OffloadedStore, StoreModel
from ..simconfig import HasSimConfig
from ..workloads import Request
from ..workloads.lazy import rids_known_unique
from ..workloads.synthetic import Workload
from ..workloads.workload import MAX_CLOCK_S
from .arrivals import arrivals_for
from .compute import StepTimeModel
from .events import Inbox
from .lockstep import Lockstep
from .metrics import RequestRecord
from .requests import SimRequest
from .world import RequestLedger, SimulationError, TimedResult, World


class RankWorld(World):
    """One DP rank: a World on a shared clock with no arrivals of its own; its done requests go to the
    :class:`DPWorld` in front."""

    def __init__(self, front: DPWorld, rank: int, resolved: HasSimConfig, *, lockstep: bool = False, **kw: Any) -> None:
        self.front = front
        self.rank = rank
        self.runs_own_scheduler = not lockstep  # the front's Lockstep drives it
        super().__init__(resolved, Workload([]), **kw)

    def _done(self, r: SimRequest) -> None:
        self.front._done(self.rank, r)

    def load(self) -> RankLoad:
        """What this rank's scheduler publishes for the controller: running + waiting requests, and KV
        tokens held by running requests (in use, not evictable) + prompt tokens of waiting requests."""
        s = self.scheduler
        arriving = [payload for kind, payload in s.inbox if kind is Inbox.ARRIVE]
        waiting = s._live_waiting() + arriving
        c = self.cache
        used = (c.device.used() - c.evictable_pages) * self.page
        return RankLoad(s.running + len(waiting), used + sum(r.req.input_tokens for r in waiting))


@dataclass
class DPResult:
    """A DP run: the aggregate :class:`TimedResult` (rows of every request, in workload order) and each
    rank's own, plus the rank each row went to."""

    total: TimedResult
    ranks: list[TimedResult]
    row_ranks: list[int] = field(default_factory=list)


class DPWorld(RequestLedger):
    """The controller and its ranks on one clock (see module docstring)."""

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
    ) -> None:
        self.config = cfg = resolved.sim_config()
        self.workload = workload
        self.progress = progress
        self.env = env = simpy.Environment()
        n_ranks = cfg.dp_ranks
        # Attention-DP groups step together (one loop for all, started after the ranks, before the arrivals).
        lockstep = cfg.attn_dp > 1 and cfg.compute.pp == 1
        # Ranks are built (and their scheduler processes started) in rank order: same-time order is fixed.
        self.ranks = [
            RankWorld(
                self,
                k,
                cfg,
                lockstep=lockstep,
                compute=compute,
                check_invariants=check_invariants,
                keep_transfers=keep_transfers,
                env=env,
            )
            for k in range(n_ranks)
        ]
        self.lockstep = (
            Lockstep(env, [rank.scheduler for rank in self.ranks], self.ranks[0].compute, cfg.compute.tp // cfg.attn_dp)
            if lockstep
            else None
        )
        self.shared_store = share_store(self.ranks, env)
        self.router: Router = ROUTERS.get(cfg.load_balance_method)(n_ranks)
        self.page = cfg.cache.page_size
        self.reserve_last_token = self.ranks[0].policy.reserve_last_token
        self.request_overhead_s = cfg.request_overhead_s
        n = len(workload.requests)
        if not rids_known_unique(workload.requests) and len({r.rid for r in workload.requests}) != n:
            raise SimulationError("request ids are not unique in the workload")
        self._init_ledger(n, on_row)
        self.rank_of: list[int] = [-1] * n
        self.row_ranks: list[int] = []
        self.per_rank = [0] * n_ranks
        self.arrivals = arrivals_for(env, workload, self._deliver)

    # --------------------------------------------------------------------------- requests

    def _loads(self) -> list[RankLoad]:
        return [rank.load() for rank in self.ranks]

    def _deliver(self, i: int, req: Request) -> None:
        rec = RequestRecord(req, arrival_s=self.env.now)
        self.records[i] = rec
        self.n_arrived += 1
        if self.request_overhead_s > 0:
            # HTTP and tokenisation come before the controller: it dispatches when the request reaches it.
            self.env.timeout(self.request_overhead_s).callbacks.append(lambda _ev: self._dispatch(i, req, rec))
        else:
            self._dispatch(i, req, rec)

    def _dispatch(self, i: int, req: Request, rec: RequestRecord) -> None:
        """Route the request to a rank (every request counts, as every one is dispatched in SGLang; a
        prompt the rank can never hold is rejected there)."""
        k = self.router.pick(req.input_tokens, self.env.now, self._loads)
        self.rank_of[i] = k
        self.per_rank[k] += 1
        rank = self.ranks[k]
        r = SimRequest(
            req,
            rec,
            list(req.page_keys),
            req.match_limit(self.page, self.reserve_last_token),
            i,
            seq_tokens=req.input_tokens,
        )
        reason = rank._never_fits(req)
        if reason:
            rank.scheduler.reject(r, reason)
        else:
            rank.scheduler.submit(r)

    def _done(self, rank: int, r: SimRequest) -> None:
        self._complete(r)

    def _row_emitted(self, k: int) -> None:
        self.row_ranks.append(self.rank_of[k])

    # -------------------------------------------------------------------------------- run

    def run(self) -> DPResult:
        """Run to the end, check conservation over the requests and on every rank, and collect."""
        env = self.env
        series = [rank.timeseries for rank in self.ranks]
        events = 0
        while True:
            t = env.peek()
            if t > MAX_CLOCK_S:
                if t == math.inf:
                    break
                raise ConfigError(
                    "simulated time",
                    f"the next event is at {t:.4g} s with {self.n_done} of {len(self.records)} requests done; a "
                    f"timed run must end before {MAX_CLOCK_S:.0f} s (see hicache-sim run without data parallelism)",
                )
            if t >= series[0].next_s:
                for ts in series:
                    ts.before(t)
            env.step()
            events += 1
        self.verify()
        ranks = [rank.result() for rank in self.ranks]
        for res in ranks:  # the clock's events are the world's, counted here once
            res.counters.pop("events", None)
        merged = sum(rank.scheduler.merged_steps for rank in self.ranks)
        counters = _sum_counters([r.counters for r in ranks])
        if self.shared_store is not None:  # one store: its figures once, not once per rank
            counters.update(self.shared_store.report())
        total = TimedResult(
            requests=self.rows,
            timeseries=_merge_series([r.timeseries for r in ranks]),
            links=_merge_links([r.links for r in ranks]),
            sim_time_s=env.now,
            cache=self.ranks[0].cache,
            counters={**counters, "events": events + merged},
        )
        return DPResult(total, ranks, self.row_ranks)

    def verify(self) -> None:
        """Every arrival finished or rejected with a reason; each rank's pools, pins and links conserved."""
        problems: list[str] = []
        n = len(self.records)
        if self.n_arrived != n:
            problems.append(f"{n - self.n_arrived} of {n} requests never arrived (closed loop stalled)")
        if self.n_finished + self.n_rejected != self.n_arrived:
            stuck = [r.req.rid for r in self.records if r is not None and r.status not in ("finished", "rejected")]
            problems.append(
                f"{self.n_arrived} arrived but {self.n_finished} finished and {self.n_rejected} were rejected; "
                f"stuck: {stuck[:5]}"
            )
        if self.no_reason:
            problems.append(f"rejected without a reason: {self.no_reason[:5]}")
        if problems:
            raise SimulationError("timed run ended inconsistent: " + "; ".join(problems))
        for rank in self.ranks:
            try:
                rank.verify()
            except SimulationError as e:
                raise SimulationError(f"DP rank {rank.rank}: {e}") from None


def share_store(ranks: Sequence[World], env: simpy.Environment) -> StoreModel | OffloadedStore | None:
    """Give every rank the first rank's L3 store when its model is one pool all ranks fill
    (``capacity_scope`` shared: Mooncake, NIXL, a file directory): SGLang's DP ranks write and look up
    the same keys there, so a prefix one rank stored is a storage hit on the others. Returns that store,
    or None (no store, or one each rank keeps for itself). Its clock becomes the shared one."""
    store = ranks[0].cache.storage
    pool = store.pool if isinstance(store, OffloadedStore) else store
    if pool is None or pool.capacity_scope != "shared":
        return None
    pool.clock = lambda: env.now
    for rank in ranks[1:]:
        rank.cache.storage = store
    return store


def _sum_counters(counters: list[dict]) -> dict:
    """Counters over all ranks (each a count or seconds of its own rank)."""
    out: dict = {}
    for c in counters:
        for key, v in c.items():
            out[key] = out.get(key, 0) + v
    return out


def _merge_links(links: list[dict[str, dict]]) -> dict[str, dict]:
    """Each link kind over the ranks: bytes, busy seconds and transfers summed, utilisation the mean of
    the ranks' own links (each rank has its own PCIe and storage client)."""
    out: dict[str, dict] = {}
    for name in links[0]:
        stats = [rank[name] for rank in links]
        out[name] = {
            "bytes": sum(s["bytes"] for s in stats),
            "busy_s": sum(s["busy_s"] for s in stats),
            "utilisation": sum(s["utilisation"] for s in stats) / len(stats),
            "transfers": sum(s["transfers"] for s in stats),
        }
    return out


def _merge_series(series: list[list[dict]]) -> list[dict]:
    """The ranks' samples (taken on the same grid points) as one: pages and queues summed, link
    utilisations averaged."""
    out = []
    for rows in zip(*series, strict=True):
        row = {"t_s": rows[0]["t_s"]}
        for key in rows[0]:
            if key == "t_s":
                continue
            values = [r[key] for r in rows]
            row[key] = sum(values) / len(values) if key.endswith("_util") else sum(values)
        out.append(row)
    return out


def run_dp_timed(
    resolved: HasSimConfig,
    workload: Workload,
    *,
    check_invariants: bool = False,
    progress: Callable[[int], None] | None = None,
    compute: StepTimeModel | None = None,
    on_row: Callable[[dict], None] | None = None,
    keep_transfers: bool = True,
) -> DPResult:
    """Simulate ``workload`` over the scenario's DP ranks in time (arguments as :func:`run_timed`)."""
    world = DPWorld(
        resolved,
        workload,
        compute=compute,
        check_invariants=check_invariants,
        progress=progress,
        on_row=on_row,
        keep_transfers=keep_transfers,
    )
    return world.run()
