"""bench_serving's mooncake dataset (``--dataset-name mooncake``, SGLang 0.5.23
``sglang/benchmark/datasets/mooncake.py`` and ``benchmark/serving.py``), request for request.

What bench_serving does with a Mooncake trace, and what this builder does the same way:

- It reads the first ``--num-prompts`` records of the file (``--dataset-path``, else the trace
  ``--mooncake-workload`` names, downloaded from the Mooncake repository's ``FAST25-release``) and
  sorts them by ``timestamp`` (stable). Record ``k`` is sent at ``(timestamp_k - timestamp_0) / 1000 x
  --mooncake-slowdown-factor`` seconds after the run starts; ``--request-rate`` is ignored.
- The trace's ``input_length`` is not read. The prompt is text built from ``hash_ids``: per id, the
  id's digits followed by ``hi`` 128 times (space-separated), then ``Tell me a story based on this
  context.``; two records share a prefix of text exactly as far as they share leading hash ids.
- ``--mooncake-num-rounds N`` sends N requests per record, all at its time (a burst, each through the
  ``--max-concurrency`` semaphore): round r is the chat of user turns ``Round i: <text>`` (i <= r) with
  placeholder answers ``story`` x output_length between them, rendered by the tokenizer's chat template,
  so round r's prompt starts with round r-1's. Every round asks for ``output_length`` tokens (256 when
  the record has none).
- The warm-up (``--warmup-requests`` copies, before the run, unmeasured) is the file's first record
  with 512 ``hi`` per id, the suffix ``Can you tell me a detailed story in 1000 words?``, no chat
  template, and an answer of at most 32 tokens.

Tokens: prompts are tokenised as text, so their lengths and shared prefixes come from the text as a
server's would. With ``tokenizer`` (a local ``tokenizer.json`` or model folder) the counts are that
tokenizer's; the chat template is ChatML (``traffic/chat.py``) whatever the model's own is (a few
tokens per message more or less, the same in every request). Without it, a built-in word-level count
stands in for a byte-level BPE of the Llama 3 / DeepSeek-V3 kind: the text is split as their
pre-tokenisers split it (a word with its leading space, a run of up to 3 digits, punctuation) and each
piece is one token, which holds for this text's pieces (`` hi``, `` story``, the suffix's words,
numbers below 1000) in such vocabularies; a tokenizer splitting digits one by one (Qwen2) gives a few
tokens more per id. Page keys chain the pages' token ids (equal keys: equal tokens up to that page).
A request caches its prompt and its answer when it finishes; the answer is greedy, so equal prompts
(the warm-up's copies, records with equal hash ids) leave equal answers, and no later round resends it
(the next round carries a placeholder).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..traffic.chat import GENERATION_PROMPT, MESSAGE_END, MESSAGE_HEADER
from .errors import WorkloadError
from .records import Request
from .traces import trace_path
from .workload import ServingSpec, Workload

#: The traces ``--mooncake-workload`` names that ship with hicache-sim (the files bench_serving
#: downloads: data/traces/mooncake/SOURCE.md); the others must be given as ``dataset_path``.
SHIPPED = {
    "conversation": "builtin:mooncake/conversation_trace.jsonl",
    "synthetic": "builtin:mooncake/synthetic_trace.jsonl",
}
#: Where bench_serving 0.5.23 downloads each (``MOONCAKE_DATASET_URL``), for the message.
DOWNLOADED = {
    "mooncake": "FAST25-release/arxiv-trace/mooncake_trace.jsonl",
    "conversation": "FAST25-release/traces/conversation_trace.jsonl",
    "synthetic": "FAST25-release/traces/synthetic_trace.jsonl",
    "toolagent": "FAST25-release/traces/toolagent_trace.jsonl",
}
HI_PER_ID = 128  # the rounds' prompts
HI_PER_ID_WARMUP = 512  # the warm-up prompt
SUFFIX = "Tell me a story based on this context."
WARMUP_SUFFIX = "Can you tell me a detailed story in 1000 words?"
ANSWER_DEFAULT = 256  # a record without output_length, in the rounds
WARMUP_ANSWER_CAP = 32  # the warm-up's answer: min(output_length (default 32), 32)
PLACEHOLDER = "story"
# Integer tags: tuples of ints hash the same in every process (strings do not).
_CHAIN, _ANSWER = 101, 102


@dataclass(frozen=True)
class Record:
    """One trace line as bench_serving reads it."""

    line: int
    timestamp: float  # ms
    hash_ids: tuple[int, ...]
    output_length: int | None


def dataset_file(spec, base_dir: str | Path | None) -> Path:
    """The trace bench_serving reads: ``dataset_path``, else the shipped copy of ``mooncake_workload``'s."""
    if spec.dataset_path is not None:
        return trace_path(spec.dataset_path, base_dir)
    if spec.mooncake_workload not in SHIPPED:
        raise WorkloadError(
            f"workload.bench_serving.mooncake_workload {spec.mooncake_workload}",
            None,
            f"that trace ({DOWNLOADED[spec.mooncake_workload]} of kvcache-ai/Mooncake) does not ship with "
            f"hicache-sim; give its file as dataset_path (shipped: {', '.join(SHIPPED)})",
        )
    return trace_path(SHIPPED[spec.mooncake_workload])


def read_records(path: Path, limit: int) -> list[Record]:
    """The first ``limit`` non-blank lines of a Mooncake trace, in file order, each checked."""
    out: list[Record] = []
    try:
        with open(path, "rb") as f:  # decoded line by line: an error names its line
            for i, raw in enumerate(f, 1):
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise WorkloadError(str(path), i, "not UTF-8 text; expected a Mooncake JSONL trace") from None
                if not text.strip():
                    continue
                out.append(_record(path, i, text))
                if len(out) == limit:
                    break
    except OSError as e:
        reason = (e.strerror or type(e).__name__).lower()
        raise WorkloadError(str(path), None, f"cannot read the trace ({reason})") from None
    if not out:
        raise WorkloadError(str(path), None, "trace has no requests")
    return out


def _record(path: Path, line: int, text: str) -> Record:
    def bad(what: str) -> WorkloadError:
        return WorkloadError(str(path), line, what)

    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise bad(f"not a JSON object ({e.msg})") from None
    except RecursionError:
        raise bad("JSON nested too deep; expected a flat object with timestamp and hash_ids") from None
    if not isinstance(obj, dict):
        raise bad("expected a JSON object with timestamp and hash_ids")
    ts = obj.get("timestamp")
    if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts):
        raise bad(f"timestamp: expected a number of milliseconds, got {ts!r}")
    ids = obj.get("hash_ids", [])
    if not isinstance(ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) and h >= 0 for h in ids):
        raise bad("hash_ids: expected a list of non-negative integers")
    out = obj.get("output_length")
    if out is not None and (isinstance(out, bool) or not isinstance(out, int) or out < 0):
        raise bad(f"output_length: expected a non-negative integer, got {out!r}")
    return Record(line, float(ts), tuple(ids), out)


def user_text(hash_ids: tuple[int, ...], hi: int, suffix: str) -> str:
    """The prompt text bench_serving builds from a record's hash ids."""
    words = " ".join(["hi"] * hi)
    return "".join(f"{h}{words}" for h in hash_ids) + suffix


# ----------------------------------------------------------------------------------------------------
# Tokens


#: A Llama 3 / cl100k style pre-tokeniser on ASCII text (the only text built here): contractions, a
#: word with one leading non-letter, up to 3 digits, punctuation with its leading space, newlines, spaces.
_PIECES = re.compile(
    r"'(?:s|t|re|ve|m|ll|d)|[^\r\nA-Za-z0-9]?[A-Za-z]+|[0-9]{1,3}| ?[^\sA-Za-z0-9]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_SPECIAL = re.compile(r"(<\|[a-z_]+\|>)")


def word_tokenizer() -> Callable[[str], list[int]]:
    """The built-in count: each pre-token piece is one token; ``<|...|>`` markers one token each. Ids
    are numbered in order of first appearance (one table per build: no process-wide state)."""
    table: dict[str, int] = {}

    def encode(text: str) -> list[int]:
        ids: list[int] = []
        for part in _SPECIAL.split(text):
            if not part:
                continue
            pieces = [part] if _SPECIAL.fullmatch(part) else _PIECES.findall(part)
            ids.extend(table.setdefault(p, len(table)) for p in pieces)
        return ids

    return encode


class PageChain:
    """Page keys of a growing token sequence: page j's key hashes page j - 1's key and page j's tokens,
    so two prompts share a key exactly where they share every token up to that page's end. Whole pages
    are keyed once as the sequence grows (a session's rounds resend it: linear, not quadratic, work)."""

    def __init__(self, page_size: int) -> None:
        self.page_size = page_size
        self.tokens: list[int] = []
        self.keys: list[int] = []

    def extend(self, tokens: list[int]) -> None:
        """Append ``tokens`` and key the pages they complete (mutates)."""
        self.tokens.extend(tokens)
        p = self.page_size
        while (len(self.keys) + 1) * p <= len(self.tokens):
            j = len(self.keys)
            prev = self.keys[-1] if self.keys else _CHAIN
            self.keys.append(hash((prev, tuple(self.tokens[j * p : (j + 1) * p]))))

    def prompt(self, tail: list[int], partial: str) -> tuple[int, tuple[int, ...], int]:
        """(tokens, page keys, digest of every token) of the sequence followed by ``tail``, without
        appending it (reads only). A last partial page is a page with ``keep``, left out with ``drop``;
        the digest covers it either way (equal digests: equal prompts)."""
        p = self.page_size
        rest = self.tokens[len(self.keys) * p :] + tail
        keys = list(self.keys)
        prev = keys[-1] if keys else _CHAIN
        for start in range(0, len(rest), p):
            piece = rest[start : start + p]
            prev = hash((prev, tuple(piece)))
            if len(piece) == p or partial == "keep":
                keys.append(prev)
        return len(self.tokens) + len(tail), tuple(keys), prev


def _answered(keys: tuple[int, ...], tokens: int, out: int, page_size: int, prompt: int) -> tuple[int, ...]:
    """Whole pages SGLang caches when the request finishes: prompt + answer minus the last token. The
    answer is greedy (bench_serving's ``--temperature`` 0): a function of the whole prompt (its digest
    ``prompt``) and of its length, so equal prompts leave equal answers and no other request has them."""
    whole = tokens // page_size
    total = max(0, tokens + out - 1) // page_size
    return keys[:whole] + tuple(hash((_ANSWER, prompt, j)) for j in range(whole, total))


# ----------------------------------------------------------------------------------------------------
# The workload


def build(spec, ctx) -> Workload:
    """bench_serving's mooncake run: warm-up copies of the file's first record, then every record's
    rounds at its (scaled) time, through the concurrency semaphore."""
    from ..scenario.schema import MAX_GENERATED_PAGES  # the cap every generated workload has
    from ..traffic.tokenize import load_tokenizer

    path = dataset_file(spec, ctx.base_dir)
    records = read_records(path, spec.num_prompts)
    if spec.tokenizer is None:
        encode = word_tokenizer()
    else:
        where = trace_path(spec.tokenizer, ctx.base_dir)
        if not where.exists():
            raise WorkloadError(
                str(where),
                None,
                "workload.bench_serving.tokenizer: no such file or folder (a local tokenizer.json or model "
                "folder; nothing is downloaded)",
            )
        encode = load_tokenizer(where).encode
    page, partial = ctx.page_size, ctx.partial_pages
    header = {role: encode(MESSAGE_HEADER.format(role=role)) for role in ("user", "assistant")}
    end, generation = encode(MESSAGE_END), encode(GENERATION_PROMPT)
    pages = 0
    reqs: list[Request] = []

    def add(
        rid: str, t: float, prompt: tuple[int, tuple[int, ...], int], out: int, session: str | None, turn: int
    ) -> None:
        nonlocal pages
        tokens, keys, digest = prompt
        pages += len(keys)
        if pages > MAX_GENERATED_PAGES:
            raise WorkloadError(
                f"{path}",
                None,
                f"workload.bench_serving: more than {MAX_GENERATED_PAGES:,} prompt pages by request {len(reqs) + 1:,}; "
                "lower num_prompts or mooncake_num_rounds, or raise cache.page_size",
            )
        done = _answered(keys, tokens, out, page, digest)
        reqs.append(Request(rid, t, tokens, out, keys, session=session, turn=turn, finish_keys=done))

    first = records[0]  # the warm-up: the file's first record, before the sort
    warm = PageChain(page)
    warm_prompt = warm.prompt(encode(user_text(first.hash_ids, HI_PER_ID_WARMUP, WARMUP_SUFFIX)), partial)
    warm_out = max(1, min(WARMUP_ANSWER_CAP if first.output_length is None else first.output_length, WARMUP_ANSWER_CAP))
    for w in range(spec.warmup_requests):
        add(f"warmup{w}", 0.0, warm_prompt, warm_out, None, 0)
    unmeasured = len(reqs)

    ordered = sorted(records, key=lambda r: r.timestamp)
    t0 = ordered[0].timestamp
    for k, rec in enumerate(ordered):
        t = (rec.timestamp - t0) / 1000.0 * spec.mooncake_slowdown_factor
        base = user_text(rec.hash_ids, HI_PER_ID, SUFFIX)
        out = ANSWER_DEFAULT if rec.output_length is None else rec.output_length
        answer = header["assistant"] + encode(" ".join([PLACEHOLDER] * out)) + end
        chain = PageChain(page)
        for i in range(spec.mooncake_num_rounds):
            if i:
                chain.extend(answer)
            chain.extend(header["user"] + encode(f"Round {i + 1}: {base}") + end)
            add(f"s{k}r{i + 1}", t, chain.prompt(generation, partial), max(1, out), f"s{k}", i + 1)
    phases = ((unmeasured, None),)
    return Workload(reqs, serving=ServingSpec(spec.max_concurrency, unmeasured, phases))
