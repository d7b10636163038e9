"""Executor: measurement rows are well-formed and carry the log's bytes; the sweep covers its grid.

Durations are recorded, never asserted against wall-clock thresholds (only > 0)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from hicache_sim.calibration.validate import compare, error_table, replay_transfers, simulate_log  # noqa: E402
from hicache_sim.hardware.linkmodel import segments_for  # noqa: E402
from hicache_sim.replay import (  # noqa: E402
    Executor,
    KVShape,
    ReplayError,
    SweepConfig,
    allocate_pools,
    execute_log,
    run_sweep,
)
from hicache_sim.scenario import build_scenario, resolve  # noqa: E402

TINY = {
    "name": "tiny-replay",
    "seed": 1,
    "mode": "instant",
    "model": {"num_layers": 2, "attention": "mha", "num_kv_heads": 1, "head_dim": 32, "params_b": 0.01},
    "cache": {"page_size": 16, "device_tokens": 4096, "host_ratio": 4, "write_policy": "write_through"},
    "scheduler": {"chunked_prefill_size": None},
    "workload": {
        "kind": "multiturn",
        "multiturn": {"num_clients": 8, "num_rounds": 3, "request_length": 256, "output_length": 32},
    },
}
ROW_COLUMNS = {
    "direction",
    "pages",
    "bytes",
    "segments",
    "launches",
    "granularity",
    "layout",
    "io_backend",
    "device",
    "duration_s",
    "page_size",
    "page_bytes",
    "transfer_id",
    "reason",
}


@pytest.fixture(scope="module")
def tiny_run():
    return simulate_log(build_scenario(TINY, "tiny"))


@pytest.mark.parametrize("io_backend", ["kernel", "direct"])
@pytest.mark.parametrize("layout", ["layer_first", "page_first", "page_first_direct"])
def test_log_replay_rows_are_well_formed(tiny_run, layout, io_backend):
    log = tiny_run.transfers
    assert set(log["kind"]) == {"d2h", "h2d"}  # the tiny scenario loads back as well as backs up
    sc = build_scenario({**TINY, "cache": {**TINY["cache"], "mem_layout": layout, "io_backend": io_backend}}, "t")
    r = resolve(sc)
    run = replay_transfers(r, log.to_dict("records"), device="cpu")
    m = run.measurements
    assert run.integrity["passed"] and run.skipped_storage == 0
    assert set(m.columns) >= ROW_COLUMNS
    assert len(m) == len(log)
    assert (m["duration_s"] > 0).all()
    by_id = log.set_index("id")
    assert (m["bytes"].to_numpy() == by_id.loc[m["transfer_id"], "bytes"].to_numpy()).all()
    assert (m["pages"].to_numpy() == by_id.loc[m["transfer_id"], "pages"].to_numpy()).all()
    assert (m["direction"].to_numpy() == by_id.loc[m["transfer_id"], "kind"].to_numpy()).all()
    for _, row in m.iterrows():
        assert row["segments"] == segments_for(row["pages"], layout, 2, 2)
        assert row["launches"] == (2 if row["direction"] == "h2d" else 1)  # H2D per layer by default
        assert row["granularity"] == ("per_layer" if row["direction"] == "h2d" else "whole")
        assert row["layout"] == layout and row["io_backend"] == io_backend and row["device"] == "cpu"
    cmp = compare(m, r, log)
    assert (cmp["predicted_s"] > 0).all() and set(error_table(cmp)["direction"]) == {"d2h", "h2d", "all"}


def test_limit_storage_skip_and_wrapped_indices():
    shape = KVShape(num_layers=2, kv_factor=2, heads=1, head_dim=8, page_size=4)
    pools = allocate_pools(shape, "page_first", 8, 8, "cpu")
    ex = Executor(pools, "kernel")
    pb = shape.page_bytes
    log = [
        {"id": 0, "kind": "d2h", "pages": 3, "bytes": 3 * pb, "device_pages": [1, 2, 30], "host_pages": [100, 5, 6]},
        {"id": 1, "kind": "h2s", "pages": 3, "bytes": 3 * pb, "device_pages": [], "host_pages": [5, 6, 7]},
        {"id": 2, "kind": "h2d", "pages": 2, "bytes": 2 * pb, "device_pages": [9, 10], "host_pages": [5, 6]},
        {"id": 3, "kind": "h2d", "pages": 1, "bytes": pb, "device_pages": [0], "host_pages": [1]},
    ]
    m = execute_log(log, ex, limit=2)
    assert m["transfer_id"].tolist() == [0, 2]  # storage transfer skipped, limit counts replayed ones
    assert m["bytes"].tolist() == [3 * pb, 2 * pb]


def test_kernel_chunks_count_as_launches():
    shape = KVShape(num_layers=3, kv_factor=2, heads=1, head_dim=8, page_size=4)
    ex = Executor(allocate_pools(shape, "layer_first", 32, 32, "cpu"), "kernel", max_staging_bytes=4 * shape.page_bytes)
    pages = list(range(10))  # 3 chunks of at most 4 pages
    assert ex.d2h(pages, pages).launches == 3
    assert ex.h2d(pages, pages, per_layer=True).launches == 9
    assert ex.h2d(pages, pages, per_layer=False).launches == 3


def test_log_that_does_not_match_the_pools_is_refused():
    shape = KVShape(num_layers=2, kv_factor=2, heads=1, head_dim=8, page_size=4)
    ex = Executor(allocate_pools(shape, "page_first", 8, 8, "cpu"), "direct")
    bad_bytes = {"id": 4, "kind": "d2h", "pages": 1, "bytes": 123, "device_pages": [0], "host_pages": [0]}
    with pytest.raises(ReplayError, match="transfer 4: the log says 123 bytes"):
        ex.execute(bad_bytes)
    bad_pages = {
        "id": 5,
        "kind": "h2d",
        "pages": 2,
        "bytes": 2 * shape.page_bytes,
        "device_pages": [0],
        "host_pages": [0, 1],
    }
    with pytest.raises(ReplayError, match="transfer 5: pages=2"):
        ex.execute(bad_pages)
    with pytest.raises(ReplayError, match="io_backend"):
        Executor(ex.pools, "dma")


def test_reduced_sweep_covers_the_grid():
    cfg = SweepConfig(
        page_counts=(1, 4, 16),
        page_sizes=(4, 8),
        repeats=2,
        shape=KVShape(num_layers=2, kv_factor=2, heads=1, head_dim=8, page_size=4),
    )
    df = run_sweep(cfg, torch.device("cpu"))
    assert len(df) == cfg.size() == 3 * 2 * 3 * 2 * 2 * 2  # counts x sizes x layouts x io x ops x repeats
    groups = df.groupby(["direction", "io_backend", "layout"]).size()
    assert len(groups) == 12 and (groups == 12).all()
    assert (df["duration_s"] > 0).all()
    assert (df["bytes"] == df["pages"] * df["page_bytes"]).all()
    assert set(df.loc[df["direction"] == "h2d", "granularity"]) == {"per_layer"}
    # Each repeat is its own pass over the grid (repeats of one point are not back to back), and a
    # point copies the same slots in every pass.
    assert df["repeat"].is_monotonic_increasing
    keys = ["page_size", "layout", "io_backend", "direction", "pages"]
    assert (df.groupby(keys).size() == 2).all()


def test_sweep_divides_out_the_reference_drift_and_keeps_raw_durations():
    small = dict(
        page_counts=(1, 4),
        page_sizes=(4,),
        layouts=("layer_first",),
        repeats=2,
        shape=KVShape(num_layers=1, kv_factor=2, heads=1, head_dim=8, page_size=4),
    )
    df = run_sweep(SweepConfig(**small, reference=True), torch.device("cpu"))
    assert list(df["seq"]) == list(range(len(df)))  # measurement order, which the drift factor follows
    assert (df["reference_s"] > 0).all() and df["drift_factor"].nunique() > 1
    assert np.allclose(df["duration_s"] * df["drift_factor"], df["duration_raw_s"], rtol=1e-12)
    off = run_sweep(SweepConfig(**small), torch.device("cpu"))  # the default: no reference
    assert "reference_s" not in off.columns and (off["duration_s"] == off["duration_raw_s"]).all()


@pytest.mark.parametrize("io", ["kernel", "direct"])
def test_cpu_clock_times_copies_by_this_threads_cpu_time(monkeypatch, io):
    """With clock="cpu" every interval is read from the thread's CPU-time clock (here a fake one
    that advances 1 s a reading): time the scheduler gives to other processes never enters."""
    import hicache_sim.replay.executor as executor

    ticks = iter(range(10**6))
    monkeypatch.setitem(executor.CPU_CLOCKS, "cpu", lambda: float(next(ticks)))
    shape = KVShape(num_layers=2, kv_factor=2, heads=1, head_dim=8, page_size=4)
    pools = allocate_pools(shape, "layer_first", 8, 8, torch.device("cpu"))
    ex = Executor(pools, io, clock="cpu")
    assert ex.h2d([0, 1], [2, 3], per_layer=False).duration_s == 1.0  # one start, one stop
    assert ex.d2h([0, 1], [2, 3]).duration_s == (2.0 if io == "kernel" else 1.0)  # + the host-side scatter
    assert Executor(pools, io).h2d([0, 1], [2, 3]).duration_s < 0.5  # the default: elapsed time
    with pytest.raises(ReplayError, match="clock 'sundial'"):
        Executor(pools, io, clock="sundial")


def test_sweep_clock_defaults_to_cpu_time_with_one_torch_thread():
    assert SweepConfig().host_clock() == "cpu"
    assert SweepConfig(cpu_threads=2).host_clock() == "wall"  # a copy on 2 threads: this one's time misses half
    assert SweepConfig(cpu_threads=2, clock="wall").host_clock() == "wall"
    with pytest.raises(ReplayError, match="needs 1 torch thread"):
        SweepConfig(cpu_threads=2, clock="cpu").host_clock()


def test_sweep_skips_counts_a_capped_pool_cannot_hold():
    cfg = SweepConfig(
        page_counts=(1, 2, 64),
        page_sizes=(4,),
        layouts=("layer_first",),
        io_backends=("kernel",),
        repeats=1,
        shape=KVShape(num_layers=1, kv_factor=1, heads=1, head_dim=8, page_size=4),
        max_pool_bytes=8 * 64,
    )
    done = []
    df = run_sweep(cfg, torch.device("cpu"), progress=done.append)
    assert sorted(set(df["pages"])) == [1, 2]
    assert sum(done) == cfg.size()  # the progress bar still reaches its total


def test_compare_uses_medians_and_the_timed_logs_durations():
    r = resolve(build_scenario(TINY, "tiny"))
    pb = r.page_bytes
    measured = pd.DataFrame(
        {
            "transfer_id": [7, 8, 7, 8, 7, 8],
            "repeat": [0, 0, 1, 1, 2, 2],
            "direction": ["d2h", "h2d"] * 3,
            "pages": [1, 2] * 3,
            "bytes": [pb, 2 * pb] * 3,
            "segments": [4, 8] * 3,
            "launches": [1, 2] * 3,
            "duration_s": [1e-4, 2e-4, 9e-4, 3e-4, 2e-4, 4e-4],
        }
    )
    log = pd.DataFrame({"id": [7, 8], "duration_s": [1.5e-4, 2.5e-4]})
    cmp = compare(measured, r, log)
    assert cmp["transfer_id"].tolist() == [7, 8] and cmp["repeats"].tolist() == [3, 3]
    assert cmp["measured_s"].tolist() == [2e-4, 3e-4]  # medians of the passes
    assert cmp["simulated_s"].tolist() == [1.5e-4, 2.5e-4]
    d2h = r.links["d2h"]
    assert cmp["predicted_s"].iloc[0] == pytest.approx(d2h.time(pb, 4))
    table = error_table(cmp).set_index("direction")
    assert table.loc["d2h", "simulated_median_ape_pct"] == pytest.approx(25.0)
    assert table.loc["all", "transfers"] == 2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_log_replay_on_cuda(tiny_run):
    r = resolve(build_scenario(TINY, "tiny"))
    run = replay_transfers(r, tiny_run.transfers.to_dict("records"), device="cuda")
    assert run.device == "cuda" and run.pools["pinned_host"]
    assert len(run.measurements) == len(tiny_run.transfers) and (run.measurements["duration_s"] > 0).all()


def test_log_replay_times_like_the_sweep(monkeypatch, tiny_run):
    """validate-model's copies use the calibration sweep's clock: CPU time on one torch thread."""
    import hicache_sim.replay.executor as executor

    ticks = iter(range(10**7))
    monkeypatch.setitem(executor.CPU_CLOCKS, "cpu", lambda: float(next(ticks)))
    records = tiny_run.transfers.to_dict("records")
    one = replay_transfers(tiny_run.resolved, records, device="cpu", limit=6, integrity=False)
    assert set(one.measurements["duration_s"]) <= {1.0, 2.0}  # read from the fake CPU-time clock
    two = replay_transfers(tiny_run.resolved, records, device="cpu", limit=6, integrity=False, cpu_threads=2)
    assert (two.measurements["duration_s"] < 0.5).all()  # several threads: elapsed time
