"""Instant mode: a page-level hit-rate replay with every transfer completed at once.

The request loop is SGLang's scheduler with time taken out, one request at a time in arrival order:
complete every pending acknowledgement (the scheduler's ``check_hicache_events``), match and lock,
load the host hit back, allocate each prefill chunk and checkpoint after it, cache the finished
request. With a storage tier, a request's storage prefetch is issued and finished before it is
admitted (the stop policy has nothing to wait for). The clock (``cache.now``) is each request's
arrival, so a store's leases and cleaner periods (``core/stores.py``) see the trace's time. The fast
path for large sweeps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from .core import CacheConfig, HiCache, RequestState, check
from .workloads import Request


@dataclass
class InstantResult:
    """Per-request hit pages (device, host, storage) in request order, and the cache at the end."""

    cache: HiCache
    rids: list[str] = field(default_factory=list)
    prompt_pages: list[int] = field(default_factory=list)
    device_hit: list[int] = field(default_factory=list)
    host_hit: list[int] = field(default_factory=list)
    storage_hit: list[int] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    transfers: list[dict] = field(default_factory=list)

    def page_hit_rate(self, start: int = 0) -> dict[str, float]:
        """Page-weighted hit rates per tier over requests ``start:`` (fractions of prompt pages)."""
        total = sum(self.prompt_pages[start:]) or 1
        d = sum(self.device_hit[start:])
        h = sum(self.host_hit[start:])
        s = sum(self.storage_hit[start:])
        return {"device": d / total, "host": h / total, "storage": s / total, "total": (d + h + s) / total}


def run_instant(
    config: CacheConfig,
    requests: Iterable[Request],
    *,
    chunk_pages: int | None = None,
    reserve_last_token: bool = True,
    check_invariants: bool = False,
    record_transfers: bool = False,
    on_request: Callable[[int, HiCache], None] | None = None,
) -> InstantResult:
    """Replay ``requests`` through one HiCache with transfers completed immediately.

    ``chunk_pages``: chunked-prefill size in pages (None: whole prompt in one chunk); chunks start
    after the cached prefix and each allocates its own pages when it is prefilled, as SGLang's
    chunked prefill does. ``reserve_last_token``: match at most input - 1 tokens.
    ``check_invariants`` runs ``check`` after every request. ``record_transfers`` keeps every
    transfer's record (the transfer log the replay harness executes), each stamped with the index of
    the request that caused it in ``issued_at``.
    """
    cache = HiCache(config)
    res = InstantResult(cache)
    page_size = config.page_size
    storage = cache.storage is not None

    def collect(i: int) -> None:
        taken = cache.take_transfers()
        if record_transfers:
            for t in taken:
                rec = t.record()
                rec["issued_at"] = float(i)
                res.transfers.append(rec)

    # Bound once: the loop body runs once per request.
    inflight = cache.inflight
    begin, finish, alloc = cache.begin_request, cache.finish_request, cache.alloc_device
    rids, prompt_pages = res.rids.append, res.prompt_pages.append
    device_hit, host_hit, storage_hit = res.device_hit.append, res.host_hit.append, res.storage_hit.append
    for i, req in enumerate(requests):
        if req.arrival_s > cache.now:
            cache.now = req.arrival_s
        if inflight:
            cache.drain()
        if cache._outbox:
            collect(i)
        if cache.host_mode.stages:
            cache.flush_pending_writes()
            cache.drain()
        keys = list(req.page_keys)
        n = len(keys)
        limit = req.match_limit(page_size, reserve_last_token)
        if storage:
            _prefetch(cache, req, keys, limit)
        st = begin(req.rid, keys, limit, req.priority)
        if st.match_last_node.value is None:
            cache.load_host_hit(st)
        if chunk_pages is None:
            # _prefill of one chunk written out: allocate the pages after the cached prefix.
            more = n - len(st.pages)
            pages = alloc(more) if more > 0 else ()
            ok = pages is not None
            if ok:
                st.pages.extend(pages)
        else:
            ok = _prefill(cache, st, n, chunk_pages)
        if ok:
            finish(st)
        else:
            cache.abort_request(st)
            res.rejected.append(req.rid)
        rids(req.rid)
        prompt_pages(n)
        device_hit(st.device_hit)
        host_hit(st.host_hit)
        storage_hit(st.storage_hit)
        if cache._outbox:
            collect(i)
        if check_invariants:
            check(cache)
        if on_request is not None:
            on_request(i, cache)
    if cache.host_mode.stages:
        # The scheduler steps after the last request too: its pending buffer writes reach storage.
        cache.flush_pending_writes()
    cache.drain()
    collect(len(res.rids))
    if check_invariants:
        check(cache)
    return res


def _prefill(cache: HiCache, st: RequestState, n: int, chunk_pages: int | None) -> bool:
    """Allocate the request's pages chunk by chunk after its cached prefix, checkpointing after each
    chunk but the last, as SGLang's chunked prefill does; each later chunk is a new scheduler step,
    which first completes the acknowledgements. False when pages cannot be found."""
    start = end = len(st.pages)
    while end < n:
        if end > start:
            cache.drain()
        end = min(end + chunk_pages, n) if chunk_pages else n
        if not cache.extend_request(st, end - len(st.pages)):
            return False
        if end < n:
            cache.checkpoint_request(st, end)
    return True


def _prefetch(cache: HiCache, req: Request, keys: list[int], limit: int) -> None:
    """Issue the request's storage prefetch and let it finish before admission."""
    m = cache.match_prefix(keys[:limit])
    matched = m.device_hit_pages + m.host_hit_pages
    op = cache.prefetch(req.rid, m.last_node, keys[matched:limit], cache.now)
    if op is None:
        return
    cache.prefetch_query(req.rid)
    cache.drain()
    cache.check_prefetch_progress(req.rid, cache.now)
    cache.take_prefetch_misses()  # the request is admitted next: nothing is asked again
