"""The workload-kind registry: ``workload.kind`` -> its section's spec class and its builder.

Every kind is one module of this package (found and imported by ``kinds/__init__.py``) that
registers a :class:`WorkloadKind`. The registry feeds the scenario schema (``workload.kind``'s choices
and one ``workload.<kind>`` section per entry), ``workloads/build.py`` and the tests (each kind needs
a case in ``tests/test_modes.py``; a guard test fails for a kind without one).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ...core.registry import Registry
from ...strict import StrictSpec
from ..workload import Workload


class KindSpec(StrictSpec):
    """Base of a workload kind's section ``workload.<kind>``."""


@dataclass(frozen=True)
class BuildContext:
    """What a builder gets besides its section: the scenario seed, the page size, whether a last
    partial page is a page (``workload.partial_pages``), and the scenario file's folder."""

    seed: int
    page_size: int
    partial_pages: str = "keep"
    base_dir: str | Path | None = None


@dataclass(frozen=True)
class WorkloadKind:
    """One ``workload.kind``: its section's schema, the builder turning it into a Workload, and the
    line the schema shows for its section."""

    spec: type[KindSpec]
    build: Callable[[KindSpec, BuildContext], Workload]
    description: str


WORKLOAD_KINDS: Registry[WorkloadKind] = Registry("workload kind", "workload.kind")
