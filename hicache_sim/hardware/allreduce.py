"""Time of one tensor-parallel all-reduce of ``S`` bytes over ``n`` ranks, by the kernel SGLang runs.

SGLang (0.5.2 to current, ``custom_all_reduce.py``) sends a message through its custom all-reduce when
it is strictly below ``_MAX_CAR_SIZE`` (8 MiB on CUDA) on 2, 4, 6 or 8 fully NVLink-connected GPUs, and
through NCCL (pynccl) otherwise. Inside the custom kernel it reads every peer's buffer in one stage
below 256 KiB (8 and 6 ranks) or 512 KiB (4 ranks), and always at 2 ranks; above, it runs two stages
(reduce-scatter, all-gather). Which kernel runs is the table ``FABRICS`` (first matching rule); each
kernel's time, with ``f = 2 (n - 1) / n`` and ``peak`` the large-message bus bandwidth of the GPU:

    custom_1stage, custom_2stage:  latency_k + f S / (efficiency_k x peak)
    nccl:                          latency + f S / busbw(S),  busbw(S) = peak / (1 + (half / S)^exponent)
    flat (no size curve measured): latency + f S / peak

``half`` and ``exponent`` come from one fit to two measured 8-GPU nccl-tests tables (8 x H200 with
NVLS, 8 x A100 with ring, 4-64 MiB; ``python -m validation.allreduce_fit``), the custom kernels' two
constants each from vLLM PR #24111's H100 TP 8 timings (docs/reference/hardware-and-models.md 4.4).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..core.registry import Registry

KIB = 1024
MIB = 1024 * KIB
# SGLang's custom all-reduce cap on CUDA (_MAX_CAR_SIZE = 8192 * 1024): messages strictly below it.
CUSTOM_MAX_MIB = 8.0
# NCCL's bus bandwidth curve, fitted once (validation/allreduce_fit.py) with the 10 us latency.
NCCL_HALF_PEAK_MIB = 12.93
NCCL_EXPONENT = 0.6276


@dataclass(frozen=True)
class AllReduceParams:
    """One TP group's all-reduce inputs. Units: bytes/s, seconds, bytes."""

    peak_Bps: float  # large-message bus bandwidth (nccl-tests busbw)
    latency_s: float  # fixed cost of one NCCL (or flat) all-reduce
    half_peak_bytes: float = NCCL_HALF_PEAK_MIB * MIB
    exponent: float = NCCL_EXPONENT
    custom_max_bytes: float = CUSTOM_MAX_MIB * MIB  # 0: no custom all-reduce
    fabric: str = "nvlink"


@dataclass(frozen=True)
class Kernel:
    """One all-reduce implementation. ``latency_s`` None: the group's ``latency_s``; ``curve``: NCCL's
    size-dependent bus bandwidth instead of a fixed share of the peak; ``custom``: bounded by the
    custom all-reduce cap."""

    latency_s: float | None
    efficiency: float
    curve: bool = False
    custom: bool = False

    def busbw(self, p: AllReduceParams, nbytes: float) -> float:
        """Bus bandwidth (B/s) this kernel reaches on a message of ``nbytes``."""
        if not self.curve:
            return self.efficiency * p.peak_Bps
        return self.efficiency * p.peak_Bps / (1.0 + (p.half_peak_bytes / nbytes) ** p.exponent)

    def time(self, p: AllReduceParams, nbytes: float, ranks: int) -> float:
        """Seconds of one all-reduce of ``nbytes`` over ``ranks`` ranks."""
        latency = p.latency_s if self.latency_s is None else self.latency_s
        if nbytes <= 0:
            return latency
        return latency + 2.0 * (ranks - 1) / ranks * nbytes / self.busbw(p, nbytes)


KERNELS: Registry[Kernel] = Registry("all-reduce kernel", "hardware.gpu")
# Custom kernels on H100 x 8 (vLLM PR #24111, bf16, 0.5-4 MiB; its ca_1stage / ca_2stage columns):
# one stage 13 / 20 / 31 / 56 us, two stages 25 / 26 / 28 / 46 us; minimax fits of latency +
# f S / (efficiency x 480 GB/s): 7.2 us and 0.311 (within 2.6%), 19.9 us and 0.705 (within 9.7%).
KERNELS.add("custom_1stage", Kernel(7.2e-6, 0.311, custom=True))
KERNELS.add("custom_2stage", Kernel(19.9e-6, 0.705, custom=True))
KERNELS.add("nccl", Kernel(None, 1.0, curve=True))
KERNELS.add("flat", Kernel(None, 1.0))


@dataclass(frozen=True)
class PathRule:
    """Messages strictly below ``below_bytes`` (and below the custom cap, for a custom kernel) on a
    group of one of ``ranks`` sizes (empty: any) run ``kernel``."""

    kernel: str
    ranks: frozenset[int]
    below_bytes: float = math.inf

    def applies(self, p: AllReduceParams, nbytes: float, ranks: int) -> bool:
        if self.ranks and ranks not in self.ranks:
            return False
        limit = min(self.below_bytes, p.custom_max_bytes) if KERNELS.get(self.kernel).custom else self.below_bytes
        return nbytes < limit


def _sizes(*n: int) -> frozenset[int]:
    return frozenset(n)


FABRICS: Registry[tuple[PathRule, ...]] = Registry("all-reduce fabric", "hardware.gpu")
# NVLink / NVSwitch: SGLang's dispatch (custom_all_reduce.py should_custom_ar; sgl-kernel
# custom_all_reduce.cuh: one stage at 2 ranks, below 512 KiB at 4, below 256 KiB at 6 and 8).
FABRICS.add(
    "nvlink",
    (
        PathRule("custom_1stage", _sizes(2)),
        PathRule("custom_1stage", _sizes(4), 512 * KIB),
        PathRule("custom_1stage", _sizes(6, 8), 256 * KIB),
        PathRule("custom_2stage", _sizes(4, 6, 8)),
        PathRule("nccl", _sizes()),
    ),
)
# PCIe cards (no NVLink; SGLang's custom all-reduce needs full NVLink above 2 ranks) and MI300X's
# xGMI (SGLang's ROCm kernels, not measured here): the peak at every size, as before.
FABRICS.add("pcie", (PathRule("flat", _sizes()),))
FABRICS.add("xgmi", (PathRule("flat", _sizes()),))


def allreduce_kernel(p: AllReduceParams, nbytes: float, ranks: int) -> str:
    """Name of the kernel SGLang runs for one all-reduce of ``nbytes`` over ``ranks`` ranks."""
    for rule in FABRICS.get(p.fabric):
        if rule.applies(p, nbytes, ranks):
            return rule.kernel
    raise ValueError(f"all-reduce fabric {p.fabric!r} has no rule for {nbytes} B over {ranks} ranks")


def allreduce_time(p: AllReduceParams, nbytes: float, ranks: int) -> float:
    """Seconds of one all-reduce of ``nbytes`` over ``ranks`` ranks (0 for one rank)."""
    if ranks <= 1:
        return 0.0
    return KERNELS.get(allreduce_kernel(p, nbytes, ranks)).time(p, nbytes, ranks)
