"""``advise``: the smallest host memory that meets a hit-rate or TTFT target, read from sweeps.

Two stages through :func:`hicache_sim.sweep.run_sweep` (resumable, parallel): instant mode over the
whole grid (host GB per rank x write policy x host-eviction rule, storage on and off when the
scenario has a backend), then timed mode for the few points instant mode shortlists (TTFT needs
timed mode). A hit-rate target is judged on instant mode's hit rates; a TTFT target on timed mode's
p99, simulated for the configuration with the best instant hit rate at each host size, smallest
sizes first, until one meets it. When the answer uses one of hicache-sim's proposed host rules, the
same search is made over SGLang's own rule too, so the advice also says what SGLang can launch today.

``buffer_only`` host memory is sized too, as the staging buffer it is: the host holds prefetched pages
until their request is admitted and a request's pages until storage has them, so a buffer smaller
than what is in flight loses storage hits. Only the size is swept (the write policies buffer_only
allows, SGLang's host rule: no host cache to evict from, storage always on), and a hit-rate target is
judged on timed runs too: instant mode completes every copy before the next request, so it sees a
request's own need but not the backlog of writes under load.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from .core import HOST_EVICTION_RULES, WRITE_POLICIES
from .core.policies import HOST_MEMORY_MODES
from .output.advice_table import (  # noqa: F401  (the table's names, re-exported for advise's callers)
    HIT,
    KNEE_TOLERANCE,
    POLICY,
    RULE,
    SIZE,
    STORAGE,
    TARGET_KINDS,
    TIERS,
    TTFT,
    UPSTREAM_RULE,
    VERDICT,
    Advice,
    Setup,
    Target,
    best_reachable,
    curve,
    ordered,
    saturated,
    smallest_meeting,
)
from .output.write import prepare_folder
from .scenario import ScenarioError, build_scenario, resolve
from .sweep import Point, plan, run_sweep

# Host pool sizes tried by default, as multiples of the device pool (rounded to whole GB per rank,
# since SGLang's --hicache-size is an integer).
DEFAULT_RATIOS = (0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0)


def check_target_args(hit: float | None, ttft: float | None, budget: float | None) -> Target:
    """The flags as a Target; a value out of range raises ScenarioError naming the flag."""
    if hit is not None and ttft is not None:
        raise ScenarioError("--target-hit-rate and --target-ttft-p99: give one target, not both")
    if hit is not None and not (0 < hit <= 1):
        raise ScenarioError(f"--target-hit-rate: expected a fraction in (0, 1], got {hit:g}")
    if ttft is not None and not (0 < ttft < math.inf):
        raise ScenarioError(f"--target-ttft-p99: expected seconds > 0, got {ttft:g}")
    if budget is not None and not (0 < budget < math.inf):
        raise ScenarioError(f"--host-budget-gb: expected GB per rank > 0, got {budget:g}")
    if ttft is not None:
        return Target(TARGET_KINDS.get("ttft_p99"), ttft)
    return Target(TARGET_KINDS.get("hit_rate"), hit)


def setup(data: dict, source: str, set_args: list[str], budget: float | None, sizes: list[int] | None) -> Setup:
    """Validate the scenario for advice and build the grid (host sizes within the budget)."""
    sc = build_scenario({k: v for k, v in data.items() if k != "sweep"}, source, set_args)
    mode = HOST_MEMORY_MODES.get(sc.cache.host_memory_mode)
    if mode.stages and sc.cache.storage_backend == "none":
        raise ScenarioError(
            f"{source}: cache.host_memory_mode: {mode.name} stages copies to and from storage, and the scenario "
            "has none: give cache.storage_backend, or size a host cache: --set cache.host_memory_mode=cache"
        )
    if sc.cache.host_alignment == "exact":
        raise ScenarioError(
            f"{source}: cache.host_alignment: exact needs page-aligned sizes, which whole GB (--hicache-size) "
            "rarely are; advise sizes as SGLang does: --set cache.host_alignment=up_plus_one"
        )
    r = resolve(sc)
    device_gb = r.device_tokens * r.bytes_per_token / 1e9
    node_cap, node_note = node_limit(r)
    if sizes is None:
        sizes = sorted({max(1, round(q * device_gb)) for q in DEFAULT_RATIOS})
    else:
        bad = [s for s in sizes if s < 1]
        if bad:
            raise ScenarioError(f"--host-sizes-gb: expected whole GB per rank >= 1, got {bad[0]}")
        over = [s for s in sizes if budget is not None and s > budget]
        if over:
            raise ScenarioError(f"--host-sizes-gb: {over[0]} GB is above --host-budget-gb {budget:g}")
        over = [s for s in sizes if node_cap is not None and s > node_cap]
        if over:
            raise ScenarioError(f"--host-sizes-gb: {over[0]} GB per rank is more than {node_note}")
        sizes = sorted(set(sizes))
    if budget is not None:
        if budget < 1:
            raise ScenarioError(f"--host-budget-gb: {budget:g} GB is below 1 GB, the smallest --hicache-size")
        sizes = sorted({s for s in sizes if s <= budget} | {int(budget)})
    node_notes = []
    if node_cap is not None and sizes[-1] > node_cap:
        sizes = sorted({s for s in sizes if s <= node_cap} | {node_cap})
        node_notes.append(f"host sizes capped at {node_cap} GB per rank: more is {node_note}")
    base = {k: v for k, v in data.items() if k != "sweep"}
    base["cache"] = {k: v for k, v in (base.get("cache") or {}).items() if k not in ("host_ratio", "host_tokens")}
    base["cache"].pop("host_size_gb", None)
    notes = ["the scenario's sweep: mapping is not used (advise sweeps its own grid)"] if data.get("sweep") else []
    notes += node_notes
    if mode.stages:
        axes: dict[str, list[Any]] = {
            SIZE: sizes,
            POLICY: [p for p in WRITE_POLICIES.names() if mode.runs(p) == p],
            RULE: [UPSTREAM_RULE],
        }
        notes.append(
            f"{mode.name}: the host is a staging buffer for storage; only its size and the write policies "
            f"{mode.name} runs as themselves are swept, with storage on"
        )
    else:
        axes = {SIZE: sizes, POLICY: WRITE_POLICIES.names(), RULE: HOST_EVICTION_RULES.names()}
        if sc.cache.storage_backend != "none":
            axes[STORAGE] = [sc.cache.storage_backend, "none"]
    hw = sc.hardware
    return Setup(
        base,
        sizes,
        axes,
        device_gb,
        r.bytes_per_token,
        hw.tp * hw.pp * hw.dp,  # every GPU rank's host pool: --dp-size replicas have their own GPUs
        hw.calibration,
        notes,
        mode,
        sc.cache.storage_backend,
    )


def node_limit(r: Any) -> tuple[int | None, str]:
    """The largest host size per rank (whole GB) the node holds, and what holds it back, for a line;
    None when the scenario gives no ``hardware.host_memory_gib``. A node that holds not even 1 GB per
    rank raises ScenarioError: advise would have nothing to propose."""
    from .scenario.preflight import largest_host_gb, node_ranks

    cap = largest_host_gb(r)
    if cap is None:
        return None, ""
    hw = r.scenario.hardware
    why = (
        f"the node holds: {node_ranks(r)} rank(s) pin their host pools (and the pools beside them) in "
        f"hardware.host_memory_gib {hw.host_memory_gib:g} GiB less SGLang's 10 GiB reserve"
    )
    if cap < 1:
        raise ScenarioError(
            f"hardware.host_memory_gib: {hw.host_memory_gib:g} GiB holds no 1 GB host pool for each of "
            f"{node_ranks(r)} rank(s) after SGLang's 10 GiB reserve; advise has no size to propose"
        )
    return cap, why


def point_of(row: pd.Series, keys: list[str]) -> Point:
    return Point(tuple((k, _plain(row[k])) for k in keys))


def _plain(v: Any) -> Any:
    """numpy scalars as Python ones (JSON, YAML and the sweep digests want plain values)."""
    return v.item() if hasattr(v, "item") else v


def launch_command(st: Setup, source: str, set_args: list[str], row: pd.Series) -> tuple[str, list[str]]:
    """The SGLang launch command realising one advised point (``sglang-args``), and what no flag says
    (the host-eviction proposal notes are left to the advice, which says them once)."""
    from .sglang import to_command
    from .sglang.convert import command_line

    sc = build_scenario(st.base, source, [*set_args, *point_of(row, list(st.axes)).as_set_args()])
    tokens, notes = to_command(sc)
    return command_line(tokens), [n for n in notes if not n.startswith(f"{RULE}=")]


def _published_ttft(metric: str) -> bool:
    """A TTFT the sources print (mean per round, bench_serving's mean / median / p99), not one derived
    from them (``ttft_vs_round0``) nor a copy case's TTFT-vs-copy-time point."""
    return metric.startswith("ttft_") and metric.endswith(("_s", "_ms")) and "_vs_" not in metric


def validation_summary(root: Path) -> str:
    """The timed mode's validation error from ``results/validation/results.json`` (median |relative
    error| against published runs, hit rates and TTFT apart), or that it has not been validated."""
    f = root / "results" / "validation" / "results.json"
    try:
        rows = json.loads(f.read_text(encoding="utf-8"))["rows"]
    except (OSError, ValueError, KeyError, TypeError):
        return "timed mode not validated (no results/validation/results.json)"
    parts = []
    for label, pick in (("hit rate", lambda m: m.startswith("hit_rate")), ("TTFT", _published_ttft)):
        errs = sorted(
            abs(r["rel_err"])
            for r in rows
            if isinstance(r, dict) and pick(str(r.get("metric", ""))) and isinstance(r.get("rel_err"), int | float)
        )
        if errs:
            mid = len(errs) // 2
            med = errs[mid] if len(errs) % 2 else (errs[mid - 1] + errs[mid]) / 2
            parts.append(f"{label} median |error| {100 * med:.0f}% over {len(errs)} published figures")
    if not parts:
        return "timed mode not validated (results/validation/results.json has no hit-rate or TTFT rows)"
    return "timed mode vs published runs (results/validation/): " + "; ".join(parts)


def advise(
    data: dict,
    source: str,
    out: Path,
    target: Target,
    st: Setup,
    *,
    set_args: list[str],
    workers: int,
    base_dir: str | None,
    instant_only: bool,
    root: Path,
    on_point: Callable[[], None] | None = None,
) -> Advice:
    """Run the instant grid, choose, then time the shortlist (every grid point is validated before
    ``out`` is made)."""
    instant_base = {**st.base, "mode": "instant", "sweep": st.axes}
    plan(instant_base, source, set_args, base_dir)
    prepare_folder(out, "advise")
    inst = run_sweep(
        instant_base,
        source,
        out / "instant",
        set_args=set_args,
        workers=workers,
        base_dir=base_dir,
        on_point=on_point,
    ).table
    keys = list(st.axes)

    def timed(points: list[Point]) -> pd.DataFrame:
        res = run_sweep(
            {**st.base, "mode": "timed"},
            source,
            out / "timed",
            set_args=set_args,
            workers=workers,
            base_dir=base_dir,
            points=points,
            on_point=on_point,
        )
        return res.table

    upstream = None
    value = target.value
    if not target.kind.timed and value is None:
        value = max(0.0, inst[HIT].max() - KNEE_TOLERANCE)
    if not target.kind.timed and not st.host_mode.stages:
        row = smallest_meeting(inst, target, value)
        met = row is not None
        chosen = row if met else best_reachable(inst, target)
        up_table = inst[inst[RULE] == UPSTREAM_RULE]
        upstream = smallest_meeting(up_table, target, value) if met else best_reachable(up_table, target)
        timed_table = None if instant_only else timed([point_of(chosen, keys)])
        timed_row = None if timed_table is None else timed_table.iloc[0]
        launch = launch_command(st, source, set_args, chosen)
        return Advice(
            target,
            value,
            met,
            chosen,
            chosen,
            timed_row,
            inst,
            timed_table,
            upstream,
            st,
            validation_summary(root),
            launch,
        )

    def time_until_met(cands: pd.DataFrame) -> pd.DataFrame:
        """Time ``cands`` (one configuration per size), smallest first, a batch of ``workers`` at a
        time, until one meets the target; the timed rows."""
        done: list[pd.DataFrame] = []
        for i in range(0, len(cands), max(1, workers)):
            batch = cands.iloc[i : i + max(1, workers)]
            done.append(timed([point_of(r, keys) for _, r in batch.iterrows()]))
            if smallest_meeting(pd.concat(done, ignore_index=True), target, value) is not None:
                break
        return pd.concat(done, ignore_index=True)

    # TTFT (and a buffer_only hit rate): time the best-per-size configurations, smallest first.
    timed_table = time_until_met(curve(inst))
    row = smallest_meeting(timed_table, target, value)
    met = row is not None
    chosen = row if met else best_reachable(timed_table, target)
    if chosen[RULE] != UPSTREAM_RULE:
        # The same search over SGLang's own rule: the answer an operator can launch today. Points the
        # first search timed already are resumed from its folder, not simulated again.
        up_timed = time_until_met(curve(inst[inst[RULE] == UPSTREAM_RULE]))
        up_row = smallest_meeting(up_timed, target, value)
        upstream = up_row if up_row is not None else best_reachable(up_timed, target)
        timed_table = pd.concat([timed_table, up_timed], ignore_index=True).drop_duplicates(keys)
    same = (inst[keys] == pd.Series({k: chosen[k] for k in keys})).all(axis=1)
    launch = launch_command(st, source, set_args, chosen)
    return Advice(
        target,
        value,
        met,
        chosen,
        inst[same].iloc[0],
        chosen,
        inst,
        timed_table,
        upstream,
        st,
        validation_summary(root),
        launch,
    )
