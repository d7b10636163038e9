"""Workload kinds, one module each (see :mod:`.registry`); importing the package registers them all."""

import importlib
import pkgutil

from .registry import WORKLOAD_KINDS, BuildContext, KindSpec, WorkloadKind

_SUPPORT = {"registry"}
for _m in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    if _m.name not in _SUPPORT:
        importlib.import_module(f"{__name__}.{_m.name}")

__all__ = ["WORKLOAD_KINDS", "BuildContext", "KindSpec", "WorkloadKind"]
