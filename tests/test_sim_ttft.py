"""Closed-form TTFT cases of the timed world (issue 3):

- a prompt entirely in host memory with negligible compute: TTFT = latency + bytes / effective
  bandwidth;
- compute longer than the load: layer-wise overlap hides the load except the first layer's;
- a prompt entirely on the GPU pays no transfer.

Setup: A (32 pages) runs and is written through to host; B (32 other pages) pushes A out of the
40-page device pool, so A is host-only; C repeats A's prompt. C matches 31 pages (SGLang never
matches the page holding the last token), all in host memory, and loads them back.
"""

from __future__ import annotations

import pytest
from test_sim_support import PAGE, FixedCompute, instant_compute, req, resolved

from hicache_sim.sim import run_timed
from hicache_sim.workloads.synthetic import Workload

A = list(range(1, 33))
B = list(range(1001, 1033))
LOADED = 31  # pages of C found in host memory


def _host_hit_world() -> Workload:
    return Workload([req("A", 0.0, A), req("B", 1.0, B), req("C", 2.0, A)])


def _load_cost(r) -> tuple[float, float]:
    """(latency, seconds of link time) of loading LOADED pages, from first principles: one copy per
    layer, the first copy's latency up front, the other layers' latencies as link time."""
    h2d = r.links["h2d"]
    page_bytes = PAGE * r.bytes_per_token  # 8 MiB for Llama-3.1-8B
    piece = page_bytes / (r.model.num_layers * 2)  # page_first: one piece per page, layer and K/V
    eff = piece / (piece + h2d.half_efficiency_bytes)
    extra = (r.model.num_layers - 1) * h2d.latency_s
    return h2d.latency_s, extra + LOADED * page_bytes / (h2d.bandwidth_Bps * eff)


def _row(res, rid: str) -> dict:
    return next(x for x in res.requests if x["rid"] == rid)


def test_host_prompt_with_negligible_compute_costs_latency_plus_bytes_over_effective_bandwidth():
    r = resolved()
    res = run_timed(r, _host_hit_world(), compute=instant_compute(r), check_invariants=True)
    c = _row(res, "C")
    assert c["host_hit_pages"] == LOADED and c["device_hit_pages"] == 0
    latency, work = _load_cost(r)
    expected = latency + work
    assert c["ttft_s"] == pytest.approx(expected, rel=0.01)
    assert c["load_wait_s"] == pytest.approx(expected, rel=0.01)
    loads = [t for t in res.transfers if t["kind"] == "h2d"]
    assert [(t["request_id"], t["pages"]) for t in loads] == [("C", LOADED)]
    assert loads[0]["duration_s"] == pytest.approx(expected, rel=1e-9)


def test_compute_longer_than_the_load_hides_all_but_the_first_layer():
    r = resolved()
    compute = FixedCompute(prefill_s=0.05)  # 1.6 ms per layer, longer than a layer's load
    res = run_timed(r, _host_hit_world(), compute=compute, check_invariants=True)
    c = _row(res, "C")
    latency, work = _load_cost(r)
    first_layer = latency + work / r.model.num_layers
    assert work / r.model.num_layers < compute.prefill_s / compute.num_layers
    assert c["ttft_s"] - compute.prefill_s == pytest.approx(first_layer, rel=0.01)
    assert c["load_wait_s"] == pytest.approx(first_layer, rel=0.01)
    assert c["ttft_s"] < compute.prefill_s + latency + work  # the rest of the load is hidden


def test_load_longer_than_compute_shows_the_unhidden_part_only():
    r = resolved()
    compute = FixedCompute(prefill_s=0.002)
    res = run_timed(r, _host_hit_world(), compute=compute)
    c = _row(res, "C")
    latency, work = _load_cost(r)
    # Each layer computes right after it arrives: the last layer's compute follows the whole load.
    assert c["ttft_s"] == pytest.approx(latency + work + compute.prefill_s / compute.num_layers, rel=0.01)


def test_prompt_entirely_on_device_pays_no_transfer():
    r = resolved()
    compute = FixedCompute(prefill_s=0.02)
    res = run_timed(r, Workload([req("D", 0.0, A), req("E", 1.0, A)]), compute=compute, check_invariants=True)
    e = _row(res, "E")
    assert e["device_hit_pages"] == LOADED and e["host_hit_pages"] == 0
    assert e["ttft_s"] == pytest.approx(compute.prefill_s, rel=1e-9)
    assert e["load_wait_s"] == 0.0
    assert not [t for t in res.transfers if t["kind"] == "h2d"]
    assert res.links["h2d"]["bytes"] == 0
