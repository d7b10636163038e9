"""Page allocators for the device (L1) and host (L2) pools. The storage (L3) index lives in
:mod:`.stores`, one model per backend; ``StorageIndex`` is its exact page LRU under its first name.

Everything is page-granular: a slot index names one page of ``page_size`` tokens.
"""

from __future__ import annotations

from collections.abc import Iterable

from .errors import CacheStateError
from .stores import PageLRU as StorageIndex

__all__ = ["PagePool", "StorageIndex"]


class PagePool:
    """FIFO free list of page slots, as SGLang's allocators reuse them.

    ``alloc`` takes the *first* n free slots and ``free`` appends to the end, so slot reuse order
    matches upstream. Upstream's free list starts as every slot in order; here the never-used slots
    are a counter (``_fresh``: slots below it have been handed out at least once), which always sits
    at the front of that list, followed by the freed slots in the order they came back. The pool thus
    costs memory for the slots in use, not for its size, so a pool of 10**12 pages (an unbounded cache)
    is as cheap as a small one. Freed slots live in a list read from a moving head (``_head``), compacted
    once the consumed head is half the list. With ``strict`` every free is checked against an in-use
    bitmap over the slots handed out so far (double free raises).
    """

    def __init__(self, name: str, num_pages: int, *, strict: bool = False) -> None:
        if num_pages < 0:
            raise ValueError(f"{name}: num_pages must be >= 0, got {num_pages}")
        self.name = name
        self.size = num_pages
        self.strict = strict
        self._fresh = 0
        self._free: list[int] = []
        self._head = 0
        self._in_use = bytearray() if strict else None

    def available(self) -> int:
        """Free pages (read-only)."""
        return self.size - self._fresh + len(self._free) - self._head

    def used(self) -> int:
        """Pages handed out and not yet freed (read-only)."""
        return self.size - self.available()

    def alloc(self, n: int) -> list[int] | None:
        """Take ``n`` pages (mutates). Returns None, changing nothing, when fewer are free."""
        fresh = self._fresh
        head = self._head
        free = self._free
        if fresh == self.size and self._in_use is None:
            # Every slot handed out once (a full pool's steady state): only recycled slots remain.
            if n > len(free) - head:
                return None
            out = free[head : head + n]
            head += n
            if head > 4096 and head * 2 > len(free):
                del free[:head]
                head = 0
            self._head = head
            return out
        from_fresh = self.size - fresh
        if from_fresh > n:
            from_fresh = n
        rest = n - from_fresh
        if rest > len(free) - head:
            return None
        out = list(range(fresh, fresh + from_fresh)) if from_fresh else []
        self._fresh = fresh + from_fresh
        if rest:
            out += free[head : head + rest]
            self._head = head + rest
            if self._head > 4096 and self._head * 2 > len(free):
                del free[: self._head]
                self._head = 0
        if self._in_use is not None:
            if from_fresh:
                self._in_use.extend(bytes(from_fresh))
            for p in out:
                self._in_use[p] = 1
        return out

    def free(self, pages: Iterable[int]) -> None:
        """Return pages to the end of the free list (mutates). Raises on a double free when strict."""
        if self._in_use is not None:
            pages = list(pages)
            for p in pages:
                if not 0 <= p < self._fresh or not self._in_use[p]:
                    raise CacheStateError(f"{self.name} pool: page {p} freed but not in use")
                self._in_use[p] = 0
        self._free.extend(pages)

    @property
    def fresh_start(self) -> int:
        """First slot never handed out: slots from here to ``size`` are free and in order (read-only)."""
        return self._fresh

    def recycled_pages(self) -> list[int]:
        """Copy of the freed slots in reuse order, after the never-used ones (read-only; for checks)."""
        return self._free[self._head :]
