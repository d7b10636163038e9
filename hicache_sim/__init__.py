"""hicache-sim: a discrete-event simulator of SGLang's hierarchical KV cache (HiCache).

In a notebook: ``import hicache_sim as hs; r = hs.run("builtin:default", cache__host_ratio=0.5)``;
``hs.sweep(scenario, {"cache.host_ratio": [0.5, 1, 2]})`` for a grid (see :mod:`hicache_sim.api`).
The API is imported on first use, so ``import hicache_sim`` stays light.
"""

from __future__ import annotations

import sys
import types
from typing import Any

__version__ = "0.1.0"

__all__ = ["Result", "SweepResults", "__version__", "run", "sweep"]


def run(scenario: Any = "builtin:default", **kwargs: Any) -> Any:
    """Simulate one scenario in memory; see :func:`hicache_sim.api.run`."""
    from .api import run as _run

    return _run(scenario, **kwargs)


def sweep(scenario: Any = "builtin:default", grid: dict | None = None, **overrides: Any) -> Any:
    """Run a grid of a scenario in memory; see :func:`hicache_sim.api.sweep`."""
    from .api import sweep as _sweep

    return _sweep(scenario, grid, **overrides)


def __getattr__(name: str) -> Any:
    if name in ("Result", "SweepResults"):
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'hicache_sim' has no attribute {name!r}")


class _Package(types.ModuleType):
    """``hs.sweep`` stays the function above when the submodule ``hicache_sim.sweep`` (the sweep
    runner behind ``hicache-sim sweep``) is imported: importing a submodule binds its name on the
    package, which would hide the function. The submodule stays in ``sys.modules``, where
    ``from hicache_sim.sweep import ...`` finds it."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "sweep" and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
