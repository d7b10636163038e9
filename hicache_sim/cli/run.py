"""``hicache-sim run``: simulate one scenario and write its result folder."""

from __future__ import annotations

import contextlib
from pathlib import Path

import typer

from . import app
from .common import UserError, output_errors, progress_bar, user_errors

DEFAULT_SCENARIO = "builtin:default"


def summary_line(name: str, s: dict) -> str:
    """The one-line result a user reads first: hit rate per tier, and TTFT when timed."""
    hr = s["hit_rate"]
    line = (
        f"{name}: {s['requests']} requests, token hit rate device {hr['device']:.4f} host {hr['host']:.4f} "
        f"storage {hr['storage']:.4f} total {hr['total']:.4f}"
    )
    if "ttft_s" in s and s["ttft_s"]["p50"] is not None:
        line += f", TTFT p50 {s['ttft_s']['p50']:.3f}s p99 {s['ttft_s']['p99']:.3f}s"
    return line


def saturation_warning(s: dict) -> str | None:
    """The overload line of a timed run whose queue grows without bound (None otherwise)."""
    if "saturation" not in s:
        return None
    from ..output.saturation import saturation_line

    return saturation_line(s["saturation"])


def _reasons(requests) -> str:
    reasons = sorted({str(r) for r in requests.get("reason", []) if r}) if len(requests) else []
    shown = "; ".join(reasons[:2]) + (f"; and {len(reasons) - 2} more reasons" if len(reasons) > 2 else "")
    return f" ({shown})" if shown else ""


def rejected_warning(s: dict, requests) -> str | None:
    """A warning when some (not all) requests were rejected: the hit rate covers only the others."""
    rej, n = s["requests_rejected"], s["requests"]
    if rej == 0 or s["requests_finished"] == 0:
        return None
    return (
        f"{rej} of {n} requests ({rej / n:.0%}) were rejected{_reasons(requests)}; hit rates and latencies "
        f"cover the {s['requests_finished']} served"
    )


def nothing_served(s: dict, requests) -> str | None:
    """A line saying why no request was served, or None when some were."""
    if s["requests_finished"] > 0:
        return None
    return f"nothing was served: all {s['requests']} requests were rejected{_reasons(requests)}"


def l3_lines(s: dict, storage: bool, store: str, scenario: str, set_: list[str]) -> list[str]:
    """The L3 verdict of a run with a store: load vs recompute (timed), and how to get the with / without
    comparison; an instant run has no timing and says where the verdict comes from."""
    if not storage:
        return []
    if "l3" not in s:
        return [
            f"L3 ({store}): instant mode has no timing; for load vs recompute and TTFT with and without the store: "
            "--set mode=timed, or hicache-sim advise"
        ]
    import shlex

    from ..output.l3 import detail_lines, how_to_compare, verdict_line

    a = s["l3"]["load_vs_recompute"]
    words = ["hicache-sim", "advise", scenario, *(w for x in set_ for w in ("--set", x))]
    return [verdict_line(a, hint=how_to_compare(shlex.join(words))), *detail_lines(a)]


@app.command()
def run(
    scenario: str = typer.Argument(
        DEFAULT_SCENARIO,
        metavar="SCENARIO",
        help="scenario YAML, or builtin:NAME (default: the embedded quick scenario)",
    ),
    out: Path | None = typer.Option(
        None,
        "--out",
        metavar="DIR",
        help="result folder (default: results/<scenario name>); only a new, empty or hicache-sim run folder is written",
    ),
    set_: list[str] = typer.Option(
        [],
        "--set",
        metavar="KEY=VALUE",
        help="override a key: --set cache.host_ratio=0.5 (repeatable; a mapping value is merged into the section)",
    ),
    check_invariants: bool = typer.Option(
        False,
        "--check-invariants",
        help="check every cache invariant after each request (instant) or scheduler step (timed); "
        "each check walks the tree and the pages in use: about 15x the run time in instant mode, 30x in timed",
    ),
    no_figures: bool = typer.Option(False, "--no-figures", help="skip the PNG figures"),
    bench_json: bool = typer.Option(
        False,
        "--bench-json",
        help="timed runs: also write the figures as SGLang's benchmark writes them, bench_serving.jsonl "
        "(--output-file keys) or, for a multiturn workload, bench_multiturn.jsonl (--log-file keys)",
    ),
) -> None:
    """Run SCENARIO and write summary.json, requests.parquet, timeseries.parquet, figures and the
    resolved scenario into the result folder; a timed run with a store also says whether loading a prefix
    from it beats recomputing (summary.json l3, l3.png). Exits 1 when no request could be served."""
    from ..output.rounds import rounds_table
    from ..output.serving import serving_table
    from ..output.write import check_target, hold_folder
    from ..runner import simulate, write_outputs
    from ..scenario import load_scenario, resolve, resolve_builtin
    from ..workloads.build import build_workload

    with contextlib.ExitStack() as held:
        with user_errors(scenario):
            sc = load_scenario(scenario, set_)
            if bench_json and sc.mode != "timed":
                raise UserError(f"--bench-json: needs mode: timed (a {sc.mode} run has no TTFT or throughput)")
            r = resolve(sc, strict=check_invariants)
            base = resolve_builtin(scenario, "scenarios").parent
            folder = check_target(out or Path("results") / sc.name, "run")
            held.enter_context(hold_folder(folder, shown=out or folder))
            wl = build_workload(sc, sc.cache.page_size, base)
            for w in r.warnings:
                typer.echo(f"warning: {w}", err=True)
            with progress_bar(len(wl.requests), f"{sc.name} ({sc.mode})", unit="requests") as bar:
                result = simulate(
                    sc,
                    base_dir=base,
                    check_invariants=check_invariants,
                    progress=lambda i: bar.advance(),
                    workload=wl,
                    resolved=r,
                )
        extra = None
        if bench_json:
            from ..output.benchjson import bench_files

            extra = bench_files(sc, result.request_columns, wl.warmup_requests)
        with output_errors(out or folder):
            write_outputs(result, folder, figures=not no_figures, extra=extra)
    partial = rejected_warning(result.summary, result.request_columns)
    if partial:
        typer.echo(f"warning: {partial}", err=True)
    typer.echo(summary_line(sc.name, result.summary))
    saturated = saturation_warning(result.summary)
    if saturated:
        typer.echo(f"warning: {saturated}", err=True)
    if "observed" in result.summary:
        from ..output.observed import observed_line

        typer.echo(observed_line(result.summary["observed"]))
    if "dp_ranks" in result.summary:
        from ..dp_run import dp_table

        typer.echo(dp_table(result.summary["dp_ranks"]))
    if "rounds" in result.summary:
        typer.echo(rounds_table(result.summary["rounds"]))
    if "serving" in result.summary:
        typer.echo(serving_table(result.summary["serving"]))
    for line in l3_lines(result.summary, r.cache.storage, r.scenario.cache.storage_backend, scenario, set_):
        typer.echo(line)
    shown = out if out is not None else Path("results") / sc.name
    typer.echo(f"wrote {shown}")
    empty = nothing_served(result.summary, result.request_columns)
    if empty:
        typer.echo(f"error: {empty}", err=True)
        raise typer.Exit(1)
