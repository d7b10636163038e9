"""A sweep parses its trace once per worker process, not once per point: the workload is cached per
process by what it is built from (workload section, seed, page size, input files by content)."""

from __future__ import annotations

import importlib
import json

import pytest

import hicache_sim.workloads.kinds.trace as trace_kind
from hicache_sim.workloads.traces import vendored_trace

# The module (``hicache_sim.sweep`` as an attribute is the API's sweep function).
sweep = importlib.import_module("hicache_sim.sweep")

BASE = {
    "name": "cache",
    "mode": "instant",
    "model": "llama-3.1-8b",
    "cache": {"page_size": 512, "device_tokens": 512 * 300, "host_ratio": 0.5, "host_alignment": "exact"},
    "scheduler": {"chunked_prefill_size": None},
    "workload": {"kind": "trace", "trace": {"path": "builtin:mooncake/conversation_trace.jsonl", "limit": 120}},
}


@pytest.fixture
def parses(monkeypatch):
    """Counts trace parses in this process (the cache starts empty)."""
    calls = []
    real = trace_kind.BLOCK_LOADERS["mooncake"]

    def counting(path, *args, **kw):
        calls.append(str(path))
        return real(path, *args, **kw)

    monkeypatch.setitem(trace_kind.BLOCK_LOADERS, "mooncake", counting)
    monkeypatch.setattr(sweep, "_WORKLOADS", {})
    return calls


def run(base, tmp_path, name):
    return sweep.run_sweep(base, "test", tmp_path / name, workers=1)


def test_points_of_one_trace_parse_it_once(parses, tmp_path):
    grid = {"cache.host_ratio": [0.5, 2.0], "cache.host_eviction": ["evicted_only", "boundary"]}
    res = run({**BASE, "sweep": grid}, tmp_path, "a")
    assert res.ran == 4 and len(parses) == 1
    assert res.table["requests"].tolist() == [120] * 4


def test_points_with_different_workloads_parse_each_once(parses, tmp_path):
    grid = {"workload.trace.limit": [60, 120], "cache.host_ratio": [0.5, 2.0]}
    res = run({**BASE, "sweep": grid}, tmp_path, "b")
    assert len(parses) == 2
    assert res.table["requests"].tolist() == [60, 60, 120, 120]


def test_a_trace_rewritten_in_place_is_parsed_again(parses, tmp_path):
    lines = vendored_trace("mooncake/conversation_trace.jsonl").read_text().splitlines(keepends=True)
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(lines[:80]))
    base = {**BASE, "workload": {"kind": "trace", "trace": {"path": str(trace)}}}
    first = sweep.run_point(base, "test", [], None)
    trace.write_text("".join(lines[:50]))
    second = sweep.run_point(base, "test", [], None)
    assert (first["requests"], second["requests"]) == (80, 50)
    assert len(parses) == 2
    assert sweep.run_point(base, "test", ["cache.host_ratio=2.0"], None)["requests"] == 50
    assert len(parses) == 2


def test_the_cache_holds_a_bounded_number_of_workloads(parses, tmp_path):
    limits = list(range(10, 10 + 2 * (sweep.WORKLOAD_CACHE_SIZE + 2), 2))
    for n in limits:
        sweep.run_point(BASE, "test", [f"workload.trace.limit={json.dumps(n)}"], None)
    assert len(sweep._WORKLOADS) == sweep.WORKLOAD_CACHE_SIZE
    sweep.run_point(BASE, "test", [f"workload.trace.limit={limits[-1]}"], None)  # most recent: still cached
    assert len(parses) == len(limits)
