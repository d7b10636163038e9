"""Shared CLI helpers: user errors become one line on stderr and exit code 2; progress as a bar on a
terminal and as plain periodic lines elsewhere (a log file, CI, a pipe)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import typer


def user_error_types() -> tuple[type[Exception], ...]:
    """The exceptions that are a user's mistake. Imported when an error is handled, not when the CLI
    loads: ``--help`` must not pay for the scenario schema (pydantic) or the hardware tables."""
    from ..core.errors import ConfigError
    from ..hardware.calibration import CalibrationError
    from ..output.write import OutputError
    from ..scenario import ScenarioError
    from ..workloads.errors import WorkloadError

    return (ScenarioError, ConfigError, WorkloadError, CalibrationError, OutputError, UserError)


class UserError(ValueError):
    """A mistake in the user's input found by the CLI itself (bad flag value, missing folder)."""


@contextmanager
def user_errors(source: str = "") -> Iterator[None]:
    """Turn a user's mistake into ``error: <file>: <field>: <expected>`` and exit code 2."""
    try:
        yield
    except Exception as e:
        if not isinstance(e, user_error_types()):
            raise
        from ..core.errors import ConfigError

        msg = str(e)
        if isinstance(e, ConfigError) and source:
            msg = f"{source}: {msg}"
        typer.echo(f"error: {msg}", err=True)
        raise typer.Exit(2) from None


@contextmanager
def output_errors(path) -> Iterator[None]:
    """A write that fails after the checks (disk full, folder removed meanwhile, a user's file where
    hicache-sim now writes one): one line, exit 2."""
    from ..output.write import OutputError

    try:
        yield
    except OutputError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    except OSError as e:
        reason = (e.strerror or type(e).__name__).lower()
        typer.echo(f"error: --out {path}: cannot write ({reason}); nothing was written", err=True)
        raise typer.Exit(2) from None


def is_terminal() -> bool:
    return sys.stderr.isatty()


PLAIN_PROGRESS_INTERVAL_S = 10.0


def progress_bar(total: int, description: str, *, unit: str = "", interval_s: float | None = None):
    """A rich progress bar on stderr when it is a terminal; otherwise plain lines on stderr, at most one
    per ``interval_s`` (default 10 s) and none for work that ends sooner, with the same interface."""
    if not is_terminal():
        return _PlainProgress(total, description, unit, PLAIN_PROGRESS_INTERVAL_S if interval_s is None else interval_s)
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    prog = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    return _RichProgress(prog, total, description)


class _PlainProgress:
    """``description: done/total unit (pct%), elapsed, ~left`` every ``interval_s`` seconds."""

    def __init__(self, total: int, description: str, unit: str, interval_s: float) -> None:
        self.total = total
        self.description = description
        self.unit = f" {unit}" if unit else ""
        self.interval_s = interval_s
        self.done = 0
        self.start = self.last = 0.0

    def __enter__(self):
        self.start = self.last = time.monotonic()
        return self

    def __exit__(self, *exc):
        return False

    def advance(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if now - self.last < self.interval_s or self.done >= self.total:
            return
        self.last = now
        elapsed = now - self.start
        left = elapsed * (self.total - self.done) / self.done if self.done else 0.0
        pct = 100.0 * self.done / self.total if self.total else 100.0
        typer.echo(
            f"{self.description}: {self.done}/{self.total}{self.unit} ({pct:.0f}%), {elapsed:.0f} s "
            f"elapsed, ~{left:.0f} s left",
            err=True,
        )


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
