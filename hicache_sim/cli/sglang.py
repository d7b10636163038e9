"""``hicache-sim from-sglang`` (an SGLang launch command -> a scenario) and ``hicache-sim sglang-args``
(a scenario -> the launch flags that realise it). Imports what they use when they run."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import typer

from . import app
from .common import UserError, output_errors, user_errors
from .nodememory import NODE_MEMORY_HELP, node_memory_option

DEFAULT_GPU = "h200"  # the GPU from-sglang assumes when neither --gpu nor a node preset names one


def _write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder, renamed into place."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _check_out(out: Path) -> None:
    """A new file in an existing folder, or a scenario from-sglang wrote before (it is replaced)."""
    from ..sglang.convert import HEADER

    if out.is_dir():
        raise UserError(f"--out {out}: is a folder; expected a scenario file name")
    if not out.parent.is_dir():
        raise UserError(f"--out {out}: folder {out.parent} does not exist")
    if out.exists():
        try:
            with out.open("rb") as f:
                first = f.read(len(HEADER))
        except OSError as e:
            raise UserError(f"--out {out}: cannot read it ({(e.strerror or type(e).__name__).lower()})") from None
        if first != HEADER.encode():
            raise UserError(f"--out {out}: exists and was not written by from-sglang; name a new file")


@app.command(
    "from-sglang",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def from_sglang(
    command: list[str] = typer.Argument(
        ...,
        metavar="COMMAND",
        help="the SGLang launch command after --: python -m sglang.launch_server --model-path ... "
        "(or one quoted string)",
    ),
    out: Path | None = typer.Option(None, "--out", metavar="FILE", help="scenario YAML to write (default: stdout)"),
    gpu: str | None = typer.Option(
        None,
        "--gpu",
        metavar="NAME",
        help="GPU preset the server runs on (default: a --node-memory preset's GPU, else h200)",
    ),
    preset: str | None = typer.Option(
        None, "--preset", metavar="NAME", help="model preset, for a --model-path not known by name"
    ),
    name: str = typer.Option("from_sglang", "--name", metavar="NAME", help="scenario name"),
    mode: str = typer.Option("timed", "--mode", metavar="MODE", help="timed or instant"),
    node_memory: str | None = typer.Option(None, "--node-memory", metavar="GIB|NODE|local", help=NODE_MEMORY_HELP),
) -> None:
    """Write the scenario an SGLang launch command runs: HiCache flags, page size, chunked prefill,
    batch limits, memory fraction, tp/pp, eviction and schedule policies, and the model. Flags SGLang
    takes that the simulator does not model are listed in one warning; a flag SGLang does not know
    is an error. Flags not given take SGLang's defaults."""
    from ..scenario.resolve import sglang_ranks_per_host
    from ..sglang import from_command, scenario_yaml

    with user_errors("from-sglang"):
        if mode not in ("timed", "instant"):
            raise UserError(f"--mode {mode}: expected timed or instant")
        if out is not None:
            _check_out(out)
        given = node_memory_option(node_memory)  # a preset stays a name in the scenario; local is read now
        node_value = None if given is None else given.node.name if given.node else given.gib
        if gpu is None:  # the node preset names its GPUs; without one, the default
            gpu = given.node.gpu if given is not None and given.node else DEFAULT_GPU
        conv = from_command(command, gpu=gpu, preset=preset, name=name, mode=mode, node_memory_gib=node_value)
        text = scenario_yaml(conv, command)
    hw = conv.scenario.hardware
    mismatches = [] if given is None else given.mismatches(hw.gpu, sglang_ranks_per_host(hw) * hw.dp)
    if given is not None and given.source:
        typer.echo(f"note: node memory {given.source}", err=True)
    for fact in conv.facts:
        typer.echo(f"note: {fact}", err=True)
    for note in [*conv.notes, *mismatches]:
        typer.echo(f"warning: {note}", err=True)
    if conv.env:
        typer.echo(f"warning: environment not modelled: {' '.join(conv.env)}", err=True)
    if conv.unmodelled:
        typer.echo(f"warning: not modelled (no effect on the simulation): {' '.join(conv.unmodelled)}", err=True)
    if out is None:
        typer.echo(text, nl=False)
        return
    with output_errors(out):
        _write_atomic(out, text)
    typer.echo(f"wrote {out}")


@app.command("sglang-args")
def sglang_args(
    scenario: str = typer.Argument(..., metavar="SCENARIO", help="scenario YAML or builtin:NAME"),
    set_: list[str] = typer.Option([], "--set", metavar="KEY=VALUE", help="override a key (repeatable)"),
) -> None:
    """Print the SGLang launch command that realises SCENARIO (flags at SGLang's default are left
    out); what no flag can say is a warning. A setting SGLang has no flag value for (eviction policy
    fifo, mru or filo) prints no command: one error line naming it, exit code 2."""
    from ..scenario import load_scenario
    from ..sglang import SglangArgsError, to_command
    from ..sglang.convert import command_line

    with user_errors(scenario):
        sc = load_scenario(scenario, set_)
        try:
            tokens, notes = to_command(sc)
        except SglangArgsError as e:
            raise UserError(f"{scenario}: {e}") from None
    for note in notes:
        typer.echo(f"warning: {note}", err=True)
    typer.echo(command_line(tokens))
