"""``hicache-sim validate-model``: a scenario's transfers replayed for real against the link model."""

from __future__ import annotations

from pathlib import Path

import typer

from . import app
from .common import UserError, progress_bar, user_errors
from .replay import load_replay, mib, replay_errors, volume_line


@app.command("validate-model")
def validate_model_cmd(
    scenario: str = typer.Argument(..., metavar="SCENARIO", help="scenario YAML or builtin:NAME"),
    device: str = typer.Option(
        "auto", "--device", metavar="auto|cuda|cpu", help="auto (CUDA when present), cuda or cpu"
    ),
    out: Path | None = typer.Option(
        None, "--out", metavar="DIR", help="output folder (default: results/validate-model/<name>)"
    ),
    set_: list[str] = typer.Option(
        [], "--set", metavar="KEY=VALUE", help="override a key, e.g. --set hardware.calibration=FILE"
    ),
    limit: int | None = typer.Option(None, "--limit", min=1, help="replay only the first N host<->device transfers"),
    h2d: str = typer.Option(
        "per_layer", "--h2d", metavar="per_layer|whole", help="H2D load-back per_layer (as SGLang) or whole"
    ),
    max_pool_mb: int | None = typer.Option(None, "--max-pool-mb", min=1, help="cap on each KV pool, MiB"),
    threads: int = typer.Option(1, "--threads", min=1, help="torch threads for CPU copies"),
    repeats: int = typer.Option(3, "--repeats", min=1, help="passes over the log; the median per transfer is compared"),
) -> None:
    """Simulate SCENARIO, replay its host<->device transfers as real copies, and compare each measured
    duration with the link model's prediction: validation.md (error table), predicted_vs_measured.png,
    validation.parquet (per transfer)."""
    from ..calibration.validate import (
        VALIDATION_FILES,
        count_replayed,
        replay_volume,
        simulate_log,
        validate_run,
        write_validation,
    )
    from ..output.write import check_files_target
    from ..scenario import load_scenario, resolve_builtin

    if h2d not in ("per_layer", "whole"):
        with user_errors():
            raise UserError(f"--h2d {h2d!r}: expected per_layer or whole")
    rp = load_replay()
    with replay_errors(scenario, rp):
        sc = load_scenario(scenario, set_)
        folder = check_files_target(out or Path("results") / "validate-model" / sc.name, VALIDATION_FILES)
        run = simulate_log(sc, base_dir=resolve_builtin(scenario, "scenarios").parent)
        typer.echo(volume_line(sc.name, *replay_volume(run.transfers, limit), repeats, limit), err=True)
        with progress_bar(count_replayed(run.transfers, limit, repeats), f"validate-model {sc.name}") as bar:
            v = validate_run(
                run,
                device=device,
                limit=limit,
                per_layer=h2d == "per_layer",
                max_pool_bytes=mib(max_pool_mb),
                cpu_threads=threads,
                repeats=repeats,
                progress=bar.advance,
            )
    written = write_validation(v, folder)
    for _, row in v.table.iterrows():
        typer.echo(
            f"{row['direction']:4s} {int(row['transfers']):6d} transfers  "
            f"median APE {row['median_ape_pct']:6.1f} %  p90 {row['p90_ape_pct']:6.1f} %  "
            f"predicted/measured total {row['predicted_over_measured']:.3f}"
        )
    if v.table.empty:
        typer.echo(f"{sc.name}: no host<->device transfers to compare")
    for p in written:
        typer.echo(f"wrote {p}")
