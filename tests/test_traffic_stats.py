"""``trace stats``: reuse distances and the LRU curve against brute force, the ideal hit rate against a
plain set walk of the vendored Mooncake trace, and the verb's files."""

from __future__ import annotations

import json
import random
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_user_error, invoke

from hicache_sim.traffic.stats import lru_curve, rate_over_time, reuse_distances, trace_stats
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
