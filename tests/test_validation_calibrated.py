"""Calibrated on a public set's GPU-only run, predicting its + L2 / + store runs (validation/calibrated.py).

The committed table (results/validation/calibrated.json) is checked against the held tolerance; the
cheapest set (PR #27010, a few seconds) is re-run end to end through ``hicache-sim calibrate`` and must
give the committed figures.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hicache_sim.calibration.benchresult import MULTITURN, read_bench_runs
from hicache_sim.hardware.presets import LINKS
from hicache_sim.runner import simulate
from hicache_sim.scenario import Scenario, resolve
from hicache_sim.sim import ComputeParams
from validation.calibrated import (
    GOAL,
    HELD,
    MISSES,
    OUT_DIR,
    SETS,
    _case_run,
    _per_round,
    _truncated,
    bench_text,
    run_set,
)
from validation.run import ROOT, _scenario

COMMITTED = json.loads((OUT_DIR / "calibrated.json").read_text())


def _committed(set_name: str) -> dict[str, dict]:
    return {r["case"] + (f".{r['run']}" if r["run"] else ""): r for r in COMMITTED["runs"] if r["set"] == set_name}


@pytest.mark.parametrize("s", SETS, ids=lambda s: s.name)
def test_bench_text_reads_back_as_the_published_rounds(s, tmp_path: Path) -> None:
    """The calibration input is the GPU-only run's published rounds, as the benchmark-result reader reads them."""
    data, published = _case_run(*s.base)
    clients = data["workload"]["multiturn"]["num_clients"]
    path = tmp_path / "bench.txt"
    path.write_text(bench_text(published, clients))
    (run,) = read_bench_runs(path, MULTITURN)
    assert [r["average_ttft"] for r in run.rounds] == pytest.approx(published["ttft_mean_s"], abs=0)
    assert [r["cache_hit_rate"] for r in run.rounds] == pytest.approx(published["hit_rate"], abs=5e-7)
    assert run.requests == clients * len(published["ttft_mean_s"])


def test_every_predicted_run_is_held_or_explained() -> None:
    """Each predicted run is either held (calibrated mean TTFT within 25%) or a named miss; none both."""
    for s in SETS:
        runs = _committed(s.name)
        predicted = {label for label, r in runs.items() if r["role"] == "predicted"}
        assert predicted == set(s.held) | {k for k in MISSES if k in predicted}, s.name
        assert not set(s.held) & set(MISSES)
        for label in s.held:
            assert abs(runs[label]["err_calibrated"]) <= HELD, (label, runs[label]["err_calibrated"])
        for label in set(MISSES) & predicted:
            assert abs(runs[label]["err_calibrated"]) > HELD, f"{label} holds now: move it to held"


def test_calibration_helps_where_the_presets_were_far() -> None:
    """Where the presets missed a predicted run by more than the goal, calibrating on the GPU-only run
    brought it closer (the committed table)."""
    for r in COMMITTED["runs"]:
        if r["role"] == "predicted" and abs(r["err_preset"]) > GOAL:
            assert abs(r["err_calibrated"]) < abs(r["err_preset"]), r


def test_cheapest_set_reproduces_the_committed_table(tmp_path: Path) -> None:
    """PR #27010: calibrate on the L1 table through the CLI, predict L2; the committed figures, held."""
    (s,) = [s for s in SETS if s.name == "sglang_27010"]
    rows, fit = run_set(s, tmp_path)
    committed = _committed(s.name)
    for r in rows:
        c = committed[r.label]
        assert r.calibrated == pytest.approx(c["calibrated"], rel=1e-6), r.label
        assert r.preset == pytest.approx(c["preset"], rel=1e-6), r.label
    assert fit["knobs"] == pytest.approx(COMMITTED["fits"][s.name]["knobs"], rel=1e-9)
    (l2,) = [r for r in rows if r.role == "predicted"]
    assert abs(l2.err_calibrated) <= HELD
    for name in ("gpu_only_bench.txt", "gpu_only.yaml", "calibration.yaml"):
        made = (tmp_path / "calibrated" / s.name / name).read_text()
        assert made == (OUT_DIR / "calibrated" / s.name / name).read_text(), name


def test_the_readme_counts_of_held_runs_are_the_committed_table() -> None:
    """README ("How close the predictions are"): 5 of the 6 predicted runs within 25% calibrated, 2 within
    15% (+ Mooncake on the A100 went from -13.6% to -23.4% when triton's kernel rule came in), and 2 of
    the 6 within 25% with the presets."""
    predicted = [r for r in COMMITTED["runs"] if r["role"] == "predicted"]
    assert len(predicted) == 6
    assert sum(abs(r["err_calibrated"]) <= HELD for r in predicted) == 5
    assert sum(abs(r["err_calibrated"]) <= GOAL for r in predicted) == 2
    assert sum(abs(r["err_preset"]) <= HELD for r in predicted) == 2
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    flat = " ".join(readme.split())
    assert "the calibrated mean TTFT of 5 of the 6 predicted runs is within 25%" in flat
    assert "2 within 15%" in flat and "with presets only 2 of the 6 are within 25%" in flat


def test_the_ssd_runs_miss_is_not_its_disk() -> None:
    """MISSES: + SSD reads the pages its pool evicted from the NVMe (hardware.storage.offload), and that
    read moves its calibrated mean TTFT by under one point against a store that loses nothing and reads
    everything at the pool's rate; the committed figure is the disk's."""
    (s,) = [s for s in SETS if s.name == "mooncake_ssd_offload_a100"]
    cal = OUT_DIR / "calibrated" / s.name / "calibration.yaml"
    data, published = _case_run("mooncake_ssd_offload_a100", "mooncake_ssd")
    assert data["hardware"]["storage"]["offload"]["read_gbps"] == 27.0
    committed = _committed(s.name)["mooncake_ssd_offload_a100.mooncake_ssd"]
    assert sum(_per_round(data, published, cal)["ttft_mean_s"]) == pytest.approx(sum(committed["calibrated"]), rel=1e-9)
    lossless = json.loads(json.dumps(data))
    lossless["hardware"]["storage"] = {"capacity_gb": 0}
    mean = sum(_per_round(lossless, published, cal)["ttft_mean_s"]) / len(published["ttft_mean_s"])
    assert abs(mean / committed["mean_published"] - 1 - committed["err_calibrated"]) < 0.01
    assert abs(committed["err_calibrated"]) > HELD


def test_the_ssd_runs_miss_is_not_the_attention_over_its_cached_prefix() -> None:
    """MISSES: every run of the set names --attention-backend triton as its source does, so its prefill
    attention runs under triton's kernel rule (128-row query tiles on the A100, each re-reading the cached
    prefix); and the GPU-only run the fit sees prefills in chunks of SGLang's default 4,096 tokens on a
    40 GiB card, a store round's 4,096 new tokens: its recomputed histories attend to cached prefixes of
    the same lengths, so that cost is in the fit as much as in the store runs."""
    for run in ("gpu_only", "l2", "mooncake", "mooncake_ssd"):
        data, _ = _case_run("mooncake_ssd_offload_a100", run)
        assert data["hardware"]["attention_backend"] == "triton" and data["hardware"]["gpu"] == "a100-40g"
    data, _ = _case_run("mooncake_ssd_offload_a100", "gpu_only")
    r = resolve(Scenario.model_validate(data))
    assert r.chunked_prefill_size == data["workload"]["multiturn"]["request_length"] == 4096
    assert ComputeParams.from_resolved(r).attn_tile_rows == 128
    committed = _committed("mooncake_ssd_offload_a100")["mooncake_ssd_offload_a100.mooncake_ssd"]
    assert abs(committed["err_calibrated"]) > HELD


def test_the_ssd_sets_store_deficit_follows_the_tokens_loaded_into_the_gpu() -> None:
    """MISSES: what the store rounds have and the GPU-only run has not. The GPU-only run loads nothing
    into the GPU; in rounds 1-6 of + Mooncake and + SSD (every history hits) the calibrated shortfall
    grows with the tokens each request loads (host and store hits), round for round."""
    runs = _committed("mooncake_ssd_offload_a100")
    assert not any(runs["mooncake_ssd_offload_a100.gpu_only"]["loaded_calibrated"])
    for label in ("mooncake_ssd_offload_a100.mooncake", "mooncake_ssd_offload_a100.mooncake_ssd"):
        r = runs[label]
        loaded = r["loaded_calibrated"][1:7]
        short = [p - c for p, c in zip(r["published"][1:7], r["calibrated"][1:7], strict=True)]
        assert loaded == sorted(loaded) and short == sorted(short), (label, loaded, short)
        assert short[0] > 0


def test_the_ssd_sets_miss_is_not_the_load_path_as_sglang_0_5_10_codes_it() -> None:
    """MISSES: the runs load as SGLang 0.5.10 does (+ L2 in its default host layout, layer_first:
    server_args.py ``hicache_mem_layout: str = "layer_first"``; the store runs page_first_direct, moved by
    direct io), and in that model the load hides under the forward: over every request of the calibrated
    + Mooncake run the forward waits under a second in all for loads. Even unhidden, round 6's load at the
    preset's 25.1 GB/s (23,347 tokens x 147,456 B, Qwen3-8B: 36 layers x 8 KV heads x 128 x 2 (K, V) x 2 B)
    is 0.137 s, under a quarter of the ~0.8 s a request the round's shortfall implies (4 in flight)."""
    l2, _ = _case_run("mooncake_ssd_offload_a100", "l2")
    r = resolve(Scenario.model_validate(l2))
    assert (r.io_backend, r.mem_layout) == ("kernel", "layer_first")
    data, published = _case_run("mooncake_ssd_offload_a100", "mooncake")
    r = resolve(Scenario.model_validate(data))
    assert (r.io_backend, r.mem_layout) == ("direct", "page_first_direct")
    assert r.bytes_per_token == 36 * 8 * 128 * 2 * 2 == 147_456
    scen = _truncated(data, published)
    scen["hardware"]["calibration"] = str(
        (OUT_DIR / "calibrated" / "mooncake_ssd_offload_a100" / "calibration.yaml").resolve()
    )
    out = simulate(_scenario(scen, fast=False, rounds=None), base_dir=ROOT)
    assert out.summary["counters"]["load_stall_s"] < 1.0
    committed = _committed("mooncake_ssd_offload_a100")["mooncake_ssd_offload_a100.mooncake"]
    assert committed["loaded_calibrated"][6] == pytest.approx(23_347, abs=1)
    assert LINKS.get("gen4").direct.h2d_gbps == LINKS.get("gen4").kernel.h2d_gbps == 25.1
    unhidden = committed["loaded_calibrated"][6] * r.bytes_per_token / 25.1e9
    assert unhidden == pytest.approx(0.137, abs=0.001)
    per_request_short = (committed["published"][6] - committed["calibrated"][6]) / 4
    assert unhidden < per_request_short / 4
