"""Node presets: the host memory of the machines SGLang is commonly run on, from their vendors' pages.

The pre-flight (``scenario/preflight.py``) compares what every rank of a node pins with the memory
SGLang reads on that node: ``psutil.virtual_memory().available`` (``MemAvailable``), lowered to the
process's cgroup headroom (``mem_cache/host_memory.py``, ``available_host_memory_bytes``). An operator
rarely knows that figure in advance; they know their instance type or system. A preset gives the
memory *installed* in it, which is an upper bound of what SGLang reads: the kernel, the page tables,
the other processes on the node and SGLang's own processes (tokenizer, scheduler, detokenizer, one
per rank) take their share first. No vendor publishes that share, so none is deducted here: a check
against a preset is optimistic by it. Run ``--node-memory local`` on the node itself for the figure
SGLang would read there (:mod:`.local_memory`).

Units: each row keeps the figure as its vendor prints it. Host memory "GB" / "TB" in these tables are
binary (``2**30`` / ``2**40`` bytes): Azure printed the same ND H100 v5 figure, 1900, as "Memory: GiB"
(2023 page) and "Memory (GB)" (2024 page); NVIDIA's DGX H100 "2 TB" is 32 x 64 GB DIMMs (its MLPerf
system description), and DRAM is sold in binary units. Read as decimal, each figure would be 7 % (GB)
or 10 % (TB) smaller.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass

from ..core.errors import ConfigError
from ..core.registry import Registry

#: Bytes per unit of a vendor's host memory figure (binary: see the module docstring).
MEMORY_UNITS = {"GiB": 1 << 30, "GB": 1 << 30, "TiB": 1 << 40, "TB": 1 << 40}

#: The most host memory one node can address, GiB: 4 PiB, what 52-bit physical addresses reach (x86-64
#: with 5-level paging, Arm's LPA). A larger figure is a typo, and past 8e299 GiB its bytes overflow a float.
MAX_NODE_GIB = float(1 << 22)
#: A number with a unit (``2TB``, ``512 GiB``): the option takes GiB as a bare number.
_WITH_UNIT = re.compile(r"[0-9.]+(e[+-]?[0-9]+)?\s*[kmgtp]i?b", flags=re.I)


@dataclass(frozen=True)
class NodePreset:
    """One machine: its installed host memory as the vendor prints it (``memory`` ``unit``), its GPUs
    (``gpus`` of the GPU preset ``gpu``), the vendor page that gives them (``source``) and, when that
    page could not be read here, the public document the figure was checked against (``checked``)."""

    name: str
    memory: float
    unit: str
    gpus: int
    gpu: str
    source: str
    checked: str = ""

    @property
    def memory_bytes(self) -> int:
        return int(self.memory * MEMORY_UNITS[self.unit])

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / (1 << 30)

    def describe(self) -> str:
        """One line for ``hicache-sim presets nodes`` and the CLI's note."""
        return f"{self.name}: {self.memory:g} {self.unit} installed, {self.gpus} x {self.gpu} ({self.source})"


_AWS_P4 = "https://aws.amazon.com/ec2/instance-types/p4/"
_AWS_P5 = "https://aws.amazon.com/ec2/instance-types/p5/"
_AWS_BLOCKS = "https://aws.amazon.com/ec2/capacityblocks/pricing/ (p4d.24xlarge 1152 GiB, p5.48xlarge 2048 GiB)"
_AZURE = "https://learn.microsoft.com/azure/virtual-machines/sizes/gpu-accelerated/"
_MLPERF = "https://github.com/mlcommons/inference_results_"

NODES: Registry[NodePreset] = Registry("node preset", "hardware.host_memory_gib")
for _n in (
    # AWS: "Instance Memory" of the P4 and P5 pages (GiB / TiB).
    NodePreset("p4d.24xlarge", 1152, "GiB", 8, "a100-40g", _AWS_P4, _AWS_BLOCKS),
    NodePreset("p4de.24xlarge", 1152, "GiB", 8, "a100", _AWS_P4),
    NodePreset("p5.48xlarge", 2, "TiB", 8, "h100", _AWS_P5, _AWS_BLOCKS),
    NodePreset("p5e.48xlarge", 2, "TiB", 8, "h200", _AWS_P5, "AWS capacity-block table: 8 x H200, 2048 GiB"),
    NodePreset("p5en.48xlarge", 2, "TiB", 8, "h200", _AWS_P5, "dstackai/dstack#4110: AWS offers mem=2048GB"),
    # Google Cloud: the A3 (High) machine series "has 208 vCPUs, and 1,872 GB of memory".
    NodePreset(
        "a3-highgpu-8g", 1872, "GB", 8, "h100", "https://cloud.google.com/compute/docs/accelerator-optimized-machines"
    ),
    # Azure: the size tables of each series (MicrosoftDocs/azure-compute-docs).
    NodePreset("standard_nd96asr_v4", 900, "GiB", 8, "a100-40g", _AZURE + "ndasra100v4-series"),
    NodePreset("standard_nd96amsr_a100_v4", 1900, "GB", 8, "a100", _AZURE + "ndma100v4-series"),
    NodePreset("standard_nd96isr_h100_v5", 1900, "GiB", 8, "h100", _AZURE + "ndh100v5-series"),
    NodePreset("standard_nd96isr_h200_v5", 1850, "GB", 8, "h200", _AZURE + "nd-h200-v5-series"),
    # NVIDIA DGX: host_memory_capacity in NVIDIA's own MLPerf Inference system descriptions.
    NodePreset(
        "dgx-a100",
        2,
        "TB",
        8,
        "a100",
        _MLPERF + "v3.0/blob/main/closed/NVIDIA/systems/DGX-A100_A100-SXM-80GBx8_TRT.json",
    ),
    NodePreset(
        "dgx-h100",
        2,
        "TB",
        8,
        "h100",
        _MLPERF + "v4.1/blob/main/closed/NVIDIA/systems/DGX-H100_H100-SXM-80GBx8_TRT.json (32x 64GB DIMMs)",
    ),
):
    NODES.add(_n.name, _n)
# The series names operators say (Azure's "ND H100 v5") and the sizes without Azure's "Standard_" prefix.
_ALIASES = (
    ("nd-a100-v4", "standard_nd96asr_v4"),
    ("nd96asr_v4", "standard_nd96asr_v4"),
    ("ndm-a100-v4", "standard_nd96amsr_a100_v4"),
    ("nd96amsr_a100_v4", "standard_nd96amsr_a100_v4"),
    ("nd-h100-v5", "standard_nd96isr_h100_v5"),
    ("nd96isr_h100_v5", "standard_nd96isr_h100_v5"),
    ("nd-h200-v5", "standard_nd96isr_h200_v5"),
    ("nd96isr_h200_v5", "standard_nd96isr_h200_v5"),
)
for _alias, _name in _ALIASES:
    NODES.alias(_alias, _name)


def aliases(name: str) -> list[str]:
    """The other names a preset answers to."""
    return [alias for alias, target in _ALIASES if target == name]


def node_preset(name: str) -> NodePreset:
    """The preset ``name`` (any case, or an alias); ConfigError naming the close ones when unknown."""
    key = name.strip().lower()
    if key in NODES:
        return NODES.get(key)
    known = [*NODES.names(), *(alias for alias, _ in _ALIASES)]
    close = difflib.get_close_matches(key, known, n=4, cutoff=0.5)
    hint = f"close: {', '.join(close)}" if close else f"known: {', '.join(NODES.names())}"
    raise ConfigError(NODES.field, f"unknown node preset {name!r}; {hint} (hicache-sim presets nodes lists them)")


@dataclass(frozen=True)
class NodeMemory:
    """What a ``--node-memory`` value (or ``hardware.host_memory_gib``) resolves to: GiB, and where the
    figure comes from (a sentence, empty for a plain number)."""

    gib: float
    source: str = ""
    node: NodePreset | None = None

    def mismatches(self, gpu: str, gpus_on_node: int) -> list[str]:
        """Where the scenario's node differs from the preset's: another GPU, or more GPUs than it has."""
        n = self.node
        if n is None:
            return []
        out = []
        if gpu != n.gpu:
            out.append(f"node preset {n.name} has {n.gpu} GPUs, the scenario runs on {gpu}")
        if gpus_on_node > n.gpus:
            out.append(f"node preset {n.name} has {n.gpus} GPUs, the scenario puts {gpus_on_node} ranks on one node")
        return out


def parse_node_memory(value: object, *, allow_local: bool = False) -> NodeMemory:
    """GiB for a number, a node preset name (its installed memory) or, with ``allow_local``, ``local``
    (what SGLang would read on this machine). ValueError with what was expected otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"expected GiB > 0 or a node preset name, got {value!r}")
    if isinstance(value, int | float):
        gib = float(value)
    else:
        text = str(value).strip()
        try:
            gib = float(text)
        except ValueError:
            return _named(text, allow_local)
    if not (math.isfinite(gib) and 0 < gib <= MAX_NODE_GIB):
        raise ValueError(
            f"expected GiB > 0 (at most {MAX_NODE_GIB:.0f}: 4 PiB, what 52-bit physical addresses reach) or a "
            f"node preset name, got {value!r}"
        )
    return NodeMemory(gib)


def _named(text: str, allow_local: bool) -> NodeMemory:
    if text.lower() == "local":
        if not allow_local:
            raise ValueError(
                "'local' is read on the command line only (--node-memory local): a scenario file must give "
                "the same result on every machine; write the GiB or a node preset name"
            )
        from .local_memory import read_local_memory

        local = read_local_memory()
        if local.bytes <= 0:
            raise ValueError(f"{local.describe().removeprefix('local: ')}: no host memory available to SGLang here")
        return NodeMemory(local.bytes / (1 << 30), local.describe())
    if _WITH_UNIT.fullmatch(text):
        raise ValueError(f"expected GiB as a bare number (2048 for 2 TiB) or a node preset name, got {text!r}")
    try:
        node = node_preset(text)
    except ConfigError as e:
        raise ValueError(e.message) from None
    return NodeMemory(
        node.memory_gib,
        f"{node.name}: {node.memory:g} {node.unit} installed ({node.source}); SGLang reads what is available, "
        "less the OS's and other processes' share, so the check is optimistic by that",
        node,
    )
