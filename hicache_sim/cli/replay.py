"""``hicache-sim replay``: perform a transfer log (or the calibration sweep) as real copies, timed.

torch is imported only when the verb runs; without it the verb says which extra to install.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import typer

from . import app
from .common import UserError, progress_bar, user_errors

LOG_SUFFIXES = (".parquet", ".jsonl")
#: What replay writes into its folder (a transfer log's) and with --sweep (the calibration sweep's).
LOG_FILES = ("measurements.parquet", "replay.json")
SWEEP_FILES = ("measurements.parquet", "sweep.json")


def load_replay():
    """The replay package, or one line naming the missing extra and exit code 2."""
    try:
        import hicache_sim.replay as replay
    except ImportError as e:
        typer.echo(f"error: {str(e).splitlines()[0]}", err=True)
        raise typer.Exit(2) from None
    return replay


@contextmanager
def replay_errors(source: str, replay) -> Iterator[None]:
    """User errors (bad input, missing CUDA) exit 2 in one line; a failed integrity check exits 1."""
    from ..calibration.validate import TransferLogError

    try:
        with user_errors(source):
            yield
    except (replay.ReplayError, TransferLogError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    except replay.IntegrityError as e:
        typer.echo(f"error: integrity check failed: {e}", err=True)
        raise typer.Exit(1) from None


def mib(value: int | None) -> int | None:
    return None if value is None else value << 20


@app.command()
def replay(
    source: str | None = typer.Argument(
        None,
        metavar="SOURCE",
        help="scenario YAML or builtin:NAME (its instant-mode transfer log "
        "is generated), or a transfer log (.parquet/.jsonl)",
    ),
    device: str = typer.Option(
        "auto", "--device", metavar="auto|cuda|cpu", help="auto (CUDA when present), cuda or cpu"
    ),
    out: Path | None = typer.Option(
        None,
        "--out",
        metavar="DIR",
        help="output folder (default: results/replay/<scenario>, with --sweep results/calibration/<device>)",
    ),
    sweep: bool = typer.Option(
        False,
        "--sweep",
        help="run the calibration microbenchmark sweep instead (SOURCE, if given, supplies the model dimensions)",
    ),
    limit: int | None = typer.Option(
        None,
        "--limit",
        min=1,
        help="replay only the first N host<->device transfers (with --sweep: page counts up to N)",
    ),
    scenario_opt: str | None = typer.Option(
        None, "--scenario", metavar="SCENARIO", help="scenario of a transfer log (default: the scenario.yaml beside it)"
    ),
    set_: list[str] = typer.Option([], "--set", metavar="KEY=VALUE", help="override a scenario key (repeatable)"),
    h2d: str = typer.Option(
        "per_layer", "--h2d", metavar="per_layer|whole", help="H2D load-back per_layer (as SGLang) or whole"
    ),
    repeats: int | None = typer.Option(
        None,
        "--repeats",
        min=1,
        help="measurements per sweep point (--sweep, default 3), or passes over the log (default 1)",
    ),
    max_pool_mb: int | None = typer.Option(
        None, "--max-pool-mb", min=1, help="cap on each KV pool, MiB (default 256 on CPU, 4096 on CUDA)"
    ),
    threads: int = typer.Option(1, "--threads", min=1, help="torch threads for CPU copies"),
    clock: str | None = typer.Option(
        None,
        "--clock",
        metavar="cpu|wall",
        help="--sweep on CPU: time copies by this thread's CPU time (cpu: leaves out the slices the "
        "scheduler gives to other processes; the default with --threads 1) or by elapsed time (wall)",
    ),
    reference: bool = typer.Option(
        False,
        "--reference/--no-reference",
        help="--sweep: time a fixed reference copy before each point and divide out the drift it shows "
        "(raw durations stay in duration_raw_s)",
    ),
) -> None:
    """Execute SOURCE's host<->device transfers as real tensor copies in its memory layout and io backend,
    check integrity, and write one measurement per transfer (measurements.parquet) for `calibrate`."""
    if h2d not in ("per_layer", "whole"):
        with user_errors():
            raise UserError(f"--h2d {h2d!r}: expected per_layer or whole")
    rp = load_replay()
    with replay_errors(source or "", rp):
        if sweep:
            _sweep(rp, source, set_, device, out, limit, repeats or 3, mib(max_pool_mb), threads, reference, clock)
        else:
            if source is None:
                raise UserError("give a scenario or a transfer log (or --sweep)")
            _replay_log(
                source,
                scenario_opt,
                set_,
                device,
                out,
                limit,
                h2d == "per_layer",
                mib(max_pool_mb),
                threads,
                repeats or 1,
            )


def _scenario_for(source: str, scenario_opt: str | None, set_: list[str]):
    """(scenario, transfer-log DataFrame or None) for SOURCE."""
    from ..calibration.validate import read_transfer_log, scenario_beside_log
    from ..scenario import load_scenario

    if Path(source).suffix.lower() in LOG_SUFFIXES:
        log = read_transfer_log(source)
        sc = load_scenario(scenario_opt, set_) if scenario_opt else scenario_beside_log(source)
        return sc, log
    return load_scenario(source, set_), None


def _replay_log(source, scenario_opt, set_, device, out, limit, per_layer, max_pool_bytes, threads, repeats) -> None:
    from ..calibration.validate import count_replayed, replay_transfers, replay_volume, simulate_log
    from ..output.write import atomic_write, check_files_target, mark_files
    from ..scenario import resolve, resolve_builtin

    sc, log = _scenario_for(source, scenario_opt, set_)
    folder = check_files_target(out or Path("results") / "replay" / sc.name, LOG_FILES)
    r = resolve(sc)
    load_replay().KVShape.from_resolved(r)  # a scenario the harness cannot copy: refused before simulating
    if log is None:  # a scenario: its instant-mode log
        res = simulate_log(
            sc.model_copy(update={"mode": "instant"}), base_dir=resolve_builtin(source, "scenarios").parent
        )
        log, r = res.transfers, res.resolved
    records = log.to_dict("records")
    n = count_replayed(log, limit, repeats)
    typer.echo(volume_line(sc.name, *replay_volume(log, limit), repeats, limit), err=True)
    t0 = time.perf_counter()
    with progress_bar(n, f"replay {sc.name}") as bar:
        run = replay_transfers(
            r,
            records,
            device=device,
            limit=limit,
            per_layer=per_layer,
            max_pool_bytes=max_pool_bytes,
            cpu_threads=threads,
            repeats=repeats,
            progress=bar.advance,
        )
    elapsed = time.perf_counter() - t0
    m = run.measurements
    atomic_write(folder / "measurements.parquet", lambda p: m.to_parquet(p, index=False))
    meta = {
        "source": str(source),
        "scenario": sc.name,
        "device": run.device,
        "device_name": run.device_name,
        "layout": sc.cache.mem_layout,
        "io_backend": sc.cache.io_backend,
        "h2d": "per_layer" if per_layer else "whole",
        "transfers": len(m) // repeats,
        "repeats": repeats,
        "skipped_storage_transfers": run.skipped_storage,
        "bytes": int(m["bytes"].sum()) // repeats if len(m) else 0,
        "measured_s": float(m["duration_s"].sum()) / repeats if len(m) else 0.0,
        "wall_s": round(elapsed, 3),
        "integrity": run.integrity,
        "pools": run.pools,
    }
    atomic_write(folder / "replay.json", lambda p: p.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8"))
    gb = meta["bytes"] / 1e9
    checked = "passed" if run.integrity.get("passed") else "not run"
    mark_files(folder, LOG_FILES)
    typer.echo(
        f"{sc.name}: {meta['transfers']} transfers ({gb:.3f} GB) on {run.device} in "
        f"{meta['measured_s']:.3f} s measured (mean of {repeats} passes); integrity {checked}; "
        f"{run.skipped_storage} storage transfers skipped"
    )
    typer.echo(f"wrote {folder}")


def volume_line(name: str, transfers: int, nbytes: int, total: int, repeats: int, limit: int | None) -> str:
    """What the replay is about to copy, said before it starts."""
    passes = f" x {repeats} passes" if repeats > 1 else ""
    hint = (
        f" (the first {transfers} of {total}, --limit)"
        if limit and transfers < total
        else "; --limit N replays only the first N"
        if total > 1
        else ""
    )
    return f"replay {name}: {transfers} host<->device transfers, {nbytes / 1e9:.3f} GB{passes} to copy{hint}"


def _sweep(rp, source, set_, device, out, limit, repeats, max_pool_bytes, threads, reference, clock) -> None:
    from dataclasses import replace

    from ..output.write import atomic_write, check_files_target, mark_files
    from ..scenario import resolve

    cfg = rp.SweepConfig(
        repeats=repeats, max_pool_bytes=max_pool_bytes, cpu_threads=threads, reference=reference, clock=clock
    )
    if clock not in (None, "cpu", "wall"):
        raise UserError(f"--clock {clock!r}: expected cpu or wall")
    cfg.host_clock()  # --clock cpu with --threads > 1: one line before anything is written
    if source is not None:
        sc, _ = _scenario_for(source, None, set_)
        cfg = replace(cfg, shape=rp.KVShape.from_resolved(resolve(sc)))
    if limit is not None:
        cfg = cfg.limited(limit)
    dev = rp.pick_device(device)
    folder = check_files_target(out or Path("results") / "calibration" / dev.type, SWEEP_FILES)
    t0 = time.perf_counter()
    with progress_bar(cfg.size(), f"sweep on {dev.type}") as bar:
        df = rp.run_sweep(cfg, dev, progress=bar.advance)
    elapsed = time.perf_counter() - t0
    atomic_write(folder / "measurements.parquet", lambda p: df.to_parquet(p, index=False))
    meta = rp.sweep.sweep_metadata(cfg, df, dev, elapsed)
    atomic_write(folder / "sweep.json", lambda p: p.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8"))
    mark_files(folder, SWEEP_FILES)
    typer.echo(f"sweep: {len(df)} measurements on {dev.type} in {elapsed:.1f} s")
    typer.echo(f"wrote {folder / 'measurements.parquet'}")
