"""The order of the waiting queue before each prefill batch: SGLang's ``--schedule-policy``.

SGLang sorts its waiting queue in place (a stable sort) before it forms each prefill batch
(``SchedulePolicy.calc_priority``); admission then walks the queue in that order, so a prefix-aware
order changes which request gets the cache first and what stays cached. Modelled here, from SGLang
0.5.23's ``sglang/srt/managers/schedule_policy.py``:

- ``fcfs``: arrival order (the queue is not sorted).
- ``lpm``: longest matched prefix first, counting device and host pages (SGLang's
  ``num_matched_prefix_tokens``). With more than 128 waiting requests SGLang skips the matching and
  uses ``fcfs`` for that round. In-batch prefix sharing: a request with at most 32 device-cached
  tokens whose prompt shares at least 32 tokens with a request earlier in this round's walk is sent
  to the back (it will hit the cache once that one is prefilled). The shared-prompt check runs over
  page keys here, so with pages longer than 32 tokens it sees whole shared pages only.
- ``lof``: longest output (``max_new_tokens``) first.

Matching touches the matched path's access time, as SGLang's cache-aware policies do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .registry import Registry

# SGLang's WAITING_QUEUE_PREFIX_MATCH_MAX and IN_BATCH_PREFIX_CACHING_{CHECK,DEPRIORITIZE}_THRESHOLD.
PREFIX_MATCH_MAX_WAITING = 128
IN_BATCH_CHECK_TOKENS = 32
IN_BATCH_DEPRIORITIZE_TOKENS = 32

#: name -> function(waiting requests, cache) returning them in admission order.
SCHEDULE_POLICIES: Registry[Callable[[Sequence[Any], Any], list[Any]]] = Registry(
    "schedule policy", "scheduler.schedule_policy"
)


def _fcfs(waiting: Sequence[Any], cache: Any) -> list[Any]:
    return list(waiting)


class _KeyTrie:
    """Prompts seen earlier in this round's walk, as a trie of page keys."""

    def __init__(self) -> None:
        self.root: dict = {}

    def match(self, keys: Sequence[int]) -> int:
        node, n = self.root, 0
        for k in keys:
            node = node.get(k)
            if node is None:
                break
            n += 1
        return n

    def insert(self, keys: Sequence[int]) -> None:
        node = self.root
        for k in keys:
            node = node.setdefault(k, {})


def _lpm(waiting: Sequence[Any], cache: Any) -> list[Any]:
    if len(waiting) > PREFIX_MATCH_MAX_WAITING:
        return list(waiting)
    page = cache.page_size
    seen = _KeyTrie()
    matched: dict[int, float] = {}
    for r in waiting:
        m = cache.match_prefix(r.keys[: r.limit])
        score: float = -(m.device_hit_pages + m.host_hit_pages) * page
        if m.device_hit_pages * page <= IN_BATCH_CHECK_TOKENS:
            if seen.match(r.keys) * page >= IN_BATCH_DEPRIORITIZE_TOKENS:
                score = float("inf")
            else:
                seen.insert(r.keys)
        matched[id(r)] = score
    return sorted(waiting, key=lambda r: matched[id(r)])


def _lof(waiting: Sequence[Any], cache: Any) -> list[Any]:
    return sorted(waiting, key=lambda r: -r.req.output_tokens)


SCHEDULE_POLICIES.add("fcfs", _fcfs)
SCHEDULE_POLICIES.add("lpm", _lpm)
SCHEDULE_POLICIES.add("lof", _lof)
