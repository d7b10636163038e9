"""Synthetic workloads with prefix identity: multi-turn chat (SGLang bench_multiturn), independent
prompts (SGLang bench_serving's random dataset), shared-prefix groups, long-context document QA, and
Poisson arrivals over shared prefixes (optionally with Azure arrivals and lengths).

Token streams are never materialised: a page's key is a hash of (stream id, page index) for whole
pages and of (stream id, page index, tokens) for a partial page, so equal keys mean equal content
and an equal prefix. Randomness comes from one numpy Generator per subsystem, seeded from the
scenario seed.
"""

from __future__ import annotations

import dataclasses
import random

import numpy as np

from .client_loop import SenderSpec, no_load_order
from .records import Request
from .workload import ServingSpec, Workload

# Integer tags for stream ids: tuples of ints hash the same in every process (strings do not).
CLIENT, SYSTEM, QUESTION, DOC, QUERY, PREFIX, OWN, PROMPT, ANSWER = range(1, 10)


def _rng(seed: int, subsystem: str) -> np.random.Generator:
    """Independent, reproducible stream per subsystem (arrivals, lengths, order, ...)."""
    return np.random.default_rng([seed, sum(ord(c) * 131**i for i, c in enumerate(subsystem)) % (2**32)])


def stream_keys(stream: int, tokens: int, page_size: int, partial: str = "keep") -> tuple[int, ...]:
    """Page keys of the first ``tokens`` tokens of token stream ``stream``."""
    full = tokens // page_size
    keys = [hash((stream, j)) for j in range(full)]
    rest = tokens - full * page_size
    if rest and partial == "keep":
        keys.append(hash((stream, full, rest)))
    return tuple(keys)


def _finish_keys(stream: int, tokens: int, page_size: int) -> tuple[int, ...]:
    """Whole pages SGLang caches at finish: prompt + answer minus the last token, page-aligned."""
    return stream_keys(stream, max(0, tokens - 1), page_size, "drop")


def _lengths(rng: np.random.Generator, n: int, length: int, range_ratio: float) -> np.ndarray:
    if range_ratio >= 1.0:
        return np.full(n, length, dtype=np.int64)
    lo = max(1, int(length * range_ratio))
    return rng.integers(lo, length + 1, size=n)


def multiturn(spec, page_size: int, seed: int, partial: str = "keep") -> Workload:
    """bench_multiturn: round 0's prompt is a first question; round r's is the whole history (every
    earlier prompt and answer) plus a sub-question. Requests come in the closed loop's no-load order."""
    seed = spec.seed if spec.seed is not None else seed
    rng_len = _rng(seed, "lengths")
    c = spec.num_clients
    lo, rounds = spec.round_range()
    # bench_multiturn draws each client's round count first from its seeded stream (none when fixed);
    # the sender's pops and gaps continue that stream.
    stream = random.Random(seed)
    turns = [stream.randint(lo, rounds) for _ in range(c)] if lo < rounds else [rounds] * c
    sub_len = spec.sub_question_input_length or spec.request_length
    q_lens = np.empty((c, rounds), dtype=np.int64)
    q_lens[:, 0] = _lengths(rng_len, c, spec.request_length, spec.range_ratio)
    q_lens[:, 1:] = _lengths(rng_len, c * (rounds - 1), sub_len, spec.range_ratio).reshape(c, rounds - 1)
    o_lens = _lengths(rng_len, c * rounds, spec.output_length, spec.range_ratio).reshape(c, rounds)
    reqs = []
    for r in range(rounds):
        for k in range(c):
            if r >= turns[k]:
                continue
            key = hash((seed, CLIENT, k))
            hist = int(q_lens[k, :r].sum() + o_lens[k, :r].sum())
            inp = hist + int(q_lens[k, r])
            out = int(o_lens[k, r])
            keys = stream_keys(key, inp, page_size, partial)
            done = _finish_keys(key, inp + out, page_size)
            reqs.append(Request(f"c{k}r{r}", 0.0, inp, out, keys, session=f"c{k}", turn=r, finish_keys=done))
    sender = SenderSpec(
        policy=spec.ready_queue_policy,
        seed=seed,
        rate=spec.request_rate,
        distribution=spec.distribution,
        max_parallel=spec.max_parallel,
        round_barrier=spec.round_barrier,
        barrier_pause_s=spec.round_barrier_pause_s,
        clients=tuple(f"c{k}" for k in range(c)),
        rng_state=stream.getstate(),
    )
    ordered = [dataclasses.replace(q, arrival_s=t) for q, t in no_load_order(reqs, sender)]
    return Workload(ordered, sender)


#: bench_serving's warm-up answers at most this many tokens (``min(output_len, 32)``).
WARMUP_OUTPUT_CAP = 32


def bench_serving_lengths(spec, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(prompt lengths, answer lengths, send offsets in s) as bench_serving (SGLang 0.5.7) draws them from
    numpy's global generator seeded with ``--seed``: ``sample_random_requests`` draws the prompt lengths,
    then the answer lengths, each uniform in [max(1, int(r L)), L]; ``get_request`` then draws one
    exponential gap after each request but the last (none at an infinite rate). The ShareGPT sampling
    in between uses Python's ``random``, not numpy. (SGLang 0.5.6 and earlier drew answers from
    [int(r L), L], which can be 0 tokens: ``answer_floor`` 0.)"""
    rs = np.random.RandomState(seed)
    n, rr = spec.num_prompts, spec.random_range_ratio

    def lengths(full: int, floor: int) -> np.ndarray:
        return rs.randint(max(int(full * rr), floor), full + 1, size=n)

    inp = lengths(spec.random_input_len, 1)
    out = lengths(spec.random_output_len, spec.answer_floor)
    rate = spec.rate()
    if np.isinf(rate) or n == 1:
        send = np.zeros(n)
    else:
        send = np.concatenate([[0.0], np.cumsum([rs.exponential(1.0 / rate) for _ in range(n - 1)])])
    return inp, out, send


def _answered_keys(prompt: int, answer: int, tokens: int, out: int, page_size: int) -> tuple[int, ...]:
    """Whole pages SGLang caches when a request of ``tokens`` prompt tokens (stream ``prompt``) finishes
    an ``out``-token answer (stream ``answer``, starting where the prompt ends): prompt + answer minus
    the last token, page-aligned; the page holding the prompt's end is the answer stream's."""
    whole = tokens // page_size
    total = max(0, tokens + out - 1) // page_size
    return stream_keys(prompt, whole * page_size, page_size, "drop") + tuple(
        hash((answer, j)) for j in range(whole, total)
    )


def bench_serving(spec, page_size: int, seed: int, partial: str = "keep") -> Workload:
    """bench_serving's random dataset: independent prompts (no two share a prefix); first the runs made
    before on the same server (each all its prompts, at its concurrency, after the one before it
    finished), then the warm-up copies of prompt 0, then the run. Prompt i of every run with the seed is
    cut from one token stream (a longer one extends a shorter one); its greedy answer continues the
    prompt, so equal prompts have equal answers. A request caches prompt + answer when it finishes, as
    SGLang does. An answer drawn as 0 tokens (``answer_floor`` 0) is simulated as 1: the prefill's own
    token."""
    seed = spec.seed if spec.seed is not None else seed
    inp, out, send = bench_serving_lengths(spec, seed)

    def request(rid: str, t: float, i: int, tokens: int, answer: int) -> Request:
        stream = hash((seed, PROMPT, i))
        keys = stream_keys(stream, tokens, page_size, partial)
        done = _answered_keys(stream, hash((seed, ANSWER, i, tokens)), tokens, answer, page_size)
        return Request(rid, t, tokens, answer, keys, finish_keys=done)

    reqs: list[Request] = []
    phases: list[tuple[int, int | None]] = []
    for k, run in enumerate(spec.earlier_runs):
        earlier = spec.model_copy(update={**run.model_dump(), "request_rate": "inf", "earlier_runs": []})
        e_inp, e_out, _ = bench_serving_lengths(earlier, seed)
        reqs.extend(
            request(f"run{k}p{i}", 0.0, i, int(n), max(1, int(o))) for i, (n, o) in enumerate(zip(e_inp, e_out))
        )
        phases.append((len(e_inp), run.max_concurrency))
    warm_out = max(1, min(int(out[0]), WARMUP_OUTPUT_CAP))
    reqs.extend(request(f"warmup{w}", 0.0, 0, int(inp[0]), warm_out) for w in range(spec.warmup_requests))
    phases.append((spec.warmup_requests, None))  # asyncio.gather of the warm-up requests: all at once
    unmeasured = len(reqs)
    for i in range(spec.num_prompts):
        reqs.append(request(f"p{i}", float(send[i]), i, int(inp[i]), max(1, int(out[i]))))
    return Workload(reqs, serving=ServingSpec(spec.max_concurrency, unmeasured, tuple(phases)))


def shared_prefix(spec, page_size: int, seed: int, partial: str = "keep") -> Workload:
    """Groups sharing a system prompt, each with its own questions (generated shared prefix)."""
    rng = _rng(seed, "arrivals")
    order = _rng(seed, "order")
    items = [(g, q) for g in range(spec.num_groups) for q in range(spec.prompts_per_group)]
    order.shuffle(items)
    gaps = rng.exponential(1.0 / spec.request_rate, size=len(items))
    reqs = []
    t = 0.0
    sys_len = spec.system_prompt_length
    for i, (g, q) in enumerate(items):
        t += float(gaps[i])
        prefix = stream_keys(hash((seed, SYSTEM, g)), sys_len - sys_len % page_size, page_size, "drop")
        # The question starts a new stream after the (page-aligned) shared system prompt.
        qstream = hash((seed, QUESTION, g, q))
        q_tokens = sys_len % page_size + spec.question_length
        keys = prefix + stream_keys(qstream, q_tokens, page_size, partial)
        reqs.append(Request(f"g{g}q{q}", t, sys_len + spec.question_length, spec.output_length, keys))
    return Workload(reqs)


def long_context(spec, page_size: int, seed: int, partial: str = "keep") -> Workload:
    """Document QA: each query = a long document + a question (bench_long_context)."""
    rng = _rng(seed, "arrivals")
    items = [(d, q) for d in range(spec.num_documents) for q in range(spec.queries_per_document)]
    if spec.order == "round_robin":
        items.sort(key=lambda x: (x[1], x[0]))
    gaps = rng.exponential(1.0 / spec.request_rate, size=len(items))
    reqs = []
    t = 0.0
    ctx = spec.context_length - spec.context_length % page_size
    for i, (d, q) in enumerate(items):
        t += float(gaps[i])
        doc = stream_keys(hash((seed, DOC, d)), ctx, page_size, "drop")
        qs = hash((seed, QUERY, d, q))
        keys = doc + stream_keys(qs, spec.context_length - ctx + spec.question_length, page_size, partial)
        reqs.append(Request(f"d{d}q{q}", t, spec.context_length + spec.question_length, spec.output_length, keys))
    return Workload(reqs)


def poisson_synthetic(
    spec, page_size: int, seed: int, partial: str = "keep", arrivals_lengths: list[tuple[float, int, int]] | None = None
) -> Workload:
    """Poisson arrivals; each prompt starts with one of ``num_prefixes`` shared prefixes covering
    ``shared_fraction`` of it. With ``arrivals_lengths`` (Azure rows) times and lengths come from it."""
    rng = _rng(seed, "arrivals")
    pick = _rng(seed, "prefix")
    if arrivals_lengths is None:
        n = spec.num_requests
        times = np.cumsum(rng.exponential(1.0 / spec.request_rate, size=n))
        rows = [(float(times[i]), spec.input_length, spec.output_length) for i in range(n)]
    else:
        rows = arrivals_lengths[: spec.num_requests]
    reqs = []
    for i, (t, inp, out) in enumerate(rows):
        shared = int(inp * spec.shared_fraction) // page_size * page_size
        pfx = int(pick.integers(spec.num_prefixes))
        keys = stream_keys(hash((seed, PREFIX, pfx)), shared, page_size, "drop")
        own = hash((seed, OWN, i))
        keys = keys + stream_keys(own, inp - shared, page_size, partial)
        reqs.append(Request(f"p{i}", float(t), int(inp), int(out), keys))
    return Workload(reqs)
