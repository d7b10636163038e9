"""Saturation: is the timed run measuring the cache, or a queue that grows without bound?

A timed run replays arrivals open loop (a trace's own timestamps, a Poisson rate). When the offered
work exceeds what the GPU can serve, the waiting queue grows for as long as requests keep arriving, and
TTFT measures that queue (its percentiles grow with the trace's length), not the cache. This module
reads a finished run and says so, with the numbers.

Service capacity, from the simulator's own compute model (``sim/compute.py``, calibration included):
each finished request's GPU seconds at full batching, the load the scheduler reaches when its queue is
long. Prefill: the request's uncached tokens (its prompt less the tokens it hit at any tier) in chunks
of the prefill budget (``min(chunked_prefill_size, max_prefill_tokens)``), each full chunk a step of its
own after the context before it; the last, shorter piece shares a step with ``budget // piece`` others
like it. Decode: each output token's share of a step of ``B`` requests like it, ``B`` the decode batch
the device pool holds (``min(max_running_requests, device tokens / mean prompt + output)``). Each step
pays the scheduler's ``step_overhead_s`` once (per micro-batch in decode), as the engine charges it.
``capacity = requests / sum of their GPU seconds`` (times the data-parallel ranks, each serving its
share on GPUs of its own); the same in prompt tokens per second. Attention-DP groups (``attn_dp`` > 1
at pp 1) share every step's GPUs and step together (``sim/lockstep.py``): there the GPU seconds are the
lockstep's over the whole window, each group working through the requests the router sent it as its
scheduler would with a queue that never empties (prefill batches from its own chunk budget whenever
its pool admits the next request, decode steps of its running requests otherwise), step ``k`` running
every group's ``k``-th batch, an idle batch where a group has run out, for as long as ``lockstep_time``
of them says: with prompts of varied length the group of long prompts sets the pace.
Capacity is the throughput a run whose queue never empties reaches (within 2% in
tests/test_saturation.py, 0.2% on the Mooncake conversation trace; attention DP with prompts of 512 and
16,384 tokens alternating: within 5%), counting each request's work once: a run whose decode batch
overflows the pool retracts requests and prefills them again (``retractions`` in requests.parquet) and
serves less.

The rule (queueing theory, single server of work):
- utilisation ``rho = offered requests/s x mean GPU seconds per request``. ``rho >= 1`` has no steady
  state: work arrives faster than it is served, the backlog grows by ``rho - 1`` seconds of work every
  second, and every percentile of TTFT grows with the run's length (Lindley's recursion; Kingman). That
  is the ``utilisation`` rule.
- measured: in that fluid limit a request arriving at ``t`` waits the backlog, ``(rho - 1) (t - t0)``:
  queueing delay grows linearly with arrival time at slope ``rho - 1``. A stable queue's delay has no
  trend (it fluctuates around its mean). So the least-squares slope of ``queue_s`` against ``arrival_s``
  over the measured window is a measured ``rho - 1``; a slope of at least ``WAIT_SLOPE_UNSTABLE`` (0.05:
  a queue serving less than 1 / 1.05 of what arrives) is the ``queue_growth`` rule. It catches an
  overload the compute model underestimates; the model catches the band ``1 <= rho < 1.05`` a noisy
  slope cannot.
Either rule makes the verdict ``saturated``. Below, ``rho >= RHO_NEAR`` (0.8) is ``near capacity``:
Kingman's mean wait ``rho / (1 - rho)`` service times is then 4 or more, so TTFT is mostly queueing
though bounded. A closed loop (bench_multiturn's clients, bench_serving under a concurrency cap) sends
only as fast as it is answered: its queue is bounded by its clients, and the rules do not apply.

Other numbers of the block: offered and served rates (requests/s, prompt tokens/s), the share of TTFT
spent queueing, when the waiting queue last emptied before the last arrival (after that it only grew),
and ``instances_needed``, the smallest count ``k`` with ``rho / k < 1`` (each instance taking ``1 / k`` of
the traffic with the same hit rate; ``instances_within_capacity``: with ``rho / k < RHO_NEAR``, where
queueing no longer dominates TTFT). A window of fewer than two arrivals, or with nothing served, has
no rate: ``unknown``; so has a burst, a window whose arrivals all fall within the GPU time of one of its
requests at capacity (the server takes them together: no rate over it describes a steady state).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .columns import Columns

if TYPE_CHECKING:
    from ..scenario import Resolved
    from ..sim.compute import GroupWork

#: rho at and above which no steady state exists.
RHO_UNSTABLE = 1.0
#: rho at and above which Kingman's mean wait is >= 4 service times: TTFT mostly queueing, still bounded.
RHO_NEAR = 0.8
#: Least-squares slope of queueing delay over arrival time (s per s) at and above which the queue grows:
#: the fluid limit's ``rho - 1``, so 0.05 is a measured rho of 1.05.
WAIT_SLOPE_UNSTABLE = 0.05

SCOPE = (
    "window: offered rate from the measured requests' arrivals, served rate as throughput, capacity from "
    "the compute model at full batching over the window's finished requests"
)


@dataclass(frozen=True)
class Signals:
    """What the rules read."""

    open_loop: bool
    utilisation: float | None
    wait_slope: float | None


@dataclass(frozen=True)
class Rule:
    """One way a run is saturated: its name, why (the queueing argument), and its test."""

    name: str
    why: str
    fires: Callable[[Signals], bool]


RULES: tuple[Rule, ...] = (
    Rule(
        "utilisation",
        "offered work >= what the compute model serves (rho >= 1): no steady state, the queue grows as long "
        "as requests arrive",
        lambda s: s.open_loop and s.utilisation is not None and s.utilisation >= RHO_UNSTABLE,
    ),
    Rule(
        "queue_growth",
        f"queueing delay grows with arrival time at >= {WAIT_SLOPE_UNSTABLE:g} s per s (a measured rho - 1)",
        lambda s: s.open_loop and s.wait_slope is not None and s.wait_slope >= WAIT_SLOPE_UNSTABLE,
    ),
)

#: The verdict when no rule fires: (lowest rho, verdict), first match; a closed loop has its own.
BELOW: tuple[tuple[float, str], ...] = ((RHO_NEAR, "near capacity"), (0.0, "within capacity"))
CLOSED = "closed loop"
SATURATED = "saturated"
#: No rate to judge: fewer than two arrivals in the window, or nothing served.
UNKNOWN = "unknown"


def _budget(r: Resolved) -> int:
    """New tokens one prefill step takes at most (SGLang's PrefillAdder: both budgets shrink per request)."""
    chunk = r.chunked_prefill_size
    most = r.scenario.scheduler.max_prefill_tokens
    return min(chunk, most) if chunk else most


class Demand:
    """GPU seconds per request at full batching, from a compute model (memoised by request shape).

    A request's own figure (``__call__``) is one engine's. With ``groups`` attention-DP groups stepping
    in lockstep (``sim/lockstep.py``) a step is one collective over the tp GPUs: every group's attention
    side by side, one MLP over all their rows, the slowest group setting its length (the one attending
    the longest context, or prefilling while the others decode), so the window is costed as a whole:
    :meth:`lockstep`."""

    def __init__(
        self,
        compute,
        budget: int,
        decode_batch: int,
        groups: int = 1,
        attn_tp: int = 1,
        page: int = 1,
        pool: tuple[int, float] | None = None,
    ) -> None:
        self.compute = compute
        self.pool = pool  # (max running requests, device tokens) of a group: its own batches
        self.budget = max(1, budget)
        self.page = max(1, page)
        self.batch = max(1, decode_batch)
        self.overhead = compute.step_overhead_s
        self.groups = max(1, groups)
        self.attn_tp = max(1, attn_tp)
        self._memo: dict[tuple[int, int, int], float] = {}

    def __call__(self, prompt: int, cached: int, output: int) -> float:
        key = (prompt, cached, output)
        if key not in self._memo:
            self._memo[key] = self._prefill(prompt, cached) + self._decode(prompt, output)
        return self._memo[key]

    def lockstep(self, queues: Sequence[Sequence[tuple[int, int, int]]]) -> float:
        """Seconds the lockstep takes to serve every group's queue of ``(prompt, cached, output)`` requests,
        each group saturated (its queue never empty until it is done). A group forms its batches from its
        own queue and pool alone (:meth:`_timeline`), one a step whatever the others do, so step ``k`` of
        the lockstep runs every group's ``k``-th batch together, an idle batch where a group has run out,
        and lasts ``lockstep_time`` of them plus the scheduler's overhead once: a group of long prompts
        sets the pace of all, and one group's decode steps stretch the others' prefill."""
        from ..sim.compute import IDLE

        c = self.compute
        lanes = [self._timeline(q) for q in queues]
        at = [0] * len(lanes)  # each group's current segment
        left = [lane[0][1] if lane else 0.0 for lane in lanes]
        parts = []
        while any(i < len(lane) for i, lane in zip(at, lanes, strict=True)):
            span = min(x for i, x, lane in zip(at, left, lanes, strict=True) if i < len(lane))
            work = [lane[i][0] if i < len(lane) else IDLE for i, lane in zip(at, lanes, strict=True)]
            parts.append(span * (c.lockstep_time(work, self.attn_tp) + self.overhead))
            for g, lane in enumerate(lanes):
                if at[g] < len(lane):
                    left[g] -= span
                    if left[g] <= 0:
                        at[g] += 1
                        left[g] = lane[at[g]][1] if at[g] < len(lane) else 0.0
        return math.fsum(parts)

    def _timeline(self, queue: Sequence[tuple[int, int, int]]) -> list[tuple[GroupWork, float]]:
        """A group's own steps over its queue of ``(prompt, cached, output)`` requests, never short of
        waiting work, as ``(GroupWork, steps)`` segments. As ``sim/admission.py`` and the engine's loop
        form them: a prefill batch whenever one can be formed (the chunked request first, then requests in
        order until the budget is spent, one that does not fit whole cut to the page-aligned rest and
        continued first in the next batch), while the running requests wait; a request is admitted while
        fewer than the pool's ``max_running_requests`` run and the pool holds its prompt and whole output
        beside those of the admitted ones (the decode batch :func:`decode_batch` counts). Else one decode
        step of every running request, repeated until the first of them finishes (its first token came
        with its prefill), its KV at the segment's mean."""
        c = self.compute
        running_cap, device = self.pool if self.pool is not None else (self.batch, math.inf)
        budget = self.budget
        page = min(self.page, budget)
        out: list[tuple[GroupWork, float]] = []
        nxt = 0
        chunk: list | None = None  # [new_left, ctx, prompt, output]
        running: list[list[int]] = []  # [remaining_out, length, held]
        held = 0
        while nxt < len(queue) or chunk is not None or running:
            batch: list[tuple[int, int]] = []
            left = budget
            done: list[list] = []
            while True:
                if chunk is None:
                    if nxt >= len(queue) or left <= 0:
                        break
                    p, h, o = queue[nxt]
                    need = p + o
                    busy = running or done
                    if busy and (len(running) + len(done) + 1 > running_cap or held + need > device):
                        break
                    ctx = min(h, p - 1)
                    chunk = [p - ctx, ctx, p, o]
                    held += need
                    nxt += 1
                new, ctx = chunk[0], chunk[1]
                if -(-new // page) * page <= left:
                    batch.append((new, ctx))
                    left -= new
                    done.append(chunk)
                    chunk = None
                else:
                    cut = left // page * page
                    if cut:
                        batch.append((cut, ctx))
                        chunk[0] -= cut
                        chunk[1] += cut
                    break
            if batch:
                out.append((c.group_prefill(batch), 1.0))
                for _, _, p, o in done:
                    if o > 1:
                        running.append([o - 1, p + 1, p + o])
                    else:
                        held -= p + o
                continue
            if not running:
                break
            k = min(r[0] for r in running)
            n = len(running)
            kv = sum(r[1] for r in running)
            out.append((c.group_decode(n, round(kv + (k - 1) * n / 2)), float(k)))
            keep = []
            for r in running:
                r[0] -= k
                r[1] += k
                if r[0] > 0:
                    keep.append(r)
                else:
                    held -= r[2]
            running = keep
        return out

    def _prefill(self, prompt: int, cached: int) -> float:
        c = min(cached, prompt - 1)  # SGLang always computes the last token
        new = prompt - c
        t = 0.0
        while new >= self.budget:
            t += self.compute.prefill_time([(self.budget, c)]) + self.overhead
            c += self.budget
            new -= self.budget
        if new:
            k = self.budget // new
            t += (self.compute.prefill_time([(new, c)] * k) + self.overhead) / k
        return t

    def _decode(self, prompt: int, output: int) -> float:
        if output <= 1:
            return 0.0
        b = self.batch
        ctx = prompt + output // 2
        return (output - 1) * self.compute.decode_step_s(b, b * ctx) / b


def demand_model(r: Resolved, mean_tokens: float) -> Demand:
    """The compute model the timed world runs, with the scheduler's budgets, for a window whose
    requests hold ``mean_tokens`` (prompt + output) each on average."""
    from ..sim.compute import ComputeModel

    pool = (r.max_running_requests, r.device_tokens)
    batch = decode_batch(*pool, mean_tokens)
    hw = r.scenario.hardware
    groups = hw.attn_dp if hw.pp == 1 else 1  # as sim/dp.py: pipeline stages do not step together
    page = r.scenario.cache.page_size
    return Demand(ComputeModel.from_resolved(r), _budget(r), batch, groups, hw.tp // hw.attn_dp, page, pool)


def decode_batch(max_running: int, device_tokens: float, mean_tokens: float) -> int:
    """Requests a device pool of ``device_tokens`` decodes together when each holds ``mean_tokens``
    (prompt + output), at most ``max_running``."""
    return min(max_running, max(1, int(device_tokens // max(1.0, mean_tokens))))


def window_seconds(dm: Demand, finished: Columns) -> float:
    """GPU seconds the window's finished requests take at full batching. One group: the sum of each
    request's own (:class:`Demand`). Attention-DP groups: the lockstep over every group's requests
    (:meth:`Demand.lockstep`), spread over the groups as the run's router sent them (``dp_rank``, whatever
    the method; in a table without it, round robin over its rows: row ``i`` to group ``i mod G``), each
    group's in arrival order (first come, first served)."""
    p = np.asarray(finished["prompt_tokens"], dtype=np.int64)
    o = np.asarray(finished["output_tokens"], dtype=np.int64)
    hit = sum(np.asarray(finished[f"{t}_hit_tokens"], dtype=np.int64) for t in ("device", "host", "storage"))
    if dm.groups == 1:
        return math.fsum(dm(int(a), int(b), int(c)) for a, b, c in zip(p, hit, o, strict=True))
    n = len(p)
    rank = np.asarray(finished["dp_rank"], dtype=np.int64) if "dp_rank" in finished else np.arange(n) % dm.groups
    order = np.argsort(np.asarray(finished["arrival_s"], dtype=float), kind="stable")
    queues: list[list[tuple[int, int, int]]] = [[] for _ in range(dm.groups)]
    for i in order:
        queues[int(rank[i]) % dm.groups].append((int(p[i]), int(hit[i]), int(o[i])))
    return dm.lockstep(queues)


def _slope(x: np.ndarray, y: np.ndarray) -> float | None:
    """Least-squares slope of y on x (None with fewer than 3 points or no spread in x)."""
    if len(x) < 3 or float(x.max() - x.min()) <= 0.0:
        return None
    xm = x - x.mean()
    return float((xm * (y - y.mean())).sum() / (xm * xm).sum())


def _queue_since(ts: Columns, start: float, end: float) -> float | None:
    """The last grid time in ``[start, end]`` at which the waiting queue was empty (``start`` when it
    never was): from then until the last arrival it only held requests."""
    if not len(ts) or "waiting" not in ts:
        return None
    t = np.asarray(ts["t_s"], dtype=float)
    w = np.asarray(ts["waiting"])
    inside = (t >= start) & (t <= end)
    empty = t[inside & (w == 0)]
    return float(empty.max()) if len(empty) else float(start)


def saturation_block(
    r: Resolved, measured: Columns, finished: Columns, timeseries: Columns, *, open_loop: bool, served: dict
) -> dict:
    """summary.json's ``saturation`` of a timed run: the numbers, the rules that fired and the verdict.
    ``measured``: the window's requests; ``finished``: those served; ``served``: the summary's
    ``throughput``."""
    n = len(measured)
    arrivals = np.asarray(measured["arrival_s"], dtype=float) if n else np.zeros(0)
    span = float(arrivals.max() - arrivals.min()) if n > 1 else 0.0
    prompt = np.asarray(measured["prompt_tokens"], dtype=float) if n else np.zeros(0)
    offered_rps = (n - 1) / span if span > 0 else None  # n arrivals bound n - 1 gaps
    offered_tps = offered_rps * float(prompt.mean()) if offered_rps is not None else None
    capacity_rps = capacity_tps = util = None
    if len(finished):
        p = np.asarray(finished["prompt_tokens"], dtype=np.int64)
        o = np.asarray(finished["output_tokens"], dtype=np.int64)
        dm = demand_model(r, float((p + o).mean()))
        work = window_seconds(dm, finished)
        # Each replica (--dp-size) serves its share on GPUs of its own; attention-DP groups share each step's
        # GPUs, which the demand model already divides among them.
        lanes = r.dp_ranks // dm.groups
        capacity_rps = lanes * len(finished) / work if work > 0 else None
        capacity_tps = lanes * float(p.sum()) / work if work > 0 else None
        if capacity_rps and offered_rps is not None:
            util = offered_rps / capacity_rps
    slope = None
    share = None
    if len(finished):
        q = np.asarray(finished["queue_s"], dtype=float)
        ttft = np.asarray(finished["ttft_s"], dtype=float)
        ok = np.isfinite(q) & np.isfinite(ttft)  # a row without an admission time has no queueing delay
        q, ttft = q[ok], ttft[ok]
        slope = _slope(np.asarray(finished["arrival_s"], dtype=float)[ok], q)
        total = math.fsum(ttft)
        share = math.fsum(q) / total if total > 0 else None
    if capacity_rps and n > 1 and span < 1.0 / capacity_rps:
        # Every arrival falls within the GPU time of one request: to the server the window is one burst,
        # served together, and a rate over it (or a queue's slope) says nothing about a steady state.
        util = slope = None
    signals = Signals(open_loop, util, slope)
    fired = [rule.name for rule in RULES if rule.fires(signals)]
    if not open_loop:
        verdict = CLOSED
    elif fired:
        verdict = SATURATED
    elif util is None:
        verdict = UNKNOWN
    else:
        verdict = next(v for lo, v in BELOW if util >= lo)
    rho = max(x for x in (util, None if slope is None else 1.0 + slope, 0.0) if x is not None)
    start = float(arrivals.min()) if n else 0.0
    end = float(arrivals.max()) if n else 0.0
    return {
        "verdict": verdict,
        "rules_fired": fired,
        "offered": {"requests_per_s": offered_rps, "prompt_tokens_per_s": offered_tps},
        "served": {"requests_per_s": served["requests_per_s"], "prompt_tokens_per_s": served["input_tokens_per_s"]},
        "capacity": {"requests_per_s": capacity_rps, "prompt_tokens_per_s": capacity_tps},
        "utilisation": util,
        "wait_growth_s_per_s": slope,
        "queue_share_of_ttft": share,
        "queue_growing_since_s": _queue_since(timeseries, start, end) if verdict == SATURATED else None,
        "last_arrival_s": end,
        "instances_needed": math.floor(rho) + 1 if verdict == SATURATED else 1,
        "instances_within_capacity": math.floor(rho / RHO_NEAR) + 1 if verdict == SATURATED else 1,
        "rule": f"saturated when rho >= {RHO_UNSTABLE:g} (compute model) or queueing delay grows at >= "
        f"{WAIT_SLOPE_UNSTABLE:g} s/s (measured rho - 1); near capacity at rho >= {RHO_NEAR:g}",
    }


def saturation_line(s: dict) -> str | None:
    """The terminal's warning for a saturated run (None otherwise): offered against served and capacity,
    when the queue began to grow, how much of TTFT is queueing, and what load would fit."""
    if s["verdict"] != SATURATED:
        return None
    o, v, c = s["offered"], s["served"], s["capacity"]
    line = f"saturated: {o['requests_per_s']:.2f} requests/s offered ({o['prompt_tokens_per_s']:,.0f} prompt tokens/s)"
    if c["requests_per_s"] is not None:
        line += (
            f" against {c['requests_per_s']:.2f} the compute model serves ({c['prompt_tokens_per_s']:,.0f}): "
            f"utilisation {s['utilisation']:.2f}"
        )
    line += f"; {v['requests_per_s']:.2f} served"
    if s["queue_growing_since_s"] is not None:
        since, last = s["queue_growing_since_s"], s["last_arrival_s"]
        line += f"; the waiting queue grew from {since:.0f} s to the last arrival ({last:.0f} s)"
    if s["queue_share_of_ttft"] is not None:
        line += f"; {s['queue_share_of_ttft']:.0%} of TTFT is queueing"
    return line + f"; TTFT measures the queue, not the cache: {fits(s)}"


def fits(s: dict) -> str:
    """What load would fit: the instances that bring utilisation under 1, or the rate one can take. Both
    follow the rho the instance count came from: the compute model's utilisation, or the measured one
    (1 + the queue's growth) when that is larger, whose capacity is then the offered rate over it."""
    k, calm = s["instances_needed"], s.get("instances_within_capacity", s["instances_needed"])
    util, slope = s["utilisation"], s.get("wait_growth_s_per_s")
    rho = max((x for x in (util, None if slope is None else 1.0 + slope) if x is not None), default=None)
    below = f"; {calm} for under {RHO_NEAR:g}" if calm > k else ""
    each = f" (utilisation {rho / k:.2f} each{below})" if rho is not None else ""
    rate, offered = s["capacity"]["requests_per_s"], s["offered"]["requests_per_s"]
    if rho and offered and util is not None and rho > util:
        rate = offered / rho  # the queue grew faster than the compute model says: it serves less
    one = f", or one at under {rate:.2f} requests/s" if rate is not None else ""
    return f"{k} instances fit this load{each}{one}"
