"""The transfer-time model shared by the timed world, the replay comparison and calibration.

A transfer of ``bytes`` made of ``segments`` contiguous pieces takes, alone on its link,

    launches * latency + segments * segment_overhead + bytes / (bandwidth * eff(bytes / segments)),
    eff(s) = s / (s + half_efficiency_bytes),

where ``launches`` counts copy operations (a layer-by-layer load issues one per layer), so
efficiency rises with the contiguous piece size (small per-layer page pieces run far below peak,
>= 2 MB pieces near it), and the direct io backend pays a per-piece launch cost the kernel backend
does not. The world shares the bandwidth term between concurrent transfers of one direction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class LinkParams:
    """One direction x io backend x layout. Units: bytes/s, seconds, bytes."""

    bandwidth_Bps: float
    latency_s: float
    half_efficiency_bytes: float
    segment_overhead_s: float

    def efficiency(self, segment_bytes: float) -> float:
        """Fraction of peak bandwidth reached with contiguous pieces of ``segment_bytes``."""
        if segment_bytes <= 0:
            return 1.0
        return segment_bytes / (segment_bytes + self.half_efficiency_bytes)

    def fixed_time(self, segments: int, launches: int = 1) -> float:
        """Seconds that do not depend on bandwidth: latency per copy operation, cost per piece."""
        return launches * self.latency_s + segments * self.segment_overhead_s

    def effective_bytes(self, nbytes: float, segments: int) -> float:
        """Bytes as the link experiences them: ``bytes / efficiency`` (what shares the bandwidth)."""
        if nbytes <= 0:
            return 0.0
        return nbytes / self.efficiency(nbytes / max(1, segments))

    def time(self, nbytes: float, segments: int, launches: int = 1) -> float:
        """Seconds for one transfer of ``launches`` copy operations (e.g. one per layer) alone on the link."""
        return self.fixed_time(segments, launches) + self.effective_bytes(nbytes, segments) / self.bandwidth_Bps

    def as_dict(self) -> dict:
        return asdict(self)


def segments_for(
    pages: int,
    layout: str,
    num_layers: int,
    kv_factor: int,
    *,
    layers: int | None = None,
    page_size: int = 1,
    heads: int = 1,
) -> int:
    """Contiguous pieces a transfer of ``pages`` pages moves, for ``layers`` layers (default all).

    Per page and layer, as the host layout has them (``presets.HOST_LAYOUTS``): layer_first and
    page_first one piece per K and V (device pools are layer-first); page_first_direct one (K and V of
    a layer's page chunk together); page_head one per token, KV head (``heads`` per rank) and K / V.
    """
    pieces = _PIECES.get(layout)
    if pieces is None:  # first use of the layout: its rule from the registry (presets imports this module)
        from .presets import HOST_LAYOUTS

        pieces = _PIECES[layout] = HOST_LAYOUTS.get(layout).pieces
    n_layers = num_layers if layers is None else layers
    return pages * n_layers * pieces(kv_factor, page_size, heads)


# Layout name -> its pieces rule (``HostLayout.pieces``), filled on first use: a timed run asks per transfer.
_PIECES: dict[str, Callable[[int, int, int], int]] = {}
