"""Turn a scenario's ``workload`` section into a Workload: the registered kind's builder
(``workloads/kinds/``) applied to its section."""

from __future__ import annotations

from pathlib import Path

from .errors import WorkloadError
from .kinds import WORKLOAD_KINDS, BuildContext
from .lazy import arrival_times
from .synthetic import Workload
from .traces import TRACES_DIR, trace_path
from .workload import MAX_CLOCK_S

__all__ = ["TRACES_DIR", "build_workload", "trace_path"]


def build_workload(scenario, page_size: int, base_dir: str | Path | None = None) -> Workload:
    """The scenario's requests (and how they are sent, for closed-loop kinds)."""
    w = scenario.workload
    kind = WORKLOAD_KINDS.get(w.kind)
    ctx = BuildContext(seed=scenario.seed, page_size=page_size, partial_pages=w.partial_pages, base_dir=base_dir)
    spec = getattr(w, w.kind)
    workload = kind.build(spec, ctx)
    if scenario.mode == "timed":
        _arrivals_fit_the_clock(workload, w.kind, spec, base_dir)
    return workload


def _arrivals_fit_the_clock(workload: Workload, kind: str, spec, base_dir: str | Path | None) -> None:
    """Refuse a timed workload whose last arrival lies past :data:`MAX_CLOCK_S` before anything runs
    (the world would stop there anyway, after doing the work up to it)."""
    times = arrival_times(workload.requests)
    if not len(times) or max(times) <= MAX_CLOCK_S:
        return
    last = max(times)
    rid = workload.requests[list(times).index(last)].rid
    where = str(trace_path(spec.path, base_dir)) if kind == "trace" else f"workload.{kind}"
    hint = (
        "are its timestamps in the unit the format expects (mooncake: ms, bailian: s)? time_scale multiplies them"
        if kind == "trace"
        else "raise request_rate or lower the request count"
    )
    raise WorkloadError(
        where,
        None,
        f"request {rid} arrives at {last:.4g} s; a timed run's arrivals must fall before {MAX_CLOCK_S:.0f} s "
        f"(97 days), where the simulated clock (a float of seconds) still resolves 1 ns: {hint}",
    )
