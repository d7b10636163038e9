"""Parameter sweeps: the grid of a scenario's ``sweep`` mapping, run on local processes or a Dask
distributed cluster, resumable (each finished point is a file; a rerun skips it), gathered into one
table with the standard figures."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import tempfile
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from .scenario import ScenarioError, build_scenario


@dataclass(frozen=True)
class Point:
    """One grid point: its overrides (dotted key -> value) and a stable id."""

    overrides: tuple[tuple[str, Any], ...]

    @property
    def id(self) -> str:
        blob = json.dumps([[k, v] for k, v in self.overrides], sort_keys=True, default=str)
        return hashlib.sha1(blob.encode()).hexdigest()[:12]

    def as_set_args(self) -> list[str]:
        return [f"{k}={json.dumps(v)}" for k, v in self.overrides]


def grid(sweep: dict[str, list[Any]]) -> list[Point]:
    """Cartesian product in the mapping's key order (the last key varies fastest)."""
    if not sweep:
        return [Point(())]
    keys = list(sweep)
    for k in keys:
        if not isinstance(sweep[k], list) or not sweep[k]:
            raise ScenarioError(f"sweep.{k}: expected a non-empty list of values")
    return [Point(tuple(zip(keys, combo))) for combo in itertools.product(*(sweep[k] for k in keys))]


def flatten(d: dict, prefix: str = "") -> dict:
    """Nested summary -> one flat row (``hit_rate.device``...); lists are skipped."""
    out: dict = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, f"{key}."))
        elif not isinstance(v, list):
            out[key] = v
    return out


def run_point(base: dict, source: str, overrides: list[str], base_dir: str | None) -> dict:
    """Run one point (in a worker process) and return its flat summary row."""
    from .runner import simulate

    data = dict(base)
    data.pop("sweep", None)
    sc = build_scenario(data, source, overrides)
    out = simulate(sc, base_dir=base_dir)
    row = flatten(out.summary)
    row["host_to_device_ratio"] = out.summary["sizes"]["host_to_device_ratio"]
    return row


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


@dataclass
class SweepResult:
    table: pd.DataFrame
    ran: int
    skipped: int
    folder: Path


def run_sweep(base: dict, source: str, out_dir: Path, *, set_args: Iterable[str] = (), workers: int = 1,
              dask_scheduler: str | None = None, base_dir: str | None = None,
              on_point: Callable[[], None] | None = None) -> SweepResult:
    """Run every grid point not already done in ``out_dir/points`` and gather the table.

    ``set_args`` apply to every point before the point's own overrides. Validation of every point
    happens before anything runs, so a bad value fails fast and writes nothing.
    """
    set_args = list(set_args)
    sc = build_scenario(base, source, set_args)
    points = grid(sc.sweep)
    for p in points:  # fail fast on a bad grid value, before any work
        build_scenario({k: v for k, v in base.items() if k != "sweep"}, source, [*set_args, *p.as_set_args()])
    points_dir = out_dir / "points"
    points_dir.mkdir(parents=True, exist_ok=True)
    todo = [p for p in points if not (points_dir / f"{p.id}.json").exists()]
    skipped = len(points) - len(todo)

    def save(p: Point, row: dict) -> None:
        row = {"point": p.id, **{k: v for k, v in p.overrides}, **row}
        _write_atomic(points_dir / f"{p.id}.json", json.dumps(row, indent=1, default=str) + "\n")
        if on_point is not None:
            on_point()

    jobs = [(p, [*set_args, *p.as_set_args()]) for p in todo]
    if dask_scheduler:
        from dask.distributed import Client

        with Client(dask_scheduler) as client:
            futs = {client.submit(run_point, base, source, args, base_dir, pure=False): p for p, args in jobs}
            from dask.distributed import as_completed as dask_completed

            for fut in dask_completed(futs):
                save(futs[fut], fut.result())
    elif workers > 1 and len(jobs) > 1:
        with ProcessPoolExecutor(max_workers=workers) as ex:
            futs = {ex.submit(run_point, base, source, args, base_dir): p for p, args in jobs}
            for fut in as_completed(futs):
                save(futs[fut], fut.result())
    else:
        for p, args in jobs:
            save(p, run_point(base, source, args, base_dir))
    rows = [json.loads((points_dir / f"{p.id}.json").read_text(encoding="utf-8")) for p in points]
    table = pd.DataFrame(rows)
    table.to_parquet(out_dir / "sweep.parquet", index=False)
    table.to_csv(out_dir / "sweep.csv", index=False)
    return SweepResult(table, len(todo), skipped, out_dir)
