"""The core against SGLang 0.5.23's own cache code with a storage tier (L3).

``validation/sglang_cache/targets.json`` holds what SGLang's UnifiedRadixCache, HiCache and its
file storage backend gave on the Mooncake traces, row by row (made by
``python -m validation.sglang_cache run``; SGLang is not installed here, the file is read). Each
row is run through the core in instant mode with the same configuration
(docs/reference/sglang-conformance.md, "Storage rows"): every tier's page hit rate must agree within
0.001, and the counters both sides name the same way must be equal. Rows that do not agree yet
are strict xfails naming the mechanism believed to differ, so a fix shows as an unexpected pass.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hicache_sim.instant import InstantResult
from validation.sglang_cache.rows import all_rows, run_core

TARGETS = Path(__file__).resolve().parent.parent / "validation" / "sglang_cache" / "targets.json"
DOC = json.loads(TARGETS.read_text(encoding="utf-8"))
TOL = 0.001
TIERS = ("device", "host", "storage")
# SGLang's counter (targets.json "counters") -> the core's Counters field of the same meaning.
SAME_COUNTERS = (
    "backup_failures",
    "host_evict_calls",
    "device_evict_calls",
    "backups",
    "backup_pages",
    "storage_backups",
    "storage_backup_pages",
)

# Rows whose hit rates the core does not reproduce yet: row id -> the mechanism believed to differ.
XFAIL: dict[str, str] = {}
# Rows whose counters differ (hit rates agreeing): row id -> why.
XFAIL_COUNTERS: dict[str, str] = {}


@pytest.fixture(scope="module")
def core_run(synthetic_trace, conversation_trace):
    """The core's instant run of a target row (each row run once for both tests)."""
    traces = {"synthetic": synthetic_trace, "conversation": conversation_trace}
    done: dict[str, InstantResult] = {}

    def run(row: dict) -> InstantResult:
        if row["id"] not in done:
            done[row["id"]] = run_core(row, traces[row["config"]["trace"]])
        return done[row["id"]]

    return run


def test_targets_cover_every_row_and_say_how_they_were_made():
    """Every row the driver defines has its SGLang figures, with the version and the command."""
    assert [r["id"] for r in DOC["rows"]] == [r["id"] for r in all_rows()]
    assert DOC["sglang_version"] == "0.5.23"
    assert "python -m validation.sglang_cache run" in DOC["command"]
    assert "limit" not in DOC  # whole traces, not a quick check
    for row, want in zip(DOC["rows"], all_rows()):
        assert row["config"] == {k: v for k, v in want.items() if k != "id"}
        assert row["requests"] == {"synthetic": 3993, "conversation": 12031}[row["config"]["trace"]]
        assert sum(row["hit_pages"].values()) <= row["prompt_pages"]
        # SGLang ran the write policy the row says it resolves to (buffer_only: write_back -> write_through).
        assert row["sglang_settings"]["write_policy"] == row["config"]["write_policy_resolved"]


def _params(xfails: dict[str, str]):
    for row in DOC["rows"]:
        marks = [pytest.mark.xfail(reason=xfails[row["id"]], strict=True)] if row["id"] in xfails else []
        yield pytest.param(row, id=row["id"], marks=marks)


@pytest.mark.parametrize("row", list(_params(XFAIL)))
def test_core_matches_sglang_per_tier(core_run, row):
    res = core_run(row)
    assert not res.rejected
    assert sum(res.prompt_pages) == row["prompt_pages"]
    got = res.page_hit_rate()
    for tier in TIERS:
        want = row["hit_pages"][tier] / row["prompt_pages"]
        assert got[tier] == pytest.approx(want, abs=TOL), f"{tier}: core {got[tier]:.6f}, SGLang {want:.6f}"


@pytest.mark.parametrize("row", list(_params(XFAIL_COUNTERS)))
def test_core_counters_match_sglang(core_run, row):
    """Backups, evict calls and storage traffic; prefetches issued and storage hits given host room."""
    c = core_run(row).cache.counters
    want = row["counters"]
    got = {name: getattr(c, name) for name in SAME_COUNTERS}
    assert got == {name: want.get(name, 0) for name in SAME_COUNTERS}
    assert c.prefetch_issued == row["prefetch_outcomes"]["issued"]
    # Every storage hit asks the host for room (allocate_storage_hit); the core completes it or fails it.
    assert c.prefetch_completed + c.prefetch_host_alloc_failed == want.get("storage_hit_allocs", 0)
    assert c.prefetch_host_alloc_failed == want.get("storage_hit_alloc_failures", 0)
