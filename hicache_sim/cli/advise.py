"""``hicache-sim advise``: the smallest host memory that meets a target, with its SGLang flags."""

from __future__ import annotations

import contextlib
import os
import shlex
from pathlib import Path

import typer

from . import app
from .common import UserError, output_errors, progress_bar, user_errors
from .nodememory import NODE_MEMORY_HELP, node_memory_option


def _sizes(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(
            f"--host-sizes-gb: expected comma-separated whole GB per rank (60,120,240), got {text!r}"
        ) from None


@app.command()
def advise(
    ctx: typer.Context,
    scenario: str = typer.Argument(..., metavar="SCENARIO", help="scenario YAML or builtin:NAME"),
    target_hit_rate: float | None = typer.Option(
        None, "--target-hit-rate", metavar="X", help="smallest host whose total token hit rate is >= X (0 < X <= 1)"
    ),
    target_ttft_p99: float | None = typer.Option(
        None, "--target-ttft-p99", metavar="S", help="smallest host whose timed TTFT p99 is <= S seconds"
    ),
    host_budget_gb: float | None = typer.Option(
        None, "--host-budget-gb", metavar="G", help="largest host memory to consider, GB per rank"
    ),
    host_sizes_gb: str | None = typer.Option(
        None,
        "--host-sizes-gb",
        metavar="LIST",
        help="host sizes to try, whole GB per rank (default: 0.25x to 4x the device pool)",
    ),
    out: Path | None = typer.Option(
        None, "--out", metavar="DIR", help="advice folder (default: results/<name>-advise); resumes its sweeps"
    ),
    set_: list[str] = typer.Option([], "--set", metavar="KEY=VALUE", help="override a key of the scenario"),
    node_memory: str | None = typer.Option(None, "--node-memory", metavar="GIB|NODE|local", help=NODE_MEMORY_HELP),
    workers: int = typer.Option(max(1, os.cpu_count() or 1), "--workers", help="local worker processes"),
    instant_only: bool = typer.Option(False, "--instant-only", help="no timed runs (no TTFT; hit-rate target only)"),
) -> None:
    """Sweep host size x write policy x host-eviction rule (x storage on/off) in instant mode, time the
    shortlisted points, and print the smallest host memory meeting the target with the SGLang flags.
    With no target: the smallest host within 0.01 of the best hit rate the grid reaches. A target no
    host size meets is said so, with the best reachable point, and still exits 0 (advice.json's
    target.met is false). With a storage backend, the recommendation is also timed without the store:
    the L3 verdict (does loading beat recomputing, does the store lower TTFT) in one line and l3.png."""
    from ..advise import advise as run_advice
    from ..advise import check_target_args, setup
    from ..output.advice import advice_dict, advice_figure, advice_lines
    from ..output.write import check_target, hold_folder, write_text_atomic
    from ..scenario import load_scenario_data, resolve_builtin
    from .sweep import interrupted

    with contextlib.ExitStack() as held:  # the folder is this run's until advice.json is written
        with user_errors(scenario):
            if workers < 1:
                raise UserError(f"--workers: expected an integer >= 1, got {workers}")
            target = check_target_args(target_hit_rate, target_ttft_p99, host_budget_gb)
            if instant_only and target.kind.timed:
                raise UserError("--target-ttft-p99 needs timed runs; drop --instant-only")
            given = node_memory_option(node_memory)
            # a preset stays its name; local is the figure read now, which the recorded command repeats
            node_value = None if given is None else given.node.name if given.node else repr(given.gib)
            if given is not None and not given.source:
                node_value = node_memory.strip()
            sets = [*set_, *([] if node_value is None else [f"hardware.host_memory_gib={node_value}"])]
            data = load_scenario_data(scenario)
            st = setup(data, scenario, list(sets), host_budget_gb, _sizes(host_sizes_gb))
            if given is not None and given.source:
                typer.echo(f"note: node memory {given.source}", err=True)
            if instant_only and st.host_mode.stages:
                raise UserError(
                    f"--instant-only: a {st.host_mode.name} host is sized on timed runs (instant mode finishes "
                    "every copy before the next request, so it cannot see the staging backlog); drop --instant-only"
                )
            name = data.get("name", "scenario") if isinstance(data, dict) else "scenario"
            shown = out or Path("results") / f"{name}-advise"
            folder = check_target(shown, "advise")
            held.enter_context(hold_folder(folder, shown=shown))
            base_dir = str(resolve_builtin(scenario, "scenarios").parent)
            n = 1
            for v in st.axes.values():
                n *= len(v)
            root = Path(__file__).resolve().parents[2]
            try:
                with progress_bar(n, f"{name} advise", unit="points") as bar, output_errors(shown):
                    a = run_advice(
                        data,
                        scenario,
                        folder,
                        target,
                        st,
                        set_args=list(sets),
                        workers=workers,
                        base_dir=base_dir,
                        instant_only=instant_only,
                        root=root,
                        on_point=bar.advance,
                    )
            except KeyboardInterrupt as e:  # finished points of both sweeps are kept
                raise interrupted(ctx, "advise", scenario, folder, shown, e) from None
        import json

        backend = st.storage_backend
        l3, l3_note = None, None
        if backend != "none":
            if instant_only:
                l3_note = f"L3 ({backend}): no verdict with --instant-only (it needs timed runs)"
            else:
                from ..advise import POLICY, RULE, SIZE, point_of
                from ..l3_pair import store_pair

                typer.echo(f"L3 verdict: timing the recommendation with and without the store ({backend})", err=True)
                try:
                    with user_errors(scenario), output_errors(shown):
                        point = point_of(a.chosen, [SIZE, POLICY, RULE]).as_set_args()
                        store = f"cache.storage_backend={json.dumps(backend)}"
                        l3 = store_pair(
                            st.base, scenario, [*sets, *point, store], base_dir=base_dir, folder=folder, workers=workers
                        )
                except KeyboardInterrupt as e:
                    raise interrupted(ctx, "advise", scenario, folder, shown, e) from None
        flags = [
            ("--target-hit-rate", target_hit_rate),
            ("--target-ttft-p99", target_ttft_p99),
            ("--host-budget-gb", host_budget_gb),
            ("--host-sizes-gb", host_sizes_gb),
            ("--node-memory", node_value),
            ("--out", None if out is None else str(out)),
            *(("--set", s) for s in set_),
        ]
        words = [w for f, v in flags if v is not None for w in (f, f"{v:g}" if isinstance(v, float) else v)]
        command = shlex.join(["hicache-sim", "advise", scenario, *words, *(["--instant-only"] if instant_only else [])])
        with output_errors(shown):
            advice_figure(a, folder / "advice.png", f"{name}: host size advice")
            if l3 is not None:
                from ..output.l3 import l3_figure

                l3_figure(l3["load_vs_recompute"], l3["with_without"], folder / "l3.png", f"{name}: L3 verdict")
            d = advice_dict(a, command, l3)
            write_text_atomic(folder / "advice.json", json.dumps(d, indent=1, sort_keys=True) + "\n")
        for line in advice_lines(a, l3):
            typer.echo(line)
        if l3_note:
            typer.echo(l3_note)
        figures = f"{shown / 'advice.png'}" + (f", {shown / 'l3.png'}" if l3 is not None else "")
        typer.echo(f"wrote {shown / 'advice.json'}, {figures} (sweeps in {shown / 'instant'}, {shown / 'timed'})")
