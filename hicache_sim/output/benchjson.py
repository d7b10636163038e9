"""A timed run's figures as SGLang's own benchmarks write them (``run --bench-json``), so the
dashboards that read a real run's result file read a simulated one the same way.

- ``bench_serving.jsonl``: one JSON object with the keys, in the order, that ``python -m
  sglang.bench_serving --output-file`` (0.5.23, ``benchmark/serving.py``) appends per run, and the
  ``cache_report`` block it adds with ``--cache-report``. Figures over the run's requests after its
  warm-up, computed as ``calibrate`` computes them (``calibration/benchfit.py``), so
  ``calibrate bench_serving.jsonl --scenario S --check`` reads them back with no error.
- ``bench_multiturn.jsonl`` (a ``multiturn`` workload, instead): one object with ``summary`` and
  ``round.round_<i>`` as ``benchmark/hicache/bench_multiturn.py --log-file`` writes them (its later
  form, as ``calibration/benchresult.py`` reads it), times in seconds.

A figure the simulator has no mechanism for is null: the ITL percentiles and maximum (no per-token
times; the mean is kept), ``max_output_tokens_per_s`` and ``max_concurrent_requests`` (bucketed by
wall-clock second), ``accept_length``, ``server_info``. ``backend`` is ``hicache-sim`` and ``tag`` the
scenario's name, so a dashboard never mistakes a simulated run for a measured one; there is no
wall-clock ``timestamp`` (same scenario, same bytes). ``cache_hit_rate_pct`` keeps every digit where
bench_serving rounds it to 2.
"""

from __future__ import annotations

import json

import numpy as np

from ..calibration.benchfit import multiturn_figures, serving_figures
from ..calibration.benchresult import MULTITURN_SUMMARY
from .columns import Columns

SERVING_FILE = "bench_serving.jsonl"
MULTITURN_FILE = "bench_multiturn.jsonl"
BACKEND = "hicache-sim"
STATS = ("mean", "median", "std", "p90", "p95", "p99")
SERIES = ("e2e_latency", "ttft", "tpot", "itl")


def bench_files(scenario, rows: Columns, warmup_requests: int) -> dict[str, str]:
    """File name -> its one JSONL line, for a timed run of ``scenario`` whose per-request ``rows`` start
    with ``warmup_requests`` unmeasured ones."""
    if scenario.workload.kind == "multiturn":
        return {MULTITURN_FILE: _line(multiturn_record(scenario, rows))}
    return {SERVING_FILE: _line(serving_record(scenario, rows.take(slice(warmup_requests, None))))}


def _line(obj: dict) -> str:
    # Python's float repr round-trips: the reader gets the very numbers written (inf as Infinity, as
    # bench_serving writes its default rate).
    return json.dumps(obj) + "\n"


def _stds(done: Columns) -> dict[str, float | None]:
    """``std_<series>_ms`` as bench_serving computes them (``np.std`` of the seconds, x 1000)."""
    if not len(done):
        return {}
    ttft = np.asarray(done["ttft_s"], dtype=float)
    e2e = np.asarray(done["e2e_s"], dtype=float)
    outs = np.asarray(done["output_tokens"], dtype=float)
    many = outs > 1
    tpot = (e2e[many] - ttft[many]) / (outs[many] - 1)
    return {
        "std_ttft_ms": float(np.std(ttft)) * 1000,
        "std_e2e_latency_ms": float(np.std(e2e)) * 1000,
        "std_tpot_ms": float(np.std(tpot)) * 1000 if tpot.size else 0.0,
        "std_itl_ms": None,
    }


def serving_record(scenario, measured: Columns) -> dict:
    """bench_serving's result object for the measured requests of a run of ``scenario``."""
    fig = serving_figures(measured)
    done = measured.take(measured["status"] == "finished") if "status" in measured else measured
    spec = getattr(scenario.workload, scenario.workload.kind, None)
    serving = scenario.workload.kind == "bench_serving"
    out: dict = {
        "tag": scenario.name,
        "backend": BACKEND,
        "dataset_name": spec.dataset_name if serving else scenario.workload.kind,
        "request_rate": spec.rate() if serving else None,
        "max_concurrency": spec.max_concurrency if serving else None,
        "sharegpt_output_len": None,
        "random_input_len": spec.random_input_len if serving else None,
        "random_output_len": spec.random_output_len if serving else None,
        "random_range_ratio": spec.random_range_ratio if serving else None,
        "server_info": None,
        "duration": fig.get("duration", 0.0),
        "completed": int(fig["completed"]),
        "total_input_tokens": int(fig.get("total_input_tokens", 0)),
        "total_input_text_tokens": int(fig.get("total_input_tokens", 0)),
        "total_input_vision_tokens": 0,
        "total_output_tokens": int(fig.get("total_output_tokens", 0)),
        "total_output_tokens_retokenized": int(fig.get("total_output_tokens", 0)),
    }
    for key in ("request_throughput", "input_throughput", "output_throughput", "total_throughput"):
        out[key] = fig.get(key, 0.0)
    stds = _stds(done)
    for series in SERIES:
        for stat in STATS:
            key = f"{stat}_{series}_ms"
            out[key] = stds.get(key) if stat == "std" else fig.get(key)
    out["concurrency"] = fig.get("concurrency", 0.0)
    out["accept_length"] = None
    out["max_output_tokens_per_s"] = None
    out["max_concurrent_requests"] = None
    tiers = {t: int(done[f"{t}_hit_tokens"].sum()) if len(done) else 0 for t in ("device", "host", "storage")}
    out["cache_report"] = {
        "total_prompt_tokens": out["total_input_tokens"],
        "total_cached_tokens": int(fig.get("total_cached_tokens", 0)),
        "cache_hit_rate_pct": fig.get("cache_hit_rate_pct", 0.0),
        "device_cached_tokens": tiers["device"],
        "host_cached_tokens": tiers["host"],
        "storage_cached_tokens": tiers["storage"] or None,
        "storage_backend": scenario.cache.storage_backend if tiers["storage"] else None,
    }
    return out


def multiturn_record(scenario, rows: Columns) -> dict:
    """bench_multiturn's ``--log-file`` object for a run of a ``multiturn`` scenario."""
    fig, rounds = multiturn_figures(rows)
    fig = {**fig, "request_rate": scenario.workload.multiturn.request_rate}
    summary = {k: fig.get(k) for k in MULTITURN_SUMMARY}
    summary["total_requests"] = int(fig["total_requests"])
    per_round = {
        f"round_{r['round']}": {
            "average_ttft": r["average_ttft"],
            "cache_hit_rate": r["cache_hit_rate"],
            "request_count": int(r["request_count"]),
        }
        for r in rounds
    }
    return {"tag": scenario.name, "summary": summary, "round": per_round}
