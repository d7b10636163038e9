"""Storage (L3) prefetch: issue, storage query, host allocation, batch reads, stop policy, terminate.

Lifecycle of one request's prefetch (the caller decides *when* each step happens):

1. ``prefetch(rid, match, keys, now)`` when the request enters the waiting queue: threshold and
   rate-limit checks, anchor pinned; the 2025 flow reserves host pages already.
2. ``prefetch_query(rid)`` when the storage hit query returns: hit pages known; host pages
   allocated for exactly the hits (2026) or trimmed to them (2025); one S2H transfer per storage
   batch of 128 pages goes to the outbox. A hit below the threshold or no host room revokes.
3. ``complete(transfer)`` per batch advances ``completed_pages``.
4. ``check_prefetch_progress(rid, now)`` before each scheduling attempt: True once the stop policy
   lets the request go; then ``terminate`` inserts the completed pages as H-only nodes under the
   anchor (buffer_only: parks them as a staged prefetch) and frees the rest.
"""

from __future__ import annotations

from .config import CacheConfig
from .prefetch_op import HOST_PIN, LOCK_PIN, NO_PIN, AnchorPin, PrefetchOp
from .semantics import EvictAmount
from .sizing import prefetch_timeout_s
from .state import CacheState
from .transfers import Transfer, TransferKind
from .tree import Node, chain_hashes, match_len

#: A storage hit short of host room evicts its whole length, not only the shortfall, whatever the
#: era's backup rule (0.5.2's ``prefetch_from_storage``, 0.5.23's ``allocate_storage_hit``).
STORAGE_HIT_EVICTION = EvictAmount("whole_hit", True)


class PrefetchMixin(CacheState):
    """prefetch / prefetch_query / check_prefetch_progress / terminate / revoke / release."""

    def __init__(self, config: CacheConfig) -> None:
        super().__init__(config)
        self.ongoing_prefetch: dict[str, PrefetchOp] = {}
        self.prefetch_occupied_pages = 0
        # rid -> pages the request's prefetch added to the tree (its storage hit at admission).
        self.prefetched_pages: dict[str, int] = {}
        # S2H transfers the world should not start (their prefetch ended); completing them is a no-op.
        self.revoked_transfers: set[int] = set()
        # Requests whose prefetch ended with nothing because its hit query had not answered when the
        # request was checked, or the host had no room for the hit: the scheduler may ask storage
        # again (SGLang 0.5.23's ``StoragePrefetchRetries.poll_miss``). Taken by ``take_prefetch_misses``.
        self.prefetch_misses: list[str] = []

    # ----------------------------------------------------------------------------------- issue

    @property
    def prefetch_threshold_pages(self) -> int:
        """Smallest prefetch worth issuing, in pages: max(threshold, page_size) tokens, rounded up."""
        tokens = max(self.config.prefetch_threshold_tokens, self.page_size)
        return -(-tokens // self.page_size)

    def prefetch_capacity_limit_pages(self) -> int:
        """Pages of prefetch allowed in flight (may be <= 0: prefetch disabled, the 2025 formula)."""
        limit_tokens = self.sem.capacity_formula.limit_tokens(
            self.config.host_pages * self.page_size, self.config.device_pages * self.page_size
        )
        return limit_tokens // self.page_size if limit_tokens > 0 else limit_tokens

    def prefetch_rate_limited(self) -> bool:
        """True when no new prefetch may start (read-only)."""
        limit = self.prefetch_capacity_limit_pages()
        if self.sem.capacity_formula.counts_host_use:
            used = max(0, self.host.size - self.host.available() - self.buffer_staged_pages)
            return used >= limit
        return self.prefetch_occupied_pages >= limit

    def prefetch(self, rid: str, anchor: Node, keys: list[int], now: float) -> PrefetchOp | None:
        """Start prefetching ``keys`` (the pages after the request's cached prefix) below ``anchor``.

        Returns the op, or None when there is no storage tier, the run is under the threshold, the
        prefetch budget is used up, the anchor cannot take H-only children, or (2025) no host room.
        """
        if self.storage is None or not keys or rid in self.ongoing_prefetch:
            return None
        c = self.counters
        if len(keys) < self.prefetch_threshold_pages:
            c.prefetch_below_threshold += 1
            return None
        if self.prefetch_rate_limited():
            c.prefetch_rate_limited += 1
            return None
        if not self.host_mode.stages and anchor is not self.root and anchor.host_value is None:
            # SGLang's scheduler starts a cache-mode prefetch only below a host-backed node or the
            # root (``_prefetch_kvcache``): H-only pages under a D-only node would break the host
            # invariant (#30106), whatever the write policy.
            c.prefetch_unbacked_anchor += 1
            return None
        hashes = chain_hashes(anchor.hashes[-1] if anchor.hashes else None, keys)
        pin = self._pin_anchor(anchor)
        op = PrefetchOp(rid, anchor, pin, list(keys), hashes, now)
        if self.sem.prefetch_flow.reserves_at_issue:
            pages = self._alloc_prefetch_host(len(keys))
            if pages is None:
                self._unpin_anchor(op)
                c.prefetch_host_alloc_failed += 1
                return None
            op.host_pages = pages
        self.ongoing_prefetch[rid] = op
        self.prefetch_occupied_pages += len(keys)
        c.prefetch_issued += 1
        return op

    def _pin_anchor(self, anchor: Node) -> AnchorPin:
        """Pin the anchor the way it is held: the root needs none, a host copy is protected, a device-only
        node is locked (mutates)."""
        pin = NO_PIN if anchor is self.root else HOST_PIN if anchor.host_value is not None else LOCK_PIN
        pin.hold(self, anchor)
        return pin

    def _unpin_anchor(self, op: PrefetchOp) -> None:
        op.pin.release(self, op.anchor)
        op.pin = NO_PIN

    def _alloc_prefetch_host(self, n: int) -> list[int] | None:
        """Host pages for ``n`` prefetched pages (mutates). A short host first evicts ``n`` pages, the
        whole run and not only the shortfall, as SGLang does for a storage hit; then, where the flow
        allows it, a shorter run of what is free if that still reaches the threshold (cache mode
        only: 0.5.23's buffer pipeline asks for the whole hit or nothing)."""
        pages = self.alloc_host(n, STORAGE_HIT_EVICTION)
        if pages is None:
            avail = self.host.available()
            partial = self.sem.prefetch_flow.partial and self.host_mode.partial_prefetch
            if partial and avail >= self.prefetch_threshold_pages:
                pages = self.host.alloc(avail)
        return pages

    # ----------------------------------------------------------------------------------- query

    def prefetch_query(self, rid: str) -> int:
        """The storage hit query returned: read the hit run, allocate host, issue S2H batches (mutates).

        Returns hit pages being fetched (0 when revoked).
        """
        op = self.ongoing_prefetch.get(rid)
        if op is None or op.hit_pages is not None:
            return 0
        if op.terminated:
            return 0
        storage = self.storage
        assert storage is not None, "a prefetch is only issued with a storage tier"
        hit = storage.prefix_hits(op.hashes)
        if self.sem.prefetch_flow.reserves_at_issue:
            reserved = op.host_pages
            assert reserved is not None, "host pages reserved at issue"
            hit = min(hit, len(reserved))
            if hit < self.prefetch_threshold_pages:
                self._revoke(op)
                return 0
            self.host.free(reserved[hit:])
            op.host_pages = pages = reserved[:hit]
        else:
            if hit < self.prefetch_threshold_pages:
                self._revoke(op)
                return 0
            got = self._alloc_prefetch_host(hit)
            if got is None:
                self.counters.prefetch_host_alloc_failed += 1
                self._revoke(op)
                self.prefetch_misses.append(op.rid)
                return 0
            op.host_pages = pages = got
            hit = len(pages)
        op.hit_pages = hit
        batch = self.config.storage_batch_pages
        for i in range(0, hit, batch):
            j = min(hit, i + batch)
            t = self._new_transfer(
                TransferKind.S2H,
                "prefetch",
                j - i,
                host_pages=pages[i:j],
                page_hashes=op.hashes[i:j],
                request_id=rid,
            )
            t.offload_objects = storage.offload_objects(t.page_hashes)
            op.transfer_ids.append(t.id)
        return hit

    def _ack_prefetch(self, t: Transfer) -> None:
        if t.id in self.revoked_transfers:
            self.revoked_transfers.discard(t.id)
            return
        op = self.ongoing_prefetch.get(t.request_id) if t.request_id is not None else None
        if op is None or op.terminated:
            return
        op.completed_pages += t.pages
        self.counters.prefetch_pages += t.pages
        if op.is_complete():
            self.counters.prefetch_completed += 1

    # -------------------------------------------------------------------------------- progress

    def prefetch_timeout(self, op: PrefetchOp) -> float:
        """Seconds after its start at which a timeout-policy prefetch may stop."""
        return prefetch_timeout_s(
            (op.hit_pages or 0) * self.page_size,
            self.sem.prefetch_timeout_base_s,
            self.sem.prefetch_timeout_per_ki_token_s,
            self.sem.prefetch_timeout_max_s,
        )

    def check_prefetch_progress(self, rid: str, now: float) -> bool:
        """May the request be scheduled? True when it has no prefetch or the stop policy lets it go,
        in which case the prefetch is terminated and its completed pages enter the cache (mutates)."""
        op = self.ongoing_prefetch.get(rid)
        if op is None:
            return True
        if not self.stop_policy.can_terminate(op, now, self.prefetch_timeout(op)):
            return False
        if op.hit_pages is None:
            self._revoke(op)
            if not self.stop_policy.stops_at_deadline:
                self.prefetch_misses.append(rid)
        else:
            self.terminate_prefetch(op)
        return True

    def terminate_prefetch(self, op: PrefetchOp) -> int:
        """Stop the prefetch and keep what arrived: H-only nodes under the anchor, or (buffer_only) a
        staged prefetch for the request. Returns pages kept that were new to the cache (mutates).
        Idempotent: terminating an op that already ended (terminated, revoked) does nothing."""
        if op.terminated:
            return 0
        m = op.completed_pages
        self._end_prefetch(op)
        if m < (op.hit_pages or 0):
            self.counters.prefetch_terminated += 1
        pages = op.host_pages or []
        if m < len(pages):
            self.host.free(pages[m:])
        if m == 0:
            self._unpin_anchor(op)
            return 0
        if self.host_mode.stages:
            return self.stage_prefetch(op, m)  # keeps the anchor pinned until the request consumes it
        dup = self._insert_host_only(op.anchor, op.keys[:m], pages[:m], op.hashes[:m])
        kept = m - dup
        self.counters.prefetch_duplicate_pages += dup
        self.counters.prefetch_inserted_pages += kept
        self.prefetched_pages[op.rid] = self.prefetched_pages.get(op.rid, 0) + kept
        self._unpin_anchor(op)
        return kept

    def _end_prefetch(self, op: PrefetchOp) -> None:
        op.terminated = True
        del self.ongoing_prefetch[op.rid]
        self.prefetch_occupied_pages = max(0, self.prefetch_occupied_pages - len(op.keys))
        for tid in op.transfer_ids:
            if tid in self.inflight:
                self.revoked_transfers.add(tid)

    def _revoke(self, op: PrefetchOp) -> None:
        """Nothing usable: release the anchor and every reserved host page."""
        self._end_prefetch(op)
        if op.host_pages:
            self.host.free(op.host_pages)
            op.host_pages = []
        self._unpin_anchor(op)
        self.counters.prefetch_revoked += 1

    def take_prefetch_misses(self) -> list[str]:
        """The requests whose prefetch ended as a miss poll since the last call (mutates: clears)."""
        out, self.prefetch_misses = self.prefetch_misses, []
        return out

    def release_prefetch(self, rid: str) -> None:
        """The request is gone (aborted): drop its prefetch without inserting anything (mutates)."""
        op = self.ongoing_prefetch.get(rid)
        if op is not None:
            self._revoke(op)

    def _insert_host_only(self, anchor: Node, keys: list[int], host_pages: list[int], hashes: list[int]) -> int:
        """Insert prefetched pages as H-only nodes below ``anchor``. Returns pages already present,
        whose host copies are freed at once as duplicates."""
        node = anchor
        pos, n = 0, len(keys)
        while pos < n:
            child = node.children.get(keys[pos])
            if child is None:
                break
            plen = match_len(child.key, keys, pos)
            if plen < len(child.key):
                child = self._split(child, plen)
            node = child
            pos += plen
        if pos:
            self.host.free(host_pages[:pos])
        if pos < n:
            if node is not self.root and node.host_value is None and self.host_rule.h_only_needs_host_parent(self):
                # The attach point lost its host copy meanwhile: keep the host invariant.
                self.host.free(host_pages[pos:])
                return n
            leaf = self._new_node(keys[pos:])
            leaf.host_value = host_pages[pos:]
            leaf.hashes = hashes[pos:]
            self._add_child(node, leaf)
        return pos
