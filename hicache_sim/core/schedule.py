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
- ``dfs-weight``: every waiting request is matched (device and host) and hangs at its deepest
  device-cached node; the queue becomes a depth-first walk of the tree that enters heavier subtrees
  first (weight: waiting requests in the subtree; ties keep the children's order in the tree) and
  emits a node's own requests after its children's, so requests with nothing cached come last.
  SGLang's fallback to ``fcfs`` beyond 128 waiting requests does not apply to it in 0.5.23
  (``_determine_active_policy`` lists lpm and hrrn only). SGLang: ``_sort_by_dfs_weight`` and
  ``_dfs_weight_order`` (mem_cache/base_prefix_cache.py).
- ``random``: the queue is shuffled in place before each batch (``random.shuffle``; SGLang seeds
  its ``random`` from ``--random-seed``); here a generator seeded from the scenario's ``seed``, so a
  run is reproducible. The shuffle starts from the previous round's order, as SGLang's does.

Matching touches the matched path's access time, as SGLang's cache-aware policies do.

SGLang 0.5.23 also lists ``hrrn``, ``shortest-prefill-first``, ``routing-key`` and ``priority``;
they are refused (:data:`UNMODELLED`) rather than run as something else.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from .registry import Registry

# SGLang's WAITING_QUEUE_PREFIX_MATCH_MAX and IN_BATCH_PREFIX_CACHING_{CHECK,DEPRIORITIZE}_THRESHOLD.
PREFIX_MATCH_MAX_WAITING = 128
IN_BATCH_CHECK_TOKENS = 32
IN_BATCH_DEPRIORITIZE_TOKENS = 32

OrderFn = Callable[[Sequence[Any], Any, random.Random], list[Any]]

#: name -> function(waiting requests, cache, the run's generator) returning them in admission order.
SCHEDULE_POLICIES: Registry[OrderFn] = Registry("schedule policy", "scheduler.schedule_policy")

#: SGLang 0.5.23 ``--schedule-policy`` choices not modelled, with why (refused, never run as another).
UNMODELLED: dict[str, str] = {
    "hrrn": "highest response ratio next ages requests by prefill tokens processed, which is not modelled",
    "shortest-prefill-first": "experimental in SGLang; its chunk cap for shorter waiting requests is not modelled",
    "routing-key": "requests carry no routing key here",
    "priority": "SGLang 0.5.23 lists it but its scheduler rejects it at start (unknown schedule_policy)",
}


def check_policy(name: str) -> str:
    """``name`` if modelled; raises ValueError saying why an SGLang policy is not, or what is."""
    if name in SCHEDULE_POLICIES:
        return name
    modelled = ", ".join(SCHEDULE_POLICIES.names())
    if name in UNMODELLED:
        raise ValueError(f"SGLang schedule policy {name!r} is not modelled ({UNMODELLED[name]}); modelled: {modelled}")
    raise ValueError(f"unknown schedule policy {name!r}; supported: {modelled}")


def _fcfs(waiting: Sequence[Any], cache: Any, rng: random.Random) -> list[Any]:
    return list(waiting)


class _KeyTrie:
    """Prompts seen earlier in this round's walk, as a trie of page keys."""

    def __init__(self) -> None:
        self.root: dict = {}

    def match(self, keys: Sequence[int]) -> int:
        node, n = self.root, 0
        for k in keys:
            child = node.get(k)
            if child is None:
                break
            node = child
            n += 1
        return n

    def insert(self, keys: Sequence[int]) -> None:
        node = self.root
        for k in keys:
            node = node.setdefault(k, {})


def _lpm(waiting: Sequence[Any], cache: Any, rng: random.Random) -> list[Any]:
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


def _lof(waiting: Sequence[Any], cache: Any, rng: random.Random) -> list[Any]:
    return sorted(waiting, key=lambda r: -r.req.output_tokens)


def dfs_weight_order(root: Any, nodes: Sequence[Any]) -> list[int]:
    """Indices of ``nodes`` (each request's node) in SGLang's dfs-weight order over the tree at ``root``.

    A subtree's weight is the number of requests at or below it, found by walking up from each
    request's node (subtrees without requests hold none and add nothing to the order, so they are
    not entered). Children are visited heaviest first (a stable sort: ties keep the tree's order);
    a node's own requests, in queue order, follow those of its children.
    """
    at: dict[int, list[int]] = {}
    weight: dict[int, int] = {}
    for i, node in enumerate(nodes):
        at.setdefault(id(node), []).append(i)
        x = node
        while x is not None:
            weight[id(x)] = weight.get(id(x), 0) + 1
            x = x.parent if x is not root else None
    order: list[int] = []
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if children_done:
            order.extend(at.get(id(node), ()))
            continue
        stack.append((node, True))
        kids = sorted((c for c in node.children.values() if id(c) in weight), key=lambda c: -weight[id(c)])
        stack.extend((c, False) for c in reversed(kids))
    return order


def _dfs_weight(waiting: Sequence[Any], cache: Any, rng: random.Random) -> list[Any]:
    nodes = [cache.match_prefix(r.keys[: r.limit]).last_device_node for r in waiting]
    return [waiting[i] for i in dfs_weight_order(cache.root, nodes)]


def _random(waiting: Sequence[Any], cache: Any, rng: random.Random) -> list[Any]:
    out = list(waiting)
    rng.shuffle(out)
    return out


SCHEDULE_POLICIES.add("fcfs", _fcfs)
SCHEDULE_POLICIES.add("lpm", _lpm)
SCHEDULE_POLICIES.add("lof", _lof)
SCHEDULE_POLICIES.add("dfs-weight", _dfs_weight)
SCHEDULE_POLICIES.add("random", _random)
