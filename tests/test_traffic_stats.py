"""``trace stats``: reuse distances and the LRU curve against brute force, the ideal hit rate against a
plain set walk of the vendored Mooncake trace, and the verb's files."""

from __future__ import annotations

import json
import random
import tracemalloc
from array import array
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_user_error, invoke

import hicache_sim.traffic.stats as stats
from hicache_sim.traffic.stats import ReuseDistances, lru_curve, rate_over_time, reuse_distances, trace_stats
from hicache_sim.workloads.lazy import LazyRequests
from hicache_sim.workloads.records import Request
from hicache_sim.workloads.traces import load_mooncake, vendored_trace

DATA = Path(__file__).parent / "data"


def brute_distances(ids: list[int]) -> list[int]:
    out = []
    for t, h in enumerate(ids):
        prev = max((p for p in range(t) if ids[p] == h), default=None)
        out.append(-1 if prev is None else len(set(ids[prev + 1 : t]) - {h}))
    return out


def lru_hits(ids: list[int], weights: list[int], capacity: int) -> int:
    cache: OrderedDict[int, None] = OrderedDict()
    hit = 0
    for h, w in zip(ids, weights):
        if h in cache:
            hit += w
            cache.move_to_end(h)
        else:
            cache[h] = None
            if len(cache) > capacity:
                cache.popitem(last=False)
    return hit


@pytest.mark.parametrize("seed", range(5))
def test_reuse_distances_and_lru_curve_match_brute_force(seed):
    rng = random.Random(seed)
    ids = [rng.randrange(12) for _ in range(200)]
    weights = [rng.randrange(1, 9) for _ in ids]
    d = reuse_distances(np.asarray(ids))
    assert d.tolist() == brute_distances(ids)
    caps, rates = lru_curve(d, np.asarray(weights), sum(weights))
    for c in range(1, 14):
        k = np.searchsorted(caps, c, side="right") - 1
        rate = rates[k] if k >= 0 else 0.0
        assert rate == pytest.approx(lru_hits(ids, weights, c) / sum(weights))


def set_walk(reqs: list[Request], block: int) -> tuple[int, int]:
    """(hit tokens, prompt tokens): a block hits when an earlier prompt held its id."""
    seen: set[int] = set()
    hit = total = 0
    for r in reqs:
        for i, h in enumerate(r.page_keys):
            tokens = r.page_tokens(block, i + 1) - r.page_tokens(block, i)
            total += tokens
            hit += tokens if h in seen else 0
        seen.update(r.page_keys)
    return hit, total


@pytest.mark.parametrize("seed", range(5))
def test_ideal_hit_rate_matches_a_set_walk_on_random_prompts(seed):
    """Prompts drawn from a few chained prefixes, repeats back to back included."""
    rng = random.Random(seed)
    reqs = []
    for i in range(60):
        n = rng.randrange(1, 6)
        keys = tuple(rng.randrange(2) * 10 + j for j in range(n))
        reqs.append(Request(f"r{i}", float(i), 16 * (n - 1) + rng.randrange(1, 17), 1, keys))
    s, _ = trace_stats(reqs, 16)
    assert (s["ideal_hit_tokens"], s["prompt_tokens"]["total"]) == set_walk(reqs, 16)


def test_ideal_hit_rate_of_the_vendored_conversation_trace():
    reqs = load_mooncake(vendored_trace("mooncake/conversation_trace.jsonl"), 512)
    hit, total = set_walk(reqs, 512)
    s, _ = trace_stats(reqs, 512)
    assert s["requests"] == 12031
    assert s["prompt_tokens"]["total"] == total
    assert s["ideal_hit_tokens"] == hit and s["ideal_hit_rate"] == round(hit / total, 4)
    assert s["blocks"]["distinct"] == len({h for r in reqs for h in r.page_keys})
    # the README's figures
    assert s["ideal_hit_rate"] == 0.3736 and round(s["duration_s"]) == 3537
    assert round(s["lru_tokens_for_share_of_ideal"]["50%"] / 1e6, 1) == 4.3


def test_a_cache_that_never_evicts_reaches_the_ideal_less_the_reserved_last_token(tmp_path):
    """The simulator with room for every page, on the first 2,000 requests of the conversation trace:
    it hits each prompt's longest seen prefix except the page holding the last token (SGLang never
    matches it), and nothing else, so it sits just below the ideal hit rate by exactly that page."""
    reqs = load_mooncake(vendored_trace("mooncake/conversation_trace.jsonl"), 512, limit=2000)
    s, _ = trace_stats(reqs, 512)
    seen: set[int] = set()
    reserved = 0
    for r in reqs:
        k = next((i for i, h in enumerate(r.page_keys) if h not in seen), len(r.page_keys))
        reserved += r.page_tokens(512, min(k, r.match_limit(512, True)))
        seen.update(r.page_keys)
    pages = 400_000
    scenario = {
        "name": "never-evicts",
        "mode": "instant",
        "model": "llama-3.1-8b",
        "cache": {"page_size": 512, "device_tokens": 512 * pages, "host_ratio": 0.5, "host_alignment": "exact"},
        "scheduler": {"chunked_prefill_size": None},
        "workload": {"kind": "trace", "trace": {"path": "builtin:mooncake/conversation_trace.jsonl", "limit": 2000}},
    }
    (tmp_path / "s.yaml").write_text(json.dumps(scenario))
    r = invoke("run", tmp_path / "s.yaml", "--out", tmp_path / "run", "--no-figures")
    assert r.exit_code == 0, r.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["hit_rate"]["total"] * s["prompt_tokens"]["total"] == pytest.approx(reserved, abs=1e-3)
    assert reserved < s["ideal_hit_tokens"]
    # the README's figures
    assert (round(summary["hit_rate"]["total"], 4), s["ideal_hit_rate"]) == (0.2939, 0.2941)


def test_rate_bins_count_every_request():
    arrivals = np.asarray([0.0, 0.5, 1.0, 7.5, 10.0])
    width, rate = rate_over_time(arrivals, bins=10)
    assert width == 1.0 and len(rate) == 10
    assert rate.sum() * width == len(arrivals) and rate[-1] == 1.0  # the last arrival is in the last bin


def test_stats_of_the_vendored_trace_writes_json_and_figure(tmp_path):
    out = tmp_path / "st"
    r = invoke("trace", "stats", "builtin:mooncake/conversation_trace.jsonl", "--out", out)
    assert r.exit_code == 0, r.output
    s = json.loads((out / "stats.json").read_text())
    assert s["requests"] == 12031 and 0 < s["ideal_hit_rate"] < 1
    assert (out / "trace_stats.png").stat().st_size > 10_000
    assert "ideal (infinite-cache) hit rate" in r.output


def test_stats_of_a_converted_chat_log(tmp_path):
    trace = tmp_path / "chat.jsonl"
    r = invoke(
        "trace",
        "convert",
        DATA / "traffic" / "chat_multiturn.jsonl",
        "--out",
        trace,
        "--tokenizer",
        DATA / "tiny-bpe",
        "--block-size",
        16,
    )
    assert r.exit_code == 0, r.output
    r = invoke("trace", "stats", trace, "--block-size", 16, "--out", tmp_path / "st")
    assert r.exit_code == 0, r.output
    s = json.loads((tmp_path / "st" / "stats.json").read_text())
    assert s["ideal_hit_tokens"] == 800 and s["prompt_tokens"]["total"] == 1341  # the round trip's prefixes
    assert s["requests"] == 6 and s["duration_s"] == 41.5
    r = invoke("trace", "stats", trace, "--block-size", 16, "--out", tmp_path / "st")
    assert r.exit_code == 0, r.output  # its own folder is replaced


def test_stats_of_a_bailian_trace_uses_its_16_token_blocks(tmp_path):
    rows = [
        {"chat_id": 1, "parent_chat_id": -1, "timestamp": 0.5, "input_length": 40, "output_length": 8,
         "turn": 1, "hash_ids": [10, 11, 12]},
        {"chat_id": 2, "parent_chat_id": 1, "timestamp": 2.0, "input_length": 70, "output_length": 8,
         "turn": 2, "hash_ids": [10, 11, 13, 14, 15]},
    ]  # fmt: skip
    (tmp_path / "b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = invoke("trace", "stats", tmp_path / "b.jsonl", "--format", "bailian", "--out", tmp_path / "st")
    assert r.exit_code == 0, r.output
    s = json.loads((tmp_path / "st" / "stats.json").read_text())
    # turn 2 reuses blocks 10 and 11 (16 tokens each); turn 1's last block held 8 tokens, a different block
    assert s["block_size"] == 16 and s["ideal_hit_tokens"] == 32 and s["prompt_tokens"]["total"] == 110


def test_stats_refuses_a_user_folder(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.md").write_text("keep")
    r = invoke("trace", "stats", "builtin:mooncake/conversation_trace.jsonl", "--out", tmp_path / "mine")
    assert_user_error(r, "--out", "mine", "did not write")
    assert (tmp_path / "mine" / "notes.md").read_text() == "keep"


@pytest.mark.parametrize("seed", range(4))
def test_reuse_distances_fed_in_pieces_through_renumbering_match_brute_force(seed):
    """Few positions: the marks are renumbered many times on the way (the state stays O(distinct))."""
    rng = random.Random(seed)
    ids = [rng.randrange(30) for _ in range(600)]
    rd = ReuseDistances(min_positions=8)
    got, i = [], 0
    while i < len(ids):
        k = rng.randrange(1, 40)
        got += rd.feed(ids[i : i + k])
        i += k
    assert got == brute_distances(ids)
    assert len(rd.tree) - 1 <= 3 * 30 + 8  # never sized by the references


def numpy_dist(values: np.ndarray) -> dict:
    """The summary of one distribution straight from every value (what trace stats printed when it held them)."""
    return {
        "mean": round(float(values.mean()), 1),
        **{f"p{round(q * 100)}": int(np.quantile(values, q, method="lower")) for q in (0.5, 0.9, 0.99)},
        "max": int(values.max()),
    }


def test_streamed_summaries_equal_numpy_on_every_value():
    reqs = load_mooncake(vendored_trace("mooncake/conversation_trace.jsonl"), 512, limit=3000)
    s, arrays = trace_stats(reqs, 512)
    ids = np.asarray([h for r in reqs for h in r.page_keys])
    dist = reuse_distances(ids)
    assert s["prompt_tokens"] == {
        "total": sum(r.input_tokens for r in reqs),
        **numpy_dist(np.asarray([r.input_tokens for r in reqs])),
    }
    assert s["output_tokens"] == {
        "total": sum(r.output_tokens for r in reqs),
        **numpy_dist(np.asarray([r.output_tokens for r in reqs])),
    }
    assert s["reuse_distance_blocks"] == numpy_dist(dist[dist >= 0])
    assert s["blocks"] == {"references": len(ids), "distinct": len(np.unique(ids))}
    tokens = np.asarray(
        [r.page_tokens(512, i + 1) - r.page_tokens(512, i) for r in reqs for i in range(len(r.page_keys))]
    )
    caps, rates = lru_curve(dist, tokens, int(tokens.sum()))
    assert (
        arrays["lru_caps_tokens"].tolist() == (caps * 512).tolist() and arrays["lru_rates"].tolist() == rates.tolist()
    )


def synthetic_requests(n: int) -> LazyRequests:
    """``n`` requests of 4 blocks each drawn from 1,000 ids (above the small-int cache), built when read."""

    def make(i: int) -> Request:
        keys = tuple(1000 + (i * 7 + j * 13) % 1000 for j in range(4))
        return Request(f"r{i}", float(i), 4 * 16 - i % 7, 1 + i % 5, keys)

    return LazyRequests(n, make, array("d", map(float, range(n))))


def test_trace_stats_memory_does_not_grow_with_the_references(monkeypatch):
    """Requests read once, in order, and per-reference figures folded into counts every 1,000
    references here: 3,000 requests more (12,000 references) cost what the arrival times do (the rate
    bins: a few arrays of 8 bytes a request), not what holding the references does (an id, tokens, a
    distance and a tree slot each, about 280 bytes a request here)."""
    monkeypatch.setattr(stats, "FOLD_REFS", 1000)
    trace_stats(synthetic_requests(200), 16)  # one-time allocations (numpy's lazy imports) out of the way
    peaks = []
    for n in (1_000, 4_000):
        reqs = synthetic_requests(n)
        tracemalloc.start()
        s, _ = trace_stats(reqs, 16)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert s["requests"] == n and s["blocks"]["references"] == 4 * n
    assert peaks[1] - peaks[0] < 3_000 * 64
