"""The Python API for notebooks: ``hs.run`` one scenario, ``hs.sweep`` a grid, in memory.

    import hicache_sim as hs
    r = hs.run("builtin:default", cache__host_ratio=0.5)   # or cache={"host_ratio": 0.5}
    r.summary["hit_rate"]["total"], r.requests, r.timeseries
    s = hs.sweep("builtin:default", {"cache.host_ratio": [0.5, 1, 2]})
    s.table[["cache.host_ratio", "hit_rate.total"]]

A scenario is a YAML path, ``builtin:NAME``, a mapping or a :class:`~hicache_sim.scenario.Scenario`.
Overrides are keyword arguments: ``section__field=value`` sets one key (``__`` stands for the dot of
``--set section.field=value``); ``section={...}`` merges into the section, as ``--set`` does.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from .runner import RunOutput, simulate, write_outputs
from .scenario import Scenario, ScenarioError, build_scenario, load_scenario_data, resolve_builtin
from .scenario.load import apply_override
from .sweep import flatten

ScenarioLike = str | Path | dict | Scenario


@dataclass
class Result:
    """One run: the summary (the dict summary.json holds), one row per request, the time series."""

    scenario: Scenario
    summary: dict
    requests: pd.DataFrame
    timeseries: pd.DataFrame
    transfers: pd.DataFrame | None = None
    output: RunOutput | None = field(default=None, repr=False)

    @property
    def hit_rate(self) -> dict:
        """Token hit rate per tier: device, host, storage, total."""
        return self.summary["hit_rate"]

    def save(self, folder: str | Path, *, figures: bool = True) -> Path:
        """Write the result folder ``hicache-sim run`` writes (summary.json, parquet files, figures)."""
        from .output.write import check_target, hold_folder

        target = check_target(folder, "run")
        with hold_folder(target, shown=folder):
            write_outputs(self.output, target, figures=figures)
        return target

    def __repr__(self) -> str:
        hr = self.hit_rate
        return (
            f"Result({self.scenario.name!r}, {self.summary['requests']} requests, hit rate device "
            f"{hr['device']:.4f} host {hr['host']:.4f} storage {hr['storage']:.4f} total {hr['total']:.4f})"
        )


@dataclass
class SweepResults:
    """A grid: one flat summary row per point (swept keys first) and each point's :class:`Result`."""

    table: pd.DataFrame
    results: list[Result]
    keys: list[str]


def _source(scenario: ScenarioLike) -> tuple[dict, str, Path | None]:
    """(scenario data, name for messages, folder relative paths in it are read from)."""
    if isinstance(scenario, Scenario):
        return scenario.model_dump(mode="json"), scenario.name, None
    if isinstance(scenario, dict):
        return copy.deepcopy(scenario), "scenario", None
    if isinstance(scenario, str | Path):
        return load_scenario_data(scenario), str(scenario), resolve_builtin(scenario, "scenarios").parent
    raise ScenarioError(
        f"scenario: expected a path, builtin:NAME, a mapping or a Scenario, got {type(scenario).__name__}"
    )


def _apply(data: dict, overrides: dict[str, Any]) -> dict:
    """Keyword overrides onto scenario data (``a__b=v`` sets a.b; ``a={...}`` merges into a)."""
    data = copy.deepcopy(data)
    for key, value in overrides.items():
        apply_override(data, [p for p in key.replace("__", ".").split(".") if p], copy.deepcopy(value))
    return data


def run(scenario: ScenarioLike = "builtin:default", *, check_invariants: bool = False, **overrides: Any) -> Result:
    """Simulate one scenario in memory and return its :class:`Result`."""
    data, source, base = _source(scenario)
    sc = build_scenario(_apply(data, overrides), source)
    out = simulate(sc, base_dir=base, check_invariants=check_invariants)
    return Result(sc, out.summary, out.requests, out.timeseries, out.transfers, out)


def sweep(
    scenario: ScenarioLike = "builtin:default", grid: dict[str, list] | None = None, **overrides: Any
) -> SweepResults:
    """Run every point of ``grid`` (dotted key -> values; default: the scenario's own ``sweep``
    mapping), the last key varying fastest, in this process, in order."""
    data, source, base = _source(scenario)
    data = _apply(data, overrides)
    grid = dict(grid if grid is not None else data.get("sweep", {}))
    data.pop("sweep", None)
    for key, values in grid.items():
        if not isinstance(values, list | tuple) or not values:
            raise ScenarioError(f"sweep {key}: expected a non-empty list of values")
    keys = list(grid)
    rows, results = [], []
    for combo in itertools.product(*(grid[k] for k in keys)):
        point = dict(zip(keys, combo))
        sc = build_scenario(_apply(data, point), source)
        out = simulate(sc, base_dir=base)
        results.append(Result(sc, out.summary, out.requests, out.timeseries, out.transfers, out))
        row = flatten({k: v for k, v in out.summary.items() if k != "scopes"})
        rows.append({**point, **row})
    table = pd.DataFrame(rows)
    return SweepResults(table[[*keys, *[c for c in table.columns if c not in keys]]], results, keys)
