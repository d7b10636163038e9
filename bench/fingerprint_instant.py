"""Fingerprint of the instant core's results: one hash per configuration, to show an optimisation
changed no number.

Runs the first 3,000 requests of the Mooncake conversation trace through every write policy x host
eviction rule x eviction strategy (63 configurations), plus six that reach other paths (2025
semantics under each write policy, page granularity, a storage tier, buffer_only), and hashes each
run's page hit rates, per-request hits, rejections, counters and transfer log. Run it on the code
before a change and after; the two outputs must be equal line for line.

    PYTHONPATH=. python bench/fingerprint_instant.py > /tmp/after.txt
"""

from __future__ import annotations

import argparse
import hashlib
import json
from dataclasses import asdict

from hicache_sim.core import CacheConfig
from hicache_sim.core.policies import EVICTION_STRATEGIES, HOST_EVICTION_RULES, WRITE_POLICIES
from hicache_sim.instant import run_instant
from hicache_sim.workloads.traces import load_mooncake, vendored_trace

TRACE = "mooncake/conversation_trace.jsonl"
PAGE_SIZE = 512


def configs() -> list[tuple[str, CacheConfig, int | None]]:
    """(label, config, chunk_pages) for every fingerprinted run."""
    out = []
    base = {"page_size": PAGE_SIZE, "device_pages": 2000, "host_pages": 1000}
    for wp in sorted(WRITE_POLICIES.names()):
        for rule in sorted(HOST_EVICTION_RULES.names()):
            for strat in sorted(EVICTION_STRATEGIES.names()):
                cfg = CacheConfig(**base, write_policy=wp, host_eviction=rule, eviction_policy=strat)
                out.append((f"{wp}/{rule}/{strat}", cfg, None))
    for wp in sorted(WRITE_POLICIES.names()):
        out.append((f"2025/{wp}", CacheConfig(**base, write_policy=wp, semantics="2025"), 8))
    out.append(("page_granularity", CacheConfig(**base, eviction_granularity="page", host_eviction="boundary"), 4))
    storage = {"storage": True, "storage_capacity_pages": 3000}
    out.append(("storage", CacheConfig(**base, **storage), None))
    out.append(("buffer_only", CacheConfig(**base, **storage, host_memory_mode="buffer_only"), None))
    return out


def fingerprint(cfg: CacheConfig, requests, chunk_pages: int | None) -> tuple[str, dict]:
    res = run_instant(cfg, requests, chunk_pages=chunk_pages, record_transfers=True)
    rate = res.page_hit_rate()
    payload = {
        "page_hit_rate": rate,
        "device_hit": res.device_hit,
        "host_hit": res.host_hit,
        "storage_hit": res.storage_hit,
        "rejected": res.rejected,
        "counters": asdict(res.cache.counters),
        "residency": res.cache.residency(),
        "transfers": res.transfers,
    }
    blob = json.dumps(payload, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16], rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=3000)
    args = ap.parse_args()
    requests = load_mooncake(vendored_trace(TRACE), PAGE_SIZE)[: args.requests]
    runs = configs()
    for label, cfg, chunk in runs:
        digest, rate = fingerprint(cfg, requests, chunk)
        print(f"{label:50s} {digest} total={rate['total']:.6f}")
    print(f"{len(runs)} configurations")


if __name__ == "__main__":
    main()
