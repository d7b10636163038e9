"""summary.json's ``rounds`` for multi-turn runs: bench_multiturn's percentile rule and hit-rate
definition, the figure, and the block ``hicache-sim run`` prints."""

from __future__ import annotations

import json

import pandas as pd
import yaml
from conftest import invoke

from hicache_sim.output.rounds import bench_percentile, per_round
from hicache_sim.output.summary import SCOPES


def test_percentile_is_bench_multiturns_sorted_index_rule():
    assert bench_percentile([5.0, 1.0, 4.0, 2.0, 3.0], 0.9) == 5.0  # int(4.5) = 4
    assert bench_percentile([4.0, 1.0, 3.0, 2.0], 0.5) == 3.0  # sorted[2], not the 2.5 of interpolation
    assert bench_percentile([4.0, 1.0, 3.0, 2.0], 0.9) == 4.0  # sorted[int(3.6)]
    assert bench_percentile([7.0], 0.9) == 7.0 and bench_percentile([], 0.5) is None


def _row(rnd, prompt, device, host, *, status="finished", ttft=1.0, arrival=0.0, finish=2.0):
    return {
        "round": rnd,
        "status": status,
        "prompt_tokens": prompt,
        "output_tokens": 10,
        "device_hit_tokens": device,
        "host_hit_tokens": host,
        "storage_hit_tokens": 0,
        "ttft_s": ttft,
        "e2e_s": finish - arrival,
        "arrival_s": arrival,
        "finish_s": finish,
    }


def test_hit_rate_is_cached_over_prompt_tokens_of_the_rounds_served_requests():
    df = pd.DataFrame(
        [
            _row(0, 100, 0, 0, ttft=0.5, arrival=0.0, finish=1.0),
            _row(0, 300, 0, 0, ttft=0.1, arrival=1.0, finish=4.0),
            _row(1, 100, 50, 0, ttft=0.2, arrival=5.0, finish=6.0),
            _row(1, 300, 0, 0, ttft=0.4, arrival=5.5, finish=7.0),
            _row(1, 500, 0, 500, status="rejected"),
        ]
    )
    rounds = per_round(df, timed=True)
    assert [r["round"] for r in rounds] == [0, 1] and [r["requests"] for r in rounds] == [2, 2]
    assert rounds[1]["cache_hit_rate"] == 50 / 400  # token-weighted (a mean of ratios would give 0.25)
    assert rounds[1]["hit_rate"] == {"device": 0.125, "host": 0.0, "storage": 0.0}
    assert rounds[1]["ttft_s"] == {"mean": (0.2 + 0.4) / 2, "p90": 0.4, "median": 0.4}
    assert rounds[0]["latency_s"]["median"] == 3.0 and rounds[0]["latency_s"]["mean"] == 2.0
    assert rounds[1]["throughput"]["requests_per_s"] == 2 / (7.0 - 5.0)
    assert "ttft_s" not in per_round(df, timed=False)[0]


MULTITURN = {
    "name": "mt",
    "seed": 1,
    "mode": "timed",
    "model": "llama-3.1-8b",
    "hardware": {"gpu": "h200"},
    "cache": {"page_size": 64, "device_tokens": 64 * 120, "host_ratio": 2.0},
    "scheduler": {"chunked_prefill_size": 2048},
    "workload": {
        "kind": "multiturn",
        "multiturn": {"num_clients": 8, "num_rounds": 3, "request_length": 256, "output_length": 16},
    },
}


def test_run_writes_rounds_prints_them_and_draws_them(tmp_path):
    sc = tmp_path / "mt.yaml"
    sc.write_text(yaml.safe_dump(MULTITURN))
    r = invoke("run", sc, "--out", tmp_path / "o")
    assert r.exit_code == 0, r.output
    s = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert s["scopes"]["rounds"] == SCOPES["rounds"]
    req = pd.read_parquet(tmp_path / "o" / "requests.parquet")
    assert s["rounds"] == per_round(req, timed=True)
    assert [x["round"] for x in s["rounds"]] == [0, 1, 2] and all(x["requests"] == 8 for x in s["rounds"])
    assert s["rounds"][0]["cache_hit_rate"] == 0.0 < s["rounds"][2]["cache_hit_rate"]
    lines = r.output.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("per round"))
    for k, x in enumerate(s["rounds"]):
        cells = lines[at + 2 + k].split()
        assert cells[:3] == [str(x["round"]), "8", f"{x['cache_hit_rate']:.4f}"]
        assert cells[3] == f"{x['ttft_s']['mean']:.3f}" and cells[-1] == f"{x['throughput']['requests_per_s']:.3f}"
    assert (tmp_path / "o" / "rounds.png").stat().st_size > 10_000


def test_no_rounds_outside_multi_turn(tmp_path):
    sc = tmp_path / "t.yaml"
    sc.write_text(yaml.safe_dump({**MULTITURN, "workload": {"kind": "trace", "trace": {"limit": 30}}}))
    r = invoke("run", sc, "--out", tmp_path / "o", "--no-figures")
    assert r.exit_code == 0, r.output
    assert "rounds" not in json.loads((tmp_path / "o" / "summary.json").read_text())
    assert "per round" not in r.output
