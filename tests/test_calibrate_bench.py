"""``hicache-sim calibrate RESULT --scenario S``: the deployment's own benchmark results (bench_serving's
``--output-file`` JSONL and printed block, bench_multiturn's ``--log-file`` JSONL and printed lines),
read from real public lines; ``--check``; and the fit recovering known knobs from a result the simulator
itself produced, written as each benchmark writes it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import invoke

from hicache_sim.calibration.benchfit import Runner
from hicache_sim.calibration.benchresult import MULTITURN, SERVING, read_bench_result, sniff
from hicache_sim.cli.calibrate import input_format
from hicache_sim.hardware.calibration import load_calibration
from hicache_sim.scenario import build_scenario, resolve
from hicache_sim.workloads.build import build_workload

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "validation" / "cases"

SERVING_SCENARIO = {
    "name": "bench_fit_serving",
    "seed": 1,
    "mode": "timed",
    "model": "llama-3.1-8b",
    "hardware": {"gpu": "h100", "tp": 1},
    "cache": {"page_size": 16, "host_tokens": 0},
    "workload": {
        "kind": "bench_serving",
        "bench_serving": {
            "random_input_len": 1024,
            "random_output_len": 64,
            "num_prompts": 40,
            "max_concurrency": 8,
            "random_range_ratio": 0.5,
            "seed": 1,
        },
    },
}
MULTITURN_SCENARIO = {
    "name": "bench_fit_multiturn",
    "seed": 1,
    "mode": "timed",
    "model": "llama-3.1-8b",
    "hardware": {"gpu": "h100", "tp": 1},
    "cache": {"page_size": 16, "host_tokens": 0},
    "workload": {
        "kind": "multiturn",
        "multiturn": {
            "num_clients": 8,
            "num_rounds": 4,
            "request_length": 2048,
            "output_length": 32,
            "request_rate": 2.0,
            "max_parallel": 1,
            "round_barrier": True,
        },
    },
    "metrics": {"warmup_fraction": 0.0},
}
# The deployment's knobs, unknown to the fit (which starts from the presets: 0.7, 0.6, 0.8).
TRUE = {"linear_mfu": 0.434, "attention_mfu": 0.372, "hbm_efficiency": 0.55}

# bench_serving's printed label of each JSONL key (its result block, SGLang 0.5.23).
SERVING_LABEL = {
    "completed": "Successful requests:",
    "duration": "Benchmark duration (s):",
    "total_input_tokens": "Total input tokens:",
    "total_output_tokens": "Total generated tokens:",
    "request_throughput": "Request throughput (req/s):",
    "input_throughput": "Input token throughput (tok/s):",
    "output_throughput": "Output token throughput (tok/s):",
    "total_throughput": "Total token throughput (tok/s):",
    "concurrency": "Concurrency:",
}
SERIES_LABEL = {"e2e_latency": "E2E Latency", "ttft": "TTFT", "tpot": "TPOT", "itl": "ITL"}
STAT_LABEL = {"mean": "Mean", "median": "Median", "p90": "P90", "p95": "P95", "p99": "P99"}


def simulated(scenario: dict, kind: str, knobs: dict):
    sc = build_scenario(dict(scenario), "t", [])
    r = resolve(sc)
    return Runner(r, build_workload(sc, r.cache.page_size, None), kind)(knobs)


def serving_block(figures: dict) -> str:
    """A result block laid out as bench_serving prints it (two decimals, as it rounds)."""
    lines = ["", " Serving Benchmark Result ".center(50, "="), f"{'Backend:':<40} sglang"]
    for key, label in SERVING_LABEL.items():
        if key in figures:
            v = figures[key]
            lines.append(f"{label:<40} {int(v) if key.startswith(('completed', 'total_')) else f'{v:.2f}'}")
    for series, label in SERIES_LABEL.items():
        lines.append(label.center(50, "-"))
        for stat, shown in STAT_LABEL.items():
            key = f"{stat}_{series}_ms"
            if key in figures:
                lines.append(f"{f'{shown} {label} (ms):':<40} {figures[key]:.2f}")
    lines.append("=" * 50)
    return "\n".join(lines) + "\n"


def multiturn_jsonl(figures: dict, rounds: list[dict]) -> str:
    """bench_multiturn's --log-file line: a timestamp, the tag, its summary and its per-round figures."""
    data = {
        "timestamp": "2026-12-05T06:00:00",
        "tag": "",
        "summary": {"request_rate": 2.0, **figures},
        "round": {f"round_{r['round']}": {k: v for k, v in r.items() if k != "round"} for r in rounds},
    }
    return json.dumps(data) + "\n"


# ------------------------------------------------------------------------------------------ parsers


def cookbook_runs():
    for path in sorted(CASES.glob("cookbook_*.yaml")):
        case = yaml.safe_load(path.read_text())
        quote = case["source"]["quote"]
        for line in quote.splitlines():
            if not line.startswith("line "):
                continue
            for name, run in case["runs"].items():
                flags = line.split(":", 1)[1].split('"', 1)[0]
                bs = run["scenario"]["workload"]["bench_serving"]
                want = f"--random-input-len {bs['random_input_len']} --random-output-len {bs['random_output_len']} "
                want += f"--num-prompts {bs['num_prompts']} --max-concurrency {bs['max_concurrency']}"
                if flags.strip().rstrip(":") == want:
                    yield pytest.param(line, run["published"], id=f"{path.stem}-{name}")


PUBLISHED_KEY = {
    "total_input_tokens": "total_input_tokens",
    "total_output_tokens": "total_output_tokens",
    "ttft_mean_ms": "mean_ttft_ms",
    "ttft_median_ms": "median_ttft_ms",
    "tpot_median_ms": "median_tpot_ms",
    "duration_s": "duration",
    "output_token_throughput": "output_throughput",
}


@pytest.mark.parametrize(("quote", "published"), list(cookbook_runs()))
def test_cookbook_blocks_parse(tmp_path, quote, published):
    """The cookbook's published "Serving Benchmark Result" lines (validation/cases) read back to their figures."""
    lines = [part for i, part in enumerate(quote.split('"')) if i % 2 == 1]
    text = "noise before the block\n" + " Serving Benchmark Result ".center(50, "=") + "\n"
    text += "Successful requests:                     10\n" + "\n".join(lines) + "\n" + "=" * 50 + "\n"
    path = tmp_path / "result.txt"
    path.write_text(text)
    assert sniff(text) == SERVING and input_format(path, "auto") == SERVING
    got = read_bench_result(path, SERVING)
    assert got.text and got.line == 2
    for key, value in published.items():
        assert got.figures[PUBLISHED_KEY[key]] == pytest.approx(value), key


# bench_serving's result keys (its --output-file line, SGLang 0.5.23), with the run's arguments and
# server_info beside them: only the figures are read.
SERVING_JSONL = {
    "tag": None,
    "backend": "sglang",
    "dataset_name": "random",
    "request_rate": "inf",
    "max_concurrency": 16,
    "random_input_len": 1000,
    "random_output_len": 1000,
    "random_range_ratio": 0.0,
    "server_info": {"version": "0.5.23"},
    "duration": 79.47,
    "completed": 80,
    "total_input_tokens": 39668,
    "total_input_text_tokens": 39668,
    "total_input_vision_tokens": 0,
    "total_output_tokens": 40805,
    "total_output_tokens_retokenized": 40790,
    "request_throughput": 1.01,
    "input_throughput": 499.16,
    "output_throughput": 513.48,
    "total_throughput": 1012.64,
    **{
        f"{s}_{n}_ms": 1.0 + i
        for i, (n, s) in enumerate((n, s) for n in SERIES_LABEL for s in ("mean", "median", "std", "p90", "p95", "p99"))
    },
    "concurrency": 15.2,
    "accept_length": None,
    "max_output_tokens_per_s": 880.0,
    "max_concurrent_requests": 16,
    "cache_report": {  # with --cache-report
        "total_prompt_tokens": 39668,
        "total_cached_tokens": 12000,
        "cache_hit_rate_pct": 30.25,
        "device_cached_tokens": 12000,
        "host_cached_tokens": 0,
        "storage_cached_tokens": None,
        "storage_backend": None,
    },
}


def test_bench_serving_jsonl_reads_its_keys_and_the_last_run(tmp_path):
    path = tmp_path / "out.jsonl"
    first = {**SERVING_JSONL, "completed": 10}
    path.write_text(json.dumps(first) + "\n\n" + json.dumps(SERVING_JSONL) + "\n")
    assert input_format(path, "auto") == SERVING
    got = read_bench_result(path, SERVING)
    assert (got.line, got.runs_in_file, got.requests) == (3, 2, 80)
    assert got.figures["mean_ttft_ms"] == SERVING_JSONL["mean_ttft_ms"]
    assert got.figures["p99_itl_ms"] == SERVING_JSONL["p99_itl_ms"]
    assert "std_ttft_ms" not in got.figures and "server_info" not in got.figures
    assert "max_output_tokens_per_s" not in got.figures  # bucketed per second: not simulated
    assert (got.figures["total_cached_tokens"], got.figures["cache_hit_rate_pct"]) == (12000, 30.25)


def test_bench_serving_cache_report_block(tmp_path):
    """--cache-report's lines at the end of the printed block: cached tokens and hit rate (its tier lines,
    counts then shares under the same labels, are not read)."""
    block = serving_block({"completed": 4, "mean_ttft_ms": 30.0}).rstrip("=\n")
    block += "\n" + "Cache Hit Details".center(50, "-") + "\n"
    for label, value in (("Total prompt tokens:", "4096"), ("Total cached tokens:", "1024"), ("  Device:", "1024")):
        block += f"{label:<40} {value}\n"
    block += f"{'Cache hit rate:':<40} 25.0%\n{'  Device:':<40} 100.0%\n" + "=" * 50 + "\n"
    path = tmp_path / "bench.txt"
    path.write_text(block)
    got = read_bench_result(path, SERVING)
    assert got.figures["total_cached_tokens"] == 1024 and got.figures["cache_hit_rate_pct"] == 25.0


# Real printed lines: the per-round block of SGLang PR #27010 (validation/cases/sglang_27010_l1.yaml)
# and a summary published in sglang-npu/sglang_npu benchmark/hicache/disk.sh.
NPU_SUMMARY = """Performance metrics summary:
  Total requests: 1280 at 16 requests per second
  Average TTFT: 5.18
  P90 TTFT: 7.24
  Median TTFT: 5.87
  Average latency: 10.27
  P90 latency: 11.53
  Median latency: 10.33
  Throughput: 2.78 requests per second
"""


def test_bench_multiturn_printed_lines(tmp_path):
    case = yaml.safe_load((CASES / "sglang_27010_l1.yaml").read_text())
    rounds = case["source"]["quote"]
    path = tmp_path / "multiturn.txt"
    path.write_text("Running with specified request rate...\n" + NPU_SUMMARY + "Per-round metrics:\n" + rounds)
    assert input_format(path, "auto") == MULTITURN
    got = read_bench_result(path, MULTITURN)
    assert got.figures == {
        "total_requests": 1280,
        "average_ttft": 5.18,
        "p90_ttft": 7.24,
        "median_ttft": 5.87,
        "average_latency": 10.27,
        "p90_latency": 11.53,
        "median_latency": 10.33,
        "throughput": 2.78,
    }
    assert [r["cache_hit_rate"] for r in got.rounds] == case["published"]["hit_rate"]
    assert [r["average_ttft"] for r in got.rounds] == case["published"]["ttft_mean_s"]
    assert [r["request_count"] for r in got.rounds] == [128] * 10
    only_rounds = tmp_path / "rounds.txt"
    only_rounds.write_text(rounds)
    assert read_bench_result(only_rounds, MULTITURN).requests == 1280


def test_bench_multiturn_jsonl(tmp_path):
    path = tmp_path / "performance_metrics.jsonl"
    summary = {"total_requests": 4, "average_ttft": 0.5, "p90_ttft": 0.9, "median_ttft": 0.4, "throughput": 2.0}
    rounds = [{"round": 0, "average_ttft": 0.3, "cache_hit_rate": 0.0, "request_count": 2}]
    rounds.append({"round": 1, "average_ttft": 0.7, "cache_hit_rate": 0.5, "request_count": 2})
    path.write_text(multiturn_jsonl(summary, rounds))
    assert input_format(path, "auto") == MULTITURN
    got = read_bench_result(path, MULTITURN)
    assert got.figures == {**summary}
    assert got.rounds == [{k: float(v) for k, v in r.items()} | {"round": r["round"]} for r in rounds]


def test_other_inputs_keep_their_format(tmp_path):
    replay = tmp_path / "m.jsonl"
    replay.write_text('{"direction": "h2d", "bytes": 4096, "seconds": 1e-5}\n')
    log = tmp_path / "server.log"
    log.write_text("[2026-04-08 14:05:21 TP0] Decode batch, #running-req: 1, #token: 9, gen throughput (token/s): 9\n")
    assert input_format(replay, "auto") == "replay"
    assert input_format(log, "auto") == "sglang-log"


# ------------------------------------------------------------------------------------------ the fit


def _write_serving(folder: Path, style: str, knobs: dict) -> Path:
    sim = simulated(SERVING_SCENARIO, SERVING, knobs)
    if style == "jsonl":
        path = folder / "bench.jsonl"
        path.write_text(json.dumps({"backend": "sglang", "server_info": None, **sim.figures}) + "\n")
    else:
        path = folder / "bench.txt"
        path.write_text("Starting initial single prompt test run...\n" + serving_block(sim.figures))
    return path


@pytest.mark.parametrize("style", ["jsonl", "text"])
def test_fit_recovers_serving_knobs(tmp_path, style):
    """A bench_serving result the simulator produced at TRUE, fitted from the presets: within 1 % for the
    JSONL (full precision; the bounded Newton search stops at 0.005 % on its targets) and for the printed
    block (two decimals)."""
    result = _write_serving(tmp_path, style, TRUE)
    sc = tmp_path / "deploy.yaml"
    sc.write_text(yaml.safe_dump(SERVING_SCENARIO))
    out = tmp_path / "cal.yaml"
    r = invoke("calibrate", result, "--scenario", sc, "--out", out)
    assert r.exit_code == 0, r.output
    got = load_calibration(out).compute
    for k, v in TRUE.items():
        assert got[k] == pytest.approx(v, rel=0.01), (k, r.output)
    assert "not pinned: request_overhead_us" in r.output
    assert "figures not fitted: median |error|" in r.output
    report = json.loads((tmp_path / "cal_bench.json").read_text())
    assert report["fit"]["levers"] == {"prefill": "prefill efficiency scale", "decode": "hbm_efficiency"}
    assert report["fit"]["runs"] <= 40
    # the calibrated scenario reproduces the result
    calibrated = {**SERVING_SCENARIO, "hardware": {**SERVING_SCENARIO["hardware"], "calibration": str(out)}}
    sc.write_text(yaml.safe_dump(calibrated))
    check = invoke("calibrate", result, "--scenario", sc, "--check", "--out", tmp_path / "after.yaml")
    assert check.exit_code == 0, check.output
    rows = json.loads((tmp_path / "after_bench.json").read_text())["before"]
    ttft = next(row for row in rows if row["figure"] == "mean_ttft_ms")
    assert abs(ttft["error_pct"]) < 0.1


def test_fit_recovers_multiturn_knobs(tmp_path):
    """A bench_multiturn --log-file line the simulator produced at TRUE: every knob within 1 %."""
    sim = simulated(MULTITURN_SCENARIO, MULTITURN, TRUE)
    result = tmp_path / "performance_metrics.jsonl"
    result.write_text(multiturn_jsonl(sim.figures, sim.rounds))
    sc = tmp_path / "deploy.yaml"
    sc.write_text(yaml.safe_dump(MULTITURN_SCENARIO))
    out = tmp_path / "cal.yaml"
    r = invoke("calibrate", result, "--scenario", sc, "--out", out)
    assert r.exit_code == 0, r.output
    got = load_calibration(out).compute
    for k, v in TRUE.items():
        assert got[k] == pytest.approx(v, rel=0.01), (k, r.output)
    assert "round_3.cache_hit_rate" in r.output


def test_fit_runs_each_point_once_and_reports_the_runs_it_made(monkeypatch):
    """The fitted point's figures (``after``) come from the run that accepted it, not a run of the same
    knobs again: every run has knobs of its own, and ``runs`` counts exactly the runs made."""
    from hicache_sim.calibration import benchfit
    from hicache_sim.calibration.benchresult import BenchResult

    sim = simulated(SERVING_SCENARIO, SERVING, TRUE)
    result = BenchResult(kind=SERVING, path=Path("simulated.jsonl"), figures=dict(sim.figures))
    sc = build_scenario(dict(SERVING_SCENARIO), "t", [])
    r = resolve(sc)
    made: list[tuple] = []
    run = Runner.__call__

    def counted(self, knobs):
        made.append(tuple(sorted(knobs.items())))
        return run(self, knobs)

    monkeypatch.setattr(Runner, "__call__", counted)
    fit = benchfit.fit_bench(r, build_workload(sc, r.cache.page_size, None), result)
    assert fit.levers == {"prefill": "prefill efficiency scale", "decode": "hbm_efficiency"}
    assert fit.runs == len(made)
    assert len(set(made)) == len(made), [k for k in made if made.count(k) > 1][:1]
    last = dict(made[-1])
    assert {k: last[k] for k in fit.knobs} == fit.knobs  # the last run is the fitted point, run once


def test_fit_keeps_the_existing_calibration_and_names_an_unpinnable_decode(tmp_path):
    """Answers of one token: no decode figure moves with the decode knobs, so they stay; the scenario's
    calibration file's other entries are carried over."""
    base = tmp_path / "base.yaml"
    base.write_text(
        yaml.safe_dump(
            {"kind": "hicache-sim-calibration", "version": 1, "groups": [], "compute": {"request_overhead_us": 800.0}}
        )
    )
    scenario = {**SERVING_SCENARIO, "hardware": {**SERVING_SCENARIO["hardware"], "calibration": str(base)}}
    scenario["workload"] = {
        "kind": "bench_serving",
        "bench_serving": {**SERVING_SCENARIO["workload"]["bench_serving"], "random_output_len": 1},
    }
    sim = simulated(scenario, SERVING, {"linear_mfu": 0.5, "attention_mfu": 0.4})
    result = tmp_path / "bench.jsonl"
    result.write_text(json.dumps(sim.figures) + "\n")
    sc = tmp_path / "deploy.yaml"
    sc.write_text(yaml.safe_dump(scenario))
    out = tmp_path / "cal.yaml"
    r = invoke("calibrate", result, "--scenario", sc, "--out", out)
    assert r.exit_code == 0, r.output
    got = load_calibration(out).compute
    assert got["request_overhead_us"] == 800.0
    assert got["linear_mfu"] == pytest.approx(0.5, rel=0.01)
    assert "hbm_efficiency" not in got
    assert "not pinned: hbm_efficiency" in r.output


def test_check_compares_without_fitting(tmp_path):
    result = _write_serving(tmp_path, "text", TRUE)
    sc = tmp_path / "deploy.yaml"
    sc.write_text(yaml.safe_dump(SERVING_SCENARIO))
    r = invoke("calibrate", result, "--scenario", sc, "--check", "--out", tmp_path / "check.yaml")
    assert r.exit_code == 0, r.output
    assert not (tmp_path / "check.yaml").exists()
    md = (tmp_path / "check_bench.md").read_text()
    assert md.startswith("# hicache-sim benchmark check")
    for figure in ("mean_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "mean_itl_ms", "duration", "output_throughput"):
        assert f"| {figure} |" in md and figure in r.output
    # the presets are faster than TRUE: the simulated TTFT is below the measured one
    row = next(
        x for x in json.loads((tmp_path / "check_bench.json").read_text())["before"] if x["figure"] == "mean_ttft_ms"
    )
    assert row["error_pct"] < -20
    # run again: its own report is replaced
    assert invoke("calibrate", result, "--scenario", sc, "--check", "--out", tmp_path / "check.yaml").exit_code == 0


def test_a_file_of_several_runs_gives_the_scenarios_run(tmp_path):
    """bench_serving appends a line per run and bench_multiturn one per rate of its sweep: the run
    compared is the last whose request count, rate and concurrency are the scenario's."""
    sim = simulated(SERVING_SCENARIO, SERVING, TRUE)
    line = {"request_rate": "inf", "max_concurrency": 8, **sim.figures}
    lines = [{**line, "completed": 10}, line, {**line, "max_concurrency": 16}]
    result = tmp_path / "bench.jsonl"
    result.write_text("".join(json.dumps(x) + "\n" for x in lines))
    sc = tmp_path / "deploy.yaml"
    sc.write_text(yaml.safe_dump(SERVING_SCENARIO))
    r = invoke("calibrate", result, "--scenario", sc, "--check", "--out", tmp_path / "c.yaml")
    assert r.exit_code == 0, r.output
    assert "line 2, of 3 runs" in r.output
    assert json.loads((tmp_path / "c_bench.json").read_text())["line"] == 2

    mt = simulated(MULTITURN_SCENARIO, MULTITURN, {})  # at the presets: what --check simulates
    block = "Performance metrics summary:\n  Total requests: 32 at {rate} requests per second\n  Average TTFT: {ttft}\n"
    text = block.format(rate=16, ttft=9.99) + block.format(rate=2.0, ttft=f"{mt.figures['average_ttft']:.2f}")
    text += block.format(rate=1, ttft=9.99)
    result = tmp_path / "multiturn.txt"
    result.write_text(text)
    sc.write_text(yaml.safe_dump(MULTITURN_SCENARIO))
    r = invoke("calibrate", result, "--scenario", sc, "--check", "--out", tmp_path / "m.yaml")
    assert r.exit_code == 0, r.output
    assert "line 4, of 3 runs" in r.output
    row = json.loads((tmp_path / "m_bench.json").read_text())["before"][1]
    assert row["figure"] == "average_ttft" and row["measured"] == round(mt.figures["average_ttft"], 2)


def test_simulated_cache_hit_rate_of_a_repeated_run():
    """bench_serving --cache-report's hit rate, simulated: a run whose every prompt an earlier run on the
    same server sent whole hits all of it but the page holding its last token (page 16)."""
    bs = SERVING_SCENARIO["workload"]["bench_serving"]
    again = {
        k: bs[k]
        for k in ("random_input_len", "random_output_len", "num_prompts", "max_concurrency", "random_range_ratio")
    }
    scenario = {
        **SERVING_SCENARIO,
        "workload": {"kind": "bench_serving", "bench_serving": {**bs, "earlier_runs": [again]}},
    }
    sc = build_scenario(dict(scenario), "t", [])
    lengths = [q.input_tokens for q in build_workload(sc, 16, None).requests][-bs["num_prompts"] :]
    sim = simulated(scenario, SERVING, {})
    assert sim.figures["total_cached_tokens"] == sum((n - 1) // 16 * 16 for n in lengths)
    assert sim.figures["cache_hit_rate_pct"] == pytest.approx(100 * sim.figures["total_cached_tokens"] / sum(lengths))


def test_check_of_a_published_per_round_table(tmp_path):
    """SGLang PR #27010's printed per-round lines against its case's scenario: rounds 0-2 hit exactly the
    published rate (as validation/ holds), the mean TTFT comes from the rounds and says so."""
    case = yaml.safe_load((CASES / "sglang_27010_l1.yaml").read_text())
    result = tmp_path / "l1.txt"
    result.write_text("Per-round metrics:\n" + case["source"]["quote"])
    sc = tmp_path / "l1.yaml"
    sc.write_text(yaml.safe_dump(case["scenario"]))
    r = invoke("calibrate", result, "--scenario", sc, "--check", "--out", tmp_path / "l1cal.yaml")
    assert r.exit_code == 0, r.output
    assert "the request-weighted mean of its rounds' mean TTFT" in r.output
    rows = {row["figure"]: row for row in json.loads((tmp_path / "l1cal_bench.json").read_text())["before"]}
    for i in (1, 2):
        row = rows[f"round_{i}.cache_hit_rate"]
        assert row["simulated"] == pytest.approx(row["measured"], abs=5e-7)
    assert rows["average_ttft"]["measured"] == pytest.approx(sum(case["published"]["ttft_mean_s"]) / 10)
    assert all(f"round_{i}.average_ttft" in rows for i in range(10))
