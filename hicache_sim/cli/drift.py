"""``hicache-sim drift``: an SGLang server's ``/metrics`` snapshot against the simulated run of the same
traffic (a finished run's folder, or a scenario run now), figure by figure."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from . import app
from .common import UserError, user_errors


@app.command("drift")
def drift_cmd(
    metrics: Path = typer.Argument(
        ..., metavar="METRICS", help="text snapshot of the server's /metrics (curl http://HOST:PORT/metrics > FILE)"
    ),
    run_dir: Path | None = typer.Option(
        None, "--run", metavar="DIR", help="result folder of a finished run that reproduces the server's traffic"
    ),
    scenario: str | None = typer.Option(
        None, "--scenario", metavar="SCENARIO", help="scenario reproducing the traffic, run now (YAML or builtin:NAME)"
    ),
    set_: list[str] = typer.Option([], "--set", metavar="KEY=VALUE", help="override a key of --scenario (repeatable)"),
    version: str | None = typer.Option(
        None,
        "--sglang-version",
        metavar="VERSION",
        help="the server's SGLang version (0.4.10, 0.5.2, 0.5.23); default: the one its metric names fit",
    ),
    as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
) -> None:
    """Compare the per-tier cached tokens (device, host, storage), pool sizes and HiCache transfer counters
    of a server's /metrics snapshot with the simulated run of the same traffic, and say which of them the
    server's SGLang version does not export. Counters cover the server's life: take the snapshot of a
    server that served only that traffic. Nothing is written."""
    from ..sglang.metrics import SimFigures, compare, parse_snapshot, report_lines

    with user_errors(str(metrics)):
        if (run_dir is None) == (scenario is None):
            raise UserError("give one of --run DIR (a finished run) or --scenario SCENARIO (run it now)")
        if set_ and scenario is None:
            raise UserError("--set applies to --scenario only")
        snap = parse_snapshot(metrics)
        if run_dir is not None:
            sim = SimFigures.from_run_dir(run_dir)
        else:
            sim = _simulate(scenario, set_)
        rep = compare(snap, sim, version)
    if as_json:
        typer.echo(json.dumps(rep.as_dict(), indent=1))
        return
    for line in report_lines(rep, str(metrics), sim):
        typer.echo(line)


def _simulate(scenario: str, overrides: list[str]):
    """Run ``scenario`` in memory and take its figures."""
    from ..runner import simulate
    from ..scenario import load_scenario, resolve_builtin
    from ..sglang.metrics import SimFigures

    sc = load_scenario(scenario, overrides)
    out = simulate(sc, base_dir=resolve_builtin(scenario, "scenarios").parent)
    return SimFigures.from_output(f"{scenario} ({sc.mode}, run now)", out)
