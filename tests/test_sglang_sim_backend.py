"""SGLang's own ``sim`` storage backend (sglang 0.5.23 storage/sim_storage.py, SimHiCacheStorage):
keys only, no bound, each batch (a hit query too) sleeps op latency + bytes / rate per rank. Its
figures come from ``--hicache-storage-backend-extra-config`` (sim_write_gbps 5.0, sim_read_gbps = the
write rate, sim_op_latency_us 100); from-sglang reads them, sglang-args writes back what differs."""

from __future__ import annotations

import json
import shlex

import pytest

from hicache_sim.hardware.presets import STORAGE
from hicache_sim.scenario import load_scenario, resolve
from hicache_sim.sglang import from_command, to_command
from hicache_sim.sglang.flags import SglangArgsError, parse_command

SIM = (
    "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --enable-hierarchical-cache "
    "--hicache-storage-backend sim"
)


def _sim(extra: dict | None = None) -> str:
    return SIM + ("" if extra is None else f" --hicache-storage-backend-extra-config {shlex.quote(json.dumps(extra))}")


def test_the_sim_preset_carries_sglangs_defaults_and_never_evicts():
    st = STORAGE.get("sim")
    assert (st.write_gbps, st.read_gbps, st.latency_us) == (5.0, 5.0, 100.0)
    assert st.sglang_backend == "sim"
    r = resolve(from_command(_sim()).scenario)
    assert r.cache.storage and r.cache.storage_capacity_pages is None  # keys only: no bound
    assert r.cache.storage_eviction == "file"  # a store without a cap evicts nothing
    assert _figures(r) == pytest.approx((5.0, 5.0, 100.0))


def _figures(r) -> tuple[float, float, float]:
    """(write GB/s, read GB/s, latency us) of a resolved scenario's storage link."""
    return (r.storage_write_Bps / 1e9, r.storage_read_Bps / 1e9, r.storage_latency_s * 1e6)


@pytest.mark.parametrize(
    ("extra", "want"),
    [
        ({}, (5.0, 5.0, 100.0)),
        # sim_read_gbps defaults to the write rate, not to 5
        ({"sim_write_gbps": 2}, (2.0, 2.0, 100.0)),
        ({"sim_write_gbps": 2, "sim_read_gbps": 8}, (2.0, 8.0, 100.0)),
        ({"sim_read_gbps": 8, "sim_op_latency_us": 0}, (5.0, 8.0, 0.0)),
    ],
)
def test_from_sglang_reads_the_sim_figures_from_the_extra_config(extra, want):
    conv = from_command(_sim(extra))
    assert _figures(resolve(conv.scenario)) == pytest.approx(want)
    assert not any("not modelled: sim_" in n for n in conv.notes)


@pytest.mark.parametrize(
    "extra",
    [
        {"sim_write_gbps": 2},
        {"sim_write_gbps": 2, "sim_read_gbps": 8, "sim_op_latency_us": 40},
        {"sim_read_gbps": 5.5},
        {"sim_op_latency_us": 250, "prefetch_threshold": 64},
    ],
)
def test_sglang_args_writes_back_the_keys_that_differ_and_reads_back_the_same(extra):
    first = from_command(_sim(extra))
    tokens, _ = to_command(first.scenario)
    args = parse_command(tokens).args
    assert args["--hicache-storage-backend"] == "sim"
    written = json.loads(args["--hicache-storage-backend-extra-config"])
    assert written == {k: float(v) if k.startswith("sim_") else v for k, v in extra.items()}
    assert _figures(resolve(from_command(tokens).scenario)) == _figures(resolve(first.scenario))


def test_sglang_args_of_the_sim_defaults_prints_no_sim_keys():
    sc = load_scenario("builtin:default", ["cache.storage_backend=sim"])
    args = parse_command(to_command(sc)[0]).args
    assert "sim_" not in args.get("--hicache-storage-backend-extra-config", "")


def test_a_scenario_rate_on_the_sim_backend_is_its_extra_config():
    sc = load_scenario(
        "builtin:default",
        ["cache.storage_backend=sim", "hardware.storage.read_gbps=12", "hardware.storage.capacity_gb=9"],
    )
    tokens, notes = to_command(sc)
    extra = json.loads(parse_command(tokens).args["--hicache-storage-backend-extra-config"])
    assert extra["sim_read_gbps"] == 12.0 and "sim_write_gbps" not in extra
    assert any("capacity_gb=9" in n and "no bound" in n for n in notes)


def test_sim_keys_are_read_for_the_sim_backend_only():
    extra = {"sim_write_gbps": 2}
    assert _figures(resolve(from_command(_sim(extra)).scenario))[0] == 2.0
    conv = from_command(_sim(extra).replace("backend sim", "backend file"))
    assert any("not modelled: sim_write_gbps" in n for n in conv.notes)
    assert resolve(conv.scenario).storage_write_Bps == STORAGE.get("file").write_gbps * 1e9


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        ({"sim_write_gbps": 0}, "sim_write_gbps 0: SGLang's sim backend takes a rate <= 0 as infinite"),
        ({"sim_read_gbps": -1}, "sim_read_gbps -1"),
        ({"sim_op_latency_us": -5}, "sim_op_latency_us: expected a number >= 0"),
        ({"sim_write_gbps": "fast"}, "sim_write_gbps: expected a number"),
    ],
)
def test_sim_figures_the_simulator_cannot_follow_are_refused(extra, fragment):
    with pytest.raises(SglangArgsError, match="extra-config") as err:
        from_command(_sim(extra))
    assert fragment in str(err.value)
