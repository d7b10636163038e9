"""``hicache-sim calibrate``: fit the link model to replay measurements, or the compute knobs to an
SGLang server log or to the deployment's own benchmark result (bench_serving, bench_multiturn), and
report the error on what the fit did not use; ``--check`` compares a benchmark result with the
simulation without fitting."""

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
        help="measurements from `hicache-sim replay` (.parquet, .csv, .jsonl), an SGLang server log, or a "
        "bench_serving / bench_multiturn result (its JSONL, or its printed result saved to a file)",
    ),
    scenario: str = typer.Option(
        None,
        "--scenario",
        metavar="SCENARIO",
        help="the deployment (model x GPU x TP) a server log comes from; for a benchmark result, the scenario "
        "that reproduces that benchmark",
    ),
    fmt: str = typer.Option(
        "auto",
        "--format",
        metavar="FORMAT",
        help="auto (a bench_serving or bench_multiturn result by its content; else .parquet, .csv, .jsonl: replay "
        "measurements; any other file: a server log), replay, sglang-log, bench-serving or bench-multiturn",
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
        help="also write <out>_errors.md and <out>_holdout.png beside the file (measurements), or <out>_bench.md "
        "and <out>_bench.json (a benchmark result)",
    ),
    check: bool = typer.Option(
        False,
        "--check",
        help="benchmark result: only compare it with the scenario's simulation (no fit, no calibration file)",
    ),
) -> None:
    """Fit latency, per-piece cost and bandwidth per direction x io backend x layout, report the median and
    p90 absolute percentage error on held-out configurations, and write the calibration file. Given an
    SGLang server log and --scenario, fit the compute knobs the log pins instead; given a benchmark result
    and the scenario that reproduces it, fit one prefill and one decode lever by re-running the scenario
    (or, with --check, only compare)."""
    with user_errors(str(measurements)):
        fmt = input_format(measurements, fmt)
        if check and fmt not in BENCH_FORMATS:
            raise UserError(f"--check: compares a benchmark result; {measurements} reads as {fmt}")
    if fmt in BENCH_FORMATS:
        calibrate_from_bench(measurements, fmt, scenario, out, check=check, report=report)
        return
    if fmt == "sglang-log":
        calibrate_from_log(measurements, scenario, out, holdout, seed)
        return
    from ..calibration.fit import (
        calibrate,
        dropped_note,
        error_table_markdown,
        per_piece_cost,
        read_measurements,
        scatter_figure,
    )
    from ..hardware.calibration import is_calibration_file
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
    if o.get("dropped_timings"):
        typer.echo(f"note: {dropped_note(o['dropped_timings'])}", err=True)
    for path in written:
        typer.echo(f"wrote {path}")


#: --format -> how to recognise it from the file alone (auto); the first that matches wins.
BENCH_FORMATS = ("bench-serving", "bench-multiturn")
INPUT_FORMATS = ("replay", "sglang-log", *BENCH_FORMATS)
REPLAY_SUFFIXES = (".parquet", ".csv", ".jsonl")


def input_format(path: Path, given: str) -> str:
    """The calibration input's format: ``given``, or for ``auto`` a benchmark result by its first
    characters (bench_serving's or bench_multiturn's keys or printed headings), else replay
    measurements by suffix, else a server log (whose reader names another server's log or a file
    without scheduler lines)."""
    if given != "auto":
        if given not in INPUT_FORMATS:
            raise UserError(f"--format {given!r}: expected auto, {', '.join(INPUT_FORMATS)}")
        return given
    if not path.is_file():
        return "replay"
    from ..calibration.benchresult import read_head, sniff

    bench = sniff(read_head(path))
    if bench is not None:
        return bench
    if path.suffix.lower() in REPLAY_SUFFIXES:
        return "replay"
    return "sglang-log"


def calibrate_from_log(log: Path, scenario: str | None, out: Path, holdout: float, seed: int) -> None:
    """Fit the compute knobs an SGLang server log pins for ``scenario``; write the calibration file
    (the scenario's own calibration file's other entries carried over)."""
    from ..calibration.logfit import fit_log
    from ..calibration.serverlog import parse_server_log
    from ..hardware.calibration import is_calibration_file
    from ..output.write import atomic_write, check_file_target
    from ..scenario import load_scenario, resolve

    with user_errors(str(log)):
        if scenario is None:
            raise UserError(f"{log}: a server log needs --scenario (the model x GPU x TP it ran)")
        if not 0 <= holdout < 1:
            raise UserError(f"--holdout {holdout}: expected a share in [0, 1)")
        _not_a_folder(out)
        check_file_target(out, is_calibration_file)
    with user_errors(scenario):
        r = resolve(load_scenario(scenario))
    with user_errors(str(log)):
        parsed = parse_server_log(log, r.chunked_prefill_size)
        if not parsed.intervals:
            why = "; ".join(f"{n} x {k}" for k, n in sorted(parsed.skipped.items())) or "one scheduler line"
            raise UserError(f"{log}: no interval of one kind of work to fit ({why})")
    accept_len = parsed.accept_len
    if accept_len is not None:
        with user_errors(scenario):
            r = _with_accept_len(r, scenario, str(log), accept_len)
    with user_errors(str(log)):
        fit = fit_log(r, parsed.intervals, holdout=holdout, seed=seed)
    counts = {k: sum(iv.kind == k for iv in parsed.intervals) for k in ("decode", "prefill")}
    held = ", ".join(f"{k} median {m:.1f} % p90 {p:.1f} %" for k, (m, p) in fit.holdout_ape.items())
    source = (
        f"hicache-sim calibrate {log.name} --scenario {Path(scenario).name} --holdout {holdout} --seed {seed}: "
        f"{counts['decode']} decode, {counts['prefill']} prefill intervals; held-out {held or 'none'}"
    )
    atomic_write(out, _fitted_calibration(r, source, fit.knobs).save)
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
    if accept_len is not None:
        n = sum(iv.accept_len is not None for iv in parsed.intervals)
        typer.echo(
            f"speculative decoding: accept len median {accept_len:.4g} over {n} decode intervals (each timed with its "
            f"own); set model.speculative.accept_len: {accept_len:.4g} in the scenario (the model, draft and "
            "workload's, not the hardware's: the calibration file does not carry it)"
        )
    _warn_overridden(r, scenario, fit.knobs)
    typer.echo(f"wrote {out}")


def _with_accept_len(r, scenario: str, log: str, accept_len: float):
    """``r`` able to time speculative rounds: the scenario's own ``model.speculative.accept_len``, else
    the log's median (the round's shape, draft and memory stay the scenario's)."""
    from ..scenario import resolve

    spec = r.scenario.model.speculative
    if spec is None:
        raise UserError(
            f"{log}: its decode lines print 'accept len' (speculative decoding), but {scenario} has no "
            "model.speculative; give the server's --speculative-algorithm (and draft) in the scenario"
        )
    if spec.accept_len is not None:
        return r
    sc = r.scenario
    model = sc.model.model_copy(update={"speculative": spec.model_copy(update={"accept_len": accept_len})})
    return resolve(sc.model_copy(update={"model": model}))


def _not_a_folder(out: Path) -> None:
    """``--out`` names the calibration file itself."""
    if out.is_dir():
        raise UserError(f"--out {out}: is a folder; give a file name such as {out / 'calibration.yaml'}")


def _fitted_calibration(r, source: str, knobs: dict[str, float]):
    """The calibration file of fitted compute ``knobs`` for the resolved scenario ``r``: its own
    calibration file's link groups, errors and other compute entries carried over."""
    from ..hardware.calibration import Calibration

    base = r.calibration
    return Calibration(
        device=f"{r.gpu.name} {r.model.name} tp{r.scenario.hardware.tp}",
        source=source,
        groups=dict(base.groups) if base else {},
        errors=dict(base.errors) if base else {},
        compute={**(base.compute if base else {}), **{k: round(v, 6) for k, v in knobs.items()}},
    )


def _warn_overridden(r, scenario: str, knobs: dict[str, float]) -> None:
    """Warn of each fitted knob the scenario sets itself (its own value wins over the file)."""
    hw = r.scenario.hardware
    for k in knobs:
        if k in hw.model_fields_set or (k in ("linear_mfu", "attention_mfu") and hw.mfu is not None):
            typer.echo(f"warning: {scenario} sets {k} itself; it keeps its own value over this file", err=True)


#: Benchmark -> the scenario's workload.kind that reproduces it, and the field that sets its request count.
BENCH_KIND = {
    "bench-serving": ("bench_serving", "workload.bench_serving.num_prompts (x mooncake_num_rounds)"),
    "bench-multiturn": ("multiturn", "workload.multiturn.num_clients x num_rounds"),
}
REPORT_KIND = "hicache-sim-bench-report"
REPORT_HEAD = "# hicache-sim benchmark check"


def _is_bench_report(path: Path) -> bool:
    """Whether ``path`` is a benchmark report hicache-sim wrote (its first line or ``kind`` says so)."""
    import json

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    if path.suffix == ".md":
        return text.startswith(REPORT_HEAD)
    try:
        data = json.loads(text)
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("kind") == REPORT_KIND


def calibrate_from_bench(result_path: Path, fmt: str, scenario: str | None, out: Path, *, check: bool, report: bool):
    """Compare a benchmark result with the scenario that reproduces it and, unless ``check``, fit the
    levers it pins and write the calibration file (the scenario's own calibration file's other
    entries carried over); the report beside it."""
    import json

    from ..calibration.benchfit import UNITS, check_bench, fit_bench, not_simulated, report_markdown, table_lines
    from ..calibration.benchresult import read_bench_result
    from ..hardware.calibration import is_calibration_file
    from ..output.write import atomic_write, check_file_target
    from ..scenario import load_scenario, resolve, resolve_builtin
    from ..workloads.build import build_workload

    with user_errors(str(result_path)):
        if scenario is None:
            raise UserError(f"{result_path}: a benchmark result needs --scenario (the scenario that reproduces it)")
        _not_a_folder(out)
        if not check:
            check_file_target(out, is_calibration_file)
        stem = out.with_suffix("")
        reports = [Path(f"{stem}_bench.md"), Path(f"{stem}_bench.json")] if report else []
        for path in reports:
            check_file_target(path, _is_bench_report)
    with user_errors(scenario):
        sc = load_scenario(scenario, ["mode=timed"])
        r = resolve(sc)
        wl = build_workload(sc, r.cache.page_size, resolve_builtin(scenario, "scenarios").parent)
    kind, count_from = BENCH_KIND[fmt]
    sent = len(wl.requests) - wl.warmup_requests
    with user_errors(str(result_path)):
        result = read_bench_result(result_path, fmt, lambda run: _is_scenario_run(run, sc, sent))
        if sc.workload.kind != kind:
            raise UserError(
                f"{result_path}: a {fmt} result, but {scenario} has workload.kind {sc.workload.kind}; expected {kind}"
            )
        if result.requests is not None and result.requests != sent:
            raise UserError(
                f"{result_path}:{result.line}: {result.count_field}: {result.requests} requests, but {scenario} "
                f"sends {sent} ({count_from}); give the scenario of that run"
            )
    where = f"{result_path}" + (
        f" (line {result.line}, of {result.runs_in_file} runs)" if result.runs_in_file > 1 else ""
    )
    typer.echo(f"{where}: {fmt}, {len(result.figures)} figures, {len(result.rounds)} rounds; units {UNITS[fmt]}")
    meta = [
        f"result: {result_path.name} ({fmt}, line {result.line})",
        f"scenario: {scenario} ({r.model.name} on {r.gpu.name}, tp {sc.hardware.tp})",
        f"units: {UNITS[fmt]}",
    ]
    if fmt == "bench-multiturn" and "average_ttft" not in result.figures and result.rounds:
        note = "average_ttft: no summary in the result; the request-weighted mean of its rounds' mean TTFT"
        meta.append(note)
        typer.echo(note)
    fit = None
    if check:
        before = check_bench(r, wl, result)
        for line in table_lines(before):
            typer.echo(line)
    else:
        fit = fit_bench(r, wl, result)
        before = fit.before
        for line in table_lines(before, fit.after):
            typer.echo(line)
    missing = not_simulated(before)
    if missing:
        typer.echo(f"not simulated (no per-token times): {', '.join(missing)}")
    unused = _unused_error(fit) if fit is not None else None
    if fit is not None:
        for group, name in fit.levers.items():
            typer.echo(f"{group}: {name} x {fit.factors[group]:.4f} on {fit.targets[group]}")
        for k, v in fit.knobs.items():
            typer.echo(f"  {k:26s} {fit.start[k]:10.4g} -> {v:10.4g}")
        typer.echo(f"  ({fit.runs} runs of the scenario)")
        for name in fit.at_bound:
            typer.echo(f"warning: {name} stopped at its bound; the target is out of the model's reach", err=True)
        for key, e in fit.target_error_pct.items():
            typer.echo(f"fitted {key}: error {e:+.3f} %")
        if unused:
            typer.echo(f"figures not fitted: median |error| {unused[0]:.1f} % over {unused[1]}, worst {unused[2]}")
        for k, why in fit.not_pinned.items():
            typer.echo(f"not pinned: {k}: {why}")
    written = []
    if not check and fit is not None:
        targets = ", ".join(f"{fit.levers[g]} on {fit.targets[g]}" for g in fit.levers) or "nothing"
        source = (
            f"hicache-sim calibrate {result_path.name} --scenario {Path(scenario).name}: {fmt} line {result.line}; "
            f"fitted {targets}" + (f"; figures not fitted: median |error| {unused[0]:.1f} %" if unused else "")
        )
        written.append(atomic_write(out, _fitted_calibration(r, source, fit.knobs).save))
        _warn_overridden(r, scenario, fit.knobs)
    if reports:
        md = report_markdown(f"{REPORT_HEAD[2:]}: {result_path.name}", meta, before, fit)
        data = {"kind": REPORT_KIND, "version": 1, "result": str(result_path), "format": fmt, "line": result.line}
        data.update({"scenario": scenario, "before": before})
        if fit is not None:
            data["fit"] = {
                "levers": fit.levers,
                "targets": fit.targets,
                "factors": fit.factors,
                "knobs": fit.knobs,
                "start": {k: fit.start[k] for k in fit.knobs},
                "target_error_pct": fit.target_error_pct,
                "at_bound": fit.at_bound,
                "not_pinned": fit.not_pinned,
                "runs": fit.runs,
                "after": fit.after,
            }
        written.append(atomic_write(reports[0], lambda p: p.write_text(md, encoding="utf-8")))
        written.append(
            atomic_write(reports[1], lambda p: p.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8"))
        )
    for path in written:
        typer.echo(f"wrote {path}")


def _is_scenario_run(run, sc, sent: int) -> bool:
    """Whether a run of a result file is the one the scenario reproduces: its request count, and its
    request rate and concurrency where the result states them."""
    if run.requests is not None and run.requests != sent:
        return False
    spec = getattr(sc.workload, sc.workload.kind, None)
    for name, given in run.settings.items():
        ours = getattr(spec, name, None)
        if given is None or ours is None:
            continue
        ours = float("inf") if ours == "inf" else float(ours)
        if abs(ours - given) > 1e-9 * max(1.0, abs(ours)) and ours != given:
            return False
    return True


#: Figures that count what was sent, not how fast: left out of the error on figures not fitted.
COUNTS = ("completed", "total_input_tokens", "total_output_tokens", "total_requests")


def _unused_error(fit) -> tuple[float, int, str] | None:
    """(median |error| %, how many, the worst as text) over the figures the fit did not target."""
    rows = [
        row
        for row in fit.after
        if row["error_pct"] is not None and row["figure"] not in fit.targets.values() and row["figure"] not in COUNTS
    ]
    if not rows:
        return None
    import statistics

    median = statistics.median(abs(row["error_pct"]) for row in rows)
    worst = max(rows, key=lambda row: abs(row["error_pct"]))
    return median, len(rows), f"{worst['figure']} {worst['error_pct']:+.1f} %"
