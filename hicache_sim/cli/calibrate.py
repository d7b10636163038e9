"""``hicache-sim calibrate``: fit the link model to replay measurements, or the compute knobs to an
SGLang server log, and report the held-out error."""

from __future__ import annotations

from pathlib import Path

import typer

from . import app
from .common import UserError, user_errors


@app.command("calibrate")
def calibrate_cmd(
    measurements: Path = typer.Argument(
        ...,
        metavar="MEASUREMENTS",
        help="measurements from `hicache-sim replay` (.parquet, .csv, .jsonl), or an SGLang server log",
    ),
    scenario: str = typer.Option(
        None, "--scenario", metavar="SCENARIO", help="the deployment (model x GPU x TP) a server log comes from"
    ),
    fmt: str = typer.Option(
        "auto",
        "--format",
        metavar="FORMAT",
        help="auto (.parquet, .csv, .jsonl: replay measurements; any other file: a server log), replay or sglang-log",
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
        True,
        "--report/--no-report",
        help="also write <out>_errors.md and <out>_holdout.png beside the file (measurements)",
    ),
) -> None:
    """Fit latency, per-piece cost and bandwidth per direction x io backend x layout, report the median and
    p90 absolute percentage error on held-out configurations, and write the calibration file. Given an
    SGLang server log and --scenario, fit the compute knobs the log pins instead."""
    with user_errors(str(measurements)):
        fmt = input_format(measurements, fmt)
    if fmt == "sglang-log":
        calibrate_from_log(measurements, scenario, out, holdout, seed)
        return
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


#: --format -> how to recognise it from the file alone (auto); the first that matches wins.
INPUT_FORMATS = ("replay", "sglang-log")
REPLAY_SUFFIXES = (".parquet", ".csv", ".jsonl")


def input_format(path: Path, given: str) -> str:
    """The calibration input's format: ``given``, or for ``auto`` replay measurements by suffix, else a
    server log (whose reader names another server's log or a file without scheduler lines)."""
    if given != "auto":
        if given not in INPUT_FORMATS:
            raise UserError(f"--format {given!r}: expected auto, {', '.join(INPUT_FORMATS)}")
        return given
    if path.suffix.lower() in REPLAY_SUFFIXES or not path.is_file():
        return "replay"
    return "sglang-log"


def calibrate_from_log(log: Path, scenario: str | None, out: Path, holdout: float, seed: int) -> None:
    """Fit the compute knobs an SGLang server log pins for ``scenario``; write the calibration file
    (the scenario's own calibration file's other entries carried over)."""
    from ..calibration.file import Calibration, is_calibration_file
    from ..calibration.logfit import fit_log
    from ..calibration.serverlog import parse_server_log
    from ..output.write import atomic_write, check_file_target
    from ..scenario import load_scenario, resolve

    with user_errors(str(log)):
        if scenario is None:
            raise UserError(f"{log}: a server log needs --scenario (the model x GPU x TP it ran)")
        if not 0 <= holdout < 1:
            raise UserError(f"--holdout {holdout}: expected a share in [0, 1)")
        if out.is_dir():
            raise UserError(f"--out {out}: is a folder; give a file name such as {out / 'calibration.yaml'}")
        check_file_target(out, is_calibration_file)
    with user_errors(scenario):
        r = resolve(load_scenario(scenario))
    with user_errors(str(log)):
        parsed = parse_server_log(log, r.chunked_prefill_size)
        if not parsed.intervals:
            why = "; ".join(f"{n} x {k}" for k, n in sorted(parsed.skipped.items())) or "one scheduler line"
            raise UserError(f"{log}: no interval of one kind of work to fit ({why})")
        fit = fit_log(r, parsed.intervals, holdout=holdout, seed=seed)
    counts = {k: sum(iv.kind == k for iv in parsed.intervals) for k in ("decode", "prefill")}
    held = ", ".join(f"{k} median {m:.1f} % p90 {p:.1f} %" for k, (m, p) in fit.holdout_ape.items())
    base = r.calibration
    cal = Calibration(
        device=f"{r.gpu.name} {r.model.name} tp{r.scenario.hardware.tp}",
        source=(
            f"hicache-sim calibrate {log.name} --scenario {Path(scenario).name} --holdout {holdout} --seed {seed}: "
            f"{counts['decode']} decode, {counts['prefill']} prefill intervals; held-out {held or 'none'}"
        ),
        groups=dict(base.groups) if base else {},
        errors=dict(base.errors) if base else {},
        compute={**(base.compute if base else {}), **{k: round(v, 6) for k, v in fit.knobs.items()}},
    )
    atomic_write(out, cal.save)
    given = r.scenario.hardware.model_fields_set
    for kind in ("decode", "prefill"):
        typer.echo(
            f"{kind}: {counts[kind]} intervals ({fit.n_fit.get(kind, 0)} fitted, {fit.n_holdout.get(kind, 0)} held out)"
        )
    for k, v in fit.knobs.items():
        typer.echo(f"  {k:22s} {fit.start[k]:10.4g} -> {v:10.4g}")
    for kind, (med, p90) in fit.holdout_ape.items():
        typer.echo(
            f"held-out {kind} step time: median {med:.2f} %, p90 {p90:.2f} % (fitted: median {fit.fit_ape[kind]:.2f} %)"
        )
    for k, why in fit.not_pinned.items():
        typer.echo(f"not pinned: {k}: {why}")
    for why, n in sorted(parsed.skipped.items()):
        typer.echo(f"unused line pairs: {n} x {why}")
    for k in fit.knobs:
        if k in given or (k in ("linear_mfu", "attention_mfu") and r.scenario.hardware.mfu is not None):
            typer.echo(f"warning: {scenario} sets {k} itself; it keeps its own value over this file", err=True)
    typer.echo(f"wrote {out}")
