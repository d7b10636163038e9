"""A target met exactly counts as met (issue 30 item 1: `>` for `>=` survived the suite): a hit-rate
target equal to a row's hit rate, or a TTFT p99 target equal to a row's TTFT, picks that row."""

from __future__ import annotations

import pandas as pd

from hicache_sim.advise import HIT, POLICY, RULE, SIZE, TTFT, Target, smallest_meeting


def _table() -> pd.DataFrame:
    rows = [(4, 0.40, 3.0), (8, 0.50, 2.0), (16, 0.60, 1.5)]
    return pd.DataFrame([{SIZE: s, POLICY: "write_through", RULE: "evicted_only", HIT: h, TTFT: t} for s, h, t in rows])


def test_a_hit_rate_target_equal_to_a_rows_hit_rate_is_met_there():
    assert smallest_meeting(_table(), Target("hit_rate", 0.5), 0.5)[SIZE] == 8
    assert smallest_meeting(_table(), Target("hit_rate", 0.5000001), 0.5000001)[SIZE] == 16


def test_a_ttft_target_equal_to_a_rows_ttft_is_met_there():
    assert smallest_meeting(_table(), Target("ttft_p99", 2.0), 2.0)[SIZE] == 8
    assert smallest_meeting(_table(), Target("ttft_p99", 1.9999999), 1.9999999)[SIZE] == 16
