"""A timed run that holds only what is in flight: quiet decode steps advanced in one timeout give the
same run as one timeout per step; request rows leave the world in workload order as soon as they
and every earlier one are done; the parquet spool writes the same file as the table in memory."""

from __future__ import annotations

import pandas as pd
import pyarrow.parquet as pq
import pytest

from hicache_sim.output.rows import ParquetRows, timed_request_schema
from hicache_sim.runner import write_parquet
from hicache_sim.scenario import load_scenario, resolve
from hicache_sim.sim import World
from hicache_sim.workloads.build import build_workload


@pytest.fixture(scope="module")
def conversation():
    """The first 600 requests of the Mooncake conversation trace at a quarter of its rate: decode
    batches of several requests, page boundaries, finishes, write-through acknowledgements."""
    sc = load_scenario("builtin:mooncake_conversation", ["workload.trace.limit=600", "metrics.timeseries_interval_s=2"])
    r = resolve(sc)
    return r, build_workload(sc, r.cache.page_size)


def _run(r, wl, *, merge: bool, **kw):
    world = World(r, wl, **kw)
    world.scheduler.merge_decode = merge
    return world, world.run()


def test_merged_decode_runs_change_nothing(conversation):
    r, wl = conversation
    w1, one = _run(r, wl, merge=False)
    w2, merged = _run(r, wl, merge=True)
    assert w1.scheduler.merged_steps == 0
    assert w2.scheduler.merged_steps > merged.counters["decode_steps"] // 2  # most steps are quiet
    assert w2.engine_events < w1.engine_events
    # Same floats, not close ones: every time, counter and sample is bit-identical.
    assert merged.requests == one.requests
    assert merged.counters == one.counters
    assert merged.timeseries == one.timeseries
    assert merged.links == one.links
    assert merged.sim_time_s == one.sim_time_s


def test_rows_streamed_in_workload_order_and_records_dropped(conversation):
    r, wl = conversation
    _w, kept = _run(r, wl, merge=True)
    streamed = []
    held = []

    def observe(world: World) -> None:
        # Every record before the emission point is gone; the rest are the requests in flight.
        k = world._emitted
        assert all(x is None for x in world.records[:k])
        held.append(sum(x is not None for x in world.records[k:]))

    world = World(r, wl, on_row=streamed.append)
    res = world.run(observe)
    assert res.requests == []
    assert streamed == kept.requests
    assert [x["rid"] for x in streamed] == [q.rid for q in wl.requests]
    assert all(x is None for x in world.records)
    assert 0 < max(held) < len(wl.requests) // 4


def test_parquet_rows_in_row_groups(conversation, tmp_path):
    r, wl = conversation
    _w, kept = _run(r, wl, merge=True)
    rows = [{**x, "prompt_tokens": x["input_tokens"]} for x in kept.requests]
    df = pd.DataFrame(rows)
    write_parquet(df, tmp_path / "table.parquet")
    one = ParquetRows(tmp_path / "one.parquet", timed_request_schema())
    small = ParquetRows(tmp_path / "small.parquet", timed_request_schema(), batch_rows=128)
    for x in rows:
        one.add(dict(x))
        small.add(dict(x))
    one.close()
    small.close()
    # One row group: the same bytes as writing the table at once.
    assert (tmp_path / "one.parquet").read_bytes() == (tmp_path / "table.parquet").read_bytes()
    f = pq.ParquetFile(tmp_path / "small.parquet")
    assert f.metadata.num_row_groups == -(-len(rows) // 128)
    pd.testing.assert_frame_equal(f.read().to_pandas(), df)
