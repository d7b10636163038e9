"""Reading a scenario: YAML files (``builtin:NAME`` for packaged ones), ``--set`` overrides, and
validation errors as one line naming the file and field."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ..yamlfile import load_yaml, yaml_error_where
from .schema import Scenario, ScenarioError


def _fmt_loc(loc: tuple) -> str:
    return ".".join(str(x) for x in loc)


def validation_message(path: str, err: ValidationError) -> str:
    """One line: file, field and what was expected (first error; the count of others)."""
    first = err.errors()[0]
    loc = _fmt_loc(first.get("loc", ()))
    msg = first.get("msg", "invalid").removeprefix("Value error, ")
    if first.get("type") == "extra_forbidden":
        msg = "unknown key"
    more = len(err.errors()) - 1
    tail = f" (and {more} more error{'s' if more > 1 else ''})" if more else ""
    return f"{path}: {loc}: {msg}{tail}" if loc else f"{path}: {msg}{tail}"


def parse_override(text: str) -> tuple[list[str], Any]:
    """``a.b.c=value`` -> (['a','b','c'], YAML-parsed value). An empty value is refused: it would
    silently unset the field."""
    if "=" not in text:
        raise ScenarioError(f"--set {text!r}: expected dotted.key=value")
    key, raw = text.split("=", 1)
    parts = [k for k in key.strip().split(".") if k]
    if not parts:
        raise ScenarioError(f"--set {text!r}: empty key")
    if not raw.strip():
        raise ScenarioError(f"--set {text!r}: empty value; expected a value (null unsets an optional field)")
    try:
        value = load_yaml(raw)
    except yaml.YAMLError:
        value = raw
    return parts, value


def _merge(into: dict, value: dict) -> None:
    """Deep-merge ``value`` into ``into`` (mutates): a mapping given to --set updates a section, it
    does not replace it."""
    for k, v in value.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = v


def apply_override(data: dict, parts: list[str], value: Any) -> None:
    """Set a dotted key in a nested dict, creating mappings on the way (mutates ``data``). A mapping
    value is merged into an existing mapping (``--set 'cache={host_ratio: 2}'`` keeps the other cache
    keys)."""
    node = data
    for p in parts[:-1]:
        nxt = node.get(p)
        if nxt is None:
            nxt = node[p] = {}
        if isinstance(nxt, str) and p == "model":
            nxt = node[p] = {"preset": nxt}
        if not isinstance(nxt, dict):
            raise ScenarioError(f"--set {'.'.join(parts)}: {p} is not a mapping")
        node = nxt
    last = parts[-1]
    if isinstance(value, dict) and isinstance(node.get(last), dict):
        _merge(node[last], value)
    elif isinstance(value, dict) and isinstance(node.get(last), str) and last == "model":
        node[last] = {"preset": node[last], **value}
    else:
        node[last] = value


def load_scenario_data(path: str | Path) -> dict:
    """Read a scenario YAML into a dict (``builtin:NAME`` reads a scenario shipped with the package)."""
    p = resolve_builtin(path, "scenarios")
    if p.is_dir():
        raise ScenarioError(f"{path}: is a folder; expected a scenario YAML file")
    if not p.is_file():
        raise ScenarioError(f"{path}: scenario file not found")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ScenarioError(f"{path}: not UTF-8 text (byte {e.start}); expected a scenario YAML file") from None
    except OSError as e:
        raise ScenarioError(f"{path}: cannot read ({(e.strerror or type(e).__name__).lower()})") from None
    try:
        data = load_yaml(text)
    except yaml.YAMLError as e:
        where, problem = yaml_error_where(e)
        raise ScenarioError(f"{path}{where}: YAML syntax error: {problem}") from None
    if data is None:
        raise ScenarioError(f"{path}: empty scenario; expected a mapping (name, model, cache, workload, ...)")
    if not isinstance(data, dict):
        raise ScenarioError(f"{path}: expected a mapping at the top level")
    _model_config_beside(data, p.parent)
    return data


def _beside(value: Any, folder: Path) -> Any:
    """``value`` made absolute against ``folder`` when it is a relative path (not ``builtin:``)."""
    if isinstance(value, str) and value and not value.startswith("builtin:") and not Path(value).is_absolute():
        return str((folder / value).resolve())
    return value


def _model_config_beside(data: dict, folder: Path) -> None:
    """A relative ``model.config`` (or a sweep value of it) names a file beside the scenario: made
    absolute here, so every later reader (sweep workers, the written scenario, result identities) finds
    the same file (mutates)."""
    model = data.get("model")
    if isinstance(model, dict) and "config" in model:
        model["config"] = _beside(model["config"], folder)
    spec = model.get("speculative") if isinstance(model, dict) else None
    if isinstance(spec, dict) and "config" in spec:  # the speculative draft's config.json
        spec["config"] = _beside(spec["config"], folder)
    sweep = data.get("sweep")
    if isinstance(sweep, dict) and isinstance(sweep.get("model.config"), list):
        sweep["model.config"] = [_beside(v, folder) for v in sweep["model.config"]]


def build_scenario(data: dict, source: str, overrides: list[str] = ()) -> Scenario:
    """Validate data (after ``--set`` overrides) into a Scenario; ScenarioError names file and field."""
    data = copy.deepcopy(data)
    for text in overrides:
        parts, value = parse_override(text)
        apply_override(data, parts, value)
    try:
        return Scenario.model_validate(data)
    except ValidationError as e:
        raise ScenarioError(validation_message(source, e)) from None


def load_scenario(path: str | Path, overrides: list[str] = ()) -> Scenario:
    """Read, override and validate a scenario file."""
    return build_scenario(load_scenario_data(path), str(path), overrides)


PACKAGE_DATA = Path(__file__).resolve().parent.parent / "data"


def resolve_builtin(path: str | Path, kind: str) -> Path:
    """``builtin:NAME`` -> the packaged file under data/<kind>/ (scenarios, traces or calibration)."""
    s = str(path)
    if s.startswith("builtin:"):
        name = s[len("builtin:") :]
        if kind in ("scenarios", "calibration") and not name.endswith(".yaml"):
            name += ".yaml"
        return PACKAGE_DATA / kind / name
    return Path(s)


def scenario_dump(sc: Scenario) -> dict:
    """The resolved scenario as plain data (written beside results)."""
    return sc.model_dump(mode="json")
