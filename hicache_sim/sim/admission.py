"""Forming one prefill batch, as SGLang's PrefillAdder does it.

Three token budgets bound the batch: ``rem_input`` (``max_prefill_tokens``), ``rem_chunk``
(``chunked_prefill_size``) and ``rem_total``, which is live as SGLang's property: device pages free or
evictable now, less ``offset``. The offset holds the output the running requests may still write (each
clipped at 4096 tokens, times ``new_token_ratio``) and, for every chunk admitted to this batch, one page
of alignment slack plus, when the chunk ends the prompt, the request's clipped ``max_new_tokens`` (the
whole output, also for a retracted request that already wrote some: SGLang's reservation does not
subtract it). A request is admitted when its new tokens, its clipped remaining output and one page are
less than ``rem_total`` with its matched prefix locked (locking takes those pages out of the evictable
pool); its prefix is then matched and locked, its host hit loaded back (all or nothing) and the pages of
its first chunk allocated (the core evicts), so admitted tokens leave ``rem_total`` through the pool
itself. A request longer than what is left of ``rem_chunk`` is truncated to a page-aligned chunk and
becomes the chunked request; it continues first in the next batch. ``max_prefill_tokens`` refuses a
further request only without chunked prefill; with it, the batch stops once ``rem_input`` is spent.
After each admission the adder reports SGLang's ``budget_state``.

SGLang: ``PrefillAdder`` and ``PrefillBudget`` (schedule_policy.py, prefill budget module, 2026).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core import HiCache
from ..core.tree import Node
from .requests import SimRequest

INF_TOKENS = 1 << 62
CONTINUE, NO_TOKEN, OTHER = 0, 1, 2  # SGLang's AddReqResult: keep adding, out of memory, other limit


@dataclass(slots=True)
class Chunk:
    """Tokens ``[start, end)`` of a request prefilled in this batch; ``final`` ends its prefill."""

    req: SimRequest
    start: int
    end: int
    final: bool


@dataclass
class PrefillAdder:
    """Budgets of one prefill batch and the chunks admitted so far."""

    cache: HiCache
    offset: float
    rem_input: int
    rem_chunk: int
    clip_tokens: int
    chunking: bool = True
    chunks: list[Chunk] = field(default_factory=list)

    @property
    def page(self) -> int:
        return self.cache.page_size

    @property
    def rem_total(self) -> float:
        """Tokens the pool can still give this batch (free + evictable pages, less the offset)."""
        c = self.cache
        return (c.device.available() + c.evictable_pages) * self.page - self.offset

    def add_chunked(self, r: SimRequest) -> Chunk | None:
        """Next chunk of the request being chunked (allocates its pages); None when nothing fits."""
        got = self._chunk_end(r, min(self.rem_chunk, max(0, int(self.rem_total))))
        if got is None or not self._alloc_until(r, got[0]):
            return None
        return self._take(r, *got)

    def add_one(self, r: SimRequest) -> int:
        """Try to admit a waiting request; CONTINUE, NO_TOKEN (memory) or OTHER (another limit).

        On success the request holds its prefix lock, its loaded host hit and its first chunk's pages.
        """
        cache = self.cache
        page = self.page
        m = cache.match_prefix(r.keys[: r.limit])  # SGLang re-matches waiting requests every round
        extend = r.seq_tokens - m.device_hit_pages * page
        need = extend + self._output_reserve(r) + page
        if need >= self.rem_total - _unlocked_pages(cache, m.last_device_node) * page:
            return NO_TOKEN
        real_input = -(-(extend - m.host_hit_pages * page) // page) * page
        if not self.chunking and real_input >= self.rem_input and self.chunks:
            return OTHER
        if real_input > self.rem_chunk and self.rem_chunk < page:
            return OTHER  # not even one page of chunk budget left
        st = cache.begin_request(r.req.rid, r.keys, r.limit, r.req.priority)
        cache.load_host_hit(st)
        r.st = st
        r.done_tokens = len(st.pages) * page
        got = self._chunk_end(r, self.rem_chunk)
        if got is None or not self._alloc_until(r, got[0]):
            cache.abort_request(st)
            r.st = None
            r.done_tokens = 0
            return OTHER if got is None else NO_TOKEN
        self._take(r, *got)
        return self.budget_state()

    def budget_state(self) -> int:
        """SGLang's verdict for the next candidate: out of memory, out of input or chunk budget, or go on."""
        if self.rem_total <= 0:
            return NO_TOKEN
        if self.rem_input <= 0 or self.rem_chunk <= 0:
            return OTHER
        return CONTINUE

    # --------------------------------------------------------------------------- internals

    def _output_reserve(self, r: SimRequest) -> int:
        """Output the admission check holds back: what is left to write, clipped."""
        return min(max(0, r.out_target - r.generated), self.clip_tokens)

    def _chunk_end(self, r: SimRequest, budget_tokens: int) -> tuple[int, bool] | None:
        """End of the next chunk of ``r`` within ``budget_tokens`` (page-aligned unless final)."""
        page = self.page
        remaining = r.seq_tokens - r.done_tokens
        if -(-remaining // page) * page <= budget_tokens:
            return r.seq_tokens, True
        trunc = budget_tokens // page * page
        if trunc <= 0:
            return None
        return r.done_tokens + trunc, False

    def _alloc_until(self, r: SimRequest, end_tokens: int) -> bool:
        st = r.st
        assert st is not None, "a request is chunked after its admission"
        need = -(-end_tokens // self.page) - len(st.pages)
        return self.cache.extend_request(st, need)

    def _take(self, r: SimRequest, end: int, final: bool) -> Chunk:
        n = end - r.done_tokens
        self.offset += self.page + (min(r.out_target, self.clip_tokens) if final else 0)
        self.rem_input -= n
        self.rem_chunk -= n
        chunk = Chunk(r, r.done_tokens, end, final)
        self.chunks.append(chunk)
        return chunk


def _unlocked_pages(cache: HiCache, node: Node) -> int:
    """Device pages on the path root..node that locking ``node`` would take out of the evictable pool."""
    n = 0
    root = cache.root
    x: Node | None = node
    while x is not None and x is not root:
        if x.lock_ref == 0:
            n += len(x.key)  # its device pages: the path to a locked node is on device, a slot per key
        x = x.parent
    return n
