"""``hicache-sim plot``: (re)draw the standard figures of a run or a sweep folder."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import typer

from ..plots import hit_rate_figure, links_figure, residency_figure, sweep_figures
from . import app
from .common import UserError, user_errors


@app.command()
def plot(
    folder: Path = typer.Argument(..., help="a run folder (summary.json) or a sweep folder (sweep.parquet)"),
) -> None:
    """Draw the figures of FOLDER: hit rate per tier and TTFT p50/p99 vs host/device ratio for a sweep;
    pool residency, hit rate and link utilisation over time for a run."""
    with user_errors(str(folder)):
        if (folder / "sweep.parquet").is_file():
            table = pd.read_parquet(folder / "sweep.parquet")
            written = sweep_figures(table, folder, f"{folder.name}: hit rate vs host/device ratio")
        elif (folder / "summary.json").is_file():
            name = json.loads((folder / "summary.json").read_text()).get("mode", "run")
            written = []
            ts_path, req_path = folder / "timeseries.parquet", folder / "requests.parquet"
            if ts_path.is_file():
                ts = pd.read_parquet(ts_path)
                if len(ts):
                    residency_figure(ts, folder / "residency.png", f"{folder.name}: pool residency ({name})")
                    written.append(folder / "residency.png")
                    if "h2d_util" in ts:
                        links_figure(ts, folder / "links.png", f"{folder.name}: link utilisation")
                        written.append(folder / "links.png")
            if req_path.is_file():
                hit_rate_figure(pd.read_parquet(req_path), folder / "hit_rate.png", f"{folder.name}: hit rate")
                written.append(folder / "hit_rate.png")
        else:
            raise UserError(f"{folder}: expected a run folder (summary.json) or a sweep folder (sweep.parquet)")
    for f in written:
        typer.echo(f"wrote {f}")
