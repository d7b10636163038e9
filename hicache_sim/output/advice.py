"""The advice as text, as ``advice.json`` and as a figure: hit rate per host size (the best
configuration at each size, and every configuration faint), the target and the chosen point marked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from .advice_table import (
    HIT,
    KNEE_TOLERANCE,
    POLICY,
    RULE,
    SIZE,
    STORAGE,
    TIERS,
    TTFT,
    UPSTREAM_RULE,
    Advice,
    curve,
    saturated,
)
from .saturation import SATURATED, fits

PROPOSAL_NOTE = (
    "host eviction {rule!r} is a hicache-sim proposal, not an SGLang option: SGLang has no flag for it "
    "(upstream is evicted_only)"
)


def _config(row: pd.Series) -> dict[str, Any]:
    c = {"host_size_gb": int(row[SIZE]), "write_policy": row[POLICY], "host_eviction": row[RULE]}
    if STORAGE in row:
        c["storage_backend"] = row[STORAGE]
    return c


def _hits(row: pd.Series) -> dict[str, float]:
    return {t: float(row[f"hit_rate.{t}"]) for t in TIERS}


def saturation_record(row: pd.Series | None) -> dict[str, Any] | None:
    """A timed row's ``saturation`` block, nested again from its flat columns (None: no timed row, or
    one timed before the block existed)."""
    if row is None or "saturation.verdict" not in row:
        return None
    out: dict[str, Any] = {}
    for key, v in row.items():
        if isinstance(key, str) and key.startswith("saturation."):
            *path, last = key.split(".")[1:]
            node = out
            for p in path:
                node = node.setdefault(p, {})
            node[last] = None if isinstance(v, float) and v != v else (v.item() if hasattr(v, "item") else v)
    return out


def refusal(a: Advice) -> str | None:
    """Why advise does not size from its timed runs: the one it would answer with is saturated (its TTFT
    is a queue growing while requests arrive). None when the answer stands, or rests on instant mode
    (a hit-rate target on a host cache: the saturated timed run only says its TTFT is the queue's)."""
    on_timed = a.target.kind.timed or a.setup.host_mode.stages
    if a.timed is None or not saturated(a.timed) or not on_timed:
        return None
    return (
        f"the timed run at {int(a.chosen[SIZE])} GB per rank is saturated: its TTFT measures a queue that grows "
        "while requests arrive, not the host size"
    )


def without_storage(a: Advice) -> pd.Series | None:
    """The best storage-off configuration at the chosen size (None when storage was not swept): what
    the storage tier adds there."""
    if STORAGE not in a.instant:
        return None
    t = a.instant[(a.instant[SIZE] == a.chosen[SIZE]) & (a.instant[STORAGE] == "none")]
    return None if t.empty else curve(t).iloc[0]


def upstream_meets(a: Advice) -> bool:
    """Whether the upstream-rule answer meets the target (a saturated timed row never does)."""
    u = a.upstream
    return bool(a.target.meets(u[a.target.column], a.target_value) and not saturated(u))


def upstream_record(a: Advice) -> dict[str, Any]:
    """The upstream-rule answer as data: its instant hit rates (hit-rate target) or its timed ones
    and TTFT (TTFT target, where it is a timed row), and whether it meets the target."""
    u = a.upstream
    rec: dict[str, Any] = {**_config(u), "meets_target": upstream_meets(a)}
    if a.target.kind.timed:
        rec.update(hit_rate_timed=_hits(u), ttft_p99_s=float(u[TTFT]), saturated=saturated(u))
    else:
        rec["hit_rate_instant"] = _hits(u)
    return rec


def advice_dict(a: Advice, command: str, l3: dict[str, Any] | None = None) -> dict[str, Any]:
    """Everything the text says, as data (``target.met`` is what a script should test); ``l3``: the
    storage verdict of the recommendation (:func:`hicache_sim.l3_pair.store_pair`), when it ran."""
    inst = a.chosen_instant
    out: dict[str, Any] = {
        "command": command,
        "target": {
            "kind": a.target.kind.name,
            "value": a.target_value,
            "given": a.target.value is not None,
            "met": a.met,
        },
        "recommendation": {
            **_config(a.chosen),
            "host_total_gb": int(a.chosen[SIZE]) * a.setup.ranks,
            "host_to_device_ratio": float(inst["sizes.host_to_device_ratio"]),
            "hit_rate_instant": _hits(inst),
            "hit_rate_timed": None if a.timed is None else _hits(a.timed),
            "ttft_p99_s": None if a.timed is None else float(a.timed[TTFT]),
            "ttft_p50_s": None if a.timed is None else float(a.timed["ttft_s.p50"]),
            "sglang_command": a.launch[0],
            "sglang_notes": a.launch[1],
            "sglang_supported": a.chosen[RULE] == UPSTREAM_RULE,
        },
        "saturation": saturation_record(a.timed),
        "refused": refusal(a),
        "upstream_rule": None if a.upstream is None else upstream_record(a),
        "without_storage": None if (w := without_storage(a)) is None else {**_config(w), "hit_rate_instant": _hits(w)},
        "confidence": confidence(a),
        "grid": {k: list(v) for k, v in a.setup.axes.items()},
        "device_gb_per_rank": a.setup.device_gb,
        "ranks": a.setup.ranks,
        "curve": [{**_config(r), "hit_rate_instant": float(r[HIT])} for _, r in curve(a.instant).iterrows()],
    }
    if l3 is not None:
        out["l3"] = l3
    if a.timed_table is not None:
        out["timed"] = [
            {**_config(r), "hit_rate": float(r[HIT]), "ttft_p99_s": float(r[TTFT])} for _, r in a.timed_table.iterrows()
        ]
    return out


def confidence(a: Advice) -> list[str]:
    cal = a.setup.calibration
    lines = [
        f"hardware calibrated ({cal})"
        if cal
        else "hardware uncalibrated: preset defaults (hardware.calibration unset; see hicache-sim calibrate)",
        a.validation,
        "hit rates from instant mode (SGLang's cache logic replayed in arrival order); TTFT from timed mode"
        if not a.setup.host_mode.stages
        else "hit rates judged on timed mode (instant mode's shown beside them); TTFT from timed mode",
    ]
    if a.target.kind.timed:
        lines.append("TTFT was simulated only for the best-hit-rate configuration at each host size, smallest first")
    elif a.setup.host_mode.stages:
        lines.append(
            f"{a.setup.host_mode.name}: the hit-rate target is judged on timed runs (the staging backlog under load), "
            "the best configuration at each host size, smallest first"
        )
    return lines


def advice_lines(a: Advice, l3: dict[str, Any] | None = None) -> list[str]:
    """The text the CLI prints (``l3``: the storage verdict's line and what it rests on, when it ran)."""
    c = a.chosen
    goal = (
        f"TTFT p99 <= {a.target_value:g} s"
        if a.target.kind.timed
        else f"total hit rate >= {a.target_value:.3f}"
        + ("" if a.target.value is not None else f" (no target given: best in the grid - {KNEE_TOLERANCE:g})")
    )
    sizes = a.setup.sizes_gb
    lines = [f"target: {goal}; host sizes tried: {', '.join(map(str, sizes))} GB per rank"]
    if a.met:
        lines.append(
            f"recommendation: {int(c[SIZE])} GB host memory per rank (x{a.setup.ranks} ranks = "
            f"{int(c[SIZE]) * a.setup.ranks} GB), the smallest tried that meets the target"
        )
    elif refused := refusal(a):
        lines.append(f"target NOT met, and no host size is advised: {refused}")
    else:
        lines.append(
            f"target NOT met by any host size up to {max(sizes)} GB per rank; "
            f"best reachable: {int(c[SIZE])} GB per rank"
        )
    sat = saturation_record(a.timed)
    if sat is not None and sat["verdict"] == SATURATED:
        o, cap = sat["offered"], sat["capacity"]["requests_per_s"]
        against = f" against {cap:.2f} the compute model serves" if cap is not None else ""
        util = f" (utilisation {sat['utilisation']:.2f})" if sat["utilisation"] is not None else ""
        lines.append(f"  saturated: {o['requests_per_s']:.2f} requests/s offered{against}{util}")
        lines.append(f"  {fits(sat)}: size the host for the load one instance takes")
    lines.append(
        f"  write policy {c[POLICY]}, host eviction {c[RULE]}" + (f", storage {c[STORAGE]}" if STORAGE in c else "")
    )
    d = advice_dict(a, "")["recommendation"]
    h = d["hit_rate_instant"]
    lines.append(
        f"  hit rate (instant): device {h['device']:.3f}, host {h['host']:.3f}, storage {h['storage']:.3f}, "
        f"total {h['total']:.3f}"
    )
    if a.timed is not None:
        t = d["hit_rate_timed"]
        lines.append(
            f"  timed: hit rate total {t['total']:.3f} (device {t['device']:.3f}, host {t['host']:.3f}, "
            f"storage {t['storage']:.3f}); TTFT p50 {d['ttft_p50_s']:.3f} s, p99 {d['ttft_p99_s']:.3f} s"
            + (" (the queue's, not the cache's)" if saturated(a.timed) else "")
        )
        if not a.target.kind.timed and a.met and not a.target.meets(t["total"], a.target_value):
            lines.append("  warning: under timed mode's load the hit rate falls below the target at this size")
    else:
        lines.append("  TTFT: not simulated (--instant-only)")
    w = without_storage(a)
    if w is not None and c[STORAGE] != "none":
        lines.append(
            f"  without storage at {int(c[SIZE])} GB: best total hit rate {w[HIT]:.3f} ({w[POLICY]}, {w[RULE]})"
        )
    lines.append(f"  SGLang{' (the refused point)' if refusal(a) else ''}: {a.launch[0]}")
    lines.extend(f"  note: {n}" for n in a.launch[1])
    if c[RULE] != UPSTREAM_RULE:
        lines.append("  note: " + PROPOSAL_NOTE.format(rule=c[RULE]))
        u = a.upstream
        if u is not None:
            how = "meets it at" if upstream_meets(a) else "best reachable:"
            ttft = f", TTFT p99 {u[TTFT]:.3f} s" if a.target.kind.timed else ""
            ttft += " (saturated)" if saturated(u) else ""
            lines.append(
                f"  with SGLang's upstream rule: {how} {int(u[SIZE])} GB per rank, {u[POLICY]}, "
                f"hit rate {u[HIT]:.3f}{ttft}"
            )
    if l3 is not None:
        from .l3 import detail_lines

        lines.append(l3["line"])
        lines.extend(detail_lines(l3["load_vs_recompute"], l3["with_without"]))
        if "note" in l3:
            lines.append(f"  note: {l3['note']}")
    lines.extend(f"confidence: {x}" for x in confidence(a))
    lines.extend(f"note: {n}" for n in a.setup.notes)
    return lines


def advice_figure(a: Advice, path: Path, title: str) -> None:
    """Total hit rate vs host GB per rank: every configuration faint, the best per size bold, the
    target line (hit-rate target) and the chosen point marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .plots import _save

    fig, ax = plt.subplots(figsize=(7, 4))
    keys = [k for k in (POLICY, RULE, STORAGE) if k in a.instant]
    for _, g in a.instant.groupby(keys, sort=True):
        g = g.sort_values(SIZE)
        ax.plot(g[SIZE], g[HIT], color="0.75", linewidth=0.8)
    best = curve(a.instant)
    ax.plot(best[SIZE], best[HIT], "o-", color="black", label="best configuration per size (instant)")
    if not a.target.kind.timed:
        ax.axhline(a.target_value, color="tab:red", linestyle="--", linewidth=1, label=f"target {a.target_value:.3f}")
    chosen_hit = float(a.chosen_instant[HIT])
    ax.plot(
        [a.chosen[SIZE]],
        [chosen_hit],
        "*",
        color="tab:red",
        markersize=16,
        label=f"chosen: {int(a.chosen[SIZE])} GB, {a.chosen[POLICY]}, {a.chosen[RULE]}"
        + ("" if a.met else " (refused: saturated)" if refusal(a) else " (target not met)"),
    )
    if a.timed_table is not None and a.target.kind.timed:
        ax2 = ax.twinx()
        t = a.timed_table.sort_values(SIZE)
        ax2.plot(t[SIZE], t[TTFT], "s:", color="tab:purple", label="TTFT p99 (timed)")
        over = t[t.apply(saturated, axis=1)]
        if not over.empty:
            ax2.plot(over[SIZE], over[TTFT], "x", color="tab:red", markersize=10, label="saturated: the queue's TTFT")
        ax2.axhline(a.target_value, color="tab:purple", linestyle="--", linewidth=1)
        ax2.set_ylabel("TTFT p99 (s), timed")
        ax2.legend(loc="lower right", fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set_xticks(a.setup.sizes_gb, [str(x) for x in a.setup.sizes_gb])
    ax.minorticks_off()
    ax.set_xlabel("host memory per rank (GB, --hicache-size)")
    ax.set_ylabel("total token hit rate (instant)")
    ax.set_ylim(0, 1)
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    _save(fig, path)
