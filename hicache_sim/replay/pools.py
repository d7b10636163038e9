"""Device and host KV pools laid out as SGLang lays them out, sized down to fit the machine.

Copies are only representative when the bytes sit where SGLang puts them: the device pool is
layer-first (per layer, K and V of every token contiguous), the host pool follows ``mem_layout``
(reference 1.5; MLA has one latent instead of K and V, kept here as a K/V axis of length 1, which is
the same memory):

- ``layer_first``        (kv, L, tokens, H, D)        the device's own order
- ``page_first``         (kv, tokens, L, H, D)        all layers of a token contiguous
- ``page_first_direct``  (kv, pages, L, page, H, D)   per-layer page chunks for direct IO

Every pool also offers one *logical* view ``(kv, L, pages, page, H, D)`` (a permutation of the native
buffer, no copy), so the executor indexes pages on dimension 2 whatever the layout.

A real pool (tens of GB) does not fit a CI machine: pools hold at most ``max_pool_bytes`` and the
executor maps a logged page index onto a slot modulo the pool size, which keeps every transfer's
bytes and piece structure and only reuses addresses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from ..hardware.presets import MEM_LAYOUTS

if TYPE_CHECKING:
    from ..scenario import Resolved

MiB = 1 << 20
DEFAULT_POOL_BYTES = {"cpu": 256 * MiB, "cuda": 4096 * MiB}
"""Cap on each pool (device and host) when none is given: small enough for a 2-core CI box."""

STORAGE_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "fp8": torch.uint8}
"""Element type per KV dtype. fp8 is held as uint8: copies move bits, and uint8 supports every op."""


class ReplayError(ValueError):
    """Bad replay input (device not present, log that does not match the pools): one line."""


@dataclass(frozen=True)
class KVShape:
    """Per-rank KV geometry of one model: what a page occupies and how it splits into pieces."""

    num_layers: int
    kv_factor: int  # 2: K and V (MHA/GQA); 1: one latent (MLA)
    heads: int
    head_dim: int
    page_size: int
    dtype: str = "bf16"

    def __post_init__(self) -> None:
        for name in ("num_layers", "heads", "head_dim", "page_size"):
            if getattr(self, name) <= 0:
                raise ReplayError(f"KV shape: {name} must be > 0, got {getattr(self, name)}")
        if self.kv_factor not in (1, 2):
            raise ReplayError(f"KV shape: kv_factor must be 1 (MLA) or 2 (MHA), got {self.kv_factor}")
        if self.dtype not in STORAGE_DTYPES:
            raise ReplayError(f"KV shape: dtype must be one of {sorted(STORAGE_DTYPES)}, got {self.dtype!r}")

    @property
    def torch_dtype(self) -> torch.dtype:
        return STORAGE_DTYPES[self.dtype]

    @property
    def itemsize(self) -> int:
        return self.torch_dtype.itemsize

    @property
    def page_elements(self) -> int:
        """Elements of one page over all layers (and K and V)."""
        return self.kv_factor * self.num_layers * self.page_size * self.heads * self.head_dim

    @property
    def page_bytes(self) -> int:
        return self.page_elements * self.itemsize

    @classmethod
    def from_resolved(cls, r: Resolved) -> KVShape:
        """The per-rank shape a resolved scenario's pages have (bytes agree with ``r.page_bytes``): one
        tensor-parallel rank of one pipeline stage (``r.stage_layers`` layers)."""
        from ..scenario.resolve import kv_heads  # the resolver's rule: heads over one attention group's GPUs

        m = r.model
        layers = r.stage_layers
        if m.attention == "mla":
            shape = cls(layers, 1, 1, m.kv_lora_rank + m.qk_rope_head_dim, r.cache.page_size, r.scenario.model.dtype)
        else:
            heads = kv_heads(m, r.scenario.hardware)
            shape = cls(layers, 2, heads, m.head_dim, r.cache.page_size, r.scenario.model.dtype)
        if shape.page_bytes != r.page_bytes:  # the sizing rules and this shape must agree
            raise ReplayError(f"KV shape gives {shape.page_bytes} B/page, the scenario {r.page_bytes}")
        if r.side_copies:  # their bytes are in every logged transfer; the harness would time the KV alone
            names = ", ".join(c.name for c in r.side_copies)
            raise ReplayError(
                f"the replay copies the KV pool only; this scenario's transfers also move {names} (not replayed)"
            )
        return shape


def pick_device(name: str = "auto") -> torch.device:
    """``auto``: CUDA when present, else CPU. Asking for ``cuda`` without one is a user error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cpu":
        return torch.device("cpu")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ReplayError(f"--device {name}: no CUDA device on this machine (use --device cpu)")
        return torch.device(name)
    raise ReplayError(f"--device {name!r}: expected auto, cpu or cuda")


@contextmanager
def cpu_threads(n: int | None) -> Iterator[None]:
    """torch intra-op threads for the duration (None: leave as is).

    One thread by default for CPU replays: a parallel copy on a shared machine waits for a
    descheduled worker thread for a whole scheduler tick (milliseconds, whatever the size), which
    is noise in the measurements, not a property of the copy.
    """
    if n is None:
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def device_label(device: torch.device) -> str:
    """What the measurements say they ran on: ``cpu`` or ``cuda`` (the kind, for grouping)."""
    return "cuda" if device.type == "cuda" else "cpu"


def device_name(device: torch.device) -> str:
    """Human-readable device: the GPU model, or the CPU model with cores and torch threads."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    import os
    import platform

    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            names = [ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")]
        model = names[0] if names else model
    except OSError:
        pass
    threads = torch.get_num_threads()
    return f"{model}, {os.cpu_count()} cores, {threads} torch thread{'s' if threads != 1 else ''}"


@dataclass(frozen=True)
class ReplayLayout:
    """One host layout as the harness allocates and reads it: ``native_shape(shape, pages)``, the buffer
    as SGLang allocates it; ``view(buf, shape, pages)``, the logical (kv, L, pages, page, H, D)
    permutation of it (no copy); ``page(buf, slot, page_size)``, one page as (kv, L, page, H, D) by
    SGLang's native indexing (independent of ``view``, so the integrity check can prove the view). A
    direct copy moves K and V of one layer's page as two pieces in every layout, as SGLang does."""

    native_shape: Callable[[KVShape, int], tuple[int, ...]]
    view: Callable[[torch.Tensor, KVShape, int], torch.Tensor]
    page: Callable[[torch.Tensor, int, int], torch.Tensor]


#: Every layout the harness performs (``MEM_LAYOUTS``), by name.
REPLAY_LAYOUTS: dict[str, ReplayLayout] = {
    # (kv, L, tokens, H, D): the device's own order.
    "layer_first": ReplayLayout(
        lambda s, n: (s.kv_factor, s.num_layers, n * s.page_size, s.heads, s.head_dim),
        lambda buf, s, n: buf.view(s.kv_factor, s.num_layers, n, s.page_size, s.heads, s.head_dim),
        lambda buf, slot, p: buf[:, :, slot * p : (slot + 1) * p],
    ),
    # (kv, tokens, L, H, D): all layers of a token contiguous.
    "page_first": ReplayLayout(
        lambda s, n: (s.kv_factor, n * s.page_size, s.num_layers, s.heads, s.head_dim),
        lambda buf, s, n: buf.view(s.kv_factor, n, s.page_size, s.num_layers, s.heads, s.head_dim).permute(
            0, 3, 1, 2, 4, 5
        ),
        lambda buf, slot, p: buf[:, slot * p : (slot + 1) * p].permute(0, 2, 1, 3, 4),
    ),
    # (kv, pages, L, page, H, D): per-layer page chunks for direct IO, K and V apart (kv outermost).
    "page_first_direct": ReplayLayout(
        lambda s, n: (s.kv_factor, n, s.num_layers, s.page_size, s.heads, s.head_dim),
        lambda buf, s, n: buf.permute(0, 2, 1, 3, 4, 5),
        lambda buf, slot, p: buf[:, slot],
    ),
}


@dataclass
class KVPools:
    """One device pool (layer-first) and one host pool (``layout``), ``*_pages`` pages each."""

    shape: KVShape
    layout: str
    device: torch.device
    device_pages: int
    host_pages: int
    device_buf: torch.Tensor
    host_buf: torch.Tensor

    @property
    def pinned(self) -> bool:
        return self.host_buf.is_pinned() if self.device.type == "cuda" else False

    def device_view(self) -> torch.Tensor:
        """(kv, L, pages, page, H, D) over the device buffer (contiguous)."""
        s = self.shape
        return self.device_buf.view(s.kv_factor, s.num_layers, self.device_pages, s.page_size, s.heads, s.head_dim)

    def host_view(self) -> torch.Tensor:
        """(kv, L, pages, page, H, D) over the host buffer, a permuted view for page-first layouts."""
        return REPLAY_LAYOUTS[self.layout].view(self.host_buf, self.shape, self.host_pages)

    def host_page_native(self, slot: int) -> torch.Tensor:
        """Host page ``slot`` as (kv, L, page, H, D), read by SGLang's native indexing of the layout.

        Independent of :meth:`host_view` (plain slicing of the native shape), so the integrity check
        can prove that the view, and every copy through it, puts bytes where SGLang expects them.
        """
        return REPLAY_LAYOUTS[self.layout].page(self.host_buf, slot, self.shape.page_size)

    def sglang_shapes(self) -> dict[str, tuple[int, ...]]:
        """Native buffer shapes as SGLang names them (MLA without the K/V axis)."""

        def squeeze(t: torch.Tensor) -> tuple[int, ...]:
            return tuple(t.shape[1:]) if self.shape.kv_factor == 1 else tuple(t.shape)

        return {"device": squeeze(self.device_buf), "host": squeeze(self.host_buf)}


def pool_pages_cap(shape: KVShape, device: torch.device, max_pool_bytes: int | None = None) -> int:
    """Most pages one pool may hold under the byte cap (at least one)."""
    cap = max_pool_bytes if max_pool_bytes is not None else DEFAULT_POOL_BYTES[device_label(device)]
    return max(1, cap // shape.page_bytes)


def allocate_pools(
    shape: KVShape,
    layout: str,
    device_pages: int,
    host_pages: int,
    device: torch.device | str = "auto",
    *,
    max_pool_bytes: int | None = None,
) -> KVPools:
    """Zeroed pools of at most ``max_pool_bytes`` each; host pinned when the device is CUDA.

    Page counts above the cap are reduced (the executor wraps indices); the caller sees the real
    sizes on the returned pools.
    """
    if layout not in MEM_LAYOUTS:
        raise ReplayError(f"mem_layout {layout!r}: expected one of {', '.join(MEM_LAYOUTS)}")
    dev = device if isinstance(device, torch.device) else pick_device(device)
    cap = pool_pages_cap(shape, dev, max_pool_bytes)
    n_dev = max(1, min(device_pages, cap))
    n_host = max(1, min(host_pages, cap))
    s = shape
    device_buf = torch.zeros(
        (s.kv_factor, s.num_layers, n_dev * s.page_size, s.heads, s.head_dim), dtype=s.torch_dtype, device=dev
    )
    native = REPLAY_LAYOUTS[layout].native_shape(s, n_host)
    host_buf = torch.zeros(native, dtype=s.torch_dtype, pin_memory=dev.type == "cuda")
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)  # zero-fill ran on the default stream; copies use side streams
    return KVPools(s, layout, dev, n_dev, n_host, device_buf, host_buf)
