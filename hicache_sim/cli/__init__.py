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
)

# Verb modules register their commands on import (one module per verb).
from . import run as _run  # noqa: E402,F401
from . import validate as _validate  # noqa: E402,F401

for _optional in ("sweep", "plot", "replay", "calibrate", "validate_model"):
    try:
        __import__(f"{__name__}.{_optional}")
    except ModuleNotFoundError as _e:  # a verb whose module is not written yet
        if _e.name != f"{__name__}.{_optional}":
            raise


def main() -> None:
    """Console-script entry point."""
    app()
