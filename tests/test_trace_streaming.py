"""A trace is read from its file as it is replayed, never held whole: a first pass checks every line and
keeps only offsets, line numbers and arrival times; runners read each request once, in order. A bad line
anywhere (or a file changed under the run) is one error naming file and line, and nothing is written."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import TINY_SCENARIO, assert_user_error, invoke
from test_bad_input import snapshot, write_scenario

import hicache_sim.workloads.kinds.trace as trace_kind
import hicache_sim.workloads.traces as traces
from hicache_sim.runner import simulate
from hicache_sim.scenario import build_scenario
from hicache_sim.workloads.errors import WorkloadError
from hicache_sim.workloads.lazy import LazyRequests
from hicache_sim.workloads.traces import load_mooncake, open_bailian, open_mooncake, vendored_trace


def line(ts: int, inp: int = 600, out: int = 3, ids=(1, 2), **extra) -> str:
    row = {"timestamp": ts, "input_length": inp, "output_length": out, "hash_ids": list(ids), **extra}
    return json.dumps(row, ensure_ascii=False)


def trace_file(tmp_path, n: int = 1000, bad: int | None = None) -> str:
    """``n`` one-request lines with distinct prefixes; line ``bad`` (1-based) is not JSON."""
    rows = [line(10 * i, ids=(2 * i, 2 * i + 1)) for i in range(n)]
    if bad is not None:
        rows[bad - 1] = "{not json"
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return str(path)


def test_requests_in_arrival_order_read_at_their_byte_offsets(tmp_path):
    # Out of order, a tie, a blank line and non-ASCII text before later lines (offsets are bytes).
    rows = [line(30, ids=(1, 2)), "", line(10, ids=(3, 4), note="é€"), line(10, ids=(5, 6)), line(20, ids=(7, 8))]
    p = tmp_path / "t.jsonl"
    p.write_text("\n".join(rows) + "\n", encoding="utf-8")
    assert "é€" in p.read_text(encoding="utf-8")  # raw UTF-8: 5 bytes, 2 characters
    reqs = open_mooncake(p, 512)
    assert isinstance(reqs, LazyRequests) and len(reqs) == 4
    assert [r.rid for r in reqs] == ["r3", "r4", "r5", "r1"]  # timestamp order, file order on ties
    assert list(reqs.arrivals) == [0.01, 0.01, 0.02, 0.03]
    assert [r.page_keys for r in reqs] == [(3, 4), (5, 6), (7, 8), (1, 2)]
    assert reqs[-1] == reqs[3] and reqs[1:3] == [reqs[1], reqs[2]]


def test_lazy_trace_equals_the_list(tmp_path):
    path = vendored_trace("mooncake/conversation_trace.jsonl")
    lazy = open_mooncake(path, 64, limit=3000)
    assert list(lazy) == load_mooncake(path, 64, limit=3000)
    assert list(lazy.arrivals) == [r.arrival_s for r in lazy]


def test_a_bad_late_line_fails_before_any_request_is_built(tmp_path):
    with pytest.raises(WorkloadError, match=r"trace.jsonl:900: not valid JSON"):
        open_mooncake(trace_file(tmp_path, bad=900), 512)


def spoil_line_900(path: str, *, keep_time: bool = False) -> None:
    """Line 900 overwritten by as many bytes that are not JSON (the file keeps its size)."""
    p = Path(path)
    st = p.stat()
    lines = p.read_bytes().split(b"\n")
    lines[899] = b"x" * len(lines[899])
    p.write_bytes(b"\n".join(lines))
    if keep_time:
        os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.fixture(params=["held", "lazy"])
def held_or_lazy(request, monkeypatch):
    """Both ways a request is served: kept from the checking pass (a short trace) or read again from
    the file (a trace past ``HELD_PAGE_KEYS``, forced here by a limit of 0 keys)."""
    if request.param == "lazy":
        monkeypatch.setattr(traces, "HELD_PAGE_KEYS", 0)
    return request.param


def test_a_file_changed_after_its_check_is_an_error(tmp_path, held_or_lazy):
    path = trace_file(tmp_path)
    reqs = open_mooncake(path, 512)
    spoil_line_900(path)
    for _ in range(2):  # and stays one
        with pytest.raises(WorkloadError, match=r"trace.jsonl: changed since its lines were checked"):
            reqs[0]


def test_a_line_changed_under_its_time_stamp_is_an_error_naming_it(tmp_path, held_or_lazy):
    path = trace_file(tmp_path)
    reqs = open_mooncake(path, 512)
    spoil_line_900(path, keep_time=True)
    assert reqs[898].rid == "r899"
    with pytest.raises(WorkloadError, match=r"trace.jsonl:900: not valid JSON"):
        reqs[899]


def test_a_line_still_json_but_wrong_is_checked_again(tmp_path, held_or_lazy):
    path = Path(trace_file(tmp_path))
    reqs = open_mooncake(path, 512)
    st = path.stat()
    lines = path.read_bytes().split(b"\n")
    lines[899] = lines[899].replace(b'"input_length": 600', b'"input_length": 0  ')  # same size, still JSON
    path.write_bytes(b"\n".join(lines))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(WorkloadError, match=r"trace.jsonl:900: field 'input_length' must be an integer >= 1"):
        reqs[899]


@pytest.fixture
def parses(monkeypatch):
    """Line numbers of every JSON line the loader parses, in order."""
    seen: list[int] = []
    real = traces._object

    def counting(path, lineno, text):
        seen.append(lineno)
        return real(path, lineno, text)

    monkeypatch.setattr(traces, "_object", counting)
    return seen


def test_a_short_trace_parses_each_line_once(tmp_path, parses):
    path = trace_file(tmp_path, n=1000)
    reqs = open_mooncake(path, 512)
    built = list(reqs) + list(reqs)  # read twice: still from the checking pass
    assert parses == list(range(1, 1001))
    assert [r.rid for r in built[:1000]] == [f"r{i}" for i in range(1, 1001)]
    assert built[:1000] == built[1000:]


def test_a_long_trace_drops_the_requests_past_the_key_limit(tmp_path, parses, monkeypatch):
    # 1,000 requests of 2 page keys each; a limit of 1,000 keys is crossed at request 501.
    path = trace_file(tmp_path, n=1000)
    short = list(open_mooncake(path, 512))
    parses.clear()
    monkeypatch.setattr(traces, "HELD_PAGE_KEYS", 1000)
    reqs = open_mooncake(path, 512)
    assert reqs.make.held is None  # nothing kept: memory is 24 bytes a request, as without the limit
    assert list(reqs) == short
    assert parses == [*range(1, 1001), *range(1, 1001)]  # checked, then read again when built


@pytest.mark.parametrize("page_size", [512, 64])
def test_held_requests_equal_the_lazy_ones(page_size, monkeypatch):
    path = vendored_trace("mooncake/conversation_trace.jsonl")
    held = open_mooncake(path, page_size, limit=2000, time_scale=0.37)
    assert held.make.held is not None
    monkeypatch.setattr(traces, "HELD_PAGE_KEYS", 0)
    lazy = open_mooncake(path, page_size, limit=2000, time_scale=0.37)
    assert lazy.make.held is None
    assert list(held) == list(lazy) and list(held.arrivals) == list(lazy.arrivals)


def test_bailian_ids_checked_distinct_in_the_first_pass(tmp_path):
    row = {"chat_id": 7, "parent_chat_id": -1, "timestamp": 1.0, "input_length": 16, "output_length": 1}
    p = tmp_path / "b.jsonl"
    p.write_text(json.dumps({**row, "hash_ids": [1]}) + "\n" + json.dumps({**row, "hash_ids": [2]}) + "\n")
    assert not open_bailian(p, 16).unique_rids
    p.write_text(json.dumps({**row, "hash_ids": [1]}) + "\n" + json.dumps({**row, "chat_id": 8, "hash_ids": [2]}))
    assert open_bailian(p, 16).unique_rids


@pytest.fixture
def counted(monkeypatch):
    """Counts how often each request of a trace workload is built."""
    built: list[int] = []
    real = trace_kind.BLOCK_LOADERS["mooncake"]

    def counting(*args, **kw):
        reqs = real(*args, **kw)
        make = reqs.make
        reqs.make = lambda i: built.append(i) or make(i)
        return reqs

    monkeypatch.setitem(trace_kind.BLOCK_LOADERS, "mooncake", counting)
    return built


@pytest.mark.parametrize("mode", ["instant", "timed"])
def test_runners_read_each_request_once_in_order(counted, mode):
    sc = build_scenario({**TINY_SCENARIO, "mode": mode}, "test")
    out = simulate(sc)
    assert out.summary["requests"] == 60
    assert counted == list(range(60))


@pytest.mark.parametrize("mode", ["instant", "timed"])
@pytest.mark.parametrize("when", ["first pass", "under the run"])
def test_a_late_bad_line_leaves_nothing(tmp_path, monkeypatch, mode, when, held_or_lazy):
    path = trace_file(tmp_path, bad=900 if when == "first pass" else None)
    if when == "under the run":  # the line goes bad after the first pass checked it
        real = trace_kind.BLOCK_LOADERS["mooncake"]

        def then_corrupt(*args, **kw):
            reqs = real(*args, **kw)
            spoil_line_900(path, keep_time=True)
            return reqs

        monkeypatch.setitem(trace_kind.BLOCK_LOADERS, "mooncake", then_corrupt)
    sc = write_scenario(
        tmp_path, {**TINY_SCENARIO, "mode": mode, "workload": {"kind": "trace", "trace": {"path": path}}}
    )
    before = snapshot(tmp_path)
    assert_user_error(invoke("run", sc, "--out", tmp_path / "out", "--no-figures"), "trace.jsonl:900", "not valid JSON")
    after = snapshot(tmp_path)
    if when == "under the run":
        after.pop("trace.jsonl"), before.pop("trace.jsonl")
    assert after == before  # no result folder, no staged folder beside it
