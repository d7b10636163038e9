"""Workloads: trace loaders (Mooncake, Bailian, Azure), block -> page expansion, partial pages, and the
synthetic generators' prefix structure and determinism."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

import pytest

from hicache_sim.scenario import LongContextSpec, MultiturnSpec, PoissonSpec, Scenario, SharedPrefixSpec
from hicache_sim.workloads import Request, expand_blocks
from hicache_sim.workloads.build import build_workload
from hicache_sim.workloads.errors import WorkloadError
from hicache_sim.workloads.kinds import WORKLOAD_KINDS
from hicache_sim.workloads.synthetic import long_context, multiturn, poisson_synthetic, shared_prefix
from hicache_sim.workloads.traces import load_azure, load_bailian, load_mooncake, vendored_trace


def test_vendored_traces_match_their_source_notes():
    conv = load_mooncake(vendored_trace("mooncake/conversation_trace.jsonl"), 512)
    syn = load_mooncake(vendored_trace("mooncake/synthetic_trace.jsonl"), 512)
    assert len(conv) == 12031 and sum(len(r.page_keys) for r in conv) == 288500
    assert len(syn) == 3993 and sum(len(r.page_keys) for r in syn) == 121877
    assert all(a.arrival_s <= b.arrival_s for a, b in itertools.pairwise(conv))
    assert (vendored_trace("mooncake/SOURCE.md")).is_file() and (vendored_trace("azure/SOURCE.md")).is_file()
    code = load_azure(vendored_trace("azure/AzureLLMInferenceTrace_code.csv"))
    assert len(code) == 8819 and code[0][0] == 0.0
    assert 3400 < code[-1][0] < 3500  # span 3,436 s per the SOURCE note


def test_block_expands_into_pages_and_partial_tail():
    # 2 blocks of 512 tokens, 600 input tokens: tail block holds 88 tokens.
    assert expand_blocks([7, 9], 600, 512, 512, "keep") == (7, 9)
    assert expand_blocks([7, 9], 600, 512, 512, "drop") == (7,)
    keep = expand_blocks([7, 9], 600, 512, 64, "keep")
    assert len(keep) == 8 + 2  # 88 tokens -> ceil(88/64) = 2 pages
    assert keep[:8] == tuple(7 * 8 + j for j in range(8))
    assert len(expand_blocks([7, 9], 600, 512, 64, "drop")) == 8 + 1
    # Equal block ids give equal page keys (prefix identity survives the expansion).
    assert expand_blocks([7, 9], 1024, 512, 64, "keep")[:8] == expand_blocks([7, 3], 1024, 512, 64, "keep")[:8]


def test_page_tokens_and_match_limit():
    r = Request("x", 0.0, 600, 1, (1, 2))
    assert r.page_tokens(512, 1) == 512 and r.page_tokens(512, 2) == 600 and r.page_tokens(512, 0) == 0
    assert r.match_limit(512, reserve_last_token=False) == 2
    assert r.match_limit(512, reserve_last_token=True) == 1  # never the page holding the last token
    aligned = Request("y", 0.0, 1024, 1, (1, 2))
    assert aligned.match_limit(512, True) == 1


# Lines where a quick JSON path could differ from json.loads: whitespace around the value (JSON's
# four characters, and others it refuses), trailing data, a BOM, non-standard numbers, not an object.
JSON_LINES = [
    '{"a": [1, 2]}\n',
    '  {"a": 1}\n',
    '{"a": 1} \t\r\n',
    '{"a": 1}\x0c\n',
    '\x0c{"a": 1}',
    '{"a": 1} x\n',
    '{"a": 1} {"b": 2}',
    '\ufeff{"a": 1}',
    '{"a": NaN, "b": 1e400, "c": 123456789012345678901234567890}',
    "[1, 2]",
    '{"a": ',
    '{"a": "\\ud800"}',
]


@pytest.mark.parametrize("line", JSON_LINES)
def test_trace_lines_parse_as_json_loads(line):
    """The loader's per-line parse gives json.loads's value, or its error at the same place."""
    from hicache_sim.workloads.traces import _loads

    def outcome(parse):
        try:
            return ("value", repr(parse(line)))
        except json.JSONDecodeError as e:
            return ("error", e.msg, e.pos)

    assert outcome(_loads) == outcome(json.loads)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ('"timestamp": true', "field 'timestamp' must be an integer >= 0, got True"),
        ('"timestamp": 1.0', "field 'timestamp' must be an integer >= 0, got 1.0"),
        ('"timestamp": -1', "field 'timestamp' must be an integer >= 0, got -1"),
        ('"hash_ids": [4, true]', "field 'hash_ids' must be a list of integers"),
        ('"hash_ids": [4, 5.0]', "field 'hash_ids' must be a list of integers"),
        ('"hash_ids": {"4": 5}', "field 'hash_ids' must be a list of integers"),
    ],
)
def test_mooncake_field_types_name_the_line(tmp_path, fields, message):
    """Booleans are not integers, floats are not ids: each refused with its line."""
    good = {"timestamp": 0, "input_length": 700, "output_length": 3, "hash_ids": [4, 5]}
    bad = json.dumps(good)[:-1] + ", " + fields + "}"  # a later key overrides the good one
    p = tmp_path / "t.jsonl"
    p.write_text(json.dumps(good) + "\n" + bad + "\n")
    with pytest.raises(WorkloadError) as err:
        load_mooncake(p, 512)
    assert str(err.value) == f"{p}:2: {message}"


def test_mooncake_with_smaller_pages(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text('{"timestamp": 1500, "input_length": 700, "output_length": 3, "hash_ids": [4, 5]}\n')
    (r,) = load_mooncake(p, 128, time_scale=2.0)
    assert r.arrival_s == pytest.approx(3.0)
    assert len(r.page_keys) == 4 + 2  # 188-token tail -> 2 pages of 128
    assert r.output_tokens == 3


def test_bailian_loader(tmp_path):
    p = tmp_path / "b.jsonl"
    rows = [
        {
            "chat_id": 1,
            "parent_chat_id": -1,
            "timestamp": 0.5,
            "input_length": 40,
            "output_length": 8,
            "type": "text",
            "turn": 1,
            "hash_ids": [10, 11, 12],
        },
        {
            "chat_id": 2,
            "parent_chat_id": 1,
            "timestamp": 2.0,
            "input_length": 70,
            "output_length": 8,
            "type": "text",
            "turn": 2,
            "hash_ids": [10, 11, 12, 13, 14],
        },
    ]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    a, b = load_bailian(p, 16)
    assert a.session == b.session == "1" and b.turn == 2
    assert b.page_keys[:2] == a.page_keys[:2]
    assert len(a.page_keys) == 3 and len(load_bailian(p, 16, partial_pages="drop")[0].page_keys) == 2
    with pytest.raises(WorkloadError, match="page_size 32 must divide"):
        load_bailian(p, 32)


def test_azure_errors_cite_line(tmp_path):
    p = tmp_path / "a.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\nyesterday,1,1\n")
    with pytest.raises(WorkloadError, match=r"a\.csv:3: TIMESTAMP"):
        load_azure(p)
    p.write_text("when,ctx,gen\n")
    with pytest.raises(WorkloadError, match=r"a\.csv:1: expected header"):
        load_azure(p)


def test_multiturn_histories_grow_and_share_prefix():
    spec = MultiturnSpec(num_clients=4, num_rounds=3, request_length=300, output_length=50, request_rate=2.0)
    w = multiturn(spec, 64, seed=5)
    assert w.closed_loop and w.sender.max_parallel == spec.max_parallel
    by = {(r.session, r.turn): r for r in w.requests}
    r0, r1, r2 = by[("c0", 0)], by[("c0", 1)], by[("c0", 2)]
    assert r1.input_tokens == 300 + 50 + 300 and r2.input_tokens == 2 * 350 + 300
    # Round 1 contains round 0's prompt and answer: its whole pages are round 0's finish keys.
    assert r1.page_keys[: len(r0.finish_keys)] == r0.finish_keys
    assert r2.page_keys[: len(r1.finish_keys)] == r1.finish_keys
    # Different clients share nothing.
    assert not set(by[("c1", 0)].page_keys) & set(r0.page_keys)


def test_generators_are_deterministic_across_processes():
    code = (
        "from hicache_sim.workloads.synthetic import multiturn;"
        "from hicache_sim.scenario import MultiturnSpec;"
        "w = multiturn(MultiturnSpec(num_clients=2, num_rounds=2), 64, 3);"
        "print(w.requests[-1].page_keys[:3], w.requests[-1].arrival_s)"
    )
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": str(s), "PATH": ""},
        ).stdout
        for s in (1, 2)
    }
    assert len(outs) == 1


def test_shared_prefix_groups_share_their_system_prompt():
    spec = SharedPrefixSpec(num_groups=3, prompts_per_group=4, system_prompt_length=1000, question_length=100)
    w = shared_prefix(spec, 64, seed=1)
    assert len(w.requests) == 12
    groups = {}
    for r in w.requests:
        groups.setdefault(r.rid.split("q")[0], []).append(r)
    for reqs in groups.values():
        first = reqs[0].page_keys[: 1000 // 64]
        assert all(r.page_keys[: 1000 // 64] == first for r in reqs)
        assert len({r.page_keys[-1] for r in reqs}) == len(reqs)


def test_long_context_round_robin_and_poisson():
    lc = long_context(LongContextSpec(num_documents=3, queries_per_document=2, context_length=4096), 64, 0)
    assert [r.rid for r in lc.requests][:3] == ["d0q0", "d1q0", "d2q0"]
    assert lc.requests[0].page_keys[:64] == lc.requests[3].page_keys[:64]
    ps = poisson_synthetic(PoissonSpec(num_requests=50, input_length=1024, shared_fraction=0.5, num_prefixes=2), 64, 0)
    assert len(ps.requests) == 50
    assert len({r.page_keys[0] for r in ps.requests}) == 2


def test_build_workload_every_kind():
    for kind in WORKLOAD_KINDS.names():
        sc = Scenario.model_validate({"workload": {"kind": kind, "trace": {"limit": 50}}})
        w = build_workload(sc, 64)
        assert w.requests and all(r.input_tokens > 0 for r in w.requests)
    sc = Scenario.model_validate(
        {
            "workload": {
                "kind": "trace",
                "trace": {"path": "builtin:azure/AzureLLMInferenceTrace_conv.csv", "format": "azure", "limit": 20},
            }
        }
    )
    w = build_workload(sc, 64)
    assert len(w.requests) == 20 and w.requests[0].arrival_s == 0.0
