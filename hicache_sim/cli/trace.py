"""``hicache-sim trace convert | stats``: your own traffic as a trace, and a trace described.

Heavy modules (numpy, matplotlib, tokenizers) are imported inside the commands: ``--help`` and the
other verbs do not pay for them.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import typer

from . import app
from .common import UserError, output_errors, user_errors

trace_app = typer.Typer(
    name="trace",
    help="Turn request logs into traces (convert) and describe a trace (stats).",
    no_args_is_help=True,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(trace_app, name="trace")

FORMATS = ("auto", "openai", "sglang", "sglang-dump", "bench-serving", "bench-multiturn")
SHOWN_SKIPS = 10
TRACE_BLOCK_SIZES = {"mooncake": 512, "bailian": 16}


def _rate(conv) -> str:
    """Requests per second over the trace's span (a rate 10^3 off says the time unit was misread)."""
    if conv.span_s <= 0:
        return "all at once"
    return f"{(len(conv.lines) - 1) / conv.span_s:.3g} requests/s"


def _is_converted_trace(path: Path) -> bool:
    """Never replace a file: ``--out`` must be new (a converted trace is cheap to make again)."""
    return False


@trace_app.command("convert")
def convert(
    log: Path = typer.Argument(
        ..., metavar="LOG", help="request log (JSONL), or an SGLang request dump (.pkl, or a folder of them)"
    ),
    out: Path = typer.Option(
        ..., "--out", metavar="FILE", help="trace to write (JSONL, Mooncake format); must not exist"
    ),
    fmt: str = typer.Option(
        "auto",
        "--format",
        metavar="FORMAT",
        help="openai | sglang | sglang-dump | bench-serving (auto: from the file)",
    ),
    tokenizer: Path | None = typer.Option(
        None,
        "--tokenizer",
        metavar="PATH",
        help="local tokenizer.json or model folder (default: byte-level fallback, approximate lengths)",
    ),
    block_size: int = typer.Option(512, "--block-size", metavar="N", help="tokens per hash id (Mooncake: 512)"),
    strict: bool = typer.Option(False, "--strict", help="a line that cannot be converted is an error, not a skip"),
    run: int | None = typer.Option(None, "--run", metavar="N", help="bench_serving file with several runs: the Nth"),
    time_unit: str = typer.Option(
        "auto",
        "--time-unit",
        metavar="UNIT",
        help="unit of bare-number timestamps: s | ms | us | ns (auto: Unix time by its magnitude, else seconds)",
    ),
) -> None:
    """Convert LOG (OpenAI chat/completions JSONL, SGLang's JSON request log or request dumps,
    bench_serving --output-details results) into a trace: arrival, prompt and output lengths, one chain hash per
    block of prompt tokens. Prompts are not stored. Chat messages are rendered with a fixed ChatML
    template, each piece tokenised on its own, so every turn of a conversation shares the previous
    turn's blocks."""
    from ..output.write import check_file_target, write_text_atomic
    from ..traffic.clock import TIME_UNITS
    from ..traffic.convert import convert_log, trace_text

    with user_errors(str(log)):
        if fmt not in FORMATS:
            raise UserError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
        if block_size < 1:
            raise UserError(f"--block-size {block_size}: expected an integer >= 1")
        if run is not None and run < 1:
            raise UserError(f"--run {run}: expected an integer >= 1")
        if time_unit != "auto" and time_unit not in TIME_UNITS:
            raise UserError(f"--time-unit {time_unit!r}: expected one of auto, {', '.join(TIME_UNITS)}")
        target = check_file_target(out, _is_converted_trace)
        conv = convert_log(
            log, fmt=fmt, tokenizer=tokenizer, block_size=block_size, strict=strict, run=run, time_unit=time_unit
        )
    with output_errors(out):
        write_text_atomic(target, trace_text(conv))
    for s in conv.skipped[:SHOWN_SKIPS]:
        typer.echo(f"skipped {s.where or f'{log}:{s.line}'}: {s.reason}", err=True)
    if len(conv.skipped) > SHOWN_SKIPS:
        typer.echo(f"skipped {len(conv.skipped) - SHOWN_SKIPS} more lines", err=True)
    for note in conv.notes:
        typer.echo(f"note: {note}", err=True)
    typer.echo(
        f"wrote {out}: {len(conv.lines)} requests over {conv.span_s:,.3f} s ({_rate(conv)}), "
        f"{conv.blocks} distinct blocks of {block_size} tokens, "
        f"{len(conv.skipped)} skipped; tokens: {conv.tokenizer}"
    )
    typer.echo(f"use it: workload: {{kind: trace, trace: {{path: {out}, block_size: {block_size}}}}}")


@trace_app.command("stats")
def stats(
    trace: str = typer.Argument(..., metavar="TRACE", help="trace file or builtin:NAME"),
    fmt: str = typer.Option("mooncake", "--format", metavar="FORMAT", help="mooncake | bailian"),
    block_size: int | None = typer.Option(
        None, "--block-size", metavar="N", help="tokens per hash id (default: 512 mooncake, 16 bailian)"
    ),
    out: Path | None = typer.Option(
        None, "--out", metavar="DIR", help="folder for stats.json and trace_stats.png (default: <trace name>-stats)"
    ),
) -> None:
    """Describe TRACE: requests, rate over time, prompt/output lengths, the ideal (infinite-cache) hit
    rate and the reuse-distance distribution, with a figure."""
    import json

    from ..output.write import check_target, hold_folder, staged_folder
    from ..traffic.figure import stats_figure
    from ..traffic.stats import stats_text, trace_stats
    from ..workloads.traces import open_bailian, open_mooncake, trace_path

    with contextlib.ExitStack() as held:
        with user_errors(trace):
            if fmt not in TRACE_BLOCK_SIZES:
                raise UserError(f"--format {fmt!r}: expected one of {', '.join(TRACE_BLOCK_SIZES)}")
            if block_size is not None and block_size < 1:
                raise UserError(f"--block-size {block_size}: expected an integer >= 1")
            bs = block_size or TRACE_BLOCK_SIZES[fmt]
            path = trace_path(trace)
            folder = out if out is not None else Path(f"{path.stem}-stats")
            target = check_target(folder, "trace-stats")
            held.enter_context(hold_folder(target, shown=folder))
            load = open_mooncake if fmt == "mooncake" else open_bailian
            requests = load(path, bs, block_size=bs)  # read once, in order: never held whole
            if not requests:
                raise UserError(f"{path}: trace has no requests")
            summary, arrays = trace_stats(requests, bs)
        summary = {"trace": trace, "format": fmt, **summary}
        with output_errors(folder), staged_folder(target, "trace-stats") as tmp:
            (tmp / "stats.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
            stats_figure(arrays, tmp / "trace_stats.png", f"{path.name}: {len(requests):,} requests")
    typer.echo(stats_text(path.name, summary))
    typer.echo(f"wrote {folder}/stats.json and {folder}/trace_stats.png")
