"""``hicache-sim``: run | sweep | plot | validate | replay | calibrate | validate-model.

One module per verb; each registers itself on ``app``. Only this layer exits.
"""

from __future__ import annotations

import typer

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
    calibrate,
    plot,
    replay,
    run,
    sweep,
    validate,
    validate_model,
)


def main() -> None:
    """Console-script entry point."""
    app()
