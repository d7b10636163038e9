"""An SGLang-like scheduler in simulated time, driving the core's request flow.

One loop iteration (``Scheduler.run``) is one turn of SGLang's event loop:

1. ``check_hicache_events``: apply the acknowledgements and storage query results that arrived
   since the last step; take in new requests (each starts its storage prefetch on arrival); in
   buffer_only mode stage pending writes.
2. Form a batch. Prefill has priority (SGLang's default, no mixed chunk): the chunked request
   continues first, then the waiting queue in the order of ``scheduler.schedule_policy`` (SGLang's
   ``--schedule-policy``: fcfs keeps arrival order, lpm sorts by matched prefix, dfs-weight walks the
   prefix tree, random shuffles (seeded from the scenario's seed), lof puts long outputs first; see
   :mod:`hicache_sim.core.schedule`); a request whose prefetch may not stop yet
   is skipped (``check_prefetch_progress``); admission follows the PrefillAdder budgets
   (:mod:`.admission`) and ``max_running_requests``. Once a request was refused for memory, no new
   prefill is tried until a request finishes, is retracted or an acknowledgement unpins pages
   (SGLang's ``batch_is_full``). Otherwise one decode step for the whole running batch
   (:mod:`.decode`), after a page for each request crossing a page boundary; when the pool cannot
   provide them, requests are retracted (pages given back, requeued: it restarts from its prefix).
3. Run the batch: wait for any blocking write-back copy, then compute; load-backs of the batch
   overlap layer by layer (layer i computes once it arrived and layer i - 1 is done).
4. Post-process: checkpoint chunked prefills; emit first tokens and insert the prompt of a request
   that goes on to decode (SGLang's ``cache_unfinished_req``: others can share it meanwhile);
   finish requests (insert into the cache: write-through starts), hand them back (closed-loop
   clients send their next turn).

Runs of quiet decode steps (no arrival, acknowledgement, timer or time-series sample point before the
step ends, no member finishing or crossing a page boundary, no prefill to try) are advanced with one
SimPy timeout to the end of the last one (``Scheduler._decode_run``): every step's time is still
computed and summed in the same order, so simulated times and counters are the same floats as one
timeout per step; ``counters["events"]`` counts the timeouts the run stood for.

Pipeline parallelism (``compute.pp`` stages): a prefill batch is a micro-batch that holds the first
stage for one stage time, so the loop forms the next batch then, while the first one's results (first
tokens, checkpoints, decode admission) come back ``pp - 1`` stage times later, applied at the next loop
iteration like an acknowledgement; its requests are in flight meanwhile (a chunked request's next
chunk waits for its previous one: chunks of one request are not pipelined). A decode step keeps the
pipeline full with micro-batches of the running batch (see :mod:`.compute`).

The post-prefill insert is not a chunked checkpoint: it counts an insert-hit, so write-through of a
prompt starts right after its prefill, as in SGLang. Which later inserts count again is
``semantics.checkpoint_hits``: HiRadixCache (2025) counts every non-checkpoint insert, so under
write_through_selective the finish insert counts a second hit for the same request; the unified tree
(2026) counts, on every insert, only the nodes past what the request had already inserted.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

import simpy

from ..core import SCHEDULE_POLICIES, HiCache, Transfer, TransferKind, check
from ..simconfig import SchedulerPolicy
from .admission import INF_TOKENS, NO_TOKEN, OTHER, Chunk, PrefillAdder
from .compute import StepTimeModel
from .decode import DecodeBatch
from .events import Inbox
from .requests import SimRequest
from .transport import Transport

#: Why ``r.st`` is set where it is read: from admission until the request finishes or is retracted.
HELD = "a request past admission holds its cache state until it finishes or is retracted"


@dataclass(slots=True)
class Step:
    """One batch: prefill chunks or a decode step, with the transfers it waits for."""

    kind: str
    chunks: list[Chunk] = field(default_factory=list)
    loads: list[Transfer] = field(default_factory=list)
    blocking: list[Transfer] = field(default_factory=list)
    batch_size: int = 0
    kv_tokens: int = 0


class Scheduler:
    """SGLang-like scheduler over one HiCache. ``run()`` is its SimPy process."""

    def __init__(
        self,
        env: simpy.Environment,
        cache: HiCache,
        compute: StepTimeModel,
        transport: Transport,
        policy: SchedulerPolicy,
        *,
        storage_latency_s: float,
        on_done: Callable[[SimRequest], None],
        check_invariants: bool = False,
    ) -> None:
        self.env = env
        self.cache = cache
        self.compute = compute
        self.transport = transport
        self.policy = policy
        self.page = cache.page_size
        self.storage_latency_s = storage_latency_s
        self.on_done = on_done
        self.check_invariants = check_invariants
        # (kind, payload), applied in posting order at the next loop turn (events.py: the same-time order).
        self.inbox: list[tuple[Inbox, Any]] = []
        self.apply: dict[Inbox, Callable[[Any], None]] = {
            Inbox.ACK: self._apply_ack,
            Inbox.QUERY: self._apply_query,
            Inbox.PREFILL_DONE: self._apply_prefill_done,
            Inbox.ARRIVE: self._take_in,
        }
        self.waiting: deque[tuple[SimRequest, int]] = deque()  # (request, epoch): stale entries skipped
        self.n_waiting = 0
        self.decoding = DecodeBatch(self.page, policy.clip_max_new_tokens)
        self.chunked: SimRequest | None = None
        self.prefilling: list[SimRequest] = []
        self.in_flight: list[Step] = []  # prefill micro-batches still travelling through later stages
        self.pp = getattr(compute, "pp", 1)
        self.batch_full = False
        self.new_token_ratio = policy.init_new_token_ratio
        self.order_waiting = SCHEDULE_POLICIES.get(policy.schedule_policy)
        self.rng = random.Random(policy.seed)
        self._idle: simpy.Event | None = None
        self._wake_times: set[float] = set()
        # Storage re-asks (SGLang 0.5.23's StoragePrefetchRetries): request -> the prefill pass at
        # which it asks again (None until the first pass that sees it sets it).
        self.retry_interval = cache.sem.prefetch_retry_poll_interval
        self.retry_max = cache.sem.prefetch_retry_max_attempts
        self._retries: dict[SimRequest, int | None] = {}
        self._prefill_pass = 0
        # Time of the next thing outside the scheduler that may happen (the world adds its sample grid).
        self.horizon: Callable[[], float] = env.peek
        self.merge_decode = not check_invariants  # check() after every step needs every step
        self.merged_steps = 0  # decode steps advanced inside a run (one timeout fewer each)
        self.counters = {
            "steps": 0,
            "prefill_steps": 0,
            "decode_steps": 0,
            "prefill_tokens": 0,
            "decode_tokens": 0,
            "retractions": 0,
            "rejected_requests": 0,
            "prefetch_reissues": 0,
            "load_stall_s": 0.0,
            "blocking_wait_s": 0.0,
            "busy_s": 0.0,
        }

    # ------------------------------------------------------------------------------ inputs

    def submit(self, r: SimRequest) -> None:
        """A request arrived (taken in at the next loop iteration, as SGLang's recv_requests)."""
        self._post(Inbox.ARRIVE, r)

    def on_ack(self, t: Transfer) -> None:
        """A transfer finished; its acknowledgement is applied at the next loop iteration."""
        self._post(Inbox.ACK, t)

    def wake(self) -> None:
        """Something the idle scheduler may be waiting for changed (prefetch progress, a timer)."""
        if self._idle is not None and not self._idle.triggered:
            self._idle.succeed()

    def _post(self, kind: Inbox, payload: Any) -> None:
        self.inbox.append((kind, payload))
        self.wake()

    def reject(self, r: SimRequest, reason: str) -> None:
        """Report ``r`` as rejected with a reason (it must hold nothing in the cache)."""
        r.state = "done"
        r.rec.status = "rejected"
        r.rec.reason = reason
        self.counters["rejected_requests"] += 1
        self.on_done(r)

    @property
    def running(self) -> int:
        """Requests holding pages: decoding, in this prefill batch, or between chunks."""
        return len(self._active())

    def _active(self) -> list[SimRequest]:
        active = dict.fromkeys(self.decoding)
        active.update(dict.fromkeys(self.prefilling))
        for step in self.in_flight:
            active.update(dict.fromkeys(c.req for c in step.chunks))
        if self.chunked is not None:
            active[self.chunked] = None
        return list(active)

    # -------------------------------------------------------------------------------- loop

    def run(self) -> Generator[simpy.Event, object, None]:
        while True:
            step = self.next_step()
            if step is None:
                self.at_rest()
                self._idle = self.env.event()
                yield self._idle
                self._idle = None
                continue
            yield from self._execute(step)

    def next_step(self) -> Step | None:
        """One loop turn up to the batch: apply the inbox, then form the next batch (None: nothing to run)."""
        self._housekeeping()
        return self._plan()

    def at_rest(self) -> None:
        """No batch this turn: SGLang's idle self-check re-initialises the estimate when nothing runs,
        so the next burst starts cautious."""
        if not self.decoding and self.chunked is None and not self.in_flight:
            self.new_token_ratio = self.policy.init_new_token_ratio

    def sleep_on(self, ev: simpy.Event | None) -> None:
        """Wait on ``ev`` (None: awake): :meth:`wake` triggers it. The attention-DP lockstep gives all
        its groups one event, so a post to any of them resumes the step loop."""
        self._idle = ev

    def _housekeeping(self) -> None:
        cache = self.cache
        now = self.env.now
        cache.now = now
        while self.inbox:
            items, self.inbox = self.inbox, []
            apply = self.apply
            for kind, payload in items:
                apply[kind](payload)
        if cache.host_mode.stages:
            cache.flush_pending_writes()
        self.transport.dispatch(cache.take_transfers())
        if self.check_invariants:
            self.check()

    def _apply_ack(self, t: Transfer) -> None:
        """A transfer's acknowledgement: the core completes it (pages unpinned: try prefill again)."""
        self.cache.complete(t, self.env.now)
        self.batch_full = False

    def _apply_query(self, rid: str) -> None:
        """Storage answered a request's hit query."""
        self.cache.prefetch_query(rid)
        self._note_prefetch_misses()

    def _apply_prefill_done(self, done: tuple[Step, float]) -> None:
        """A pipeline micro-batch left the last stage at ``done[1]``."""
        step, at = done
        self.in_flight.remove(step)
        self._after_prefill(step, at, first_stage_done=True)

    def _take_in(self, r: SimRequest) -> None:
        """A new request: start its storage prefetch (hit query after the storage latency), queue it."""
        if self.cache.storage is not None:
            self._start_prefetch(r)
        self._push_waiting(r, front=False)

    def _start_prefetch(self, r: SimRequest) -> None:
        """Match the request and ask storage for what follows its cached prefix."""
        cache = self.cache
        m = cache.match_prefix(r.keys[: r.limit])
        matched = m.device_hit_pages + m.host_hit_pages
        op = cache.prefetch(r.req.rid, m.last_node, r.keys[matched : r.limit], self.env.now)
        if op is not None:
            r.had_prefetch = True
            rid = r.req.rid
            self.env.timeout(self.storage_latency_s).callbacks.append(lambda _ev: self._post(Inbox.QUERY, rid))

    def _note_prefetch_misses(self) -> None:
        """Queue a storage re-ask for each waiting request whose prefetch just ended as a miss poll."""
        misses = self.cache.take_prefetch_misses()
        if not misses or self.retry_interval <= 0:
            return
        by_rid = {r.req.rid: r for r in self._live_waiting()}
        for rid in misses:
            r = by_rid.get(rid)
            if r is not None:
                self._retries[r] = None

    def _reissue_prefetches(self) -> None:
        """One prefill pass of SGLang's re-ask pacing: the queue head never waits on a re-ask (its
        entry is dropped), a request past ``retry_max`` re-asks is admitted as it is, the others ask
        storage again ``retry_interval`` passes after the pass that first saw their miss."""
        self._prefill_pass += 1
        retries = self._retries
        if not retries:
            return
        live = self._live_waiting()
        for r in [r for r in retries if r.state != "waiting"]:
            del retries[r]
        if live and live[0] in retries:
            del retries[live[0]]
        step = self._prefill_pass
        for r in live:
            if r not in retries:
                continue
            if r.prefetch_reissues >= self.retry_max:
                del retries[r]
                continue
            due = retries[r]
            if due is None:
                due = retries[r] = step + self.retry_interval
            if due > step:
                continue
            del retries[r]
            r.prefetch_reissues += 1
            self.counters["prefetch_reissues"] += 1
            self._start_prefetch(r)

    def _push_waiting(self, r: SimRequest, *, front: bool) -> None:
        r.state = "waiting"
        r.epoch += 1
        if front:
            self.waiting.appendleft((r, r.epoch))
        else:
            self.waiting.append((r, r.epoch))
        self.n_waiting += 1

    def _plan(self) -> Step | None:
        if self.chunked is not None or (self.n_waiting and not self.batch_full):
            step = self._form_prefill()
            if step is not None:
                return step
        if self.decoding:
            return self._form_decode()
        return None

    # ----------------------------------------------------------------------------- prefill

    def _form_prefill(self) -> Step | None:
        cache = self.cache
        pol = self.policy
        adder = PrefillAdder(
            cache,
            offset=self.decoding.reserved_tokens() * self.new_token_ratio,
            rem_input=pol.max_prefill_tokens,
            rem_chunk=pol.chunked_prefill_tokens or INF_TOKENS,
            clip_tokens=pol.clip_max_new_tokens,
            chunking=pol.chunked_prefill_tokens is not None,
        )
        more = True
        if self.chunked is not None:
            c = adder.add_chunked(self.chunked)
            more = c is not None and c.final
        if more:
            storage = cache.storage is not None
            if storage:
                self._reissue_prefetches()
            self._admit_waiting(adder)
            if storage:  # a miss poll needs a store: no per-step call without one
                self._note_prefetch_misses()
        transfers = cache.take_transfers()
        if not adder.chunks:
            self.transport.dispatch(transfers)
            return None
        step = Step("prefill", adder.chunks)
        rest = []
        for t in transfers:
            if t.kind is TransferKind.H2D:
                step.loads.append(t)
            elif t.blocking:
                step.blocking.append(t)
            else:
                rest.append(t)
        self.transport.dispatch(rest)
        self.prefilling = [c.req for c in adder.chunks]
        return step

    def _admit_waiting(self, adder: PrefillAdder) -> None:
        """Walk the waiting queue in order, admitting until a budget or limit stops the batch."""
        cache = self.cache
        now = self.env.now
        running = len(self.decoding) + (1 if self.chunked is not None else 0)
        running += sum(len(s.chunks) for s in self.in_flight)
        if self.policy.schedule_policy != "fcfs":
            self._sort_waiting()
        new = 0
        for r, ep in self.waiting:
            if r.state != "waiting" or r.epoch != ep:
                continue
            if running + new >= self.policy.max_running_requests:
                self.batch_full = True
                break
            if not cache.check_prefetch_progress(r.req.rid, now):
                self._wake_at_prefetch_timeout(r.req.rid)
                continue
            if r.had_prefetch and r.rec.prefetch_done_s is None:
                r.rec.prefetch_done_s = now
            res = adder.add_one(r)
            if res == NO_TOKEN:
                self.batch_full = bool(adder.chunks) or bool(self.decoding)
                break
            if r.st is not None:
                new += 1
                self._admitted(r)
            if res == OTHER:
                break
        q = self.waiting
        while q and (q[0][0].state != "waiting" or q[0][0].epoch != q[0][1]):
            q.popleft()

    def _sort_waiting(self) -> None:
        """Reorder the live waiting entries by the schedule policy (SGLang sorts its queue in place,
        so the order carries over to later rounds)."""
        self.waiting = deque((r, r.epoch) for r in self.order_waiting(self._live_waiting(), self.cache, self.rng))

    def _live_waiting(self) -> list[SimRequest]:
        """The waiting queue's live requests, in order (entries left by an admission or a re-queue
        skipped)."""
        return [r for r, ep in self.waiting if r.state == "waiting" and r.epoch == ep]

    def _admitted(self, r: SimRequest) -> None:
        r.state = "prefill"
        self.n_waiting -= 1
        st = r.st
        assert st is not None, HELD
        r.loaded_now = st.loaded_pages > 0
        if not r.admitted_once:
            r.admitted_once = True
            rec = r.rec
            rec.admit_s = self.env.now
            rec.prompt_pages = len(r.keys)
            rec.device_hit_pages = st.device_hit
            rec.host_hit_pages = st.host_hit
            rec.storage_hit_pages = st.storage_hit

    def _wake_at_prefetch_timeout(self, rid: str) -> None:
        """A skipped request may become schedulable when its prefetch times out: wake then."""
        op = self.cache.ongoing_prefetch.get(rid)
        if op is None:
            return
        at = op.start_time + self.cache.prefetch_timeout(op) + 1e-9
        if at <= self.env.now or at in self._wake_times:
            return
        self._wake_times.add(at)

        def ring(_ev: simpy.Event, at: float = at) -> None:
            self._wake_times.discard(at)
            self.wake()

        self.env.timeout(at - self.env.now).callbacks.append(ring)

    # ------------------------------------------------------------------------------ decode

    def _form_decode(self) -> Step | None:
        cache = self.cache
        batch = self.decoding
        needy = batch.due_pages()
        retractions = self.counters["retractions"]
        if needy and cache.device.available() + cache.evictable_pages < len(needy):
            self._retract_decode(needy)
        for i, r in enumerate(needy):
            if r.state != "decode":
                continue
            st = r.st
            assert st is not None, HELD
            while not cache.extend_request(st, 1):
                victim = batch.victim()
                if victim is r and len(batch) == 1:
                    victim = None
                if victim is None:
                    if cache.inflight:  # pinned pages come back at an acknowledgement: wait for it
                        for x in needy[i:]:
                            if x.state == "decode":
                                batch.page_deferred(x)
                        self.transport.dispatch(cache.take_transfers())
                        return None
                    batch.leave(r)
                    cache.abort_request(st)
                    r.st = None
                    self.batch_full = False
                    self.reject(r, "device pool too small for this request's decode (nothing to retract)")
                    break
                self._retract(victim)
                if victim is r:
                    break
            else:
                batch.page_allocated(r)
        transfers = cache.take_transfers()
        if not batch:
            self.transport.dispatch(transfers)
            return None
        if self.counters["retractions"] == retractions:
            # SGLang's update_running_batch: the estimate decays on every decode batch without retraction
            # (a retraction set it from the batch's progress instead).
            pol = self.policy
            self.new_token_ratio = max(pol.min_new_token_ratio, self.new_token_ratio - pol.new_token_ratio_decay)
        step = Step("decode", batch_size=len(batch), kv_tokens=batch.kv_tokens_next())
        step.blocking = [t for t in transfers if t.blocking]
        self.transport.dispatch([t for t in transfers if not t.blocking])
        return step

    def _retract_decode(self, needy: list[SimRequest]) -> None:
        """SGLang's retract_decode: retract one request, then more until the pages the remaining ones
        need for the next step fit the free and evictable pool; always keep one."""
        cache = self.cache
        batch = self.decoding
        first = True
        while len(batch) > 1 and (first or cache.device.available() + cache.evictable_pages < _still_in(needy, batch)):
            first = False
            victim = batch.victim()
            assert victim is not None, "a batch of two or more has a victim"
            self._retract(victim)

    def _retract(self, r: SimRequest) -> None:
        """Give back everything ``r`` holds and requeue it; it restarts from its prefix (its output so
        far is prefilled again with the prompt, as SGLang re-prefills origin input + output ids)."""
        self.decoding.leave(r)
        st = r.st
        assert st is not None, HELD
        self.cache.abort_request(st)
        r.st = None
        r.seq_tokens = r.req.input_tokens + r.generated
        r.done_tokens = 0
        r.rec.retractions += 1
        self.counters["retractions"] += 1
        self._push_waiting(r, front=self.policy.retract_to == "front")
        self.batch_full = False
        decoded, wanted = self.decoding.progress()
        steps = self.policy.retract_decode_steps * len(self.decoding)
        self.new_token_ratio = min(1.0, (decoded + steps) / max(1, wanted))

    # ----------------------------------------------------------------------------- running

    def _execute(self, step: Step) -> Generator[simpy.Event, object, None]:
        env = self.env
        compute = self.compute
        t0 = env.now
        if step.blocking:
            ev = env.event()

            def unblock() -> None:
                ev.succeed()

            self.transport.start_blocking(step.blocking, unblock)
            yield ev
            self.counters["blocking_wait_s"] += env.now - t0
        t1 = env.now
        overhead = compute.step_overhead_s
        if step.kind == "prefill":
            gpu = compute.prefill_time([(c.end - c.start, c.start) for c in step.chunks])
        else:
            gpu = compute.decode_time(step.batch_size, step.kv_tokens)
            overhead *= min(self.pp, step.batch_size)  # one scheduler pass per decode micro-batch
        unhidden = overhead + gpu
        if step.loads:
            yield from self._overlap_loads(step, t1, gpu, unhidden)
        elif step.kind == "decode" and self.merge_decode and not step.blocking:
            t0 = yield from self._decode_run(step, t0, overhead, unhidden)
        else:
            yield env.timeout(unhidden)
        self.end_step(step, t0, gpu)

    def end_step(self, step: Step, t0: float, gpu: float) -> None:
        """The step that started at ``t0`` (``gpu`` seconds of compute) ended now: its counters and
        post-processing (also called by the attention-DP lockstep, :mod:`.lockstep`)."""
        env = self.env
        self.counters["steps"] += 1
        self.counters["busy_s"] += env.now - t0
        if step.kind == "prefill" and self.pp > 1:
            self._send_down_the_pipeline(step, (self.pp - 1) * gpu)
        elif step.kind == "prefill":
            self._after_prefill(step, env.now)
        else:
            self._after_decode(step)
        self.transport.dispatch(self.cache.take_transfers())
        if self.check_invariants:
            self.check()

    def _decode_run(
        self, step: Step, t0: float, overhead: float, unhidden: float
    ) -> Generator[simpy.Event, object, float]:
        """Run this decode step and the quiet ones after it in one timeout; returns the start of the
        last step (its post-processing is the caller's, as for a single step).

        A step may follow the previous one without a loop turn when the turn would do nothing: no
        event fires before the previous step ends (``horizon``), no member finishes or needs a page
        (``DecodeBatch.quiet_steps``), no prefill is tried (no chunk pending; waiting queue empty or
        the batch full), nothing is queued for staging (buffer_only). Step times are summed in order
        exactly as consecutive timeouts would; the run is cut to one step when the end time cannot be
        reached as ``now + delay`` bit for bit."""
        env = self.env
        cache = self.cache
        t_prev, t = t0, t0 + unhidden
        quiet = 0
        no_prefill = self.chunked is None and (not self.n_waiting or self.batch_full)
        if no_prefill and not (cache.host_mode.stages and cache.buffer_queue):
            quiet = self.decoding.quiet_steps()
        n = 0
        if quiet:
            horizon = self.horizon()
            bs = step.batch_size
            kv = step.kv_tokens
            decode_time = self.compute.decode_time
            busy = self.counters["busy_s"]
            ratio = self.new_token_ratio
            pol = self.policy
            low, decay = pol.min_new_token_ratio, pol.new_token_ratio_decay
            while n < quiet and t < horizon:
                # step n + 1 ended at t: its post-processing (counters, ratio) as _after_decode does it
                busy += t - t_prev
                ratio = max(low, ratio - decay)
                n += 1
                kv += bs
                t_prev, t = t, t + (overhead + decode_time(bs, kv))
        delay = t - env.now
        if n == 0 or env.now + delay != t:
            yield env.timeout(unhidden)
            return t0
        c = self.counters
        c["steps"] += n
        c["decode_steps"] += n
        c["decode_tokens"] += n * step.batch_size
        c["busy_s"] = busy
        self.new_token_ratio = ratio
        self.decoding.skip(n)
        self.merged_steps += n
        yield env.timeout(delay)
        return t_prev

    def _send_down_the_pipeline(self, step: Step, rest_s: float) -> None:
        """The first stage is done with this micro-batch; the other stages finish it ``rest_s`` later."""
        self.in_flight.append(step)
        self.prefilling = []
        for c in step.chunks:
            self._chunk_progress(c)
        done_at = self.env.now + rest_s
        self.env.timeout(rest_s).callbacks.append(lambda _ev: self._post(Inbox.PREFILL_DONE, (step, done_at)))

    def _overlap_loads(
        self, step: Step, t1: float, gpu: float, unhidden: float
    ) -> Generator[simpy.Event, object, None]:
        """Layer i computes once layer i arrived and layer i - 1 is done; charge what is not hidden."""
        env = self.env
        load = self.transport.start_layered(step.loads)
        yield load.done
        f = self.loaded_compute_end(step, load.arrivals, t1, gpu, unhidden)
        if f > env.now:
            yield env.timeout(f - env.now)

    def loaded_compute_end(
        self, step: Step, arrivals: Sequence[float | None], t1: float, gpu: float, unhidden: float
    ) -> float:
        """When the step's compute ends given its layers' arrival times (layer i computes once it
        arrived and layer i - 1 is done); the stall past ``t1 + unhidden`` is charged to the requests
        that loaded."""
        env = self.env
        compute = self.compute
        per_layer = gpu / compute.num_layers
        f = t1 + compute.step_overhead_s
        for a in arrivals:
            f = max(f, a if a is not None else env.now) + per_layer
        stall = max(0.0, f - (t1 + unhidden))
        self.counters["load_stall_s"] += stall
        for c in step.chunks:
            if c.req.loaded_now:
                c.req.rec.load_wait_s += stall
                c.req.loaded_now = False
        return f

    def _chunk_progress(self, c: Chunk) -> None:
        """The first (or only) stage is done with chunk ``c``: its request's progress, and the request
        being chunked. Under PP this happens when the micro-batch leaves the first stage, so the next
        chunk enters the pipeline right behind it (SGLang schedules it in the next micro-batch); a
        chunk must never be scheduled again while it is still in the pipeline."""
        r = c.req
        r.done_tokens = c.end
        self.counters["prefill_tokens"] += c.end - c.start
        if not c.final:
            self.chunked = r
            upto = min(c.end // self.page, self._checkpoint_cap(r))
            st = r.st
            assert st is not None, HELD
            if upto > st.cached:
                self.cache.checkpoint_request(st, upto)
        elif self.chunked is r:
            self.chunked = None

    def _after_prefill(self, step: Step, now: float, *, first_stage_done: bool = False) -> None:
        """The batch's last stage finished at ``now``: first tokens, checkpoints, decode admission.
        ``first_stage_done``: the chunks' progress was already taken when they left the first stage."""
        self.counters["prefill_steps"] += 1
        if not first_stage_done:
            self.prefilling = []
        cache = self.cache
        for c in step.chunks:
            r = c.req
            if not first_stage_done:
                self._chunk_progress(c)
            if not c.final:
                continue
            r.generated += 1
            if r.rec.first_token_s is None:
                r.rec.first_token_s = now
            if r.generated >= r.out_target:
                self._finish(r, now)
                continue
            # SGLang's cache_unfinished_req after the prefill: the prompt becomes shareable while
            # the request decodes (the same node instant mode creates at finish).
            upto = self._checkpoint_cap(r)
            st = r.st
            assert st is not None, HELD
            if upto > st.cached:
                cache.checkpoint_request(st, upto, chunked=False)
            self.decoding.join(r)

    def _checkpoint_cap(self, r: SimRequest) -> int:
        """Pages a chunk checkpoint may insert: with output caching, never the partial last prompt page
        (the finish keys give that slot a different key: two nodes must not own one device page)."""
        if self.policy.insert_output and r.req.finish_keys:
            return min(len(r.keys), r.req.input_tokens // self.page)
        return len(r.keys)

    def _after_decode(self, step: Step) -> None:
        self.counters["decode_steps"] += 1
        self.counters["decode_tokens"] += step.batch_size
        for r in self.decoding.advance():
            self._finish(r)

    def _finish(self, r: SimRequest, at: float | None = None) -> None:
        """Cache the finished request: its prompt, or prompt + output where the output's keys are known.
        ``at``: when its last token came (default now)."""
        st = r.st
        assert st is not None, HELD
        fk = r.req.finish_keys
        if self.policy.insert_output and fk and len(fk) <= len(st.pages):
            st.keys = list(fk)
        self.cache.finish_request(st)
        r.st = None
        r.state = "done"
        r.rec.finish_s = self.env.now if at is None else at
        r.rec.status = "finished"
        self.batch_full = False
        self.on_done(r)

    # ---------------------------------------------------------------------------- checking

    def held_device_pages(self) -> list[int]:
        """Device pages running requests hold that the tree does not own."""
        out: list[int] = []
        for r in self._active():
            if r.st is not None:
                out.extend(r.st.pages[r.st.cached :])
        return out

    def check(self) -> None:
        """Every core invariant, with the running requests' own pages accounted for."""
        check(self.cache, held_device_pages=self.held_device_pages())


def _still_in(needy: list[SimRequest], batch: DecodeBatch) -> int:
    """Members of ``needy`` still in the batch (a retracted one needs no page)."""
    return sum(1 for r in needy if r in batch)
