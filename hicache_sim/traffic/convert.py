"""``trace convert``: a request log to a Mooncake-format trace (``timestamp`` in ms from the first
arrival, ``input_length``, ``output_length``, ``hash_ids``: one chain-hash id per block of
``block_size`` prompt tokens). Prompts are tokenised, hashed and dropped: nothing of their text or
token ids reaches the output.

Where the log says what the server found cached (SGLang's ``cached_tokens``), every line gets a
``cached_tokens`` column (``null`` where one request's is not logged): a run of the trace then
compares it with the simulated hits (``output/observed.py``). When the trace's prompt length is not
the server's (a prompt tokenised again here), the cached share is kept: ``round(cached * input_length
/ prompt_tokens)``."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from ..workloads.errors import WorkloadError
from .blocks import BlockIds, chain_hashes
from .chat import ChatFormatError, render_chat
from .logs import LogRequest, ReadOptions, Skipped, read_log
from .tokenize import Tokenizer, load_tokenizer

DEFAULT_BLOCK_SIZE = 512  # Mooncake's published traces


@dataclass
class Converted:
    """The trace's lines (in arrival order) and what the report says about them."""

    lines: list[dict]
    skipped: list[Skipped]
    notes: list[str] = field(default_factory=list)
    tokenizer: str = ""
    blocks: int = 0
    span_s: float = 0.0  # first arrival to last: said beside the count, so a wrong time unit shows


def _unique_digests(key: tuple, n_tokens: int, block_size: int) -> list[bytes]:
    """Blocks no other request shares (a bench_serving request: only its length is known)."""
    n_blocks = -(-n_tokens // block_size)
    seed = repr(("length-only", *key)).encode()
    return [hashlib.blake2b(seed + i.to_bytes(8, "little"), digest_size=16).digest() for i in range(n_blocks)]


def _cached(req: LogRequest, n_tokens: int) -> int | None:
    """The server's cached tokens on the trace's prompt of ``n_tokens``: its share kept where the
    server counted another length (see the module docstring), never more than the prompt."""
    c = req.cached_tokens
    if c is None:
        return None
    if req.prompt_tokens and req.prompt_tokens != n_tokens:
        c = round(c * n_tokens / req.prompt_tokens)
    return min(c, n_tokens)


def _tokens(req: LogRequest, tokenizer: Tokenizer) -> list[int]:
    kind, value = req.prompt
    if kind == "messages":
        return render_chat(value, tokenizer)
    if kind == "text":
        return tokenizer.encode(value)
    return list(value)  # ids


def convert_log(
    path: str | Path,
    *,
    fmt: str = "auto",
    tokenizer: str | Path | None = None,
    block_size: int = DEFAULT_BLOCK_SIZE,
    strict: bool = False,
    run: int | None = None,
    time_unit: str = "auto",
) -> Converted:
    """Read, tokenise and hash the log at ``path``. ``strict``: the first line that cannot be converted
    is an error (``WorkloadError`` naming file and line) instead of a counted skip. ``time_unit``: the
    unit of bare-number timestamps (``auto``: ``clock.py``'s rule)."""
    if block_size < 1:
        raise WorkloadError(str(path), None, f"--block-size must be >= 1, got {block_size}")
    tok = load_tokenizer(tokenizer)
    read = read_log(path, fmt, ReadOptions(run=run, time_unit=time_unit))
    skipped = list(read.skipped)
    rows: list[tuple[float, int, int, list[bytes], int | None]] = []
    used_tokenizer = False
    scaled = 0
    for req in read.requests:
        if req.prompt[0] == "length":
            _, _, n = req.prompt[1]
            rows.append((req.arrival_s, n, req.output_tokens, _unique_digests(req.prompt[1], n, block_size), None))
            continue
        try:
            tokens = _tokens(req, tok)
        except ChatFormatError as e:
            skipped.append(Skipped(req.line, str(e)))  # chat messages come from JSON lines only
            continue
        used_tokenizer |= req.prompt[0] != "ids"
        if not tokens:
            skipped.append(Skipped(req.line, "the prompt has no tokens"))
            continue
        cached = _cached(req, len(tokens))
        scaled += cached is not None and cached != req.cached_tokens
        rows.append((req.arrival_s, len(tokens), req.output_tokens, chain_hashes(tokens, block_size), cached))
    skipped.sort(key=lambda s: s.line)
    if strict and skipped:
        s = skipped[0]
        if s.where:
            raise WorkloadError(s.where, None, f"{s.reason} (--strict)")
        raise WorkloadError(str(path), s.line, f"{s.reason} (--strict)")
    if not rows:
        first = ""
        if skipped:
            first = f" (first: {skipped[0].where or f'line {skipped[0].line}'}: {skipped[0].reason})"
        raise WorkloadError(str(path), None, f"no request could be converted{first}")
    rows.sort(key=lambda r: r[0])  # stable: file order on ties
    t0 = rows[0][0]
    ids = BlockIds()
    lines = [
        {
            "timestamp": round((arrival - t0) * 1000),
            "input_length": n_in,
            "output_length": n_out,
            "hash_ids": ids.ids(digests),
        }
        for arrival, n_in, n_out, digests, _ in rows
    ]
    notes = list(read.notes)
    observed = sum(r[4] is not None for r in rows)
    if observed:
        for line, row in zip(lines, rows, strict=True):
            line["cached_tokens"] = row[4]
        notes.append(
            f"{observed} requests carry the server's cached_tokens (column cached_tokens; a run of the trace "
            f"compares them with the simulated hits)"
            + (f", {scaled} scaled to the trace's prompt length" if scaled else "")
        )
    if used_tokenizer and not tok.exact:
        notes.append(f"no --tokenizer: token counts are approximate ({tok.name})")
    name = tok.name if used_tokenizer else "token ids from the log (exact)"
    if not used_tokenizer and all(r.prompt[0] == "length" for r in read.requests):
        name = "lengths from the log (no prompts)"
    return Converted(lines, skipped, notes, name, len(ids), rows[-1][0] - t0)


def trace_text(conv: Converted) -> str:
    """The trace as JSONL text (keys in Mooncake's order, one request a line)."""
    return "".join(json.dumps(line, separators=(", ", ": ")) + "\n" for line in conv.lines)
