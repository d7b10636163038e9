"""What SGLang 0.5.23 needs replaced to run its cache code on a CPU-only machine.

Every replacement moves bytes or registers memory; none of them reads or changes a cache
decision (what is matched, evicted, backed up, loaded back, prefetched or stored):

- ``pool_host.common._cuda_host_register``: page-locking the host pool with cudaHostRegister.
  A no-op here (there is no CUDA driver to register with).
- ``MHATokenToKVPoolHost.load_to_device_per_layer`` and ``backup_from_device_all_layer``: on
  CPU SGLang binds no copy kernel (``sgl_kernel.kvcacheio`` is imported only under CUDA/ROCm),
  so these are torch index copies between the host pool's buffer and the device pool's
  per-layer buffers, for the two host layouts the driver can resolve to (layer_first,
  page_first).
- the host pool's ``pin_memory`` flag, set to False once the pool is built: the storage
  backend's page buffers are allocated with it, and a pinned tensor needs a CUDA driver.

``sgl_kernel`` itself is never imported on this path, so no stub package is installed.
"""

from __future__ import annotations

from typing import Any

#: One line per replacement, for the targets file and the document.
STUBBED = (
    "sglang.srt.mem_cache.pool_host.common._cuda_host_register: no-op (no CUDA driver to page-lock with)",
    "MHATokenToKVPoolHost.load_to_device_per_layer: torch index copy host -> device, one layer",
    "MHATokenToKVPoolHost.backup_from_device_all_layer: torch index copy device -> host, every layer",
    "host pool pin_memory set to False after construction (pinned tensors need a CUDA driver)",
)


def _host_layer(pool: Any, buf: Any, layer: int) -> Any:
    """The host buffer's view of one layer: [tokens, heads, dim] for both supported layouts."""
    if pool.layout == "layer_first":
        return buf[layer]
    if pool.layout == "page_first":
        return buf[:, layer]
    raise NotImplementedError(f"host layout {pool.layout!r} has no CPU copy in this driver")


def _load_to_device_per_layer(
    self: Any, device_pool: Any, host_indices: Any, device_indices: Any, layer_id: int, io_backend: str, **_: Any
) -> None:
    """Host -> device copy of one layer's K and V rows (a plain index copy)."""
    if not 0 <= layer_id < self.target_layer_num:
        return
    hi = host_indices.long()
    di = device_indices.long()
    self.device_k_buffers[layer_id][di] = _host_layer(self, self.k_buffer, layer_id)[hi]
    self.device_v_buffers[layer_id][di] = _host_layer(self, self.v_buffer, layer_id)[hi]


def _backup_from_device_all_layer(
    self: Any, device_pool: Any, host_indices: Any, device_indices: Any, io_backend: str
) -> None:
    """Device -> host copy of every layer's K and V rows (a plain index copy)."""
    hi = host_indices.long()
    di = device_indices.long()
    for layer in range(self.target_layer_num):
        _host_layer(self, self.k_buffer, layer)[hi] = self.device_k_buffers[layer][di]
        _host_layer(self, self.v_buffer, layer)[hi] = self.device_v_buffers[layer][di]


def apply() -> None:
    """Install the replacements (idempotent)."""
    import sglang.srt.mem_cache.pool_host.common as host_common
    from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost

    host_common._cuda_host_register = lambda buffer, registration_granularity_bytes=None: None
    MHATokenToKVPoolHost.load_to_device_per_layer = _load_to_device_per_layer
    MHATokenToKVPoolHost.backup_from_device_all_layer = _backup_from_device_all_layer


def unpin(cache: Any) -> None:
    """Turn off ``pin_memory`` on every host pool of ``cache`` (after ``init_hicache``)."""
    for entry in cache.cache_controller.mem_pool_host.entries:
        entry.host_pool.pin_memory = False
