"""Read a deployment's own benchmark result: SGLang's ``bench_serving`` and ``bench_multiturn``, as
the JSONL line each appends to its output file or as the block each prints (saved to a text file).

What each key means, per SGLang's benchmark code (docs/reference/benchmark-results.md):

- ``bench_serving --output-file``: one JSON object per run, figures under bench_serving's own keys
  (``completed``, ``duration``, ``mean_ttft_ms``, ``p99_itl_ms``, ...); the printed "Serving Benchmark
  Result" block has the same figures under labels (``Mean TTFT (ms):``), mapped here to those keys;
  with ``--cache-report`` also the cached tokens and the hit rate (``cache_report``).
- ``bench_multiturn --log-file``: one JSON object per run, ``summary`` (``total_requests``,
  ``average_ttft``, ``p90_ttft``, ... in seconds; later versions add ITL, token throughputs and the
  hit rate) and, with ``--enable-round-barrier``, ``round`` (``round_<i>``: ``average_ttft``,
  ``cache_hit_rate``, ``request_count``); the printed summary (``Average TTFT: 5.18``) and per-round
  lines (``Round 3: Average TTFT = 0.26s, Cache Hit Rate = 0.630580 (128 requests, 128 clients)``).

A file holding several runs (both benchmarks append; bench_multiturn sweeps 13 rates unless told not
to) gives the last run the caller accepts (the scenario's request count and rate), else its last.
Unknown keys and lines are ignored; a known figure that is not a number is an error naming the file
and line.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..hardware.calibration import CalibrationError

SERVING = "bench-serving"
MULTITURN = "bench-multiturn"
FORMATS = (SERVING, MULTITURN)

#: bench_serving's result keys this tool compares (its JSONL keys; the printed block maps onto them).
SERVING_STATS = ("mean", "median", "p90", "p95", "p99")
SERVING_SERIES = ("ttft", "tpot", "itl", "e2e_latency")
SERVING_TOTALS = (
    "completed",
    "duration",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "input_throughput",
    "output_throughput",
    "total_throughput",
    "concurrency",
)
SERVING_KEYS = SERVING_TOTALS + tuple(f"{s}_{n}_ms" for n in SERVING_SERIES for s in SERVING_STATS) + ("max_itl_ms",)
#: Printed label -> key, for the lines that are not "<stat> <series> (ms):".
SERVING_LABELS = {
    "Successful requests": "completed",
    "Benchmark duration (s)": "duration",
    "Total input tokens": "total_input_tokens",
    "Total generated tokens": "total_output_tokens",
    "Request throughput (req/s)": "request_throughput",
    "Input token throughput (tok/s)": "input_throughput",
    "Output token throughput (tok/s)": "output_throughput",
    "Total token throughput (tok/s)": "total_throughput",
    "Concurrency": "concurrency",
    "Total cached tokens": "total_cached_tokens",
    "Cache hit rate": "cache_hit_rate_pct",
}
#: ``--cache-report``'s JSONL keys (under ``cache_report``) this tool compares.
CACHE_REPORT_KEYS = {"total_cached_tokens": "total_cached_tokens", "cache_hit_rate_pct": "cache_hit_rate_pct"}
SERVING_SERIES_LABELS = {"TTFT": "ttft", "TPOT": "tpot", "ITL": "itl", "E2E Latency": "e2e_latency"}
_SERVING_STAT = re.compile(r"^(Mean|Median|P90|P95|P99|Max) (TTFT|TPOT|ITL|E2E Latency) \(ms\):\s*(\S+)")
_LABEL = re.compile(r"^([A-Za-z][^:]*):\s*(\S+)")
SERVING_HEAD = "Serving Benchmark Result"

#: bench_multiturn's summary keys (its later form), in its order (seconds; rates per second): what its
#: --log-file writes (``output/benchjson.py`` writes the same) and what this reader takes.
MULTITURN_SUMMARY = (
    "total_requests",
    "request_rate",
    "average_ttft",
    "median_ttft",
    "p90_ttft",
    "p99_ttft",
    "max_ttft",
    "average_latency",
    "median_latency",
    "p90_latency",
    "p99_latency",
    "max_latency",
    "average_itl",
    "median_itl",
    "p90_itl",
    "p99_itl",
    "max_itl",
    "input_token_throughput",
    "output_token_throughput",
    "throughput",
    "cache_hit_rate",
)
#: The summary's figures (its request rate is a setting of the run, read apart).
MULTITURN_KEYS = tuple(k for k in MULTITURN_SUMMARY if k != "request_rate")
_MT_STAT = re.compile(r"^(Average|Median|P90|P99|Max) (TTFT|latency|ITL):\s*(\S+)", re.IGNORECASE)
_MT_LABELS = {
    "Total requests": "total_requests",
    "Throughput": "throughput",
    "Request Throughput": "throughput",
    "Input token throughput": "input_token_throughput",
    "Output token throughput": "output_token_throughput",
    "Cache Hit Rate": "cache_hit_rate",
}
_MT_ROUND = re.compile(
    r"Round (\d+): Average TTFT = (\S+?)s, Cache Hit Rate = (\S+) \((\d+) requests(?:, \d+ clients)?\)"
)
MULTITURN_HEAD = "Performance metrics summary"
_MT_TOTAL = re.compile(r"^Total requests:\s*(\S+) at (\S+) requests per second")


class BenchResultError(CalibrationError):
    """A benchmark result that cannot be read: one line naming the file, line and field."""


@dataclass
class BenchResult:
    """One benchmark run's figures, keyed as the benchmark's JSONL names them."""

    kind: str  # SERVING or MULTITURN
    path: Path
    figures: dict[str, float] = field(default_factory=dict)
    rounds: list[dict] = field(default_factory=list)  # multiturn: round, average_ttft, cache_hit_rate, request_count
    line: int = 0  # line of the run in the file (1-based)
    runs_in_file: int = 1
    text: bool = False  # read from the printed block rather than the JSONL
    settings: dict[str, float | None] = field(default_factory=dict)  # request_rate, max_concurrency as given

    @property
    def requests(self) -> int | None:
        """The run's finished requests, as the benchmark counts them."""
        key = "completed" if self.kind == SERVING else "total_requests"
        if key in self.figures:
            return int(self.figures[key])
        if self.rounds:
            return sum(int(r["request_count"]) for r in self.rounds)
        return None

    @property
    def count_field(self) -> str:
        """The field that counts the run's requests (for messages)."""
        if self.kind == SERVING:
            return "completed"
        return "summary.total_requests" if "total_requests" in self.figures else "round.request_count"


def sniff(head: str) -> str | None:
    """Which benchmark wrote a file, from its first characters; None when neither."""
    if SERVING_HEAD in head or '"mean_ttft_ms"' in head:
        return SERVING
    if MULTITURN_HEAD in head or '"average_ttft"' in head or _MT_ROUND.search(head):
        return MULTITURN
    return None


def read_head(path: Path, size: int = 1 << 16) -> str:
    """The first ``size`` bytes of a file as text (undecodable bytes replaced): for format detection."""
    try:
        with open(path, "rb") as f:
            return f.read(size).decode("utf-8", errors="replace")
    except OSError:
        return ""


def _number(v: object, where: str) -> float:
    number = not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)
    if not number:
        raise BenchResultError(f"{where}: expected a number, got {v!r}")
    return float(v)


def _text_number(text: str, where: str) -> float:
    try:
        v = float(text.rstrip("s%,"))
    except ValueError:
        raise BenchResultError(f"{where}: expected a number, got {text!r}") from None
    if not math.isfinite(v):
        raise BenchResultError(f"{where}: expected a finite number, got {text!r}")
    return v


def read_bench_result(path: str | Path, kind: str, want: Callable[[BenchResult], bool] | None = None) -> BenchResult:
    """Read ``path`` as a result of ``kind`` (SERVING or MULTITURN), JSONL or printed text: of the runs
    it holds, the last that ``want`` accepts (the scenario's run), else the last."""
    runs = read_bench_runs(path, kind)
    chosen = [r for r in runs if want is None or want(r)]
    return (chosen or runs)[-1]


def read_bench_runs(path: str | Path, kind: str) -> list[BenchResult]:
    """Every run of ``kind`` in ``path``, in file order (JSONL lines, or printed blocks)."""
    p = Path(path)
    if kind not in FORMATS:
        raise BenchResultError(f"--format {kind!r}: expected one of {', '.join(FORMATS)}")
    if not p.is_file():
        raise BenchResultError(f"{path}: benchmark result not found")
    raw = p.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise BenchResultError(f"{path}:{line}: not UTF-8 text; expected a {kind} result") from None
    lines = text.splitlines()
    if not any(s.strip() for s in lines):
        raise BenchResultError(f"{path}: empty; expected a {kind} result")
    first = next(s for s in lines if s.strip()).lstrip()
    if first.startswith("{"):
        runs = [_read_json_run(p, i, obj, kind) for i, obj in _json_lines(p, lines, kind)]
    elif kind == SERVING:
        runs = _read_serving_text(p, lines)
    else:
        runs = _read_multiturn_text(p, lines)
    for r in runs:
        r.runs_in_file = len(runs)
    return runs


def _json_lines(p: Path, lines: list[str], kind: str) -> list[tuple[int, dict]]:
    objs: list[tuple[int, dict]] = []
    for i, s in enumerate(lines, 1):
        if not s.strip():
            continue
        try:
            obj = json.loads(s)
        except json.JSONDecodeError as e:
            raise BenchResultError(f"{p}:{i}: not a JSON object ({e.msg}): truncated or not a {kind} line") from None
        if not isinstance(obj, dict):
            raise BenchResultError(f"{p}:{i}: expected a JSON object per line")
        objs.append((i, obj))
    return objs


def _setting(v: object) -> float | None:
    """A run's request rate or concurrency as the benchmark wrote it (``"inf"``, a number, or none)."""
    if v == "inf":
        return math.inf
    return float(v) if not isinstance(v, bool) and isinstance(v, (int, float)) else None


def _read_json_run(p: Path, line: int, obj: dict, kind: str) -> BenchResult:
    where = f"{p}:{line}"
    out = BenchResult(kind=kind, path=p, line=line)
    if kind == SERVING:
        if "completed" not in obj or "mean_ttft_ms" not in obj:
            other = " (a bench_multiturn --log-file line)" if "summary" in obj else ""
            raise BenchResultError(f"{where}: completed, mean_ttft_ms: missing; not a bench_serving result{other}")
        for k in SERVING_KEYS:
            if obj.get(k) is not None:
                out.figures[k] = _number(obj[k], f"{where}: {k}")
        report = obj.get("cache_report")
        if isinstance(report, dict):
            for k, name in CACHE_REPORT_KEYS.items():
                if report.get(k) is not None:
                    out.figures[name] = _number(report[k], f"{where}: cache_report.{k}")
        out.settings = {
            "request_rate": _setting(obj.get("request_rate")),
            "max_concurrency": _setting(obj.get("max_concurrency")),
        }
        return out
    summary = obj.get("summary")
    if not isinstance(summary, dict) or "average_ttft" not in summary:
        other = " (a bench_serving --output-file line)" if "mean_ttft_ms" in obj else ""
        raise BenchResultError(f"{where}: summary.average_ttft: missing; not a bench_multiturn result{other}")
    for k in MULTITURN_KEYS:
        if summary.get(k) is not None:
            out.figures[k] = _number(summary[k], f"{where}: summary.{k}")
    out.settings = {"request_rate": _setting(summary.get("request_rate"))}
    rounds = obj.get("round") or {}
    if not isinstance(rounds, dict):
        raise BenchResultError(f"{where}: round: expected a mapping of round_<i>")
    for name, r in rounds.items():
        m = re.fullmatch(r"round_(\d+)", str(name))
        if not m or not isinstance(r, dict):
            raise BenchResultError(f"{where}: round.{name}: expected round_<i> with its figures")
        row = {"round": int(m.group(1))}
        for k in ("average_ttft", "cache_hit_rate", "request_count"):
            if k not in r:
                raise BenchResultError(f"{where}: round.{name}.{k}: missing")
            row[k] = _number(r[k], f"{where}: round.{name}.{k}")
        out.rounds.append(row)
    out.rounds.sort(key=lambda r: r["round"])
    return out


def _read_serving_text(p: Path, lines: list[str]) -> list[BenchResult]:
    starts = [i for i, s in enumerate(lines) if SERVING_HEAD in s]
    if not starts:
        raise BenchResultError(f"{p}: no '{SERVING_HEAD}' block; expected bench_serving's printed result")
    return [_serving_block(p, lines, start) for start in starts]


def _serving_block(p: Path, lines: list[str], start: int) -> BenchResult:
    out = BenchResult(kind=SERVING, path=p, line=start + 1, text=True)
    for i in range(start + 1, len(lines)):
        s = lines[i].strip()
        if s.startswith("=" * 10) or SERVING_HEAD in s:
            break
        where = f"{p}:{i + 1}"
        m = _SERVING_STAT.match(s)
        if m:
            stat, series, value = m.groups()
            key = f"{stat.lower()}_{SERVING_SERIES_LABELS[series]}_ms"
            out.figures[key] = _text_number(value, f"{where}: {key}")
            continue
        m = _LABEL.match(s)
        if m and m.group(1).strip() in SERVING_LABELS:
            key = SERVING_LABELS[m.group(1).strip()]
            out.figures[key] = _text_number(m.group(2), f"{where}: {key}")
        elif m and m.group(1).strip() in ("Traffic request rate", "Max request concurrency"):
            name = "request_rate" if m.group(1).startswith("Traffic") else "max_concurrency"
            value = m.group(2)
            out.settings[name] = math.inf if value == "inf" else _setting(_maybe_float(value))
    for need in ("completed", "mean_ttft_ms"):
        if need not in out.figures:
            raise BenchResultError(f"{p}:{start + 1}: {need}: missing from the block (truncated?)")
    return out


def _maybe_float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _read_multiturn_text(p: Path, lines: list[str]) -> list[BenchResult]:
    starts = [i for i, s in enumerate(lines) if MULTITURN_HEAD in s] or [0]
    ends = [*starts[1:], len(lines)]
    return [_multiturn_block(p, lines, a, b) for a, b in zip(starts, ends, strict=True)]


def _multiturn_block(p: Path, lines: list[str], start: int, end: int) -> BenchResult:
    out = BenchResult(kind=MULTITURN, path=p, line=start + 1, text=True)
    rounds: dict[int, dict] = {}
    for i in range(start, end):
        s = lines[i].strip()
        where = f"{p}:{i + 1}"
        m = _MT_ROUND.search(s)
        if m:
            r, ttft, hit, n = m.groups()
            rounds[int(r)] = {
                "round": int(r),
                "average_ttft": _text_number(ttft, f"{where}: round_{r}.average_ttft"),
                "cache_hit_rate": _text_number(hit, f"{where}: round_{r}.cache_hit_rate"),
                "request_count": float(n),
            }
            continue
        m = _MT_STAT.match(s)
        if m:
            stat, series, value = m.groups()
            key = f"{stat.lower()}_{series.lower()}"
            out.figures[key] = _text_number(value, f"{where}: {key}")
            continue
        m = _MT_TOTAL.match(s)
        if m:
            out.figures["total_requests"] = _text_number(m.group(1), f"{where}: total_requests")
            out.settings["request_rate"] = _maybe_float(m.group(2))
            continue
        m = _LABEL.match(s)
        if m and m.group(1).strip() in _MT_LABELS:
            key = _MT_LABELS[m.group(1).strip()]
            out.figures[key] = _text_number(m.group(2), f"{where}: {key}")
    out.rounds = [rounds[k] for k in sorted(rounds)]
    if "average_ttft" not in out.figures and not out.rounds:
        raise BenchResultError(
            f"{p}:{start + 1}: no 'Average TTFT:' summary line and no 'Round <i>: Average TTFT = ...' line; "
            "expected bench_multiturn's printed result"
        )
    return out
