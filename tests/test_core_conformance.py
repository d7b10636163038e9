"""Conformance with SGLang's own cache code (docs/reference/sglang-conformance.md) and the
host-smaller-than-device shape on the Mooncake conversation trace (reference 5.3, 5.4)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hicache_sim.core import CacheConfig
from hicache_sim.instant import run_instant

DOC = Path(__file__).resolve().parent.parent / "docs" / "reference" / "sglang-conformance.md"

# run, L1 pages, L2 pages, chunk pages (None: whole prompt), match ("whole" or "cap": input - 1),
# SGLang's L1 and L1+L2 page hit rates. Settings as the document names them: page_size 512,
# write_through, evicted_only, lru, node granularity (page in the c1 row).
ROWS = [
    ("c0", 1000, 0, None, "whole", 0.08239, 0.08239, 0),
    ("c0", 3000, 0, None, "whole", 0.18739, 0.18739, 0),
    ("c0", 1000, 500, None, "whole", 0.08239, 0.08322, 1303),
    ("c0", 3000, 1500, None, "whole", 0.18739, 0.18739, 1335),
    ("c0", 1000, 4000, None, "whole", 0.08248, 0.23013, 0),
    ("c0", 3000, 6000, None, "whole", 0.18739, 0.31071, 0),
    ("c16", 3000, 1500, 16, "whole", 0.18990, 0.18990, 6083),
    ("c16", 3000, 6000, 16, "whole", 0.19003, 0.31110, 0),
    ("cap", 3000, 6000, None, "cap", 0.18704, 0.30998, 0),
    ("c1", 3000, 6000, None, "whole", 0.19057, 0.31201, 0),
]


def test_rows_are_the_documents_rows():
    text = DOC.read_text(encoding="utf-8")
    doc_rows = []
    for line in text.splitlines():
        m = re.match(r"\| (c0|c16|cap|c1) \| (\d+) \| (\d+) \| [^|]+ \| [^|]+ \| ([\d.]+) \| ([\d.]+) \|", line)
        if m:
            doc_rows.append((m[1], int(m[2]), int(m[3]), float(m[4]), float(m[5])))
    assert doc_rows == [(r[0], r[1], r[2], r[5], r[6]) for r in ROWS]


@pytest.mark.parametrize(
    ("run", "l1", "l2", "chunk", "match", "want_l1", "want_l12", "failed"),
    ROWS,
    ids=[f"{r[0]}-L1_{r[1]}-L2_{r[2]}" for r in ROWS],
)
def test_conformance_with_sglang(synthetic_trace, run, l1, l2, chunk, match, want_l1, want_l12, failed):
    config = CacheConfig(
        512,
        l1,
        l2,
        write_policy="write_through",
        host_eviction="evicted_only",
        eviction_policy="lru",
        eviction_granularity="page" if run == "c1" else "node",
    )
    res = run_instant(config, synthetic_trace, chunk_pages=chunk, reserve_last_token=match == "cap")
    rate = res.page_hit_rate()
    assert not res.rejected
    assert rate["device"] == pytest.approx(want_l1, abs=0.001)
    assert rate["device"] + rate["host"] == pytest.approx(want_l12, abs=0.001)
    if failed is not None:
        assert res.cache.counters.backup_failures == failed


def test_chunked_prefill_and_page_level_nodes_change_the_hit_rate(synthetic_trace):
    """The document's point: node boundaries matter. Same L1/L2, three node shapes, three L1 rates."""
    rates = {}
    for name, chunk, gran in (("whole", None, "node"), ("c16", 16, "node"), ("page", None, "page")):
        cfg = CacheConfig(512, 3000, 0, eviction_granularity=gran)
        rates[name] = run_instant(cfg, synthetic_trace, chunk_pages=chunk, reserve_last_token=False).page_hit_rate()[
            "device"
        ]
    assert rates["whole"] < rates["c16"] < rates["page"]


# ------------------------------------------------------------------ Mooncake conversation, host < device


@pytest.fixture(scope="module")
def conversation_runs(conversation_trace):
    out = {}
    for rule in ("evicted_only", "reclaim_mirrors", "boundary"):
        cfg = CacheConfig(512, 6000, 3000, write_policy="write_through", host_eviction=rule)
        res = run_instant(cfg, conversation_trace, reserve_last_token=False)
        rate = res.page_hit_rate()
        out[rule] = {
            "l12": rate["device"] + rate["host"],
            "res": res.cache.residency(),
            "failed": res.cache.counters.failed_host_allocations,
            "rejected": len(res.rejected),
        }
    return out


def mirror_share(run) -> float:
    return run["res"]["mirror_pages"] / run["res"]["host_pages"]


def test_conversation_trace_size(conversation_trace):
    assert len(conversation_trace) == 12031
    assert sum(len(r.page_keys) for r in conversation_trace) == 288500


def test_evicted_only_fills_the_host_with_mirrors_and_starves(conversation_runs):
    run = conversation_runs["evicted_only"]
    assert run["res"]["host_pages"] > 0.95 * 3000  # the host is full...
    assert mirror_share(run) > 0.95  # ...of copies of pages the GPU still holds
    assert run["failed"] > 1000


@pytest.mark.parametrize("rule", ["reclaim_mirrors", "boundary"])
def test_reclaiming_rules_keep_unique_content_in_host(conversation_runs, rule):
    run = conversation_runs[rule]
    assert run["res"]["host_pages"] > 0.95 * 3000
    assert mirror_share(run) < 0.25
    assert run["failed"] < 10
    assert run["rejected"] == 0
    assert run["l12"] > conversation_runs["evicted_only"]["l12"] + 0.005
