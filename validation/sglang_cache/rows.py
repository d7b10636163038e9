"""The rows the driver runs: each one SGLang configuration, written in hicache-sim's terms.

A row's fields (pages are trace blocks, one per 512-token page):
``trace`` (a name in ``TRACES``), ``l1_pages`` / ``l2_pages`` (device / host pool), ``write_policy``
(as given to SGLang; ``write_policy_resolved`` is what it runs), ``host_memory_mode``,
``chunk_pages`` (None: whole prompt), ``match`` ("whole": the whole input; "cap": input - 1, as
SGLang's scheduler does), ``storage_pages`` (None: unbounded store), ``storage_eviction_ratio`` (HiCacheFile's
``eviction_ratio``: a full store evicts down to this fraction of its cap), ``prefetch_policy``,
``in_flight`` (requests admitted together; 1 everywhere here); the tlru rows only:
``eviction_policy`` and ``eviction_policy_config`` (``--radix-eviction-policy[-config]``, its counts
in blocks, SGLang's tokens with one token a block; the other rows run SGLang's default lru).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hicache_sim.core import CacheConfig
    from hicache_sim.instant import InstantResult

ROOT = Path(__file__).resolve().parents[2]
TRACES = {
    "synthetic": ROOT / "hicache_sim" / "data" / "traces" / "mooncake" / "synthetic_trace.jsonl",
    "conversation": ROOT / "hicache_sim" / "data" / "traces" / "mooncake" / "conversation_trace.jsonl",
}

#: The bounded store's capacity in pages (synthetic: 43,924 distinct blocks; conversation: 182,790).
BOUNDED = {"synthetic": 10000, "conversation": 40000}


def _row(rid: str, trace: str, l1: int, l2: int, policy: str, mode: str = "cache", **kw: Any) -> dict[str, Any]:
    from hicache_sim.core.policies import HOST_MEMORY_MODES

    resolved = HOST_MEMORY_MODES.get(mode).runs(policy)
    row = {
        "id": rid,
        "trace": trace,
        "l1_pages": l1,
        "l2_pages": l2,
        "write_policy": policy,
        "write_policy_resolved": resolved,
        "host_memory_mode": mode,
        "chunk_pages": None,
        "match": "whole",
        "storage_pages": None,
        "storage_eviction_ratio": 1.0,
        "prefetch_policy": "wait_complete",
        "in_flight": 1,
    }
    row.update(kw)
    return row


#: (host memory mode, id tag, write policy) of the rows run in three variants.
TRIO = (("cache", "cache", "write_through"), ("cache", "cache", "write_back"), ("buffer_only", "buf", "write_through"))


def all_rows() -> list[dict[str, Any]]:
    """Every row, in the order of the document's table."""
    rows = []
    policies = ("write_through", "write_through_selective", "write_back")
    abbrev = {"write_through": "wt", "write_through_selective": "wts", "write_back": "wb"}
    for mode, tag in (("cache", "cache"), ("buffer_only", "buf")):
        for p in policies:
            rows.append(_row(f"syn-{tag}-{abbrev[p]}", "synthetic", 1000, 2000, p, mode))
    for mode, tag, p in TRIO:
        rows.append(_row(f"syn-{tag}-{abbrev[p]}-c16", "synthetic", 1000, 2000, p, mode, chunk_pages=16))
    for mode, tag, p in TRIO:
        rows.append(
            _row(f"syn-{tag}-{abbrev[p]}-bounded", "synthetic", 1000, 2000, p, mode, storage_pages=BOUNDED["synthetic"])
        )
    rows.append(
        _row(
            "syn-cache-wt-bounded-r09",
            "synthetic",
            1000,
            2000,
            "write_through",
            storage_pages=BOUNDED["synthetic"],
            storage_eviction_ratio=0.9,
        )
    )
    for mode, tag in (("cache", "cache"), ("buffer_only", "buf")):
        rows.append(_row(f"syn-{tag}-wt-cap", "synthetic", 1000, 2000, "write_through", mode, match="cap"))
    for p in ("write_through", "write_back"):
        rows.append(_row(f"syn-cache-{abbrev[p]}-smallhost", "synthetic", 2000, 1000, p))
    for mode, tag, p in TRIO:
        rows.append(_row(f"conv-{tag}-{abbrev[p]}", "conversation", 2000, 4000, p, mode))
    # Tail-Optimized LRU (--radix-eviction-policy tlru): threshold and next-prompt estimate in blocks
    # (SGLang's tokens here); the synthetic rows at 8 / 1 (4,096 / 512 tokens of 512-token pages, the
    # example SGLang's flag help gives), the conversation rows at 32 / 4.
    for trace, (l1, l2), config in (
        ("syn", (1000, 2000), {"threshold": 8, "next_prompt_estimate": 1}),
        ("conv", (2000, 4000), {"threshold": 32, "next_prompt_estimate": 4}),
    ):
        for p in ("write_through", "write_back"):
            name = "synthetic" if trace == "syn" else "conversation"
            rows.append(
                _row(
                    f"{trace}-cache-{abbrev[p]}-tlru",
                    name,
                    l1,
                    l2,
                    p,
                    eviction_policy="tlru",
                    eviction_policy_config=config,
                )
            )
    return rows


def row_by_id(rid: str) -> dict[str, Any]:
    """The row named ``rid`` (KeyError naming the known ones otherwise)."""
    for row in all_rows():
        if row["id"] == rid:
            return row
    raise KeyError(f"no row {rid!r}; rows: {', '.join(r['id'] for r in all_rows())}")


def core_config(cfg: dict[str, Any]) -> CacheConfig:
    """A row's configuration (a target's ``config``) as the core's. Imports the core when called, so
    the driver's env can import this module without it."""
    from hicache_sim.core import CacheConfig

    bounded = cfg["storage_pages"] is not None
    return CacheConfig(
        512,
        cfg["l1_pages"],
        cfg["l2_pages"],
        write_policy=cfg["write_policy_resolved"],
        host_memory_mode=cfg["host_memory_mode"],
        host_eviction="evicted_only",
        # tlru rows: SGLang's thresholds are tokens of its 1-token pages, one trace block each; here a
        # block is a 512-token page.
        eviction_policy=cfg.get("eviction_policy", "lru"),
        eviction_policy_config={k: v * 512 for k, v in cfg.get("eviction_policy_config", {}).items()},
        eviction_granularity="node",
        storage=True,
        storage_capacity_pages=cfg["storage_pages"],
        # HiCacheFile: unbounded without max_size; with it, its LRU evicting down to eviction_ratio x cap.
        storage_eviction="file_lru" if bounded else "file",
        storage_eviction_params={"low_watermark": cfg["storage_eviction_ratio"]} if bounded else {},
        prefetch_policy=cfg["prefetch_policy"],
    )


def run_core(row: dict[str, Any], trace: list) -> InstantResult:
    """The core's instant run of a target row over the first ``requests`` of its trace (page size 512)."""
    from hicache_sim.instant import run_instant

    cfg = row["config"]
    return run_instant(
        core_config(cfg),
        trace[: row["requests"]],
        chunk_pages=cfg["chunk_pages"],
        reserve_last_token=cfg["match"] == "cap",
    )
