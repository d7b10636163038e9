"""Data-parallel request routing: which DP rank a request goes to, as SGLang 0.5.23's
DataParallelController decides it (``--load-balance-method``; ``srt/managers/data_parallel_controller.py``).

Each DP rank (a ``--dp-size`` replica, or an attention-DP group of ``--attn-dp-size``) has its own KV pool,
host pool and radix tree; the controller sends each tokenised request to one of them:

- ``round_robin`` (and ``auto``, which resolves to it outside PD disaggregation): the next rank in turn,
  counted over every request it dispatches.
- ``total_requests``: the rank with the fewest running + waiting requests (lowest index on a tie); the
  chosen rank's count is raised by one at once, so a burst between two reads of the ranks' load spreads.
- ``total_tokens``: the rank with the fewest tokens (KV tokens held by running requests + the tokens of
  its waiting requests), ties broken by requests; the chosen rank gains the request's input length.

The load-aware methods read the ranks' published load at most once per ``REFRESH_S`` seconds
(``refresh_load_budget``); between reads they go on the speculative increments alone. A router is
clock-free: the caller passes the time and the ranks' load (:class:`RankLoad`) when it asks. Routers are
registered by name in :data:`ROUTERS` (the scenario's ``scheduler.load_balance_method``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from .registry import Registry

#: SGLang's throttle between two reads of the ranks' load snapshots (``refresh_load_budget``: 20 ms).
REFRESH_S = 0.02

#: ``--load-balance-method`` values SGLang takes that the simulator does not model, and why.
UNMODELLED = {
    "follow_bootstrap_room": "routes by the bootstrap room the PD router stamps on each request (prefill/decode "
    "disaggregation), which the simulator does not model; SGLang refuses a request without one",
}


@dataclass(frozen=True)
class RankLoad:
    """One DP rank's load as its scheduler publishes it: running + waiting requests, and tokens (KV
    tokens held by running requests plus the prompt tokens of waiting ones)."""

    requests: int
    tokens: int


class Router:
    """Picks a DP rank per request. ``needs_load``: whether it reads the ranks' load (then only a timed
    run, which has queues, can drive it)."""

    needs_load: ClassVar[bool] = False

    def __init__(self, ranks: int) -> None:
        if ranks < 1:
            raise ValueError(f"a router needs at least one rank, got {ranks}")
        self.ranks = ranks

    def pick(self, input_tokens: int, now: float = 0.0, loads: Callable[[], Sequence[RankLoad]] | None = None) -> int:
        """The rank (0-based) for a request of ``input_tokens`` dispatched at ``now`` (seconds);
        ``loads()`` gives every rank's current load (read only by load-aware routers). Mutates the
        router's own counters."""
        raise NotImplementedError


ROUTERS: Registry[type[Router]] = Registry("load balance method", "scheduler.load_balance_method")


@ROUTERS.register("round_robin")
class RoundRobin(Router):
    """The next rank in turn (SGLang's ``round_robin_scheduler``; every rank active)."""

    def __init__(self, ranks: int) -> None:
        super().__init__(ranks)
        self.counter = 0

    def pick(self, input_tokens: int, now: float = 0.0, loads: Callable[[], Sequence[RankLoad]] | None = None) -> int:
        k = self.counter % self.ranks
        self.counter = (self.counter + 1) % self.ranks
        return k


class _Budget(Router):
    """SGLang's DPBudget: per-rank request and token counts, overwritten from the ranks' load at most
    every ``REFRESH_S`` seconds, raised speculatively for each request sent in between."""

    needs_load = True

    def __init__(self, ranks: int) -> None:
        super().__init__(ranks)
        self.requests = [0] * ranks
        self.tokens = [0] * ranks
        self.last_refresh = float("-inf")

    def _refresh(self, now: float, loads: Callable[[], Sequence[RankLoad]] | None) -> None:
        if loads is None or now - self.last_refresh < REFRESH_S:
            return
        self.last_refresh = now
        for k, load in enumerate(loads()):
            self.requests[k] = load.requests
            self.tokens[k] = load.tokens

    def _choose(self) -> int:
        raise NotImplementedError

    def pick(self, input_tokens: int, now: float = 0.0, loads: Callable[[], Sequence[RankLoad]] | None = None) -> int:
        self._refresh(now, loads)
        k = self._choose()
        self.requests[k] += 1
        self.tokens[k] += input_tokens
        return k


@ROUTERS.register("total_requests")
class TotalRequests(_Budget):
    """The rank with the fewest running + waiting requests, the lowest index on a tie."""

    def _choose(self) -> int:
        return self.requests.index(min(self.requests))


@ROUTERS.register("total_tokens")
class TotalTokens(_Budget):
    """The rank with the fewest tokens, then the fewest requests, then the lowest index."""

    def _choose(self) -> int:
        return min(range(self.ranks), key=lambda k: (self.tokens[k], self.requests[k]))


# SGLang's default: ``auto`` resolves to round_robin unless the server is a PD prefill instance.
ROUTERS.alias("auto", "round_robin")


def check_method(name: str) -> str:
    """The method's registered name, or ValueError naming why SGLang's value is not modelled or what is."""
    if name in UNMODELLED:
        raise ValueError(f"{name!r} is not modelled: {UNMODELLED[name]}; supported: {', '.join(ROUTERS.names())}")
    if name not in ROUTERS:
        raise ValueError(f"unknown load balance method {name!r}; supported: {', '.join(ROUTERS.names())}, auto")
    return name
