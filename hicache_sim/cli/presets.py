"""``hicache-sim presets [KIND]``: the presets a scenario can name, one line each, with their figures."""

from __future__ import annotations

from collections.abc import Callable

import typer

from . import app


def _nodes() -> list[str]:
    from ..hardware.nodes import NODES, aliases

    return [NODES.get(n).describe() + (f"; also {', '.join(aliases(n))}" if aliases(n) else "") for n in NODES.names()]


def _gpus() -> list[str]:
    from ..hardware.presets import GPUS

    return [
        f"{g.name}: {g.memory_mib} MiB ({g.memory_source}), {g.bf16_tflops:g} bf16 TFLOP/s, {g.hbm_gbps:g} GB/s HBM"
        for g in (GPUS.get(n) for n in GPUS.names())
    ]


def _models() -> list[str]:
    from ..hardware.presets import MODELS

    return [
        f"{m.name}: {m.num_layers} layers, {m.attention}, {m.params_b:g}B parameters ({m.weights_dtype})"
        for m in (MODELS.get(n) for n in MODELS.names())
    ]


#: What ``presets`` lists, by kind, in the order printed without a kind.
PRESET_KINDS: dict[str, Callable[[], list[str]]] = {"nodes": _nodes, "gpus": _gpus, "models": _models}


@app.command()
def presets(
    kind: str | None = typer.Argument(None, metavar="KIND", help="nodes, gpus or models (default: all)"),
) -> None:
    """List the presets: nodes (--node-memory, hardware.host_memory_gib: installed host memory, GPUs and
    the vendor page), GPUs (hardware.gpu) and models (model.preset)."""
    from .common import UserError, user_errors

    with user_errors():
        if kind is not None and kind not in PRESET_KINDS:
            raise UserError(f"presets {kind}: expected one of {', '.join(PRESET_KINDS)}")
    for name in [kind] if kind else list(PRESET_KINDS):
        if kind is None:
            typer.echo(f"{name}:")
        for line in PRESET_KINDS[name]():
            typer.echo(f"  {line}" if kind is None else line)
