"""reclaim_mirrors, new order against old, on the tight-device case of tests/test_host_rule_monotone.py.

Run from the repository root (about 20 s):

    python results/host_ratio_monotone/synthetic.py

Mooncake synthetic trace, first 2,000 requests, device 1,000 pages of 512 tokens, whole prompts: the
L1+L2 page hit rate per host size for reclaim_mirrors (new, and old as ``compare.py`` patches it in),
evicted_only and boundary, per write policy. Printed, not written: README.md's Limits quote it.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare import old_order

from hicache_sim.core import CacheConfig
from hicache_sim.instant import run_instant
from hicache_sim.workloads.traces import load_mooncake, vendored_trace

HOSTS = [250, 500, 999, 1000, 1001, 2000]


def rates(trace: list, policy: str, rule: str) -> list[float]:
    """Page hit rate (L1+L2) at each host size."""
    out = []
    for host in HOSTS:
        config = CacheConfig(512, 1000, host, write_policy=policy, host_eviction=rule)
        out.append(round(run_instant(config, trace).page_hit_rate()["total"], 4))
    return out


def main() -> None:
    trace = load_mooncake(vendored_trace("mooncake/synthetic_trace.jsonl"), 512)[:2000]
    print("host pages:", HOSTS)
    for policy in ["write_through", "write_through_selective", "write_back"]:
        new = rates(trace, policy, "reclaim_mirrors")
        with old_order():
            old = rates(trace, policy, "reclaim_mirrors")
        print(f"{policy}: reclaim_mirrors new {new}, old {old}")
        others = {rule: rates(trace, policy, rule) for rule in ("evicted_only", "boundary")}
        print(f"{policy}: evicted_only {others['evicted_only']}, boundary {others['boundary']}")


if __name__ == "__main__":
    main()
