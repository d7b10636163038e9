"""``hicache-sim run``: simulate one scenario and write its result folder."""

from __future__ import annotations

from pathlib import Path

import typer

from ..runner import simulate, write_outputs
from ..scenario import load_scenario, resolve_builtin
from ..workloads.build import build_workload
from . import app
from .common import progress_bar, user_errors

DEFAULT_SCENARIO = "builtin:default"


@app.command()
def run(
    scenario: str = typer.Argument(DEFAULT_SCENARIO, help="scenario YAML, or builtin:NAME (default: the "
                                                          "embedded quick scenario)"),
    out: Path | None = typer.Option(None, "--out", help="result folder (default: results/<scenario name>)"),
    set_: list[str] = typer.Option([], "--set", help="override a key: --set cache.host_ratio=0.5 (repeatable)"),
    check_invariants: bool = typer.Option(False, "--check-invariants",
                                          help="check every cache invariant after each request (slower)"),
    no_figures: bool = typer.Option(False, "--no-figures", help="skip the PNG figures"),
) -> None:
    """Run SCENARIO and write summary.json, requests.parquet, timeseries.parquet, figures and the
    resolved scenario into the result folder."""
    with user_errors(scenario):
        sc = load_scenario(scenario, set_)
        base = resolve_builtin(scenario, "scenarios").parent
        folder = out or Path("results") / sc.name
        wl = build_workload(sc, sc.cache.page_size, base)
        with progress_bar(len(wl.requests), f"{sc.name} ({sc.mode})") as bar:
            result = simulate(sc, base_dir=base, check_invariants=check_invariants,
                              progress=lambda i: bar.advance(), workload=wl)
    for w in result.resolved.warnings:
        typer.echo(f"warning: {w}", err=True)
    write_outputs(result, folder, figures=not no_figures)
    s = result.summary
    hr = s["hit_rate"]
    line = (f"{sc.name}: {s['requests']} requests, token hit rate device {hr['device']:.4f} host {hr['host']:.4f} "
            f"storage {hr['storage']:.4f} total {hr['total']:.4f}")
    if "ttft_s" in s and s["ttft_s"]["p50"] is not None:
        line += f", TTFT p50 {s['ttft_s']['p50']:.3f}s p99 {s['ttft_s']['p99']:.3f}s"
    typer.echo(line)
    typer.echo(f"wrote {folder}")

