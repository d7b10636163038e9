"""SGLang bench_serving as a workload: lengths drawn as bench_serving draws them, its warm-up, its
concurrency semaphore, and its result block computed as it computes it."""

from __future__ import annotations

import numpy as np
import pytest

from hicache_sim.runner import simulate
from hicache_sim.scenario import Scenario
from hicache_sim.workloads.kinds.bench_serving import BenchServingSpec
from hicache_sim.workloads.synthetic import bench_serving, bench_serving_lengths


def _scenario(mode: str = "timed", **bs) -> Scenario:
    return Scenario.model_validate(
        {
            "name": "bs",
            "seed": 1,
            "mode": mode,
            "model": "llama-3.1-8b",
            "hardware": {"gpu": "h100"},
            "cache": {"page_size": 1, "host_tokens": 0},
            "workload": {"kind": "bench_serving", "bench_serving": bs},
        }
    )


@pytest.mark.parametrize(
    ("input_len", "output_len", "total_in", "total_out"),
    [(1000, 1000, 6101, 4220), (8000, 1000, 41941, 4220)],
)
def test_lengths_are_the_ones_bench_serving_printed(input_len, output_len, total_in, total_out):
    """SGLang's cookbook runs `--dataset-name random --random-input-len L --num-prompts 10` with the
    default seed 1 and range ratio 0 and prints these totals ("Total input tokens: 6101" / 41941,
    "Total generated tokens: 4220"): the lengths are bench_serving's draws, in its order."""
    spec = BenchServingSpec(random_input_len=input_len, random_output_len=output_len, num_prompts=10, seed=1)
    inp, out, send = bench_serving_lengths(spec, 1)
    assert (int(inp.sum()), int(out.sum())) == (total_in, total_out)
    assert inp.tolist()[:3] == ([38, 236, 909] if input_len == 1000 else [5158, 236, 3981])
    assert send.tolist() == [0.0] * 10  # infinite rate: everything at once


def test_answers_drawn_from_zero_as_sglang_056_drew_them():
    """The cookbook's Qwen3-235B run (SGLang 0.5.6) printed "Total generated tokens: 4210" for the same
    command that printed 4220 under later versions: answers from [int(r L), L]."""
    spec = BenchServingSpec(random_input_len=1000, random_output_len=1000, num_prompts=10, answer_floor=0)
    inp, out, _ = bench_serving_lengths(spec, 1)
    assert (int(inp.sum()), int(out.sum())) == (6101, 4210)


def test_gaps_continue_numpys_stream_after_the_lengths():
    spec = BenchServingSpec(random_input_len=100, random_output_len=10, num_prompts=4, request_rate=2.0)
    _, _, send = bench_serving_lengths(spec, 7)
    rs = np.random.RandomState(7)
    rs.randint(1, 101, size=4), rs.randint(1, 11, size=4)
    gaps = [rs.exponential(0.5) for _ in range(3)]
    assert send.tolist() == pytest.approx([0.0, *np.cumsum(gaps)])


def test_warmup_copies_prompt_zero_with_a_short_answer():
    spec = BenchServingSpec(random_input_len=1000, random_output_len=1000, num_prompts=10, warmup_requests=2)
    wl = bench_serving(spec, page_size=16, seed=1)
    warm, first = wl.requests[0], wl.requests[2]
    assert [r.rid for r in wl.requests[:4]] == ["warmup0", "warmup1", "p0", "p1"]
    assert warm.page_keys == first.page_keys and warm.input_tokens == first.input_tokens == 38
    assert warm.output_tokens == 32 and first.output_tokens == 145  # min(answer, 32)
    assert not set(wl.requests[3].page_keys) & set(first.page_keys)  # independent prompts
    assert wl.warmup_requests == 2


def _rows(out):
    return out.requests.set_index("rid")


def test_concurrency_one_sends_each_request_when_the_previous_finished():
    out = simulate(_scenario(random_input_len=500, random_output_len=20, num_prompts=5, max_concurrency=1))
    df = _rows(out)
    # the run starts 1 s after the warm-up finished (bench_serving's time.sleep(1.0))
    assert df.loc["p0", "arrival_s"] == pytest.approx(df.loc["warmup0", "finish_s"] + 1.0)
    for a, b in zip(["p0", "p1", "p2", "p3"], ["p1", "p2", "p3", "p4"], strict=True):
        assert df.loc[b, "arrival_s"] == pytest.approx(df.loc[a, "finish_s"])
    # the warm-up left prompt 0 cached: p0 hits all but the token SGLang always recomputes
    assert df.loc["p0", "device_hit_tokens"] == df.loc["p0", "input_tokens"] - 1
    assert df.loc["p1", "device_hit_tokens"] == 0


def test_a_cap_of_two_keeps_at_most_two_in_flight_in_their_order():
    out = simulate(_scenario(random_input_len=500, random_output_len=50, num_prompts=8, max_concurrency=2))
    df = _rows(out).drop(index="warmup0")
    sends, ends = df["arrival_s"].to_numpy(), df["finish_s"].to_numpy()
    assert list(df.index) == [f"p{i}" for i in range(8)]
    assert np.all(np.diff(sends) >= 0)  # the semaphore serves waiters in order
    for t in sends:
        assert int(((sends <= t + 1e-12) & (ends > t + 1e-12)).sum()) <= 2
    # a slot freed is taken at once: every send after the first two is some request's finish
    assert all(np.isclose(ends, t).any() for t in sends[2:])


def test_no_cap_and_an_infinite_rate_send_everything_at_once():
    out = simulate(_scenario(random_input_len=200, random_output_len=8, num_prompts=6))
    df = _rows(out).drop(index="warmup0")
    assert df["arrival_s"].nunique() == 1


def test_serving_block_is_computed_as_bench_serving_computes_it():
    out = simulate(_scenario(random_input_len=800, random_output_len=40, num_prompts=7, max_concurrency=3))
    s = out.summary
    df = _rows(out).drop(index="warmup0")
    block = s["serving"]
    assert s["window"]["first_request"] == 1 and s["window"]["requests_measured"] == 7
    assert block["completed"] == 7 and block["total_input_tokens"] == int(df["input_tokens"].sum())
    ttft = df["ttft_s"].to_numpy() * 1000
    assert block["ttft_ms"]["median"] == pytest.approx(float(np.median(ttft)))
    assert block["ttft_ms"]["p99"] == pytest.approx(float(np.percentile(ttft, 99)))
    long = df[df["output_tokens"] > 1]
    tpot = (long["e2e_s"] - long["ttft_s"]) / (long["output_tokens"] - 1) * 1000
    assert block["tpot_ms"]["mean"] == pytest.approx(float(tpot.mean()))
    duration = df["finish_s"].max() - df["arrival_s"].min()
    assert block["duration_s"] == pytest.approx(duration)
    assert block["concurrency"] == pytest.approx(df["e2e_s"].sum() / duration)
    assert block["concurrency"] <= 3 + 1e-9


def test_instant_mode_replays_the_warmup_first_and_measures_after_it():
    out = simulate(_scenario("instant", random_input_len=300, random_output_len=8, num_prompts=4))
    assert out.requests["rid"].tolist()[0] == "warmup0"
    assert out.summary["window"]["first_request"] == 1 and "serving" not in out.summary


def test_an_earlier_run_on_the_same_server_leaves_its_prompts_cached():
    """The cookbook runs `--random-input-len 1000 --random-output-len 8000` after the 1000/1000 runs on
    the same server: same seed, same prompts, so every prompt is a cache hit (all but its last token)."""
    earlier = [{"random_input_len": 1000, "num_prompts": 10}]
    out = simulate(_scenario(random_input_len=1000, random_output_len=4, num_prompts=10, earlier_runs=earlier))
    df = _rows(out)
    measured = df[df.index.str.startswith("p")]
    assert (measured["device_hit_tokens"] == measured["input_tokens"] - 1).all()
    assert out.summary["window"]["first_request"] == 11  # 10 earlier prompts + the warm-up
    # a longer earlier prompt i covers this run's prompt i; a shorter one only its own length
    longer = simulate(
        _scenario(random_input_len=8000, random_output_len=4, num_prompts=10, earlier_runs=earlier, max_concurrency=1)
    )
    d8 = _rows(longer)
    assert d8.loc["p1", "device_hit_tokens"] == 235  # 236 tokens in both runs
    assert d8.loc["p2", "device_hit_tokens"] == 909  # 909 of 3,981 cached by the earlier run


def test_earlier_runs_go_one_after_another_then_the_warmup():
    earlier = [
        {"random_input_len": 400, "random_output_len": 30, "num_prompts": 4, "max_concurrency": 1},
        {"random_input_len": 800, "random_output_len": 30, "num_prompts": 3},
    ]
    out = simulate(_scenario(random_input_len=600, random_output_len=8, num_prompts=3, earlier_runs=earlier))
    df = _rows(out)
    run0 = df[df.index.str.startswith("run0")]
    run1 = df[df.index.str.startswith("run1")]
    # run 0 at its concurrency 1: each prompt sent when the one before finished
    assert run0["arrival_s"].iloc[1:].to_numpy() == pytest.approx(run0["finish_s"].iloc[:-1].to_numpy())
    assert (run1["arrival_s"] == run0["finish_s"].max()).all()  # run 1 all at once, after run 0
    assert df.loc["warmup0", "arrival_s"] == pytest.approx(run1["finish_s"].max())
    # run 1's prompt i extends run 0's prompt i, whose prompt and answer are cached: it hits the prompt
    assert (run1["device_hit_tokens"] > 0).all()


def test_an_earlier_runs_answers_take_pool_pages():
    """SGLang caches prompt + answer at finish: long answers of an earlier run fill the pool and push
    its prompts out, where prompts alone would all have stayed."""
    base = {"random_input_len": 1000, "num_prompts": 10, "max_concurrency": 1}
    long_answers = [{**base, "random_output_len": 4000}]
    short_answers = [{**base, "random_output_len": 1}]

    def hits(earlier):
        sc = _scenario(random_input_len=1000, random_output_len=4, num_prompts=10, earlier_runs=earlier)
        sc = sc.model_copy(update={"cache": sc.cache.model_copy(update={"device_tokens": 14_000})})
        return _rows(simulate(sc)).filter(regex="^p", axis=0)["device_hit_tokens"].sum()

    prompts = 6101 - 10  # every measured prompt but its last token, when only the prompts were kept
    assert hits(short_answers) == prompts
    assert hits(long_answers) < prompts


def test_a_finite_rate_sends_at_the_drawn_gaps_after_the_pause():
    out = simulate(_scenario(random_input_len=300, random_output_len=4, num_prompts=5, request_rate=2.0))
    df = _rows(out)
    spec = BenchServingSpec(random_input_len=300, random_output_len=4, num_prompts=5, request_rate=2.0)
    _, _, send = bench_serving_lengths(spec, 1)
    start = df.loc["warmup0", "finish_s"] + 1.0
    sent = df.filter(regex="^p", axis=0)["arrival_s"].to_numpy()
    assert sent == pytest.approx(start + send)


def test_no_warmup_means_no_pause():
    out = simulate(_scenario(random_input_len=300, random_output_len=4, num_prompts=3, warmup_requests=0))
    df = _rows(out)
    assert list(df.index) == ["p0", "p1", "p2"] and (df["arrival_s"] == 0.0).all()
    assert out.summary["window"]["first_request"] == 0


def test_a_rejected_request_frees_its_slot():
    sc = _scenario(random_input_len=3000, random_output_len=4, num_prompts=6, max_concurrency=1, warmup_requests=0)
    sc = sc.model_copy(update={"cache": sc.cache.model_copy(update={"device_tokens": 2500})})
    df = _rows(simulate(sc))
    assert (df["status"] == "rejected").any() and (df["status"] == "finished").any()
    assert len(df) == 6  # every request was sent: a rejection does not hold the semaphore


def test_the_serving_block_counts_every_request_of_the_run_whatever_the_warmup_share():
    sc = _scenario(random_input_len=300, random_output_len=8, num_prompts=6)
    sc = sc.model_copy(update={"metrics": sc.metrics.model_copy(update={"warmup_fraction": 0.5})})
    s = simulate(sc).summary
    assert s["window"]["first_request"] == 3  # the hit-rate window takes the share
    assert s["serving"]["completed"] == 6  # bench_serving's block does not
