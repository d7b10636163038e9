"""Helpers for the timed-world tests (no tests here): small scenarios, hand-made workloads, and
compute models whose step times are known exactly."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable

from hicache_sim.scenario import Resolved, Scenario, resolve
from hicache_sim.sim import ComputeModel, ComputeParams
from hicache_sim.workloads import Request
from hicache_sim.workloads.build import build_workload
from hicache_sim.workloads.synthetic import Workload

PAGE = 64

BASE = {
    "mode": "timed",
    "model": "llama-3.1-8b",
    "hardware": {
        "gpu": "h200",
        "step_overhead_us": 0.0,
        "request_overhead_us": 0.0,
        "pcie": {"latency_us": 10.0, "segment_overhead_us": 0.0},
    },
    "cache": {"page_size": PAGE, "device_tokens": 40 * PAGE, "host_tokens": 200 * PAGE, "host_alignment": "exact"},
    "scheduler": {"chunked_prefill_size": 8192},
    "metrics": {"timeseries_interval_s": 1.0},
}


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def scenario(**sections) -> Scenario:
    """The small base scenario with sections deep-merged over it."""
    return Scenario.model_validate(_merge(BASE, sections))


def resolved(**sections) -> Resolved:
    return resolve(scenario(**sections), strict=True)


def req(rid: str, t: float, keys: Iterable[int], *, out: int = 1, input_tokens: int | None = None, **fields) -> Request:
    """A request whose prompt is ``keys`` (whole pages unless ``input_tokens`` says otherwise)."""
    keys = tuple(keys)
    return Request(rid, t, input_tokens if input_tokens is not None else len(keys) * PAGE, out, keys, **fields)


def spaced(workload: Workload, gap_s: float) -> Workload:
    """The same requests, in the same order, ``gap_s`` apart (no load: each ends before the next), sent
    open loop: a closed loop's order under no load is the workload's order already (instant mode's)."""
    reqs = [dataclasses.replace(r, arrival_s=i * gap_s) for i, r in enumerate(workload.requests)]
    return dataclasses.replace(workload, requests=reqs, sender=None)


def workload_of(sc: Scenario) -> Workload:
    return build_workload(sc, sc.cache.page_size)


def instant_compute(r: Resolved) -> ComputeModel:
    """The preset model with a GPU so fast that every step takes ~0 s."""
    return ComputeModel(
        ComputeParams.from_resolved(r).with_overrides(
            peak_flops=1e30,
            linear_peak_flops=1e30,
            hbm_Bps=1e30,
            step_overhead_s=0.0,
            prefill_host_s_per_layer=0.0,
            decode_s_per_layer=0.0,
        )
    )


@dataclasses.dataclass
class FixedCompute:
    """A compute model with constant step times (the StepTimeModel interface)."""

    prefill_s: float
    decode_s: float = 0.001
    num_layers: int = 32
    step_overhead_s: float = 0.0
    pp: int = 1  # pipeline stages: ``prefill_s`` is then one stage's time

    def prefill_time(self, chunks) -> float:
        return self.prefill_s if any(n for n, _ in chunks) else 0.0

    def decode_time(self, batch_size: int, kv_tokens: int) -> float:
        return self.decode_s if batch_size else 0.0


def hits(rows: list[dict]) -> list[tuple]:
    """(rid, device, host, storage) hit pages of the finished requests."""
    return [
        (r["rid"], r["device_hit_pages"], r["host_hit_pages"], r["storage_hit_pages"])
        for r in rows
        if r["status"] == "finished"
    ]
