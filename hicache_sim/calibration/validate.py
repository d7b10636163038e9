"""Does the link model predict the copies a scenario really makes? Replay its transfers and compare.

A calibration's held-out error says how well the model fits microbenchmarks; this says how well it
predicts a workload's own transfers (their sizes, page scatter, per-layer loads): the scenario's
transfer log is executed for real by the replay harness, and each transfer's measured duration is
set against the link model's prediction for it (the scenario's link parameters, a calibration file
when ``hardware.calibration`` names one) and, for a timed log, against the simulated duration.

Also home of the shared "replay a transfer log" step used by ``hicache-sim replay``. torch is
imported only when a replay actually runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..output.write import atomic_write, mark_files
from ..scenario import Resolved, Scenario, build_scenario
from ..scenario import ScenarioError as _ScenarioError
from .fit import ape_stats, predict, scatter_figure

LOG_COLUMNS = ("id", "kind", "pages", "bytes", "device_pages", "host_pages")


class TransferLogError(ValueError):
    """A transfer log that cannot be replayed: one line naming the file and what is wrong."""


# ---------------------------------------------------------------------------- transfer logs


def read_transfer_log(path: str | Path) -> pd.DataFrame:
    """A transfer log written by ``run`` (``transfers.parquet``) or as JSON lines."""
    p = Path(path)
    if not p.is_file():
        raise TransferLogError(f"{path}: transfer log not found")
    try:
        if p.suffix.lower() == ".parquet":
            df = pd.read_parquet(p)
        elif p.suffix.lower() == ".jsonl":
            df = pd.read_json(p, lines=True)
        else:
            raise TransferLogError(f"{path}: expected a .parquet or .jsonl transfer log")
    except TransferLogError:
        raise
    except Exception as e:  # a reader failure is the file's fault
        raise TransferLogError(
            f"{path}: cannot read: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
        ) from None
    missing = [c for c in LOG_COLUMNS if c not in df.columns]
    if missing:
        raise TransferLogError(
            f"{path}: missing column(s) {', '.join(missing)} (a transfer log has {', '.join(LOG_COLUMNS)})"
        )
    return df


def scenario_beside_log(log_path: str | Path) -> Scenario:
    """The scenario ``run`` wrote next to its transfer log (``scenario.yaml`` in the result folder)."""
    import yaml

    p = Path(log_path).with_name("scenario.yaml")
    if not p.is_file():
        raise TransferLogError(f"{log_path}: no scenario.yaml beside the log; give --scenario")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError:
        raise TransferLogError(f"{p}: not valid YAML") from None
    if isinstance(data, dict) and isinstance(data.get("scenario"), dict):
        data = data["scenario"]
    if not isinstance(data, dict):
        raise TransferLogError(f"{p}: expected a scenario mapping")
    try:
        return build_scenario(data, str(p))
    except _ScenarioError as e:
        raise TransferLogError(str(e)) from None


# ---------------------------------------------------------------------------------- replay


@dataclass
class ReplayRun:
    """Measurements of one replayed log, with what was skipped and checked."""

    measurements: pd.DataFrame
    skipped_storage: int
    integrity: dict
    pools: dict
    device: str
    device_name: str


def replay_transfers(
    r: Resolved,
    records: Iterable[Mapping],
    *,
    device: str = "auto",
    limit: int | None = None,
    per_layer: bool = True,
    integrity: bool = True,
    max_pool_bytes: int | None = None,
    cpu_threads: int | None = 1,
    repeats: int = 1,
    progress: Callable[[], None] | None = None,
) -> ReplayRun:
    """Execute a resolved scenario's host<->device transfers for real (after an integrity round trip).

    Pools follow the scenario's model, page size and ``mem_layout``, capped at ``max_pool_bytes``;
    copies use its ``io_backend``. ``limit``: first N host<->device transfers. ``repeats``: the log
    is executed that many times in order (rows carry ``repeat``); ``progress`` ticks per transfer.
    """
    from ..replay import Executor, KVShape, allocate_pools, check_round_trip, execute_log, pick_device
    from ..replay.executor import REPLAYED_KINDS, default_clock
    from ..replay.pools import cpu_threads as threads_ctx
    from ..replay.pools import device_name

    records = list(records)
    dev = pick_device(device)
    shape = KVShape.from_resolved(r)
    c = r.scenario.cache
    with threads_ctx(cpu_threads if dev.type == "cpu" else None):
        pools = allocate_pools(
            shape, c.mem_layout, r.cache.device_pages, r.cache.host_pages, dev, max_pool_bytes=max_pool_bytes
        )
        # timed as the calibration sweep times (CPU time on one torch thread), so the two compare
        clock = default_clock(cpu_threads if dev.type == "cpu" else None)
        ex = Executor(pools, c.io_backend, max_staging_bytes=max_pool_bytes, clock=clock)
        report = {}
        if integrity:
            rep = check_round_trip(ex, pages=32, seed=r.scenario.seed, per_layer=per_layer)
            report = {
                "passed": True,
                "pages": rep.pages,
                "layout": rep.layout,
                "io_backend": rep.io_backend,
                "per_layer": rep.per_layer,
            }
        passes = [
            execute_log(records, ex, per_layer=per_layer, limit=limit, progress=progress).assign(repeat=i)
            for i in range(repeats)
        ]
        df = pd.concat(passes, ignore_index=True)
        name = device_name(dev)
    if not df.empty:
        df["device_name"] = name
    skipped = sum(1 for rec in records if str(rec["kind"]) not in REPLAYED_KINDS)
    pool_info = {
        "device_pages": pools.device_pages,
        "host_pages": pools.host_pages,
        "scenario_device_pages": r.cache.device_pages,
        "scenario_host_pages": r.cache.host_pages,
        "page_bytes": shape.page_bytes,
        "pinned_host": pools.pinned,
        **{f"{k}_shape": list(v) for k, v in pools.sglang_shapes().items()},
    }
    return ReplayRun(df, skipped, report, pool_info, dev.type, name)


# ------------------------------------------------------------------------------- comparison


def compare(measured: pd.DataFrame, r: Resolved, log: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per transfer: measured seconds (the median over repeated passes, with their count), the link
    model's prediction, and the timed log's if any."""
    if measured.empty:
        return measured.assign(predicted_s=[], ape_pct=[])
    if "repeat" in measured.columns:
        firsts = measured.groupby("transfer_id", sort=False).first()
        firsts["duration_s"] = measured.groupby("transfer_id", sort=False)["duration_s"].median()
        firsts["repeats"] = measured.groupby("transfer_id", sort=False).size()
        measured = firsts.drop(columns="repeat").reset_index()
    out = measured.rename(columns={"duration_s": "measured_s"}).copy()
    pred = np.empty(len(out))
    for direction, idx in out.groupby("direction").groups.items():
        sub = out.loc[idx]
        pred[out.index.get_indexer(idx)] = predict(r.links[direction], sub["bytes"], sub["segments"], sub["launches"])
    out["predicted_s"] = pred
    out["ape_pct"] = (out["predicted_s"] - out["measured_s"]).abs() / out["measured_s"] * 100
    if log is not None and "duration_s" in log.columns and log["duration_s"].notna().any():
        sim = log.set_index("id")["duration_s"]
        out["simulated_s"] = out["transfer_id"].map(sim)
    return out


def error_table(cmp: pd.DataFrame) -> pd.DataFrame:
    """Per direction and overall: transfers, median/p90 APE, total measured and predicted seconds."""
    rows = []
    groups = [(d, g) for d, g in cmp.groupby("direction", sort=True)] + [("all", cmp)]
    for name, g in groups:
        if g.empty:
            continue
        med, p90 = ape_stats(g["predicted_s"], g["measured_s"])
        row = {
            "direction": name,
            "transfers": len(g),
            "median_ape_pct": med,
            "p90_ape_pct": p90,
            "measured_total_s": g["measured_s"].sum(),
            "predicted_total_s": g["predicted_s"].sum(),
        }
        row["predicted_over_measured"] = row["predicted_total_s"] / row["measured_total_s"]
        if "simulated_s" in g and g["simulated_s"].notna().any():
            s = g[g["simulated_s"].notna()]
            row["simulated_median_ape_pct"], row["simulated_p90_ape_pct"] = ape_stats(s["simulated_s"], s["measured_s"])
        rows.append(row)
    return pd.DataFrame(rows)


def markdown(table: pd.DataFrame, *, title: str, notes: list[str]) -> str:
    """The error table as Markdown, with what was compared."""
    cols = list(table.columns)
    lines = [
        f"# {title}",
        "",
        *(f"- {n}" for n in notes),
        "",
        "| " + " | ".join(cols) + " |",
        "|" + "|".join("---" if c == "direction" else "---:" for c in cols) + "|",
    ]
    for _, row in table.iterrows():
        cells = []
        for c in cols:
            v = row[c]
            if isinstance(v, (float, np.floating)):
                cells.append(f"{v:.4g}" if "total" in c or "over" in c else f"{v:.1f}")
            else:
                cells.append(str(v))
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "APE: |predicted - measured| / measured, per transfer."]
    return "\n".join(lines) + "\n"


@dataclass
class Validation:
    resolved: Resolved
    run: ReplayRun
    comparison: pd.DataFrame
    table: pd.DataFrame


def simulate_log(sc: Scenario, *, base_dir: str | Path | None = None):
    """Run ``sc`` with its transfer log recorded (RunOutput; ``.transfers`` never None)."""
    from ..runner import simulate

    out = simulate(sc, base_dir=base_dir, record_transfers=True)
    if out.transfers is None:
        out.transfers = pd.DataFrame(columns=list(LOG_COLUMNS))
    return out


def count_replayed(log: pd.DataFrame, limit: int | None = None, repeats: int = 1) -> int:
    """Host<->device transfers a replay of ``log`` will execute (over all repeated passes)."""
    n = int(log["kind"].astype(str).isin(["d2h", "h2d"]).sum()) if len(log) else 0
    return (min(n, limit) if limit else n) * repeats


def replay_volume(log: pd.DataFrame, limit: int | None = None) -> tuple[int, int, int]:
    """(transfers, bytes) one pass of a replay will copy, and the transfers in the whole log, so the user
    learns what a replay costs before it starts (a full scenario can copy hundreds of GB)."""
    if not len(log):
        return 0, 0, 0
    copied = log[log["kind"].astype(str).isin(["d2h", "h2d"])]
    total = len(copied)
    if limit:
        copied = copied.iloc[:limit]
    return len(copied), int(copied["bytes"].sum()), total


def validate_run(
    out,
    *,
    device: str = "auto",
    limit: int | None = None,
    per_layer: bool = True,
    max_pool_bytes: int | None = None,
    cpu_threads: int | None = 1,
    repeats: int = 3,
    progress: Callable[[], None] | None = None,
) -> Validation:
    """Replay a simulated run's transfer log for real (``repeats`` passes, the median per transfer
    compared, as calibration compares the median of a size's repeats) and compare per transfer."""
    log = out.transfers
    run = replay_transfers(
        out.resolved,
        log.to_dict("records"),
        device=device,
        limit=limit,
        per_layer=per_layer,
        max_pool_bytes=max_pool_bytes,
        cpu_threads=cpu_threads,
        repeats=repeats,
        progress=progress,
    )
    cmp = compare(run.measurements, out.resolved, log)
    return Validation(out.resolved, run, cmp, error_table(cmp) if not cmp.empty else pd.DataFrame())


def validate_model(sc: Scenario, *, base_dir: str | Path | None = None, **kw) -> Validation:
    """Simulate ``sc`` for its transfer log, replay it for real, compare per transfer (``validate_run``'s
    keywords)."""
    return validate_run(simulate_log(sc, base_dir=base_dir), **kw)


#: What write_validation puts into its folder.
VALIDATION_FILES = ("validation.parquet", "validation.md", "predicted_vs_measured.png", "validation.json")


def write_validation(v: Validation, out_dir: str | Path) -> list[Path]:
    """validation.parquet (per transfer), validation.md (error table), predicted_vs_measured.png,
    validation.json; the folder's marker lists them as hicache-sim's."""
    out_dir = Path(out_dir)
    sc = v.resolved.scenario
    cal = sc.hardware.calibration or "none (link presets)"
    notes = [
        f"Scenario `{sc.name}` ({sc.mode} mode), model {v.resolved.model.name}, page {sc.cache.page_size} "
        f"tokens, layout {sc.cache.mem_layout}, io backend {sc.cache.io_backend}.",
        f"Link parameters: calibration {cal}. Replayed on {v.run.device} ({v.run.device_name}); "
        f"{len(v.comparison)} host<->device transfers, {v.run.skipped_storage} storage transfers skipped.",
        f"Integrity round trip: {'passed' if v.run.integrity.get('passed') else 'not run'}.",
        "Predicted: the link model for each transfer alone on its link (an H2D loaded per layer is "
        "one operation per layer).",
    ]
    if "simulated_s" in v.comparison.columns:
        notes.append(
            "Simulated: the timed world's duration from its transfer log. It includes sharing the link "
            "with concurrent transfers and, for H2D, the whole step's merged layer-by-layer load; the "
            "replay runs each transfer alone, so differences there are not model error."
        )
    written = [
        atomic_write(out_dir / "validation.parquet", lambda p: v.comparison.to_parquet(p, index=False)),
        atomic_write(
            out_dir / "validation.md",
            lambda p: p.write_text(
                markdown(v.table, title=f"Link model vs replay: {sc.name}", notes=notes), encoding="utf-8"
            ),
        ),
    ]
    if not v.comparison.empty:
        rows = v.comparison.rename(columns={"measured_s": "duration_s"})
        scatter_figure(
            rows,
            out_dir / "predicted_vs_measured.png",
            f"{sc.name}: link model ({Path(str(cal)).name}) vs replay on {v.run.device}",
        )
        written.append(out_dir / "predicted_vs_measured.png")
    meta = {
        "scenario": sc.name,
        "device": v.run.device,
        "device_name": v.run.device_name,
        "integrity": v.run.integrity,
        "pools": v.run.pools,
        "skipped_storage": v.run.skipped_storage,
    }
    written.append(
        atomic_write(
            out_dir / "validation.json", lambda p: p.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        )
    )
    mark_files(out_dir, VALIDATION_FILES)
    return written


__all__ = [
    "TransferLogError",
    "Validation",
    "compare",
    "count_replayed",
    "error_table",
    "read_transfer_log",
    "replay_transfers",
    "scenario_beside_log",
    "simulate_log",
    "validate_model",
    "validate_run",
    "write_validation",
]
