"""summary.json's headline figures derived by hand (issue 30 item 1): hit rate per tier with storage,
rejected requests inside the window, TTFT percentiles and throughput. Every expected number is computed
in the test body from the six requests below, not copied from a run; each test fails on the mutant the
issue names (total without storage, rejected requests counted, p98 for p99, throughput over the
simulated time instead of the window's span)."""

from __future__ import annotations

import pandas as pd
import pytest

from hicache_sim.output.summary import build_summary

#: Six requests in arrival order; the first is the warm-up (1/6 of six). Request 3 was rejected.
ROWS = [
    # prompt, pages, device, host, storage (tokens), status, arrival, ttft, finish, output tokens
    (1000, 10, 500, 0, 0, "finished", 0.0, 0.5, 2.0, 10),
    (2000, 20, 600, 400, 200, "finished", 1.0, 0.4, 3.0, 20),
    (1000, 10, 0, 300, 500, "finished", 2.0, 0.9, 4.5, 30),
    (4000, 40, 0, 0, 0, "rejected", 3.0, None, None, 0),
    (3000, 30, 1200, 0, 900, "finished", 4.0, 2.0, 8.0, 40),
    (500, 5, 100, 100, 100, "finished", 5.0, 0.2, 6.0, 50),
]


def _frame() -> pd.DataFrame:
    rows = []
    for i, (prompt, pages, dev, host, sto, status, arr, ttft, fin, out) in enumerate(ROWS):
        per_page = prompt // pages
        rows.append(
            {
                "rid": f"r{i}",
                "prompt_tokens": prompt,
                "prompt_pages": pages,
                "device_hit_tokens": dev,
                "host_hit_tokens": host,
                "storage_hit_tokens": sto,
                "device_hit_pages": dev // per_page,
                "host_hit_pages": host // per_page,
                "storage_hit_pages": sto // per_page,
                "status": status,
                "arrival_s": arr,
                "ttft_s": ttft,
                "finish_s": fin,
                "e2e_s": None if fin is None else fin - arr,
                "output_tokens": out,
            }
        )
    return pd.DataFrame(rows)


def _summary(timed: bool = True) -> dict:
    return build_summary(
        _frame(),
        warmup_fraction=1 / 6,
        counters={},
        residency={},
        sizes={},
        mode="timed" if timed else "instant",
        timed={"sim_time_s": 100.0, "links": {}} if timed else None,
    )


#: The window: requests 1..5; the finished ones: 1, 2, 4, 5 (3 was rejected).
FINISHED = [ROWS[i] for i in (1, 2, 4, 5)]


def test_hit_rate_per_tier_counts_storage_and_only_finished_requests():
    s = _summary()
    prompt = sum(r[0] for r in FINISHED)  # 6,500: the rejected 4,000 are not in the denominator
    dev, host, sto = (sum(r[k] for r in FINISHED) for k in (2, 3, 4))
    assert (prompt, dev, host, sto) == (6500, 1900, 800, 1700)
    assert s["hit_rate"]["device"] == pytest.approx(1900 / 6500)
    assert s["hit_rate"]["host"] == pytest.approx(800 / 6500)
    assert s["hit_rate"]["storage"] == pytest.approx(1700 / 6500)
    assert s["hit_rate"]["total"] == pytest.approx(4400 / 6500)
    pages = sum(r[1] for r in FINISHED)
    assert s["page_hit_rate"]["storage"] == pytest.approx(17 / pages)
    # The window's prompt totals do count the rejected request: they say what was offered.
    assert s["window"]["prompt_tokens"] == 2000 + 1000 + 4000 + 3000 + 500
    assert (s["requests"], s["requests_finished"], s["requests_rejected"]) == (6, 5, 1)


def _linear_percentile(values: list[float], q: float) -> float:
    """The q-th percentile by linear interpolation between order statistics (rank q/100 x (n - 1))."""
    v = sorted(values)
    rank = q / 100 * (len(v) - 1)
    lo = int(rank)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (rank - lo)


def test_ttft_percentiles_of_the_windows_finished_requests():
    s = _summary()
    ttft = [r[7] for r in FINISHED]  # 0.4, 0.9, 2.0, 0.2
    assert s["ttft_s"]["mean"] == pytest.approx(3.5 / 4)
    assert s["ttft_s"]["p50"] == pytest.approx((0.4 + 0.9) / 2)
    # p90: rank 2.7 between 0.9 and 2.0; p99: rank 2.97 (a p98 would be rank 2.94: 1.934 against 1.967).
    assert s["ttft_s"]["p90"] == pytest.approx(0.9 + 0.7 * 1.1)
    assert s["ttft_s"]["p99"] == pytest.approx(0.9 + 0.97 * 1.1)
    assert s["ttft_s"]["p99"] == pytest.approx(_linear_percentile(ttft, 99))
    e2e = [r[8] - r[6] for r in FINISHED]  # 2.0, 2.5, 4.0, 1.0
    assert s["e2e_s"]["p50"] == pytest.approx(2.25)
    assert s["e2e_s"]["p99"] == pytest.approx(_linear_percentile(e2e, 99))


def test_throughput_over_the_windows_span_not_the_simulated_time():
    s = _summary()
    span = 8.0 - 1.0  # first arrival of a finished window request (1.0) to the last finish (8.0)
    assert s["throughput"]["requests_per_s"] == pytest.approx(4 / span)
    assert s["throughput"]["input_tokens_per_s"] == pytest.approx(6500 / span)
    assert s["throughput"]["output_tokens_per_s"] == pytest.approx((20 + 30 + 40 + 50) / span)
    assert s["sim_time_s"] == 100.0


def test_instant_mode_has_hit_rates_and_no_time():
    s = _summary(timed=False)
    assert s["hit_rate"]["total"] == pytest.approx(4400 / 6500)
    assert "ttft_s" not in s and "throughput" not in s
    assert set(s["scopes"]) == set(s) - {"mode", "scopes"}


def test_a_runs_storage_hits_reach_its_summary():
    """A real run with a store: the summary's storage share and total are the window's finished rows'
    own sums (not only a lower bound), and the storage share is not zero."""
    import hicache_sim

    r = hicache_sim.run("builtin:buffer_only_storage", mode="instant", workload__trace__limit=600)
    rows = r.requests.iloc[r.summary["window"]["first_request"] :]
    rows = rows[rows["status"] == "finished"]
    prompt = rows["prompt_tokens"].sum()
    share = {t: rows[f"{t}_hit_tokens"].sum() / prompt for t in ("device", "host", "storage")}
    assert share["storage"] > 0.1
    for tier, value in share.items():
        assert r.summary["hit_rate"][tier] == pytest.approx(value, rel=1e-12)
    assert r.summary["hit_rate"]["total"] == pytest.approx(sum(share.values()), rel=1e-12)
