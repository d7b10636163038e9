"""Trace loaders: Mooncake JSONL, Alibaba Bailian JSONL (both with prefix-chained block ids) and the
Azure LLM inference CSV (arrivals and lengths only). Every error cites file and line."""

from __future__ import annotations

import csv
import json
from datetime import datetime
from pathlib import Path

from .errors import WorkloadError
from .records import Request, expand_blocks

TRACES_DIR = Path(__file__).resolve().parent.parent / "data" / "traces"
MOONCAKE_BLOCK_TOKENS = 512
BAILIAN_BLOCK_TOKENS = 16


# JSON gives exact ints, never int subclasses but bool: ``type(v) is int`` is "an integer, not a bool".
_INT_ONLY = frozenset((int,))


def _int_field(obj: dict, name: str, path: str, line: int, minimum: int = 0) -> int:
    v = obj.get(name)
    if type(v) is not int or v < minimum:
        raise WorkloadError(path, line, f"field {name!r} must be an integer >= {minimum}, got {v!r}")
    return v


def _hash_ids(obj: dict, path: str, line: int) -> list[int]:
    ids = obj.get("hash_ids")
    # One pass in C over the ids' types (a trace holds millions of ids).
    if type(ids) is not list or not _INT_ONLY.issuperset(map(type, ids)):
        raise WorkloadError(path, line, "field 'hash_ids' must be a list of integers")
    return ids


_DECODER = json.JSONDecoder()


_SCAN = _DECODER.scan_once


def _loads(text: str):
    """``json.loads(text)``, quicker for the usual line (a value from its first character, then only
    JSON whitespace); any other line goes to ``json.loads`` itself, so results and errors are its own."""
    try:
        obj, end = _SCAN(text, 0)  # what raw_decode(text) calls, without its frame
    except (StopIteration, json.JSONDecodeError):
        return json.loads(text)
    if end == len(text) or not text[end:].strip(" \t\n\r"):
        return obj
    return json.loads(text)


def _check_page_size(path: str, block_size: int, page_size: int) -> None:
    if page_size > block_size or block_size % page_size:
        raise WorkloadError(
            path,
            None,
            f"page_size {page_size} must divide the trace's {block_size}-token "
            "blocks (a page larger than a block cannot be formed)",
        )


def _utf8_lines(path: str, f):
    """Lines of a binary file as text; a line that is not UTF-8 is an error naming it."""
    for lineno, raw in enumerate(f, 1):
        try:
            yield lineno, raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise WorkloadError(path, lineno, f"not UTF-8 text (byte {e.start} of the line)") from None


def _read_jsonl(path: str, limit: int | None):
    p = Path(path)
    if not p.is_file():
        raise WorkloadError(path, None, "trace file not found" if not p.is_dir() else "is a folder, not a trace file")
    with p.open("rb") as f:
        n = 0
        for lineno, text in _utf8_lines(path, f):
            if not text.strip():
                continue
            try:
                obj = _loads(text)
            except json.JSONDecodeError as e:
                raise WorkloadError(path, lineno, f"not valid JSON ({e.msg})") from None
            if type(obj) is not dict:
                raise WorkloadError(path, lineno, "expected a JSON object per line")
            yield lineno, obj
            n += 1
            if limit is not None and n >= limit:
                return


def load_mooncake(
    path: str | Path,
    page_size: int,
    *,
    partial_pages: str = "keep",
    limit: int | None = None,
    time_scale: float = 1.0,
    block_size: int = MOONCAKE_BLOCK_TOKENS,
) -> list[Request]:
    """Mooncake FAST'25 trace: ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids``.

    Returns requests in timestamp order (file order on ties). ``time_scale`` multiplies arrival times.
    """
    path = str(path)
    _check_page_size(path, block_size, page_size)
    out = []
    for lineno, obj in _read_jsonl(path, limit):
        ts, inp, outp = obj.get("timestamp"), obj.get("input_length"), obj.get("output_length")
        if not (type(ts) is int and type(inp) is int and type(outp) is int and ts >= 0 and inp >= 1 and outp >= 0):
            # The usual line passes the test above at once; a bad one gets _int_field's message.
            ts = _int_field(obj, "timestamp", path, lineno)
            inp = _int_field(obj, "input_length", path, lineno, 1)
            outp = _int_field(obj, "output_length", path, lineno)
        ids = _hash_ids(obj, path, lineno)
        if len(ids) != -(-inp // block_size):
            raise WorkloadError(
                path,
                lineno,
                f"{len(ids)} hash_ids for input_length {inp}: expected "
                f"ceil({inp}/{block_size}) = {-(-inp // block_size)}",
            )
        keys = expand_blocks(ids, inp, block_size, page_size, partial_pages)
        out.append(Request(f"r{lineno}", ts / 1000.0 * time_scale, inp, outp, keys))
    out.sort(key=lambda r: r.arrival_s)
    return out


def load_bailian(
    path: str | Path,
    page_size: int,
    *,
    partial_pages: str = "keep",
    limit: int | None = None,
    time_scale: float = 1.0,
    block_size: int = BAILIAN_BLOCK_TOKENS,
) -> list[Request]:
    """Alibaba Qwen-Bailian trace: ``chat_id``, ``parent_chat_id`` (-1 for a root), ``timestamp`` (s),
    ``input_length``, ``output_length``, ``turn``, ``hash_ids`` (16-token salted blocks)."""
    path = str(path)
    _check_page_size(path, block_size, page_size)
    out = []
    for lineno, obj in _read_jsonl(path, limit):
        chat = obj.get("chat_id")
        if chat is None:
            raise WorkloadError(path, lineno, "missing field 'chat_id'")
        ts = obj.get("timestamp")
        if isinstance(ts, bool) or not isinstance(ts, (int, float)) or ts < 0:
            raise WorkloadError(path, lineno, f"field 'timestamp' must be a number of seconds >= 0, got {ts!r}")
        inp = _int_field(obj, "input_length", path, lineno, 1)
        outp = _int_field(obj, "output_length", path, lineno)
        ids = _hash_ids(obj, path, lineno)
        keys = expand_blocks(ids, inp, block_size, page_size, partial_pages)
        parent = obj.get("parent_chat_id", -1)
        session = str(chat if parent in (-1, None) else parent)
        turn = obj.get("turn", 0) if isinstance(obj.get("turn", 0), int) else 0
        out.append(Request(f"c{chat}", float(ts) * time_scale, inp, outp, keys, session=session, turn=turn))
    out.sort(key=lambda r: r.arrival_s)
    return out


AZURE_TIME_FORMAT = "%Y-%m-%d %H:%M:%S.%f"


def load_azure(path: str | Path, *, limit: int | None = None, time_scale: float = 1.0) -> list[tuple[float, int, int]]:
    """Azure LLM inference CSV: (arrival s from the first row, context tokens, generated tokens)."""
    path = str(path)
    p = Path(path)
    if not p.is_file():
        raise WorkloadError(path, None, "trace file not found" if not p.is_dir() else "is a folder, not a trace file")
    rows = []
    with p.open("rb") as f:
        reader = csv.reader(text for _, text in _utf8_lines(path, f))
        header = next(reader, None)
        want = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]
        if header != want:
            raise WorkloadError(path, 1, f"expected header {','.join(want)}, got {','.join(header or [])}")
        t0 = None
        for lineno, row in enumerate(reader, 2):
            if not row:
                continue
            if len(row) != 3:
                raise WorkloadError(path, lineno, f"expected 3 columns, got {len(row)}")
            try:
                t = datetime.strptime(row[0][:26], AZURE_TIME_FORMAT).timestamp()
            except ValueError:
                raise WorkloadError(path, lineno, f"TIMESTAMP {row[0]!r} is not 'YYYY-MM-DD HH:MM:SS.ffffff'") from None
            try:
                ctx, gen = int(row[1]), int(row[2])
            except ValueError:
                raise WorkloadError(path, lineno, "ContextTokens and GeneratedTokens must be integers") from None
            if ctx < 1 or gen < 0:
                raise WorkloadError(
                    path, lineno, f"ContextTokens must be >= 1 and GeneratedTokens >= 0, got {ctx}, {gen}"
                )
            t0 = t if t0 is None else t0
            rows.append(((t - t0) * time_scale, ctx, gen))
            if limit is not None and len(rows) >= limit:
                break
    return rows


def vendored_trace(name: str) -> Path:
    """Path of a trace shipped with the package (e.g. ``mooncake/conversation_trace.jsonl``)."""
    return Path(__file__).resolve().parent.parent / "data" / "traces" / name


def trace_path(path: str, base_dir: str | Path | None = None) -> Path:
    """``builtin:NAME`` -> a trace shipped with the package; relative paths resolve against
    ``base_dir`` (the scenario file's folder) when the file is not found from the working directory."""
    if path.startswith("builtin:"):
        return TRACES_DIR / path[len("builtin:") :]
    p = Path(path)
    if not p.is_absolute() and not p.exists() and base_dir is not None:
        alt = Path(base_dir) / p
        if alt.exists():
            return alt
    return p
