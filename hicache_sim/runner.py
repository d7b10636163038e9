"""Run one scenario end to end: resolve, build the workload, simulate (instant or timed), and write
the result folder atomically (a temporary folder renamed into place: never half-written)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from . import __version__
from .dp_run import add_dp_block, dp_residency, dp_transfers, run_instant_dp
from .instant import run_instant
from .output.columns import Columns
from .output.summary import build_summary
from .output.write import staged_folder
from .request_columns import instant_columns
from .scenario import Resolved, Scenario, resolve, scenario_dump
from .workloads.build import build_workload
from .workloads.records import page_tokens
from .workloads.synthetic import Workload

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class RunOutput:
    """Everything a run produced, in memory. The per-request rows and the time series are kept as
    columns (no pandas needed to summarise, draw or write them); ``requests`` and ``timeseries`` give
    them as DataFrames, made when first asked for."""

    resolved: Resolved
    summary: dict
    request_columns: Columns
    timeseries_columns: Columns
    transfers: pd.DataFrame | None

    @property
    def requests(self) -> pd.DataFrame:
        """One row per request in arrival order (imports pandas)."""
        return self.request_columns.to_frame()

    @property
    def timeseries(self) -> pd.DataFrame:
        """The sampled pool state over the run (imports pandas)."""
        return self.timeseries_columns.to_frame()


def _sizes(r: Resolved) -> dict:
    return {
        "page_size": r.cache.page_size,
        "bytes_per_token": r.bytes_per_token,
        "device_tokens": r.device_tokens,
        "host_tokens": r.host_tokens,
        "device_pages": r.cache.device_pages,
        "host_pages": r.cache.host_pages,
        "host_to_device_ratio": r.host_tokens / r.device_tokens,
        "storage_pages": r.cache.storage_capacity_pages,
        "gpu_memory": _memory(r),
        "warnings": list(r.warnings),
    }


def _memory(r: Resolved) -> dict | None:
    """One rank's memory as SGLang profiles it (bytes), and where the capacity comes from."""
    m = r.memory
    if m is None:
        return None
    hw = r.scenario.hardware
    return {
        "capacity_bytes": m.capacity_bytes,
        "capacity_source": "hardware.memory_mib" if hw.memory_mib else r.gpu.memory_source,
        "context_bytes": m.context_bytes,
        "weight_bytes": m.weight_bytes,
        "mem_fraction_static": m.mem_fraction_static,
        "mem_fraction_static_source": m.mem_fraction_source,
        "reserved_bytes": m.reserved_bytes,
        "kv_pool_bytes": m.kv_pool_bytes,
        "ranks": {"tp": hw.tp, "pp": hw.pp, "stage_layers": r.stage_layers},
    }


def _token_hits(inp: int, n: int, page_size: int, d: int, h: int, s: int) -> tuple[int, int, int]:
    """Tokens of the device, host and storage hit pages of an ``inp``-token prompt of ``n`` pages (the
    hit pages form a prefix in that order)."""
    td = page_tokens(inp, n, page_size, d)
    th = page_tokens(inp, n, page_size, d + h) - td
    ts = page_tokens(inp, n, page_size, d + h + s) - td - th
    return td, th, ts


def _rounds_of(rids, wl: Workload) -> list[int] | None:
    """Multi-turn runs: each row's round (its client's turn), the key of summary.json's ``rounds``."""
    if not (wl.closed_loop and len(rids)):
        return None
    by_rid = {q.rid: q.turn for q in wl.requests}
    return [by_rid[rid] for rid in rids]


def run_instant_scenario(
    r: Resolved, wl: Workload, *, check_invariants: bool, progress: Callable[[int], None] | None, record_transfers: bool
) -> RunOutput:
    sc = r.scenario
    reqs = wl.requests
    page = r.cache.page_size
    chunk = r.chunked_prefill_size
    chunk_pages = max(1, chunk // page) if chunk else None
    every = max(1, len(reqs) // 200)
    series: list[dict] = []
    # What the rows need of each request, kept as it streams past (the requests themselves are not:
    # a lazy trace is read once, in order, and only these columns grow with it).
    seen: dict[str, list] = {"rid": [], "arrival_s": [], "input_tokens": [], "output_tokens": []}

    def stream():
        keep = [seen[name].append for name in seen]
        for req in reqs:
            for append, v in zip(keep, (req.rid, req.arrival_s, req.input_tokens, req.output_tokens), strict=True):
                append(v)
            yield req

    def sample(i: int, cache) -> None:
        if progress is not None:
            progress(i)
        if i % every == 0 or i == len(reqs) - 1:
            res = cache.residency()
            series.append(
                {
                    "request": i,
                    "t_s": seen["arrival_s"][i],
                    **res,
                    "device_used_pages": cache.device.used(),
                    "host_used_pages": cache.host.used(),
                }
            )

    out = (run_instant if r.dp_ranks == 1 else run_instant_dp(r))(
        r.cache,
        stream(),
        chunk_pages=chunk_pages,
        reserve_last_token=sc.scheduler.reserve_last_token,
        check_invariants=check_invariants,
        record_transfers=record_transfers,
        on_request=sample,
    )
    rejected = set(out.rejected)
    # Column by column (one list per column, not a dict per request): a long trace's rows stay small.
    names = instant_columns()  # the values below come in this order
    cols: dict[str, list] = {name: [] for name in names}
    add = [cols[name].append for name in names]
    for i, (rid, arrival, inp, outp) in enumerate(zip(*seen.values(), strict=True)):
        d, h, s = out.device_hit[i], out.host_hit[i], out.storage_hit[i]
        td, th, ts = _token_hits(inp, out.prompt_pages[i], page, d, h, s)
        no = rid in rejected
        values = (
            rid,
            arrival,
            inp,
            outp,
            inp,
            out.prompt_pages[i],
            d,
            h,
            s,
            td,
            th,
            ts,
            "rejected" if no else "finished",
            "device pool too small for the prompt" if no else "",
        )
        for append, v in zip(add, values, strict=True):
            append(v)
    rounds = _rounds_of(cols["rid"], wl)
    if rounds is not None:
        cols["round"] = rounds
    if r.dp_ranks > 1:
        cols["dp_rank"] = out.row_ranks
        series.sort(key=lambda row: row["request"])  # each rank sampled its own requests
    table = Columns(cols)
    summary = build_summary(
        table,
        warmup_fraction=sc.metrics.warmup_fraction,
        counters=out.cache.counter_values(),
        residency=out.cache.residency(),
        sizes=_sizes(r),
        mode="instant",
        warmup_requests=wl.warmup_requests,
    )
    transfers = _frame(out.transfers) if record_transfers else None
    if r.dp_ranks > 1:
        add_dp_block(summary, table, None, [c.counter_values() for c in out.cache.caches])
    return RunOutput(r, summary, table, Columns.from_rows(series), transfers)


def _frame(rows: list[dict]) -> pd.DataFrame:
    """A DataFrame of rows (the transfer log: only runs that record it import pandas)."""
    import pandas as pd

    return pd.DataFrame(rows)


def run_timed_scenario(
    r: Resolved, wl: Workload, *, check_invariants: bool, progress: Callable[[int], None] | None, record_transfers: bool
) -> RunOutput:
    """Timed run whose per-request rows go to a parquet spool in row groups while it runs (none are
    held); the summary and figures read the table back afterwards (exact percentiles need the
    columns). Same rows, same DataFrame, same files as building the table in memory."""
    import tempfile

    import pyarrow.parquet as pq

    from .output.rows import ParquetRows, timed_request_schema
    from .sim.world import run_timed

    sc = r.scenario
    with tempfile.TemporaryDirectory(prefix="hicache-sim-rows-") as spool:
        sink = ParquetRows(Path(spool) / "requests.parquet", timed_request_schema())

        def on_row(row: dict) -> None:
            row["prompt_tokens"] = row["input_tokens"]
            sink.add(row)

        # More than one data-parallel rank: one engine per rank behind SGLang's dispatcher (sim/dp.py).
        kw = {"check_invariants": check_invariants, "progress": progress, "on_row": on_row}
        dp = None
        try:
            if r.dp_ranks > 1:
                from .sim.dp import run_dp_timed

                dp = run_dp_timed(r, wl, keep_transfers=record_transfers, **kw)
                res = dp.total
            else:
                res = run_timed(r, wl, keep_transfers=record_transfers, **kw)
        finally:
            sink.close()
        df = pq.read_table(Path(spool) / "requests.parquet").to_pandas()
        if dp is not None:
            df.insert(len(df.columns) - 1, "dp_rank", dp.row_ranks)
    rounds = _rounds_of(df["rid"], wl)
    if rounds is not None:
        df["round"] = rounds
        # the column order of rows built in memory: prompt_tokens last
        df = df[[c for c in df.columns if c != "prompt_tokens"] + ["prompt_tokens"]]
    table = Columns.from_frame(df)
    series = Columns.from_frame(_frame(res.timeseries))
    summary = build_summary(
        table,
        warmup_fraction=sc.metrics.warmup_fraction,
        counters=res.counters,
        residency=res.cache.residency() if dp is None else dp_residency(dp),
        sizes=_sizes(r),
        mode="timed",
        timed={"sim_time_s": res.sim_time_s, "links": res.links},
        warmup_requests=wl.warmup_requests,
        serving=wl.serving is not None,
        l3=_l3_block(r) if r.cache.storage else None,
        saturation=_saturation_block(r, series, open_loop=_open_loop(wl)),
    )
    transfers = _frame(res.transfers if dp is None else dp_transfers(dp)) if record_transfers else None
    if dp is not None:
        add_dp_block(summary, table, [rank.links for rank in dp.ranks], [rank.counters for rank in dp.ranks])
    return RunOutput(r, summary, table, series, transfers)


def _open_loop(wl: Workload) -> bool:
    """Whether arrivals ignore the server (a trace's times, a Poisson rate): not bench_multiturn's
    clients, not bench_serving under a concurrency cap."""
    capped = wl.serving is not None and wl.serving.max_concurrency is not None
    return not (wl.closed_loop or capped)


def _saturation_block(r: Resolved, series: Columns, *, open_loop: bool) -> Callable[[Columns, Columns, dict], dict]:
    """summary.json's ``saturation`` of a timed run: offered load against the compute model's capacity."""

    def block(measured: Columns, finished: Columns, throughput: dict) -> dict:
        from .output.saturation import saturation_block

        return saturation_block(r, measured, finished, series, open_loop=open_loop, served=throughput)

    return block


def _l3_block(r: Resolved) -> Callable[[Columns], dict]:
    """summary.json's ``l3`` of a timed run with a store: load vs recompute (part (a) of the verdict;
    part (b), the run without the store, is advise's)."""

    def block(measured: Columns) -> dict:
        from .output.l3 import HOW_TO_COMPARE, load_vs_recompute, verdict_line

        a = load_vs_recompute(r, measured)
        return {
            "load_vs_recompute": a,
            "with_without": None,
            "with_without_how": HOW_TO_COMPARE,
            "line": verdict_line(a),
        }

    return block


def simulate(
    sc: Scenario,
    *,
    base_dir: str | Path | None = None,
    check_invariants: bool = False,
    progress: Callable[[int], None] | None = None,
    record_transfers: bool | None = None,
    workload: Workload | None = None,
    resolved: Resolved | None = None,
) -> RunOutput:
    """Resolve and run a scenario in memory (``workload`` and ``resolved``: already made by the caller,
    e.g. to check the output folder or size a progress bar first; made from the scenario otherwise).
    A ``resolved`` given must come from ``resolve(sc, strict=check_invariants)``."""
    r = resolved if resolved is not None else resolve(sc, strict=check_invariants)
    wl = workload if workload is not None else build_workload(sc, r.cache.page_size, base_dir)
    record = sc.metrics.transfer_log if record_transfers is None else record_transfers
    runner = run_timed_scenario if sc.mode == "timed" else run_instant_scenario
    out = runner(r, wl, check_invariants=check_invariants, progress=progress, record_transfers=record)
    if sc.workload.kind == "trace" and sc.workload.trace.format == "mooncake":
        from .output.observed import attach_observed  # the server's cached_tokens, when the trace has them
        from .workloads.traces import trace_path

        attach_observed(out, trace_path(sc.workload.trace.path, base_dir))
    return out


def versions() -> dict:
    """Library versions of this process: written to ``environment.json`` (not tracked in git), so that
    committed result folders do not change with the machine that re-made them."""
    import sys
    from importlib.metadata import version

    import numpy
    import pyarrow
    import pydantic

    return {
        "hicache_sim": __version__,
        "python": ".".join(map(str, sys.version_info[:3])),
        "numpy": numpy.__version__,
        "pandas": version("pandas"),
        "pyarrow": pyarrow.__version__,
        "simpy": version("simpy"),  # read, not imported: an instant run needs no simpy
        "pydantic": pydantic.__version__,
    }


def write_parquet(df: pd.DataFrame, path: Path) -> None:
    """Parquet without the pandas-version metadata block (a table, not a record of the writer)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(df, preserve_index=False).replace_schema_metadata(None)
    pq.write_table(table, path)


def _write_table(cols: Columns, path: Path) -> None:
    """:func:`write_parquet` of columns: the same bytes, with pyarrow alone."""
    import pyarrow.parquet as pq

    pq.write_table(cols.to_arrow(), path)


def write_outputs(
    out: RunOutput, out_dir: str | Path, *, figures: bool = True, extra: dict[str, str] | None = None
) -> Path:
    """Write the result folder atomically (built beside ``out_dir``, then swapped in), with ``extra``
    files (name -> text: ``run --bench-json``'s). The caller checks ``out_dir`` first with
    :func:`hicache_sim.output.write.check_target`."""
    out_dir = Path(out_dir)
    with staged_folder(out_dir, "run") as tmp:
        (tmp / "summary.json").write_text(json.dumps(out.summary, indent=2) + "\n", encoding="utf-8")
        for name, text in (extra or {}).items():
            (tmp / name).write_text(text, encoding="utf-8")
        _write_table(out.request_columns, tmp / "requests.parquet")
        _write_table(out.timeseries_columns, tmp / "timeseries.parquet")
        if out.transfers is not None:
            write_parquet(out.transfers, tmp / "transfers.parquet")
        resolved = {
            "scenario": scenario_dump(out.resolved.scenario),
            "hicache_sim_version": __version__,
            "resolved_sizes": out.summary["sizes"],
        }
        (tmp / "scenario.yaml").write_text(yaml.safe_dump(resolved, sort_keys=False), encoding="utf-8")
        (tmp / "environment.json").write_text(json.dumps(versions(), indent=2) + "\n", encoding="utf-8")
        if figures:
            from .output.plots import run_figures

            name = out.resolved.scenario.name
            summary = out.summary
            run_figures(
                name, summary["mode"], out.request_columns, out.timeseries_columns, tmp, summary.get("saturation")
            )
            if "l3" in out.summary:
                from .output.l3 import l3_figure

                l3_figure(out.summary["l3"]["load_vs_recompute"], None, tmp / "l3.png", f"{name}: L3 verdict")
    return out_dir
