"""Parameter sweeps: the grid of a scenario's ``sweep`` mapping, run on local processes or a Dask
distributed cluster, resumable (each finished point is a file; a rerun skips it), gathered into one
table with the standard figures. Ctrl-C stops a sweep at once: local workers ignore SIGINT and are
terminated by the parent, pending Dask tasks are cancelled, finished points stay (:class:`SweepInterrupted`). A
Dask cluster left without a worker for the timeout stops a sweep the same way (:class:`SweepStalled`)."""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Callable, Iterable
from concurrent.futures import as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from .output.identity import computed_part, differing_keys, digest, input_files, point_identity
from .output.write import OutputError, apply_umask, prepare_folder, write_text_atomic
from .scenario import ScenarioError, build_scenario, resolve, scenario_dump
from .workers import sigint_held, worker_pool


@dataclass(frozen=True)
class Point:
    """One grid point: its overrides (dotted key -> value), in grid order."""

    overrides: tuple[tuple[str, Any], ...]

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


#: Workloads this process has built, by :func:`workload_key` (a worker runs many points of one trace).
_WORKLOADS: dict[str, Any] = {}
#: Distinct workloads kept per process (a grid over trace limits or page sizes builds one per value).
WORKLOAD_CACHE_SIZE = 4


def workload_key(sc, page_size: int, base_dir: str | None) -> str:
    """What a point's workload is built from: the workload section, the seed, the page size and the
    content digest of every file it reads (a trace rewritten in place is parsed again)."""
    dump = scenario_dump(sc)
    part = {"workload": dump["workload"], "seed": dump["seed"], "page_size": page_size}
    return digest({**part, "inputs": input_files(part, base_dir)})


def cached_workload(sc, page_size: int, base_dir: str | None):
    """The point's workload, parsed once per process and reused by every point that shares its key
    (requests are frozen; a run only reads the list)."""
    from .workloads.build import build_workload
    from .workloads.lazy import materialised

    key = workload_key(sc, page_size, base_dir)
    wl = _WORKLOADS.pop(key, None)
    if wl is None:
        wl = build_workload(sc, page_size, base_dir)
        wl = dataclasses.replace(wl, requests=materialised(wl.requests))  # read the file once, not per point
    _WORKLOADS[key] = wl  # most recently used last
    while len(_WORKLOADS) > WORKLOAD_CACHE_SIZE:
        del _WORKLOADS[next(iter(_WORKLOADS))]
    return wl


def run_point(base: dict, source: str, overrides: list[str], base_dir: str | None) -> dict:
    """Run one point (in a worker process) and return its flat summary row."""
    from .runner import simulate

    data = dict(base)
    data.pop("sweep", None)
    sc = build_scenario(data, source, overrides)
    r = resolve(sc)
    out = simulate(sc, base_dir=base_dir, workload=cached_workload(sc, r.cache.page_size, base_dir), resolved=r)
    row = flatten({k: v for k, v in out.summary.items() if k != "scopes"})  # scopes: see summary.SCOPES
    row["host_to_device_ratio"] = out.summary["sizes"]["host_to_device_ratio"]
    return row


class SweepFolderError(OutputError):
    """A sweep folder that cannot be resumed as asked (made from another base scenario)."""


class SweepStalled(SweepFolderError):
    """The Dask cluster lost its last worker and none came back within the timeout: the sweep stopped,
    ``kept`` of ``total`` points are in ``folder/points``, and rerunning the same call resumes from them."""

    def __init__(self, reason: str, folder: Path, kept: int, total: int) -> None:
        super().__init__(
            f"{reason}; {kept} of {total} points kept in {folder / 'points'}: to resume, rerun the same command"
        )
        self.folder, self.kept, self.total = folder, kept, total


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped a sweep: no worker is left, ``kept`` of ``total`` points are in ``folder/points``
    (every file whole), and rerunning the same call resumes from them."""

    def __init__(self, folder: Path, kept: int, total: int) -> None:
        super().__init__(f"{folder}: {kept} of {total} points kept")
        self.folder, self.kept, self.total = folder, kept, total


MANIFEST = "sweep.json"


@dataclass
class SweepResult:
    table: pd.DataFrame
    ran: int
    skipped: int
    folder: Path
    keys: list[str]  # the swept keys, in grid order


@dataclass(frozen=True)
class PlannedPoint:
    """A grid point with its fully resolved identity and the file its result lives in."""

    point: Point
    set_args: list[str]
    identity: dict

    @property
    def file_id(self) -> str:
        return digest(self.identity)


def plan(
    base: dict,
    source: str,
    set_args: Iterable[str] = (),
    base_dir: str | None = None,
    points: list[Point] | None = None,
) -> list[PlannedPoint]:
    """Validate every point (a bad value fails here, before any work) and resolve its identity.
    ``points``: an explicit list instead of the grid of the scenario's ``sweep`` mapping."""
    set_args = list(set_args)
    sc = build_scenario(base, source, set_args)
    data = {k: v for k, v in base.items() if k != "sweep"}
    out = []
    for p in grid(sc.sweep) if points is None else points:
        args = [*set_args, *p.as_set_args()]
        point_sc = build_scenario(data, source, args)
        r = resolve(point_sc)  # sizes too: a point the pools cannot hold fails here, not in a worker
        # Its workload too (each distinct one parsed once, kept for the points run in this process): a
        # missing or malformed trace of a later point fails here, before the folder is written.
        cached_workload(point_sc, r.cache.page_size, base_dir)
        out.append(PlannedPoint(p, args, point_identity(scenario_dump(point_sc), base_dir)))
    return out


def _base_record(base: dict, source: str, set_args: list[str], keys: list[str] | None = None) -> dict:
    """What the folder was made from: the base scenario (with --set), less the grid and swept keys
    (``keys``: those of an explicit point list, else the grid's)."""
    sc = build_scenario(base, source, set_args)
    dump = computed_part(scenario_dump(sc))
    for key in sc.sweep if keys is None else keys:
        node = dump
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.get(part, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict):
            node.pop(parts[-1], None)
    return dump


def check_resumable(out_dir: Path, now: dict) -> None:
    """Refuse to resume into a sweep folder made from another base scenario (``now``: its base record,
    see :func:`_base_record`); names the keys that differ."""
    manifest = out_dir / MANIFEST
    if not manifest.is_file():
        return
    try:
        before = json.loads(manifest.read_text(encoding="utf-8")).get("base_scenario")
    except (OSError, ValueError):
        before = None
    if before is None:
        raise SweepFolderError(f"{out_dir}: {MANIFEST} is unreadable; use --force to recompute every point")
    diff = differing_keys(before, now)
    if diff:
        shown = ", ".join(diff[:4]) + (f" and {len(diff) - 4} more" if len(diff) > 4 else "")
        raise SweepFolderError(
            f"{out_dir}: made from another base scenario (differs in {shown}); "
            "use --force to recompute every point, or name another folder"
        )


def connect_dask(address: str, timeout_s: float = 10.0):
    """A Dask client, or one line saying why not (before anything is written), in bounded time
    (:mod:`hicache_sim.cluster`)."""
    from .cluster import ClusterError
    from .cluster import connect_dask as connect

    try:
        return connect(address, timeout_s)
    except ClusterError as e:
        raise SweepFolderError(str(e)) from None


def run_sweep(
    base: dict,
    source: str,
    out_dir: Path,
    *,
    set_args: Iterable[str] = (),
    workers: int = 1,
    dask_scheduler: str | None = None,
    base_dir: str | None = None,
    force: bool = False,
    on_point: Callable[[], None] | None = None,
    dask_timeout_s: float = 10.0,
    points: list[Point] | None = None,
) -> SweepResult:
    """Run every grid point whose result is not already in ``out_dir/points`` and gather the table.

    ``set_args`` apply to every point before the point's own overrides. A point's result is reused
    only when its identity (resolved scenario, input files, code) is the same; a folder made from
    another base scenario is refused unless ``force`` (which recomputes every point). Every point is
    validated, and the Dask scheduler reached, before anything is written. ``points``: run this
    explicit list (same keys in each) instead of the grid of ``base["sweep"]``; a folder resumes
    across calls with other points of the same keys.
    """
    set_args = list(set_args)
    keys = None if points is None else list(dict.fromkeys(k for p in points for k, _ in p.overrides))
    planned = plan(base, source, set_args, base_dir, points)
    base_record = _base_record(base, source, set_args, keys)
    if not force:
        check_resumable(out_dir, base_record)
    client = connect_dask(dask_scheduler, dask_timeout_s) if dask_scheduler else None
    try:
        points_dir = out_dir / "points"
        prepare_folder(out_dir, "sweep")
        if force and points_dir.is_dir():
            for f in points_dir.glob("*.json"):
                f.unlink()
        points_dir.mkdir(exist_ok=True)
        apply_umask(points_dir, directory=True)
        grid_ = (
            (base.get("sweep") or {}) if keys is None else {k: [dict(p.overrides).get(k) for p in points] for k in keys}
        )
        manifest = {"source": source, "set": set_args, "base_scenario": base_record, "grid": grid_}
        write_text_atomic(out_dir / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True, default=str) + "\n")
        todo = [p for p in planned if not _done(points_dir, p)]
        skipped = len(planned) - len(todo)
        saved: list[PlannedPoint] = []

        def save(p: PlannedPoint, row: dict) -> None:
            row = {"point": p.file_id, **dict(p.point.overrides), **row, "identity": p.identity}
            with sigint_held():  # a point is saved and counted whole, or not at all
                write_text_atomic(points_dir / f"{p.file_id}.json", json.dumps(row, indent=1, default=str) + "\n")
                saved.append(p)
            if on_point is not None:
                on_point()

        try:
            if client is not None:
                from .cluster import ClusterStopped, run_on_cluster

                calls = [(p, (run_point, base, source, p.set_args, base_dir)) for p in todo]
                try:
                    run_on_cluster(client, dask_scheduler, calls, save, dask_timeout_s)
                except ClusterStopped as e:
                    raise SweepStalled(str(e), out_dir, skipped + len(saved), len(planned)) from None
            elif workers > 1 and len(todo) > 1:
                with worker_pool(workers) as ex:
                    futs = {ex.submit(run_point, base, source, p.set_args, base_dir): p for p in todo}
                    for fut in as_completed(futs):
                        save(futs[fut], fut.result())
            else:
                for p in todo:
                    save(p, run_point(base, source, p.set_args, base_dir))
        except KeyboardInterrupt:
            raise SweepInterrupted(out_dir, skipped + len(saved), len(planned)) from None
    finally:
        if client is not None:
            from .cluster import close

            close(client)
    rows = []
    for p in planned:
        row = json.loads((points_dir / f"{p.file_id}.json").read_text(encoding="utf-8"))
        row.pop("identity", None)
        rows.append(row)
    table = pd.DataFrame(rows)
    from .runner import write_parquet

    write_parquet(table, out_dir / "sweep.parquet")
    write_text_atomic(out_dir / "sweep.csv", table.to_csv(index=False))
    return SweepResult(table, len(todo), skipped, out_dir, keys or list(base.get("sweep") or {}))


def swept_keys(folder: Path) -> list[str] | None:
    """The swept keys a sweep folder's manifest records (None: a folder from before they were)."""
    try:
        grid_ = json.loads((folder / MANIFEST).read_text(encoding="utf-8")).get("grid")
    except (OSError, ValueError):
        return None
    return list(grid_) if isinstance(grid_, dict) else None


def _done(points_dir: Path, p: PlannedPoint) -> bool:
    """A point is done when its file exists and records the same identity; a file cut short or
    damaged into something that is not a point record is recomputed (and overwritten)."""
    f = points_dir / f"{p.file_id}.json"
    try:
        row = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(row, dict) and row.get("identity") == p.identity
