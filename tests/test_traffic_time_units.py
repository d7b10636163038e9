"""``trace convert``: a request log's bare-number timestamps in ms, us or ns since 1970 are read in their
own unit (each value's magnitude says which), never as seconds (arrival rates 10^3 to 10^9 too slow); a
number no clock can give is refused; relative numbers are seconds unless ``--time-unit`` says otherwise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import assert_user_error, invoke

T0 = 1_793_613_600  # 2026-11-02 10:00:00 UTC, in seconds since 1970
GAPS_S = [0.0, 0.25, 1.5]  # the log's requests, seconds after the first


def write_log(path: Path, stamps: list) -> Path:
    lines = [
        {"timestamp": ts, "prompt": f"request number {i}", "usage": {"completion_tokens": 4}}
        for i, ts in enumerate(stamps)
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def converted(tmp_path: Path, log: Path, *args) -> tuple[object, list[dict]]:
    out = tmp_path / "trace.jsonl"
    r = invoke("trace", "convert", log, "--out", out, *args)
    return r, [json.loads(x) for x in out.read_text().splitlines()] if out.exists() else []


@pytest.mark.parametrize(
    ("unit", "per_second"),
    [("s", 1), ("ms", 10**3), ("us", 10**6), ("ns", 10**9)],
)
def test_epoch_timestamps_are_read_in_the_unit_their_magnitude_says(tmp_path, unit, per_second):
    """The same three arrivals written in four units give the same trace: 0, 250 and 1500 ms apart.
    Read as seconds (the old reading), the ms log's second request came 250 s after the first."""
    stamps = [T0 * per_second + (g if unit == "s" else int(g * per_second)) for g in GAPS_S]  # exact
    r, lines = converted(tmp_path, write_log(tmp_path / f"log_{unit}.jsonl", stamps))
    assert r.exit_code == 0, r.output
    assert [ln["timestamp"] for ln in lines] == [0, 250, 1500]
    if unit != "s":
        assert f"3 in {unit} since 1970" in r.output  # the report says how it read them


@pytest.mark.parametrize("value", [3e16, 5e10, 4e13, 1e25])
def test_a_number_no_clock_can_give_is_refused_naming_it(tmp_path, value):
    """3e16 is 950 million years in seconds, 950 years after 1970 in us and 1 year in ns: no clock
    reads it. Between the windows of s, ms, us and ns since 1970 (2001 to 2286) a value is no clock's."""
    log = write_log(tmp_path / "log.jsonl", [value])
    r, _ = converted(tmp_path, log)
    assert_user_error(r, "log.jsonl", "line 1", f"{value:g}", "no clock")


def test_relative_numbers_are_seconds_unless_time_unit_says_otherwise(tmp_path):
    log = write_log(tmp_path / "rel.jsonl", [0, 250, 1500])
    r, lines = converted(tmp_path, log)
    assert r.exit_code == 0, r.output
    assert [ln["timestamp"] for ln in lines] == [0, 250_000, 1_500_000]
    assert "relative" in r.output and "--time-unit" in r.output  # said, not silent
    (tmp_path / "trace.jsonl").unlink()
    r, lines = converted(tmp_path, log, "--time-unit", "ms")
    assert r.exit_code == 0, r.output
    assert [ln["timestamp"] for ln in lines] == [0, 250, 1500]


def test_time_unit_applies_to_every_bare_number(tmp_path):
    """Relative nanoseconds pass 1e9 after one second: with --time-unit ns they stay nanoseconds."""
    log = write_log(tmp_path / "rel_ns.jsonl", [0, 250_000_000, 1_500_000_000])
    r, lines = converted(tmp_path, log, "--time-unit", "ns")
    assert r.exit_code == 0, r.output
    assert [ln["timestamp"] for ln in lines] == [0, 250, 1500]


def test_relative_and_epoch_numbers_in_one_log_keep_the_first_lines_kind(tmp_path):
    log = write_log(tmp_path / "mixed.jsonl", [0.0, 0.5, (T0 + 1) * 1000])
    r, lines = converted(tmp_path, log)
    assert r.exit_code == 0, r.output
    assert [ln["timestamp"] for ln in lines] == [0, 500]
    assert "mixed.jsonl:3:" in r.output and "line 1's is relative" in r.output


def test_a_dump_created_time_in_ms_is_read_as_ms(tmp_path):
    from test_traffic_dumps import GenerateReqInput, _pickle_as_sglang, out

    reqs = [
        (GenerateReqInput(input_ids=list(range(5, 45)), rid=str(i)), out(3, 40), (T0 + g) * 1000, 0.0)
        for i, g in enumerate(GAPS_S)
    ]
    (tmp_path / "d.pkl").write_bytes(_pickle_as_sglang({"server_args": None, "requests": reqs}))
    r, lines = converted(tmp_path, tmp_path / "d.pkl")
    assert r.exit_code == 0, r.output
    assert [ln["timestamp"] for ln in lines] == [0, 250, 1500]


def test_bad_time_unit_is_one_line(tmp_path):
    log = write_log(tmp_path / "log.jsonl", [0])
    r, _ = converted(tmp_path, log, "--time-unit", "minutes")
    assert_user_error(r, "--time-unit 'minutes'", "auto, s, ms, us, ns")
