"""The runner's side of data-parallel ranks: instant mode over the ranks, and summary.json's ``dp_ranks``.

Instant mode has no queues, so it can route only by a method that reads none: ``round_robin`` (request i
of the run's order goes to rank i mod ranks, as SGLang's controller counts them). Each rank replays its
share through its own cache; the load-aware methods need a timed run, as ranks sharing one store do:
``resolve`` refuses both in instant mode with one line (``scenario/resolve.check_dp_mode``).
The timed world over the ranks is :mod:`hicache_sim.sim.dp`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from .core import CacheConfig, HiCache
from .core.routing import ROUTERS
from .instant import InstantResult, run_instant
from .output.columns import Columns
from .output.summary import SCOPES, _percentiles, hit_rates

if TYPE_CHECKING:
    from .scenario import Resolved
    from .sim.dp import DPResult
    from .workloads import Request


class _Pool:
    """Pages in use over the ranks' pools of one kind."""

    def __init__(self, pools: list) -> None:
        self.pools = pools

    def used(self) -> int:
        return sum(p.used() for p in self.pools)


class RankCaches:
    """The ranks' caches read as one for the run's totals: counters and residency summed."""

    def __init__(self, caches: list[HiCache]) -> None:
        self.caches = caches
        self.device = _Pool([c.device for c in caches])
        self.host = _Pool([c.host for c in caches])

    def counter_values(self) -> dict[str, Any]:
        return _sum([c.counter_values() for c in self.caches])

    def residency(self) -> dict[str, int]:
        return _sum([c.residency() for c in self.caches])


def _sum(dicts: list[dict]) -> dict:
    out: dict = {}
    for d in dicts:
        for key, v in d.items():
            out[key] = out.get(key, 0) + v
    return out


def run_instant_dp(r: Resolved) -> Callable[..., InstantResult]:
    """:func:`~hicache_sim.instant.run_instant` over the scenario's DP ranks, round robin. The result
    holds every request's hits in the run's order, ``cache`` the ranks' caches summed and ``row_ranks``
    the rank of each request."""
    # resolve() refused the load-aware methods and a shared store in instant mode (check_dp_mode).
    method = r.scenario.hardware.load_balance_method
    n = r.dp_ranks

    def run(
        config: CacheConfig,
        requests: Iterable[Request],
        *,
        on_request: Callable[[int, Any], None] | None = None,
        record_transfers: bool = False,
        **kw: Any,
    ) -> InstantResult:
        # Each rank replays its share in the run's order; a rank's share is held in memory meanwhile.
        shares: list[list[tuple[int, Request]]] = [[] for _ in range(n)]
        router = ROUTERS.get(method)(n)
        total = 0
        for i, req in enumerate(requests):
            shares[router.pick(req.input_tokens)].append((i, req))
            total = i + 1
        results = []
        for k, share in enumerate(shares):
            index = [i for i, _ in share]

            def sample(j: int, cache: HiCache, index: list[int] = index) -> None:
                if on_request is not None and j < len(index):
                    on_request(index[j], cache)

            res = run_instant(config, [q for _, q in share], on_request=sample, record_transfers=record_transfers, **kw)
            for rec in res.transfers:  # the rank's request index -> the run's (its end: the run's end)
                j = int(rec["issued_at"])
                rec["issued_at"] = float(index[j] if j < len(index) else total)
                rec["dp_rank"] = k
            results.append((index, res))
        return _merge(results, n)

    return run


def _merge(results: list[tuple[list[int], InstantResult]], n: int) -> InstantResult:
    """The ranks' results as one in the run's order, with each request's rank."""
    total = sum(len(index) for index, _ in results)
    slots: list[tuple | None] = [None] * total
    for k, (index, res) in enumerate(results):
        for j, i in enumerate(index):
            slots[i] = (k, res.rids[j], res.prompt_pages[j], res.device_hit[j], res.host_hit[j], res.storage_hit[j])
    out = InstantResult(RankCaches([res.cache for _, res in results]))  # type: ignore[arg-type]
    out.row_ranks = [s[0] for s in slots]  # type: ignore[attr-defined, index]
    for s in slots:
        _, rid, pages, d, h, st = s  # type: ignore[misc]
        out.rids.append(rid)
        out.prompt_pages.append(pages)
        out.device_hit.append(d)
        out.host_hit.append(h)
        out.storage_hit.append(st)
    for _, res in results:
        out.rejected.extend(res.rejected)
        out.transfers.extend(res.transfers)
    return out


def dp_residency(dp: DPResult) -> dict[str, int]:
    """Pages resident at the end over every rank."""
    return RankCaches([rank.cache for rank in dp.ranks]).residency()


def dp_transfers(dp: DPResult) -> list[dict]:
    """Every rank's transfer log rows, each with its rank."""
    rows = []
    for k, rank in enumerate(dp.ranks):
        for rec in rank.transfers:
            rec["dp_rank"] = k
            rows.append(rec)
    return rows


def add_dp_block(summary: dict, table: Columns, links: list[dict] | None, counters: list[dict] | None) -> None:
    """Put ``dp_ranks`` into ``summary`` (before its ``scopes``): per rank, the requests it was sent and
    over the measured window's finished ones its hit rates and (timed) TTFT; with the aggregate above
    over all requests, as before."""
    win = summary["window"]
    measured = table.take(slice(win["first_request"], None))
    ranks = int(max(table["dp_rank"].tolist(), default=-1)) + 1
    block = []
    for k in range(ranks):
        mine = measured.take(measured["dp_rank"] == k)
        finished = mine.take(mine["status"] == "finished")
        row: dict[str, Any] = {
            "dp_rank": k,
            "requests": int((table["dp_rank"] == k).sum()),
            "requests_measured": len(mine),
            "requests_finished": len(finished),
            "hit_rate": hit_rates(finished, "tokens"),
        }
        if "ttft_s" in finished:
            row["ttft_s"] = _percentiles(finished["ttft_s"].tolist())
        if links is not None:
            row["links"] = links[k]
        if counters is not None:
            row["counters"] = counters[k]
        block.append(row)
    scopes = summary.pop("scopes")
    summary["dp_ranks"] = block
    summary["scopes"] = {**scopes, "dp_ranks": SCOPES["dp_ranks"]}


def dp_table(block: list[dict]) -> str:
    """The per-rank lines ``run`` prints under the summary line."""
    lines = ["per DP rank (hit rate = cached / prompt tokens of its finished requests in the window; seconds):"]
    for row in block:
        ttft = row.get("ttft_s")
        times = f", TTFT p50 {ttft['p50']:.3f} p99 {ttft['p99']:.3f}" if ttft and ttft["p50"] is not None else ""
        rate = row["hit_rate"]
        lines.append(
            f"  rank {row['dp_rank']}: {row['requests']} requests, hit rate device {rate['device']:.4f} host "
            f"{rate['host']:.4f} storage {rate['storage']:.4f} total {rate['total']:.4f}{times}"
        )
    return "\n".join(lines)
