"""SGLang's launch flags as data: every flag ``sglang.launch_server`` accepts in the version the
simulator follows (``data/sglang/server_args-<version>.json``, made by tools/extract_sglang_flags.py
from the released wheel), and a command line split into canonical flag -> value."""

from __future__ import annotations

import difflib
import functools
import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from ..scenario import ScenarioError

SGLANG_VERSION = "0.5.23"
_DATA = Path(__file__).resolve().parent.parent / "data" / "sglang" / f"server_args-{SGLANG_VERSION}.json"
# How a launch command starts: python -m sglang.launch_server, or the sglang console script.
_LAUNCHERS = ("sglang.launch_server", "sglang/launch_server.py", "launch_server")


class SglangArgsError(ScenarioError):
    """An SGLang command line this cannot turn into a scenario: one line naming the flag."""


@dataclass(frozen=True)
class FlagSpec:
    """One SGLang flag: its primary spelling, whether it takes a value, SGLang's default."""

    name: str
    arity: str  # none (a switch) | one | many
    default: object = None


@functools.cache
def known_flags() -> tuple[dict[str, FlagSpec], dict[str, str]]:
    """(primary name -> spec, every spelling -> primary name) for SGLang ``SGLANG_VERSION``."""
    doc = json.loads(_DATA.read_text(encoding="utf-8"))
    specs, spelling = {}, {}
    for name, f in doc["flags"].items():
        specs[name] = FlagSpec(name, f["arity"], f["default"])
        spelling[name] = name
        for a in f["aliases"]:
            spelling[a] = name
    return specs, spelling


def canonical(flag: str) -> str:
    """The primary spelling of ``flag`` (``--tensor-parallel-size`` -> ``--tp-size``). A unique
    prefix stands for its flag, as SGLang's argparse parser allows (``--tp 2`` is ``--tp-size 2``)."""
    _, spelling = known_flags()
    if flag in spelling:
        return spelling[flag]
    prefixed = sorted({spelling[s] for s in spelling if s.startswith(flag)}) if len(flag) > 2 else []
    if len(prefixed) == 1:
        return prefixed[0]
    if prefixed:
        raise SglangArgsError(f"{flag}: ambiguous abbreviation; could be {', '.join(prefixed[:4])}")
    close = difflib.get_close_matches(flag, list(spelling), n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise SglangArgsError(f"{flag}: not a flag of sglang {SGLANG_VERSION} launch_server{hint}")


@dataclass
class ParsedCommand:
    """A launch command: canonical flag -> value (text; True for a switch; a list for many values),
    in the order given, and the environment assignments before it."""

    args: dict[str, str | bool | list[str]] = field(default_factory=dict)
    env: list[str] = field(default_factory=list)


def split_command(argv: list[str] | str) -> list[str]:
    """A command as tokens: a list as given, or one string split as a shell would (continuation
    backslashes at line ends allowed)."""
    if isinstance(argv, str):
        argv = [argv]
    if len(argv) == 1 and (" " in argv[0] or "\n" in argv[0]):
        try:
            return shlex.split(argv[0].replace("\\\n", " "))
        except ValueError as e:
            raise SglangArgsError(f"command: cannot split it as a shell would ({e})") from None
    return list(argv)


def parse_command(argv: list[str] | str) -> ParsedCommand:
    """Split ``python -m sglang.launch_server --flag value ...`` (or ``sglang serve ...``) into flags.
    A flag SGLang does not know is an error naming it; so is anything that is not a flag."""
    tokens = split_command(argv)
    out = ParsedCommand()
    i = 0
    while i < len(tokens) and "=" in tokens[i] and not tokens[i].startswith("-"):
        out.env.append(tokens[i])
        i += 1
    start = _flags_start(tokens, i)
    out.env += [t for t in tokens[i:start] if "=" in t and not t.startswith("-")]
    specs, _ = known_flags()
    i = start
    while i < len(tokens):
        tok = tokens[i]
        if not tok.startswith("--"):
            raise SglangArgsError(f"{tok!r}: expected an SGLang flag (--name) here")
        name, eq, inline = tok.partition("=")
        flag = canonical(name)
        spec = specs[flag]
        i += 1
        if spec.arity == "none":
            if eq:
                raise SglangArgsError(f"{name}: a switch, it takes no value (got {inline!r})")
            out.args[flag] = True
        elif spec.arity == "one":
            if eq:
                out.args[flag] = inline
            elif i < len(tokens) and not _is_flag(tokens[i]):
                out.args[flag] = tokens[i]
                i += 1
            else:
                raise SglangArgsError(f"{name}: expected a value")
        else:
            values = [inline] if eq else []
            while i < len(tokens) and not _is_flag(tokens[i]):
                values.append(tokens[i])
                i += 1
            if not values:
                raise SglangArgsError(f"{name}: expected one or more values")
            out.args[flag] = values
    return out


def _is_flag(tok: str) -> bool:
    """A flag, not a value: ``-1`` is a value (argparse reads negative numbers as values)."""
    if not tok.startswith("-"):
        return False
    try:
        float(tok)
        return False
    except ValueError:
        return True


def _flags_start(tokens: list[str], i: int) -> int:
    """Index of the first flag after the launcher (``python -m sglang.launch_server`` or ``sglang serve``)."""
    j = i
    while j < len(tokens) and not tokens[j].startswith("--"):
        j += 1
    head = tokens[i:j]
    if not head:
        return j  # flags only
    is_launcher = any(t.endswith(_LAUNCHERS) for t in head) or (
        len(head) >= 2 and Path(head[0]).name == "sglang" and head[1] == "serve"
    )
    if not is_launcher:
        shown = " ".join(head)
        raise SglangArgsError(
            f"command: {shown!r} is not an SGLang launch; expected python -m sglang.launch_server --flag ... "
            "(or sglang serve --flag ..., or the flags alone)"
        )
    return j
