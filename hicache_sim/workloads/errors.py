"""Workload input errors: always name the file and the line (or field)."""

from __future__ import annotations


class WorkloadError(ValueError):
    """Bad workload input. ``str()`` is one line: ``file:line: what was expected``."""

    def __init__(self, path: str, line: int | None, message: str) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {message}")
        self.path = path
        self.line = line
