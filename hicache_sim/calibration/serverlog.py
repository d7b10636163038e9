"""Read an SGLang server log's scheduler lines (``Prefill batch ...``, ``Decode batch ...``) and turn
them into *intervals*: stretches of time the log times and whose work is known and of one kind.

A line is not one step's time (docs/reference/sglang-server-log.md): ``gen throughput`` is the tokens
generated since the previous decode line over the wall time since it (``--decode-log-interval``
decode steps, 40 by default), ``input throughput`` a prefill batch's new tokens over the time since
the previous prefill line. So an interval is kept only when what ran inside it is known:

- decode: two consecutive scheduler lines of the log are both decode lines (no prefill ran between)
  with the same ``#running-req`` ``B`` (the batch only shrinks without a prefill, so it stayed ``B``),
  a ``#token`` that did not fall (the same requests only grow their KV: a fall means lines were left
  out between the two, as in a log pasted in pieces); every step then took ``B / gen_throughput``
  seconds, with the KV tokens between the two lines' ``#token`` figures. Under speculative decoding
  (the later line prints ``accept len``) that is a round's time over its mean accepted tokens, the
  rate the timed world charges per simulated step (``sim/compute.py`` ``spec_round_time``): the
  interval keeps the line's ``accept_len`` and is timed with it (``ParsedLog.accept_len``: their median);
- prefill: two consecutive prefill lines with the same shape (``#new-seq``, ``#new-token``,
  ``#cached-token``), no running decode batch at either (``#running-req`` 0) and requests still
  queued after the first (``#queue-req`` > 0: no idle wait): the gap timed one batch of that shape,
  whichever of the two batches the version's report times; ``#new-token / input throughput``; not
  a batch that filled the prefill chunk (a long prompt's later chunks log no cached prefix).

Formats are data: ``FIELDS`` maps each label SGLang prints (0.4.x to 0.5.x, hybrid pools,
speculative decoding, NPU graphs) to a key and a parser; unknown labels are ignored. ``FOREIGN_LOGS``
names other servers' logs so a wrong file is refused in one line.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..hardware.calibration import CalibrationError


def _bool(text: str) -> bool:
    if text not in ("True", "False"):
        raise ValueError(text)
    return text == "True"


#: Label printed by SGLang -> (key, parser). Several labels map to one key where versions or pool
#: kinds name the same figure differently (``#full token`` on hybrid SWA / Mamba pools).
FIELDS: dict[str, tuple[str, type | object]] = {
    "#new-seq": ("new_seqs", int),
    "#new-token": ("new_tokens", int),
    "#cached-token": ("cached_tokens", int),
    "#running-req": ("running", int),
    "#queue-req": ("queue", int),
    "#token": ("kv_tokens", int),
    "#full token": ("kv_tokens", int),
    "token usage": ("usage", float),
    "full token usage": ("usage", float),
    "cuda graph": ("graph", _bool),
    "npu graph": ("graph", _bool),
    "cpu graph": ("graph", _bool),
    "musa graph": ("graph", _bool),
    "gen throughput (token/s)": ("gen_tps", float),
    "input throughput (token/s)": ("input_tps", float),
    "accept len": ("accept_len", float),
}

#: Line kind -> the keys a complete line of that kind carries (a line without them is truncated).
REQUIRED = {
    "prefill": ("new_seqs", "new_tokens", "cached_tokens"),
    "decode": ("running", "kv_tokens", "gen_tps"),
}

#: Other servers' logs, recognised so that a wrong file gets a plain answer: (pattern, server).
FOREIGN_LOGS = (
    (re.compile(r"Avg prompt throughput: .* tokens/s, Avg generation throughput"), "a vLLM log"),
    (re.compile(r"\bvllm\.(?:engine|entrypoints|v1)\b|\(APIServer pid=\d+\)|\(EngineCore_\d+ pid=\d+\)"), "a vLLM log"),
    (re.compile(r"text_generation_router|text_generation_launcher"), "a TGI log"),
)

# "[2025-02-27 04:37:29 DP0 TP0 EP0] Decode batch. #running-req: ..." (0.4.x: "batch."; 0.5.x: "batch,";
# SGLANG_LOG_FORWARD_ITERS adds " [iter]").
LINE = re.compile(r"(?P<prefix>.*?)\b(?P<kind>Prefill|Decode) batch(?: \[\d+\])?[.,] ?(?P<body>.*)$")
#: Rank tags the scheduler's logger prefix carries: 0.4.10 to 0.5.3 print DP, TP, EP, PP
#: (``run_scheduler_process``); 0.5.10 and 0.5.23 DP, PP, ATTN_CP, MOE_DP, TP, EP (``configure_scheduler``,
#: ``configure_scheduler_process``).
RANK_TAGS = ("DP", "PP", "ATTN_CP", "ATTN_DP", "MOE_DP", "TP", "EP", "CP")
RANK = re.compile(rf"\b(?:{'|'.join(RANK_TAGS)})\d+\b")
#: A Ray actor's line prefix, ``(SGLangEngine pid=35555, ip=10.15.36.1)``: two pids are two servers.
PROCESS = re.compile(r"\(\w+ pid=(?P<pid>\d+)(?:, ip=(?P<ip>[\d.]+))?\)")
PART = re.compile(r"^(?P<label>[^:]+): (?P<value>\S+)$")


@dataclass
class LogLine:
    """One scheduler line: where it is, its kind, its rank tag and its parsed figures."""

    lineno: int
    kind: str
    rank: str
    figures: dict = field(default_factory=dict)


@dataclass
class Interval:
    """A timed stretch of one kind of work: ``seconds`` for one step of ``shape`` (decode: batch size,
    KV tokens; prefill: new sequences, new tokens, cached tokens), and the line that timed it."""

    kind: str
    shape: tuple[float, ...]
    seconds: float
    lineno: int
    accept_len: float | None = None  # speculative decoding: the mean tokens a request got per round


@dataclass
class ParsedLog:
    """The scheduler lines of one log, the intervals they pin and why others were not used."""

    path: str
    lines: list[LogLine]
    intervals: list[Interval]
    skipped: dict[str, int]

    @property
    def accept_len(self) -> float | None:
        """Median ``accept len`` over the speculative decode intervals (None: the log has none)."""
        values = sorted(iv.accept_len for iv in self.intervals if iv.accept_len is not None)
        if not values:
            return None
        mid = len(values) // 2
        return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2.0


def read_text_lines(path: Path) -> list[str]:
    """The log's lines; a byte that is not UTF-8 is refused naming its line."""
    if not path.is_file():
        raise CalibrationError(f"{path}: server log not found")
    data = path.read_bytes()
    try:
        return data.decode("utf-8").splitlines()
    except UnicodeDecodeError as e:
        lineno = data[: e.start].count(b"\n") + 1
        raise CalibrationError(f"{path}:{lineno}: not UTF-8 text; expected an SGLang server log") from None


def foreign_server(text_lines: list[str]) -> tuple[int, str] | None:
    """(line number, server) of the first line that marks another server's log, else None."""
    for i, line in enumerate(text_lines, 1):
        for pattern, server in FOREIGN_LOGS:
            if pattern.search(line):
                return i, server
    return None


def parse_line(text: str, lineno: int, path: str) -> LogLine | None:
    """A scheduler line's figures, None for any other line; a cut-off line is refused."""
    m = LINE.search(text)
    if not m:
        return None
    kind = m["kind"].lower()
    figures: dict = {}
    parts = [p.strip() for p in m["body"].strip().rstrip(",").split(", ")]
    for i, part in enumerate(parts):
        pm = PART.match(part)
        if not pm:
            if i == len(parts) - 1:
                raise CalibrationError(f"{path}:{lineno}: {m['kind']} batch line is cut off at {part!r}")
            continue  # a figure this reader does not know the shape of
        spec = FIELDS.get(pm["label"])
        if spec is None:
            continue  # unknown label: ignored
        key, parse = spec
        try:
            figures[key] = parse(pm["value"])
        except ValueError:
            raise CalibrationError(
                f"{path}:{lineno}: {pm['label']}: expected a {'flag' if key == 'graph' else 'number'}, "
                f"got {pm['value']!r}"
            ) from None
    missing = [k for k in REQUIRED[kind] if k not in figures]
    if missing:
        raise CalibrationError(
            f"{path}:{lineno}: {m['kind']} batch line is cut off or incomplete: no {', '.join(missing)}"
        )
    return LogLine(lineno, kind, rank_of(m["prefix"]), figures)


def rank_of(prefix: str) -> str:
    """The process and rank tags in a line's prefix (``pid=35555 TP0``): lines whose tags differ were
    printed by different schedulers, whose intervals must not be paired."""
    procs = [f"pid={p['pid']}" + (f"@{p['ip']}" if p["ip"] else "") for p in PROCESS.finditer(prefix)]
    return " ".join(procs + RANK.findall(prefix))


def decode_interval(prev: LogLine, line: LogLine, chunk: int | None = None) -> Interval | str:
    """The decode step time two consecutive decode lines pin, or why they pin none."""
    f, g = prev.figures, line.figures
    accept = g.get("accept_len")
    if accept is not None and accept < 1.0:
        return "accept len below 1 (no round ran)"
    b = g["running"]
    if b <= 0 or f["running"] != b:
        return "batch size changed between the lines"
    if g["kv_tokens"] < f["kv_tokens"]:
        # The same requests only grow their KV; a fall means lines are missing between the two (an
        # excerpt pasted in pieces), so the KV the interval ran at is unknown.
        return "#token fell with the batch unchanged (the lines are not consecutive in the server's log)"
    if g["gen_tps"] <= 0:
        return "zero throughput"
    kv = (f["kv_tokens"] + g["kv_tokens"]) / 2.0
    return Interval("decode", (b, kv), b / g["gen_tps"], line.lineno, accept)


def prefill_interval(prev: LogLine, line: LogLine, chunk: int | None = None) -> Interval | str:
    """The prefill batch time two consecutive prefill lines pin, or why they pin none. A batch that
    filled the prefill chunk (``chunk``: the scenario's chunked_prefill_size) may be part of a longer
    prompt whose earlier chunks ``#cached-token`` does not count (SGLang logs a continuation's prefix
    as 0), so its attention work is unknown."""
    f, g = prev.figures, line.figures
    if "input_tps" not in g:
        return "no input throughput on the line (this version prints none)"
    shape = (g["new_seqs"], g["new_tokens"], g["cached_tokens"])
    if (f["new_seqs"], f["new_tokens"], f["cached_tokens"]) != shape:
        return "the two batches differ in shape"
    if f.get("running", 1) or g.get("running", 1):
        return "decode steps may have run between"
    if f.get("queue", 0) <= 0:
        return "the server may have waited for a request"
    if chunk and g["new_tokens"] >= chunk:
        return "a full chunk (its earlier chunks are not in #cached-token)"
    if g["input_tps"] <= 0 or g["new_tokens"] <= 0:
        return "zero throughput"
    return Interval("prefill", shape, g["new_tokens"] / g["input_tps"], line.lineno)


#: (kind of the earlier line, kind of the later line) -> what the pair pins.
PAIR_RULES = {("decode", "decode"): decode_interval, ("prefill", "prefill"): prefill_interval}


def parse_server_log(path: str | Path, chunk: int | None = None) -> ParsedLog:
    """Parse a server log into scheduler lines and intervals (``chunk``: the deployment's prefill
    chunk size, None: unchunked); CalibrationError names file and line."""
    p = Path(path)
    text_lines = read_text_lines(p)
    if not any(t.strip() for t in text_lines):
        raise CalibrationError(f"{path}: empty file; expected an SGLang server log")
    lines: list[LogLine] = []
    for i, t in enumerate(text_lines, 1):
        ln = parse_line(t, i, str(path))
        if ln is None:
            continue
        if lines and ln.rank != lines[0].rank:
            raise CalibrationError(
                f"{path}:{i}: lines of rank {ln.rank or '(none)'} after rank {lines[0].rank or '(none)'} "
                f"(line {lines[0].lineno}): give one rank's lines (one server, one DP rank)"
            )
        lines.append(ln)
    if not lines:
        other = foreign_server(text_lines)
        if other:
            raise CalibrationError(f"{path}:{other[0]}: {other[1]}, not an SGLang server log")
        raise CalibrationError(
            f"{path}: no 'Prefill batch' or 'Decode batch' line; expected an SGLang server log at its default log level"
        )
    intervals: list[Interval] = []
    skipped: dict[str, int] = {}
    for prev, line in itertools.pairwise(lines):
        rule = PAIR_RULES.get((prev.kind, line.kind))
        if rule is None:
            why = f"{line.kind} line after a {prev.kind} line (mixed work)"
        else:
            got = rule(prev, line, chunk)
            if isinstance(got, Interval):
                intervals.append(got)
                continue
            why = f"{line.kind}: {got}"
        skipped[why] = skipped.get(why, 0) + 1
    return ParsedLog(str(path), lines, intervals, skipped)
