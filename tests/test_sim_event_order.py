"""The world's same-time order (sim/events.py): every SimPy event the world schedules comes from a site
in ``SAME_TIME_ORDER`` at the priority written there; the scheduler's inbox is applied in posting order
whatever the kinds; a time-series sample at ``t`` comes before the events at ``t``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import simpy

import hicache_sim.sim
from hicache_sim.sim import World
from hicache_sim.sim.dp import DPWorld
from hicache_sim.sim.events import SAME_TIME_ORDER, Inbox
from hicache_sim.workloads.synthetic import Workload
from tests.test_sim_support import FixedCompute, req, resolved, workload_of

SIM = Path(hicache_sim.sim.__file__).resolve().parent
TABLE = {row.site: row.priority for row in SAME_TIME_ORDER}

MULTITURN = {
    "kind": "multiturn",
    "multiturn": {"num_clients": 6, "num_rounds": 3, "request_length": 256, "output_length": 16, "max_parallel": 6},
}
SERVING = {
    "kind": "bench_serving",
    "bench_serving": {"num_prompts": 8, "random_input_len": 256, "random_output_len": 8, "request_rate": 50.0},
}
# Small worlds that reach the sites: storage (queries, prefetch), write-back, a pipeline, a request
# overhead, closed-loop clients (with a round barrier's pause), an open loop, bench_serving's sender, DP ranks,
# attention-DP groups stepping in lockstep.
WORLDS = {
    "storage_write_back_overhead": dict(
        workload=MULTITURN,
        cache={
            "device_tokens": 4096,
            "host_tokens": 2048,
            "write_policy": "write_back",
            "storage_backend": "local_nvme",
        },
        hardware={"request_overhead_us": 300.0},
    ),
    "storage": dict(
        workload={**MULTITURN, "multiturn": {**MULTITURN["multiturn"], "num_rounds": 5}},
        cache={"device_tokens": 4096, "host_tokens": 2048, "storage_backend": "local_nvme"},
    ),
    "round_barrier": dict(
        workload={
            **MULTITURN,
            "multiturn": {**MULTITURN["multiturn"], "round_barrier": True, "round_barrier_pause_s": 0.5},
        },
        cache={"device_tokens": 4096, "host_tokens": 4096},
    ),
    "open_loop": dict(
        workload={
            "kind": "shared_prefix",
            "shared_prefix": {"num_groups": 2, "prompts_per_group": 3, "system_prompt_length": 512, "output_length": 8},
        },
        cache={"device_tokens": 4096, "host_tokens": 4096},
    ),
    "pipeline": dict(workload=MULTITURN, cache={"device_tokens": 4096, "host_tokens": 3072}, hardware={"pp": 2}),
    "serving": dict(workload=SERVING, cache={"device_tokens": 8192, "host_tokens": 8192}),
    "dp": dict(
        workload=MULTITURN,
        cache={"device_tokens": 4096, "host_tokens": 4096},
        hardware={"dp": 2, "request_overhead_us": 300.0},
    ),
    "attn_dp_lockstep": dict(
        workload={**MULTITURN, "multiturn": {**MULTITURN["multiturn"], "num_rounds": 5}},
        cache={
            "device_tokens": 2048,
            "host_tokens": 2048,
            "write_policy": "write_back",
            "storage_backend": "local_nvme",
        },
        hardware={"tp": 2, "attn_dp": 2},
    ),
}


def _site() -> str:
    """``module.qualname`` of the innermost sim/ function on the stack (what scheduled the event)."""
    f = sys._getframe(2)
    while f is not None:
        path = Path(f.f_code.co_filename)
        if path.parent == SIM:
            return f"{path.stem}.{f.f_code.co_qualname}"
        f = f.f_back
    return "<outside sim/>"


def _scheduled(name: str, monkeypatch) -> dict[str, set[int]]:
    """Run one world with every ``env.schedule`` recorded: site -> priorities seen."""
    seen: dict[str, set[int]] = {}
    schedule = simpy.Environment.schedule

    def spy(env, event, priority=simpy.events.NORMAL, delay=0):
        seen.setdefault(_site(), set()).add(int(priority))
        return schedule(env, event, priority, delay)

    monkeypatch.setattr(simpy.Environment, "schedule", spy)
    r = resolved(**WORLDS[name])
    wl = workload_of(r.scenario)
    world = DPWorld(r, wl) if r.dp_ranks > 1 else World(r, wl)
    res = world.run()
    rows = res.total.requests if hasattr(res, "total") else res.requests
    assert rows and all(x["status"] == "finished" for x in rows)
    return seen


@pytest.fixture(scope="module")
def every_site():
    """Sites and priorities over all the worlds of ``WORLDS``."""
    mp = pytest.MonkeyPatch()
    out: dict[str, set[int]] = {}
    try:
        for name in WORLDS:
            for site, prios in _scheduled(name, mp).items():
                out.setdefault(site, set()).update(prios)
            mp.undo()
    finally:
        mp.undo()
    return out


def test_every_scheduled_event_comes_from_a_row_of_the_table_at_its_priority(every_site):
    unknown = sorted(set(every_site) - set(TABLE))
    assert not unknown, f"events scheduled outside sim/events.py SAME_TIME_ORDER: {unknown}"
    wrong = {s: sorted(p) for s, p in every_site.items() if p != {TABLE[s]}}
    assert not wrong, f"priorities differ from the table (0 URGENT, 1 NORMAL): {wrong}"


def test_the_worlds_reach_every_row_of_the_table(every_site):
    """No stale row: every site of the table schedules events in one of the worlds, and every inbox
    kind is posted by a row's events."""
    assert {row.posts for row in SAME_TIME_ORDER if row.posts is not None} == set(Inbox)
    assert not sorted(set(TABLE) - set(every_site))


def test_the_inbox_is_applied_in_posting_order_whatever_the_kinds():
    """Items posted at one time are applied first-posted first, not grouped by kind (a rule such as
    acknowledgements before arrivals would change which prefix an arriving request matches)."""
    world = World(resolved(cache={"storage_backend": "local_nvme"}), Workload([]))
    s = world.scheduler
    applied: list[tuple[Inbox, int]] = []
    for kind in Inbox:
        s.apply[kind] = lambda payload, kind=kind: applied.append((kind, payload))
    posted = [(Inbox.ARRIVE, 0), (Inbox.ACK, 1), (Inbox.PREFILL_DONE, 2), (Inbox.QUERY, 3), (Inbox.ARRIVE, 4)]
    posted += [(Inbox.ACK, 5), (Inbox.QUERY, 6)]
    for kind, payload in posted:
        s._post(kind, payload)
    s._housekeeping()
    assert applied == posted
    assert not s.inbox


def test_a_time_series_sample_at_t_comes_before_the_events_at_t():
    """One request whose prefill ends exactly on a grid point (0.5 s): the sample at 0.5 s still shows it
    running: it is taken before the step that ends at 0.5 s is applied."""
    r = resolved(metrics={"timeseries_interval_s": 0.5})
    world = World(r, Workload([req("a", 0.0, range(1, 5))]), compute=FixedCompute(prefill_s=0.5))
    res = world.run()
    assert res.requests[0]["ttft_s"] == 0.5
    assert [(row["t_s"], row["running"]) for row in res.timeseries] == [(0.0, 0), (0.5, 1)]
