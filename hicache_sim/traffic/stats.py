"""``trace stats``: what an operator wants to see of a trace before simulating it.

Requests and their rate over time, prompt and answer lengths, the ideal hit rate (a block is a hit
when an earlier request's prompt held the same chain hash: an infinite cache that keeps every
prompt block) and the reuse distance of every block reference: the number of distinct other blocks
referenced since the same block was last referenced. A block-level LRU cache of ``C`` blocks hits
exactly the references whose reuse distance is below ``C``, so the distribution reads directly as
hit rate vs cache size (for that idealised cache, not for SGLang's radix tree, which also matches
only whole prefixes, reserves the last token and evicts leaves first: ``hicache-sim run`` gives
those numbers).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..workloads.records import Request

QUANTILES = (0.5, 0.9, 0.99)


@dataclass(frozen=True)
class BlockRefs:
    """Every prompt block reference in arrival order: its block id and its token count."""

    ids: np.ndarray
    tokens: np.ndarray


def block_refs(requests: Sequence[Request], block_size: int) -> BlockRefs:
    """The reference stream of requests whose ``page_keys`` are their block ids (page size = block)."""
    ids, toks = [], []
    for r in requests:
        n = len(r.page_keys)
        ids.extend(r.page_keys)
        toks.extend([block_size] * (n - 1))
        if n:
            toks.append(r.input_tokens - block_size * (n - 1))
    return BlockRefs(np.asarray(ids, dtype=np.int64), np.asarray(toks, dtype=np.int64))


def reuse_distances(ids: Sequence[int]) -> np.ndarray:
    """Per reference: distinct other blocks referenced since its previous reference, or -1 for a
    first reference. A Fenwick tree over positions marks each block's latest reference: O(n log n)."""
    n = len(ids)
    tree = [0] * (n + 1)
    last: dict[int, int] = {}
    out = np.full(n, -1, dtype=np.int64)
    for t, h in enumerate(ids.tolist() if isinstance(ids, np.ndarray) else ids):
        p = last.get(h)
        if p is not None:
            s, i = 0, p + 1  # active marks at positions <= p
            while i:
                s += tree[i]
                i -= i & -i
            out[t] = len(last) - s
            i = p + 1
            while i <= n:
                tree[i] -= 1
                i += i & -i
        i = t + 1
        while i <= n:
            tree[i] += 1
            i += i & -i
        last[h] = t
    return out


def _dist(values: np.ndarray) -> dict:
    if not len(values):
        return {"mean": 0.0, "max": 0, **{f"p{round(q * 100)}": 0 for q in QUANTILES}}
    return {
        "mean": round(float(values.mean()), 1),
        **{f"p{round(q * 100)}": int(np.quantile(values, q, method="lower")) for q in QUANTILES},
        "max": int(values.max()),
    }


def rate_over_time(arrivals: np.ndarray, bins: int = 60) -> tuple[float, np.ndarray]:
    """(bin width in s, requests/s per bin): ``bins`` equal bins spanning first to last arrival (the
    last arrival falls in the last bin), so no bin is a partial one."""
    span = float(arrivals.max() - arrivals.min()) if len(arrivals) else 0.0
    if span <= 0:
        return 1.0, np.asarray([float(len(arrivals))])
    width = span / bins
    index = np.minimum(((arrivals - arrivals.min()) / width).astype(np.int64), bins - 1)
    return width, np.bincount(index, minlength=bins) / width


def lru_curve(distances: np.ndarray, tokens: np.ndarray, total_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """(capacity in blocks, token hit rate of a block-level LRU cache that size), at every capacity
    where the rate changes."""
    reused = distances >= 0
    d, w = distances[reused], tokens[reused]
    if not len(d):
        return np.asarray([1]), np.asarray([0.0])
    order = np.argsort(d, kind="stable")
    d, w = d[order], w[order]
    caps, idx = np.unique(d + 1, return_index=True)  # capacity c hits every distance < c
    cum = np.cumsum(w)
    ends = np.append(idx[1:], len(d)) - 1
    return caps, cum[ends] / total_tokens


def trace_stats(requests: Sequence[Request], block_size: int) -> tuple[dict, dict]:
    """(summary for ``stats.json``, arrays for the figure)."""
    arrivals = np.asarray([r.arrival_s for r in requests], dtype=float)
    prompt = np.asarray([r.input_tokens for r in requests], dtype=np.int64)
    answer = np.asarray([r.output_tokens for r in requests], dtype=np.int64)
    refs = block_refs(requests, block_size)
    dist = reuse_distances(refs.ids)
    total_tokens = int(refs.tokens.sum())
    hit_tokens = int(refs.tokens[dist >= 0].sum())
    caps, rates = lru_curve(dist, refs.tokens, total_tokens or 1)
    width, rate = rate_over_time(arrivals)
    ideal = hit_tokens / total_tokens if total_tokens else 0.0
    needed = {}
    for share in (0.5, 0.9, 0.99):
        k = int(np.searchsorted(rates, share * ideal - 1e-12)) if ideal > 0 else 0
        needed[f"{round(share * 100)}%"] = int(caps[min(k, len(caps) - 1)]) * block_size
    span = float(arrivals.max() - arrivals.min()) if len(arrivals) else 0.0
    reused = dist[dist >= 0]
    summary = {
        "requests": len(requests),
        "duration_s": round(span, 3),
        "mean_rate_per_s": round(len(requests) / span, 3) if span > 0 else None,
        "peak_rate_per_s": round(float(rate.max()), 3),
        "rate_bin_s": round(width, 6),
        "block_size": block_size,
        "prompt_tokens": {"total": int(prompt.sum()), **_dist(prompt)},
        "output_tokens": {"total": int(answer.sum()), **_dist(answer)},
        "blocks": {"references": len(refs.ids), "distinct": len(np.unique(refs.ids))},
        "ideal_hit_rate": round(ideal, 4),
        "ideal_hit_tokens": hit_tokens,
        "ideal_hit_rate_definition": "token-weighted share of prompt blocks whose chain hash an earlier prompt held",
        "reuse_distance_blocks": _dist(reused),
        "reuse_distance_tokens": {
            k: (v * block_size if k != "mean" else round(v * block_size, 1)) for k, v in _dist(reused).items()
        },
        "lru_tokens_for_share_of_ideal": needed,
    }
    arrays = {
        "arrivals": arrivals,
        "rate_bin_s": width,
        "rate": rate,
        "prompt": prompt,
        "answer": answer,
        "reuse_tokens": reused * block_size,
        "lru_caps_tokens": caps * block_size,
        "lru_rates": rates,
        "ideal": ideal,
    }
    return summary, arrays


def _quantiles(d: dict) -> str:
    return f"p50 {d['p50']:,}  p90 {d['p90']:,}  p99 {d['p99']:,}  max {d['max']:,}"


def stats_text(name: str, s: dict) -> str:
    """The summary as the lines ``trace stats`` prints."""
    p, o, r = s["prompt_tokens"], s["output_tokens"], s["reuse_distance_tokens"]
    rate = f"{s['mean_rate_per_s']:.2f}/s mean" if s["mean_rate_per_s"] is not None else "all at once"
    need = ", ".join(f"{k}: {v:,}" for k, v in s["lru_tokens_for_share_of_ideal"].items())
    return "\n".join(
        [
            f"{name}: {s['requests']:,} requests over {s['duration_s']:,.1f} s ({rate}, peak "
            f"{s['peak_rate_per_s']:.2f}/s in {s['rate_bin_s']:.3g} s bins)",
            f"prompt tokens: {_quantiles(p)}  (total {p['total']:,})",
            f"output tokens: {_quantiles(o)}  (total {o['total']:,})",
            f"blocks of {s['block_size']} tokens: {s['blocks']['references']:,} references, "
            f"{s['blocks']['distinct']:,} distinct",
            f"ideal (infinite-cache) hit rate: {s['ideal_hit_rate']:.4f} of prompt tokens",
            f"reuse distance (tokens): {_quantiles(r)}",
            f"block-level LRU capacity (tokens) reaching this share of the ideal hit rate: {need}",
        ]
    )
