"""The per-round table of a multi-turn run, computed as SGLang's bench_multiturn computes its figures.

bench_multiturn files each answer under its client's round (turn), skips failed requests, and reports
per round the cache hit rate = sum of ``cached_tokens`` / sum of ``prompt_len`` (token-weighted over
the round's requests, device + host + storage hits alike) and the mean TTFT; its run summary takes
percentiles as ``sorted(values)[int(q * n)]`` (clamped to the last; median = q 0.5). Here every round
gets the hit rate, mean/p90/median TTFT and latency by those rules, and a throughput over the round's
span (first send to last finish among its requests: bench_multiturn's run-level rule, per round).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .columns import Columns, as_columns

if TYPE_CHECKING:
    import pandas as pd

TIERS = ("device", "host", "storage")

SCOPE = (
    "whole run: finished requests of each round (the client's turn, warm-up included); hit rate "
    "token-weighted; percentiles sorted[int(q n)] as bench_multiturn; throughput over the round's span"
)


def bench_percentile(values: Sequence[float], q: float) -> float | None:
    """bench_multiturn's percentile: the value at index ``int(q * n)`` of the sorted list, clamped."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def _stats(values: Sequence[float]) -> dict:
    vals = [float(v) for v in values]
    return {
        "mean": sum(vals) / len(vals) if vals else None,
        "p90": bench_percentile(vals, 0.9),
        "median": bench_percentile(vals, 0.5),
    }


def per_round(requests: Columns | pd.DataFrame, timed: bool) -> list[dict]:
    """One entry per round present in ``requests`` (which has a ``round`` column), in round order."""
    requests = as_columns(requests)
    finished = requests.take(requests["status"] == "finished") if "status" in requests else requests
    out = []
    for rnd in sorted(set(requests["round"].tolist())):
        df = finished.take(finished["round"] == rnd)
        prompt = int(df["prompt_tokens"].sum())
        hits = {t: int(df[f"{t}_hit_tokens"].sum()) for t in TIERS}
        row = {
            "round": int(rnd),
            "requests": len(df),
            "cache_hit_rate": sum(hits.values()) / prompt if prompt else 0.0,
            "hit_rate": {t: hits[t] / prompt if prompt else 0.0 for t in TIERS},
        }
        if timed:
            row["ttft_s"] = _stats(df["ttft_s"].tolist())
            row["latency_s"] = _stats(df["e2e_s"].tolist())
            span = float(df["finish_s"].max() - df["arrival_s"].min()) if len(df) else 0.0
            span = max(span, 1e-9)
            row["throughput"] = {
                "requests_per_s": len(df) / span,
                "input_tokens_per_s": prompt / span,
                "output_tokens_per_s": float(df["output_tokens"].sum()) / span,
            }
        out.append(row)
    return out


def rounds_table(rounds: list[dict]) -> str:
    """The block ``hicache-sim run`` prints: one line per round, bench_multiturn's figures."""
    timed = bool(rounds) and "ttft_s" in rounds[0]
    head = f"  {'round':>5} {'requests':>8} {'hit rate':>9}"
    if timed:
        head += (
            f" {'TTFT mean':>10} {'p90':>8} {'median':>8} {'latency mean':>13} {'p90':>8} {'median':>8} {'req/s':>8}"
        )
    lines = ["per round (hit rate = cached / prompt tokens; p90, median = sorted[int(q n)]; seconds):", head]

    def num(v: float | None) -> str:
        return "-" if v is None else f"{v:.3f}"

    for r in rounds:
        line = f"  {r['round']:>5} {r['requests']:>8} {r['cache_hit_rate']:>9.4f}"
        if timed:
            t, lat = r["ttft_s"], r["latency_s"]
            line += (
                f" {num(t['mean']):>10} {num(t['p90']):>8} {num(t['median']):>8} {num(lat['mean']):>13}"
                f" {num(lat['p90']):>8} {num(lat['median']):>8} {r['throughput']['requests_per_s']:>8.3f}"
            )
        lines.append(line)
    return "\n".join(lines)
