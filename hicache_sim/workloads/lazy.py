"""Requests made when asked for: a trace of a million requests is never held whole (its page keys alone
would take ~7 GB). A :class:`LazyRequests` keeps only what is small per request (arrival times, and for
a trace file each line's byte offset and number) and builds request ``i`` on demand; runners read
requests one at a time in order, so memory holds the requests in flight, not the trace. (A short trace,
at most ``traces.HELD_PAGE_KEYS`` page keys, keeps the requests its checking pass built instead.)"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from .records import Request


class LazyRequests(Sequence[Request]):
    """``n`` requests; request ``i`` is ``make(i)``, built anew on every access.

    ``arrivals[i]`` is request ``i``'s ``arrival_s`` (an arrival process orders requests without
    building them); ``unique_rids`` says the builder already knows no two requests share an id.
    """

    def __init__(
        self, n: int, make: Callable[[int], Request], arrivals: Sequence[float], *, unique_rids: bool = False
    ) -> None:
        self.n = n
        self.make = make
        self.arrivals = arrivals
        self.unique_rids = unique_rids

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self.make(j) for j in range(*i.indices(self.n))]
        if i < 0:
            i += self.n
        if not 0 <= i < self.n:
            raise IndexError(i)
        return self.make(i)

    def __iter__(self) -> Iterator[Request]:
        return map(self.make, range(self.n))


def arrival_times(requests: Sequence[Request]) -> Sequence[float]:
    """Every request's ``arrival_s`` in order, without building lazy requests."""
    known = getattr(requests, "arrivals", None)
    return known if known is not None else [r.arrival_s for r in requests]


def rids_known_unique(requests: Sequence[Request]) -> bool:
    """True when the sequence guarantees distinct request ids (a check then need not build them all)."""
    return bool(getattr(requests, "unique_rids", False))


def materialised(requests: Sequence[Request]) -> Sequence[Request]:
    """A list of lazy requests (for reuse across many runs: a sweep parses its trace once), else as is."""
    return list(requests) if isinstance(requests, LazyRequests) else requests
