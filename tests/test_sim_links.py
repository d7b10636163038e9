"""Links of the timed world: lone transfer cost, processor sharing, FIFO, per-layer milestones and
utilisation accounting, checked against closed forms."""

from __future__ import annotations

import pytest
import simpy

from hicache_sim.hardware.linkmodel import LinkParams
from hicache_sim.sim.links import Link, storage_params

PARAMS = LinkParams(bandwidth_Bps=50e9, latency_s=10e-6, half_efficiency_bytes=65536.0, segment_overhead_s=0.0)
NBYTES = 64 * 2**20
SEGMENTS = 512  # 128 KiB pieces: efficiency 2/3


def _work(nbytes: int = NBYTES, segments: int = SEGMENTS) -> float:
    seg = nbytes / segments
    return nbytes / (PARAMS.bandwidth_Bps * seg / (seg + PARAMS.half_efficiency_bytes))


def _run(sharing: str, starts: list[float], *, milestones: int = 0):
    env = simpy.Environment()
    link = Link(env, "h2d", PARAMS, sharing)
    flows = []
    marks: dict[int, list[float]] = {}

    def launch(t: float):
        yield env.timeout(t)
        f = link.submit(
            NBYTES,
            SEGMENTS,
            milestones=milestones,
            on_milestone=lambda fl, i, now: marks.setdefault(fl.id, []).append(now),
        )
        flows.append(f)

    for t in starts:
        env.process(launch(t))
    env.run()
    return link, flows, marks


def test_lone_transfer_takes_latency_plus_bytes_over_effective_bandwidth():
    link, (f,), _ = _run("processor", [0.0])
    assert f.end_s == pytest.approx(PARAMS.latency_s + _work(), rel=1e-12)
    assert f.end_s == pytest.approx(PARAMS.time(NBYTES, SEGMENTS), rel=1e-12)
    assert link.bytes == NBYTES and link.busy_s == pytest.approx(_work(), rel=1e-12)


def test_processor_sharing_two_equal_concurrent_transfers_take_twice_as_long():
    _, flows, _ = _run("processor", [0.0, 0.0])
    w = _work()
    for f in flows:
        assert f.end_s == pytest.approx(PARAMS.latency_s + 2 * w, rel=1e-9)


def test_processor_sharing_staggered_closed_form():
    # B joins when A has half its work left: both share, A ends at 1.5 W, B at 2 W (after latency).
    w = _work()
    _, (a, b), _ = _run("processor", [0.0, w / 2])
    assert a.end_s == pytest.approx(PARAMS.latency_s + 1.5 * w, rel=1e-9)
    assert b.end_s == pytest.approx(PARAMS.latency_s + 2.0 * w, rel=1e-9)


def test_fifo_serialises_transfers_in_submission_order():
    w = _work()
    _, (a, b), _ = _run("fifo", [0.0, 0.0])
    assert a.end_s == pytest.approx(PARAMS.latency_s + w, rel=1e-9)
    assert b.end_s == pytest.approx(PARAMS.latency_s + 2 * w, rel=1e-9)
    assert b.start_s == pytest.approx(a.end_s, rel=1e-12)


def test_milestones_arrive_at_equal_fractions_of_the_work():
    w = _work()
    _, (f,), marks = _run("processor", [0.0], milestones=4)
    assert marks[f.id] == pytest.approx([PARAMS.latency_s + w * k / 4 for k in (1, 2, 3, 4)], rel=1e-9)


def test_utilisation_counts_only_busy_time():
    w = _work()
    link, _, _ = _run("processor", [0.0, 10 * w])
    assert link.busy_s == pytest.approx(2 * w, rel=1e-9)
    stats = link.stats(20 * w)
    assert stats["utilisation"] == pytest.approx(link.busy_s / (20 * w))
    assert stats["bytes"] == 2 * NBYTES and stats["transfers"] == 2


def test_storage_link_has_full_efficiency():
    p = storage_params(10e9, 100e-6)
    assert p.efficiency(1) == 1.0 and p.time(10**9, 8) == pytest.approx(100e-6 + 0.1)


def test_unknown_sharing_mode_is_an_error():
    with pytest.raises(ValueError, match="sharing"):
        Link(simpy.Environment(), "h2d", PARAMS, "round_robin")
