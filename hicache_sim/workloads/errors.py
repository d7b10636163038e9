"""Workload input errors: always name the file and the line (or field)."""

from __future__ import annotations


class WorkloadError(ValueError):
    """Bad workload input. ``str()`` is one line: ``file:line: what was expected``.

    ``args`` are the three parts, so that ``type(e)(*e.args)`` (SimPy re-raising an error out of a
    process, pickling) rebuilds the same error."""

    def __init__(self, path: str, line: int | None, message: str) -> None:
        super().__init__(path, line, message)
        self.path = path
        self.line = line
        self.message = message

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line is not None else str(self.path)
        return f"{where}: {self.message}"
