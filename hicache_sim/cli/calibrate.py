"""``hicache-sim calibrate``: fit the link model to replay measurements, report held-out error."""

from __future__ import annotations

from pathlib import Path

import typer

from . import app
from .common import UserError, user_errors


@app.command("calibrate")
def calibrate_cmd(
    measurements: Path = typer.Argument(
        ..., metavar="MEASUREMENTS", help="measurements from `hicache-sim replay` (.parquet, .csv, .jsonl)"
    ),
    out: Path = typer.Option(
        Path("calibration.yaml"),
        "--out",
        metavar="FILE",
        help="calibration file to write (a scenario references it as hardware.calibration)",
    ),
    holdout: float = typer.Option(0.25, "--holdout", help="share of configurations held out to measure error"),
    seed: int = typer.Option(0, "--seed", help="seed of the held-out draw"),
    report: bool = typer.Option(
        True, "--report/--no-report", help="also write <out>_errors.md and <out>_holdout.png beside the file"
    ),
) -> None:
    """Fit latency, per-piece cost and bandwidth per direction x io backend x layout, report the median and
    p90 absolute percentage error on held-out configurations, and write the calibration file."""
    from ..calibration.file import is_calibration_file
    from ..calibration.fit import calibrate, error_table_markdown, per_piece_cost, read_measurements, scatter_figure
    from ..output.write import atomic_write, check_file_target

    with user_errors(str(measurements)):
        if not 0 <= holdout < 1:
            raise UserError(f"--holdout {holdout}: expected a share in [0, 1)")
        if out.is_dir():
            raise UserError(f"--out {out}: is a folder; give a file name such as {out / 'calibration.yaml'}")
        replacing = out.is_file() and is_calibration_file(out)
        check_file_target(out, is_calibration_file)
        stem = out.with_suffix("")
        reports = [Path(f"{stem}_errors.md"), Path(f"{stem}_holdout.png")] if report else []
        for path in reports:
            # A report beside a calibration file hicache-sim wrote is its own; beside a new one, never replace.
            check_file_target(path, lambda _p: replacing)
        df = read_measurements(measurements)
        source = f"hicache-sim calibrate {measurements.name} --holdout {holdout} --seed {seed}: {len(df)} measurements"
        result = calibrate(df, holdout=holdout, seed=seed, source=source)
    atomic_write(out, result.calibration.save)
    written = [out]
    if report:
        md = error_table_markdown(result, title=f"Link-model calibration: {out.name}")
        written.append(atomic_write(reports[0], lambda p: p.write_text(md, encoding="utf-8")))
        if (result.rows["split"] == "holdout").any():
            png = reports[1]
            title = (
                f"{measurements.name}: held-out configurations (median of repeats), "
                f"{result.calibration.device or 'unknown device'}"
            )
            scatter_figure(result.rows, png, title, only_split="holdout")
            written.append(png)
    for f in result.fits:
        p = f.params
        held = (
            f"held-out median {f.holdout_median_ape:.1f} % p90 {f.holdout_p90_ape:.1f} %"
            if f.holdout_median_ape is not None
            else "nothing held out"
        )
        typer.echo(
            f"{'/'.join(f.key):32s} {p.bandwidth_Bps / 1e9:9.2f} GB/s  latency {p.latency_s * 1e6:8.2f} us  "
            f"per piece {per_piece_cost(p) * 1e9:8.1f} ns  {held}"
        )
    o = result.overall
    if "n_holdout" in o:
        typer.echo(f"all held-out ({o['n_holdout']}): median {o['median_ape_pct']:.1f} %, p90 {o['p90_ape_pct']:.1f} %")
    if "repeat_spread_median_pct" in o:
        typer.echo(
            f"timing noise: repeat spread {o['repeat_spread_median_pct']:.1f} % (median), "
            f"p90 {o['repeat_spread_p90_pct']:.1f} %; {o['outlier_repeats']} of {o['repeats_total']} repeats outliers"
        )
    if "warning" in o:
        typer.echo(f"warning: {o['warning']}", err=True)
    for path in written:
        typer.echo(f"wrote {path}")
