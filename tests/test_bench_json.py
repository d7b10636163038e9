"""``hicache-sim run --bench-json``: a timed run's figures written as SGLang's benchmarks write theirs
(bench_serving 0.5.23's ``--output-file`` line, bench_multiturn's ``--log-file`` line), read back by
hicache-sim's own benchmark reader, and ``calibrate RESULT --scenario S --check`` on the same scenario
finding no error in any figure."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import invoke

from hicache_sim.calibration.benchfit import check_bench
from hicache_sim.calibration.benchresult import MULTITURN, SERVING, read_bench_result
from hicache_sim.scenario import load_scenario, resolve
from hicache_sim.workloads.build import build_workload

#: The keys bench_serving 0.5.23 writes per run, in its order (``benchmark/serving.py``, the ``result``
#: dict), then ``cache_report`` (with ``--cache-report``).
SERVING_KEYS = [
    "tag",
    "backend",
    "dataset_name",
    "request_rate",
    "max_concurrency",
    "sharegpt_output_len",
    "random_input_len",
    "random_output_len",
    "random_range_ratio",
    "server_info",
    "duration",
    "completed",
    "total_input_tokens",
    "total_input_text_tokens",
    "total_input_vision_tokens",
    "total_output_tokens",
    "total_output_tokens_retokenized",
    "request_throughput",
    "input_throughput",
    "output_throughput",
    "total_throughput",
    *(
        f"{s}_{n}_ms"
        for n in ("e2e_latency", "ttft", "tpot", "itl")
        for s in ("mean", "median", "std", "p90", "p95", "p99")
    ),
    "concurrency",
    "accept_length",
    "max_output_tokens_per_s",
    "max_concurrent_requests",
    "cache_report",
]
CACHE_REPORT_KEYS = [
    "total_prompt_tokens",
    "total_cached_tokens",
    "cache_hit_rate_pct",
    "device_cached_tokens",
    "host_cached_tokens",
    "storage_cached_tokens",
    "storage_backend",
]
BASE = {
    "seed": 1,
    "mode": "timed",
    "model": "llama-3.1-8b",
    "hardware": {"gpu": "h100", "tp": 1},
    "cache": {"page_size": 16},
    "metrics": {"warmup_fraction": 0.0},
}
RANDOM = {
    "kind": "bench_serving",
    "bench_serving": {"random_input_len": 1024, "random_output_len": 32, "num_prompts": 20, "max_concurrency": 4},
}
MOONCAKE = {
    "kind": "bench_serving",
    "bench_serving": {"dataset_name": "mooncake", "num_prompts": 12, "mooncake_num_rounds": 2, "max_concurrency": 4},
}
MULTITURN_WL = {
    "kind": "multiturn",
    "multiturn": {"num_clients": 4, "num_rounds": 3, "request_length": 512, "output_length": 16, "request_rate": 4.0},
}


def run(tmp_path: Path, name: str, wl: dict, *flags: str) -> tuple[Path, Path]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / f"{name}.yaml"
    path.write_text(json.dumps({**BASE, "name": name, "workload": wl}), encoding="utf-8")
    out = tmp_path / name
    res = invoke("run", path, "--out", out, "--no-figures", *flags)
    assert res.exit_code == 0, res.output
    return path, out


def zero_error(scenario: Path, result: Path, kind: str) -> list[dict]:
    """calibrate --check's rows for ``result`` against ``scenario`` (each must show no error)."""
    sc = load_scenario(str(scenario), ["mode=timed"])
    r = resolve(sc)
    rows = check_bench(r, build_workload(sc, r.cache.page_size, scenario.parent), read_bench_result(result, kind))
    assert rows
    for row in rows:
        assert row["measured"] is not None and row["simulated"] == row["measured"], row
        assert row["error_pct"] == (None if row["measured"] == 0 else 0.0), row  # no % of a zero
    return rows


@pytest.mark.parametrize("name,wl", [("random", RANDOM), ("mooncake", MOONCAKE)])
def test_bench_serving_line_reads_back_with_zero_error(tmp_path, name, wl):
    scenario, out = run(tmp_path, name, wl, "--bench-json")
    lines = (out / "bench_serving.jsonl").read_text().splitlines()
    assert len(lines) == 1
    obj = json.loads(lines[0])
    assert list(obj) == SERVING_KEYS and list(obj["cache_report"]) == CACHE_REPORT_KEYS
    assert (obj["backend"], obj["tag"], obj["dataset_name"]) == (
        "hicache-sim",
        name,
        wl["bench_serving"].get("dataset_name", "random"),
    )
    # an oracle apart from the writer: the measured rows (warm-up dropped) of requests.parquet
    rows = pq.read_table(out / "requests.parquet").to_pydict()
    measured = [i for i, rid in enumerate(rows["rid"]) if not rid.startswith("warmup")]
    ttft = [rows["ttft_s"][i] * 1000 for i in measured]
    assert obj["completed"] == len(measured)
    assert obj["mean_ttft_ms"] == pytest.approx(statistics.fmean(ttft), rel=1e-12)
    assert obj["median_ttft_ms"] == pytest.approx(statistics.median(ttft), rel=1e-12)
    assert obj["total_input_tokens"] == sum(rows["prompt_tokens"][i] for i in measured)
    hits = sum(rows[f"{t}_hit_tokens"][i] for t in ("device", "host", "storage") for i in measured)
    assert obj["cache_report"]["total_cached_tokens"] == hits
    figures = {row["figure"] for row in zero_error(scenario, out / "bench_serving.jsonl", SERVING)}
    assert {"completed", "mean_ttft_ms", "p99_ttft_ms", "request_throughput", "cache_hit_rate_pct"} <= figures
    # calibrate --check through the CLI: the run it picks, one line per figure, exit 0
    res = invoke("calibrate", out / "bench_serving.jsonl", "--scenario", scenario, "--check", "--no-report")
    assert res.exit_code == 0, res.output
    assert "mean_ttft_ms" in res.output


def test_bench_multiturn_line_reads_back_with_zero_error(tmp_path):
    scenario, out = run(tmp_path, "mt", MULTITURN_WL, "--bench-json")
    assert not (out / "bench_serving.jsonl").exists()
    obj = json.loads((out / "bench_multiturn.jsonl").read_text())
    assert list(obj) == ["tag", "summary", "round"]
    assert obj["summary"]["total_requests"] == 12 and obj["summary"]["request_rate"] == 4.0
    assert list(obj["round"]) == ["round_0", "round_1", "round_2"]  # numbered as summary.json's rounds
    assert [r["request_count"] for r in obj["round"].values()] == [4, 4, 4]
    figures = {row["figure"] for row in zero_error(scenario, out / "bench_multiturn.jsonl", MULTITURN)}
    assert {"average_ttft", "p99_ttft", "throughput", "cache_hit_rate"} <= figures
    assert any(f.endswith(".cache_hit_rate") for f in figures)


def test_without_the_flag_the_run_folder_is_unchanged(tmp_path):
    _, out = run(tmp_path, "plain", RANDOM)
    assert not (out / "bench_serving.jsonl").exists() and not (out / "bench_multiturn.jsonl").exists()


def test_same_scenario_same_bytes(tmp_path):
    _, a = run(tmp_path / "a", "again", MOONCAKE, "--bench-json")
    _, b = run(tmp_path / "b", "again", MOONCAKE, "--bench-json")
    assert (a / "bench_serving.jsonl").read_bytes() == (b / "bench_serving.jsonl").read_bytes()
