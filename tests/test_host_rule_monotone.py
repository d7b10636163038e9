"""More host memory never costs hits (issue 9, part 3).

For every write policy and every host-eviction rule in the registries, the L1+L2 page hit rate on the
first 2,000 requests of the Mooncake synthetic trace (device 1,000 pages of 512 tokens, whole prompts)
falls by at most ``TOLERANCE`` anywhere along a growing host pool, which crosses host = device and one
page more: where reclaim_mirrors' old capacity switch flipped its order (it lost 0.022 there: 0.041 of
pages at host 999, 0.018 at 1,001).
The full-size grid is ``results/host_ratio_monotone``.
"""

from __future__ import annotations

import pytest

from hicache_sim.core import HOST_EVICTION_RULES, WRITE_POLICIES, CacheConfig
from hicache_sim.instant import run_instant

DEVICE_PAGES = 1000
HOST_PAGES = [250, 500, 999, 1000, 1001, 2000]
REQUESTS = 2000
TOLERANCE = 0.002  # of prompt pages: the most a larger host may lose against any smaller one


@pytest.mark.parametrize("policy", WRITE_POLICIES.names())
@pytest.mark.parametrize("rule", HOST_EVICTION_RULES.names())
def test_more_host_memory_never_loses_hits(synthetic_trace, rule, policy):
    rates = []
    for host in HOST_PAGES:
        config = CacheConfig(512, DEVICE_PAGES, host, write_policy=policy, host_eviction=rule)
        rates.append(run_instant(config, synthetic_trace[:REQUESTS]).page_hit_rate()["total"])
    loss = max(max(rates[:i]) - rates[i] for i in range(1, len(rates)))
    assert loss <= TOLERANCE, {h: round(r, 4) for h, r in zip(HOST_PAGES, rates, strict=True)}
