"""Scenarios: the YAML schema (:mod:`.schema`), reading files and ``--set`` overrides (:mod:`.load`),
and resolution into the objects the simulator runs on (:mod:`.resolve`)."""

from ..hardware.presets import IO_BACKENDS, MEM_LAYOUTS
from ..workloads.kinds.long_context import LongContextSpec
from ..workloads.kinds.multiturn import MultiturnSpec
from ..workloads.kinds.poisson_synthetic import PoissonSpec
from ..workloads.kinds.shared_prefix import SharedPrefixSpec
from ..workloads.kinds.trace import TraceSpec
from .load import (
    PACKAGE_DATA,
    build_scenario,
    load_scenario,
    load_scenario_data,
    parse_override,
    resolve_builtin,
    scenario_dump,
    validation_message,
)
from .resolve import Resolved, compute_knobs, memory_plan, model_dims, resolve
from .schema import (
    MAX_COST_US,
    MAX_GENERATED_PAGES,
    MAX_GENERATED_REQUESTS,
    CacheSpec,
    HardwareSpec,
    MetricsSpec,
    ModelSpec,
    PCIeSpec,
    Scenario,
    ScenarioError,
    SchedulerSpec,
    StorageSpec,
    WorkloadSpec,
)

__all__ = [
    "IO_BACKENDS",
    "MAX_COST_US",
    "MAX_GENERATED_PAGES",
    "MAX_GENERATED_REQUESTS",
    "MEM_LAYOUTS",
    "PACKAGE_DATA",
    "CacheSpec",
    "HardwareSpec",
    "LongContextSpec",
    "MetricsSpec",
    "ModelSpec",
    "MultiturnSpec",
    "PCIeSpec",
    "PoissonSpec",
    "Resolved",
    "Scenario",
    "ScenarioError",
    "SchedulerSpec",
    "SharedPrefixSpec",
    "StorageSpec",
    "TraceSpec",
    "WorkloadSpec",
    "build_scenario",
    "compute_knobs",
    "load_scenario",
    "load_scenario_data",
    "memory_plan",
    "model_dims",
    "parse_override",
    "resolve",
    "resolve_builtin",
    "scenario_dump",
    "validation_message",
]
