"""SGLang's launch flags as data: every flag ``sglang.launch_server`` accepts in the version the
simulator follows (``data/sglang/server_args-<version>.json``, made by tools/extract_sglang_flags.py
from the released wheel) with the type and choices its parser checks, and a command line split into
canonical flag -> value, each value checked as SGLang's parser checks it at start-up.

Older launch lines: a flag SGLang ``SGLANG_VERSION`` does not take, or takes only as an ambiguous
abbreviation, is looked up in the older flag lists stored beside it (``OLDER_VERSIONS``), each read by
its own version's rule. Where SGLang itself registered the flag as a deprecated alias of a flag it still
has (its ``Deprecated*`` actions' ``new_flag``), the flag is read as that one, with a note; any other
flag of an older version is refused naming the versions that had it."""

from __future__ import annotations

import difflib
import functools
import json
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from ..scenario import ScenarioError

SGLANG_VERSION = "0.5.23"
_DIR = Path(__file__).resolve().parent.parent / "data" / "sglang"
# How a launch command starts: python -m sglang.launch_server, or the sglang console script.
_LAUNCHERS = ("sglang.launch_server", "sglang/launch_server.py", "launch_server")


class SglangArgsError(ScenarioError):
    """An SGLang command line this cannot turn into a scenario: one line naming the flag."""


@dataclass(frozen=True)
class FlagSpec:
    """One SGLang flag: its primary spelling, whether it takes a value, SGLang's default, the conversion
    its parser applies to a value (``type``: a key of ``VALUE_TYPES``; another name is not checked), its
    choices (None: any value), whether a plugin may add choices (SGLang's ``add_*_choices`` hooks), and,
    for a flag SGLang registered as deprecated, the flag it reads it as (``new_flag``, ``--x`` or
    ``--x=value``)."""

    name: str
    arity: str  # none (a switch) | one | many
    default: object = None
    type: str | None = None
    choices: tuple | None = None
    extensible: bool = False
    new_flag: str | None = None


@dataclass(frozen=True)
class FlagList:
    """The flags of one SGLang version: primary name -> spec, and every spelling -> primary name."""

    version: str
    specs: dict[str, FlagSpec]
    spelling: dict[str, str]


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version))


@functools.cache
def flag_list(version: str = SGLANG_VERSION) -> FlagList:
    """The stored flag list of SGLang ``version`` (``data/sglang/server_args-<version>.json``)."""
    doc = json.loads((_DIR / f"server_args-{version}.json").read_text(encoding="utf-8"))
    specs, spelling = {}, {}
    for name, f in doc["flags"].items():
        choices = f.get("choices")
        specs[name] = FlagSpec(
            name,
            f["arity"],
            f["default"],
            f.get("type"),
            None if choices is None else tuple(choices),
            bool(f.get("extensible")),
            (f.get("deprecated") or {}).get("new_flag"),
        )
        spelling[name] = name
        for a in f["aliases"]:
            spelling[a] = name
    return FlagList(version, specs, spelling)


@functools.cache
def older_versions() -> tuple[str, ...]:
    """The SGLang versions before ``SGLANG_VERSION`` whose flag lists are stored, newest first."""
    found = [p.name.removeprefix("server_args-").removesuffix(".json") for p in _DIR.glob("server_args-*.json")]
    older = [v for v in found if _version_key(v) < _version_key(SGLANG_VERSION)]
    return tuple(sorted(older, key=_version_key, reverse=True))


@functools.cache
def known_flags() -> tuple[dict[str, FlagSpec], dict[str, str]]:
    """(primary name -> spec, every spelling -> primary name) for SGLang ``SGLANG_VERSION``."""
    flags = flag_list()
    return flags.specs, flags.spelling


def _matches(flags: FlagList, flag: str) -> list[str]:
    """The primary names ``flag`` stands for under argparse's rule (SGLang's parser keeps
    ``allow_abbrev``): itself when it is a spelling, else every flag one of whose spellings it begins."""
    if flag in flags.spelling:
        return [flags.spelling[flag]]
    if len(flag) <= 2:
        return []
    return sorted({flags.spelling[s] for s in flags.spelling if s.startswith(flag)})


def canonical(flag: str) -> str:
    """The primary spelling of ``flag`` (``--tensor-parallel-size`` -> ``--tp-size``). A unique
    prefix stands for its flag, as SGLang's argparse parser allows (``--tp 2`` is ``--tp-size 2``)."""
    flags = flag_list()
    found = _matches(flags, flag)
    if len(found) == 1:
        return found[0]
    if found:
        raise SglangArgsError(f"{flag}: ambiguous abbreviation; could be {', '.join(found[:4])}")
    close = difflib.get_close_matches(flag, list(flags.spelling), n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise SglangArgsError(f"{flag}: not a flag of sglang {SGLANG_VERSION} launch_server{hint}")


@dataclass(frozen=True)
class Reading:
    """How a flag as typed is read: the ``SGLANG_VERSION`` flag it sets, the spec its value is taken
    with (an older version's, for a renamed flag), the value a switch stands for, and the note saying so."""

    flag: str
    taken: FlagSpec
    const: str | None = None
    note: str | None = None


def _versions_text(versions: list[str]) -> str:
    return ", ".join(sorted(versions, key=_version_key))


def read_flag(typed: str) -> Reading:
    """The flag ``typed`` stands for in SGLang ``SGLANG_VERSION``; failing that, the flag SGLang renamed
    it to, when an older version it belongs to registered it as a deprecated alias. Raises
    SglangArgsError naming the versions that had it otherwise."""
    current = flag_list()
    found = _matches(current, typed)
    if len(found) == 1:
        spec = current.specs[found[0]]
        note = None
        if spec.new_flag:  # SGLang still takes it, with a warning at start-up
            note = f"{typed}: deprecated in sglang {SGLANG_VERSION} (a warning at start-up); its replacement: "
            note += spec.new_flag
        return Reading(found[0], spec, note=note)
    had: dict[str, FlagSpec] = {}
    for version in older_versions():
        old = flag_list(version)
        names = _matches(old, typed)
        if len(names) == 1:
            had[version] = old.specs[names[0]]
    if not had:
        canonical(typed)  # raises: ambiguous, or not a flag (with a close spelling)
    why = f"ambiguous in {SGLANG_VERSION} (could be {', '.join(found[:4])})" if found else f"gone from {SGLANG_VERSION}"
    versions = _versions_text(list(had))
    for version, spec in had.items():  # newest first
        reading = _renamed(typed, spec, version, versions, why)
        if reading is not None:
            return reading
    raise SglangArgsError(
        f"{typed}: a flag of sglang {versions}, {why}: SGLang {SGLANG_VERSION} refuses it at start-up; "
        "remove it from the command"
    )


def _renamed(typed: str, old: FlagSpec, version: str, versions: str, why: str) -> Reading | None:
    """``old``'s reading through SGLang's own deprecated alias (``new_flag``), when the flag it names is
    one of ``SGLANG_VERSION``'s, takes a value as the old one did (or a switch stands for one value)."""
    if old.new_flag is None or "{" in old.new_flag or " " in old.new_flag:
        return None
    target, eq, value = old.new_flag.partition("=")
    specs, spelling = known_flags()
    if target not in spelling:
        return None
    new = specs[spelling[target]]
    if eq and old.arity == "none" and new.arity == "one":
        try:
            check_value(new, value)
        except SglangArgsError:
            return None  # the value it stood for is gone too
        shown = f"{new.name} {value}"
    elif not eq and old.arity == new.arity:
        shown = new.name
    else:
        return None
    note = (
        f"{typed}: a flag of sglang {versions}, {why}; read as {shown}, as sglang {version} did "
        f"(its deprecated alias of {new.name})"
    )
    return Reading(new.name, old, value if eq else None, note)


# ------------------------------------------------------------------------------------ values


def human_readable_int(text: str) -> int:
    """SGLang's ``human_readable_int``: an integer, or a number with an SI suffix (k, M, G, T; decimals
    allowed) or an IEC one (Ki, Mi, Gi, Ti; whole numbers only). Raises ValueError otherwise."""
    value = text.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", value)
    if match:
        number, suffix = match.groups()
        iec = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
        if suffix in iec:
            if "." in number:
                raise ValueError(f"decimals are not allowed with {suffix}")
            return int(number) * iec[suffix]
        return int(Decimal(number) * {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}[suffix])
    return int(value)


# The conversions SGLang's parser applies (``type=`` / ``type_parser``), by the name the flag list records:
# name -> (convert, what a value must be). A value the conversion refuses, SGLang refuses at start-up.
VALUE_TYPES: dict[str, tuple[Callable[[str], object], str]] = {
    "int": (int, "an integer"),
    "float": (float, "a number"),
    "json": (json.loads, "JSON"),
    "human_int": (human_readable_int, "an integer (suffixes k, M, G, T, Ki, Mi, Gi, Ti allowed)"),
    "str": (str, "text"),
}


def check_value(spec: FlagSpec, raw: str, shown: str | None = None) -> object:
    """``raw`` converted as SGLang ``SGLANG_VERSION``'s parser converts it for ``spec``'s flag, and
    checked against its choices. Raises SglangArgsError naming the flag (as ``shown``) and what SGLang
    takes: a value it refuses at start-up."""
    flag = shown or spec.name
    convert, expected = VALUE_TYPES.get(spec.type or "str", (str, "text"))
    try:
        value = convert(raw)
    except (ValueError, ArithmeticError):
        raise SglangArgsError(
            f"{flag}: expected {expected}, got {raw!r} (sglang {SGLANG_VERSION} refuses it at start-up)"
        ) from None
    if spec.choices is not None and value not in spec.choices:
        raise SglangArgsError(f"{flag} {raw}: {refusal(spec, raw)}")
    return value


def refusal(spec: FlagSpec, raw: str) -> str:
    """Why SGLang ``SGLANG_VERSION`` refuses ``raw`` for ``spec``'s flag: its choices, whether a plugin
    could add the value, and the older versions that took it."""
    took = [v for v in older_versions() if raw in (_old_choices(v, spec.name) or ())]
    text = f"not one of sglang {SGLANG_VERSION}'s choices ({', '.join(map(str, spec.choices or ()))})"
    text += "; SGLang refuses it at start-up"
    if spec.extensible:
        text += " unless a plugin adds it"
    if took:
        text += f" (sglang {_versions_text(took)} took it)"
    return text


def _old_choices(version: str, name: str) -> tuple | None:
    old = flag_list(version)
    found = _matches(old, name)
    return old.specs[found[0]].choices if len(found) == 1 else None


@dataclass
class ParsedCommand:
    """A launch command: canonical flag -> value (text; True for a switch; a list for many values),
    in the order given, and the environment assignments before it."""

    args: dict[str, str | bool | list[str]] = field(default_factory=dict)
    env: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # flags of older versions, and how they were read


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
    A flag SGLang does not know is an error naming it; so is anything that is not a flag, and a value
    SGLang's parser refuses (its type, its choices). An older version's flag SGLang renamed is read as
    its new name, with a note."""
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
        reading = read_flag(name)
        flag, spec = reading.flag, reading.taken
        if reading.note:
            out.notes.append(reading.note)
        i += 1
        if spec.arity == "none":
            if eq:
                raise SglangArgsError(f"{name}: a switch, it takes no value (got {inline!r})")
            out.args[flag] = True if reading.const is None else reading.const
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
        value = out.args[flag]
        for raw in value if isinstance(value, list) else [] if value is True else [value]:
            check_value(specs[flag], raw, name if flag == spec.name else f"{name} (read as {flag})")
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
