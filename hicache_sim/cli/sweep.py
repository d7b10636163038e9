"""``hicache-sim sweep``: run a scenario's parameter grid in parallel, resumably."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from . import app
from .common import UserError, output_errors, progress_bar, user_errors


@app.command()
def sweep(
    scenario: str = typer.Argument(
        ..., metavar="SCENARIO", help="scenario YAML with a `sweep:` mapping, or builtin:NAME"
    ),
    out: Path | None = typer.Option(
        None,
        "--out",
        metavar="DIR",
        help="sweep folder (default: results/<name>-sweep); only a new, empty or hicache-sim sweep folder is written",
    ),
    set_: list[str] = typer.Option(
        [], "--set", metavar="KEY=VALUE", help="override a key for every point (repeatable)"
    ),
    workers: int = typer.Option(max(1, os.cpu_count() or 1), "--workers", help="local worker processes"),
    dask_scheduler: str | None = typer.Option(
        None, "--dask-scheduler", metavar="ADDR", help="address of a Dask distributed scheduler (tcp://host:8786)"
    ),
    dask_timeout: float = typer.Option(
        10.0, "--dask-timeout", min=0.1, help="seconds to wait for the Dask scheduler to answer"
    ),
    force: bool = typer.Option(
        False, "--force", help="recompute every point, even into a folder made from another base scenario"
    ),
) -> None:
    """Run every point of the grid (reusing a point already in OUT/points only when its resolved scenario,
    input files and hicache-sim version are the same), then write sweep.parquet, sweep.csv and figures."""
    from ..output.plots import sweep_figures
    from ..output.write import check_target
    from ..scenario import build_scenario, load_scenario_data, resolve_builtin
    from ..sweep import grid, run_sweep

    with user_errors(scenario):
        if workers < 1:
            raise UserError(f"--workers: expected an integer >= 1, got {workers}")
        data = load_scenario_data(scenario)
        sc = build_scenario(data, scenario, set_)
        if not sc.sweep:
            raise UserError(f"{scenario}: sweep: expected a mapping of dotted keys to value lists")
        shown = out or Path("results") / f"{sc.name}-sweep"
        folder = check_target(shown, "sweep")
        n = len(grid(sc.sweep))
        base_dir = str(resolve_builtin(scenario, "scenarios").parent)
        with progress_bar(n, f"{sc.name} sweep", unit="points") as bar, output_errors(shown):
            res = run_sweep(
                data,
                scenario,
                folder,
                set_args=set_,
                workers=workers,
                dask_scheduler=dask_scheduler,
                base_dir=base_dir,
                force=force,
                on_point=bar.advance,
                dask_timeout_s=dask_timeout,
            )
    with output_errors(shown):
        figs = sweep_figures(res.table, folder, sc.name, res.keys)
    typer.echo(f"{sc.name}: {n} points ({res.ran} run, {res.skipped} already done) -> {shown / 'sweep.parquet'}")
    for f in figs:
        typer.echo(f"wrote {shown / Path(f).name}")
