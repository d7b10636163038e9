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


def test_ideal_hit_rate_of_the_vendored_conversation_trace():
    reqs = load_mooncake(vendored_trace("mooncake/conversation_trace.jsonl"), 512)
    seen: set[int] = set()
    hit = total = 0
    for r in reqs:
        for i, h in enumerate(r.page_keys):
            tokens = r.page_tokens(512, i + 1) - r.page_tokens(512, i)
            total += tokens
            hit += tokens if h in seen else 0
        seen.update(r.page_keys)
    s, _ = trace_stats(reqs, 512)
    assert s["requests"] == 12031
    assert s["prompt_tokens"]["total"] == total
    assert s["ideal_hit_rate"] == round(hit / total, 4)
    assert s["blocks"]["distinct"] == len(seen)


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
    r = invoke("trace", "stats", "builtin:mooncake/conversation_trace.jsonl", "--out", out)
    assert r.exit_code == 0, r.output  # its own folder is replaced


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
    assert s["ideal_hit_rate"] == round(800 / 1341, 4)  # the round trip's shared prefixes
    assert s["requests"] == 6 and s["duration_s"] == 41.5


def test_stats_refuses_a_user_folder(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.md").write_text("keep")
    r = invoke("trace", "stats", "builtin:mooncake/conversation_trace.jsonl", "--out", tmp_path / "mine")
    assert_user_error(r, "--out", "mine", "did not write")
    assert (tmp_path / "mine" / "notes.md").read_text() == "keep"
