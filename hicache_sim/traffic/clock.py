"""A request log's timestamps as seconds: which unit a bare number is in.

Loggers write Unix time in seconds, milliseconds, microseconds or nanoseconds; read as seconds, the
last three make arrival rates 10^3, 10^6 or 10^9 times too slow. An ISO-8601 string says its own time.
A bare number is read by this rule (``TIME_UNITS``; ``--time-unit auto``):

- ``|v| < 1e9``: a relative clock (seconds since the log began, say), read in seconds. No magnitude
  tells relative seconds from relative milliseconds: the report says so, and ``--time-unit`` names
  the unit.
- otherwise Unix time: the unit ``u`` among s, ms, us, ns for which ``v / u`` lies in ``[1e9, 1e10)``
  seconds since 1970 (2001-09-09 to 2286-11-20). The four windows do not overlap, so each value says
  its own unit. A value in no window (``5e10``, ``3e16``) is no clock's: its line is skipped, naming
  it (``--strict``: an error).

One log holds one kind of time: a line whose time is relative where the first line's is Unix time (or
the other way round) is skipped, naming the first. ``--time-unit s|ms|us|ns`` reads every bare number
in that unit, relative or not; a time past 2286 is still no clock's.
"""

from __future__ import annotations

import math
from datetime import datetime

#: Seconds per unit, for ``--time-unit`` (``auto``: the rule above).
TIME_UNITS: dict[str, float] = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
EPOCH_WINDOW = (1e9, 1e10)  # seconds since 1970: 2001-09-09 .. 2286-11-20


def _iso_seconds(v: str) -> float | None:
    try:
        return datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class Clock:
    """Reads one log's timestamps (``seconds``), remembering the first line's kind of time and how
    many values each unit read (``notes``)."""

    def __init__(self, unit: str = "auto") -> None:
        if unit != "auto" and unit not in TIME_UNITS:
            raise ValueError(f"--time-unit {unit!r}: expected one of auto, {', '.join(TIME_UNITS)}")
        self.unit = unit
        self.first: tuple[int, bool] | None = None  # (line, relative?) of the first time read
        self.read_in: dict[str, int] = {}  # "ms since 1970" -> values read so

    def _classify(self, v: float) -> tuple[float, str, bool] | str:
        """``(seconds, how it was read, relative?)`` for a bare number, or why no clock gives it."""
        if self.unit != "auto":
            s = v * TIME_UNITS[self.unit]
            if abs(s) >= EPOCH_WINDOW[1]:
                return f"timestamp {v:g} in {self.unit} is {s:.3g} s: past 2286, no clock gives it"
            return s, f"{self.unit} (--time-unit)", abs(s) < EPOCH_WINDOW[0]
        if abs(v) < EPOCH_WINDOW[0]:
            return v, "relative seconds", True
        for name, per in TIME_UNITS.items():
            if EPOCH_WINDOW[0] <= v * per < EPOCH_WINDOW[1]:
                return v * per, f"{name} since 1970", False
        return (
            f"timestamp {v:g} is no clock's: not relative seconds (below 1e9) and not seconds, ms, us or ns "
            f"since 1970 (2001 to 2286); give --time-unit if it is another clock"
        )

    def seconds(self, line: int, v) -> float | str | None:
        """Seconds for the timestamp ``v`` on ``line``; a string saying why it cannot be read (a skip
        reason); or None when ``v`` is no timestamp at all (absent, a bool, an unparsable string)."""
        if isinstance(v, bool) or v is None:
            return None
        if isinstance(v, str):
            s, how, relative = _iso_seconds(v), "ISO-8601", False
            if s is None:
                return None
        elif isinstance(v, (int, float)):
            if not math.isfinite(v):
                return None
            got = self._classify(float(v))
            if isinstance(got, str):
                return got
            s, how, relative = got
        else:
            return None
        if self.first is None:
            self.first = (line, relative)
        elif self.first[1] != relative:
            kind = "relative" if self.first[1] else "a time since 1970"
            return (
                f"timestamp {v!r} is not the kind of time line {self.first[0]}'s is: line {self.first[0]}'s is {kind}"
            )
        self.read_in[how] = self.read_in.get(how, 0) + 1
        return s

    def notes(self) -> list[str]:
        """One line saying how the log's times were read (relative seconds said, so never silent)."""
        if set(self.read_in) <= {"ISO-8601"}:
            return []  # a string says its own time
        parts = ", ".join(f"{n} in {how}" for how, n in self.read_in.items())
        hint = ""
        if "relative seconds" in self.read_in:
            hint = " (no magnitude tells relative s from ms: give --time-unit ms, us or ns if they are not seconds)"
        return [f"timestamps: {parts}{hint}"]
