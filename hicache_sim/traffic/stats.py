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

from collections import Counter
from collections.abc import Sequence

import numpy as np

from ..workloads.lazy import arrival_times
from ..workloads.records import Request

QUANTILES = (0.5, 0.9, 0.99)


class ReuseDistances:
    """Reuse distances of a reference stream fed in pieces: per reference, the distinct other blocks
    referenced since its previous reference, or -1 for a first one. A Fenwick tree over positions marks
    each block's latest reference; when the positions run out the marks are renumbered in order, so the
    state is O(distinct blocks), not O(references). O(log) per reference, amortised."""

    def __init__(self, min_positions: int = 1 << 16) -> None:
        self.min_positions = min_positions
        self.last: dict[int, int] = {}  # block -> position of its latest reference (1-based)
        self.tree = [0] * (min_positions + 1)
        self.next = 1

    def _compact(self) -> None:
        """Renumber the marks 1..D in position order and rebuild the tree with room for 2D more."""
        blocks = sorted(self.last, key=self.last.__getitem__)
        size = max(self.min_positions, 3 * len(blocks))
        tree = [0] * (size + 1)
        for i, h in enumerate(blocks, 1):
            self.last[h] = i
            tree[i] = 1
        for i in range(1, size + 1):  # each node adds its sum to its parent: the tree in O(size)
            j = i + (i & -i)
            if j <= size:
                tree[j] += tree[i]
        self.tree, self.next = tree, len(blocks) + 1

    def feed(self, ids: Sequence[int]) -> list[int]:
        """Distances of the next references ``ids``."""
        out = []
        last, tree = self.last, self.tree
        n = len(tree) - 1
        for h in ids:
            if self.next > n:
                self._compact()
                tree = self.tree
                n = len(tree) - 1
            t = self.next
            self.next = t + 1
            p = last.get(h)
            if p is None:
                out.append(-1)
            else:
                s, i = 0, p  # active marks at positions <= p
                while i:
                    s += tree[i]
                    i -= i & -i
                out.append(len(last) - s)
                i = p
                while i <= n:
                    tree[i] -= 1
                    i += i & -i
            i = t
            while i <= n:
                tree[i] += 1
                i += i & -i
            last[h] = t
        return out


def reuse_distances(ids: Sequence[int]) -> np.ndarray:
    """Per reference: distinct other blocks referenced since its previous reference, or -1 for a
    first reference (:class:`ReuseDistances` over the whole stream)."""
    return np.asarray(ReuseDistances().feed(ids.tolist() if isinstance(ids, np.ndarray) else ids), dtype=np.int64)


class DistanceCounts:
    """How many reuses had each distance, and the tokens they hit, as numpy counts indexed by distance
    (grown as needed; a distance is below the distinct blocks seen, so this is O(distinct blocks))."""

    def __init__(self) -> None:
        self.counts = np.zeros(0, dtype=np.int64)
        self.tokens = np.zeros(0, dtype=np.int64)

    def add(self, distances: np.ndarray, tokens: np.ndarray) -> None:
        """Add reuses (``distances >= 0``) and the tokens of each."""
        if not len(distances):
            return
        size = max(len(self.counts), int(distances.max()) + 1)
        self.counts = _grown(self.counts, size) + np.bincount(distances, minlength=size)
        # float sums of integer token counts: exact below 2**53
        w = np.bincount(distances, weights=tokens.astype(np.float64), minlength=size)
        self.tokens = _grown(self.tokens, size) + w.astype(np.int64)


def _grown(a: np.ndarray, size: int) -> np.ndarray:
    return a if len(a) == size else np.concatenate((a, np.zeros(size - len(a), dtype=a.dtype)))


def _sorted_counts(counter: Counter) -> tuple[np.ndarray, np.ndarray]:
    """(values increasing, count of each) of a Counter."""
    items = sorted(counter.items())
    return np.asarray([v for v, _ in items], dtype=np.int64), np.asarray([c for _, c in items], dtype=np.int64)


def _dist(values: np.ndarray, counts: np.ndarray) -> dict:
    """Mean, quantiles and max of the multiset where ``values[i]`` (increasing) occurs ``counts[i]``
    times; a quantile is numpy's ``method="lower"``: the value at sorted index floor((n - 1) q)."""
    n = int(counts.sum())
    if not n:
        return {"mean": 0.0, "max": 0, **{f"p{round(q * 100)}": 0 for q in QUANTILES}}
    cum = np.cumsum(counts)
    at = {
        f"p{round(q * 100)}": int(values[np.searchsorted(cum, int(np.floor((n - 1) * q)), side="right")])
        for q in QUANTILES
    }
    return {"mean": round(int(values @ counts) / n, 1), **at, "max": int(values[-1])}


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
    where the rate changes, from every reference's distance (-1: first reference) and tokens."""
    reused = distances >= 0
    counts = DistanceCounts()
    counts.add(distances[reused], tokens[reused])
    return _lru_curve(counts, total_tokens)


def _lru_curve(counts: DistanceCounts, total_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    present = np.flatnonzero(counts.counts)
    if not len(present):
        return np.asarray([1]), np.asarray([0.0])
    return present + 1, np.cumsum(counts.tokens[present]) / total_tokens  # capacity c hits every distance < c


#: References gathered before their distances are folded into the counts (bounds the buffers).
FOLD_REFS = 1 << 16


class _Stream:
    """The per-reference figures of ``trace stats`` gathered request by request: memory grows with the
    distinct blocks (each block's latest reference is needed for exact distances) and the distinct
    lengths, not with the references."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.reuse = ReuseDistances()
        self.distances = DistanceCounts()
        self.prompt: Counter = Counter()
        self.answer: Counter = Counter()
        self.references = self.total_tokens = self.hit_tokens = 0
        self._d: list[int] = []
        self._w: list[int] = []

    def add(self, r: Request) -> None:
        self.prompt[r.input_tokens] += 1
        self.answer[r.output_tokens] += 1
        n = len(r.page_keys)
        if not n:
            return
        self.references += n
        self._d.extend(self.reuse.feed(r.page_keys))
        self._w.extend([self.block_size] * (n - 1))
        self._w.append(r.input_tokens - self.block_size * (n - 1))
        if len(self._d) >= FOLD_REFS:
            self.fold()

    def fold(self) -> None:
        d, w = np.asarray(self._d, dtype=np.int64), np.asarray(self._w, dtype=np.int64)
        reused = d >= 0
        self.total_tokens += int(w.sum())
        self.hit_tokens += int(w[reused].sum())
        self.distances.add(d[reused], w[reused])
        self._d.clear()
        self._w.clear()


def trace_stats(requests: Sequence[Request], block_size: int) -> tuple[dict, dict]:
    """(summary for ``stats.json``, arrays for the figure), reading each request once in order."""
    arrivals = np.asarray(arrival_times(requests), dtype=float)
    st = _Stream(block_size)
    for r in requests:
        st.add(r)
    st.fold()
    total_tokens, hit_tokens = st.total_tokens, st.hit_tokens
    caps, rates = _lru_curve(st.distances, total_tokens or 1)
    width, rate = rate_over_time(arrivals)
    ideal = hit_tokens / total_tokens if total_tokens else 0.0
    needed = {}
    for share in (0.5, 0.9, 0.99):
        k = int(np.searchsorted(rates, share * ideal - 1e-12)) if ideal > 0 else 0
        needed[f"{round(share * 100)}%"] = int(caps[min(k, len(caps) - 1)]) * block_size
    span = float(arrivals.max() - arrivals.min()) if len(arrivals) else 0.0
    prompt, answer = _sorted_counts(st.prompt), _sorted_counts(st.answer)
    present = np.flatnonzero(st.distances.counts)
    reused = (present, st.distances.counts[present])
    reuse_dist = _dist(*reused)
    summary = {
        "requests": len(requests),
        "duration_s": round(span, 3),
        "mean_rate_per_s": round(len(requests) / span, 3) if span > 0 else None,
        "peak_rate_per_s": round(float(rate.max()), 3),
        "rate_bin_s": round(width, 6),
        "block_size": block_size,
        "prompt_tokens": {"total": int(prompt[0] @ prompt[1]), **_dist(*prompt)},
        "output_tokens": {"total": int(answer[0] @ answer[1]), **_dist(*answer)},
        "blocks": {"references": st.references, "distinct": len(st.reuse.last)},
        "ideal_hit_rate": round(ideal, 4),
        "ideal_hit_tokens": hit_tokens,
        "ideal_hit_rate_definition": "token-weighted share of prompt blocks whose chain hash an earlier prompt held",
        "reuse_distance_blocks": reuse_dist,
        "reuse_distance_tokens": {
            k: (v * block_size if k != "mean" else round(v * block_size, 1)) for k, v in reuse_dist.items()
        },
        "lru_tokens_for_share_of_ideal": needed,
    }
    arrays = {
        "arrivals": arrivals,
        "rate_bin_s": width,
        "rate": rate,
        "prompt": prompt,  # (values, counts)
        "answer": answer,
        "reuse_tokens": (reused[0] * block_size, reused[1]),
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
