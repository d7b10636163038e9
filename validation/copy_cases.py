"""Copy-model cases (``kind: copy``): published host<->device copy timings beside the link model.

Each run names a scenario, whose GPU, io backend and host layout pick the link parameters exactly as
the timed world resolves them (``hicache_sim.scenario.resolve``), and the copies the source made:

- ``load``: one request's TTFT loading its prompt's KV from the host, at several prompt lengths. The
  TTFT also holds the last token's forward and the scheduling, which do not grow with the prompt, so
  the figure compared is the slope (ms per 1K prompt tokens, least squares) against the slope of the
  link model's time for the same bytes in the same pieces. Held to the figure-reading error: the
  most a least-squares slope can move when every reading is off by at most ``read_error_ms``.
- ``concurrent``: the aggregate rate of many such loads at once (a throughput figure at 100% hit
  rate), against the rate the timed world's link serves them at (processor sharing).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import simpy

from hicache_sim.core.registry import Registry
from hicache_sim.hardware.linkmodel import LinkParams
from hicache_sim.scenario import Scenario
from hicache_sim.scenario.resolve import resolve
from hicache_sim.sim.links import Link

from .run import Row

# Requests the concurrent runs put on the link at once (enough that per-transfer latency is hidden).
CONCURRENT_LOADS = 64


def link_and_kv(run: dict) -> tuple[LinkParams, int]:
    """The run's link direction parameters and KV bytes per token, as the timed world resolves them."""
    r = resolve(Scenario.model_validate(run["scenario"]))
    return r.links[run["copy"]["direction"]], r.bytes_per_token


def loaded_blocks(tokens: int, block_tokens: int) -> int:
    """Whole blocks a fully cached prompt loads: the engine computes at least its last token."""
    return (tokens - 1) // block_tokens


def slope(x: list[float], y: list[float]) -> float:
    """Least-squares slope of y over x."""
    return float(np.polyfit(np.asarray(x, float), np.asarray(y, float), 1)[0])


def slope_read_bound(x: list[float], read_error: float) -> float:
    """Largest change of the least-squares slope when each y is off by at most ``read_error``."""
    d = np.asarray(x, float) - np.mean(x)
    return float(read_error * np.abs(d).sum() / (d * d).sum())


def _row(case: dict, metric: str, key: str, pub: float, sim: float, tol: float | None = None) -> Row:
    """A row held to ``tol`` when the case's checks assert ``<run>.<metric>``, else reported."""
    run = key.split()[0]
    asserted = bool(case.get("checks", {}).get(f"{run}.{metric}", {}).get("asserted"))
    err = sim - pub
    within = abs(err) <= tol + 1e-12 if asserted and tol is not None else None
    rel = err / pub if pub else None
    return Row(case["id"], metric, key, pub, sim, err, rel, tol if asserted else None, asserted, within)


def load_rows(case: dict, name: str, run: dict) -> list[Row]:
    """Slope of TTFT over prompt length against the slope of the simulated copy, and every point."""
    params, bpt = link_and_kv(run)
    cp = run["copy"]
    ktok = [float(k) for k in run["prompt_ktokens"]]
    pub = [float(v) for v in run["published"]["ttft_ms"]]
    copy_ms = []
    for k in ktok:
        blocks = loaded_blocks(round(k * 1000), cp["block_tokens"])
        copy_ms.append(1e3 * params.time(blocks * cp["block_tokens"] * bpt, segments=blocks, launches=1))
    pub_slope, sim_slope = slope(ktok, pub), slope(ktok, copy_ms)
    tol = slope_read_bound(ktok, float(cp["read_error_ms"]))
    per_1k = 1000 * bpt / 1e9  # GB per 1K tokens
    rows = [
        _row(case, "load_slope_ms_per_1k", name, pub_slope, sim_slope, tol),
        _row(case, "load_gbps_from_slope", name, per_1k / (pub_slope / 1e3), per_1k / (sim_slope / 1e3)),
    ]
    for k, p, s in zip(ktok, pub, copy_ms, strict=True):
        rows.append(_row(case, "ttft_ms_vs_copy_ms", f"{name} {k:g}K", p, s))
    return rows


def concurrent_rows(case: dict, name: str, run: dict) -> list[Row]:
    """Aggregate H2D rate implied by a 100%-hit throughput against the world's link serving as many
    loads at once."""
    params, bpt = link_and_kv(run)
    cp = run["copy"]
    blocks = loaded_blocks(run["prompt_tokens"], cp["block_tokens"])
    nbytes = blocks * cp["block_tokens"] * bpt
    pub = run["published"]["tokens_per_s"] / run["prompt_tokens"] * nbytes / 1e9
    env = simpy.Environment()
    link = Link(env, "h2d", params)
    for _ in range(CONCURRENT_LOADS):
        link.submit(nbytes, blocks)
    env.run()
    return [_row(case, "aggregate_h2d_gbps", name, pub, CONCURRENT_LOADS * nbytes / env.now / 1e9)]


RUN_KINDS: Registry[Callable[[dict, str, dict], list[Row]]] = Registry("copy run kind", "runs.<name>.copy.kind")
RUN_KINDS.add("load", load_rows)
RUN_KINDS.add("concurrent", concurrent_rows)


def copy_rows(case: dict) -> list[Row]:
    """Every run of a copy case, in file order."""
    rows: list[Row] = []
    for name, run in case["runs"].items():
        rows.extend(RUN_KINDS.get(run["copy"]["kind"])(case, name, run))
    return rows
