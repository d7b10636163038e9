"""The seam in time: put each core Transfer on its link and report its completion.

Routing: H2D and D2H on the PCIe directions, S2H on the storage read link, H2S on the storage
write link. An S2H batch part of whose objects the store reads from its offload disk runs as Mooncake's
real client serves one ``batch_get_into`` (real_client.cpp ``batch_get_into_internal``): the objects
still in the pool first, then the disk's (read one after another on the offload link, every writing
rank's objects, by the one thread that owns the disk), then those pulled from the disk's staging
buffer over the store's read link. A prefill step's load-backs are merged into one H2D flow with a milestone per layer
(SGLang merges a batch's load ops and copies layer by layer). A prefetch's S2H batches run one after
another (the IO thread walks them in order and stops once the prefetch is terminated: a batch
revoked before it starts is completed at once without using the link). Completions of S2H and of
blocking write-back copies are applied to the core at once (the IO thread advances progress; the
scheduler thread is waiting on the blocking copy); every other acknowledgement goes to the
scheduler's inbox and is applied at its next step, as ``check_hicache_events`` does.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import simpy

from ..core import HiCache, Transfer, TransferKind
from ..hardware.linkmodel import segments_for
from ..simconfig import SideCopy
from .links import Flow, Link
from .metrics import TransferLog

#: The offload disk's link (present when the store has one).
OFFLOAD_LINK = "storage_offload"

LINK_OF_KIND = {
    TransferKind.H2D: "h2d",
    TransferKind.D2H: "d2h",
    TransferKind.S2H: "storage_read",
    TransferKind.H2S: "storage_write",
}


@dataclass(frozen=True)
class KVLayout:
    """What decides how many contiguous pieces and copy operations a PCIe copy has: the KV pool's, and
    those of the pools beside it that move with it (``side``, SimConfig.side_copies)."""

    mem_layout: str
    num_layers: int
    kv_factor: int
    page_size: int = 1  # tokens a page, and KV heads a rank: what a page_head copy moves apart
    heads: int = 1
    side: tuple[SideCopy, ...] = ()

    def segments(self, pages: int, layers: int | None = None) -> int:
        kv = segments_for(
            pages,
            self.mem_layout,
            self.num_layers,
            self.kv_factor,
            layers=layers,
            page_size=self.page_size,
            heads=self.heads,
        )
        return kv + sum(pages * c.layers * c.pieces for c in self.side)

    @property
    def layer_launches(self) -> int:
        """Copy operations of a layer-by-layer load: one per KV layer and one per layer of each side pool
        (SGLang's ``submit_host_to_device`` copies every pool's layer in turn, a packed draft's too)."""
        return self.num_layers + sum(c.layers for c in self.side)

    @property
    def copy_launches(self) -> int:
        """Copy operations of a one-shot copy: the KV pool's, and one per side pool of its own."""
        return 1 + sum(1 for c in self.side if c.own_copy)


@dataclass(eq=False)
class LayeredLoad:
    """One prefill step's H2D load: per-layer arrival times and an event at the last layer."""

    transfers: list[Transfer]
    done: simpy.Event
    arrivals: list[float | None] = field(default_factory=list)


class Transport:
    """Performs the core's transfers on the links; keeps the byte ledger for conservation checks."""

    def __init__(
        self,
        env: simpy.Environment,
        cache: HiCache,
        links: dict[str, Link],
        layout: KVLayout,
        on_ack: Callable[[Transfer], None],
        on_progress: Callable[[], None],
        log: TransferLog,
    ) -> None:
        self.env = env
        self.cache = cache
        self.links = links
        self.layout = layout
        self.on_ack = on_ack
        self.on_progress = on_progress
        self.log = log
        self.issued_bytes = {name: 0 for name in links}  # bytes of every transfer taken from the core
        self.skipped_bytes = {name: 0 for name in links}  # of those, revoked before they started
        self.skipped = 0

    # ------------------------------------------------------------------------------- routing

    def dispatch(self, transfers: list[Transfer]) -> None:
        """Start transfers that nobody waits for (write-through, load-backs outside a step, storage)."""
        chains: dict[str, list[Transfer]] = {}
        for t in transfers:
            self.issued_bytes[LINK_OF_KIND[t.kind]] += t.bytes
            if t.kind is TransferKind.S2H:
                if t.offload_objects:
                    self.issued_bytes[OFFLOAD_LINK] += self._offload_split(t)[2]
                chains.setdefault(t.request_id or "", []).append(t)
            elif t.blocking:
                self._start(t, self._complete_now)
            else:
                self._start(t, self._ack_later)
        for chain in chains.values():
            self._next_batch(deque(chain))

    def start_blocking(self, transfers: list[Transfer], done: Callable[[], None]) -> None:
        """Start blocking copies; ``done()`` once all have finished (each is completed at once)."""
        left = [len(transfers)]

        def one(flow: Flow) -> None:
            self._complete_now(flow)
            left[0] -= 1
            if left[0] == 0:
                done()

        for t in transfers:
            self.issued_bytes[LINK_OF_KIND[t.kind]] += t.bytes
            self._start(t, one)

    def start_layered(self, transfers: list[Transfer]) -> LayeredLoad:
        """One H2D flow for a step's loads, with one milestone per layer."""
        load = LayeredLoad(transfers, self.env.event(), [None] * self.layout.num_layers)
        pages = sum(t.pages for t in transfers)
        nbytes = sum(t.bytes for t in transfers)
        self.issued_bytes["h2d"] += nbytes

        def milestone(_flow: Flow, i: int, now: float) -> None:
            load.arrivals[i] = now

        def finished(flow: Flow) -> None:
            for t in transfers:
                self.log.add(t, flow.submit_s, flow.end_s)
                self.on_ack(t)
            load.done.succeed()

        # SGLang issues one copy per layer: each pays the per-operation latency (as the replay measures).
        self.links["h2d"].submit(
            nbytes,
            self.layout.segments(pages),
            finished,
            milestones=self.layout.num_layers,
            on_milestone=milestone,
            tag=transfers,
            launches=self.layout.layer_launches,
        )
        return load

    # ----------------------------------------------------------------------------- internals

    def _start(self, t: Transfer, on_done: Callable[[Flow], None]) -> Flow:
        name = LINK_OF_KIND[t.kind]
        if name not in ("h2d", "d2h"):
            return self.links[name].submit(t.bytes, 1, on_done, tag=t)
        launches = self.layout.copy_launches
        return self.links[name].submit(t.bytes, self.layout.segments(t.pages), on_done, tag=t, launches=launches)

    def _complete_now(self, flow: Flow) -> None:
        t = flow.tag
        assert isinstance(t, Transfer), "started by _start, tagged with its transfer"
        self.log.add(t, flow.submit_s, flow.end_s)
        self.cache.complete(t, self.env.now)

    def _ack_later(self, flow: Flow) -> None:
        t = flow.tag
        assert isinstance(t, Transfer), "started by _start, tagged with its transfer"
        self.log.add(t, flow.submit_s, flow.end_s)
        self.on_ack(t)

    def _next_batch(self, chain: deque[Transfer]) -> None:
        """Start the next storage batch of a prefetch; batches revoked meanwhile complete unstarted."""
        cache = self.cache
        while chain:
            t = chain.popleft()
            if t.id in cache.revoked_transfers:
                self.skipped_bytes["storage_read"] += t.bytes
                if t.offload_objects:
                    self.skipped_bytes[OFFLOAD_LINK] += self._offload_split(t)[2]
                self.skipped += 1
                self.log.add(t, None, None)
                cache.complete(t, self.env.now)
                continue

            def done(flow: Flow, rest: deque[Transfer] = chain) -> None:
                self._complete_now(flow)
                self.on_progress()
                self._next_batch(rest)

            if t.offload_objects:
                self._start_offloaded(t, done)
            else:
                self._start(t, done)
            return

    def _offload_split(self, t: Transfer) -> tuple[int, int, int, int]:
        """An S2H batch with objects on the offload disk: (bytes from the pool, this rank's bytes from
        the disk, bytes the disk reads for every writing rank, objects it reads)."""
        per_page = self.cache.config.storage_objects_per_page
        rank_bytes = t.bytes * t.offload_objects // (t.pages * per_page)
        writers = max(1, per_page // self.layout.kv_factor)
        return t.bytes - rank_bytes, rank_bytes, rank_bytes * writers, t.offload_objects

    def _start_offloaded(self, t: Transfer, on_done: Callable[[Flow], None]) -> None:
        """The pool's objects on the read link, then the disk's objects read one by one on the offload
        link, then those pulled over the read link; ``on_done`` gets the last flow, dated from the first."""
        pool_bytes, rank_bytes, disk_bytes, objects = self._offload_split(t)
        read, disk = self.links["storage_read"], self.links[OFFLOAD_LINK]
        first: list[float] = []

        def pulled(flow: Flow) -> None:
            flow.submit_s = first[0]
            flow.tag = t
            on_done(flow)

        def from_disk(flow: Flow) -> None:
            read.submit(rank_bytes, 1, pulled, tag=t)

        def from_pool(flow: Flow | None) -> None:
            d = disk.submit(disk_bytes, objects, from_disk, tag=t)
            if not first:
                first.append(d.submit_s)

        if pool_bytes:
            first.append(self.env.now)
            read.submit(pool_bytes, 1, from_pool, tag=t)
        else:
            from_pool(None)
