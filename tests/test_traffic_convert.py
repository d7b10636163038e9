"""``trace convert``: real logs made for the tests (tests/data/traffic/) through every format, and the
round trip a user makes: convert a multi-turn chat log, simulate it, and get the hit rate its shared
prefixes imply."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import yaml
from conftest import assert_user_error, invoke

from hicache_sim.traffic.blocks import BlockIds, chain_hashes
from hicache_sim.traffic.tokenize import byte_fallback, load_tokenizer

DATA = Path(__file__).parent / "data"
LOGS = DATA / "traffic"
TOKENIZER = DATA / "tiny-bpe" / "tokenizer.json"


def convert(tmp_path: Path, log: str, *args, name: str = "trace.jsonl"):
    out = tmp_path / name
    r = invoke("trace", "convert", LOGS / log, "--out", out, *args)
    lines = [json.loads(x) for x in out.read_text().splitlines()] if out.exists() else []
    return r, lines


# ------------------------------------------------------------------ the template, by hand


def chatml_tokens(messages: list[dict]) -> list[int]:
    """The documented template, written out again here: header, content and end marker of each
    message tokenised on their own, then the generation prompt."""
    tok = load_tokenizer(TOKENIZER)
    ids: list[int] = []
    for m in messages:
        ids += tok.encode(f"<|im_start|>{m['role']}\n") + tok.encode(m["content"]) + tok.encode("<|im_end|>\n")
    return ids + tok.encode("<|im_start|>assistant\n")


def chat_log() -> list[dict]:
    return [json.loads(x) for x in (LOGS / "chat_multiturn.jsonl").read_text().splitlines()]


def test_round_trip_multiturn_chat_hit_rate_is_what_shared_prefixes_imply(tmp_path):
    """Two conversations, three turns each, one system prompt. With a cache that never evicts, turn t+1
    hits every whole block of turn t's prompt (it resends it), and conversation b's first turn hits the
    whole blocks of what it shares with a's: the system message and the user header. SGLang never
    matches the page holding the last token; here that never binds (checked)."""
    r, lines = convert(tmp_path, "chat_multiturn.jsonl", "--tokenizer", TOKENIZER, "--block-size", 16)
    assert r.exit_code == 0, r.output
    log = chat_log()
    prompts = [chatml_tokens(x["request"]["messages"]) for x in log]
    assert [ln["input_length"] for ln in lines] == [len(p) for p in prompts]
    assert [ln["output_length"] for ln in lines] == [x["response"]["usage"]["completion_tokens"] for x in log]

    conv = [x["response"]["id"][-2] for x in log]  # 'a' or 'b', in arrival order
    common = 0  # tokens conversation b's first turn shares with a's
    while prompts[0][common] == prompts[1][common]:
        common += 1
    system = log[0]["request"]["messages"][:1]
    assert common == len(chatml_tokens(system)) - len(chatml_tokens([])) + len(
        load_tokenizer(TOKENIZER).encode("<|im_start|>user\n")
    )
    expected_hit = []
    previous: dict[str, int] = {}
    for c, p in zip(conv, prompts):
        shared = previous.get(c, common if previous else 0)
        hit_pages = min(shared // 16, (len(p) - 1) // 16)
        assert hit_pages == shared // 16  # the last-token reservation never binds here
        expected_hit.append(16 * hit_pages)
        previous[c] = len(p)
    expected = sum(expected_hit) / sum(len(p) for p in prompts)
    assert expected == pytest.approx(800 / 1341)  # 0 + 96 + 128 + 128 + 224 + 224 of 1341 tokens

    scenario = {
        "name": "round-trip",
        "mode": "instant",
        "model": "llama-3.1-8b",
        "cache": {"page_size": 16, "device_tokens": 16 * 1000, "host_ratio": 2, "host_alignment": "exact"},
        "scheduler": {"chunked_prefill_size": None},
        "workload": {"kind": "trace", "trace": {"path": "trace.jsonl", "block_size": 16}},
    }
    (tmp_path / "rt.yaml").write_text(yaml.safe_dump(scenario))
    r = invoke("run", tmp_path / "rt.yaml", "--out", tmp_path / "run", "--no-figures")
    assert r.exit_code == 0, r.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["hit_rate"]["total"] == pytest.approx(expected, abs=1e-12)
    import pandas as pd

    per_request = pd.read_parquet(tmp_path / "run" / "requests.parquet")
    assert per_request["device_hit_tokens"].tolist() == expected_hit


def test_each_turn_starts_with_the_previous_turns_whole_blocks(tmp_path):
    _, lines = convert(tmp_path, "chat_multiturn.jsonl", "--tokenizer", TOKENIZER, "--block-size", 16)
    by_conv: dict[str, list[dict]] = {}
    for x, ln in zip(chat_log(), lines):
        by_conv.setdefault(x["response"]["id"][-2], []).append(ln)
    for turns in by_conv.values():
        for prev, nxt in itertools.pairwise(turns):
            whole = prev["input_length"] // 16
            assert nxt["hash_ids"][:whole] == prev["hash_ids"][:whole]
            assert nxt["hash_ids"][whole] != prev["hash_ids"][whole]  # the partial block is not the full one


def test_prompts_are_never_stored(tmp_path):
    _, lines = convert(tmp_path, "chat_multiturn.jsonl", "--tokenizer", TOKENIZER, "--block-size", 16)
    text = (tmp_path / "trace.jsonl").read_text()
    assert all(set(ln) == {"timestamp", "input_length", "output_length", "hash_ids"} for ln in lines)
    for word in ("France", "assistant", "PCIe", "im_start"):
        assert word not in text
    assert [ln["timestamp"] for ln in lines] == [0, 1500, 20000, 21500, 40000, 41500]


def test_byte_fallback_is_approximate_but_keeps_turns_sharing(tmp_path):
    r, lines = convert(tmp_path, "chat_multiturn.jsonl", "--block-size", 16)
    assert r.exit_code == 0, r.output
    assert "approximate" in r.output
    a1, a2 = lines[0], lines[2]
    whole = a1["input_length"] // 16
    assert a2["hash_ids"][:whole] == a1["hash_ids"][:whole]
    # 4 UTF-8 bytes a token: the first turn's prompt is its rendered text's length / 4, rounded up per piece
    msgs = chat_log()[0]["request"]["messages"]
    pieces = [s for m in msgs for s in (f"<|im_start|>{m['role']}\n", m["content"], "<|im_end|>\n")]
    pieces.append("<|im_start|>assistant\n")
    assert a1["input_length"] == sum(-(-len(p.encode()) // 4) for p in pieces)


def test_chain_hashes_share_exactly_the_whole_common_blocks():
    a = list(range(100))
    for k in (0, 15, 16, 17, 48, 99):
        b = a[:k] + [1000 + i for i in range(100 - k)]
        ids = BlockIds()
        ha, hb = ids.ids(chain_hashes(a, 16)), ids.ids(chain_hashes(b, 16))
        shared = next((i for i, (x, y) in enumerate(zip(ha, hb)) if x != y), len(ha))
        assert shared == k // 16
    # a later block equal in content but after a different prefix is a different block
    x, y = [1] * 16 + [5] * 16, [2] * 16 + [5] * 16
    assert chain_hashes(x, 16)[1] != chain_hashes(y, 16)[1]


def test_model_folder_without_tokenizer_json_goes_through_transformers(tmp_path):
    """A GPT-2-style folder (vocab.json, merges.txt, tokenizer_config.json) made from the test tokenizer:
    transformers reads it offline and the trace is byte for byte the tokenizer.json one."""
    pytest.importorskip("transformers")
    from tokenizers import Tokenizer

    folder = tmp_path / "model"
    folder.mkdir()
    Tokenizer.from_file(str(TOKENIZER)).model.save(str(folder))
    config = {
        "tokenizer_class": "GPT2Tokenizer",
        "add_prefix_space": False,
        "unk_token": None,
        "bos_token": None,
        "eos_token": None,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    r, _ = convert(tmp_path, "chat_multiturn.jsonl", "--tokenizer", folder, "--block-size", 16, name="a.jsonl")
    assert r.exit_code == 0, r.output
    r, _ = convert(tmp_path, "chat_multiturn.jsonl", "--tokenizer", TOKENIZER, "--block-size", 16, name="b.jsonl")
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()


def test_byte_fallback_groups_four_bytes():
    tok = byte_fallback()
    assert len(tok.encode("abcdefghi")) == 3
    assert tok.encode("abcd") == tok.encode("abcdefgh")[:1]
    assert tok.encode("ab") != tok.encode("ab\0\0")


# ------------------------------------------------------------------ the other formats


def test_completions_log_counts_and_names_every_line_it_skips(tmp_path):
    r, lines = convert(tmp_path, "completions_mixed.jsonl", "--tokenizer", TOKENIZER, "--block-size", 16)
    assert r.exit_code == 0, r.output
    assert len(lines) == 4 and "4 requests" in r.output and "3 skipped" in r.output
    for line, why in ((2, "not valid JSON"), (3, "expected 'timestamp'"), (6, "messages[0].content: only text parts")):
        assert f"completions_mixed.jsonl:{line}: {why}" in r.output
    assert "max_tokens (an upper bound)" in r.output
    assert [ln["timestamp"] for ln in lines] == [0, 3000, 4000, 6000]  # ISO times, from the first
    assert lines[1]["input_length"] == 9  # a prompt of token ids is taken as it is
    assert [ln["output_length"] for ln in lines] == [9, 5, 32, 6]


def test_strict_makes_the_first_bad_line_an_error_and_writes_nothing(tmp_path):
    r, lines = convert(tmp_path, "completions_mixed.jsonl", "--tokenizer", TOKENIZER, "--strict")
    assert_user_error(r, "completions_mixed.jsonl:2", "not valid JSON", "--strict")
    assert not lines and list(tmp_path.iterdir()) == []


def test_sglang_request_log_uses_the_servers_token_ids_and_arrival_times(tmp_path):
    r, lines = convert(tmp_path, "sglang_requests.jsonl", "--tokenizer", TOKENIZER, "--block-size", 16)
    assert r.exit_code == 0, r.output
    assert "sglang_requests.jsonl:6: obj.input_ids cut by --log-requests-level 2" in r.output
    assert "1 requests were received but never finished" in r.output
    # r1 arrives at its request.received time (0.1 s, not finish 0.9 s - e2e 0.7 s); r2 has no received
    # event: finish 2.0 s - e2e 0.5 s
    assert [ln["timestamp"] for ln in lines] == [0, 1400, 3900]
    assert [ln["input_length"] for ln in lines] == [
        37,
        len(load_tokenizer(TOKENIZER).encode("Summarise the host memory of the server in one line.")),
        57,
    ]
    assert [ln["output_length"] for ln in lines] == [12, 9, 30]
    r1, r5 = lines[0]["hash_ids"], lines[2]["hash_ids"]
    assert r5[:2] == r1[:2] and r5[2] != r1[2]  # 37 ids: two whole blocks shared with the follow-up


def test_sglang_strict_names_the_cut_line(tmp_path):
    r, _ = convert(tmp_path, "sglang_requests.jsonl", "--strict")
    assert_user_error(r, "sglang_requests.jsonl:6", "--log-requests-level 3")


def test_bench_serving_results_become_lengths_without_reuse(tmp_path):
    r, lines = convert(tmp_path, "bench_serving.jsonl", "--block-size", 16)
    assert r.exit_code == 0, r.output
    assert "request 2 of the run failed (Server disconnected)" in r.output
    assert "no prefix reuse" in r.output
    assert [(ln["input_length"], ln["output_length"]) for ln in lines] == [(100, 10), (200, 20), (80, 8), (120, 30)]
    assert [ln["timestamp"] for ln in lines] == [0, 250, 750, 1000]  # request i at i / 4 s
    ids = [h for ln in lines for h in ln["hash_ids"]]
    assert len(ids) == len(set(ids)) == sum(-(-ln["input_length"] // 16) for ln in lines)


def test_bench_serving_file_with_several_runs_needs_run(tmp_path):
    r, _ = convert(tmp_path, "bench_serving_two_runs.jsonl")
    assert_user_error(r, "bench_serving_two_runs.jsonl", "2 runs", "--run 1..2")
    r, lines = convert(tmp_path, "bench_serving_two_runs.jsonl", "--run", 2)
    assert r.exit_code == 0, r.output
    assert [ln["timestamp"] for ln in lines] == [0, 125, 375, 500]  # the second run went at 8/s


def test_bench_multiturn_summary_is_refused_with_what_to_do(tmp_path):
    r, _ = convert(tmp_path, "bench_multiturn.jsonl")
    assert_user_error(r, "bench_multiturn.jsonl", "one summary per run", "--log-requests-format json")


def test_format_can_be_forced(tmp_path):
    r, _ = convert(tmp_path, "sglang_requests.jsonl", "--format", "openai")
    assert_user_error(r, "no request could be converted", "line 1", "not an OpenAI request")


def test_every_log_reader_is_a_format_choice():
    """A reader added to traffic/logs.py is offered by ``trace convert --format`` (and only readers are)."""
    from hicache_sim.cli.trace import FORMATS
    from hicache_sim.traffic.logs import READERS

    assert set(FORMATS) - {"auto"} == set(READERS)
