"""HiCache: match, insert, evict, evict_host, write_backup, load_back, prefetch, terminate, and
``complete(transfer)``, which applies an acknowledgement. See the package docstring for the map."""

from __future__ import annotations

from dataclasses import dataclass

from .backup import BackupMixin
from .buffer import BufferMixin
from .config import CacheConfig
from .errors import CacheStateError
from .eviction import EvictionMixin
from .loadback import LoadBackMixin
from .prefetch import PrefetchMixin
from .requests import RequestMixin
from .transfers import Transfer
from .tree import Node, match_len


@dataclass(slots=True)
class MatchResult:
    """What a prefix match found (pages). ``device_pages`` are the slots of the device prefix."""

    device_pages: list[int]
    host_hit_pages: int
    last_node: Node
    last_device_node: Node
    last_host_node: Node

    @property
    def device_hit_pages(self) -> int:
        return len(self.device_pages)


class HiCache(RequestMixin, PrefetchMixin, BufferMixin, LoadBackMixin, BackupMixin, EvictionMixin):
    """SGLang's hierarchical radix cache over pages, driven by its caller (see ``core`` docs)."""

    def __init__(self, config: CacheConfig) -> None:
        super().__init__(config)
        # reason -> bound method applying its acknowledgement (bound once: ``drain`` runs per request).
        self._ack_by_reason = {reason: getattr(self, name) for reason, name in _ACK_BY_REASON.items()}

    # ------------------------------------------------------------------------------------ match

    def match_prefix(self, keys: list[int]) -> MatchResult:
        """Longest cached prefix of ``keys`` (page keys) across device and host (mutates access times;
        splits a node when the match ends inside it)."""
        return MatchResult(*self._match(keys, False))

    def _match(self, keys: list[int], locking: bool) -> tuple[list[int], int, Node, Node, Node]:
        """``match_prefix`` as a tuple (device pages, host hit pages, last node, last
        device node, last host node).

        ``locking``: the caller locks the last device node next (``begin_request``), which takes that
        node and its ancestors out of both candidate sets whatever their keys: their re-queueing after
        the touch is skipped (it would only leave stale heap entries), the H-only tail is re-queued.
        """
        node = self.root
        path: list[Node] = []
        dev: list[int] = []
        pos, n = 0, len(keys)
        while pos < n:
            child = node.children.get(keys[pos])
            if child is None:
                break
            ckey = child.key
            m = len(ckey)
            partial = keys[pos : pos + m] != ckey  # ``match_len``'s whole-node test written out
            if partial:
                m = match_len(ckey, keys, pos)
                child = self._split(child, m)
            if child.value is not None:
                dev.extend(child.value)
            path.append(child)
            node = child
            pos += m
            if partial:
                break
        last = node
        # ``path`` is the chain from the root (excluded) down to ``last``: walk it back up to the last
        # node on device, summing the host hit below it; the root (on device) ends the walk at the latest.
        host_hit = 0
        i = len(path)
        while i and path[i - 1].value is None:
            i -= 1
            hv = path[i].host_value
            host_hit += len(hv) if hv is not None else 0
        last_device = path[i - 1] if i else self.root
        tail = len(path) - i  # nodes of the path below the last device node
        # Stamp the matched path, ancestors first, so a deeper node is never older than its parent
        # (``_touch`` written out; a node's re-queueing reads only its own fields, so it may follow).
        clock = self._clock + 1
        self.root.last_access = clock
        for x in path:
            clock += 1
            x.last_access = clock
        self._clock = clock
        if tail or not locking:
            refresh = self._refresh
            for x in path[len(path) - tail :] if locking else path:
                refresh(x)
        i = len(path)  # up to the last node with a host copy (the root has one)
        while i and path[i - 1].host_value is None:
            i -= 1
        return dev, host_hit, last, last_device, path[i - 1] if i else self.root

    # ----------------------------------------------------------------------------------- insert

    def insert(
        self, keys: list[int], pages: list[int], *, chunked: bool = False, priority: int = 0, inserted: int = 0
    ) -> int:
        """Insert a request's prefix: ``pages[i]`` is the device slot holding ``keys[i]`` (mutates).

        Returns pages that were already device-resident (the caller frees its duplicate slots for
        them). H-only nodes on the path take the request's device pages again (re-attach). Each
        device node walked, and the new leaf, counts an insert-hit that may trigger write-through,
        never under write_back. Which inserts count is ``semantics.checkpoint_hits``: ``never``
        skips ``chunked`` checkpoints; ``past_inserted`` counts on every insert the nodes ending past
        ``inserted``, the pages this request had already inserted.
        """
        if len(pages) < len(keys):
            raise CacheStateError(f"insert of {len(keys)} keys with only {len(pages)} device pages")
        pos, n = 0, len(keys)
        # A node counts its insert-hit when it ends past ``counted_from`` (n: none does).
        threshold = self.write_policy.threshold
        if threshold is None:
            counted_from, threshold = n, 0  # no write-through: no node ends past n, the threshold is never read
        else:
            counted_from = self.sem.checkpoint_hits.counted_from(n, inserted, chunked)
        keyed = self._hit_count_keyed
        refresh = self._refresh
        node = self.root
        self._clock += 1  # SGLang touches the root: stamped, never a candidate
        node.last_access = self._clock
        prefix = 0
        # A locked node is in neither candidate set whatever its key (``inc_lock_ref``), so
        # re-queueing it is skipped: most of a finished request's path is still locked by it.
        while pos < n:
            child = node.children.get(keys[pos])
            if child is None:
                break
            if priority > child.priority:
                child.priority = priority
                if not child.lock_ref:
                    refresh(child)
            ckey = child.key
            plen = len(ckey)
            if keys[pos : pos + plen] != ckey:  # ``match_len``'s whole-node test written out
                plen = match_len(ckey, keys, pos)
                child = self._split(child, plen)
            # Touch after the split: the lower half was not referenced and keeps its age (_touch).
            self._clock += 1
            child.last_access = self._clock
            if not child.lock_ref:
                refresh(child)
            if child.value is None:
                self._set_value(child, pages[pos : pos + plen])
                self._track_duplicate(child)
                self.counters.reattached_pages += plen
            else:
                prefix += plen
            node = child
            pos += plen
            if pos > counted_from:
                # The insert-hit (upstream's _inc_hit_count): back the node up at the write policy's
                # threshold; the node is on device now.
                child.hit_count += 1
                if keyed:
                    refresh(child)
                if child.host_value is None and child.hit_count >= threshold:
                    self.write_backup(child)
        if pos < n:
            self._clock += 1
            leaf = Node(self._next_node_id, keys[pos:], self._clock, priority)  # _new_node written out
            self._next_node_id += 1
            leaf.value = pages[pos:n]
            if self.storage is not None:
                leaf.hashes = self._page_hashes(node, leaf.key)
            self.evictable_pages += n - pos
            # _add_child of a D-only leaf written out.
            leaf.parent = node
            node.children[leaf.key[0]] = leaf
            node.n_dev_children += 1
            if self._tracks_depth:
                self._raise_history(leaf, node)
            refresh(leaf)
            if not node.lock_ref:
                refresh(node)
            if n > counted_from:
                # The new leaf's insert-hit (on device, no host copy, no hit before this one).
                leaf.hit_count = 1
                if keyed:
                    refresh(leaf)
                if threshold <= 1:
                    self.write_backup(leaf)
        return prefix

    # --------------------------------------------------------------------------------- complete

    def complete(self, transfer: Transfer, now: float | None = None) -> None:
        """Apply the acknowledgement of a finished transfer (mutates). Each transfer completes once."""
        if now is not None:
            self.now = now
        t = self.inflight.pop(transfer.id, None)
        if t is None:
            raise CacheStateError(f"transfer {transfer.id} ({transfer.kind.value}) completed twice or unknown")
        self._ack_by_reason[t.reason](t)

    def drain(self, now: float | None = None) -> int:
        """Complete every transfer in flight, oldest first, including any they spawn (instant mode).

        Returns how many completed.
        """
        done = 0
        inflight = self.inflight
        acks = self._ack_by_reason
        if now is not None and inflight:
            self.now = now
        while inflight:
            for t in list(inflight.values()):
                # ``complete`` written out: a transfer still in flight is acknowledged.
                if inflight.pop(t.id, None) is not None:
                    acks[t.reason](t)
                    done += 1
        return done


# Which method applies the acknowledgement of a transfer, by the reason the core created it.
_ACK_BY_REASON = {
    "write_through": "_ack_write",
    "write_back": "_ack_write",
    "load_back": "_ack_load",
    "storage_backup": "_ack_storage_backup",
    "prefetch": "_ack_prefetch",
    "buffer_stage": "_ack_buffer_stage",
    "buffer_store": "_ack_buffer_store",
    "buffer_load": "_ack_buffer_load",
}
