"""Tables and figure of results/host_ratio_monotone from its sweep, plus the old reclaim_mirrors order.

Run from the repository root after the sweep (see README.md in this folder):

    python results/host_ratio_monotone/compare.py

Reads ``sweep/sweep.csv`` (the current rules), reruns the reclaim_mirrors points with the order it had
before issue 9 part 3 (``old_key`` below, the capacity switch, copied from commit b190357) and writes
``table.csv`` (every point), ``table.md`` (summary and key ratios) and ``monotone.png``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from hicache_sim.core.host_rules import HostEvictionRule, ReclaimMirrors
from hicache_sim.runner import simulate
from hicache_sim.scenario import load_scenario

HERE = Path(__file__).resolve().parent
POLICIES = ["write_through", "write_through_selective", "write_back"]
RULES = ["evicted_only", "reclaim_mirrors", "boundary"]
KEY_RATIOS = [0.25, 0.5, 0.891, 1.0, 1.122, 2.0, 4.0]


def old_key(self, cache, node):
    """reclaim_mirrors' order before issue 9 part 3: mirrors first (newest device copy first) when the
    host is no larger than the device, H-only copies first (least recently used first) above it."""
    k = cache.strategy.key(node)
    mirrors_first = cache.config.host_pages <= cache.config.device_pages
    if node.value is not None:
        return (0 if mirrors_first else 1, tuple(-x for x in k) if isinstance(k, tuple) else -k)
    return (1 if mirrors_first else 0, k)


@contextmanager
def old_order() -> Iterator[None]:
    """reclaim_mirrors runs with the old order while inside. The old rule had no heap of its own: its
    keys alone ordered one heap (the base rule's pop)."""
    new = ReclaimMirrors.key, ReclaimMirrors.pure_key, ReclaimMirrors.pop_candidate
    ReclaimMirrors.key = ReclaimMirrors.pure_key = old_key
    ReclaimMirrors.pop_candidate = HostEvictionRule.pop_candidate
    try:
        yield
    finally:
        ReclaimMirrors.key, ReclaimMirrors.pure_key, ReclaimMirrors.pop_candidate = new


def old_reclaim_mirrors(ratios: list[float]) -> pd.DataFrame:
    """Token hit rate of every write policy under the old reclaim_mirrors order, one run per point."""
    rows = []
    with old_order():
        for policy in POLICIES:
            for ratio in ratios:
                sets = [
                    f"cache.write_policy={policy}",
                    "cache.host_eviction=reclaim_mirrors",
                    f"cache.host_ratio={ratio}",
                ]
                summary = simulate(load_scenario(HERE / "scenario.yaml", sets)).summary
                rows.append({"policy": policy, "ratio": ratio, "old": summary["hit_rate"]["total"]})
                print(f"old reclaim_mirrors {policy} {ratio}: {rows[-1]['old']:.4f}", file=sys.stderr)
    return pd.DataFrame(rows)


def worst_loss(rates: list[float]) -> tuple[float, float]:
    """Largest drop of the hit rate below its best at any smaller host, and the ratio index where."""
    best, worst, at = rates[0], 0.0, 0
    for i, r in enumerate(rates[1:], 1):
        if best - r > worst:
            worst, at = best - r, i
        best = max(best, r)
    return worst, at


def main() -> None:
    sweep = pd.read_csv(HERE / "sweep" / "sweep.csv")
    sweep = sweep.rename(
        columns={"cache.write_policy": "policy", "cache.host_eviction": "rule", "cache.host_ratio": "ratio"}
    )
    ratios = sorted(sweep["ratio"].unique())
    wide = sweep.pivot_table(index=["policy", "ratio"], columns="rule", values="hit_rate.total").reset_index()
    pages = sweep.groupby("ratio")["sizes.host_pages"].first()
    wide["host_pages"] = wide["ratio"].map(pages)
    old = old_reclaim_mirrors(ratios)
    table = wide.merge(old, on=["policy", "ratio"]).rename(columns={"old": "reclaim_mirrors_old"})
    table = table[["policy", "ratio", "host_pages", *RULES, "reclaim_mirrors_old"]]
    table = table.sort_values(["policy", "ratio"], key=lambda s: s.map(POLICIES.index) if s.name == "policy" else s)
    table.to_csv(HERE / "table.csv", index=False, float_format="%.6f")

    lines = [
        "# Token hit rate vs host/device ratio (conversation trace, device 6,000 pages, up_plus_one sizing)",
        "",
        "Worst loss when the host grows: the largest drop of the hit rate below its value at any smaller",
        "host on the 25-point grid (0.25..4), and the ratio where it happens.",
        "",
        "| write policy | evicted_only | reclaim_mirrors (new) | reclaim_mirrors (old) | boundary |",
        "|---|---|---|---|---|",
    ]
    wb = table[table["policy"] == "write_back"].set_index("ratio")["reclaim_mirrors"]
    summary = []
    for policy in POLICIES:
        t = table[table["policy"] == policy]
        cells = []
        for col in [*RULES[:2], "reclaim_mirrors_old", RULES[2]]:
            w, at = worst_loss(list(t[col]))
            cells.append(f"{w:.4f}" + (f" (at {t['ratio'].iloc[at]:g})" if w > 0 else ""))
        lines.append(f"| {policy} | " + " | ".join(cells) + " |")
        d = (t["reclaim_mirrors"] - t["reclaim_mirrors_old"]).to_numpy()
        below = (t["ratio"] < 1).to_numpy()
        gap_wb = wb[t["ratio"]].to_numpy()
        summary.append(
            f"| {policy} | {d.min():+.5f} (at {t['ratio'].iloc[d.argmin()]:g}) | {d.max():+.5f} | "
            f"{(d >= 0).sum()} of {len(d)} | {(gap_wb - t['reclaim_mirrors_old'].to_numpy())[below].mean():.4f} | "
            f"{(gap_wb - t['reclaim_mirrors'].to_numpy())[below].mean():.4f} |"
        )
    lines += [
        "",
        "New minus old reclaim_mirrors order, per write policy, and the mean distance below write_back",
        "(with reclaim_mirrors) over the ratios under 1:",
        "",
        "| write policy | smallest difference | largest | points new >= old | below write_back, old | new |",
        "|---|---|---|---|---|---|",
        *summary,
    ]
    lines += [
        "",
        "Key ratios (total token hit rate; write_back column: write_back with reclaim_mirrors):",
        "",
        "| ratio | host pages | policy | evicted_only | reclaim_mirrors new | reclaim_mirrors old | boundary "
        "| write_back |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for policy in POLICIES[:2]:
        t = table[table["policy"] == policy].set_index("ratio")
        for r in KEY_RATIOS:
            row = t.loc[r]
            lines.append(
                f"| {r:g} | {int(row['host_pages']):,} | {policy} | {row['evicted_only']:.4f} | "
                f"{row['reclaim_mirrors']:.4f} | {row['reclaim_mirrors_old']:.4f} | {row['boundary']:.4f} "
                f"| {wb[r]:.4f} |"
            )
    lines += ["", "Every point: `table.csv`."]
    (HERE / "table.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    figure(table)


def figure(table: pd.DataFrame) -> None:
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8), sharey=True)
    styles = {
        "evicted_only": ("tab:gray", "-", "evicted_only (upstream)"),
        "reclaim_mirrors": ("tab:blue", "-", "reclaim_mirrors (new order)"),
        "reclaim_mirrors_old": ("tab:red", "--", "reclaim_mirrors (old order, switch at host = device)"),
        "boundary": ("tab:green", "-", "boundary"),
    }
    for ax, policy in zip(axes, POLICIES, strict=True):
        t = table[table["policy"] == policy]
        for col, (color, ls, label) in styles.items():
            ax.plot(t["ratio"], t[col], ls, color=color, marker=".", label=label)
        ax.set_xscale("log", base=2)
        ax.set_xticks([0.25, 0.5, 1, 2, 4], ["0.25", "0.5", "1", "2", "4"])
        ax.axvline(1.0, color="black", lw=0.5, ls=":")
        ax.set_title(policy)
        ax.set_xlabel("host / device ratio (up_plus_one: ratio 1 = device + 1 page)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("total token hit rate (requests 1203..)")
    axes[0].legend(fontsize=8, loc="upper left")
    fig.suptitle("Mooncake conversation trace, device 6,000 pages of 512 tokens: hit rate vs host memory")
    fig.tight_layout()
    fig.savefig(HERE / "monotone.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
