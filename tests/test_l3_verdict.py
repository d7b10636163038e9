"""The L3 verdict (issue 26, item 5): does loading a prefix from the store beat recomputing it (the
break-even length, from the store's and the link's figures against the compute roofline), and does
adding the store lower TTFT or only raise the hit rate (the run with it against the run without).

Expectations are derived here from the scenario's figures and from the runs themselves, never frozen:
the break-even length by hand from the presets, the idle-server TTFT gap of each L3 read from the
timed world, and the verdict from the two runs' own summaries."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import invoke

from hicache_sim.core.policies import PREFETCH_STOP_POLICIES
from hicache_sim.hardware.presets import GPUS, MODELS
from hicache_sim.l3_pair import store_pair
from hicache_sim.output.columns import Columns
from hicache_sim.output.l3 import (
    TTFT_TOLERANCE,
    VERDICTS,
    WAITS,
    LoadCosts,
    load_vs_recompute,
    verdict_line,
    with_without,
)
from hicache_sim.runner import simulate
from hicache_sim.scenario import build_scenario, resolve

PAGE = 64

# ------------------------------------------------------------------------------- part (a), by hand

# One H200 running Llama-3.1-8B, no chunking; PCIe and store stripped to bandwidth and latency, so
# that each cost is a line of arithmetic below.
HAND = {
    "name": "hand",
    "mode": "timed",
    "model": "llama-3.1-8b",
    "hardware": {
        "gpu": "h200",
        "linear_mfu": 0.7,
        "attention_mfu": 0.6,
        "hbm_efficiency": 0.8,
        "step_overhead_us": 100.0,
        "prefill_graph_us_per_layer": 380.0,
        "pcie": {"h2d_gbps": 25.0, "latency_us": 0.0, "half_efficiency_bytes": 0.0, "segment_overhead_us": 0.0},
        "storage": {"read_gbps": 8.0, "latency_us": 3000.0},
    },
    "cache": {
        "page_size": PAGE,
        "device_tokens": 65536,
        "storage_backend": "hf3fs",
        "prefetch_policy": "wait_complete",
    },
    "scheduler": {"chunked_prefill_size": None, "max_running_requests": 8},
    "workload": {"kind": "long_context", "long_context": {"num_documents": 1, "queries_per_document": 1}},
}
CACHED, NEW = 2 * PAGE, PAGE  # tokens before the stored prefix (on the GPU) and after it


def hand_times(read_gbps: float, stored: int) -> tuple[float, float]:
    """(load, recompute) seconds of ``stored`` tokens by hand from the preset figures: Llama-3.1-8B's
    shape, the H200's peaks, the scenario's efficiencies, link and store."""
    m, g = MODELS.get("llama-3.1-8b"), GPUS.get("h200")
    hw = HAND["hardware"]
    bpt = 2 * m.num_layers * m.num_kv_heads * m.head_dim * 2  # K and V, bf16
    peak = g.bf16_tflops * 1e12
    floor = m.num_layers * hw["prefill_graph_us_per_layer"] * 1e-6
    overhead = hw["step_overhead_us"] * 1e-6

    def prefill(n: int, c: int) -> float:
        linear = 2 * n * m.active_params_b * 1e9 / (peak * hw["linear_mfu"])
        attention = 4 * m.num_layers * m.q_heads * m.head_dim * (n * c + n * (n + 1) / 2) / (peak * hw["attention_mfu"])
        memory = (m.params_b * 1e9 * 2 + c * bpt) / (g.hbm_gbps * 1e9 * hw["hbm_efficiency"])
        return max(max(linear + attention, memory), floor)

    latency = hw["storage"]["latency_us"] * 1e-6
    pages = stored // PAGE
    batches = math.ceil(pages / 128)  # SGLang's storage batch: 128 pages a batch
    store = latency + batches * latency + stored * bpt / (read_gbps * 1e9)
    h2d = stored * bpt / (hw["pcie"]["h2d_gbps"] * 1e9)
    g_new = prefill(NEW, CACHED + stored)
    # layer i computes once it arrived and layer i - 1 is done: the step ends at the latest of these
    step = max(overhead + g_new, h2d / m.num_layers + g_new, h2d + g_new / m.num_layers)
    return store + step, overhead + prefill(stored + NEW, CACHED)


def one_l3_read(stored: int) -> Columns:
    """The rows of a run whose one request read ``stored`` tokens from L3 after CACHED on the GPU."""
    return Columns(
        {
            "status": ["finished"],
            "prompt_tokens": [CACHED + stored + NEW],
            "device_hit_tokens": [CACHED],
            "host_hit_tokens": [0],
            "storage_hit_tokens": [stored],
        }
    )


@pytest.mark.parametrize("read_gbps", [8.0, 0.4])
def test_break_even_is_where_store_read_and_load_back_beat_the_prefill(read_gbps):
    longest_pages = 300
    sc = build_scenario(HAND, "hand", [f"hardware.storage.read_gbps={read_gbps}"])
    a = load_vs_recompute(resolve(sc), one_l3_read(PAGE), longest=CACHED + NEW + longest_pages * PAGE)
    faster = [k for k in range(1, longest_pages + 1) if (lambda t: t[0] < t[1])(hand_times(read_gbps, k * PAGE))]
    # the shortest stored prefix above which loading stays faster, up to the longest prompt
    expected = None
    if faster and faster[-1] == longest_pages:
        k = longest_pages
        while k - 1 in faster:
            k -= 1
        expected = k * PAGE
    assert a["break_even_tokens"] == expected
    assert (a["cached_tokens"], a["new_tokens"]) == (CACHED, NEW)
    if read_gbps == 8.0:
        assert expected is not None and PAGE < expected < longest_pages * PAGE  # a real crossing, mid-range
        assert f"loading beats recomputing above {expected:,} tokens of prefix" in verdict_line(a)
        assert a["l3_reads_at_least_break_even"] == 0  # the one read (a page) was shorter
    else:
        assert expected is None  # 0.4 GB/s: a token takes longer to read than to compute
        assert "recomputing beats loading at every prefix length" in verdict_line(a)
    for p in a["curve"]:
        load, recompute = hand_times(read_gbps, p["stored_tokens"])
        assert p["load_s"] == pytest.approx(load, rel=1e-9)
        assert p["recompute_s"] == pytest.approx(recompute, rel=1e-9)


def test_every_prefetch_stop_policy_has_its_wait():
    assert sorted(WAITS) == sorted(PREFETCH_STOP_POLICIES.names())


def test_timeout_cuts_a_load_that_outlasts_it():
    # 0.05 GB/s: 64 pages of 8 MiB take 10.7 s, past the 2026 timeout (2 s + 0.1 s per 1,024 tokens)
    sc = build_scenario(HAND, "hand", ["hardware.storage.read_gbps=0.05", "cache.prefetch_policy=timeout"])
    costs = LoadCosts(resolve(sc))
    stored = 64 * PAGE
    timeout = 2.0 + 0.1 * stored / 1024
    assert costs.storage_read_s(64) > timeout
    got = costs.pages_read_by(timeout, 64)
    batch = costs.storage.time(got * costs.page_bytes, 1) if got else 0.0
    assert costs.query_s + batch <= timeout  # whole batches only
    cut = costs.load_s(stored, CACHED, NEW, policy="timeout")
    assert cut == pytest.approx(timeout + costs.prefill_s(stored - got * PAGE + NEW, CACHED + got * PAGE, got))
    assert cut < costs.load_s(stored, CACHED, NEW)  # the cut bounds the wait ...
    assert cut > costs.recompute_s(stored, CACHED, NEW)  # ... and still loses to recomputing


# ------------------------------------------------------------------------ part (a) vs the world

# Documents asked round robin, one every 20 s (an idle server), the GPU and host pools holding one
# document: the second query of a document finds it only in the store.
ROUND_ROBIN = {
    "name": "rr",
    "seed": 0,
    "mode": "timed",
    "model": "llama-3.1-8b",
    "hardware": {"gpu": "h200"},
    "cache": {
        "page_size": PAGE,
        "device_tokens": 12288,
        "host_ratio": 1.0,
        "write_policy": "write_through",
        "storage_backend": "file",
    },
    "scheduler": {"chunked_prefill_size": 8192, "max_running_requests": 16},
    "workload": {
        "kind": "long_context",
        "long_context": {
            "num_documents": 3,
            "queries_per_document": 3,
            "context_length": 8192,
            "question_length": 64,
            "output_length": 4,
            "request_rate": 0.05,
            "order": "round_robin",
        },
    },
    "metrics": {"warmup_fraction": 0.0},
}


def pair(data: dict, *args: str):
    """Runs of ``data`` with and without its store (same everything else)."""
    with_ = simulate(build_scenario(data, "x", list(args)))
    without = simulate(build_scenario(data, "x", [*args, "cache.storage_backend=none"]))
    return with_, without


@pytest.mark.parametrize("policy", PREFETCH_STOP_POLICIES.names())
def test_idle_server_ttft_gap_of_each_l3_read_is_load_minus_recompute(policy):
    with_, without = pair(ROUND_ROBIN, f"cache.prefetch_policy={policy}")
    costs = LoadCosts(with_.resolved)
    a, b = with_.request_columns, without.request_columns
    reads = 0
    for i in range(len(a)):
        stored = int(a["storage_hit_tokens"][i])
        cached = int(a["device_hit_tokens"][i] + a["host_hit_tokens"][i])
        if not stored or cached != int(b["device_hit_tokens"][i] + b["host_hit_tokens"][i]):
            continue
        reads += 1
        new = int(a["prompt_tokens"][i]) - cached - stored
        gap = float(a["ttft_s"][i] - b["ttft_s"][i])
        model = costs.load_s(stored, cached, new, policy=policy) - costs.recompute_s(stored, cached, new)
        assert gap == pytest.approx(model, abs=1e-6), (i, stored, cached, new)
    # best_effort waits for no load: on an idle server nothing arrives before the request is admitted
    assert (reads > 0) == (policy != "best_effort")
    assert (a["storage_hit_tokens"].sum() == 0) == (policy == "best_effort")


# --------------------------------------------------------------------------------------- part (b)


def expected_verdict(s_with: dict, s_without: dict) -> str:
    """The documented rule, from the two summaries: TTFT judged on its mean, then the hit-rate gain."""
    dt = s_with["ttft_s"]["mean"] / s_without["ttft_s"]["mean"] - 1
    dh = s_with["hit_rate"]["total"] - s_without["hit_rate"]["total"]
    return next(v.kind for v in VERDICTS if v.holds(dt, dh))


def test_store_that_serves_the_reuse_lowers_ttft_by_what_each_read_saves():
    with_, without = pair(ROUND_ROBIN, "cache.prefetch_policy=wait_complete")
    costs = LoadCosts(with_.resolved)
    a, b = with_.request_columns, without.request_columns
    # every L3 read saves (recompute - load) on the idle server: the mean moves by their sum over n
    saved = 0.0
    for i in range(len(a)):
        stored = int(a["storage_hit_tokens"][i])
        if stored:
            cached = int(a["device_hit_tokens"][i] + a["host_hit_tokens"][i])
            new = int(a["prompt_tokens"][i]) - cached - stored
            saved += costs.recompute_s(stored, cached, new) - costs.load_s(stored, cached, new)
    assert saved > 0
    v = with_without(with_.summary, without.summary, a, b)
    n = with_.summary["requests_finished"]
    # the misses pay the store's query latency (file: 80 us) on top
    misses = sum(1 for x in a["storage_hit_tokens"] if not x)
    mean_gap = v["with_store"]["ttft_s"]["mean"] - v["without_store"]["ttft_s"]["mean"]
    assert mean_gap == pytest.approx((-saved + misses * costs.query_s) / n, abs=1e-6)
    assert v["with_store"]["hit_rate"]["storage"] > 0 == v["without_store"]["hit_rate"]["storage"]
    assert v["verdict"] == expected_verdict(with_.summary, without.summary) == "lowers_ttft"
    assert v["by"] == "time window" and len(v["windows"]) == 10
    assert sum(w["with"]["requests"] for w in v["windows"]) == n
    line = verdict_line(load_vs_recompute(with_.resolved, a), v)
    assert "the store lowers TTFT" in line
    w, wo = v["with_store"]["ttft_s"]["p50"], v["without_store"]["ttft_s"]["p50"]
    assert f"p50 {w:.3g} s vs {wo:.3g} s ({100 * (w / wo - 1):+.0f}%)" in line


@pytest.mark.parametrize(
    ("mean_with", "hit_with", "verdict"),
    [
        (0.97, 0.30, "lowers_ttft"),  # mean down 3%
        (0.99, 0.30, "hit_rate_only"),  # within 2%, total up 0.1
        (1.03, 0.30, "raises_ttft"),  # up 3%, whatever the hit rate
        (0.99, 0.204, "no_effect"),  # within 2%, total up 0.004
    ],
)
def test_verdict_rules_in_order(mean_with, hit_with, verdict):
    def summary(mean: float, hit: float) -> dict:
        rates = {"device": 0.1, "host": 0.1, "storage": hit - 0.2, "total": hit}
        return {"ttft_s": {"mean": mean, "p50": mean, "p99": 2 * mean}, "hit_rate": rates}

    names = ("arrival_s", "ttft_s", "status", "prompt_tokens", "device_hit_tokens", "host_hit_tokens")
    rows = Columns({c: [] for c in (*names, "storage_hit_tokens")})  # no request: the totals decide
    v = with_without(summary(mean_with, hit_with), summary(1.0, 0.2), rows, rows)
    assert v["verdict"] == verdict
    assert v["change"]["ttft_mean"] == pytest.approx(mean_with - 1)


def test_store_that_cannot_help_adds_no_hit_and_does_not_lower_ttft():
    # two documents that the GPU pool holds: every reuse is a device hit, nothing is left for L3
    data = {**ROUND_ROBIN, "cache": {**ROUND_ROBIN["cache"], "device_tokens": 65536}}
    data["workload"] = {"kind": "long_context", "long_context": {**ROUND_ROBIN["workload"]["long_context"]}}
    data["workload"]["long_context"]["num_documents"] = 2
    with_, without = pair(data)
    v = with_without(with_.summary, without.summary, with_.request_columns, without.request_columns)
    assert v["with_store"]["hit_rate"]["storage"] == 0
    assert v["with_store"]["hit_rate"] == v["without_store"]["hit_rate"]
    assert v["change"]["ttft_mean"] >= 0  # the hit query costs the misses its latency, nothing comes back
    assert v["verdict"] == expected_verdict(with_.summary, without.summary)
    assert v["verdict"] not in ("lowers_ttft", "hit_rate_only")
    assert v["windows_ttft_lower"] == 0


def test_multiturn_is_compared_round_by_round_as_bench_multiturn_counts_rounds():
    data = {
        "name": "mt",
        "seed": 0,
        "mode": "timed",
        "model": "llama-3.1-8b",
        "hardware": {"gpu": "h200"},
        "cache": {"page_size": PAGE, "device_tokens": 16384, "host_ratio": 1.0, "storage_backend": "hf3fs"},
        "scheduler": {"chunked_prefill_size": 8192, "max_running_requests": 16},
        "workload": {
            "kind": "multiturn",
            "multiturn": {"num_clients": 8, "num_rounds": 3, "request_length": 1024, "output_length": 16},
        },
    }
    with_, without = pair(data)
    v = with_without(with_.summary, without.summary, with_.request_columns, without.request_columns)
    assert v["by"] == "round"
    assert [w["round"] for w in v["windows"]] == [r["round"] for r in with_.summary["rounds"]]
    for w, r_with, r_without in zip(v["windows"], with_.summary["rounds"], without.summary["rounds"], strict=True):
        assert w["with"]["hit_rate"]["total"] == pytest.approx(r_with["cache_hit_rate"])
        assert w["without"]["hit_rate"]["total"] == pytest.approx(r_without["cache_hit_rate"])
        assert w["with"]["ttft_s"]["mean"] == pytest.approx(r_with["ttft_s"]["mean"])


def test_store_pair_is_kept_and_reused_by_identity(tmp_path):
    args = ["cache.prefetch_policy=wait_complete"]
    first = store_pair(ROUND_ROBIN, "x", args, base_dir=None, folder=tmp_path, workers=1)
    kept = (tmp_path / "l3.json").read_bytes()
    assert first["with_without"]["verdict"] == "lowers_ttft"
    assert first["runs"]["without_store"] == [*args, 'cache.storage_backend="none"']
    again = store_pair(ROUND_ROBIN, "x", args, base_dir=None, folder=tmp_path, workers=1)
    assert again == json.loads(json.dumps(first)) and (tmp_path / "l3.json").read_bytes() == kept
    other = store_pair(ROUND_ROBIN, "x", ["cache.prefetch_policy=timeout"], base_dir=None, folder=tmp_path, workers=1)
    assert other["runs"]["with_store"] == ["cache.prefetch_policy=timeout"]
    # buffer_only cannot run without a store: the run without it keeps the host memory as a cache
    buffer = store_pair(
        ROUND_ROBIN, "x", ["cache.host_memory_mode=buffer_only"], base_dir=None, folder=tmp_path, workers=1
    )
    assert buffer["runs"]["without_store"][-2:] == ['cache.storage_backend="none"', 'cache.host_memory_mode="cache"']
    assert "note" in buffer


def test_readme_example(monkeypatch, tmp_path):
    """The README's L3 paragraph: the line ``run`` prints for long_context_l3 and the figures it cites."""
    root = Path(__file__).resolve().parent.parent
    readme = (root / "README.md").read_text(encoding="utf-8")
    shown = next(x for x in readme.splitlines() if x.startswith("L3 (local_nvme)"))
    monkeypatch.chdir(root)
    r = invoke("run", "scenarios/long_context_l3.yaml", "--no-figures", "--out", tmp_path / "r")
    assert r.exit_code == 0, r.output
    assert shown in r.output.splitlines()
    sc = yaml.safe_load((root / "scenarios" / "long_context_l3.yaml").read_text(encoding="utf-8"))
    lc = sc["workload"]["long_context"]
    assert (lc["context_length"], lc["question_length"], sc["model"], sc["hardware"]["gpu"]) == (
        32768,
        64,
        "llama-3.1-8b",
        "h200",
    )
    a = json.loads((tmp_path / "r" / "summary.json").read_text(encoding="utf-8"))["l3"]["load_vs_recompute"]
    assert (a["store_figures"]["read_GBps"], a["store_figures"]["latency_us"], a["store_figures"]["batch_pages"]) == (
        7.0,
        80.0,
        128,
    )
    assert "32k-token documents and 64-token questions, Llama-3.1-8B on one H200, local NVMe at 7 GB/s and 80 us" in (
        " ".join(readme.split())
    )


# ------------------------------------------------------------------------------------------ CLI


@pytest.fixture(scope="module")
def rr_scenario(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("l3") / "rr.yaml"
    path.write_text(yaml.safe_dump(ROUND_ROBIN), encoding="utf-8")
    return path


def test_run_with_a_store_prints_and_writes_load_vs_recompute(rr_scenario, tmp_path):
    r = invoke("run", rr_scenario, "--out", tmp_path / "r")
    assert r.exit_code == 0, r.output
    s = json.loads((tmp_path / "r" / "summary.json").read_text(encoding="utf-8"))
    a = s["l3"]["load_vs_recompute"]
    assert s["l3"]["with_without"] is None and "l3" in s["scopes"]
    assert s["l3"]["line"] in r.output
    assert f"hicache-sim advise {rr_scenario}" in r.output  # how to get the with / without comparison
    rows = pd.read_parquet(tmp_path / "r" / "requests.parquet").iloc[s["window"]["first_request"] :]
    reads = rows[(rows["status"] == "finished") & (rows["storage_hit_tokens"] > 0)]
    assert a["requests_from_l3"] == len(reads) > 0
    assert a["l3_reads_at_least_break_even"] == int((reads["storage_hit_tokens"] >= a["break_even_tokens"]).sum())
    assert (tmp_path / "r" / "l3.png").stat().st_size > 0
    r2 = invoke("run", rr_scenario, "--out", tmp_path / "r2")
    assert r2.exit_code == 0, r2.output
    for name in ("summary.json", "l3.png"):  # same scenario and seed: same bytes
        assert (tmp_path / "r" / name).read_bytes() == (tmp_path / "r2" / name).read_bytes()


def test_instant_run_with_a_store_says_where_the_verdict_comes_from(rr_scenario, tmp_path):
    r = invoke("run", rr_scenario, "--set", "mode=instant", "--no-figures", "--out", tmp_path / "r")
    assert r.exit_code == 0, r.output
    assert "L3 (file): instant mode has no timing" in r.output
    assert "l3" not in json.loads((tmp_path / "r" / "summary.json").read_text(encoding="utf-8"))


def test_run_without_a_store_says_nothing_of_l3(rr_scenario, tmp_path):
    r = invoke("run", rr_scenario, "--set", "cache.storage_backend=none", "--no-figures", "--out", tmp_path / "r")
    assert r.exit_code == 0, r.output
    assert "L3" not in r.output


def test_advise_gives_the_verdict_of_its_recommendation(rr_scenario, tmp_path):
    out = tmp_path / "adv"
    args = ("advise", rr_scenario, "--host-sizes-gb", "2", "--workers", 2, "--out", out)
    r = invoke(*args)
    assert r.exit_code == 0, r.output
    d = json.loads((out / "advice.json").read_text(encoding="utf-8"))
    l3 = d["l3"]
    rec = d["recommendation"]
    # the pair is the recommended configuration, its store on and off
    assert f"cache.host_size_gb={rec['host_size_gb']}" in l3["runs"]["with_store"]
    assert 'cache.storage_backend="file"' in l3["runs"]["with_store"]
    assert l3["runs"]["without_store"][-1] == 'cache.storage_backend="none"'
    b = l3["with_without"]
    assert l3["line"] in r.output and b["verdict_text"] in l3["line"]
    dt = b["with_store"]["ttft_s"]["mean"] / b["without_store"]["ttft_s"]["mean"] - 1
    assert b["change"]["ttft_mean"] == pytest.approx(dt)
    assert (b["verdict"] == "lowers_ttft") == (dt < -TTFT_TOLERANCE)
    assert (out / "l3.png").stat().st_size > 0
    before = {n: (out / n).read_bytes() for n in ("advice.json", "l3.png", "l3.json")}
    r = invoke(*args)  # resumed: same bytes
    assert r.exit_code == 0, r.output
    assert {n: (out / n).read_bytes() for n in before} == before


def test_advise_instant_only_says_the_verdict_needs_timed_runs(rr_scenario, tmp_path):
    r = invoke("advise", rr_scenario, "--host-sizes-gb", "2", "--instant-only", "--out", tmp_path / "adv")
    assert r.exit_code == 0, r.output
    assert "L3 (file): no verdict with --instant-only" in r.output
    assert "l3" not in json.loads((tmp_path / "adv" / "advice.json").read_text(encoding="utf-8"))
