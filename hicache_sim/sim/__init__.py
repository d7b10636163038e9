"""hicache_sim.sim: the timed world. The core decides what moves; the world decides how long it
takes and what waits for it.

- ``links``: PCIe H2D / D2H and storage read / write, processor sharing or FIFO, utilisation.
- ``transport``: core Transfers onto links (per-layer load-backs, sequential storage batches).
- ``compute``: prefill / decode step time from a model x GPU roofline (replaceable).
- ``engine``: SGLang-like scheduler loop (prefetch gating, batches, retraction, post-processing);
  ``admission``: PrefillAdder budgets and chunking; ``decode``: the running batch on a step counter;
  ``requests``: a request's state in the world.
- ``arrivals``: open-loop trace arrivals or closed-loop multi-turn clients.
- ``metrics``: per-request records, time series, transfer log.
- ``world``: wiring, conservation checks, ``run_timed``; it runs on ``hicache_sim.simconfig.SimConfig``
  (plain dataclasses, ``Resolved.sim_config()``), never on the pydantic scenario.
- ``events``: the same-time order of the world's events (one table) and the scheduler inbox's kinds.
"""

from .compute import ComputeModel, ComputeParams, StepTimeModel
from .engine import SchedulerPolicy
from .links import Link
from .world import SimulationError, TimedResult, World, run_timed

__all__ = [
    "ComputeModel",
    "ComputeParams",
    "Link",
    "SchedulerPolicy",
    "SimulationError",
    "StepTimeModel",
    "TimedResult",
    "World",
    "run_timed",
]
