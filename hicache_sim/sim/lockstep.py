"""Attention-DP groups stepping together: one loop for the schedulers of every group.

SGLang 0.5.23 runs one scheduler per attention-DP group, but every forward is one collective step over
the tp ranks: before each batch the schedulers exchange their token counts
(``managers/scheduler_components/dp_attn.py`` ``prepare_mlp_sync_batch_raw``, an all-gather every loop
turn); when no group has a token, none runs a forward; otherwise every group runs one, a group without a
batch an idle one (``need_idle_batch = max(global_num_tokens) > 0``, ``get_idle_batch``), and inside the
forward each layer gathers every group's rows for the MLP / MoE and scatters them back
(``layers/dp_attention.py`` ``dp_gather_partial``, ``dp_scatter``), so all groups finish the step together
and the next loop turn starts for all of them then.

:class:`Lockstep` is that loop: each turn every group's scheduler applies its inbox and forms its batch as
it would alone (rank order); with no batch anywhere all of them wait until something is posted to any;
else all step together: the groups' blocking write-back copies first (the collective waits for the
last), then one compute time for all (``ComputeModel.lockstep_time``: each group's attention beside the
MLP over every group's rows, the slowest group sets it), each group's layered load-back overlapping it on
its own PCIe link (the step ends when the last group's last layer is done), then each group's
post-processing. A group that ran an idle batch counts it in ``idle_steps``. Links, loads and caches stay
per group. A compute model without ``lockstep_time`` (a fixed-time test model) takes the slowest group's
own step time. Pipeline stages (``pp`` > 1) are not stepped together: their groups step on their own.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence

import simpy

from .compute import IDLE, ComputeModel, GroupWork, StepTimeModel
from .engine import Scheduler, Step


class Lockstep:
    """The attention-DP groups' common step loop (see module docstring); its process starts here."""

    def __init__(
        self, env: simpy.Environment, schedulers: Sequence[Scheduler], compute: StepTimeModel, attn_tp: int
    ) -> None:
        self.env = env
        self.schedulers = list(schedulers)
        self.compute = compute
        self.attn_tp = attn_tp
        for s in self.schedulers:
            s.counters["idle_steps"] = 0
        env.process(self._run())

    def _run(self) -> Generator[simpy.Event, object, None]:
        env = self.env
        scheds = self.schedulers
        while True:
            steps = [s.next_step() for s in scheds]
            if all(step is None for step in steps):
                ev = env.event()
                for s in scheds:
                    s.at_rest()
                    s.sleep_on(ev)
                yield ev
                for s in scheds:
                    s.sleep_on(None)
                continue
            yield from self._step(steps)

    def _step(self, steps: list[Step | None]) -> Generator[simpy.Event, object, None]:
        """One forward of every group: blocking copies, the common compute with each group's loads
        overlapped, then each group's post-processing (an idle group only counts it)."""
        env = self.env
        t0 = env.now
        busy = [(s, step) for s, step in zip(self.schedulers, steps, strict=True) if step is not None]
        blocking = [(s, step) for s, step in busy if step.blocking]
        if blocking:
            ev = env.event()
            left = [len(blocking)]

            def unblock() -> None:
                left[0] -= 1
                if left[0] == 0:
                    ev.succeed()

            for s, step in blocking:
                s.transport.start_blocking(step.blocking, unblock)
            yield ev
            for s, _ in blocking:
                s.counters["blocking_wait_s"] += env.now - t0
        t1 = env.now
        gpu = self.gpu_time(steps)
        unhidden = self.compute.step_overhead_s + gpu
        loading = [(s, step) for s, step in busy if step.loads]
        if not loading:
            yield env.timeout(unhidden)
        else:
            end = t1 + unhidden
            started = [(s, step, s.transport.start_layered(step.loads)) for s, step in loading]
            done_at = [_done_time(env, load.done) for _, _, load in started]
            for _, _, load in started:
                yield load.done
            for (s, step, load), at in zip(started, done_at, strict=True):
                arrivals = [a if a is not None else at[0] for a in load.arrivals]
                end = max(end, s.loaded_compute_end(step, arrivals, t1, gpu, unhidden))
            if end > env.now:
                yield env.timeout(end - env.now)
        for s, maybe in zip(self.schedulers, steps, strict=True):
            if maybe is None:
                s.counters["idle_steps"] += 1
            else:
                s.end_step(maybe, t0, gpu)

    def gpu_time(self, steps: Sequence[Step | None]) -> float:
        """Compute seconds of one lockstep forward over the groups' batches (None: an idle batch)."""
        c = self.compute
        if isinstance(c, ComputeModel):
            return c.lockstep_time([group_work(c, step) for step in steps], self.attn_tp)
        return max(_own_time(c, step) for step in steps if step is not None)


def _done_time(env: simpy.Environment, ev: simpy.Event) -> list[float]:
    """A list that gets the time ``ev`` fires (a layer without its own arrival time arrived by then)."""
    at: list[float] = []

    def record(_ev: simpy.Event) -> None:
        at.append(env.now)

    ev.callbacks.append(record)
    return at


def group_work(compute: ComputeModel, step: Step | None) -> GroupWork:
    """A group's batch as the compute model's lockstep work."""
    if step is None:
        return IDLE
    if step.kind == "prefill":
        return compute.group_prefill([(c.end - c.start, c.start) for c in step.chunks])
    return compute.group_decode(step.batch_size, step.kv_tokens)


def _own_time(compute: StepTimeModel, step: Step) -> float:
    if step.kind == "prefill":
        return compute.prefill_time([(c.end - c.start, c.start) for c in step.chunks])
    return compute.decode_time(step.batch_size, step.kv_tokens)
