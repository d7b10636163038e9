"""bench_serving's mooncake dataset (``workload.bench_serving.dataset_name: mooncake``): the requests,
prompt lengths, shared prefixes and send times SGLang 0.5.23's ``bench_serving --dataset-name mooncake``
produces from a trace (``sglang/benchmark/datasets/mooncake.py``), on a three-line trace whose every
figure is derived by hand below, and on the shipped conversation trace.

Token counts by hand (the built-in word-level count: a word with its leading space, up to 3 digits, a
punctuation mark, a space before digits, and each ChatML marker are one token each):
- a hash id below 1000 followed by ``hi`` x 128: 1 + 128 = 129 tokens;
- ``<|im_start|>user\\n`` and ``<|im_start|>assistant\\n``: 3 each; ``<|im_end|>\\n``: 2;
- ``Round 1: ``: Round, space, 1, colon, space = 5;
- the suffix glues its first word to the last ``hi`` (`` hiTell``: one piece, still one token), then
  `` me a story based on this context`` and ``.``: 8 more;
- so round 1 of n ids is 3 + 5 + 129 n + 8 + 2 + 3 = 21 + 129 n tokens, and round 2 resends round 1's
  user turn (18 + 129 n), an assistant turn of 3 + out + 2 (``story`` x out), its own user turn
  (18 + 129 n) and the generation prompt (3): 2 (18 + 129 n) + out + 8.
- the warm-up: n (1 + 512) tokens, ``Can`` glued to the last ``hi``, then `` you tell me a detailed story
  in``, a space, ``100``, ``0``, `` words``, ``?``: 12 more.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import assert_user_error, invoke

from hicache_sim.scenario import build_scenario
from hicache_sim.workloads.build import build_workload

# File order: line 1 is the latest but the warm-up's record; lines 2 and 3 share a timestamp.
TRACE = [
    {"timestamp": 2000, "input_length": 900, "output_length": 3, "hash_ids": [5, 6]},
    {"timestamp": 1000, "input_length": 1000, "output_length": 2, "hash_ids": [5, 7]},
    {"timestamp": 1000, "input_length": 400, "output_length": 4, "hash_ids": [8]},
]


def trace_file(folder: Path, rows=TRACE) -> Path:
    path = folder / "trace.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def scenario(path: Path | None = None, page_size: int = 1, mode: str = "instant", **fields) -> dict:
    spec = {"dataset_name": "mooncake", **fields}
    if path is not None:
        spec["dataset_path"] = str(path)
    return {
        "name": "mc",
        "mode": mode,
        "model": "llama-3.1-8b",
        "hardware": {"gpu": "h100", "tp": 1},
        "cache": {"page_size": page_size},
        "workload": {"kind": "bench_serving", "bench_serving": spec},
        "metrics": {"warmup_fraction": 0.0},
    }


def workload(data: dict):
    sc = build_scenario(data, "t", [])
    return build_workload(sc, sc.cache.page_size, None)


def by_rid(wl) -> dict:
    return {q.rid: q for q in wl.requests}


def test_prompt_text_is_built_from_the_hash_ids_as_bench_serving_builds_it():
    from hicache_sim.workloads.mooncake_serving import user_text, word_tokenizer

    assert user_text((7, 1234), 3, "S.") == "7hi hi hi1234hi hi hiS."
    encode = word_tokenizer()
    assert len(encode("Round 1: 7hi hi")) == 8  # Round, space, 1, colon, space, 7, hi, " hi"
    assert len(encode("1234")) == 2  # 123, 4
    assert len(encode("<|im_start|>user\n")) == 3


def test_requests_lengths_and_send_times(tmp_path):
    wl = workload(scenario(trace_file(tmp_path), mooncake_num_rounds=2, mooncake_slowdown_factor=2.0))
    reqs = by_rid(wl)
    # warm-up: the file's first record (not the earliest), then each record's 2 rounds in time order
    assert [q.rid for q in wl.requests] == ["warmup0", "s0r1", "s0r2", "s1r1", "s1r2", "s2r1", "s2r2"]
    assert wl.serving.warmup == 1 and wl.serving.max_concurrency is None
    warm = reqs["warmup0"]
    assert (warm.input_tokens, warm.output_tokens) == (2 * 513 + 12, 3)
    # sorted by timestamp (stable: line 2 before line 3), (t - t0) / 1000 x slowdown
    assert [reqs[f"s{k}r1"].arrival_s for k in range(3)] == [0.0, 0.0, 2.0]
    assert [reqs[f"s{k}r2"].arrival_s for k in range(3)] == [0.0, 0.0, 2.0]
    ids = {0: 2, 1: 1, 2: 2}  # hash ids per session: lines 2, 3, 1
    out = {0: 2, 1: 4, 2: 3}
    for k in range(3):
        n = ids[k]
        assert reqs[f"s{k}r1"].input_tokens == 21 + 129 * n
        assert reqs[f"s{k}r2"].input_tokens == 2 * (18 + 129 * n) + out[k] + 8
        assert reqs[f"s{k}r1"].output_tokens == reqs[f"s{k}r2"].output_tokens == out[k]
        assert reqs[f"s{k}r1"].session == reqs[f"s{k}r2"].session == f"s{k}"


def test_shared_prefixes_follow_the_hash_ids(tmp_path):
    reqs = by_rid(workload(scenario(trace_file(tmp_path), page_size=16, mooncake_num_rounds=2)))
    a, b = reqs["s0r1"].page_keys, reqs["s2r1"].page_keys  # hash ids [5, 7] and [5, 6]
    # they share header, "Round 1: " and id 5's block: 3 + 5 + 129 = 137 tokens, 8 whole pages of 16
    assert a[:8] == b[:8] and a[8] != b[8]
    c = reqs["s1r1"].page_keys  # [8]: the first 8 tokens only, no whole page
    assert c[0] != a[0]
    # round 2 starts with round 1's prompt: every whole page of it (279 tokens: 17 pages)
    assert reqs["s0r2"].page_keys[:17] == a[:17]
    assert reqs["s0r2"].page_keys[17] != a[17]  # a's 18th page is partial, round 2's is whole
    # what the request leaves cached: its prompt's whole pages, then its answer's (none here: 2 tokens)
    fin = reqs["s0r1"].finish_keys
    assert fin == a[:17] and len(fin) == (279 + 2 - 1) // 16


def test_num_prompts_takes_the_first_lines_of_the_file(tmp_path):
    wl = workload(scenario(trace_file(tmp_path), num_prompts=2, warmup_requests=0))
    reqs = by_rid(wl)
    assert list(reqs) == ["s0r1", "s1r1"]
    assert [q.arrival_s for q in wl.requests] == [0.0, 1.0]  # lines 2 then 1
    assert [q.input_tokens for q in wl.requests] == [21 + 129 * 2] * 2


def test_default_trace_is_the_shipped_conversation_trace():
    wl = workload(scenario(num_prompts=3))
    first = by_rid(wl)["s0r1"]
    # the file's first line: hash ids 0..13 (each below 1000), output 500, at 0 ms
    assert (first.input_tokens, first.output_tokens, first.arrival_s) == (21 + 129 * 14, 500, 0.0)
    assert by_rid(wl)["warmup0"].input_tokens == 14 * 513 + 12


def test_same_scenario_same_requests(tmp_path):
    data = scenario(trace_file(tmp_path), page_size=4, mooncake_num_rounds=3)
    assert workload(data).requests == workload(data).requests


@pytest.mark.parametrize("mode", ["instant", "timed"])
def test_runs_in_both_modes_with_every_invariant_checked(tmp_path, mode):
    path = tmp_path / "mc.yaml"
    data = scenario(trace_file(tmp_path), page_size=16, mode=mode, mooncake_num_rounds=2, max_concurrency=2)
    path.write_text(json.dumps(data), encoding="utf-8")
    res = invoke("run", path, "--out", tmp_path / "out", "--no-figures", "--check-invariants")
    assert res.exit_code == 0, res.output
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert s["requests_finished"] == 7
    # instant: round 2 follows round 1; timed: s2r1 ([5, 6]) is sent 1 s after s0r1 ([5, 7]) finished
    assert s["hit_rate"]["total"] > 0


def test_timed_sends_at_the_trace_times_after_the_warm_up(tmp_path):
    import pyarrow.parquet as pq

    path = tmp_path / "mc.yaml"
    path.write_text(
        json.dumps(scenario(trace_file(tmp_path), mode="timed", page_size=16, mooncake_slowdown_factor=3.0)),
        encoding="utf-8",
    )
    res = invoke("run", path, "--out", tmp_path / "out", "--no-figures")
    assert res.exit_code == 0, res.output
    rows = pq.read_table(tmp_path / "out" / "requests.parquet").to_pydict()
    at = dict(zip(rows["rid"], rows["arrival_s"], strict=True))
    done = dict(zip(rows["rid"], rows["finish_s"], strict=True))
    # the run starts 1 s after the warm-up finished; line 1 is sent (2000 - 1000) / 1000 x 3 s later
    assert at["s0r1"] == pytest.approx(done["warmup0"] + 1.0)
    assert at["s1r1"] == at["s0r1"]
    assert at["s2r1"] - at["s0r1"] == pytest.approx(3.0)


def test_not_shipped_trace_needs_a_dataset_path(tmp_path):
    path = tmp_path / "mc.yaml"
    path.write_text(json.dumps(scenario(mooncake_workload="toolagent")), encoding="utf-8")
    res = invoke("run", path, "--out", tmp_path / "out")
    assert_user_error(res, "mooncake_workload toolagent", "dataset_path")
    assert not (tmp_path / "out").exists()


def test_a_local_tokenizer_counts_the_tokens(tmp_path):
    """A tokenizer.json given as ``tokenizer`` counts the same text: a word-level one splitting at spaces
    and punctuation (``\\w+|[^\\w\\s]+``). By hand for ids [5, 6]: ``<|``, ``im_start``, ``|>``, ``user``
    (4); ``Round``, ``1``, ``:`` (3); the 2 x 128 ``hi`` with digits and the suffix's first word glued to
    them, the two blocks sharing one word at their seam (255); ``me a story based on this context .``
    (8); ``<|``, ``im_end``, ``|>`` (3); the generation prompt (4): 277."""
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({"[UNK]": 0, "hi": 1}, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    data = scenario(trace_file(tmp_path), tokenizer=str(tmp_path / "tokenizer.json"), warmup_requests=0)
    assert by_rid(workload(data))["s2r1"].input_tokens == 277


def test_answers_are_greedy_one_per_prompt(tmp_path):
    """bench_serving sends at temperature 0: equal prompts (the warm-up's copies, records with equal hash
    ids) leave equal answers cached; another prompt's answer, and the next round's placeholder, differ.
    150-token prompts ([5]: 21 + 129) with 40-token answers: 9 whole prompt pages, then pages 9 and 10
    hold the answer ((150 + 40 - 1) // 16 = 11)."""
    rows = [{"timestamp": 0, "output_length": 40, "hash_ids": [h]} for h in (5, 5, 6)]
    wl = workload(scenario(trace_file(tmp_path, rows), page_size=16, warmup_requests=2, mooncake_num_rounds=2))
    reqs = by_rid(wl)
    a, b = reqs["warmup0"], reqs["warmup1"]
    assert a.page_keys == b.page_keys and a.finish_keys == b.finish_keys
    same, twin, other = reqs["s0r1"], reqs["s1r1"], reqs["s2r1"]
    assert same.page_keys == twin.page_keys and len(same.finish_keys) == 11
    assert same.finish_keys == twin.finish_keys
    assert same.finish_keys[:9] == same.page_keys[:9]
    assert not set(same.finish_keys[9:]) & set(other.finish_keys)
    assert not set(same.finish_keys[9:]) & set(reqs["s0r2"].page_keys)
