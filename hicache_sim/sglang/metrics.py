"""An SGLang server's ``/metrics`` snapshot against a simulated run of the same traffic (the drift check).

- ``parse_snapshot``: the Prometheus text exposition format, read exactly (stdlib only): ``# HELP`` and
  ``# TYPE`` lines, samples ``name{label="value",...} value [timestamp]``; a file that is empty, not
  UTF-8, cut short (its last line has no line end), malformed, or of another server (``vllm:`` names)
  is a :class:`MetricsError` naming the file and line.
- ``FIGURES``: the figures compared, one row each (data, not an if-chain): the SGLang sample, the label
  it selects, how ranks are combined, and the simulated figure it matches.
- ``catalogue``: every metric name each known SGLang release declares
  (``data/sglang/metrics-<version>.json``, made by tools/extract_sglang_metrics.py from the wheel), so
  the report says plainly which figures that version does not export.
- ``SimFigures``: the simulated whole-run figures, from a result folder or a run in memory.
- ``compare``: the drift report; ``expose`` writes a snapshot of simulated figures (what a server that
  behaved exactly as simulated would export).

Labels, types and meanings of the compared metrics, per version: docs/reference/sglang-metrics.md.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..scenario import ScenarioError

VERSIONS = ("0.4.10", "0.5.2", "0.5.23")
_DATA = Path(__file__).resolve().parent.parent / "data" / "sglang"


class MetricsError(ScenarioError):
    """A metrics file this cannot read as an SGLang snapshot: one line naming the file and line."""


# --------------------------------------------------------------------------------- the parser

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE = re.compile(rf'^({_NAME})(?:\{{((?:[^"}}]|"(?:[^"\\]|\\.)*")*)\}})?[ \t]+(\S+)(?:[ \t]+(-?\d+))?[ \t]*$')
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
_TYPES = ("counter", "gauge", "histogram", "summary", "untyped", "gaugehistogram", "info", "stateset", "unknown")
# Suffixes the exposition adds to a family's name in its samples.
_SUFFIXES = ("_bucket", "_sum", "_count", "_created", "_gsum", "_gcount", "_total", "_info")


@dataclass(frozen=True)
class Sample:
    """One sample line: its name, labels, value and line number."""

    name: str
    labels: dict[str, str]
    value: float
    line: int


@dataclass
class Snapshot:
    """A parsed ``/metrics`` text: every sample, and each family's declared type."""

    path: str
    samples: list[Sample] = field(default_factory=list)
    types: dict[str, str] = field(default_factory=dict)

    def series(self, name: str) -> list[Sample]:
        """The samples named ``name``."""
        return [s for s in self.samples if s.name == name]


def _labels(text: str, where: str) -> dict[str, str]:
    out: dict[str, str] = {}
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _LABEL.match(text, pos)
        if m is None:
            raise MetricsError(f"{where}: malformed labels {{{text}}}")
        out[m.group(1)] = re.sub(r"\\[\\\"n]", lambda e: _UNESCAPE[e.group(0)], m.group(2))
        pos = m.end()
    return out


def parse_snapshot(path: str | Path) -> Snapshot:
    """Read a Prometheus text snapshot (``curl http://server/metrics > FILE``) of an SGLang server."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise MetricsError(f"{p}: metrics file not found") from None
    except IsADirectoryError:
        raise MetricsError(f"{p}: is a folder; expected a /metrics text snapshot") from None
    except OSError as e:
        raise MetricsError(f"{p}: cannot read it ({(e.strerror or type(e).__name__).lower()})") from None
    try:
        text = raw.decode("utf-8-sig")  # a byte-order mark, as some editors save, is not a line
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise MetricsError(f"{p}:{line}: not UTF-8 text (byte {raw[e.start]:#04x})") from None
    if not text.strip():
        raise MetricsError(f"{p}: empty; expected a Prometheus text snapshot of an SGLang server's /metrics")
    lines = text.split("\n")
    if lines[-1] != "":
        raise MetricsError(f"{p}:{len(lines)}: truncated (the last line has no line end): {lines[-1][:60]!r}")
    snap = Snapshot(str(p))
    for number, line in enumerate(lines[:-1], start=1):
        where = f"{p}:{number}"
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            parts = stripped[1:].split(None, 3)
            if len(parts) >= 3 and parts[0] == "TYPE":
                if parts[2] not in _TYPES:
                    raise MetricsError(f"{where}: # TYPE {parts[1]}: unknown type {parts[2]!r}")
                snap.types[parts[1]] = parts[2]
            continue  # HELP, EOF, comments
        m = _SAMPLE.match(stripped)
        if m is None:
            raise MetricsError(f"{where}: not a Prometheus sample line: {stripped[:80]!r}")
        try:
            value = float(m.group(3))
        except ValueError:
            raise MetricsError(f"{where}: {m.group(1)}: value {m.group(3)!r} is not a number") from None
        snap.samples.append(Sample(m.group(1), _labels(m.group(2) or "", where), value, number))
    _check_sglang(snap)
    return snap


def _check_sglang(snap: Snapshot) -> None:
    """An SGLang snapshot has ``sglang:`` names; another server's (vLLM's ``vllm:``) is refused."""
    if any(s.name.startswith("sglang:") for s in snap.samples):
        return
    for s in snap.samples:
        if ":" in s.name:
            server = s.name.split(":", 1)[0]
            raise MetricsError(
                f"{snap.path}:{s.line}: {s.name}: a metric of another server ({server}:); expected SGLang's "
                "sglang:* metrics"
            )
    where = f"{snap.path}:{snap.samples[0].line}" if snap.samples else snap.path
    raise MetricsError(
        f"{where}: no sglang:* sample; expected a snapshot of an SGLang server started with --enable-metrics"
    )


# ------------------------------------------------------------------------- what each version has


@functools.cache
def catalogue(version: str) -> dict[str, str]:
    """Metric name -> type that sglang ``version`` declares (its metrics modules, read from the wheel)."""
    doc = json.loads((_DATA / f"metrics-{version}.json").read_text(encoding="utf-8"))
    return {name: m["type"] for name, m in doc["metrics"].items()}


_CACHED = "sglang:cached_tokens_total"
# Labels a version added to a metric it already had: (metric, label) -> versions whose samples carry it.
LABELLED = {(_CACHED, "cache_source"): ("0.5.23",)}


def _declared(version: str, sample: str) -> bool:
    """Whether sglang ``version`` declares the family of sample name ``sample`` (a counter's samples end
    in ``_total`` whether or not its declared name does)."""
    names = catalogue(version)
    return sample in names or sample.removesuffix("_total") in names


def matching_versions(snap: Snapshot) -> tuple[list[str], dict[str, int]]:
    """(versions whose catalogue holds every catalogued name the snapshot has, version -> how many of
    the snapshot's catalogued names it lacks)."""

    def forms(name: str) -> set[str]:
        return {name, f"{name}_total", *(name.removesuffix(x) for x in _SUFFIXES if name.endswith(x))}

    known = set().union(*(catalogue(v) for v in VERSIONS))
    seen = [f for f in map(forms, set(snap.types) | {s.name for s in snap.samples}) if f & known]
    cached = snap.series(_CACHED)
    tiers = any("cache_source" in s.labels for s in cached)
    per_tier = LABELLED[(_CACHED, "cache_source")]
    missing = {}
    for v in VERSIONS:
        lacks = [f for f in seen if not f & set(catalogue(v))]
        if cached and tiers != (v in per_tier):
            lacks.append("cache_source")  # the label, where the version has it or not
        missing[v] = len(lacks)
    return [v for v in VERSIONS if missing[v] == 0], missing


# ---------------------------------------------------------------------------------- the figures


@dataclass(frozen=True)
class SimFigures:
    """A simulated run's figures that a ``/metrics`` snapshot also counts: whole run, every finished
    request (SGLang counts a request when it finishes, from its server's start), tokens."""

    source: str
    requests: int
    prompt_tokens: int
    cached: dict[str, int]  # device, host, storage
    page_size: int
    device_tokens: int
    host_tokens: int
    evicted_tokens: int
    backup_tokens: int  # device -> host
    load_back_tokens: int  # host -> device
    storage_backup_tokens: int  # host -> storage
    prefetched_tokens: int  # storage -> host
    prefetch_inserted_tokens: int  # of those, new to the host tree
    device_cached_tokens: int  # device pool tokens the tree holds when the run ends
    host_used_tokens: int  # host pool tokens in use when the run ends

    @classmethod
    def from_parts(cls, source: str, columns: Any, summary: dict) -> SimFigures:
        """From a run's per-request columns (``status``, ``prompt_tokens``, ``<tier>_hit_tokens``) and its
        summary's counters and sizes; page counters are whole pages of ``page_size`` tokens."""
        import numpy as np

        done = np.asarray(columns["status"]) == "finished"

        def total(name: str) -> int:
            return int(np.asarray(columns[name])[done].sum())

        c, sizes = summary["counters"], summary["sizes"]
        page = int(sizes["page_size"])
        return cls(
            source=source,
            requests=int(done.sum()),
            prompt_tokens=total("prompt_tokens"),
            cached={t: total(f"{t}_hit_tokens") for t in ("device", "host", "storage")},
            page_size=page,
            device_tokens=int(sizes["device_tokens"]),
            host_tokens=int(sizes["host_tokens"]),
            evicted_tokens=int(c["device_evicted_pages"]) * page,
            backup_tokens=int(c["backup_pages"]) * page,
            load_back_tokens=int(c["load_back_pages"]) * page,
            storage_backup_tokens=int(c["storage_backup_pages"]) * page,
            prefetched_tokens=int(c["prefetch_pages"]) * page,
            prefetch_inserted_tokens=int(c["prefetch_inserted_pages"]) * page,
            device_cached_tokens=int(summary["residency"]["device_pages"]) * page,
            host_used_tokens=int(summary["residency"]["host_pages"]) * page,
        )

    @classmethod
    def from_run_dir(cls, folder: str | Path) -> SimFigures:
        """From a finished run's folder: summary.json and requests.parquet."""
        d = Path(folder)
        if not d.is_dir():
            raise MetricsError(f"--run {d}: not a folder; expected a run's result folder (hicache-sim run --out)")
        for name in ("summary.json", "requests.parquet"):
            if not (d / name).is_file():
                raise MetricsError(f"--run {d}: no {name}; expected the folder of one run (not a sweep)")
        try:
            summary = json.loads((d / "summary.json").read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise MetricsError(f"--run {d / 'summary.json'}: not a summary hicache-sim wrote ({e})") from None
        if not isinstance(summary, dict) or not {"counters", "sizes", "residency"} <= set(summary):
            raise MetricsError(f"--run {d / 'summary.json'}: no counters, sizes or residency; not a run's summary")
        import pyarrow.parquet as pq

        names = ["status", "prompt_tokens", "device_hit_tokens", "host_hit_tokens", "storage_hit_tokens"]
        try:
            table = pq.read_table(d / "requests.parquet", columns=names)
        except Exception as e:  # pyarrow raises several types for a bad or foreign file
            raise MetricsError(f"--run {d / 'requests.parquet'}: cannot read the request rows ({e})") from None
        try:
            return cls.from_parts(str(d), {n: table.column(n).to_numpy(zero_copy_only=False) for n in names}, summary)
        except (KeyError, TypeError, ValueError) as e:
            raise MetricsError(
                f"--run {d / 'summary.json'}: lacks a figure drift reads ({e}); rerun the scenario"
            ) from None

    @classmethod
    def from_output(cls, source: str, out: Any) -> SimFigures:
        """From a run in memory (``runner.simulate``'s RunOutput)."""
        return cls.from_parts(source, out.request_columns, out.summary)


@dataclass(frozen=True)
class Figure:
    """One compared figure. ``metric``/``select``: the SGLang samples; ``ranks``: ``requests`` (the
    tokenizer counts each request once: every series summed), ``rank`` (each TP and PP rank counts the
    same tokens: the lowest TP and PP rank, DP ranks summed) or ``one`` (a per-rank setting: the lowest
    rank); ``kind``: ``count`` (relative drift), ``share`` (of the prompt tokens: drift in points),
    ``size`` or ``state`` (the pools once the traffic is over); ``sim``: the simulated value
    (``sim_in``: another for some versions, where the metric counted something else)."""

    key: str
    metric: str
    sim: Callable[[SimFigures], float]
    kind: str = "count"
    ranks: str = "requests"
    select: tuple[tuple[str, str], ...] = ()
    sim_in: tuple[tuple[str, Callable[[SimFigures], float]], ...] = ()

    def simulated(self, f: SimFigures, version: str | None) -> float:
        """The simulated value this figure compares with, for a snapshot of sglang ``version``."""
        return float(dict(self.sim_in).get(version, self.sim)(f))


def _tier(t: str) -> Callable[[SimFigures], float]:
    return lambda f: f.cached[t]


FIGURES: tuple[Figure, ...] = (
    Figure("requests finished", "sglang:num_requests_total", lambda f: f.requests),
    Figure("prompt tokens", "sglang:prompt_tokens_total", lambda f: f.prompt_tokens),
    Figure("cached share, all tiers", _CACHED, lambda f: sum(f.cached.values()), "share"),
    *(
        Figure(f"cached share, {t}", _CACHED, _tier(t), "share", select=(("cache_source", t),))
        for t in ("device", "host", "storage")
    ),
    Figure("device pool tokens", "sglang:max_total_num_tokens", lambda f: f.device_tokens, "size", "one"),
    Figure("host pool tokens", "sglang:hicache_host_total_tokens", lambda f: f.host_tokens, "size", "one"),
    Figure("page size", "sglang:page_size", lambda f: f.page_size, "size", "one"),
    # The pools when the traffic is over: 0.5.23 republishes them once idle (at most 30 s after the last
    # batch), and an idle server's device tokens are all evictable.
    Figure("device tokens cached, end", "sglang:kv_evictable_tokens", lambda f: f.device_cached_tokens, "state", "one"),
    Figure("host tokens used, end", "sglang:hicache_host_used_tokens", lambda f: f.host_used_tokens, "state", "one"),
    Figure("device evicted tokens", "sglang:evicted_tokens_total", lambda f: f.evicted_tokens, ranks="rank"),
    Figure(
        "device->host backup tokens",
        "sglang:hicache_backup_tokens_total",
        lambda f: f.backup_tokens,
        ranks="rank",
        select=(("pool", "kv"),),
    ),
    Figure(
        "host->device load-back tokens",
        "sglang:load_back_tokens_total",
        lambda f: f.load_back_tokens,
        ranks="rank",
        select=(("pool", "kv"),),
    ),
    Figure(
        "host->storage backup tokens", "sglang:backuped_tokens_total", lambda f: f.storage_backup_tokens, ranks="rank"
    ),
    # 0.5.2 counts a completed prefetch's tokens less those the host tree already held; 0.5.23 all of them.
    Figure(
        "storage->host prefetch tokens",
        "sglang:prefetched_tokens_total",
        lambda f: f.prefetched_tokens,
        ranks="rank",
        sim_in=(("0.5.2", lambda f: f.prefetch_inserted_tokens),),
    ),
)


def exported(fig: Figure, version: str) -> bool:
    """Whether sglang ``version`` exports ``fig``'s samples (its metric, and the label it selects)."""
    if not _declared(version, fig.metric):
        return False
    return all(version in LABELLED.get((fig.metric, k), (version,)) for k, _ in fig.select)


def _lowest(samples: list[Sample], keys: tuple[str, ...]) -> list[Sample]:
    for k in keys:
        values = [int(s.labels[k]) for s in samples if s.labels.get(k, "").lstrip("-").isdigit()]
        if values:
            low = str(min(values))
            samples = [s for s in samples if s.labels.get(k) == low]
    return samples


def measured(snap: Snapshot, fig: Figure) -> float | None:
    """The snapshot's value of ``fig`` (None: no sample of its metric). A ``cache_source`` tier absent
    while others are present counts 0: SGLang makes a tier's series at its first count."""
    samples = snap.series(fig.metric)
    if not samples:
        return None
    by_tier = any(k == "cache_source" for k, _ in fig.select)
    if by_tier and not any("cache_source" in s.labels for s in samples):
        return None
    samples = [s for s in samples if all(s.labels.get(k) == v for k, v in fig.select)]
    if not samples and not by_tier:
        return None
    if fig.ranks == "rank":
        samples = _lowest(samples, ("tp_rank", "pp_rank"))
    elif fig.ranks == "one":
        samples = _lowest(samples, ("tp_rank", "pp_rank", "dp_rank"))[:1]
    return float(sum(s.value for s in samples))


@dataclass(frozen=True)
class Row:
    """One line of the report: measured, simulated, drift (None when not compared) and a note."""

    key: str
    kind: str
    measured: float | None
    simulated: float
    drift: float | None
    note: str = ""


@dataclass
class Report:
    """The drift check: its rows, the version the snapshot's names match, what that version does not
    export, and what it exports that the snapshot lacks."""

    rows: list[Row]
    version: str | None
    version_note: str
    not_exported: list[str]
    absent: list[str]
    notes: list[str]

    def as_dict(self) -> dict:
        return {
            "sglang_version": self.version,
            "version_note": self.version_note,
            "rows": [r.__dict__ for r in self.rows],
            "not_exported": self.not_exported,
            "absent": self.absent,
            "notes": self.notes,
        }


def _version(snap: Snapshot, given: str | None) -> tuple[str | None, str]:
    if given is not None:
        if given not in VERSIONS:
            raise MetricsError(f"--sglang-version {given}: no metric list for it; known: {', '.join(VERSIONS)}")
        return given, f"sglang {given} (as given)"
    fits, missing = matching_versions(snap)
    if len(fits) == 1:
        return fits[0], f"sglang {fits[0]} (the only catalogued release that has every metric name it shows)"
    if fits:
        return fits[-1], f"fits sglang {', '.join(fits)}; read as {fits[-1]} (give --sglang-version to say)"
    near = min(VERSIONS, key=lambda v: (missing[v], -VERSIONS.index(v)))
    return near, (
        f"fits none of the catalogued releases ({', '.join(VERSIONS)}) exactly; read as the nearest, {near} "
        f"({missing[near]} name(s) it lacks); give --sglang-version to say"
    )


def compare(snap: Snapshot, sim: SimFigures, version: str | None = None) -> Report:
    """The drift of each figure: snapshot minus simulation (relative for counts and sizes, in points of
    the prompt tokens for cached shares)."""
    v, vnote = _version(snap, version)
    prompt = measured(snap, FIGURES[1])
    if prompt is None:
        raise MetricsError(
            f"{snap.path}: no sglang:prompt_tokens_total sample (SGLang makes it when the first request finishes); "
            "take the snapshot after the traffic"
        )
    rows, not_exported, absent, notes = [], [], [], []
    models = {s.labels.get("model_name") for s in snap.series("sglang:prompt_tokens_total")} - {None}
    if len(models) > 1:
        notes.append(f"several model_name values ({', '.join(sorted(models))}): their counts are summed")
    for fig in FIGURES:
        sim_value = fig.simulated(sim, v)
        if fig.kind == "share":
            sim_value = sim_value / sim.prompt_tokens if sim.prompt_tokens else 0.0
        if v is not None and not exported(fig, v):
            not_exported.append(fig.key)
            rows.append(Row(fig.key, fig.kind, None, sim_value, None, f"not exported by sglang {v}"))
            continue
        value = measured(snap, fig)
        if value is None:
            absent.append(fig.key)
            rows.append(Row(fig.key, fig.kind, None, sim_value, None, "not in this snapshot"))
            continue
        if fig.kind == "share":
            value = value / prompt if prompt else 0.0
            drift = value - sim_value
        else:
            drift = (value - sim_value) / sim_value if sim_value else (0.0 if value == 0 else math.inf)
        rows.append(Row(fig.key, fig.kind, value, sim_value, drift))
    return Report(rows, v, vnote, not_exported, absent, notes)


def report_lines(rep: Report, snapshot: str, sim: SimFigures) -> list[str]:
    """The report as text: a table, then what is not exported and what is absent, in words."""
    lines = [
        f"snapshot: {snapshot}: {rep.version_note}",
        f"simulated: {sim.source}: whole run, {sim.requests} finished requests (warm-up included, as a server counts)",
        "",
        f"{'figure':<32}{'measured':>16}{'simulated':>16}{'drift':>12}",
    ]
    for r in rep.rows:
        if r.kind == "share":
            m = "-" if r.measured is None else f"{r.measured:.4f}"
            s = f"{r.simulated:.4f}"
            d = "" if r.drift is None else f"{100 * r.drift:+.2f} pp"
        else:
            m = "-" if r.measured is None else f"{r.measured:,.0f}"
            s = f"{r.simulated:,.0f}"
            d = "" if r.drift is None else ("inf" if math.isinf(r.drift) else f"{100 * r.drift:+.1f} %")
        lines.append(f"{r.key:<32}{m:>16}{s:>16}{d:>12}" + (f"  ({r.note})" if r.note else ""))
    if rep.not_exported:
        lines += ["", f"sglang {rep.version} does not export: {'; '.join(rep.not_exported)}"]
    if rep.absent:
        lines += [
            "",
            f"exported by sglang {rep.version} but not in this snapshot (no count yet, metrics off, or that part "
            f"of the server off: storage counters need --hicache-storage-backend): {'; '.join(rep.absent)}",
        ]
    return lines + [f"note: {n}" for n in rep.notes]


# --------------------------------------------------------------------- a snapshot of simulated figures


def expose(sim: SimFigures, version: str = "0.5.23", *, model: str = "model") -> str:
    """The ``/metrics`` text a server of sglang ``version`` would export had it done exactly what the
    simulation did (one TP rank; only the compared figures, each sample as that version labels it)."""
    out: list[str] = []
    per_tier = version in LABELLED[(_CACHED, "cache_source")]
    for fig in FIGURES:
        if not exported(fig, version) or (fig.key == "cached share, all tiers" and per_tier):
            continue
        value = fig.simulated(sim, version)
        labels = {"model_name": model, **dict(fig.select)}
        if fig.ranks != "requests":
            labels = {**dict(fig.select), "tp_rank": "0", "pp_rank": "0", "dp_rank": "0"}
        text = ",".join(f'{k}="{v}"' for k, v in labels.items())
        kind = "counter" if fig.metric.endswith("_total") else "gauge"
        out += [f"# TYPE {fig.metric} {kind}", f"{fig.metric}{{{text}}} {value!r}"]
    return "\n".join(out) + "\n"
