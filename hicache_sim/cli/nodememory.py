"""``--node-memory`` (validate, from-sglang, advise): the host memory of one node, as GiB, a node preset or
``local``. Not a verb: the option's help and reader, shared."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..hardware.nodes import NodeMemory

NODE_MEMORY_HELP = (
    "host memory of one node available to SGLang (sets hardware.host_memory_gib), checked against the host "
    "pools of every rank on the node: GiB; a node preset (p5.48xlarge, a3-highgpu-8g, nd-h100-v5, dgx-h100: "
    "its installed memory, an upper bound; hicache-sim presets nodes); or local: what SGLang would read on "
    "this machine (MemAvailable within the cgroup's headroom)"
)


def node_memory_option(value: str | None) -> NodeMemory | None:
    """``--node-memory`` read (validate, from-sglang, advise): GiB, a node preset or ``local``; a bad value
    is a UserError naming the flag."""
    if value is None:
        return None
    from ..hardware.local_memory import LocalMemoryError
    from ..hardware.nodes import parse_node_memory
    from .common import UserError

    try:
        return parse_node_memory(value, allow_local=True)
    except (ValueError, LocalMemoryError) as e:
        raise UserError(f"--node-memory {value}: {e}") from None
