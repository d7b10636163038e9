"""Replay harness: the core's transfers performed as real tensor copies, timed and verified.

The simulator's transfer model is only as good as its calibration, so this package does for real
what the core only decides: KV pools shaped as SGLang lays them out (``pools``), transfers executed
as batched gather/scatter (``kernel``) or per-page copies (``direct``) and timed (``executor``), a
bit-for-bit round-trip check (``integrity``) and the microbenchmark sweep that feeds
``hicache-sim calibrate`` (``sweep``). CUDA is used when present (pinned host pool, one stream per
direction, CUDA events); the same code runs on CPU tensors otherwise.

torch is an optional dependency (the ``replay`` extra): importing this package without it fails
with an ImportError that names the extra, and nothing outside this package imports torch eagerly.
"""

from __future__ import annotations

try:
    import torch  # noqa: F401
except ImportError as _e:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        "hicache_sim.replay needs torch, which is an optional extra: pip install 'hicache-sim[replay]' "
        "(on a machine without a GPU install the CPU build first: pip install torch --index-url "
        "https://download.pytorch.org/whl/cpu)"
    ) from _e

from .executor import Executor, ReplayError, execute_log
from .integrity import IntegrityError, check_round_trip
from .pools import KVPools, KVShape, allocate_pools, pick_device
from .sweep import SweepConfig, run_sweep

__all__ = [
    "Executor",
    "IntegrityError",
    "KVPools",
    "KVShape",
    "ReplayError",
    "SweepConfig",
    "allocate_pools",
    "check_round_trip",
    "execute_log",
    "pick_device",
    "run_sweep",
]
