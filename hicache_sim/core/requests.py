"""A request's life as SGLang's scheduler drives the cache: match and lock, load the host hit back,
allocate pages, checkpoint after each prefill chunk, and cache the finished request.

These steps are cache logic (which slots are freed, which node is locked), so they live in the core;
the instant driver and the timed world both call them and differ only in when.
"""

from __future__ import annotations

from .errors import CacheStateError
from .request_state import RequestState
from .state import CacheState
from .tree import Node


class RequestMixin(CacheState):
    """begin / load host hit / extend / checkpoint / finish / abort."""

    def begin_request(self, rid: str, keys: list[int], match_pages: int, priority: int = 0) -> RequestState:
        """Match at most ``match_pages`` leading keys and lock the device prefix (mutates).

        Counts the request's prompt pages and its device, host and storage hits. Host hits that a
        storage prefetch for this request brought in are counted as storage hits (SGLang reports
        them as L3-loaded tokens).
        """
        dev, host_hit, last, last_device, _ = self._match(keys[:match_pages], True)
        self.inc_lock_ref(last_device)
        # The match's page list is new and this call's alone: the request takes it over.
        d = len(dev)
        from_storage = min(self.prefetched_pages.pop(rid, 0), host_hit) if self.prefetched_pages else 0
        st = RequestState(rid, keys, dev, d, last_device, last, d, host_hit - from_storage, from_storage, 0, priority)
        c = self.counters
        c.requests += 1
        c.prompt_pages += len(keys)
        c.device_hit_pages += d
        c.host_hit_pages += st.host_hit
        c.storage_hit_pages += from_storage
        if self.host_mode.stages:
            staged = self.consume_staged_prefetch(st)
            st.storage_hit += staged
            c.storage_hit_pages += staged
        return st

    def load_host_hit(self, st: RequestState, mem_quota_pages: int | None = None) -> int:
        """Load the request's host hit back to device, all or nothing (mutates). Returns pages loaded."""
        if st.match_last_node.value is not None:
            return 0
        last = self.load_back(st.match_last_node, mem_quota_pages, st.rid)
        if last is None:
            return 0
        chain: list[Node] = []
        x = last
        while x is not st.last_node:
            chain.append(x)
            parent = x.parent
            if parent is None:
                raise CacheStateError(f"request {st.rid}: loaded node is not below its locked node")
            x = parent
        loaded: list[int] = []
        for node in reversed(chain):
            if node.value is None:
                raise CacheStateError(f"request {st.rid}: node {node.id} of the loaded chain is not on device")
            loaded.extend(node.value)
        st.pages.extend(loaded)
        st.cached += len(loaded)
        self.dec_lock_ref(st.last_node)
        self.inc_lock_ref(last)
        st.last_node = last
        st.loaded_pages = len(loaded)
        return len(loaded)

    def extend_request(self, st: RequestState, n: int) -> bool:
        """Allocate ``n`` more device pages for the request, evicting if needed (mutates).

        False, changing nothing, when they cannot be found.
        """
        if n <= 0:
            return True
        pages = self.alloc_device(n)
        if pages is None:
            return False
        st.pages.extend(pages)
        return True

    def checkpoint_request(self, st: RequestState, upto: int, *, chunked: bool = True) -> None:
        """SGLang's ``cache_unfinished_req``: insert ``keys[:upto]``, free the request's duplicate slots,
        re-match and move the lock down (mutates). ``chunked``: a chunked-prefill checkpoint; False
        for the insert after the prefill of a request that goes on to decode. Which of them count
        insert-hits (and may start write-through) is ``semantics.checkpoint_hits``."""
        self._check_pages(st, upto)
        prefix = self._insert_request(st, upto, chunked)
        if prefix > st.cached:
            self.device.free(st.pages[st.cached : prefix])
        dev, _, _, last_device, _ = self._match(st.keys[:upto], False)  # match_prefix's fields
        st.pages[: len(dev)] = dev
        self.dec_lock_ref(st.last_node)
        self.inc_lock_ref(last_device)
        st.last_node = last_device
        st.cached = len(dev)

    def finish_request(self, st: RequestState, upto: int | None = None) -> None:
        """SGLang's ``cache_finished_req``: insert ``keys[:upto]`` (default all), free duplicates and the
        request's pages beyond ``upto``, unlock (mutates)."""
        keys = st.keys
        n = len(keys) if upto is None else upto
        pages = st.pages
        if n > len(pages) or n > len(keys):
            self._check_pages(st, n)
        # _insert_request written out.
        prefix = self.insert(keys if n == len(keys) else keys[:n], pages, priority=st.priority, inserted=st.inserted)
        if n > st.inserted:
            st.inserted = n
        if prefix > st.cached:
            self.device.free(pages[st.cached : prefix])
        if len(pages) > n:
            self.device.free(pages[n:])
        self.dec_lock_ref(st.last_node)
        st.done = True

    def abort_request(self, st: RequestState) -> None:
        """Give back everything the request holds without inserting it (mutates)."""
        if len(st.pages) > st.cached:
            self.device.free(st.pages[st.cached :])
        self.dec_lock_ref(st.last_node)
        st.done = True

    def _insert_request(self, st: RequestState, upto: int, chunked: bool) -> int:
        # insert reads ``pages`` only where ``keys`` has a page and keeps neither list: no copies.
        keys = st.keys if upto == len(st.keys) else st.keys[:upto]
        prefix = self.insert(keys, st.pages, chunked=chunked, priority=st.priority, inserted=st.inserted)
        st.inserted = max(st.inserted, upto)
        return prefix

    def _check_pages(self, st: RequestState, upto: int) -> None:
        if upto > len(st.pages) or upto > len(st.keys):
            raise CacheStateError(
                f"request {st.rid}: insert of {upto} pages but it holds {len(st.pages)} pages for {len(st.keys)} keys"
            )
