"""Shared CLI helpers: user errors become one line on stderr and exit code 2; progress bars only on
a terminal."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

import typer

from ..calibration_file import CalibrationError
from ..core.errors import ConfigError
from ..scenario import ScenarioError
from ..workloads.errors import WorkloadError

USER_ERRORS: tuple[type[Exception], ...] = (ScenarioError, ConfigError, WorkloadError, CalibrationError)


class UserError(ValueError):
    """A mistake in the user's input found by the CLI itself (bad flag value, missing folder)."""


@contextmanager
def user_errors(source: str = "") -> Iterator[None]:
    """Turn a user's mistake into ``error: <file>: <field>: <expected>`` and exit code 2."""
    try:
        yield
    except (*USER_ERRORS, UserError) as e:
        msg = str(e)
        if isinstance(e, ConfigError) and source:
            msg = f"{source}: {msg}"
        typer.echo(f"error: {msg}", err=True)
        raise typer.Exit(2) from None


def is_terminal() -> bool:
    return sys.stderr.isatty()


def progress_bar(total: int, description: str):
    """A rich progress bar on stderr when it is a terminal, else a no-op with the same interface."""
    if not is_terminal():
        return _NoProgress()
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    prog = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                    console=Console(stderr=True), transient=True)
    return _RichProgress(prog, total, description)


class _NoProgress:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def advance(self, n: int = 1) -> None:
        pass


class _RichProgress:
    def __init__(self, prog, total: int, description: str) -> None:
        self.prog = prog
        self.total = total
        self.description = description
        self.task = None

    def __enter__(self):
        self.prog.__enter__()
        self.task = self.prog.add_task(self.description, total=self.total)
        return self

    def __exit__(self, *exc):
        return self.prog.__exit__(*exc)

    def advance(self, n: int = 1) -> None:
        self.prog.advance(self.task, n)
