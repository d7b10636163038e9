"""``trace convert`` on request logs as SGLang 0.5.23 writes them (``--log-requests --log-requests-format
json``), line for line: its request logger's handler prefixes every line with ``[%Y-%m-%d %H:%M:%S] ``
(``srt/utils/log_utils.py``), OpenAI requests are first logged raw as ``request.received.openai`` (no
rid, level >= 2), ``--log-requests-target stdout`` interleaves the server's own console lines, health
checks are requests too (rid ``HEALTH_CHECK_<hex>``, ``input_ids [0]``, one new token), and with
``SGLANG_LOG_REQUEST_ABBREVIATE_FIELDS`` at levels 1-2 a string field is logged as
``<text: N chars, blake2b=HEX>`` (newer SGLang's request_logger). The lines are built here the way those
functions build them (``log_json``: ``{"timestamp": isoformat, "event", **data}``, ``ensure_ascii=False``)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import assert_user_error, invoke

T0 = datetime(2026, 11, 2, 10, 0, 0)
SYSTEM = list(range(100, 140))  # 40 server token ids every chat request starts with


def obj(rid: str, *, text=None, input_ids=None, max_new_tokens=64) -> dict:
    """A GenerateReqInput as the request logger turns it into JSON (its fields in order, the usual ones)."""
    return {
        "rid": rid, "session_id": None, "text": text, "input_ids": input_ids, "input_embeds": None,
        "image_data": None, "video_data": None, "audio_data": None,
        "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0.0},
        "return_logprob": False, "logprob_start_len": -1, "top_logprobs_num": 0, "stream": False,
        "log_metrics": True, "lora_path": None, "priority": None, "received_time": None,
    }  # fmt: skip


def out(rid: str, n_in: int, n_out: int, cached: int, e2e: float) -> dict:
    meta = {
        "id": rid, "finish_reason": {"type": "length", "length": n_out}, "prompt_tokens": n_in,
        "weight_version": "default", "num_retractions": 0, "reasoning_tokens": 0,
        "completion_tokens": n_out, "cached_tokens": cached, "e2e_latency": e2e,
    }  # fmt: skip
    return {"text": "(answer)", "output_ids": list(range(n_out)), "meta_info": meta}


def line(event: str, at_s: float, **data) -> str:
    """One line of the request logger: the handler's ``[asctime] `` prefix, then log_json's object."""
    when = T0 + timedelta(seconds=at_s)
    body = json.dumps({"timestamp": when.isoformat(), "event": event, **data}, ensure_ascii=False)
    return f"[{when:%Y-%m-%d %H:%M:%S}] {body}\n"


def chat(rid: str, at: float, ids: list[int], n_out: int, cached: int, e2e: float) -> list[str]:
    """A /v1/chat/completions request: raw payload (level >= 2), received, finished."""
    raw = {"messages": [{"role": "user", "content": "hello"}], "model": "default", "max_tokens": 64}
    o = obj(rid, input_ids=ids)
    return [
        line("request.received.openai", at, obj=raw),
        line("request.received", at + 0.001, rid=rid, obj=o),
        line("request.finished", at + e2e, rid=rid, obj=o, out=out(rid, len(ids), n_out, cached, e2e)),
    ]


def health(at: float) -> list[str]:
    rid = "HEALTH_CHECK_0f3c2a9b8e7d4c6a9b1e2d3c4b5a6978"
    o = obj(rid, input_ids=[0], max_new_tokens=1)
    o["log_metrics"] = False
    return [
        line("request.received", at, rid=rid, obj=o),
        line("request.finished", at + 0.02, rid=rid, obj=o, out=out(rid, 1, 1, 0, 0.02)),
    ]


CONSOLE = [
    '[2026-11-02 10:00:00] INFO:     127.0.0.1:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n',
    "[2026-11-02 10:00:00 TP0] Prefill batch, #new-seq: 1, #new-token: 40, #cached-token: 0, token usage: 0.00, "
    "#running-req: 0, #queue-req: 0\n",
    "[2026-11-02 10:00:01 TP0] Decode batch, #running-req: 1, #token: 64, token usage: 0.00, gen throughput "
    "(token/s): 31.02, #queue-req: 0\n",
]


def server_log(tmp_path: Path, *, console: bool) -> Path:
    """Two chat turns (the second resends the first's 40 ids and adds 24), a health check between them,
    and a /generate request; with ``console``, the server's own lines in between (target stdout)."""
    lines = chat("c1", 0.0, SYSTEM, 12, 0, 0.8)
    lines += health(1.0)
    lines += chat("c2", 2.0, SYSTEM + list(range(200, 224)), 9, 40, 0.6)
    g1 = obj("g1", text="The capital city of France is")  # SGLang's own warm-up prompt, sent as /generate
    lines += [
        line("request.received", 3.0, rid="g1", obj=g1),
        line("request.finished", 3.5, rid="g1", obj=g1, out=out("g1", 7, 8, 0, 0.5)),
    ]
    if console:
        lines = CONSOLE[:1] + lines[:3] + CONSOLE[1:] + lines[3:]
    path = tmp_path / ("stdout.log" if console else "host_0.log")
    path.write_text("".join(lines), encoding="utf-8")
    return path


def convert(tmp_path: Path, log: Path, *args):
    out_path = tmp_path / "trace.jsonl"
    r = invoke("trace", "convert", log, "--out", out_path, "--block-size", 16, *args)
    lines = [json.loads(x) for x in out_path.read_text().splitlines()] if out_path.exists() else []
    return r, lines


@pytest.mark.parametrize("console", [False, True], ids=["file-target", "stdout-with-console"])
def test_a_0_5_23_request_log_converts_on_auto_detection(tmp_path, console):
    r, lines = convert(tmp_path, server_log(tmp_path, console=console))
    assert r.exit_code == 0, r.output
    assert [ln["input_length"] for ln in lines] == [40, 64, -(-len(b"The capital city of France is") // 4)]
    assert [ln["output_length"] for ln in lines] == [12, 9, 8]
    assert [ln["timestamp"] for ln in lines] == [0, 2000, 2999]  # request.received times, ms from the first
    assert lines[1]["hash_ids"][:2] == lines[0]["hash_ids"][:2]  # the second turn's 40 shared ids
    assert "0 skipped" in r.output  # console lines and raw OpenAI payloads are not request lines
    assert "1 health check" in r.output
    if console:
        assert "3 lines of server console output" in r.output


def test_health_checks_are_not_traffic(tmp_path):
    """A health check is one token ([0]) with one new token: without the rule it is a fourth request."""
    r, lines = convert(tmp_path, server_log(tmp_path, console=False))
    assert r.exit_code == 0, r.output
    assert len(lines) == 3 and all(ln["input_length"] > 1 for ln in lines)


def test_strict_takes_console_lines_as_what_they_are(tmp_path):
    r, lines = convert(tmp_path, server_log(tmp_path, console=True), "--strict")
    assert r.exit_code == 0, r.output
    assert len(lines) == 3


def test_format_openai_on_an_sglang_log_says_which_format_it_is(tmp_path):
    r, _ = convert(tmp_path, server_log(tmp_path, console=False), "--format", "openai")
    assert_user_error(r, "no request could be converted", "SGLang's request log", "--format sglang")


def test_abbreviated_text_is_never_an_eleven_token_prompt(tmp_path):
    """``<text: 5000 chars, blake2b=...>`` holds the prompt's length in characters and a hash, not the
    prompt: read as text it would be ~11 tokens. A request whose input_ids are logged keeps them."""
    short = "<text: 5000 chars, blake2b=5d41402abc4b2a76>"
    a, b = obj("a", text=short), obj("b", text=short, input_ids=SYSTEM)
    lines = [
        line("request.received", 0.0, rid="a", obj=a),
        line("request.finished", 1.0, rid="a", obj=a, out=out("a", 1190, 5, 0, 1.0)),
        line("request.received", 2.0, rid="b", obj=b),
        line("request.finished", 3.0, rid="b", obj=b, out=out("b", 40, 5, 0, 1.0)),
    ]
    log = tmp_path / "abbrev.log"
    log.write_text("".join(lines))
    r, got = convert(tmp_path, log)
    assert r.exit_code == 0, r.output
    assert [ln["input_length"] for ln in got] == [40]
    assert "abbrev.log:2: obj.text is abbreviated" in r.output and "5000 characters" in r.output
    (tmp_path / "trace.jsonl").unlink()
    r, _ = convert(tmp_path, log, "--strict", "--format", "sglang")
    assert_user_error(r, "abbrev.log:2", "abbreviated", "--log-requests-level 3")


# ------------------------------------------------------------------ what the server saw (cached_tokens)


def test_convert_keeps_the_servers_cached_tokens_as_a_column(tmp_path):
    r, lines = convert(tmp_path, server_log(tmp_path, console=False))
    assert r.exit_code == 0, r.output
    assert [ln["cached_tokens"] for ln in lines] == [0, 40, 0]  # out.meta_info.cached_tokens, per request
    assert "3 requests carry the server's cached_tokens" in r.output


def test_a_run_of_the_converted_trace_compares_observed_and_simulated_hits(tmp_path):
    """The server cached all 40 shared ids of turn 2; the simulator, at 16-token pages, the 32 of its two
    whole pages (SGLang matches whole pages too: the server's page size was 1). Overall 40/112 observed
    against 32/112 simulated; per request 0 = 0, 40 vs 32, 0 = 0."""
    r, _ = convert(tmp_path, server_log(tmp_path, console=False))
    assert r.exit_code == 0, r.output
    scenario = {
        "name": "observed",
        "mode": "instant",
        "model": "llama-3.1-8b",
        "cache": {"page_size": 16, "device_tokens": 16 * 100, "host_ratio": 2, "host_alignment": "exact"},
        "scheduler": {"chunked_prefill_size": None},
        "metrics": {"warmup_fraction": 0.0},
        "workload": {"kind": "trace", "trace": {"path": "trace.jsonl", "block_size": 16}},
    }
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(scenario))
    r = invoke("run", tmp_path / "s.yaml", "--out", tmp_path / "run", "--no-figures")
    assert r.exit_code == 0, r.output
    block = json.loads((tmp_path / "run" / "summary.json").read_text())["observed"]
    assert block["requests"] == 3 and block["prompt_tokens"] == 112
    assert block["hit_rate_observed"] == pytest.approx(40 / 112)
    assert block["hit_rate_simulated"] == pytest.approx(32 / 112)
    assert block["per_request"]["simulated_lower"] == 1 and block["per_request"]["equal"] == 2
    assert block["per_request"]["abs_difference"]["max"] == pytest.approx(8 / 64)
    assert "observed hit rate 0.3571 (the server's cached_tokens) vs simulated 0.2857" in r.output
    rows = pd.read_parquet(tmp_path / "run" / "requests.parquet")
    assert rows["observed_cached_tokens"].tolist() == [0, 40, 0]
    r = invoke("run", tmp_path / "s.yaml", "--out", tmp_path / "again", "--no-figures")
    for name in ("summary.json", "requests.parquet"):  # same scenario, same bytes
        assert (tmp_path / "again" / name).read_bytes() == (tmp_path / "run" / name).read_bytes()


def test_cached_tokens_of_a_retokenised_prompt_are_scaled_to_its_length(tmp_path):
    """An OpenAI log's ``usage.prompt_tokens_details.cached_tokens`` counts the server's tokens; without
    the server's tokenizer the trace's prompt is another length, so the cached share is what is kept:
    40 of 80 server tokens on a prompt the byte fallback makes 100 tokens long is 50."""
    line_ = {
        "timestamp": 0,
        "prompt": "x" * 400,
        "usage": {"prompt_tokens": 80, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 40}},
    }
    (tmp_path / "log.jsonl").write_text(json.dumps(line_) + "\n")
    r, lines = convert(tmp_path, tmp_path / "log.jsonl")
    assert r.exit_code == 0, r.output
    assert lines[0]["input_length"] == 100 and lines[0]["cached_tokens"] == 50
    assert "1 scaled" in r.output


def test_the_text_request_log_is_named_even_with_format_sglang(tmp_path):
    """``--log-requests-format text`` (the default) writes reprs: not console output to step over, but
    the log the user meant, in the wrong format."""
    log = tmp_path / "text.log"
    log.write_text(
        "[2026-11-02 10:00:00] Receive: obj=GenerateReqInput(rid='a', text='hi', input_ids=None)\n"
        "[2026-11-02 10:00:01] Finish: obj=GenerateReqInput(rid='a', text='hi'), out={'meta_info': {}}\n"
    )
    for fmt in ("auto", "sglang"):
        r, _ = convert(tmp_path, log, "--format", fmt)
        assert_user_error(r, "text.log", "line 1", "--log-requests-format json")
