"""What ``advise`` reads its answer from, shared by the orchestrator (``hicache_sim/advise.py``) and the
rendering (``output/advice.py``): the sweep table's columns, the target kinds, the order advice prefers
rows in, and the records an answer is made of. It sits on the output floor so the rendering never
imports the orchestrator above it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from ..core import HOST_EVICTION_RULES, WRITE_POLICIES
from ..core.policies import HOST_MEMORY_MODES, HostMemoryMode
from ..core.registry import Registry
from .saturation import SATURATED

SIZE, POLICY, RULE, STORAGE = "cache.host_size_gb", "cache.write_policy", "cache.host_eviction", "cache.storage_backend"
HIT, TTFT = "hit_rate.total", "ttft_s.p99"
#: A timed row's overload verdict (summary.json ``saturation``, output/saturation.py): a saturated run's
#: TTFT measures a queue that grows as long as requests arrive, so it never meets a target.
VERDICT = "saturation.verdict"
TIERS = ("device", "host", "storage", "total")
UPSTREAM_RULE = "evicted_only"  # SGLang's own host eviction; the other rules are hicache-sim's proposals
# With no target: the smallest host within this much (absolute) of the best hit rate in the budget.
KNEE_TOLERANCE = 0.01


@dataclass(frozen=True)
class TargetKind:
    """One kind of target: the table column it is read from, which way is better, and whether it is
    judged on timed runs (a TTFT exists only there) or on instant mode's hit rates."""

    name: str
    column: str
    lower_is_better: bool
    timed: bool

    def meets(self, x: float, value: float) -> bool:
        return x <= value if self.lower_is_better else x >= value

    def best(self, values: pd.Series) -> float:
        return values.min() if self.lower_is_better else values.max()


TARGET_KINDS: Registry[TargetKind] = Registry("target kind", "advise target")
TARGET_KINDS.add("hit_rate", TargetKind("hit_rate", HIT, lower_is_better=False, timed=False))
TARGET_KINDS.add("ttft_p99", TargetKind("ttft_p99", TTFT, lower_is_better=True, timed=True))


@dataclass(frozen=True)
class Target:
    """What to meet: a kind of :data:`TARGET_KINDS` (``hit_rate``: >= value; ``ttft_p99``: <= value,
    seconds; a name is looked up) and its value; None = the knee (hit rate only)."""

    kind: TargetKind
    value: float | None

    def __post_init__(self) -> None:
        if isinstance(self.kind, str):
            object.__setattr__(self, "kind", TARGET_KINDS.get(self.kind))

    @property
    def column(self) -> str:
        return self.kind.column

    def meets(self, x: float, value: float | None = None) -> bool:
        v = self.value if value is None else value
        assert v is not None, "a knee target is met against the value advise derived for it"
        return self.kind.meets(x, v)


@dataclass
class Setup:
    """The base scenario for the sweeps and its grid."""

    base: dict
    sizes_gb: list[int]
    axes: dict[str, list[Any]]
    device_gb: float
    bytes_per_token: int
    ranks: int
    calibration: str | None
    notes: list[str] = field(default_factory=list)
    # What host memory is for; a staging host has its hit-rate targets judged on timed runs.
    host_mode: HostMemoryMode = field(default_factory=lambda: HOST_MEMORY_MODES.get("cache"))
    storage_backend: str = "none"  # the scenario's store (with one, advise adds the L3 verdict)


@dataclass
class Advice:
    """The answer and what it was read from."""

    target: Target
    target_value: float
    met: bool
    chosen: pd.Series  # instant row (hit-rate target) or timed row (TTFT target)
    chosen_instant: pd.Series  # the chosen configuration's instant row
    timed: pd.Series | None  # the timed run of the chosen point, when one ran
    instant: pd.DataFrame
    timed_table: pd.DataFrame | None
    upstream: pd.Series | None  # the same answer restricted to SGLang's upstream rule (an instant row
    # for a hit-rate target, a timed row for TTFT), when the chosen rule is another
    setup: Setup
    validation: str
    launch: tuple[str, list[str]] = ("", [])  # the SGLang command of the chosen point, and its notes


def ordered(table: pd.DataFrame) -> pd.DataFrame:
    """Rows in the order advice prefers them: smallest host, highest hit rate, then SGLang's upstream
    rule, registry order of policy and rule, storage off before on (less hardware for the same hits)."""
    t = table.copy()
    t["_rule"] = t[RULE].map(lambda r: (r != UPSTREAM_RULE, HOST_EVICTION_RULES.names().index(r)))
    t["_policy"] = t[POLICY].map(WRITE_POLICIES.names().index)
    t["_storage"] = (t[STORAGE] != "none") if STORAGE in t else False
    t = t.sort_values(
        [SIZE, HIT, "_rule", "_policy", "_storage"], ascending=[True, False, True, True, True], kind="stable"
    )
    return t.drop(columns=["_rule", "_policy", "_storage"]).reset_index(drop=True)


def curve(table: pd.DataFrame) -> pd.DataFrame:
    """The best configuration at each host size (the first row of each size in :func:`ordered`)."""
    return ordered(table).groupby(SIZE, sort=True).head(1).reset_index(drop=True)


def saturated(row: pd.Series) -> bool:
    """Whether a timed row's run was saturated (instant rows, and points timed before the verdict
    existed, are not)."""
    return row.get(VERDICT) == SATURATED


def smallest_meeting(table: pd.DataFrame, target: Target, value: float) -> pd.Series | None:
    """The first row of :func:`ordered` meeting ``value`` on the target's column and not saturated, or None."""
    t = ordered(table)
    meets = t[target.column].map(lambda x: target.meets(x, value))
    if VERDICT in t:
        meets &= t[VERDICT] != SATURATED
    ok = t[meets]
    return None if ok.empty else ok.iloc[0]


def best_reachable(table: pd.DataFrame, target: Target) -> pd.Series:
    """The best value the table reaches on the target's column (ties: the smallest host)."""
    t = ordered(table)
    col = t[target.column]
    return t[col == target.kind.best(col)].iloc[0]
