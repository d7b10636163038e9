"""``hicache-sim``: run | sweep | advise | plot | validate | replay | calibrate | validate-model |
from-sglang | sglang-args | drift | trace | presets.

One module per verb; each registers itself on ``app``. Only this layer exits.
"""

from __future__ import annotations

import typer
from typer.core import TyperArgument, TyperOption


def _plain_metavar(param, ctx) -> str | None:
    """Help shows a flag's value as click does (N, X, PATH, TEXT) or as its metavar, never typer's type
    tags (``<str>``, ``<int range>``); an argument's name is its metavar already."""
    if isinstance(param, TyperArgument):
        return None
    if param.metavar is not None:
        return param.metavar
    if param.is_flag or param.count:
        return None
    tag = param.display_type(ctx)  # typer's own: <int>, <float range>, <path>, <str>, ...
    kind = tag.strip("<>").split()[0]
    return {"int": "N", "float": "X", "path": "PATH", "file": "PATH", "directory": "DIR"}.get(kind, "TEXT")


TyperArgument.display_type_rich = _plain_metavar
TyperOption.display_type_rich = _plain_metavar

app = typer.Typer(
    name="hicache-sim",
    help="Simulate SGLang's hierarchical KV cache (GPU, host, storage over PCIe) without GPUs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: no type tags such as <bool> on flags
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        from .. import __version__

        typer.echo(f"hicache-sim {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="print the version and exit"
    ),
) -> None:
    """Simulate SGLang's hierarchical KV cache (GPU, host, storage over PCIe) without GPUs."""


# Verb modules register their commands on import (one module per verb).
from . import (  # noqa: E402,F401
    advise,
    calibrate,
    drift,
    plot,
    presets,
    replay,
    run,
    sglang,
    sweep,
    trace,
    validate,
    validate_model,
)


def _sigterm_as_ctrl_c(signum: int, frame: object) -> None:
    """A job scheduler's (or ``kill``'s) SIGTERM stops a run as Ctrl-C does: finished points kept, the
    workers stopped, the resume line printed. Re-sent as SIGINT to this process, so the places that hold
    Ctrl-C back for a moment (a point being saved) hold this too."""
    import os
    import signal

    os.kill(os.getpid(), signal.SIGINT)


def main() -> None:
    """Console-script entry point."""
    import signal

    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _sigterm_as_ctrl_c)
    app()
