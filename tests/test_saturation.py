"""Saturation said plainly (issue 28, item 1): a timed run whose offered work exceeds what the compute
model serves is flagged in summary.json, on the terminal and in the TTFT figure, on the right side of
the boundary; advise refuses to size from such a run and says what load would fit."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import invoke

from hicache_sim.advise import SIZE, TTFT, VERDICT, Target, smallest_meeting
from hicache_sim.output import saturation as sat
from hicache_sim.output.columns import Columns
from hicache_sim.output.plots import saturation_note, ttft_figure
from hicache_sim.runner import simulate
from hicache_sim.scenario import build_scenario, resolve

# 4,096-token prompts that share nothing (no hits: every request costs the same prefill) and 128-token
# answers on one H200: the compute model serves 7.52 requests/s. Poisson arrivals, 400 requests.
BELOW, JUST_ABOVE, ABOVE, FAR_ABOVE = 6.77, 7.14, 7.5, 100.0


def scenario(rate: float, n: int = 400, prompt: int = 4096, output: int = 128, pages: int = 4000) -> dict:
    return {
        "name": "sat",
        "mode": "timed",
        "model": "llama-3.1-8b",
        "cache": {"page_size": 64, "device_tokens": 64 * pages, "host_ratio": 1.0},
        "workload": {
            "kind": "poisson_synthetic",
            "poisson_synthetic": {
                "num_requests": n,
                "request_rate": rate,
                "input_length": prompt,
                "output_length": output,
                "shared_fraction": 0.0,
            },
        },
    }


def block(rate: float) -> dict:
    return simulate(build_scenario(scenario(rate), "test", [])).summary["saturation"]


def test_just_below_capacity_is_not_flagged():
    s = block(BELOW)
    assert 0.9 < s["utilisation"] < 1.0
    assert s["rules_fired"] == [] and s["verdict"] == "near capacity"
    assert s["wait_growth_s_per_s"] < sat.WAIT_SLOPE_UNSTABLE  # the queue has no trend: measured too
    assert s["queue_growing_since_s"] is None and s["instances_needed"] == 1
    assert sat.saturation_line(s) is None


@pytest.mark.parametrize(("rate", "rules"), [(JUST_ABOVE, ["utilisation"]), (ABOVE, ["utilisation", "queue_growth"])])
def test_just_above_capacity_is_flagged(rate, rules):
    s = block(rate)
    assert 1.0 <= s["utilisation"] < 1.1
    assert s["verdict"] == "saturated" and s["rules_fired"] == rules
    assert s["wait_growth_s_per_s"] > 0  # the queue does grow: the model's verdict is the run's
    assert s["offered"]["requests_per_s"] > s["served"]["requests_per_s"]
    assert s["instances_needed"] == 2 and s["instances_within_capacity"] == 2  # rho / 2 < 0.8 too
    assert s["queue_growing_since_s"] is not None and s["queue_growing_since_s"] < s["last_arrival_s"]
    assert "saturated" in sat.saturation_line(s) and "2 instances fit this load" in sat.saturation_line(s)


def test_capacity_is_what_a_saturated_run_serves():
    """The capacity derived from the compute model is the throughput the simulator reaches when its queue
    never empties (within 3%), and the wait grows at the fluid limit's rho - 1."""
    s = block(FAR_ABOVE)
    assert s["capacity"]["requests_per_s"] == pytest.approx(s["served"]["requests_per_s"], rel=0.03)
    assert s["capacity"]["prompt_tokens_per_s"] == pytest.approx(s["served"]["prompt_tokens_per_s"], rel=0.03)
    assert s["wait_growth_s_per_s"] == pytest.approx(s["utilisation"] - 1, rel=0.15)
    assert s["queue_share_of_ttft"] > 0.95


def test_capacity_of_short_prompts_counts_them_batched():
    """256-token prompts share a prefill step 32 at a time (the 8,192-token budget): costed alone, each
    would pay a whole step's weight reads. A pool large enough that nothing is retracted."""
    sc = build_scenario(scenario(2000.0, n=1000, prompt=256, output=16, pages=40000), "test", [])
    s = simulate(sc).summary["saturation"]
    assert s["capacity"]["requests_per_s"] == pytest.approx(s["served"]["requests_per_s"], rel=0.03)


def test_queue_growth_flags_an_overload_the_compute_model_underestimates(monkeypatch):
    """With a model twice too fast (utilisation halved), the measured queue growth still flags the
    overloaded run, and still not the stable one."""
    real = sat.Demand.__call__
    monkeypatch.setattr(sat.Demand, "__call__", lambda self, *a: real(self, *a) / 2)
    over, under = block(ABOVE), block(BELOW)
    assert over["utilisation"] < 0.6 and over["rules_fired"] == ["queue_growth"] and over["verdict"] == "saturated"
    assert under["rules_fired"] == [] and under["verdict"] == "within capacity"


def test_the_instances_line_follows_the_measured_rho_when_it_is_larger(monkeypatch):
    """The instance count comes from the larger of the model's and the measured rho; the per-instance
    utilisation and the rate one instance takes must come from the same rho (they came from the model's:
    '7 instances fit this load (utilisation 0.35 each; 9 for under 0.8), or one at under 1.12 requests/s'
    where 0.41 were served)."""
    real = sat.Demand.__call__
    monkeypatch.setattr(sat.Demand, "__call__", lambda self, *a: real(self, *a) / 2)
    s = block(ABOVE)
    rho = 1.0 + s["wait_growth_s_per_s"]
    assert rho > s["utilisation"] and s["instances_needed"] == int(rho) + 1
    line = sat.saturation_line(s)
    assert f"utilisation {rho / s['instances_needed']:.2f} each" in line, line
    assert f"one at under {s['offered']['requests_per_s'] / rho:.2f} requests/s" in line, line


def test_a_closed_loop_is_not_judged():
    """bench_multiturn's clients send only when answered: the queue is bounded by the clients."""
    sc = {
        **scenario(1.0),
        "workload": {
            "kind": "multiturn",
            "multiturn": {"num_clients": 64, "num_rounds": 2, "request_length": 4096, "output_length": 16},
        },
    }
    s = simulate(build_scenario(sc, "test", [])).summary["saturation"]
    assert s["verdict"] == "closed loop" and s["rules_fired"] == []


def test_one_request_has_no_rate_to_judge():
    s = simulate(build_scenario(scenario(ABOVE, 1), "test", [])).summary["saturation"]
    assert s["verdict"] == "unknown" and s["utilisation"] is None and s["offered"]["requests_per_s"] is None


def test_a_burst_shorter_than_one_requests_service_has_no_rate(tmp_path):
    """Three requests within 2 ms (a request takes ~50 ms of GPU time): one burst, not a steady
    overload; it was called saturated at utilisation 51 with "51 instances fit this load"."""
    trace = tmp_path / "t.jsonl"
    rows = [{"timestamp": i, "input_length": 2048, "output_length": 16, "hash_ids": [10 * i + j for j in range(4)]}
            for i in range(3)]  # fmt: skip
    trace.write_text("".join(json.dumps(row) + "\n" for row in rows))
    data = {
        "name": "burst",
        "mode": "timed",
        "model": "llama-3.1-8b",
        "cache": {"page_size": 64},
        "metrics": {"warmup_fraction": 0.0},
        "workload": {"kind": "trace", "trace": {"path": str(trace)}},
    }
    s = simulate(build_scenario(data, "test", [])).summary["saturation"]
    assert s["last_arrival_s"] < 1.0 / s["capacity"]["requests_per_s"]
    assert s["verdict"] == sat.UNKNOWN and s["rules_fired"] == [] and s["instances_needed"] == 1
    assert sat.saturation_line(s) is None


def test_same_scenario_same_bytes():
    a = simulate(build_scenario(scenario(ABOVE, 150), "test", [])).summary
    b = simulate(build_scenario(scenario(ABOVE, 150), "test", [])).summary
    assert json.dumps(a) == json.dumps(b) and "saturation" in a["scopes"]


def test_run_says_it_on_the_terminal_and_marks_the_figure(tmp_path):
    lines = {}
    for name, rate in (("over", ABOVE), ("under", BELOW)):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(scenario(rate)), encoding="utf-8")
        r = invoke("run", tmp_path / f"{name}.yaml", "--out", tmp_path / name)
        assert r.exit_code == 0, r.output
        s = json.loads((tmp_path / name / "summary.json").read_text(encoding="utf-8"))
        warned = [ln for ln in r.output.splitlines() if ln.startswith("warning: saturated:")]
        assert len(warned) == (name == "over"), r.output
        lines[name] = warned
        assert s["saturation"]["verdict"] == ("saturated" if name == "over" else "near capacity")
    line = lines["over"][0]
    assert "requests/s offered" in line and "the waiting queue grew from" in line and "of TTFT is queueing" in line
    s = json.loads((tmp_path / "over" / "summary.json").read_text(encoding="utf-8"))["saturation"]
    assert saturation_note(s) == f"SATURATED (utilisation {s['utilisation']:.2f})"
    req = pd.read_parquet(tmp_path / "over" / "requests.parquet")
    ttft_figure(Columns.from_frame(req), tmp_path / "plain.png", "sat: time to first token")
    ttft_figure(Columns.from_frame(req), tmp_path / "marked.png", "sat: time to first token", saturation=s)
    assert (tmp_path / "marked.png").read_bytes() != (tmp_path / "plain.png").read_bytes()
    assert (tmp_path / "marked.png").read_bytes() == (tmp_path / "over" / "ttft.png").read_bytes()
    # plot redraws the same marked figure from the folder
    (tmp_path / "over" / "ttft.png").unlink()
    assert invoke("plot", tmp_path / "over").exit_code == 0
    assert (tmp_path / "over" / "ttft.png").read_bytes() == (tmp_path / "marked.png").read_bytes()


def test_a_saturated_timed_row_never_meets_a_ttft_target():
    t = pd.DataFrame(
        {
            SIZE: [10, 20],
            "hit_rate.total": [0.1, 0.2],
            "cache.write_policy": ["write_through"] * 2,
            "cache.host_eviction": ["evicted_only"] * 2,
            TTFT: [1.0, 2.0],
            VERDICT: ["saturated", "within capacity"],
        }
    )
    assert smallest_meeting(t, Target("ttft_p99", 5.0), 5.0)[SIZE] == 20
    assert smallest_meeting(t.iloc[:1], Target("ttft_p99", 5.0), 5.0) is None


def test_advise_refuses_to_size_from_a_saturated_run(tmp_path: Path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**scenario(ABOVE), "mode": "instant"}), encoding="utf-8")
    args = ("--host-sizes-gb", "20,40", "--workers", 2, "--target-ttft-p99", 5)
    r = invoke("advise", path, *args, "--out", tmp_path / "a")
    assert r.exit_code == 0, r.output
    d = json.loads((tmp_path / "a" / "advice.json").read_text(encoding="utf-8"))
    assert d["target"]["met"] is False and d["refused"] and d["saturation"]["verdict"] == "saturated"
    assert "no host size is advised" in r.output and "best reachable" not in r.output
    assert "2 instances fit this load" in r.output and "(the queue's, not the cache's)" in r.output
    # below capacity the same target is met and nothing is refused
    path.write_text(yaml.safe_dump({**scenario(BELOW / 2), "mode": "instant"}), encoding="utf-8")
    r = invoke("advise", path, *args, "--out", tmp_path / "b")
    assert r.exit_code == 0, r.output
    d = json.loads((tmp_path / "b" / "advice.json").read_text(encoding="utf-8"))
    assert d["target"]["met"] is True and d["refused"] is None and d["saturation"]["verdict"] == "within capacity"
    assert "saturated" not in r.output


@pytest.mark.slow  # several seconds (issue 30: slow tests marked; CI still runs them)
def test_the_readme_run_prints_what_the_readme_quotes(tmp_path):
    """The README's from-sglang flow (the Mooncake conversation trace at its own rate on one H200): the
    summary line and the saturation warning the README quotes are what ``run`` prints."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    quoted = readme.split("$ hicache-sim run s.yaml\n", 1)[1].split("\n```", 1)[0].splitlines()
    sc = tmp_path / "s.yaml"
    launch = ["python", "-m", "sglang.launch_server", "--model-path", "meta-llama/Llama-3.1-8B-Instruct"]
    r = invoke("from-sglang", "--out", sc, "--", *launch, "--page-size", 64, "--enable-hicache")
    assert r.exit_code == 0, r.output
    r = invoke("run", sc, "--out", tmp_path / "out", "--no-figures")
    assert r.exit_code == 0, r.output
    printed = r.output.splitlines()
    assert len(quoted) == 2 and all(line in printed for line in quoted), (quoted, printed)


@pytest.mark.parametrize(("hardware", "lanes"), [({"tp": 2, "attn_dp": 2}, 1), ({"dp": 2}, 2)])
def test_capacity_under_data_parallel_is_what_a_saturated_run_serves(hardware, lanes):
    """Replicas (--dp-size) each serve on GPUs of their own; attention-DP groups share every step's GPUs
    (sim/lockstep.py: one MLP over all groups' rows), so their capacity is not the groups' count times a
    group's: the compute model's capacity is what the saturated run serves either way."""
    data = scenario(FAR_ABOVE) | {"hardware": {"gpu": "h200", **hardware}}
    s = simulate(build_scenario(data, "test", [])).summary["saturation"]
    assert s["capacity"]["requests_per_s"] == pytest.approx(s["served"]["requests_per_s"], rel=0.05)
    demand = sat.demand_model(resolve(build_scenario(data, "test", [])), 4096 + 128)
    assert demand.groups == 3 - lanes  # the lockstep's groups share a step; the replicas do not


@pytest.mark.parametrize(("groups", "output", "rel"), [(2, 128, 0.15), (4, 128, 0.15), (2, 512, 0.05)])
def test_capacity_of_attention_dp_groups_with_varied_prompts_is_what_a_saturated_run_serves(
    tmp_path, groups, output, rel
):
    """Prompts of 512 and 16,384 tokens alternating, round robin over the attention-DP groups: one group
    gets every long prompt. Each lockstep step lasts as long as its slowest group, so the long prompts'
    group sets the pace (its prefill chunks, and its decode batches, of which its pool holds fewer) while
    the others idle. A balanced step of copies of each request read 1.35x (2 groups) and 1.37x (4) what
    the saturated run serves with 128-token answers; each group's own batches in lockstep read 1.00x and
    1.05x. With 512-token answers decode weighs more: a decode batch from the window's mean length in
    every group read 1.10x, a pool that held any number of requests 1.19x; each group's own pool 1.00x
    (held to the equal-prompt test's 5 %)."""
    trace, rows, block = tmp_path / "t.jsonl", [], 0
    for i in range(200):
        length = (512, 16384)[i % 2]
        rows.append({"timestamp": 10 * i, "input_length": length, "output_length": output,
                     "hash_ids": list(range(block, block + length // 512))})  # fmt: skip
        block += length // 512  # nothing shared: every prompt is prefilled whole
    trace.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    data = scenario(FAR_ABOVE) | {
        "hardware": {"gpu": "h200", "tp": groups, "attn_dp": groups},
        "workload": {"kind": "trace", "trace": {"path": str(trace)}},
    }
    s = simulate(build_scenario(data, "test", [])).summary["saturation"]
    assert s["verdict"] == "saturated"
    assert s["capacity"]["requests_per_s"] == pytest.approx(s["served"]["requests_per_s"], rel=rel)
    assert s["capacity"]["prompt_tokens_per_s"] == pytest.approx(s["served"]["prompt_tokens_per_s"], rel=rel)
