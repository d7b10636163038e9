"""Request-log readers for ``trace convert``: each turns one log format into ``LogRequest`` records
(arrival, answer length, and the prompt as messages, text, token ids or a bare length). A line that
cannot be converted becomes a ``Skipped`` naming its line and what was expected; only problems with
the whole file raise.

Formats (``--format``, or detected from the first JSON object):

- ``openai``: one JSON object per line, an OpenAI chat/completions request (``messages`` or
  ``prompt``), bare or under ``request``/``body`` beside a ``response``. Arrival: ``timestamp``
  (seconds, or an ISO-8601 string) or the response's ``created`` (Unix seconds). Answer length:
  ``usage.completion_tokens`` (the response's or the line's), else ``output_length`` or
  ``output_tokens``, else the request's ``max_tokens``/``max_completion_tokens`` (an upper bound,
  counted in the report).
- ``sglang``: SGLang's own request log, ``--log-requests --log-requests-format json
  --log-requests-target DIR`` (``--log-requests-level 3`` keeps whole prompts; level 2 cuts prompts
  over 2048 characters or ids, such lines are skipped and say so). ``request.finished`` events give
  the prompt (``obj.input_ids``, the server's own tokens, else ``obj.text``) and
  ``out.meta_info.completion_tokens``; the arrival is the ``request.received`` event's timestamp for
  the same ``rid``, else the finish time less ``meta_info.e2e_latency``.
- ``bench-serving``: ``python -m sglang.bench_serving --output-file F --output-details``: one line per
  run with per-request ``input_lens``/``output_lens``/``errors``. It holds no prompts and no send
  times: every request gets blocks of its own (no prefix reuse) and arrivals ``1/request_rate``
  apart (all at 0 for ``inf``). ``--run N`` picks the run when the file holds several.

- ``sglang-dump``: SGLang's request dumps (``--dump-requests-folder`` and ``--crash-dump-folder``
  pickles: a file or a folder of them), read inertly (``dumps.py``): prompt as above, arrival at
  the request's created time.

bench_multiturn's ``--log-file`` holds one summary per run and nothing per request: it is refused
with a pointer to SGLang's request log (which records what bench_multiturn sends) and to
``workload.kind: multiturn``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from ..workloads.errors import WorkloadError
from .dumps import dump_files, fields, read_dump


@dataclass(frozen=True)
class LogRequest:
    """One request read from a log. ``prompt`` is ``(kind, value)``: ``messages`` (an OpenAI list),
    ``text`` (a string), ``ids`` (token ids) or ``length`` (a bare token count: blocks of its own)."""

    line: int
    arrival_s: float
    output_tokens: int
    prompt: tuple[str, object]
    upper_bound_output: bool = False


@dataclass(frozen=True)
class Skipped:
    """A log line (or one request of a bench_serving run or of a dump) that could not be converted.
    ``where`` names it when a line number does not (``dump.pkl request 3``)."""

    line: int
    reason: str
    where: str | None = None


@dataclass
class LogRead:
    """What a reader found: requests, skipped lines, and notes for the report (one line each)."""

    requests: list[LogRequest]
    skipped: list[Skipped]
    notes: list[str]


def _lines(path: Path) -> Iterator[tuple[int, object]]:
    """``(line number, JSON value or Skipped)`` for every non-blank line."""
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                yield lineno, Skipped(lineno, f"not UTF-8 text (byte {e.start} of the line)")
                continue
            if not text.strip():
                continue
            try:
                yield lineno, json.loads(text)
            except json.JSONDecodeError as e:
                hint = ""
                if "Receive: obj=" in text or "Finish: obj=" in text:
                    hint = "; this is SGLang's text request log: relaunch with --log-requests-format json"
                yield lineno, Skipped(lineno, f"not valid JSON ({e.msg}, column {e.colno}){hint}")


def _first_object(path: Path) -> dict | None:
    for _, value in _lines(path):
        if isinstance(value, dict):
            return value
    return None


def _count(v) -> int | None:
    """``v`` if it is a non-negative integer (JSON 12.0 counts), else None."""
    if isinstance(v, bool):
        return None
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return v if isinstance(v, int) and v >= 0 else None


def _seconds(v) -> float | None:
    """A timestamp in seconds: a finite number, or an ISO-8601 string (``Z`` allowed)."""
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v) if math.isfinite(v) else None
    if isinstance(v, str):
        try:
            return datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


# --------------------------------------------------------------------------- openai


def _openai_line(lineno: int, obj: dict) -> LogRequest | Skipped:
    req = obj.get("request") if isinstance(obj.get("request"), dict) else obj.get("body")
    req = req if isinstance(req, dict) else obj
    resp = obj.get("response") if isinstance(obj.get("response"), dict) else obj

    if "messages" in req:
        prompt: tuple[str, object] = ("messages", req["messages"])
    elif isinstance(req.get("prompt"), str):
        prompt = ("text", req["prompt"])
    elif isinstance(req.get("prompt"), list) and req["prompt"] and all(_count(t) is not None for t in req["prompt"]):
        prompt = ("ids", [int(t) for t in req["prompt"]])
    elif isinstance(req.get("prompt"), list):
        return Skipped(lineno, "'prompt' is a batch (a list of prompts); give one request per line")
    else:
        return Skipped(lineno, "expected 'messages' (chat) or 'prompt' (completions) in the request")

    raw_ts = next((v for v in (obj.get("timestamp"), req.get("timestamp"), resp.get("created")) if v is not None), None)
    arrival = _seconds(raw_ts)
    if arrival is None:
        return Skipped(
            lineno,
            "expected 'timestamp' (seconds or ISO-8601) or the response's 'created', got "
            + ("nothing" if raw_ts is None else repr(raw_ts)),
        )

    for usage in (resp.get("usage"), obj.get("usage")):
        if isinstance(usage, dict) and _count(usage.get("completion_tokens")) is not None:
            return LogRequest(lineno, arrival, _count(usage["completion_tokens"]), prompt)
    for key in ("output_length", "output_tokens"):
        if _count(obj.get(key)) is not None:
            return LogRequest(lineno, arrival, _count(obj[key]), prompt)
    for key in ("max_completion_tokens", "max_tokens"):
        if _count(req.get(key)) is not None:
            return LogRequest(lineno, arrival, _count(req[key]), prompt, upper_bound_output=True)
    return Skipped(
        lineno, "expected the answer's length: usage.completion_tokens, output_length or the request's max_tokens"
    )


def read_openai(path: Path, run: int | None) -> LogRead:
    out = LogRead([], [], [])
    for lineno, value in _lines(path):
        if isinstance(value, Skipped):
            out.skipped.append(value)
        elif not isinstance(value, dict):
            out.skipped.append(Skipped(lineno, "expected a JSON object per line"))
        else:
            r = _openai_line(lineno, value)
            (out.skipped if isinstance(r, Skipped) else out.requests).append(r)
    bounded = sum(r.upper_bound_output for r in out.requests)
    if bounded:
        out.notes.append(f"{bounded} answer lengths are the request's max_tokens (an upper bound): no usage logged")
    return out


# --------------------------------------------------------------------------- sglang

SGLANG_CUT = 1024  # --log-requests-level 2 keeps the first and last 1024 characters/ids of a longer prompt


def _sglang_prompt(lineno: int, obj: dict) -> tuple[str, object] | Skipped:
    ids, text = obj.get("input_ids"), obj.get("text")
    if isinstance(ids, list) and ids:
        if "..." in ids:
            return Skipped(lineno, "obj.input_ids cut by --log-requests-level 2; log with --log-requests-level 3")
        if isinstance(ids[0], list):
            return Skipped(lineno, "a batched request (several prompts in one line)")
        if all(_count(t) is not None for t in ids):
            return ("ids", [int(t) for t in ids])
        return Skipped(lineno, "obj.input_ids must be a list of token ids")
    if isinstance(text, str):
        if len(text) == 2 * SGLANG_CUT + 3 and text[SGLANG_CUT : SGLANG_CUT + 3] == "...":
            return Skipped(lineno, "obj.text cut by --log-requests-level 2; log with --log-requests-level 3")
        return ("text", text)
    if isinstance(text, list):
        return Skipped(lineno, "a batched request (several prompts in one line)")
    return Skipped(lineno, "no prompt in obj (SGLang logs prompts at --log-requests-level 2 or 3)")


def read_sglang(path: Path, run: int | None) -> LogRead:
    out = LogRead([], [], [])
    received: dict[str, float] = {}
    finished: list[tuple[int, dict]] = []
    other = 0
    for lineno, value in _lines(path):
        if isinstance(value, Skipped):
            out.skipped.append(value)
            continue
        if not isinstance(value, dict) or "event" not in value:
            out.skipped.append(Skipped(lineno, "expected a JSON object with an 'event' (SGLang's JSON request log)"))
            continue
        if value["event"] == "request.received":
            ts = _seconds(value.get("timestamp"))
            if ts is not None and isinstance(value.get("rid"), str):
                received.setdefault(value["rid"], ts)
        elif value["event"] == "request.finished":
            finished.append((lineno, value))
        else:
            other += 1
    done = set()
    for lineno, ev in finished:
        obj, res = ev.get("obj"), ev.get("out")
        if isinstance(res, list):
            out.skipped.append(Skipped(lineno, "a batched request (several prompts in one line)"))
            continue
        if not isinstance(obj, dict) or not isinstance(res, dict):
            out.skipped.append(Skipped(lineno, "expected 'obj' and 'out' objects in a request.finished event"))
            continue
        meta = res.get("meta_info") if isinstance(res.get("meta_info"), dict) else {}
        n_out = _count(meta.get("completion_tokens"))
        if n_out is None:
            out.skipped.append(Skipped(lineno, "expected out.meta_info.completion_tokens (an integer >= 0)"))
            continue
        prompt = _sglang_prompt(lineno, obj)
        if isinstance(prompt, Skipped):
            out.skipped.append(prompt)
            continue
        rid = ev.get("rid", obj.get("rid"))
        arrival = received.get(rid) if isinstance(rid, str) else None
        if arrival is None:
            end, e2e = _seconds(ev.get("timestamp")), meta.get("e2e_latency")
            if end is None or isinstance(e2e, bool) or not isinstance(e2e, (int, float)) or not math.isfinite(e2e):
                out.skipped.append(
                    Skipped(lineno, "no arrival: no request.received for this rid and no timestamp/e2e_latency")
                )
                continue
            arrival = end - float(e2e)
        done.add(rid)
        out.requests.append(LogRequest(lineno, arrival, n_out, prompt))
    unfinished = len(set(received) - done - {ev.get("rid") for _, ev in finished})
    if unfinished:
        out.notes.append(f"{unfinished} requests were received but never finished in this log: left out")
    if other:
        out.notes.append(f"{other} events other than request.received/finished: ignored")
    return out


# --------------------------------------------------------------------------- bench_serving


def read_bench_serving(path: Path, run: int | None) -> LogRead:
    runs = [(ln, v) for ln, v in _lines(path) if isinstance(v, dict)]
    if not runs:
        raise WorkloadError(str(path), None, "expected bench_serving results (one JSON object per run)")
    if run is None and len(runs) > 1:
        lines = ", ".join(str(ln) for ln, _ in runs[:8]) + (", ..." if len(runs) > 8 else "")
        raise WorkloadError(
            str(path), None, f"holds {len(runs)} runs (lines {lines}); choose one with --run 1..{len(runs)}"
        )
    if run is not None and not 1 <= run <= len(runs):
        raise WorkloadError(str(path), None, f"--run {run}: the file holds {len(runs)} runs (1..{len(runs)})")
    lineno, res = runs[(run or 1) - 1]
    ins, outs = res.get("input_lens"), res.get("output_lens")
    if not isinstance(ins, list) or not isinstance(outs, list) or len(ins) != len(outs):
        raise WorkloadError(
            str(path),
            lineno,
            "expected per-request 'input_lens' and 'output_lens' of equal length "
            "(run bench_serving with --output-details)",
        )
    errors = res.get("errors") if isinstance(res.get("errors"), list) else [""] * len(ins)
    rate = res.get("request_rate")
    rate = float(rate) if isinstance(rate, (int, float)) and not isinstance(rate, bool) and rate > 0 else math.inf
    out = LogRead([], [], [])
    for i, (n_in, n_out) in enumerate(zip(ins, outs)):
        err = errors[i] if i < len(errors) else ""
        if err:
            out.skipped.append(Skipped(lineno, f"request {i} of the run failed ({str(err).splitlines()[0][:80]})"))
            continue
        if _count(n_in) is None or _count(n_in) == 0 or _count(n_out) is None:
            out.skipped.append(Skipped(lineno, f"request {i}: input_lens must be >= 1 and output_lens >= 0"))
            continue
        arrival = i / rate if math.isfinite(rate) else 0.0
        out.requests.append(LogRequest(lineno, arrival, _count(n_out), ("length", (lineno, i, _count(n_in)))))
    spacing = f"1/{rate:g} s apart" if math.isfinite(rate) else "all at 0 (request_rate inf)"
    out.notes.append(
        f"bench_serving results hold no prompts and no send times: each request has blocks of its own "
        f"(no prefix reuse) and arrivals are {spacing}"
    )
    return out


def read_sglang_dump(path: Path, run: int | None) -> LogRead:
    files = dump_files(path)
    if not files:
        raise WorkloadError(str(path), None, "no *.pkl request dump in this folder")
    out = LogRead([], [], [])
    order = 0
    for f in files:
        for i, item in enumerate(read_dump(f), 1):
            order += 1
            where = f"{f} request {i}"
            if not isinstance(item, tuple) or len(item) < 3:
                out.skipped.append(Skipped(order, "expected (obj, out, created_time, finished_time)", where))
                continue
            obj, res, created = fields(item[0]), item[1], item[2]
            if isinstance(res, list):
                out.skipped.append(Skipped(order, "a batched request (several prompts in one record)", where))
                continue
            meta = fields(fields(res).get("meta_info"))
            n_out = _count(meta.get("completion_tokens"))
            if n_out is None:
                out.skipped.append(Skipped(order, "expected out.meta_info.completion_tokens", where))
                continue
            arrival = _seconds(created)
            if arrival is None:
                out.skipped.append(Skipped(order, "expected a created time in seconds", where))
                continue
            prompt = _sglang_prompt(order, obj)
            if isinstance(prompt, Skipped):
                out.skipped.append(Skipped(order, prompt.reason, where))
                continue
            out.requests.append(LogRequest(order, arrival, n_out, prompt))
    out.notes.append(f"read {len(files)} dump file(s) inertly (nothing in them was imported or run)")
    return out


def refuse_bench_multiturn(path: Path, run: int | None) -> LogRead:
    raise WorkloadError(
        str(path),
        None,
        "a bench_multiturn --log-file holds one summary per run, no requests: log the server's requests "
        "(--log-requests --log-requests-format json --log-requests-target DIR) and convert that, "
        "or simulate the benchmark itself with workload.kind: multiturn",
    )


READERS: dict[str, Callable[[Path, int | None], LogRead]] = {
    "openai": read_openai,
    "sglang": read_sglang,
    "bench-serving": read_bench_serving,
    "sglang-dump": read_sglang_dump,
    "bench-multiturn": refuse_bench_multiturn,
}


def _is_pickle(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(1) == b"\x80"  # the PROTO opcode every pickle since protocol 2 starts with


def detect_format(path: Path) -> str:
    """The format of a log from its first JSON object (see the module docstring), or a dump."""
    if path.is_dir() or _is_pickle(path):
        return "sglang-dump"
    first = _first_object(path)
    if first is None:
        raise WorkloadError(
            str(path), None, "no JSON object in the file: expected a request log, one JSON object per line"
        )
    if first.get("event") in ("request.received", "request.finished"):
        return "sglang"
    if "input_lens" in first or ("completed" in first and "backend" in first):
        return "bench-serving"
    if isinstance(first.get("summary"), dict) and "average_ttft" in first["summary"]:
        return "bench-multiturn"
    return "openai"


def read_log(path: str | Path, fmt: str = "auto", run: int | None = None) -> LogRead:
    """Read the request log at ``path`` in format ``fmt`` (``auto``: detected)."""
    p = Path(path)
    if p.is_dir() and fmt in ("auto", "sglang-dump") and dump_files(p):
        return read_sglang_dump(p, run)
    if not p.is_file():
        why = (
            "is a folder with no *.pkl request dump, not a log file (SGLang writes one file per host and "
            "rank under --log-requests-target: give one, or cat them into one)"
            if p.is_dir()
            else "log file not found"
        )
        raise WorkloadError(str(path), None, why)
    name = detect_format(p) if fmt == "auto" else fmt
    return READERS[name](p, run)
