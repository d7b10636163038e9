"""Drive SGLang 0.5.23's own UnifiedRadixCache (HiCache + a CPU storage backend) over a trace.

Runs only inside the driver's virtual env (``python -m validation.sglang_cache install``); the
parent command starts it there. One trace block is one token with ``page_size`` 1, so SGLang's
radix tree over tokens is the tree over blocks; pool sizes are exact block counts.

The request loop is the scheduler's, one request at a time and every queue drained between
steps (see docs/reference/sglang-conformance.md for the list of calls and what they mirror).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from array import array
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Settings SGLang reads from the environment when its modules load.
os.environ.setdefault("SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND", "python")

#: How long one wait for a background thread (storage IO, prefetch) may take before the run fails.
WAIT_S = 60.0


@dataclass
class RowResult:
    """One row's SGLang figures: hit pages per tier and the counters."""

    prompt_pages: int = 0
    device_hit: int = 0
    host_hit: int = 0
    storage_hit: int = 0
    counters: Counter = field(default_factory=Counter)
    prefetch_stats: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    sglang_settings: dict[str, str] = field(default_factory=dict)

    def rates(self) -> dict[str, float]:
        """Page hit rates per tier (fractions of prompt pages)."""
        n = self.prompt_pages or 1
        return {
            "device": self.device_hit / n,
            "host": self.host_hit / n,
            "storage": self.storage_hit / n,
            "total": (self.device_hit + self.host_hit + self.storage_hit) / n,
        }


def load_trace(path: Path, limit: int | None = None) -> list[list[int]]:
    """Mooncake jsonl: each request's block ids, in timestamp order (file order on ties)."""
    rows = []
    with path.open(encoding="utf-8") as f:
        for i, line in enumerate(f):
            if line.strip():
                rec = json.loads(line)
                rows.append((rec["timestamp"], i, [int(h) for h in rec["hash_ids"]]))
    rows.sort(key=lambda r: (r[0], r[1]))
    blocks = [r[2] for r in rows]
    return blocks[:limit] if limit is not None else blocks


class _SchedulerShim:
    """The attributes ``Scheduler._prefetch_kvcache`` reads, so the scheduler's own method runs."""

    def __init__(self, tree_cache: Any) -> None:
        self.tree_cache = tree_cache
        self.enable_hicache_storage = True
        self.enable_lmcache = False


class Driver:
    """One SGLang cache built for a row, and the scheduler's request loop over it."""

    def __init__(self, row: dict[str, Any], storage_dir: str) -> None:
        from . import stubs

        stubs.apply()
        import torch
        from sglang.srt.arg_groups.hicache_hook import handle_hicache
        from sglang.srt.arg_groups.pipeline import run_hook
        from sglang.srt.managers.scheduler import Scheduler
        from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams
        from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
        from sglang.srt.mem_cache.unified_cache.components.base import ComponentType
        from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
        from sglang.srt.runtime_context import get_memory, get_parallel
        from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

        self.row = row
        l1, l2 = row["l1_pages"], row["l2_pages"]
        extra: dict[str, Any] = {
            # One block is one token here, and the trace's 512-token block is above SGLang's
            # default 256-token threshold: every block-sized prefetch passes it.
            "prefetch_threshold": 1,
            "file_storage_path": storage_dir,
        }
        if row["storage_pages"] is not None:
            # HiCacheFile's own bound (LRUFileEvictor): a byte cap and the fraction it evicts down to.
            extra["max_size"] = str(row["storage_pages"] * self._page_bytes())
            extra["eviction_ratio"] = row["storage_eviction_ratio"]
        os.environ["SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"] = storage_dir
        server_args = ServerArgs(
            model_path="dummy",
            page_size=1,
            enable_hierarchical_cache=True,
            hicache_io_backend="kernel",
            hicache_write_policy=row["write_policy"],
            hicache_storage_backend="file",
            hicache_storage_backend_extra_config=json.dumps(extra),
            hicache_storage_prefetch_policy=row["prefetch_policy"],
            hicache_host_memory_mode=row["host_memory_mode"],
            # The host pool is int(L1 * ratio) + 1 padding page: this ratio makes it exactly L2.
            hicache_ratio=(l2 - 0.5) / l1,
            radix_eviction_policy=row.get("eviction_policy", "lru"),
            radix_eviction_policy_config=row.get("eviction_policy_config"),
        )
        # The launch pipeline's HiCache step (buffer_only turns write_back into write_through, the
        # layout follows the io backend); publishing applies what it resolved.
        run_hook(handle_hicache, server_args)
        set_global_server_args_for_scheduler(server_args)
        get_parallel().override_permanently(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1)
        self.server_args = server_args
        self.req_to_token_pool = ReqToTokenPool(
            size=max(4, 2 * row.get("in_flight", 1)),
            max_context_len=1 << 16,
            device="cpu",
            enable_memory_saver=False,
        )
        kv = MHATokenToKVPool(
            size=l1,
            page_size=1,
            dtype=torch.float16,
            head_num=1,
            head_dim=self.HEAD_DIM,
            layer_num=1,
            device="cpu",
            enable_memory_saver=False,
        )
        self.allocator = TokenToKVPoolAllocator(size=l1, dtype=torch.float16, device="cpu", kvcache=kv, need_sort=False)
        params = CacheInitParams(
            disable=False,
            req_to_token_pool=self.req_to_token_pool,
            token_to_kv_pool_allocator=self.allocator,
            page_size=1,
            tree_components=(ComponentType.FULL,),
            eviction_policy=row.get("eviction_policy", "lru"),
            eviction_policy_config=row.get("eviction_policy_config"),
        )
        cache = UnifiedRadixCache(params=params)
        cache.init_hicache(server_args, params)
        stubs.unpin(cache)
        # Load every host hit back: SGLang's 10-token threshold is below one 512-token block.
        cache.load_back_threshold = 0
        self.cache = cache
        self.cc = cache.cache_controller
        assert self.cc.mem_pool_host.size == l2, (self.cc.mem_pool_host.size, l2)
        assert self.allocator.available_size() == l1, (self.allocator.available_size(), l1)
        self.resolved = {
            "write_policy": self.cc.write_policy,
            "host_memory_mode": cache.host_memory_mode,
            "mem_layout": get_memory().hicache_mem_layout,
            "io_backend": get_memory().hicache_io_backend,
            "prefetch_policy": cache.prefetch_stop_policy,
            "tree_core": type(cache.tree_core).__name__,
        }
        if "eviction_policy" in row:
            # The strategy SGLang's tree ran, with the knobs it read (tlru: threshold, estimate).
            strategy = cache.tree_core.eviction_strategy
            self.resolved["eviction_strategy"] = type(strategy).__name__
            self.resolved["eviction_strategy_config"] = {
                k: getattr(strategy, k) for k in row.get("eviction_policy_config") or {}
            }
        self.scheduler = _SchedulerShim(cache)
        self._prefetch_kvcache = Scheduler._prefetch_kvcache
        self.result = RowResult()
        self._count_calls()
        self._rid = 0

    HEAD_DIM = 4

    @classmethod
    def _page_bytes(cls) -> int:
        """Bytes of one stored page (one token: K and V, one layer, one head, fp16)."""
        return 2 * cls.HEAD_DIM * 2

    # --------------------------------------------------------------------------- counters

    def _count_calls(self) -> None:
        """Wrap SGLang's methods to count calls; each wrapper calls through and returns the result."""
        cache, cc, counts = self.cache, self.cc, self.result.counters

        def wrap(obj: Any, name: str, on_call) -> None:
            orig = getattr(obj, name)

            def wrapper(*args, **kwargs):
                out = orig(*args, **kwargs)
                on_call(out, *args, **kwargs)
                return out

            setattr(obj, name, wrapper)

        def backup(out, node_id, device_value, *a, **k):
            if out is None:
                counts["backup_failures"] += 1
            else:
                counts["backups"] += 1
                counts["backup_pages"] += len(device_value)

        def host_evict(out, *a, **k):
            counts["host_evict_calls"] += 1

        def device_evict(out, *a, **k):
            counts["device_evict_calls"] += 1

        def storage_backup(out, host_indices, *a, **k):
            counts["storage_backups"] += 1
            counts["storage_backup_pages"] += len(host_indices)

        def storage_hit(out, operation, hit_tokens, *a, **k):
            # (host indices or None, tokens granted): a storage hit asking the host for room.
            counts["storage_hit_allocs"] += 1
            if out[0] is None:
                counts["storage_hit_alloc_failures"] += 1
            elif out[1] < hit_tokens:
                counts["storage_hit_alloc_partial"] += 1

        wrap(cache, "_execute_kv_backup", backup)
        wrap(cache, "evict_host", host_evict)
        wrap(cache, "evict_for_alloc", device_evict)
        wrap(cc, "write_storage", storage_backup)
        wrap(cc, "allocate_storage_hit", storage_hit)

    # --------------------------------------------------------------------------- waiting

    def _busy(self) -> bool:
        """Anything still in flight: D2H/H2D acks, storage backups, prefetches."""
        c, cc = self.cache, self.cc
        if cc.write_queue or cc.ack_write_queue or cc.load_queue or cc.ack_load_queue:
            return True
        if c.ongoing_backup or c.ongoing_prefetch:
            return True
        bp = c.buffer_pipeline
        return bool(bp is not None and (bp.ongoing_backup or getattr(bp, "ongoing_buffer_load_back", None)))

    def settle(self) -> None:
        """Pump the scheduler's event poll until every queue and thread is idle."""
        deadline = time.monotonic() + WAIT_S
        self.cache.check_hicache_events()
        while self._busy():
            if time.monotonic() > deadline:
                raise RuntimeError("SGLang's HiCache did not go idle")
            time.sleep(0.0005)
            self.cache.check_hicache_events()

    def _prefetch_io_done(self, handle: Any) -> bool:
        """The request's prefetch has nothing left to do in the background (or there is none)."""
        info = self.cache.ongoing_prefetch.get(handle)
        if info is None:
            return True
        op = info.operation
        return op.host_indices is not None and op.completed_tokens >= len(op.host_indices)

    def wait_prefetch(self, req: Any) -> None:
        """Admission's prefetch gate, polled until it lets the request through.

        Under ``best_effort`` and ``timeout`` the events are first pumped until the prefetch's
        query and transfer are over (every queue drained), so the first poll sees all of it.
        """
        deadline = time.monotonic() + WAIT_S
        if self.row["prefetch_policy"] != "wait_complete":
            while not self._prefetch_io_done(req.cache_request_handle):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"prefetch of request {req.rid} did not finish")
                time.sleep(0.0005)
                self.cache.check_hicache_events()
            self.cache.check_hicache_events()
        while True:
            self.cache.check_hicache_events()
            if self.cache.check_prefetch_progress(req.cache_request_handle):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"prefetch of request {req.rid} did not complete")
            time.sleep(0.0005)

    # --------------------------------------------------------------------------- one request

    def new_req(self, blocks: list[int]) -> Any:
        """A Req for one prompt with nothing to generate."""
        from sglang.srt.managers.schedule_batch import Req
        from sglang.srt.sampling.sampling_params import SamplingParams

        req = Req(
            rid=str(self._rid),
            origin_input_text="",
            origin_input_ids=array("q", blocks),
            sampling_params=SamplingParams(temperature=0, max_new_tokens=1),
        )
        self._rid += 1
        return req

    def arrive(self, req: Any) -> None:
        """The scheduler's queue entry: its own ``_prefetch_kvcache`` decides whether to prefetch."""
        self._prefetch_kvcache(self.scheduler, req)

    def admit(self, req: Any) -> tuple[int, int, int]:
        """The admission pass for one waiting request; returns (device, host, storage) hit tokens."""
        from sglang.srt.managers.schedule_batch import split_cached_prefix_by_tier
        from sglang.srt.mem_cache.base_prefix_cache import InitLoadBackParams

        cache = self.cache
        handle = req.cache_request_handle
        # get_new_batch_prefill: the prefetch gate, then the loaded span.
        self.wait_prefetch(req)
        loaded, start = cache.pop_prefetch_loaded_span(handle)
        if loaded > 0:
            req.storage_hit_length = loaded
            req.storage_hit_start = start
            req.host_hit_is_storage = False
        req.init_next_round_input(cache)
        bp = cache.buffer_pipeline
        if bp is not None:
            deadline = time.monotonic() + WAIT_S
            while not bp.prepare_staged_prefetch(req):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"staged prefetch of request {req.rid} never ready")
                self.settle()
                self.arrive(req)
                self.wait_prefetch(req)
                req.init_next_round_input(cache)
        # PrefillAdder.add_one_req, one request and no budget limit: pin the device match, load the
        # host hit back (pinning the host match too), then lock the node the request ends on.
        lock = cache.lock(req.last_node)
        try:
            if req.needs_host_load_back():
                host_pin = cache.inc_host_lock_ref(req.best_match_node).to_dec_params()
                best_lock = cache.lock(req.best_match_node)
                try:
                    loaded_back = cache.init_load_back(
                        InitLoadBackParams(
                            best_match_node=req.best_match_node, host_hit_length=req.host_hit_length, req=req
                        )
                    )
                finally:
                    cache.unlock(best_lock)
                    cache.dec_host_lock_ref(req.best_match_node, host_pin)
                if loaded_back is None:
                    raise RuntimeError(f"request {req.rid}: load-back deferred (buffer mode)")
                req.host_loaded_length, req.last_node = loaded_back
                req.prefix_len += req.host_loaded_length
                if cache.load_back_is_cache_owned():
                    req.kv.cache_protected_len = req.prefix_len
        finally:
            cache.unlock(lock)
        req.lock = cache.lock(req.last_node)
        tiers = split_cached_prefix_by_tier(
            prefix_len=req.prefix_len,
            host_hit_len=req.materialized_host_hit_len(),
            storage_hit_len=req.storage_hit_length,
            storage_hit_start=req.storage_hit_start,
            host_hit_is_storage=req.host_hit_is_storage,
        )
        cache.finish_storage_prefetch_admission(
            handle, fulfilled_tokens=req.fulfilled_storage_hit_len(req.prefix_len), reason=None
        )
        # Batch formation starts the queued H2D load.
        cache.ready_to_load_host_cache()
        return tiers

    def extend(self, req: Any, end: int) -> None:
        """Allocate the request's KV slots up to ``end`` (prepare_for_extend for one request)."""
        import torch
        from sglang.srt.mem_cache.allocation import alloc_token_slots

        pool = self.req_to_token_pool
        start = req.prefix_len
        if not req.kv.holds_kv:
            pool.alloc([req])
            if start > 0:
                pool.write((req.kv.req_pool_idx, slice(0, start)), self.cache.prefix_device_indices(req))
        n = end - start
        if n > 0:
            loc = alloc_token_slots(self.cache, n)
            pool.write((req.kv.req_pool_idx, slice(start, end)), loc.to(torch.int32))
        req.extend_end = end
        req.kv.kv_committed_len = end
        req.kv.kv_allocated_len = end

    def finish(self, req: Any) -> None:
        """The request ends with no output token: its prompt goes into the tree, its pins are released."""
        from sglang.srt.managers.schedule_batch import FINISH_LENGTH
        from sglang.srt.mem_cache.common import release_kv_cache

        req.finished_reason = FINISH_LENGTH(length=0)
        req.finished_len = len(req.origin_input_ids)
        release_kv_cache(req, self.cache, checkpoint=True)

    def run_one(self, blocks: list[int]) -> None:
        """One request through arrival, admission, chunked prefill and finish."""
        from sglang.srt.mem_cache.common import checkpoint_kv_cache

        self.settle()
        req = self.new_req(blocks)
        self.arrive(req)
        device, host, storage = self.admit(req)
        n = len(blocks)
        chunk = self.row["chunk_pages"]
        end = req.prefix_len
        first = True
        while True:
            if not first:
                self.settle()  # a new scheduler step
            first = False
            end = n if chunk is None else min(n, end + chunk)
            self.extend(req, end)
            if end >= n:
                break
            checkpoint_kv_cache(req, self.cache)
        self.finish(req)
        r = self.result
        r.prompt_pages += n
        r.device_hit += device
        r.host_hit += host
        r.storage_hit += storage

    def close(self) -> None:
        """Stop the controller's threads."""
        self.settle()
        self.result.prefetch_stats = dict(self.cache._prefetch_outcome_stats)
        try:
            self.cache.shutdown()
        except Exception as exc:  # shutdown is best effort; the figures are already taken
            print(f"warning: shutdown: {exc}", file=sys.stderr)


def patch_match_limit(whole_input: bool) -> None:
    """``whole`` rows match the whole input: Req._compute_max_prefix_len returns the input length.

    SGLang itself caps every match at input - 1 (the ``cap`` rows); the whole-input rows are the
    ones the earlier conformance table and hicache-sim's ``reserve_last_token: false`` describe.
    """
    from sglang.srt.managers.schedule_batch import Req

    if not hasattr(Req, "_orig_compute_max_prefix_len"):
        Req._orig_compute_max_prefix_len = Req._compute_max_prefix_len
    if whole_input:
        Req._compute_max_prefix_len = lambda self, input_len: input_len
    else:
        Req._compute_max_prefix_len = Req._orig_compute_max_prefix_len


class _Errors:
    """SGLang logs a failed background transfer and carries on: any ERROR record fails the row."""

    def __init__(self) -> None:
        import logging

        errors = self.records = []

        class Handler(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                errors.append(record.getMessage())

        self.handler = Handler(level=logging.ERROR)
        logger = logging.getLogger("sglang")
        logger.setLevel(logging.ERROR)
        logger.addHandler(self.handler)

    def check(self) -> None:
        """Raise if SGLang logged an error since the last check."""
        if self.records:
            raise RuntimeError(f"SGLang logged an error: {self.records[0]}")


def run_row(row: dict[str, Any], trace: list[list[int]], progress: bool = False) -> RowResult:
    """Build SGLang's cache for ``row`` and run every request of ``trace`` through it."""
    errors = _Errors()
    patch_match_limit(row["match"] == "whole")
    storage_dir = tempfile.mkdtemp(prefix="hicache-sglang-")
    t0 = time.monotonic()
    try:
        driver = Driver(row, storage_dir)
        for i, blocks in enumerate(trace):
            driver.run_one(blocks)
            errors.check()
            if progress and i % 500 == 0:
                print(f"  {row['id']}: {i}/{len(trace)}", file=sys.stderr, flush=True)
        driver.close()
        errors.check()
    finally:
        shutil.rmtree(storage_dir, ignore_errors=True)
    driver.result.seconds = time.monotonic() - t0
    driver.result.sglang_settings = driver.resolved
    return driver.result
