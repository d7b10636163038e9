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


#: SGLang 0.5.10's HiRadixCache, read in its wheel (validation/cases/mooncake_ssd_offload_a100.yaml, assumed):
#: the 2025 era's value of every variant, its storage layout rule the 2026 era's.
HIRADIX_0_5_10 = {
    "evict_amount": "need",  # mem_cache/common.py L251-252: evict(num_tokens), the whole need
    "parent_backup": "none",  # hiradix_cache.py L610-631: write_backup checks no parent
    "host_backup_eviction": "full_retry",  # L615-620: evict_host(len(node.value)), retry once
    "write_back_eviction": "staged",  # HiRadixCache, not the unified tree
    "checkpoint_hits": "never",  # L646-649: a chunked insert counts no hit
}
STORE_0_5_10 = {"prefetch_flow": "prealloc", "retry_poll_interval": 0, "retry_max_attempts": 0}  # L1206-1214


def _semantics(data: dict):
    r = resolve(Scenario.model_validate(data))
    return r, r.cache.resolved_semantics


def test_the_ssd_set_runs_the_cache_code_of_sglang_0_5_10() -> None:
    """The A100 set ran SGLang 0.5.10, whose HiRadixCache has the 2025 era's variants (whole-need eviction,
    full-retry host backup, no parent check, no hit from chunked inserts, prefetch host pages taken at
    issue, no prefetch re-issue) and 0.5.10's storage layout rule (direct io keeps page_first_direct; the
    2025 era's rule is 0.5.2's and would force kernel / page_first). Fails on the case as it was (era
    2026's deficit eviction, chain backup, after-hit prefetch, 8 re-issues)."""
    for run in ("gpu_only", "l2", "mooncake", "mooncake_ssd"):
        data, _ = _case_run("mooncake_ssd_offload_a100", run)
        r, sem = _semantics(data)
        assert sem.evict_amount.name == "need", run
        if run == "gpu_only":
            continue
        for variant, value in HIRADIX_0_5_10.items():
            assert getattr(sem, variant).name == value, (run, variant)
        if data["cache"].get("storage_backend"):
            assert sem.prefetch_flow.name == STORE_0_5_10["prefetch_flow"], run
            assert sem.prefetch_retry_poll_interval == sem.prefetch_retry_max_attempts == 0, run
            assert (r.io_backend, r.mem_layout) == ("direct", "page_first_direct"), run


def test_the_h800_set_runs_the_cache_code_of_sglang_0_5_2() -> None:
    """The H800 set ran SGLang 0.5.2 (the doc was merged 2025-09-15): its HiRadixCache is the 2025 era, with
    a fixed 3 s prefetch timeout (hiradix_cache.py L82: ``self.prefetch_timeout = 3``) where the era's
    numbers (1 s + 0.25 s per 1024 tokens) are 0.5.3's. Fails on the case as it was (era 2026)."""
    for run in ("gpu_only", "l2", "mooncake"):
        data, _ = _case_run("mooncake_blog_h800", run)
        assert str(data["cache"].get("semantics")) == "2025", run
    data, _ = _case_run("mooncake_blog_h800", "mooncake")
    r, sem = _semantics(data)
    assert sem.prefetch_flow.name == "prealloc" and sem.prefetch_retry_max_attempts == 0
    assert (sem.prefetch_timeout_base_s, sem.prefetch_timeout_per_ki_token_s) == (3.0, 0.0)
    assert (r.io_backend, r.mem_layout) == ("kernel", "page_first")  # 0.5.2's mooncake rule


def test_the_ssd_runs_miss_is_not_the_one_lever_fits_shape() -> None:
    """The split-fit diagnostic (committed): the GPU-only run fitted on round 0 (linear_mfu) and on the mean
    (the hbm_efficiency that bounds triton's prefill attention kernel, which the tool's efficiency lever
    leaves unmoved) reproduces GPU-only round 0 and its mean within a few percent, and + SSD still misses."""
    (split,) = COMMITTED["split_fit_diagnostic"]
    assert split["set"] == "mooncake_ssd_offload_a100"
    runs = {r["run"]: r for r in split["runs"]}
    base = runs["mooncake_ssd_offload_a100.gpu_only"]
    assert abs(base["round0_err_split_fit"]) < 0.01 and abs(base["err_split_fit"]) < 0.05
    tool_round0 = _committed("mooncake_ssd_offload_a100")["mooncake_ssd_offload_a100.gpu_only"]
    assert tool_round0["calibrated"][0] / tool_round0["published"][0] - 1 > 0.4  # the one lever's round 0
    assert abs(runs["mooncake_ssd_offload_a100.mooncake_ssd"]["err_split_fit"]) > HELD
    assert not any(s["set"] != "mooncake_ssd_offload_a100" for s in COMMITTED["split_fit_diagnostic"])


def test_the_fits_one_prefill_lever_moves_tritons_kernel_less_than_the_gemms() -> None:
    """Why the split: under triton's rule a 4,096-token chunk over a 24,576-token cached prefix is bound by
    the kernel's HBM reads on the a100-40g preset (1.2x its FLOPs time), so the tool's prefill lever (the
    efficiencies together, x 0.7155 on this set) slows the GEMMs 1.40x but the kernel only 1.16x (until its
    FLOPs roof overtakes its HBM roof the kernel does not move); hbm_efficiency moves the kernel alone."""
    from hicache_sim.sim.compute import ComputeModel

    data, _ = _case_run("mooncake_ssd_offload_a100", "gpu_only")
    base = ComputeParams.from_resolved(resolve(Scenario.model_validate(data)))
    factor = COMMITTED["fits"]["mooncake_ssd_offload_a100"]["factors"]["prefill"]
    assert factor == pytest.approx(0.7155, abs=1e-4)

    def split(**over: float) -> tuple[float, float]:
        m = ComputeModel(base.with_overrides(**over) if over else base)
        gemm = max(m.linear_time(4096), m.weights_read(4096) / (base.hbm_Bps * m.params.hbm_efficiency))
        return gemm, m.prefill_time([(4096, 24576)]) - gemm

    gemm, attention = split()
    scaled = split(linear_mfu=base.linear_mfu * factor, attention_mfu=base.attention_mfu * factor)
    assert scaled[0] / gemm == pytest.approx(1 / factor)
    assert 1.0 < scaled[1] / attention < 0.9 / factor  # 1.16x: the GEMMs' 1.40x less the HBM-bound part
    assert split(attention_mfu=base.attention_mfu * 0.9)[1] == pytest.approx(attention)  # HBM-bound at presets
    half = split(hbm_efficiency=base.hbm_efficiency / 2)
    assert half[1] == pytest.approx(2 * attention) and half[0] == pytest.approx(gemm)
