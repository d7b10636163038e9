"""``hicache-sim plot``: (re)draw the standard figures of a run or a sweep folder."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from . import app
from .common import UserError, user_errors


@app.command()
def plot(
    folder: Path = typer.Argument(
        ..., metavar="FOLDER", help="a run folder (summary.json) or a sweep folder (sweep.parquet)"
    ),
) -> None:
    """Draw the figures of FOLDER: hit rate per tier and TTFT p50/p99 vs the swept key for a sweep;
    pool residency, hit rate and link utilisation over time for a run."""
    import pandas as pd
    import yaml

    from ..output.plots import run_figures, sweep_figures
    from ..sweep import swept_keys

    with user_errors(str(folder)):
        if (folder / "sweep.parquet").is_file():
            table = pd.read_parquet(folder / "sweep.parquet")
            written = sweep_figures(table, folder, folder.name, swept_keys(folder))
        elif (folder / "summary.json").is_file():
            mode = json.loads((folder / "summary.json").read_text()).get("mode", "run")
            name = folder.name
            if (folder / "scenario.yaml").is_file():
                name = yaml.safe_load((folder / "scenario.yaml").read_text())["scenario"].get("name", name)
            ts_path, req_path = folder / "timeseries.parquet", folder / "requests.parquet"
            ts = pd.read_parquet(ts_path) if ts_path.is_file() else pd.DataFrame()
            req = pd.read_parquet(req_path) if req_path.is_file() else pd.DataFrame()
            written = run_figures(name, mode, req, ts, folder)
        else:
            raise UserError(f"{folder}: expected a run folder (summary.json) or a sweep folder (sweep.parquet)")
    for f in written:
        typer.echo(f"wrote {f}")
