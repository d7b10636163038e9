"""The timed world's loops end whatever the clock reads: far out, a float of seconds no longer resolves a
small wait (``now + wait == now``), and a loop that waits for time to move must not rely on it."""

from __future__ import annotations

import math

import simpy

from hicache_sim.hardware.linkmodel import LinkParams
from hicache_sim.sim.links import Link

#: Far enough out that one step of the clock (2**-8 s here) exceeds a microsecond copy many times over.
FAR_S = 3e13


def _steps_until_quiet(env: simpy.Environment, bound: int = 1000) -> int:
    """Run events until none is left, at most ``bound`` of them (a loop that spins fails, never hangs)."""
    for n in range(bound):
        if env.peek() == math.inf:
            return n
        env.step()
    return bound


def test_a_wait_below_the_clocks_resolution_completes():
    """A 1 us copy submitted at 3e13 s: its timeout cannot move the clock, so the link must complete it on
    the firing that was set for it (it once rescheduled the same zero-length wait for ever)."""
    env = simpy.Environment(initial_time=FAR_S)
    assert env.now + 1e-6 == env.now
    link = Link(env, "d2h", LinkParams(1e9, 0.0, 0.0, 0.0))
    done = []
    flow = link.submit(1000, 1, done.append, milestones=4, on_milestone=lambda f, i, t: done.append(i))
    assert _steps_until_quiet(env) < 10
    assert done == [0, 1, 2, 3, flow]
    assert flow.end_s == FAR_S and link.bytes == 1000


def test_concurrent_waits_below_the_clocks_resolution_all_complete():
    """Several transfers sharing the link far out, joining at different times: every one completes, in
    at most one firing each."""
    env = simpy.Environment(initial_time=FAR_S)
    link = Link(env, "h2d", LinkParams(1e9, 1e-7, 0.0, 0.0))
    flows = [link.submit(1000 * (i + 1), 1) for i in range(5)]
    env.timeout(1.0).callbacks.append(lambda _ev: flows.append(link.submit(500, 1)))
    assert _steps_until_quiet(env) < 40
    assert all(f.end_s is not None for f in flows) and link.transfers == 6
