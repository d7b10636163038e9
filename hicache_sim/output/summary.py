"""summary.json: hit rates per tier (token- and page-weighted over a stated window), latency
percentiles, throughput, link load and every counter, with ``scopes`` saying what each figure covers.
Metrics follow SGLang's definitions where one exists: hit rate = cached prompt tokens / prompt tokens,
as bench_multiturn prints it."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from .columns import Columns, as_columns
from .rounds import SCOPE as ROUNDS_SCOPE
from .rounds import per_round
from .saturation import SCOPE as SATURATION_SCOPE
from .serving import SCOPE as SERVING_SCOPE
from .serving import serving_metrics

if TYPE_CHECKING:
    import pandas as pd

TIERS = ("device", "host", "storage")

#: What each top-level figure of summary.json covers: the measured window (requests after the warm-up
#: share, in arrival order), the whole run (every request, warm-up included), or the state at its end.
SCOPES = {
    "requests": "whole run: every request, warm-up included",
    "requests_finished": "whole run",
    "requests_rejected": "whole run",
    "window": "the measured window and its prompt totals (the denominators of the hit rates)",
    "hit_rate": "window: finished requests, token-weighted",
    "page_hit_rate": "window: finished requests, page-weighted",
    "counters": "whole run: cache operations from the first request to the last, warm-up included",
    "residency": "end of run: pages resident when the last request finished",
    "sizes": "configuration",
    "ttft_s": "window: finished requests",
    "e2e_s": "window: finished requests",
    "queue_s": "window: finished requests",
    "load_wait_s": "window: finished requests",
    "prefetch_wait_s": "window: finished requests",
    "throughput": "window: finished requests, from the first arrival to the last finish among them",
    "sim_time_s": "whole run: simulated seconds",
    "links": "whole run: busy time and bytes per link",
    "rounds": ROUNDS_SCOPE,
    "serving": SERVING_SCOPE,
    "saturation": SATURATION_SCOPE,
    "dp_ranks": "per data-parallel rank: the requests it was sent (whole run) and, over the measured window's "
    "finished requests it served, hit rates (token-weighted) and TTFT; its links and counters (whole run)",
    "l3": "load_vs_recompute: one request on an idle server, its prefix shape from the window's finished "
    "requests that read from L3; with_without: a second run without the store (hicache-sim advise)",
}


def window_of(n_requests: int, warmup_fraction: float, warmup_requests: int = 0) -> dict:
    """The measured window: requests after the warm-up share, in arrival order, and never the
    workload's own warm-up requests (bench_serving's, at the head of the run)."""
    first = min(n_requests, max(math.floor(n_requests * warmup_fraction), warmup_requests))
    why = f"first {warmup_fraction:.0%} excluded as warm-up"
    if warmup_requests and first == warmup_requests:
        why = f"the workload's {warmup_requests} unmeasured request(s) excluded (warm-up, earlier runs)"
    return {
        "warmup_fraction": warmup_fraction,
        "first_request": first,
        "requests_measured": n_requests - first,
        "description": f"requests {first}..{n_requests - 1} in arrival order ({why})",
    }


def hit_rates(df: Columns, unit: str) -> dict:
    """Hit rate per tier and in total over ``df``'s requests, weighted by ``unit`` (tokens or pages)."""
    total = float(df[f"prompt_{unit}"].sum())
    out = {}
    for tier in TIERS:
        out[tier] = float(df[f"{tier}_hit_{unit}"].sum()) / total if total else 0.0
    out["total"] = sum(out[t] for t in TIERS)
    return out


def _percentiles(values: Sequence[float]) -> dict:
    a = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    if a.size == 0:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    return {
        "mean": float(a.mean()),
        "p50": float(np.percentile(a, 50)),
        "p90": float(np.percentile(a, 90)),
        "p99": float(np.percentile(a, 99)),
    }


def build_summary(
    requests: Columns | pd.DataFrame,
    *,
    warmup_fraction: float,
    counters: dict,
    residency: dict,
    sizes: dict,
    mode: str,
    timed: dict | None = None,
    warmup_requests: int = 0,
    serving: bool = False,
    l3: Callable[[Columns], dict] | None = None,
    saturation: Callable[[Columns, Columns, dict], dict] | None = None,
) -> dict:
    """The summary dict. ``requests`` has one row per request in arrival order (see runner); the first
    ``warmup_requests`` are the workload's warm-up; ``serving`` adds bench_serving's block (timed);
    ``l3`` makes the storage verdict's block from the window's finished requests (runs with a store);
    ``saturation`` the overload block from the window's requests, its finished ones and the throughput
    (timed runs: :mod:`hicache_sim.output.saturation`)."""
    requests = as_columns(requests)
    win = window_of(len(requests), warmup_fraction, warmup_requests)
    measured = requests.take(slice(win["first_request"], None))
    finished = measured.take(measured["status"] == "finished") if "status" in measured else measured
    summary = {
        "mode": mode,
        "requests": len(requests),
        "requests_finished": int((requests["status"] == "finished").sum()),
        "requests_rejected": int((requests["status"] == "rejected").sum()),
        "window": {
            **win,
            "prompt_tokens": int(measured["prompt_tokens"].sum()),
            "prompt_pages": int(measured["prompt_pages"].sum()),
        },
        "hit_rate": hit_rates(finished, "tokens"),
        "page_hit_rate": hit_rates(finished, "pages"),
        "counters": counters,
        "residency": residency,
        "sizes": sizes,
    }
    if timed is not None:
        summary["ttft_s"] = _percentiles(finished["ttft_s"].tolist())
        summary["e2e_s"] = _percentiles(finished["e2e_s"].tolist())
        for key in ("queue_s", "load_wait_s", "prefetch_wait_s"):
            if key in finished:
                summary[key] = _percentiles(finished[key].tolist())
        span = timed["sim_time_s"]
        if len(finished):
            start = float(finished["arrival_s"].min())
            end = float(finished["finish_s"].max())
            span_m = max(end - start, 1e-9)
        else:
            span_m = 1.0
        summary["throughput"] = {
            "requests_per_s": len(finished) / span_m,
            "input_tokens_per_s": float(finished["prompt_tokens"].sum()) / span_m,
            "output_tokens_per_s": float(finished["output_tokens"].sum()) / span_m,
        }
        summary["sim_time_s"] = span
        summary["links"] = timed["links"]
        if saturation is not None:
            summary["saturation"] = saturation(measured, finished, summary["throughput"])
    if "round" in requests:
        summary["rounds"] = per_round(requests, timed is not None)
    if serving and timed is not None:
        # bench_serving reports every request of its run, whatever warm-up share the scenario measures
        summary["serving"] = serving_metrics(requests.take(slice(warmup_requests, None)))
    if l3 is not None:
        summary["l3"] = l3(finished)
    summary["scopes"] = {key: SCOPES[key] for key in summary if key != "mode"}  # every figure is labelled
    return summary
