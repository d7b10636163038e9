"""``hicache-sim sweep``: run a scenario's parameter grid in parallel, resumably."""

from __future__ import annotations

from pathlib import Path

import typer

from ..plots import sweep_figures
from ..scenario import build_scenario, load_scenario_data, resolve_builtin
from ..sweep import grid, run_sweep
from . import app
from .common import UserError, progress_bar, user_errors


@app.command()
def sweep(
    scenario: str = typer.Argument(..., help="scenario YAML with a `sweep:` mapping, or builtin:NAME"),
    out: Path | None = typer.Option(None, "--out", help="sweep folder (default: results/<name>-sweep)"),
    set_: list[str] = typer.Option([], "--set", help="override a key for every point (repeatable)"),
    workers: int = typer.Option(max(1, (__import__("os").cpu_count() or 1)), "--workers",
                                help="local worker processes"),
    dask_scheduler: str | None = typer.Option(None, "--dask-scheduler",
                                              help="address of a Dask distributed scheduler (tcp://host:8786)"),
) -> None:
    """Run every point of the grid (skipping points already in OUT/points), then write sweep.parquet,
    sweep.csv and the hit-rate/TTFT vs host-ratio figures."""
    with user_errors(scenario):
        if workers < 1:
            raise UserError(f"--workers: expected an integer >= 1, got {workers}")
        data = load_scenario_data(scenario)
        sc = build_scenario(data, scenario, set_)
        if not sc.sweep:
            raise UserError(f"{scenario}: sweep: expected a mapping of dotted keys to value lists")
        folder = out or Path("results") / f"{sc.name}-sweep"
        n = len(grid(sc.sweep))
        base_dir = str(resolve_builtin(scenario, "scenarios").parent)
        with progress_bar(n, f"{sc.name} sweep") as bar:
            res = run_sweep(data, scenario, folder, set_args=set_, workers=workers, dask_scheduler=dask_scheduler,
                            base_dir=base_dir, on_point=bar.advance)
    figs = sweep_figures(res.table, folder, f"{sc.name}: hit rate vs host/device ratio")
    typer.echo(f"{sc.name}: {n} points ({res.ran} run, {res.skipped} already done) -> {folder / 'sweep.parquet'}")
    for f in figs:
        typer.echo(f"wrote {f}")
