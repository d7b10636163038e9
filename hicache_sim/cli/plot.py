"""``hicache-sim plot``: (re)draw the standard figures of a run or a sweep folder."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from . import app
from .common import UserError, user_errors

#: Columns each figure input needs: a file without them is someone else's table, not a run's.
REQUIRED_COLUMNS = {
    "requests.parquet": ("prompt_tokens", "device_hit_tokens", "host_hit_tokens", "storage_hit_tokens"),
    "timeseries.parquet": ("device_pages", "host_pages"),
    "sweep.parquet": ("hit_rate.device", "hit_rate.host", "hit_rate.total"),
}


def _read(path: Path, reader: Callable[[Path], Any]) -> Any:
    """``reader(path)``, a damaged or unreadable file becoming one line naming it (exit 2)."""
    import yaml

    try:
        return reader(path)
    except (OSError, ValueError, yaml.YAMLError) as e:  # JSON, Arrow and UTF-8 errors are ValueErrors
        reason = getattr(e, "strerror", None) or str(e).splitlines()[0]
        raise UserError(f"{path}: cannot be read ({reason})") from None


def _table(path: Path):
    """A parquet table the figures can use: readable and with the columns its figures need."""
    import pandas as pd

    table = _read(path, pd.read_parquet)
    missing = [c for c in REQUIRED_COLUMNS[path.name] if c not in table]
    if missing:
        raise UserError(f"{path}: expected the columns hicache-sim writes; missing {', '.join(missing)}")
    return table


def _mapping(path: Path, loaded: Any) -> dict:
    if not isinstance(loaded, dict):
        raise UserError(f"{path}: expected a mapping, got {type(loaded).__name__}")
    return loaded


def _run_name(folder: Path) -> str:
    """The scenario's name from the folder's scenario.yaml, else the folder's name."""
    import yaml

    path = folder / "scenario.yaml"
    if not path.is_file():
        return folder.name
    scenario = _mapping(path, _read(path, lambda p: yaml.safe_load(p.read_text(encoding="utf-8"))))
    section = scenario.get("scenario", {})
    name = section.get("name") if isinstance(section, dict) else None
    return str(name) if name else folder.name


def _draw_run(folder: Path) -> list[Path]:
    import pandas as pd

    from ..output.plots import run_figures

    summary_path = folder / "summary.json"
    summary = _mapping(summary_path, _read(summary_path, lambda p: json.loads(p.read_text(encoding="utf-8"))))
    mode = str(summary.get("mode", "run"))
    ts_path, req_path = folder / "timeseries.parquet", folder / "requests.parquet"
    ts = _table(ts_path) if ts_path.is_file() else pd.DataFrame()
    req = _table(req_path) if req_path.is_file() else pd.DataFrame()
    saturation = summary.get("saturation")
    written = run_figures(
        _run_name(folder), mode, req, ts, folder, saturation if isinstance(saturation, dict) else None
    )
    if not written:
        raise UserError(f"{folder}: nothing to draw (no rows in requests.parquet or timeseries.parquet)")
    return written


def _sweep_name(folder: Path) -> str:
    """The base scenario's name from the folder's manifest (the title ``sweep`` gave its figures), else the
    folder's name (a folder from before the manifest, or one whose manifest cannot be read)."""
    from ..sweep import MANIFEST

    try:
        base = json.loads((folder / MANIFEST).read_text(encoding="utf-8")).get("base_scenario")
    except (OSError, ValueError, AttributeError):
        return folder.name
    name = base.get("name") if isinstance(base, dict) else None
    return name if isinstance(name, str) and name else folder.name


def _draw_sweep(folder: Path) -> list[Path]:
    from ..output.plots import sweep_figures
    from ..sweep import swept_keys

    written = sweep_figures(_table(folder / "sweep.parquet"), folder, _sweep_name(folder), swept_keys(folder))
    if not written:
        raise UserError(f"{folder / 'sweep.parquet'}: nothing to draw (no points, or no swept key in the table)")
    return written


@app.command()
def plot(
    folder: Path = typer.Argument(
        ..., metavar="FOLDER", help="a run folder (summary.json) or a sweep folder (sweep.parquet)"
    ),
) -> None:
    """Draw the figures of FOLDER: hit rate per tier and TTFT p50/p99 vs the swept key for a sweep;
    pool residency, hit rate and link utilisation over time for a run."""
    with user_errors(str(folder)):
        if (folder / "sweep.parquet").is_file():
            written = _draw_sweep(folder)
        elif (folder / "summary.json").is_file():
            written = _draw_run(folder)
        else:
            raise UserError(f"{folder}: expected a run folder (summary.json) or a sweep folder (sweep.parquet)")
    for f in written:
        typer.echo(f"wrote {f}")
