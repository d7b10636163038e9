"""Radix tree over pages: the node type, page matching and the lossless split.

A node owns a run of page keys (``key``) and, per page, a device slot (``value``, None once evicted
from the GPU) and a host slot (``host_value``, None until backed up). So a node is D-only, D+H or
H-only; a node with neither is removed from the tree. Children are indexed by their first page key.
Counters of device-resident and host-resident children make the leaf tests O(1) even under a root
with thousands of children.
"""

from __future__ import annotations

ROOT_PRIORITY = -(2**63)


class Node:
    """One radix-tree node. Fields mirror SGLang's TreeNode; lengths are in pages."""

    __slots__ = (
        "children",
        "creation",
        "hashes",
        "hit_count",
        "host_ref",
        "host_value",
        "id",
        "key",
        "last_access",
        "lock_ref",
        "n_dev_children",
        "n_host_children",
        "parent",
        "pending_load",
        "pending_write",
        "priority",
        "tlru_depth",
        "tlru_history",
        "value",
    )

    def __init__(self, node_id: int, key: list[int], now: int, priority: int = 0) -> None:
        self.id = node_id
        self.key = key
        self.value: list[int] | None = None
        self.host_value: list[int] | None = None
        self.children: dict[int, Node] = {}
        self.parent: Node | None = None
        self.lock_ref = 0
        self.host_ref = 0
        self.hit_count = 0
        self.last_access = now
        self.creation = now
        self.priority = priority
        self.hashes: list[int] | None = None
        self.n_dev_children = 0
        self.n_host_children = 0
        self.pending_write: int | None = None
        self.pending_load: int | None = None
        # Kept only under a strategy that reads them (``tracks_depth``: tlru), 0 otherwise: pages from
        # the root to the end of this node, and the deepest such end this branch has reached (which
        # does not shrink when a tail is evicted), as SGLang's unified tree keeps them.
        self.tlru_depth = 0
        self.tlru_history = 0

    def state(self) -> str:
        """'D', 'H', 'D+H' or '-' (a state the tree must never keep)."""
        if self.value is not None:
            return "D+H" if self.host_value is not None else "D"
        return "H" if self.host_value is not None else "-"

    def __repr__(self) -> str:
        return (
            f"Node(id={self.id}, pages={len(self.key)}, state={self.state()}, lock_ref={self.lock_ref}, "
            f"host_ref={self.host_ref})"
        )


def match_len(node_key: list[int], keys: list[int], pos: int) -> int:
    """Number of leading pages of ``node_key`` equal to ``keys[pos:]`` (read-only)."""
    n = len(node_key)
    if keys[pos : pos + n] == node_key:
        return n
    m = min(n, len(keys) - pos)
    i = 0
    while i < m and node_key[i] == keys[pos + i]:
        i += 1
    return i


def chain_hashes(parent_hash: int | None, keys: list[int]) -> list[int]:
    """Per-page chained hashes: page i's hash depends on every earlier page of the path.

    Stands for SGLang's SHA256 chain (``h_i = H(h_{i-1} || tokens_i)``); Python's tuple hash of ints
    is deterministic across runs, which is all the storage index needs.
    """
    out = []
    h = parent_hash
    for k in keys:
        h = hash((h, k)) if h is not None else hash((k,))
        out.append(h)
    return out
