"""``hicache-sim sweep``: run a scenario's parameter grid in parallel, resumably."""

from __future__ import annotations

import contextlib
import os
import shlex
from pathlib import Path

import typer

from . import app
from .common import UserError, output_errors, progress_bar, user_errors


def resume_command(ctx: typer.Context, verb: str, scenario: str) -> str:
    """The command line that resumes an interrupted ``verb``: the flags given on the command line, less
    ``--force`` (it would recompute the points just kept)."""
    words = ["hicache-sim", verb, scenario]
    for param in ctx.command.params:  # typer's own click: options and sources are told apart by name
        if param.param_type_name != "option" or param.name in (None, "force"):
            continue
        if getattr(ctx.get_parameter_source(param.name), "name", None) != "COMMANDLINE":
            continue
        value = ctx.params.get(param.name)
        if param.is_flag:
            words += [param.opts[0]] if value else []
            continue
        for v in value if param.multiple else [value]:
            words += [param.opts[0], f"{v:g}" if isinstance(v, float) else str(v)]
    return shlex.join(words)


def interrupted(
    ctx: typer.Context, verb: str, scenario: str, folder: Path, shown: Path, e: KeyboardInterrupt
) -> typer.Exit:
    """Ctrl-C: one line saying what was kept (``folder`` written, shown as ``shown``) and how to resume;
    the exit to raise (code 130, as for SIGINT)."""
    from ..sweep import SweepInterrupted

    kept = ""
    if isinstance(e, SweepInterrupted):
        try:
            where = shown / e.folder.relative_to(folder)
        except ValueError:
            where = e.folder
        kept = f" {e.kept} of {e.total} points kept in {where / 'points'};"
    typer.echo(f"interrupted:{kept} to resume, rerun: {resume_command(ctx, verb, scenario)}", err=True)
    return typer.Exit(130)


@app.command()
def sweep(
    ctx: typer.Context,
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
        10.0,
        "--dask-timeout",
        min=0.1,
        help="seconds to wait for the Dask scheduler to answer, and for a worker while its cluster has none",
    ),
    force: bool = typer.Option(
        False, "--force", help="recompute every point, even into a folder made from another base scenario"
    ),
) -> None:
    """Run every point of the grid (reusing a point already in OUT/points only when its resolved scenario,
    input files and hicache-sim version are the same), then write sweep.parquet, sweep.csv and figures."""
    from ..output.plots import sweep_figures
    from ..output.write import check_target, hold_folder
    from ..scenario import build_scenario, load_scenario_data, resolve_builtin
    from ..sweep import grid, run_sweep

    with contextlib.ExitStack() as held:  # the folder is this run's until its figures are written
        with user_errors(scenario):
            if workers < 1:
                raise UserError(f"--workers: expected an integer >= 1, got {workers}")
            data = load_scenario_data(scenario)
            sc = build_scenario(data, scenario, set_)
            if not sc.sweep:
                raise UserError(f"{scenario}: sweep: expected a mapping of dotted keys to value lists")
            shown = out or Path("results") / f"{sc.name}-sweep"
            folder = check_target(shown, "sweep")
            held.enter_context(hold_folder(folder, shown=shown))
            n = len(grid(sc.sweep))
            base_dir = str(resolve_builtin(scenario, "scenarios").parent)
            try:
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
            except KeyboardInterrupt as e:
                raise interrupted(ctx, "sweep", scenario, folder, shown, e) from None
        with output_errors(shown):
            figs = sweep_figures(res.table, folder, sc.name, res.keys)
        typer.echo(f"{sc.name}: {n} points ({res.ran} run, {res.skipped} already done) -> {shown / 'sweep.parquet'}")
        for f in figs:
            typer.echo(f"wrote {shown / Path(f).name}")
