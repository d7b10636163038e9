"""Turn a scenario's ``workload`` section into a Workload: the registered kind's builder
(``workloads/kinds/``) applied to its section."""

from __future__ import annotations

from pathlib import Path

from .kinds import WORKLOAD_KINDS, BuildContext
from .synthetic import Workload
from .traces import TRACES_DIR, trace_path

__all__ = ["TRACES_DIR", "build_workload", "trace_path"]


def build_workload(scenario, page_size: int, base_dir: str | Path | None = None) -> Workload:
    """The scenario's requests (and how they are sent, for closed-loop kinds)."""
    w = scenario.workload
    kind = WORKLOAD_KINDS.get(w.kind)
    ctx = BuildContext(seed=scenario.seed, page_size=page_size, partial_pages=w.partial_pages, base_dir=base_dir)
    return kind.build(getattr(w, w.kind), ctx)
