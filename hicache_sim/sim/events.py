"""The world's same-time order, in one table, and what the scheduler's inbox holds.

SimPy runs events in ``(time, priority, eid)`` order, ``eid`` a counter taken when an event is
scheduled. The world schedules each of its events at one of SimPy's two priorities (``URGENT`` only
where SimPy itself starts a process), so at one simulated time the order is:

1. the time-series samples due: ``World.run`` takes every grid point up to the next event's time
   before stepping it, so a sample at ``t`` sees what the events before ``t`` left;
2. process starts (SimPy's ``URGENT`` Initialize), in the order the world starts them (scheduler before
   arrivals; DP ranks in rank order, attention-DP groups' common loop after them);
3. every other event at ``NORMAL``, in the order it was scheduled: arrivals, a request reaching the
   scheduler after its overhead, link firings (acknowledgements), storage query answers, timers
   (prefetch timeouts, pipeline stages), the scheduler's own steps and wake-ups, bench_serving's slots.

No kind of event goes before another at one time by rule: two events at one time run in the order they
were scheduled, as one SGLang process sees them in the order they happened. What the scheduler must act on
goes into its inbox (:class:`Inbox`) and is applied at the top of its next loop turn (SGLang's
``check_hicache_events`` and ``recv_requests``), in posting order whatever its kind.

:data:`SAME_TIME_ORDER` names every function in ``sim/`` that schedules a SimPy event, with its priority
and what happens then; ``tests/test_sim_event_order.py`` runs worlds that reach them and fails on an event
scheduled anywhere else or at another priority, and on an inbox applied out of posting order.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from simpy.events import NORMAL, URGENT


class Inbox(enum.Enum):
    """What the scheduler's inbox holds: each item is applied at the scheduler's next loop turn."""

    ARRIVE = "arrive"  # a request reached the scheduler (its storage prefetch starts, it queues)
    ACK = "ack"  # a non-blocking transfer finished: the core completes it
    QUERY = "query"  # a storage hit query answered: the prefetch learns how much storage holds
    PREFILL_DONE = "prefill_done"  # a pipeline micro-batch left the last stage: first tokens, decode


@dataclass(frozen=True)
class SameTime:
    """One place that schedules SimPy events: the function (``module.qualname`` under ``sim/``), the
    SimPy priority its events carry, and what happens when they fire."""

    site: str
    priority: int
    then: str
    posts: Inbox | None = None


#: Every site in sim/ that schedules a SimPy event (see the module docstring for the order they make).
SAME_TIME_ORDER: tuple[SameTime, ...] = (
    # URGENT: SimPy's process start (Initialize), in the order the world starts its processes.
    SameTime("world.World.__init__", URGENT, "the scheduler process starts (before the arrivals)"),
    SameTime("lockstep.Lockstep.__init__", URGENT, "the attention-DP groups' common step loop starts"),
    SameTime("arrivals.OpenLoop.__init__", URGENT, "the trace's arrival process starts"),
    SameTime("arrivals.ClosedLoop.__init__", URGENT, "bench_multiturn's sender starts"),
    SameTime("arrivals.ClosedLoop.on_done", URGENT, "a client's pause before its next turn starts"),
    SameTime("arrivals.ServingLoop.__init__", URGENT, "bench_serving's sender starts"),
    # NORMAL: everything else, in the order it was scheduled.
    SameTime("world.World.run", NORMAL, "a process that returned ends (SimPy schedules its Process event)"),
    SameTime("dp.DPWorld.run", NORMAL, "a process that returned ends, on the DP ranks' shared clock"),
    SameTime("arrivals.OpenLoop._run", NORMAL, "the next request arrives at its arrival_s"),
    SameTime("arrivals.ClosedLoop._run", NORMAL, "the sender's gap before its next send ends"),
    SameTime("arrivals.ClosedLoop._release_after", NORMAL, "a client's pause ends: it is ready again"),
    SameTime("arrivals.ServingLoop._send_capped", NORMAL, "a request is due (or its concurrency slot opens)"),
    SameTime("arrivals.ServingLoop._run", NORMAL, "the warm-up pause ends"),
    SameTime("arrivals.ServingLoop.on_done", NORMAL, "a finished request frees its warm-up or slot"),
    SameTime("world.World._deliver", NORMAL, "a request reaches the scheduler after its overhead", Inbox.ARRIVE),
    SameTime("dp.DPWorld._deliver", NORMAL, "a request reaches the DP controller after its overhead"),
    SameTime("links.Link.submit", NORMAL, "a copy's latency has passed: it joins its link"),
    SameTime("links.Link._reschedule", NORMAL, "the link's next copy (or milestone) is due", Inbox.ACK),
    SameTime("transport.Transport.start_layered.<locals>.finished", NORMAL, "a step's layered load-back ended"),
    SameTime("engine.Scheduler.wake", NORMAL, "the idle scheduler resumes (something was posted or is due)"),
    SameTime("engine.Scheduler._start_prefetch", NORMAL, "storage answers a hit query", Inbox.QUERY),
    SameTime("engine.Scheduler._wake_at_prefetch_timeout", NORMAL, "a skipped request's prefetch times out"),
    SameTime("engine.Scheduler._execute", NORMAL, "a step's compute ends"),
    SameTime("engine.Scheduler._execute.<locals>.unblock", NORMAL, "the blocking write-back copies ended"),
    SameTime("engine.Scheduler._decode_run", NORMAL, "a run of quiet decode steps ends"),
    SameTime("lockstep.Lockstep._step", NORMAL, "the attention-DP groups' common step ends"),
    SameTime("lockstep.Lockstep._step.<locals>.unblock", NORMAL, "every group's blocking write-back copies ended"),
    SameTime("engine.Scheduler._overlap_loads", NORMAL, "the compute a load-back left unhidden ends"),
    SameTime(
        "engine.Scheduler._send_down_the_pipeline", NORMAL, "a micro-batch leaves the last stage", Inbox.PREFILL_DONE
    ),
)
