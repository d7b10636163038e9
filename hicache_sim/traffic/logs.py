"""Request-log readers for ``trace convert``: each turns one log format into ``LogRequest`` records
(arrival, answer length, and the prompt as messages, text, token ids or a bare length). A line that
cannot be converted becomes a ``Skipped`` naming its line and what was expected; only problems with
the whole file raise.

Formats (``--format``, or detected from the first JSON object):

- ``openai``: one JSON object per line, an OpenAI chat/completions request (``messages`` or
  ``prompt``), bare or under ``request``/``body`` beside a ``response``. Arrival: ``timestamp``
  (a number, or an ISO-8601 string) or the response's ``created``; a number's unit (s, ms, us, ns)
  by the rule in ``clock.py``. Answer length:
  ``usage.completion_tokens`` (the response's or the line's), else ``output_length`` or
  ``output_tokens``, else the request's ``max_tokens``/``max_completion_tokens`` (an upper bound,
  counted in the report).
- ``sglang``: SGLang's own request log, ``--log-requests --log-requests-format json
  --log-requests-target DIR`` (``--log-requests-level 3`` keeps whole prompts; level 2 cuts prompts
  over 2048 characters or ids, such lines are skipped and say so). Its handler starts every line with
  ``[YYYY-mm-dd HH:MM:SS] ``; with ``--log-requests-target stdout`` the server's console lines come
  in between (counted, not skipped). ``request.finished`` events give the prompt (``obj.input_ids``,
  the server's own tokens, else ``obj.text``), ``out.meta_info.completion_tokens`` and
  ``cached_tokens``; the arrival is the ``request.received`` event's timestamp for the same ``rid``,
  else the finish time less ``meta_info.e2e_latency``. ``request.received.openai`` events (the raw
  OpenAI payload, no rid) and health checks (rid ``HEALTH_CHECK_...``) are left out and counted. A
  field abbreviated to ``<text: N chars, blake2b=...>`` (``SGLANG_LOG_REQUEST_ABBREVIATE_FIELDS``)
  holds no prompt: such a line is skipped and says so.
- ``bench-serving``: ``python -m sglang.bench_serving --output-file F --output-details``: one line per
  run with per-request ``input_lens``/``output_lens``/``errors``. It holds no prompts and no send
  times: every request gets blocks of its own (no prefix reuse) and arrivals ``1/request_rate``
  apart (all at 0 for ``inf``). ``--run N`` picks the run when the file holds several.

- ``sglang-dump``: SGLang's request dumps (``--dump-requests-folder`` and ``--crash-dump-folder``
  pickles: a file or a folder of them), read inertly (``dumps.py``): prompt as above, arrival at
  the request's created time, health checks left out.

Every reader skips a line whose JSON nests deeper than Python's parser goes (one reason, no traceback).

bench_multiturn's ``--log-file`` holds one summary per run and nothing per request: it is refused
with a pointer to SGLang's request log (which records what bench_multiturn sends) and to
``workload.kind: multiturn``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..workloads.errors import WorkloadError
from .clock import Clock
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
    #: What the server found cached of the prompt, and the prompt's length in its own tokens, when logged
    #: (SGLang's ``meta_info.cached_tokens`` / ``prompt_tokens``, OpenAI's ``usage.prompt_tokens_details``).
    cached_tokens: int | None = None
    prompt_tokens: int | None = None


@dataclass(frozen=True)
class Skipped:
    """A log line (or one request of a bench_serving run or of a dump) that could not be converted.
    ``where`` names it when a line number does not (``dump.pkl request 3``)."""

    line: int
    reason: str
    where: str | None = None


@dataclass(frozen=True)
class TextLine(Skipped):
    """A line that is not a JSON object at all (no ``{`` first): console output beside a request log."""


@dataclass
class LogRead:
    """What a reader found: requests, skipped lines, and notes for the report (one line each)."""

    requests: list[LogRequest]
    skipped: list[Skipped]
    notes: list[str]


@dataclass(frozen=True)
class ReadOptions:
    """What the user said about the log: the bench_serving run, the unit of bare-number timestamps."""

    run: int | None = None
    time_unit: str = "auto"


#: What SGLang's request-log handler puts before every message (``[%(asctime)s] `` with its datefmt).
LOG_PREFIX = re.compile(r"\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\] ")


def _lines(path: Path) -> Iterator[tuple[int, object]]:
    """``(line number, JSON value or Skipped)`` for every non-blank line, a logger's
    ``[YYYY-mm-dd HH:MM:SS] `` prefix removed."""
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                yield lineno, Skipped(lineno, f"not UTF-8 text (byte {e.start} of the line)")
                continue
            if not text.strip():
                continue
            if m := LOG_PREFIX.match(text):
                text = text[m.end() :]
            try:
                yield lineno, json.loads(text)
            except RecursionError:
                yield lineno, Skipped(lineno, "JSON nested deeper than Python's parser goes: not a request")
            except json.JSONDecodeError as e:
                hint = ""
                if "Receive: obj=" in text or "Finish: obj=" in text:
                    hint = "; this is SGLang's text request log: relaunch with --log-requests-format json"
                kind = Skipped if text.lstrip()[:1] == "{" or hint else TextLine  # request logs are objects
                yield lineno, kind(lineno, f"not valid JSON ({e.msg}, column {e.colno}){hint}")


def _first_object(path: Path) -> dict | Skipped | None:
    """The first JSON object in the file; else why its first line is not one; else None (no line)."""
    first_skip = None
    for _, value in _lines(path):
        if isinstance(value, dict):
            return value
        if isinstance(value, Skipped) and first_skip is None:
            first_skip = value
    return first_skip


def _count(v) -> int | None:
    """``v`` if it is a non-negative integer (JSON 12.0 counts), else None."""
    if isinstance(v, bool):
        return None
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return v if isinstance(v, int) and v >= 0 else None


#: ``event`` values of SGLang's JSON request log (``request.received``, ``.received.openai``, ``.finished``).
SGLANG_EVENT = "request."
HEALTH_CHECK_RID = "HEALTH_CHECK"  # SGLang's prefix for /health and /health_generate requests


def _is_sglang_event(obj) -> bool:
    return isinstance(obj, dict) and isinstance(obj.get("event"), str) and obj["event"].startswith(SGLANG_EVENT)


# --------------------------------------------------------------------------- openai


def _openai_line(lineno: int, obj: dict, clock: Clock) -> LogRequest | Skipped:
    if _is_sglang_event(obj):
        return Skipped(
            lineno, f"an event of SGLang's request log ({obj['event']}), not an OpenAI request: use --format sglang"
        )
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
    arrival = clock.seconds(lineno, raw_ts)
    if isinstance(arrival, str):
        return Skipped(lineno, arrival)
    if arrival is None:
        return Skipped(
            lineno,
            "expected 'timestamp' (seconds or ISO-8601) or the response's 'created', got "
            + ("nothing" if raw_ts is None else repr(raw_ts)),
        )

    for usage in (resp.get("usage"), obj.get("usage")):
        if isinstance(usage, dict) and _count(usage.get("completion_tokens")) is not None:
            details = usage.get("prompt_tokens_details")
            cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else None
            n_out, n_in = _count(usage["completion_tokens"]), _count(usage.get("prompt_tokens"))
            return LogRequest(lineno, arrival, n_out, prompt, cached_tokens=cached, prompt_tokens=n_in)
    for key in ("output_length", "output_tokens"):
        if _count(obj.get(key)) is not None:
            return LogRequest(lineno, arrival, _count(obj[key]), prompt)
    for key in ("max_completion_tokens", "max_tokens"):
        if _count(req.get(key)) is not None:
            return LogRequest(lineno, arrival, _count(req[key]), prompt, upper_bound_output=True)
    return Skipped(
        lineno, "expected the answer's length: usage.completion_tokens, output_length or the request's max_tokens"
    )


def read_openai(path: Path, opts: ReadOptions) -> LogRead:
    out = LogRead([], [], [])
    clock = Clock(opts.time_unit)
    for lineno, value in _lines(path):
        if isinstance(value, Skipped):
            out.skipped.append(Skipped(value.line, value.reason))  # console text too: not an OpenAI line
        elif not isinstance(value, dict):
            out.skipped.append(Skipped(lineno, "expected a JSON object per line"))
        else:
            r = _openai_line(lineno, value, clock)
            (out.skipped if isinstance(r, Skipped) else out.requests).append(r)
    bounded = sum(r.upper_bound_output for r in out.requests)
    if bounded:
        out.notes.append(f"{bounded} answer lengths are the request's max_tokens (an upper bound): no usage logged")
    out.notes += clock.notes()
    return out


# --------------------------------------------------------------------------- sglang

SGLANG_CUT = 1024  # --log-requests-level 2 keeps the first and last 1024 characters/ids of a longer prompt
#: A string field SGLang logged as its length and hash (``SGLANG_LOG_REQUEST_ABBREVIATE_FIELDS``, levels 1-2).
ABBREVIATED = re.compile(r"<(\w+): (\d+) chars, blake2b=[0-9a-f]+>")


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
        if m := ABBREVIATED.fullmatch(text):
            return Skipped(
                lineno,
                f"obj.text is abbreviated to its length and hash ({m.group(2)} characters, "
                "SGLANG_LOG_REQUEST_ABBREVIATE_FIELDS): the prompt is not in the log; log with "
                "--log-requests-level 3 or without text in that variable",
            )
        return ("text", text)
    if isinstance(text, list):
        return Skipped(lineno, "a batched request (several prompts in one line)")
    return Skipped(lineno, "no prompt in obj (SGLang logs prompts at --log-requests-level 2 or 3)")


def _is_health_check(rid) -> bool:
    return isinstance(rid, str) and rid.startswith(HEALTH_CHECK_RID)


def read_sglang(path: Path, opts: ReadOptions) -> LogRead:
    out = LogRead([], [], [])
    clock = Clock(opts.time_unit)
    received: dict[str, float] = {}
    finished: list[tuple[int, dict]] = []
    counts = {"console": 0, "openai": 0, "health": 0, "other": 0}
    for lineno, value in _lines(path):
        if isinstance(value, TextLine):
            counts["console"] += 1
            continue
        if isinstance(value, Skipped):
            out.skipped.append(value)
            continue
        if not isinstance(value, dict) or "event" not in value:
            out.skipped.append(Skipped(lineno, "expected a JSON object with an 'event' (SGLang's JSON request log)"))
            continue
        event, rid = value["event"], value.get("rid")
        if _is_health_check(rid):
            counts["health"] += event == "request.finished"
        elif event == "request.received":
            ts = clock.seconds(lineno, value.get("timestamp"))
            if isinstance(ts, float) and isinstance(rid, str):
                received.setdefault(rid, ts)
        elif event == "request.finished":
            finished.append((lineno, value))
        elif event == "request.received.openai":
            counts["openai"] += 1
        else:
            counts["other"] += 1
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
            end, e2e = clock.seconds(lineno, ev.get("timestamp")), meta.get("e2e_latency")
            if isinstance(end, str):
                out.skipped.append(Skipped(lineno, end))
                continue
            if end is None or isinstance(e2e, bool) or not isinstance(e2e, (int, float)) or not math.isfinite(e2e):
                out.skipped.append(
                    Skipped(lineno, "no arrival: no request.received for this rid and no timestamp/e2e_latency")
                )
                continue
            arrival = end - float(e2e)
        done.add(rid)
        cached, n_in = _count(meta.get("cached_tokens")), _count(meta.get("prompt_tokens"))
        out.requests.append(LogRequest(lineno, arrival, n_out, prompt, cached_tokens=cached, prompt_tokens=n_in))
    unfinished = len(set(received) - done - {ev.get("rid") for _, ev in finished})
    if unfinished:
        out.notes.append(f"{unfinished} requests were received but never finished in this log: left out")
    said = {
        "health": "health check requests (rid HEALTH_CHECK_..., /health_generate): not traffic, left out",
        "openai": "request.received.openai events (the raw OpenAI payload; the server's own events are used)",
        "console": "lines of server console output (not request-log events): ignored",
        "other": "events other than request.received/finished: ignored",
    }
    out.notes += [f"{counts[k]} {said[k]}" for k in said if counts[k]]
    out.notes += clock.notes()
    return out


# --------------------------------------------------------------------------- bench_serving


def read_bench_serving(path: Path, opts: ReadOptions) -> LogRead:
    run = opts.run
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


def read_sglang_dump(path: Path, opts: ReadOptions) -> LogRead:
    files = dump_files(path)
    if not files:
        raise WorkloadError(str(path), None, "no *.pkl request dump in this folder")
    out = LogRead([], [], [])
    clock = Clock(opts.time_unit)
    order = health = 0
    for f in files:
        for i, item in enumerate(read_dump(f), 1):
            order += 1
            where = f"{f} request {i}"
            if not isinstance(item, tuple) or len(item) < 3:
                out.skipped.append(Skipped(order, "expected (obj, out, created_time, finished_time)", where))
                continue
            obj, res, created = fields(item[0]), item[1], item[2]
            if _is_health_check(obj.get("rid")):
                health += 1
                continue
            if isinstance(res, list):
                out.skipped.append(Skipped(order, "a batched request (several prompts in one record)", where))
                continue
            meta = fields(fields(res).get("meta_info"))
            n_out = _count(meta.get("completion_tokens"))
            if n_out is None:
                out.skipped.append(Skipped(order, "expected out.meta_info.completion_tokens", where))
                continue
            arrival = clock.seconds(order, created)
            if not isinstance(arrival, float):
                out.skipped.append(Skipped(order, arrival or "expected a created time in seconds", where))
                continue
            prompt = _sglang_prompt(order, obj)
            if isinstance(prompt, Skipped):
                out.skipped.append(Skipped(order, prompt.reason, where))
                continue
            cached, n_in = _count(meta.get("cached_tokens")), _count(meta.get("prompt_tokens"))
            out.requests.append(LogRequest(order, arrival, n_out, prompt, cached_tokens=cached, prompt_tokens=n_in))
    out.notes.append(f"read {len(files)} dump file(s) inertly (nothing in them was imported or run)")
    if health:
        out.notes.append(f"{health} health check requests (rid HEALTH_CHECK_...): not traffic, left out")
    out.notes += clock.notes()
    return out


def refuse_bench_multiturn(path: Path, opts: ReadOptions) -> LogRead:
    raise WorkloadError(
        str(path),
        None,
        "a bench_multiturn --log-file holds one summary per run, no requests: log the server's requests "
        "(--log-requests --log-requests-format json --log-requests-target DIR) and convert that, "
        "or simulate the benchmark itself with workload.kind: multiturn",
    )


READERS: dict[str, Callable[[Path, ReadOptions], LogRead]] = {
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
    if not isinstance(first, dict):
        why = f" (line {first.line}: {first.reason})" if first is not None else ""
        raise WorkloadError(
            str(path), None, f"no JSON object in the file{why}: expected a request log, one JSON object per line"
        )
    if _is_sglang_event(first):
        return "sglang"
    if "input_lens" in first or ("completed" in first and "backend" in first):
        return "bench-serving"
    if isinstance(first.get("summary"), dict) and "average_ttft" in first["summary"]:
        return "bench-multiturn"
    return "openai"


def read_log(path: str | Path, fmt: str = "auto", opts: ReadOptions | None = None) -> LogRead:
    """Read the request log at ``path`` in format ``fmt`` (``auto``: detected)."""
    p = Path(path)
    opts = opts or ReadOptions()
    if p.is_dir() and fmt in ("auto", "sglang-dump") and dump_files(p):
        return read_sglang_dump(p, opts)
    if not p.is_file():
        why = (
            "is a folder with no *.pkl request dump, not a log file (SGLang writes one file per host and "
            "rank under --log-requests-target: give one, or cat them into one)"
            if p.is_dir()
            else "log file not found"
        )
        raise WorkloadError(str(path), None, why)
    name = detect_format(p) if fmt == "auto" else fmt
    return READERS[name](p, opts)
