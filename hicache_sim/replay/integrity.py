"""Bit-for-bit round trip: a page written back to host and loaded into another slot is unchanged.

A copy that is fast but wrong (a permuted layer, K and V swapped, a page in the wrong slot, a
layout view that does not match SGLang's) would calibrate the model on the wrong work. The check:

1. fill device pages with a pattern derived from each page's key (a page hash), every element
   different and depending on (key, K/V, layer, token, head, dim);
2. back them up to random host slots (D2H through the executor);
3. read each host page through the layout's *native* indexing and compare with the pattern;
4. evict: overwrite the whole device pool with other bits;
5. load the pages back (H2D) into different device slots and compare bit for bit.

Any mismatch raises :class:`IntegrityError` naming the page (key and slot) and the first element.
Bits are compared through an integer view of the same width, so NaN patterns compare too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .executor import Executor
from .pools import KVPools

INT_OF_WIDTH = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_MIX1, _MIX2 = 0x9E3779B97F4A7C15 - (1 << 64), 0xBF58476D1CE4E5B9 - (1 << 64)  # as signed int64


class IntegrityError(AssertionError):
    """A page did not survive the round trip bit for bit."""


@dataclass(frozen=True)
class IntegrityReport:
    """What a passing round trip checked."""

    pages: int
    elements_per_page: int
    layout: str
    io_backend: str
    per_layer: bool


def page_pattern(keys: torch.Tensor, elements: int, width: int) -> torch.Tensor:
    """(len(keys), elements) integers of ``width`` bytes, a mixing hash of (key, element index)."""
    idx = torch.arange(elements, dtype=torch.int64)
    x = keys.to(torch.int64)[:, None] * _MIX1 + (idx[None, :] + 1) * _MIX2  # wraps mod 2**64
    x = x ^ (x >> 31)
    x = x * _MIX1
    x = x ^ (x >> 29)
    if width == 8:
        return x
    bits = 8 * width
    x = x & ((1 << bits) - 1)
    if width == 1:
        return x.to(torch.uint8)
    return (x - ((x >> (bits - 1)) << bits)).to(INT_OF_WIDTH[width])  # two's-complement fold


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(INT_OF_WIDTH[t.element_size()])


def fill_device(pools: KVPools, slots: list[int], keys: torch.Tensor) -> None:
    """Write each key's pattern into its device slot (kv, L, page, H, D order)."""
    s = pools.shape
    pat = page_pattern(keys, s.page_elements, s.itemsize)
    pat = pat.view(len(slots), s.kv_factor, s.num_layers, s.page_size, s.heads, s.head_dim).permute(1, 2, 0, 3, 4, 5)
    dv = _bits(pools.device_view())
    dv.index_copy_(2, torch.tensor(slots, dtype=torch.int64, device=pools.device), pat.to(pools.device))
    _settle(pools)


def _settle(pools: KVPools) -> None:
    """On CUDA, finish default-stream writes before the executor's streams read the pool."""
    if pools.device.type == "cuda":
        torch.cuda.synchronize(pools.device)


def _compare(where: str, got: torch.Tensor, want: torch.Tensor, key: int) -> None:
    diff = (got != want).reshape(-1)
    if bool(diff.any()):
        n = int(diff.sum())
        first = int(diff.nonzero()[0])
        raise IntegrityError(
            f"page key {key:#x} ({where}): {n} of {diff.numel()} elements differ, first at "
            f"flat index {first} (got {int(got.reshape(-1)[first])}, "
            f"want {int(want.reshape(-1)[first])})"
        )


def verify_host(pools: KVPools, slots: list[int], keys: torch.Tensor) -> None:
    """Each host slot holds its key's pattern when read through SGLang's native layout indexing."""
    s = pools.shape
    pat = page_pattern(keys, s.page_elements, s.itemsize)
    for i, slot in enumerate(slots):
        got = _bits(pools.host_page_native(slot))
        want = pat[i].view(s.kv_factor, s.num_layers, s.page_size, s.heads, s.head_dim)
        _compare(f"host slot {slot}, layout {pools.layout}", got, want, int(keys[i]))


def verify_device(pools: KVPools, slots: list[int], keys: torch.Tensor) -> None:
    """Each device slot holds its key's pattern."""
    s = pools.shape
    pat = page_pattern(keys, s.page_elements, s.itemsize)
    dv = _bits(pools.device_view())
    got_all = dv.index_select(2, torch.tensor(slots, dtype=torch.int64, device=pools.device)).cpu()
    for i, slot in enumerate(slots):
        want = pat[i].view(s.kv_factor, s.num_layers, s.page_size, s.heads, s.head_dim)
        _compare(f"device slot {slot}", got_all[:, :, i], want, int(keys[i]))


def check_round_trip(
    executor: Executor,
    *,
    pages: int = 32,
    seed: int = 0,
    per_layer: bool = True,
    tamper: Callable[[KVPools, list[int]], None] | None = None,
) -> IntegrityReport:
    """Fill, back up, check the host, evict, load into other slots, check the device; raise on mismatch.

    ``pages`` is reduced to what the pools allow. ``tamper(pools, host_slots)`` runs between the
    backup and the load (tests use it to corrupt a copy and see it caught).
    """
    pools = executor.pools
    n = max(1, min(pages, pools.host_pages, pools.device_pages))
    g = torch.Generator().manual_seed(seed)
    keys = torch.randint(-(1 << 62), 1 << 62, (n,), generator=g, dtype=torch.int64)  # like page hashes
    perm = torch.randperm(pools.device_pages, generator=g).tolist()
    src = perm[:n]
    # different slots: disjoint when the pool has room, else every page shifted to another page's slot
    dst = perm[n : 2 * n] if pools.device_pages >= 2 * n else src[1:] + src[:1]
    host = torch.randperm(pools.host_pages, generator=g)[:n].tolist()
    fill_device(pools, src, keys)
    executor.d2h(src, host)
    verify_host(pools, host, keys)
    _bits(pools.device_buf).fill_(-1 if pools.shape.itemsize > 1 else 0xFF)  # evict: other bits everywhere
    _settle(pools)
    if tamper is not None:
        tamper(pools, host)
    executor.h2d(host, dst, per_layer=per_layer)
    verify_device(pools, dst, keys)
    return IntegrityReport(n, pools.shape.page_elements, pools.layout, executor.io_backend, per_layer)
