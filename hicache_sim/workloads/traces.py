"""Trace loaders: Mooncake JSONL, Alibaba Bailian JSONL (both with prefix-chained block ids) and the
Azure LLM inference CSV (arrivals and lengths only). Every error cites file and line."""

from __future__ import annotations

import csv
import json
import zlib
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from .errors import WorkloadError
from .lazy import LazyRequests
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
        yield lineno, _decode(path, lineno, raw)


def _decode(path: str, lineno: int, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise WorkloadError(path, lineno, f"not UTF-8 text (byte {e.start} of the line)") from None


def _open_trace(path: str):
    p = Path(path)
    if not p.is_file():
        raise WorkloadError(path, None, "trace file not found" if not p.is_dir() else "is a folder, not a trace file")
    return p.open("rb")


def _object(path: str, lineno: int, text: str) -> dict:
    """The line's JSON object, or an error naming the line."""
    try:
        obj = _loads(text)
    except json.JSONDecodeError as e:
        raise WorkloadError(path, lineno, f"not valid JSON ({e.msg})") from None
    except RecursionError:
        raise WorkloadError(path, lineno, "JSON nested deeper than Python's parser goes: not a trace line") from None
    if type(obj) is not dict:
        raise WorkloadError(path, lineno, "expected a JSON object per line")
    return obj


def _read_jsonl(path: str, limit: int | None):
    """(byte offset, line number, raw bytes, object) of each line up to the ``limit``-th non-blank one;
    the object is None for a blank line."""
    with _open_trace(path) as f:
        n = offset = 0
        for lineno, raw in enumerate(f, 1):
            start = offset
            offset += len(raw)
            text = _decode(path, lineno, raw)
            if not text.strip():
                yield start, lineno, raw, None
                continue
            yield start, lineno, raw, _object(path, lineno, text)
            n += 1
            if limit is not None and n >= limit:
                return


@dataclass(frozen=True)
class _Format:
    """A block-id trace format: ``check(obj, path, lineno, block_size) -> arrival`` (unscaled seconds)
    validates a line (every error names it); ``make(obj, lineno, arrival_s, keys) -> Request`` builds it."""

    check: Callable[[dict, str, int, int], float]
    make: Callable[[dict, int, float, tuple[int, ...]], Request]
    #: The request id a line gets, or None where it is ``r<line number>`` (distinct by construction).
    rid: Callable[[dict], str] | None


def _stamp(path: str) -> tuple[int, int]:
    st = Path(path).stat()
    return st.st_size, st.st_mtime_ns


#: A trace whose requests hold at most this many page keys in all keeps the requests its checking pass
#: built, instead of parsing every line a second time when the request is read (a key costs 40-46
#: bytes as a Python int in a tuple: at most ~45 MB, next to ~200 MB of libraries a run imports; the
#: default scenario's trace holds 288,500 keys). Past it they are dropped and the trace is read lazily,
#: so a long trace still costs 24 bytes a request.
HELD_PAGE_KEYS = 1_000_000


class _Held:
    """Requests built by the checking pass (file order until sorted) and a CRC-32 of the bytes it read:
    before the first request is served the file is read once more and compared, so a file changed under
    an unchanged size and time is read and checked again line by line, as a long trace would be."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.keys = 0
        self.crc = 0
        self.end = 0  # bytes read by the checking pass


class _LineRequests:
    """Request ``i`` of a block-id trace: the checking pass's request where it kept them (``held``),
    else line ``lines[i]`` read again from its byte offset, checked again (a file changed under the run
    is an error naming the line, never a wrong request) and built."""

    def __init__(
        self, path, stamp, fmt, offsets, lines, arrivals, page_size, partial_pages, block_size, held=None
    ) -> None:
        self.path, self.fmt = path, fmt
        self.offsets, self.lines, self.arrivals = offsets, lines, arrivals
        self.page_size, self.partial_pages, self.block_size = page_size, partial_pages, block_size
        self.stamp = stamp
        self.held: _Held | None = held
        self._file = None

    def _open(self):
        if _stamp(self.path) != self.stamp:
            raise WorkloadError(self.path, None, "changed since its lines were checked (size or time differ)")
        f = self._file = _open_trace(self.path)
        held = self.held
        if held is not None and zlib.crc32(f.read(held.end)) != held.crc:
            self.held = None  # same size and time, other bytes: read and check each line again
        return f

    def __call__(self, i: int) -> Request:
        f = self._file
        if f is None:
            f = self._open()
        if self.held is not None:
            return self.held.requests[i]
        f.seek(self.offsets[i])
        lineno = self.lines[i]
        obj = _object(self.path, lineno, _decode(self.path, lineno, f.readline()))
        self.fmt.check(obj, self.path, lineno, self.block_size)
        keys = expand_blocks(obj["hash_ids"], obj["input_length"], self.block_size, self.page_size, self.partial_pages)
        return self.fmt.make(obj, lineno, self.arrivals[i], keys)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_file": None}

    def __del__(self) -> None:
        if self._file is not None:
            self._file.close()


def open_block_trace(
    fmt: _Format,
    path: str | Path,
    page_size: int,
    partial_pages: str,
    limit: int | None,
    time_scale: float,
    block_size: int,
) -> LazyRequests:
    """A block-id trace's requests in arrival order (file order on ties), built from the file when read.

    A first pass checks every line (so a bad line fails the run before it starts, whatever its place)
    and keeps per request its byte offset, line number and arrival time (24 bytes): what sorting by
    timestamp needs. It also builds the requests while they hold at most :data:`HELD_PAGE_KEYS` page
    keys and keeps them (each line parsed once); past that, page keys are made when a request is read."""
    path = str(path)
    _check_page_size(path, block_size, page_size)
    offsets, lines, arrivals = array("q"), array("q"), array("d")
    rids: set[str] = set()  # ids from the lines (a Bailian chat_id): checked distinct, then dropped
    stamp = _stamp(path) if Path(path).is_file() else None  # else _read_jsonl says what is wrong
    held: _Held | None = _Held()
    for offset, lineno, raw, obj in _read_jsonl(path, limit):
        if held is not None:
            held.crc = zlib.crc32(raw, held.crc)
            held.end = offset + len(raw)
        if obj is None:
            continue
        arrival = fmt.check(obj, path, lineno, block_size) * time_scale
        arrivals.append(arrival)
        offsets.append(offset)
        lines.append(lineno)
        if fmt.rid is not None:
            rids.add(fmt.rid(obj))
        if held is not None:
            keys = expand_blocks(obj["hash_ids"], obj["input_length"], block_size, page_size, partial_pages)
            held.keys += len(keys)
            if held.keys > HELD_PAGE_KEYS:
                held = None  # a long trace: read lazily
            else:
                held.requests.append(fmt.make(obj, lineno, arrival, keys))
    order = range(len(arrivals))
    if any(arrivals[i] > arrivals[i + 1] for i in range(len(arrivals) - 1)):
        order = sorted(order, key=arrivals.__getitem__)  # stable: file order on ties
        offsets, lines, arrivals = (array(a.typecode, map(a.__getitem__, order)) for a in (offsets, lines, arrivals))
        if held is not None:
            held.requests = list(map(held.requests.__getitem__, order))
    make = _LineRequests(path, stamp, fmt, offsets, lines, arrivals, page_size, partial_pages, block_size, held)
    unique = fmt.rid is None or len(rids) == len(arrivals)
    return LazyRequests(len(arrivals), make, arrivals, unique_rids=unique)


def _mooncake_check(obj: dict, path: str, lineno: int, block_size: int) -> float:
    ts, inp, outp = obj.get("timestamp"), obj.get("input_length"), obj.get("output_length")
    if not (type(ts) is int and type(inp) is int and type(outp) is int and ts >= 0 and inp >= 1 and outp >= 0):
        # The usual line passes the test above at once; a bad one gets _int_field's message.
        ts = _int_field(obj, "timestamp", path, lineno)
        inp = _int_field(obj, "input_length", path, lineno, 1)
        _int_field(obj, "output_length", path, lineno)
    ids = _hash_ids(obj, path, lineno)
    if len(ids) != -(-inp // block_size):
        raise WorkloadError(
            path,
            lineno,
            f"{len(ids)} hash_ids for input_length {inp}: expected ceil({inp}/{block_size}) = {-(-inp // block_size)}",
        )
    cached = obj.get("cached_tokens")  # optional: what the server found cached (trace convert; output/observed.py)
    if cached is not None and not (type(cached) is int and 0 <= cached <= inp):
        raise WorkloadError(
            path, lineno, f"field 'cached_tokens' must be null or an integer 0..input_length ({inp}), got {cached!r}"
        )
    return ts / 1000.0


def _mooncake_make(obj: dict, lineno: int, arrival_s: float, keys: tuple[int, ...]) -> Request:
    return Request(f"r{lineno}", arrival_s, obj["input_length"], obj["output_length"], keys)


def _bailian_check(obj: dict, path: str, lineno: int, block_size: int) -> float:
    if obj.get("chat_id") is None:
        raise WorkloadError(path, lineno, "missing field 'chat_id'")
    ts = obj.get("timestamp")
    if isinstance(ts, bool) or not isinstance(ts, (int, float)) or ts < 0:
        raise WorkloadError(path, lineno, f"field 'timestamp' must be a number of seconds >= 0, got {ts!r}")
    _int_field(obj, "input_length", path, lineno, 1)
    _int_field(obj, "output_length", path, lineno)
    _hash_ids(obj, path, lineno)
    return float(ts)


def _bailian_rid(obj: dict) -> str:
    return f"c{obj['chat_id']}"


def _bailian_make(obj: dict, lineno: int, arrival_s: float, keys: tuple[int, ...]) -> Request:
    chat = obj["chat_id"]
    parent = obj.get("parent_chat_id", -1)
    session = str(chat if parent in (-1, None) else parent)
    turn = obj.get("turn", 0) if isinstance(obj.get("turn", 0), int) else 0
    return Request(
        _bailian_rid(obj), arrival_s, obj["input_length"], obj["output_length"], keys, session=session, turn=turn
    )


MOONCAKE = _Format(_mooncake_check, _mooncake_make, None)
BAILIAN = _Format(_bailian_check, _bailian_make, _bailian_rid)


def open_mooncake(
    path: str | Path,
    page_size: int,
    *,
    partial_pages: str = "keep",
    limit: int | None = None,
    time_scale: float = 1.0,
    block_size: int = MOONCAKE_BLOCK_TOKENS,
) -> LazyRequests:
    """Mooncake FAST'25 trace: ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids``.

    Requests in timestamp order (file order on ties), read from the file when asked for (see
    :func:`open_block_trace`). ``time_scale`` multiplies arrival times.
    """
    return open_block_trace(MOONCAKE, path, page_size, partial_pages, limit, time_scale, block_size)


def open_bailian(
    path: str | Path,
    page_size: int,
    *,
    partial_pages: str = "keep",
    limit: int | None = None,
    time_scale: float = 1.0,
    block_size: int = BAILIAN_BLOCK_TOKENS,
) -> LazyRequests:
    """Alibaba Qwen-Bailian trace: ``chat_id``, ``parent_chat_id`` (-1 for a root), ``timestamp`` (s),
    ``input_length``, ``output_length``, ``turn``, ``hash_ids`` (16-token salted blocks); read lazily
    as :func:`open_mooncake`."""
    return open_block_trace(BAILIAN, path, page_size, partial_pages, limit, time_scale, block_size)


def load_mooncake(path: str | Path, page_size: int, **kw) -> list[Request]:
    """:func:`open_mooncake`'s requests as a list (held whole: for tools that reuse them)."""
    return list(open_mooncake(path, page_size, **kw))


def load_bailian(path: str | Path, page_size: int, **kw) -> list[Request]:
    """:func:`open_bailian`'s requests as a list."""
    return list(open_bailian(path, page_size, **kw))


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
