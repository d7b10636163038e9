"""The L3 verdict: on this workload and this store, does loading a prefix from storage beat
recomputing it, and does adding the store lower TTFT or only raise the hit rate?

Part (a), load vs recompute, needs no extra run. One request on an idle server, whose first ``cached``
prompt tokens are on the GPU already, the next ``stored`` tokens in the store and the last ``new``
tokens computed anyway, takes (from its arrival to its first token) either

- recomputing: its prefill of ``stored + new`` tokens after ``cached`` (chunked as the scheduler
  chunks it), or
- loading: the storage hit query (one storage latency), the prefetch's batches of
  ``storage_batch_pages`` pages one after another (latency + bytes / read bandwidth each), then the
  prefill of ``new`` tokens after ``cached + stored``, its first step overlapped layer by layer with the
  host -> device load of the prefetched pages (layer i computes once it arrived and layer i - 1 is done).

Every cost is the timed world's own: :class:`~hicache_sim.sim.compute.ComputeModel` for prefill, the
link parameters (:mod:`hicache_sim.hardware.linkmodel`) the world puts the storage read and the
load-back on, and the engine's overlap rule; nothing here is a second cost model. The break-even
length is the shortest ``stored`` above which loading stays faster. ``cached`` and ``new`` are the
medians over the run's requests that read from the store (0 and one page when none did). How long a
request really waits for its load is the prefetch stop policy's (:data:`WAITS`): ``timeout`` cuts a load
that outlasts its timeout (the rest is recomputed after the wait), ``best_effort`` waits for nothing.

Part (b), with vs without the store, needs a second timed run of the same scenario without it (what
``advise`` does; ``run`` says so): TTFT mean / p50 / p99 and hit rate per tier of both runs, per round
for multi-turn workloads and over equal windows of arrival time otherwise, and a verdict from
:data:`VERDICTS` (the first rule that holds)."""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .columns import Columns, as_columns
from .summary import hit_rates

if TYPE_CHECKING:
    from pathlib import Path

    import pandas as pd

    from ..hardware.linkmodel import LinkParams
    from ..scenario import Resolved
    from ..sim.compute import StepTimeModel

#: Stored prefix lengths listed in the verdict and drawn in its figure (page-aligned, log-spaced).
CURVE_POINTS = 24
#: The break-even search tries every page count up to this many pages; above it this many log-spaced
#: counts, then bisects between the last slower and the first faster one.
EXHAUSTIVE_PAGES = 512
#: Time windows of a run that is not multi-turn (equal spans of arrival time).
TIME_WINDOWS = 10
#: A TTFT change smaller than this (relative) is no change; a hit-rate gain below this (absolute) none.
TTFT_TOLERANCE = 0.02
HIT_TOLERANCE = 0.005


def how_to_compare(command: str = "hicache-sim advise SCENARIO") -> str:
    """How to get part (b) after a ``run``: ``command`` (advise) times the scenario with and without
    the store."""
    return f"whether the store lowers TTFT here: {command} (times it with and without the store)"


#: summary.json's ``with_without_how`` (the scenario named generically).
HOW_TO_COMPARE = how_to_compare()


@dataclass(frozen=True)
class Wait:
    """How long a request waits for its prefetch, given the load's whole time and the timeout."""

    wait_s: Callable[[float, float], float]
    note: str


#: By ``cache.prefetch_policy`` (SGLang's --hicache-storage-prefetch-policy), for one request on an idle
#: server: the scheduler admits it as soon as the policy lets its prefetch stop.
WAITS: dict[str, Wait] = {
    "wait_complete": Wait(lambda total, timeout: total, "wait_complete: a request waits for its whole load"),
    "timeout": Wait(
        lambda total, timeout: min(total, timeout),
        "timeout: a load that outlasts its timeout is cut there and the rest recomputed",
    ),
    "best_effort": Wait(
        lambda total, timeout: 0.0,
        "best_effort: a request waits for no load, so only requests that queue anyway get L3 hits",
    ),
}


class LoadCosts:
    """Time to first token of one request on an idle server, loading its stored prefix or recomputing
    it, from the timed world's cost functions for a resolved scenario."""

    def __init__(self, r: Resolved, compute: StepTimeModel | None = None) -> None:
        from ..core.sizing import prefetch_timeout_s
        from ..sim.compute import ComputeModel
        from ..sim.links import storage_params
        from ..sim.transport import KVLayout

        self.r = r
        self.compute = compute if compute is not None else ComputeModel.from_resolved(r)
        self.page = r.cache.page_size
        self.page_bytes = r.transfer_page_bytes  # the KV and the pools beside it, as a transfer moves them
        self.batch_pages = r.cache.storage_batch_pages
        self.storage: LinkParams = storage_params(r.storage_read_Bps, r.storage_latency_s)
        self.query_s = r.storage_latency_s
        self.h2d: LinkParams = r.links["h2d"]
        self.layers = self.compute.num_layers
        self.pp = getattr(self.compute, "pp", 1)
        self.chunk = r.chunked_prefill_size
        self._layout = KVLayout(
            r.mem_layout, r.stage_layers, r.kv_factor, r.cache.page_size, r.kv_heads_per_rank, r.side_copies
        )
        self._segments = self._layout.segments
        # One copy per layer, and one per layer of each pool beside the KV pool (KVLayout.layer_launches).
        self._launches = self.layers + sum(c.layers for c in r.side_copies)
        sem = r.cache.resolved_semantics
        self._timeout = lambda tokens: prefetch_timeout_s(
            tokens, sem.prefetch_timeout_base_s, sem.prefetch_timeout_per_ki_token_s, sem.prefetch_timeout_max_s
        )
        self.policy = r.cache.prefetch_policy
        self.threshold_tokens = r.cache.prefetch_threshold_tokens

    # ------------------------------------------------------------------------------ pieces

    def storage_read_s(self, pages: int) -> float:
        """The hit query, then the prefetch's batches one after another on the storage read link."""
        full, rest = divmod(pages, self.batch_pages)
        t = self.query_s + full * self.storage.time(self.batch_pages * self.page_bytes, 1)
        return t + (self.storage.time(rest * self.page_bytes, 1) if rest else 0.0)

    def pages_read_by(self, wait_s: float, pages: int) -> int:
        """Pages whose batch has arrived ``wait_s`` after the request's arrival (whole batches)."""
        t, done = self.query_s, 0
        while done < pages:
            n = min(self.batch_pages, pages - done)
            t += self.storage.time(n * self.page_bytes, 1)
            if t > wait_s:
                break
            done += n
        return done

    def timeout_s(self, stored_tokens: int) -> float:
        return self._timeout(stored_tokens)

    def _chunks(self, new: int, cached: int) -> list[tuple[int, int]]:
        """The (new tokens, context) of each prefill step of ``new`` tokens after ``cached``."""
        size = self.chunk or new
        out, done = [], 0
        while done < new:
            n = min(size, new - done)
            out.append((n, cached + done))
            done += n
        return out

    def prefill_s(self, new: int, cached: int, load_pages: int = 0) -> float:
        """Seconds from admission to the first token: each step's overhead and prefill (all pipeline
        stages); the first step's load-back of ``load_pages`` overlapped layer by layer as the engine
        overlaps it."""
        total = 0.0
        for i, (n, c) in enumerate(self._chunks(new, cached)):
            gpu = self.compute.prefill_time([(n, c)])
            overhead = self.compute.step_overhead_s
            if i == 0 and load_pages:
                nbytes = load_pages * self.page_bytes
                latency = self.h2d.latency_s
                work = self.h2d.time(nbytes, self._segments(load_pages), self._launches) - latency
                f = overhead
                for layer in range(self.layers):
                    f = max(f, latency + work * (layer + 1) / self.layers) + gpu / self.layers
                step = f
            else:
                step = overhead + gpu
            total += step + (self.pp - 1) * gpu
        return total

    # ------------------------------------------------------------------------------ the two paths

    def recompute_s(self, stored: int, cached: int, new: int) -> float:
        return self.prefill_s(stored + new, cached)

    def load_s(self, stored: int, cached: int, new: int, *, policy: str | None = None) -> float:
        """Loading ``stored`` tokens (whole pages) and computing ``new``; ``policy``: the stop policy that
        decides the wait (None: the whole load)."""
        pages = stored // self.page
        whole = self.storage_read_s(pages)
        wait = whole if policy is None else WAITS[policy].wait_s(whole, self.timeout_s(pages * self.page))
        got = pages if wait >= whole else self.pages_read_by(wait, pages)
        return wait + self.prefill_s(stored - got * self.page + new, cached + got * self.page, got)


def _grid(pages: int) -> list[int]:
    """Page counts 1..pages: every one when few, else log-spaced (first and last kept)."""
    if pages <= EXHAUSTIVE_PAGES:
        return list(range(1, pages + 1))
    return _log_lengths(pages, EXHAUSTIVE_PAGES)


def break_even_pages(faster: Callable[[int], bool], pages: int) -> int | None:
    """The fewest pages above which loading stays faster (``faster(k)``: loading k pages beats
    recomputing them), up to ``pages``; None when it is not faster at ``pages`` itself."""
    grid = _grid(pages)
    wins = [faster(k) for k in grid]
    if not wins[-1]:
        return None
    i = len(wins) - 1
    while i > 0 and wins[i - 1]:
        i -= 1
    if i == 0:
        return grid[0]
    lo, hi = grid[i - 1], grid[i]  # slower at lo, faster at hi: the first faster count in between
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if faster(mid) else (mid, hi)
    return hi


def _log_lengths(pages: int, n: int) -> list[int]:
    return sorted({max(1, round(pages ** (i / max(1, n - 1)))) for i in range(n)} | {pages})


def prefix_shape(rows: Columns, page: int) -> dict[str, Any]:
    """The ``cached`` and ``new`` token counts of the verdict (medians over the finished requests that
    read from the store, 0 and one page when none did) and the stored lengths those requests read."""
    fin = rows.take(rows["status"] == "finished") if "status" in rows else rows
    used = fin.take(fin["storage_hit_tokens"] > 0) if len(fin) else fin
    if not len(used):
        return {"cached_tokens": 0, "new_tokens": page, "requests_from_l3": 0, "stored": []}
    cached = used["device_hit_tokens"] + used["host_hit_tokens"]
    new = used["prompt_tokens"] - cached - used["storage_hit_tokens"]
    return {
        "cached_tokens": int(statistics.median_low(cached.tolist())),
        "new_tokens": max(1, int(statistics.median_low(new.tolist()))),
        "requests_from_l3": len(used),
        "stored": used["storage_hit_tokens"].tolist(),
    }


def load_vs_recompute(
    r: Resolved, rows: Columns | pd.DataFrame, *, longest: int | None = None, compute: StepTimeModel | None = None
) -> dict[str, Any]:
    """Part (a) as data: the break-even stored length, the curve up to ``longest`` prompt tokens (default:
    the longest prompt of ``rows``, the run's measured requests), the stop policy's effect, and how many
    of the run's L3 reads were at least the break-even long."""
    costs = LoadCosts(r, compute)
    page = costs.page
    rows = as_columns(rows)
    shape = prefix_shape(rows, page)
    cached, new = shape["cached_tokens"], shape["new_tokens"]
    if longest is None:
        longest = int(rows["prompt_tokens"].max()) if len(rows) else cached + new + page
    pages = max(1, (longest - cached - new) // page)

    def faster(k: int) -> bool:
        return costs.load_s(k * page, cached, new) < costs.recompute_s(k * page, cached, new)

    be = break_even_pages(faster, pages)
    be_tokens = None if be is None else be * page

    def point(k: int) -> dict[str, float]:
        s = k * page
        return {
            "stored_tokens": s,
            "storage_read_s": costs.storage_read_s(k),
            "load_s": costs.load_s(s, cached, new),
            "load_with_policy_s": costs.load_s(s, cached, new, policy=costs.policy),
            "recompute_s": costs.recompute_s(s, cached, new),
        }

    cut = break_even_pages(lambda k: costs.storage_read_s(k) > costs.timeout_s(k * page), pages)
    stored = shape.pop("stored")
    return {
        "store": r.scenario.cache.storage_backend,
        "break_even_tokens": be_tokens,
        "loading_faster": "never" if be is None else ("always" if be == 1 else "above break-even"),
        "longest_tokens": pages * page,
        **shape,
        "l3_reads_at_least_break_even": None if be_tokens is None else sum(1 for s in stored if s >= be_tokens),
        "prefetch_policy": costs.policy,
        "policy_note": WAITS[costs.policy].note,
        "timeout_cuts_above_tokens": None if costs.policy != "timeout" or cut is None else cut * page,
        "prefetch_threshold_tokens": costs.threshold_tokens,
        "store_figures": {
            "read_GBps": r.storage_read_Bps / 1e9,
            "latency_us": round(r.storage_latency_s * 1e6, 6),
            "batch_pages": costs.batch_pages,
            "page_bytes": costs.page_bytes,
        },
        "curve": [point(k) for k in _log_lengths(pages, CURVE_POINTS)],
        "scope": "one request on an idle server, from the timed world's costs; cached_tokens and new_tokens: "
        "medians over the measured requests that read from L3 (0 and one page when none did)",
    }


def part_a_text(a: dict[str, Any]) -> str:
    """Part (a) in words: where loading beats recomputing."""
    be = a["break_even_tokens"]
    if be is None:
        return f"recomputing beats loading at every prefix length up to {a['longest_tokens']:,} tokens"
    if a["loading_faster"] == "always":
        return f"loading beats recomputing at every prefix length (from {be:,} tokens)"
    return f"loading beats recomputing above {be:,} tokens of prefix"


# ---------------------------------------------------------------------------------- part (b)


def _ttft(values: np.ndarray) -> dict[str, float | None]:
    a = values[~np.isnan(values)] if len(values) else values
    if not len(a):
        return {"mean": None, "p50": None, "p99": None}
    return {"mean": float(a.mean()), "p50": float(np.percentile(a, 50)), "p99": float(np.percentile(a, 99))}


def _stats(rows: Columns) -> dict[str, Any]:
    return {"requests": len(rows), "ttft_s": _ttft(rows["ttft_s"].astype(float)), "hit_rate": hit_rates(rows, "tokens")}


def _finished(rows: Columns) -> Columns:
    return rows.take(rows["status"] == "finished")


def windows(with_rows: Columns, without_rows: Columns) -> tuple[str, list[dict[str, Any]]]:
    """Both runs side by side per round (multi-turn) or per window of arrival time (``TIME_WINDOWS``
    equal spans of the two runs' arrivals), over every finished request."""
    a, b = _finished(as_columns(with_rows)), _finished(as_columns(without_rows))
    if "round" in a and "round" in b:
        keys = sorted(set(a["round"].tolist()) | set(b["round"].tolist()))
        return "round", [
            {"round": int(k), "with": _stats(a.take(a["round"] == k)), "without": _stats(b.take(b["round"] == k))}
            for k in keys
        ]
    both = np.concatenate([a["arrival_s"], b["arrival_s"]]) if len(a) + len(b) else np.zeros(1)
    lo, hi = float(both.min()), float(both.max())
    edges = np.linspace(lo, hi, TIME_WINDOWS + 1)

    def index(rows: Columns) -> np.ndarray:
        return np.clip(np.searchsorted(edges, rows["arrival_s"], side="right") - 1, 0, TIME_WINDOWS - 1)

    ia, ib = index(a), index(b)
    return "time window", [
        {
            "start_s": float(edges[i]),
            "end_s": float(edges[i + 1]),
            "with": _stats(a.take(ia == i)),
            "without": _stats(b.take(ib == i)),
        }
        for i in range(TIME_WINDOWS)
    ]


def _rel(new: float | None, old: float | None) -> float | None:
    if new is None or old is None or old <= 0:
        return None
    return new / old - 1.0


@dataclass(frozen=True)
class Verdict:
    kind: str
    holds: Callable[[float, float], bool]  # (relative TTFT mean change, absolute total hit-rate gain)
    text: str


#: The first rule that holds is the verdict: TTFT judged on its mean (every request counts, also the
#: minority an L3 hit serves), hit rate on the total.
VERDICTS: tuple[Verdict, ...] = (
    Verdict("lowers_ttft", lambda dt, dh: dt < -TTFT_TOLERANCE, "the store lowers TTFT"),
    Verdict("raises_ttft", lambda dt, dh: dt > TTFT_TOLERANCE, "the store raises TTFT"),
    Verdict("hit_rate_only", lambda dt, dh: dh > HIT_TOLERANCE, "the store raises the hit rate but not TTFT"),
    Verdict("no_effect", lambda dt, dh: True, "the store changes neither TTFT nor the hit rate"),
)


def with_without(with_summary: dict, without_summary: dict, with_rows: Columns, without_rows: Columns) -> dict:
    """Part (b) as data: both runs' TTFT and hit rates (their summaries' measured windows), the
    changes, the verdict and the per-round or per-window table."""
    side = {
        name: {"ttft_s": {k: s["ttft_s"][k] for k in ("mean", "p50", "p99")}, "hit_rate": dict(s["hit_rate"])}
        for name, s in (("with_store", with_summary), ("without_store", without_summary))
    }
    w, wo = side["with_store"], side["without_store"]
    change = {f"ttft_{k}": _rel(w["ttft_s"][k], wo["ttft_s"][k]) for k in ("mean", "p50", "p99")}
    change["hit_rate_total"] = w["hit_rate"]["total"] - wo["hit_rate"]["total"]
    dt = change["ttft_mean"] if change["ttft_mean"] is not None else 0.0
    v = next(v for v in VERDICTS if v.holds(dt, change["hit_rate_total"]))
    by, rows = windows(with_rows, without_rows)
    helped = sum(
        1
        for x in rows
        if x["with"]["ttft_s"]["mean"] is not None
        and x["without"]["ttft_s"]["mean"] is not None
        and x["with"]["ttft_s"]["mean"] < x["without"]["ttft_s"]["mean"] * (1 - TTFT_TOLERANCE)
    )
    return {
        **side,
        "change": change,
        "verdict": v.kind,
        "verdict_text": v.text,
        "by": by,
        "windows": rows,
        "windows_ttft_lower": helped,
        "scope": "with_store / without_store: the runs' measured windows (summary.json); windows: every finished "
        "request of each run",
    }


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g} s"


def _pct(x: float | None) -> str:
    return "" if x is None else f" ({100 * x:+.0f}%)"


def verdict_line(a: dict[str, Any], b: dict[str, Any] | None = None, *, hint: str = "") -> str:
    """The one plain line: part (a), and part (b) when it ran (else ``hint``: how to get it)."""
    line = f"L3 ({a['store']}): {part_a_text(a)}"
    if b is None:
        return line + (f"; {hint}" if hint else "")
    w, wo, ch = b["with_store"], b["without_store"], b["change"]
    return (
        f"{line}; {b['verdict_text']}: TTFT mean {_s(w['ttft_s']['mean'])} with vs {_s(wo['ttft_s']['mean'])} "
        f"without{_pct(ch['ttft_mean'])}, p50 {_s(w['ttft_s']['p50'])} vs {_s(wo['ttft_s']['p50'])}"
        f"{_pct(ch['ttft_p50'])}, p99 {_s(w['ttft_s']['p99'])} vs {_s(wo['ttft_s']['p99'])}{_pct(ch['ttft_p99'])}; "
        f"hit rate {w['hit_rate']['total']:.3f} vs {wo['hit_rate']['total']:.3f} "
        f"(L3 {w['hit_rate']['storage']:.3f})"
    )


def detail_lines(a: dict[str, Any], b: dict[str, Any] | None = None) -> list[str]:
    """What the line rests on: the prefix shape, the store's figures, the policy, the windows."""
    f = a["store_figures"]
    n = a["requests_from_l3"]
    basis = f"medians of the {n:,} requests that read from L3" if n else "no request read from L3"
    out = [
        f"  load vs recompute: one request on an idle server, {a['cached_tokens']:,} tokens cached before the "
        f"stored prefix and {a['new_tokens']:,} computed after it ({basis}); store {f['read_GBps']:g} GB/s "
        f"read, {f['latency_us']:g} us per batch of {f['batch_pages']} pages"
    ]
    if a["loading_faster"] == "above break-even" and a["requests_from_l3"]:
        out.append(
            f"  {a['l3_reads_at_least_break_even']:,} of the {a['requests_from_l3']:,} L3 reads were of at least "
            f"{a['break_even_tokens']:,} tokens"
        )
    note = a["policy_note"]
    if a["timeout_cuts_above_tokens"] is not None:
        note += f" (here: loads above {a['timeout_cuts_above_tokens']:,} tokens)"
    out.append(f"  prefetch policy {note}")
    if b is not None:
        out.append(
            f"  per {b['by']}: TTFT mean lower with the store in {b['windows_ttft_lower']} of {len(b['windows'])}"
        )
    return out


# ---------------------------------------------------------------------------------- figure


def l3_figure(a: dict[str, Any], b: dict[str, Any] | None, path: Path, title: str) -> None:
    """One figure: with (b), TTFT and hit rate with and without the store per round or time window
    (left); load vs recompute time over the stored prefix length, break-even marked (right)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from .plots import TIER_COLORS, _save

    fig = Figure(figsize=(12, 5) if b is not None else (7, 4))
    FigureCanvasAgg(fig)
    if b is not None:
        gs = fig.add_gridspec(2, 2, width_ratios=(1.3, 1))
        ax_t = fig.add_subplot(gs[0, 0])
        ax_h = fig.add_subplot(gs[1, 0], sharex=ax_t)
        ax_c = fig.add_subplot(gs[:, 1])
        rows = b["windows"]
        if b["by"] == "round":
            x = [r["round"] for r in rows]
            ax_h.set_xlabel("round")
        else:
            x = [(r["start_s"] + r["end_s"]) / 2 for r in rows]
            ax_h.set_xlabel("arrival time (simulated s), window middle")

        def series(side: str, get: Callable[[dict], Any]) -> list[float]:
            return [float("nan") if get(r[side]) is None else get(r[side]) for r in rows]

        for side, style, label in (("with", "-", "with the store"), ("without", "--", "without")):
            color = TIER_COLORS["storage"] if side == "with" else "0.35"
            ax_t.plot(
                x, series(side, lambda s: s["ttft_s"]["mean"]), style, marker="o", color=color, label=f"{label}: mean"
            )
            ax_t.plot(
                x,
                series(side, lambda s: s["ttft_s"]["p99"]),
                style,
                marker="x",
                color=color,
                alpha=0.5,
                label=f"{label}: p99",
            )
            ax_h.plot(
                x,
                series(side, lambda s: s["hit_rate"]["total"]),
                style,
                marker="o",
                color=color,
                label=f"{label}: total",
            )
        ax_h.bar(
            x,
            series("with", lambda s: s["hit_rate"]["storage"]),
            width=_bar_width(x),
            color=TIER_COLORS["storage"],
            alpha=0.3,
            label="with the store: L3 part",
        )
        ax_t.set_ylabel("TTFT (s)")
        ax_t.set_ylim(bottom=0)
        ax_t.set_title(f"{b['verdict_text']} (per {b['by']})", fontsize=9)
        ax_t.legend(loc="best", fontsize=7)
        ax_t.grid(alpha=0.3)
        ax_h.set_ylabel("token hit rate")
        ax_h.set_ylim(0, 1)
        ax_h.legend(loc="best", fontsize=7)
        ax_h.grid(alpha=0.3)
    else:
        ax_c = fig.add_subplot(1, 1, 1)
    pts = a["curve"]
    xs = [p["stored_tokens"] for p in pts]
    ax_c.plot(xs, [p["recompute_s"] for p in pts], color="0.2", label="recompute")
    ax_c.plot(xs, [p["load_s"] for p in pts], color=TIER_COLORS["storage"], label="load from L3 (whole load)")
    if any(p["load_with_policy_s"] != p["load_s"] for p in pts):
        ax_c.plot(
            xs,
            [p["load_with_policy_s"] for p in pts],
            ":",
            color=TIER_COLORS["storage"],
            label=f"load, {a['prefetch_policy']} policy",
        )
    if a["break_even_tokens"] is not None:
        ax_c.axvline(
            a["break_even_tokens"],
            color="tab:red",
            linestyle="--",
            linewidth=1,
            label=f"break-even {a['break_even_tokens']:,} tokens",
        )
    ax_c.set_xscale("log")
    ax_c.set_yscale("log")
    ax_c.set_xlabel(f"stored prefix (tokens; {a['cached_tokens']:,} cached before, {a['new_tokens']:,} new after)")
    ax_c.set_ylabel("time to first token, idle server (s)")
    ax_c.set_title(part_a_text(a), fontsize=9)
    ax_c.legend(loc="best", fontsize=7)
    ax_c.grid(alpha=0.3, which="both")
    fig.suptitle(f"{title} (store: {a['store']})")
    _save(fig, path, tight=True)


def _bar_width(x: Sequence[float]) -> float:
    return 0.6 * (min(b - a for a, b in itertools.pairwise(x)) if len(x) > 1 else 1.0)
