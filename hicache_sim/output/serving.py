"""The result block of a bench_serving run, computed as SGLang's ``bench_serving.py`` computes its
"Serving Benchmark Result" (``calculate_metrics``): over the finished requests of the run (the warm-up
excluded), mean / median / p99 with numpy (``np.median``, ``np.percentile``), TPOT = (latency - TTFT) /
(output tokens - 1) for requests of more than one output token, the duration from the first send to the
last finish, throughputs = totals / duration, and concurrency = summed latency / duration."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .columns import Columns

SCOPE = (
    "the run's finished requests (its warm-up and earlier runs excluded, metrics.warmup_fraction not "
    "applied), as bench_serving reports them (np.mean, np.median, "
    "np.percentile 99; TPOT over requests of more than one output token; duration first send to last finish)"
)


def stats_ms(values: Sequence[float], keys: Sequence[str] = ("mean", "median", "p99")) -> dict:
    """``values`` (seconds) in ms, each of ``keys`` (mean, median, ``p<q>``) as bench_serving computes it
    (``np.mean``, ``np.median``, ``np.percentile``); None each when there are no values."""
    a = np.asarray(values, dtype=float) * 1000.0
    if a.size == 0:
        return dict.fromkeys(keys)
    out = {}
    for k in keys:
        if k == "mean":
            out[k] = float(a.mean())
        elif k == "median":
            out[k] = float(np.median(a))
        else:
            out[k] = float(np.percentile(a, int(k.removeprefix("p"))))
    return out


def serving_metrics(measured: Columns) -> dict:
    """bench_serving's figures from the measured requests' rows (arrival = send time)."""
    done = measured.take(measured["status"] == "finished") if "status" in measured else measured
    n = len(done)
    ttft = [float(x) for x in done["ttft_s"].tolist()]
    e2e = [float(x) for x in done["e2e_s"].tolist()]
    outs = [int(x) for x in done["output_tokens"].tolist()]
    tpot = [(e - t) / (o - 1) for e, t, o in zip(e2e, ttft, outs, strict=True) if o > 1]
    if n:
        duration = max(float(done["finish_s"].max() - done["arrival_s"].min()), 1e-9)
    else:
        duration = 0.0
    total_in = int(done["prompt_tokens"].sum()) if n else 0
    total_out = sum(outs)

    def per_s(x: float) -> float:
        return x / duration if duration else 0.0

    return {
        "completed": n,
        "duration_s": duration,
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": per_s(n),
        "input_token_throughput": per_s(total_in),
        "output_token_throughput": per_s(total_out),
        "concurrency": per_s(sum(e2e)),
        "ttft_ms": stats_ms(ttft),
        "tpot_ms": stats_ms(tpot),
        "e2e_latency_ms": stats_ms(e2e),
    }


def serving_table(block: dict) -> str:
    """The lines ``hicache-sim run`` prints for a bench_serving run, named as bench_serving names them."""

    def num(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}"

    lines = [
        "serving benchmark (as bench_serving reports it; warm-up excluded):",
        f"  {'Successful requests:':<34} {block['completed']}",
        f"  {'Benchmark duration (s):':<34} {num(block['duration_s'])}",
        f"  {'Total input tokens:':<34} {block['total_input_tokens']}",
        f"  {'Total generated tokens:':<34} {block['total_output_tokens']}",
        f"  {'Request throughput (req/s):':<34} {num(block['request_throughput'])}",
        f"  {'Input token throughput (tok/s):':<34} {num(block['input_token_throughput'])}",
        f"  {'Output token throughput (tok/s):':<34} {num(block['output_token_throughput'])}",
        f"  {'Concurrency:':<34} {num(block['concurrency'])}",
    ]
    for key, name in (("e2e_latency_ms", "E2E Latency"), ("ttft_ms", "TTFT"), ("tpot_ms", "TPOT")):
        s = block[key]
        lines.append(f"  {name + ' (ms):':<34} mean {num(s['mean'])}  median {num(s['median'])}  p99 {num(s['p99'])}")
    return "\n".join(lines)
