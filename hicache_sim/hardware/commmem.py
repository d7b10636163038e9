"""GPU memory in use on one rank before SGLang's first free-memory reading: the CUDA context, and at
TP > 1 what SGLang's parallel initialisation leaves allocated (issue 29 item 7).

SGLang sizes the KV pool from free memory read after the parallel groups are up and before the
weights load (``hardware/memory.py``), so whatever the groups keep allocated shrinks the pool by
``mem_fraction_static`` times its size. What they keep (sglang 0.5.23, ``distributed/bootstrap.py``,
``parallel_state.py``) is, for the TP group: SGLang's PyNccl communicator, created and warmed up with a
one-element all-reduce (torch's NCCL process group is created lazily, at its first collective, unless
``--pre-warm-nccl``, on by default on AMD only, runs one first); the custom all-reduce workspace (the legacy
kernel: an 8 MiB IPC buffer, 8 MiB of metadata and an 8 MiB pointer table; 0.5.23's v2: a
symmetric-memory slab of ``2 x tp`` push slots of up to 128 KiB plus a pull buffer of at most 16 MiB,
and the same pointer table). SGLang sets ``NCCL_NVLS_ENABLE=0`` and ``NCCL_CUMEM_ENABLE=0`` unless asked
(``entrypoints/engine.py``), so no NVLink-SHARP buffers: an NCCL communicator holds, per channel and
connected peer, the receive buffers of its three protocols (``SIMPLE`` 4 MiB, ``LL128`` 4.69 MiB, ``LL``
0.5 MiB: 9.2 MiB), on as many channels as NCCL's topology search gives the machine (tens on NVSwitch,
a few on PCIe; on PCIe without peer access the buffers sit in host memory). A ring or chain connects
each rank to one previous and one next rank per channel whatever the number of ranks, so the term
depends on the interconnect, not on ``tp``. The channel count is the machine's and no code gives it
without the topology, so the size comes from what public start-up logs print: SGLang logs the
difference of free memory around its parallel initialisation as ``Init torch distributed ends. mem
usage=X GB`` (GiB). ``READINGS`` holds every such reading found, with its address; the default per
interconnect (``GPUPreset.allreduce_fabric``) is the median of the counted ones, an interconnect with
none counts nothing. ``hardware.cuda_context_mib`` given in a scenario replaces the whole figure with
a measured one (a GPU's capacity less its log's ``Load weight begin. avail mem``).

The CUDA context a TP-1 run also has is ``CUDA_CONTEXT_MIB`` (public TP-1 logs on 80 GB H100s print
``Load weight begin. avail mem=78.43`` to ``78.81 GB`` of 79.65: 0.84-1.22 GiB in use). The readings
below agree: their in-use less their distributed part is 0.73-1.31 GiB.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ..core.registry import Registry

CUDA_CONTEXT_MIB = 1024.0


@dataclass(frozen=True)
class DistReading:
    """One public start-up log's per-rank memory around SGLang's parallel initialisation (GiB, as it
    prints "GB"). ``distributed_gib``: the largest "Init torch distributed ends. mem usage=" over the
    ranks printed (the pool follows the rank with the least free memory); ``free_gib``: the smallest
    "Load weight begin. avail mem=" (None when the excerpt does not show it); ``capacity_mib``: the
    GPU's reported memory when the GPU is named. ``counted``: in the default's median (single node,
    the GPU named, the plain TP group); ``note`` says why not when it is not."""

    source: str
    gpu: str
    fabric: str
    tp: int
    nnodes: int
    when: str
    distributed_gib: float
    free_gib: float | None = None
    capacity_mib: int | None = None
    counted: bool = True
    note: str = ""

    @property
    def in_use_gib(self) -> float | None:
        """What the log shows in use before the weights: capacity less the free reading."""
        if self.free_gib is None or self.capacity_mib is None:
            return None
        return self.capacity_mib / 1024 - self.free_gib

    @property
    def context_gib(self) -> float | None:
        """The rest: the CUDA context and whatever else the process holds before the groups."""
        return None if self.in_use_gib is None else self.in_use_gib - self.distributed_gib


READINGS: tuple[DistReading, ...] = (
    DistReading(
        "https://github.com/sgl-project/sglang/pull/11716",
        "8 x H200",
        "nvlink",
        8,
        1,
        "2025-10 (SGLang main)",
        2.01,
        137.29,
        143771,
        note="TP1-6 2.01, TP0 1.96, TP7 1.77",
    ),
    DistReading(
        "https://github.com/sgl-project/sglang/pull/5390",
        "8 x B200",
        "nvlink",
        8,
        1,
        "2025-05",
        2.50,
        175.25,
        183359,
        note="DP attention over the 8 ranks (its attention-TP groups have one rank: no communicator of "
        "their own); TP0 2.38, TP7 1.88",
    ),
    DistReading(
        "a blog post held in the code index (file 45518106035; the index gives no address), SGLang v0.5.2rc2, Grok-2",
        "8 x H100 80GB",
        "nvlink",
        8,
        1,
        "2025-09",
        1.25,
        77.43,
        81559,
        note="TP0's lines only",
    ),
    DistReading(
        "https://github.com/sgl-project/sglang/issues/40558",
        "4 x sm_120 96 GB (RTX PRO 6000 Blackwell class), nccl 2.29.7",
        "pcie",
        4,
        1,
        "2026-09",
        0.39,
        94.01,
    ),
    DistReading(
        "https://github.com/sgl-project/sglang/issues/16920",
        "2 x RTX 4090, nccl 2.28.3",
        "pcie",
        2,
        1,
        "2026-01",
        0.26,
    ),
    DistReading(
        "https://github.com/sgl-project/sglang/issues/4127 (the same machine's full log: "
        "https://github.com/didier-durand/llms-in-clouds/blob/main/docs/sglang.md)",
        "4 x L4 (AWS g6.12xlarge), nccl 2.21.5, SGLang 0.4.3.post3",
        "pcie",
        4,
        1,
        "2025-03",
        0.13,
        21.63,
        23034,
        note="custom all-reduce off (more than two PCIe-only GPUs)",
    ),
    DistReading(
        "https://github.com/kvcache-ai/ktransformers/issues/1661",
        "2 GPUs of 24 GB (not named), nccl 2.27.7",
        "pcie",
        2,
        1,
        "2025-12",
        0.23,
        22.85,
        counted=False,
        note="GPU not named",
    ),
    DistReading(
        "https://github.com/sgl-project/sglang/issues/10407",
        "4 GPUs of 96 GB (not named), SGLang 0.5.2",
        "nvlink",
        4,
        1,
        "2025-09",
        1.13,
        93.46,
        counted=False,
        note="GPU not named (a 96 GB card: H20 or RTX PRO 6000 by its free memory)",
    ),
    DistReading(
        "https://github.com/sgl-project/sglang/issues/6017",
        "2 nodes x 8 H20 (141 GB)",
        "nvlink",
        16,
        2,
        "2025-05",
        1.90,
        137.46,
        143771,
        counted=False,
        note="the TP group spans two nodes; DP attention and DeepEP",
    ),
    DistReading(
        "https://github.com/sgl-project/sglang/pull/3888",
        "2 nodes x 8 GPUs of 80 GB (not named)",
        "nvlink",
        16,
        2,
        "2025-03",
        0.27,
        77.77,
        counted=False,
        note="the TP group spans two nodes (custom all-reduce off); GPU not named",
    ),
)


@dataclass(frozen=True)
class Interconnect:
    """How one GPU's ranks talk, as far as what their communicators hold goes."""

    name: str
    transport: str


#: ``GPUPreset.allreduce_fabric`` -> what its communicators hold; looked up, never branched on.
INTERCONNECTS: Registry[Interconnect] = Registry("interconnect", "hardware.gpu")
for _i in (
    Interconnect("nvlink", "NCCL P2P over NVLink / NVSwitch: tens of channels, device buffers"),
    Interconnect("pcie", "NCCL P2P over PCIe (or SHM through host memory): a few channels"),
    Interconnect("xgmi", "RCCL over Infinity Fabric: no public reading, nothing counted"),
):
    INTERCONNECTS.add(_i.name, _i)


def communicator_mib(fabric: str, leave_out: tuple[str, ...] = ()) -> float:
    """Per-rank memory SGLang's parallel groups hold at TP > 1 on ``fabric``: the median of the counted
    readings (MiB; 0 when there is none). ``leave_out`` drops readings by source, to hold one out."""
    INTERCONNECTS.get(fabric)
    got = [r.distributed_gib for r in READINGS if r.counted and r.fabric == fabric and r.source not in leave_out]
    return statistics.median(got) * 1024 if got else 0.0


def in_use_before_weights_mib(fabric: str, tp: int, leave_out: tuple[str, ...] = ()) -> tuple[float, str]:
    """The modelled memory in use before the weights (MiB) and a few words on where it comes from: the
    CUDA context, plus the communicators when ``tp > 1``."""
    if tp <= 1:
        return CUDA_CONTEXT_MIB, "CUDA context"
    comm = communicator_mib(fabric, leave_out)
    return CUDA_CONTEXT_MIB + comm, f"CUDA context + {comm / 1024:.2f} GiB of {fabric} communicators"
