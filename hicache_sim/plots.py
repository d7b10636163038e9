"""The standard figures: pool residency (D, H, D+H) over time, hit rate per tier over the run, link
utilisation over time, and for sweeps hit rate per tier and TTFT vs host/device ratio."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

TIER_COLORS = {"device": "tab:blue", "host": "tab:orange", "storage": "tab:green", "total": "black"}


def _save(fig, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)


def residency_figure(ts: pd.DataFrame, path: Path, title: str) -> None:
    """Pages by state over time: device (D and D+H), host (H and D+H), mirrors (D+H)."""
    x = "t_s" if "t_s" in ts else "request"
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for col, label, color in (("device_pages", "device pages (D, D+H)", "tab:blue"),
                              ("host_pages", "host pages (H, D+H)", "tab:orange"),
                              ("mirror_pages", "mirrors (D+H)", "tab:red")):
        if col in ts:
            ax.plot(ts[x], ts[col], label=label, color=color)
    ax.set_xlabel("simulated time (s)" if x == "t_s" else "request")
    ax.set_ylabel("pages")
    ax.set_title(title)
    ax.legend(loc="best", fontsize=8)
    ax.grid(alpha=0.3)
    _save(fig, path)


def hit_rate_figure(req: pd.DataFrame, path: Path, title: str, window: int = 200) -> None:
    """Token hit rate per tier over the run (rolling over ``window`` requests)."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    prompt = req["prompt_tokens"].rolling(window, min_periods=1).sum()
    total = 0
    for tier in ("device", "host", "storage"):
        hits = req[f"{tier}_hit_tokens"].rolling(window, min_periods=1).sum()
        if req[f"{tier}_hit_tokens"].sum() > 0 or tier == "device":
            ax.plot(req.index, hits / prompt, label=tier, color=TIER_COLORS[tier])
        total = total + hits
    ax.plot(req.index, total / prompt, label="total", color="black", linestyle="--")
    ax.set_xlabel("request (arrival order)")
    ax.set_ylabel(f"hit rate (rolling {window})")
    ax.set_ylim(0, 1)
    ax.set_title(title)
    ax.legend(loc="best", fontsize=8)
    ax.grid(alpha=0.3)
    _save(fig, path)


def links_figure(ts: pd.DataFrame, path: Path, title: str) -> None:
    """Utilisation per link direction over time (timed runs)."""
    cols = [c for c in ("h2d_util", "d2h_util", "storage_read_util", "storage_write_util") if c in ts]
    if not cols:
        return
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for c in cols:
        ax.plot(ts["t_s"], ts[c], label=c.replace("_util", ""))
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("utilisation")
    ax.set_ylim(0, 1.05)
    ax.set_title(title)
    ax.legend(loc="best", fontsize=8)
    ax.grid(alpha=0.3)
    _save(fig, path)


def run_figures(out, folder: Path) -> None:
    """Figures of one run into ``folder``."""
    name = out.resolved.scenario.name
    if len(out.timeseries):
        residency_figure(out.timeseries, folder / "residency.png", f"{name}: pool residency")
        links_figure(out.timeseries, folder / "links.png", f"{name}: link utilisation")
    if len(out.requests):
        hit_rate_figure(out.requests, folder / "hit_rate.png", f"{name}: hit rate per tier")


def sweep_figures(table: pd.DataFrame, folder: Path, title: str) -> list[Path]:
    """Hit rate per tier vs host/device ratio (a line per write policy x host-eviction rule), and
    TTFT p50/p99 vs ratio for timed sweeps. Returns the files written."""
    written = []
    if "host_to_device_ratio" not in table or table.empty:
        return written
    group_cols = [c for c in ("cache.write_policy", "cache.host_eviction", "cache.host_memory_mode")
                  if c in table and table[c].nunique() > 1]
    groups = table.groupby(group_cols, sort=True) if group_cols else [((), table)]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8), sharey=True)
    for key, g in groups:
        g = g.sort_values("host_to_device_ratio")
        label = " / ".join(map(str, key if isinstance(key, tuple) else (key,))) or "run"
        for ax, col in zip(axes, ("hit_rate.device", "hit_rate.host", "hit_rate.total")):
            ax.plot(g["host_to_device_ratio"], g[col], marker="o", label=label)
    for ax, col in zip(axes, ("L1 (device)", "L2 (host)", "total (L1+L2+L3)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("host / device ratio")
        ax.set_title(col)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("token hit rate")
    axes[-1].legend(loc="best", fontsize=7)
    fig.suptitle(title)
    p = folder / "hit_rate_vs_ratio.png"
    _save(fig, p)
    written.append(p)
    if "ttft_s.p50" in table and table["ttft_s.p50"].notna().any():
        fig, ax = plt.subplots(figsize=(7, 3.8))
        for key, g in groups:
            g = g.sort_values("host_to_device_ratio")
            label = " / ".join(map(str, key if isinstance(key, tuple) else (key,))) or "run"
            line = ax.plot(g["host_to_device_ratio"], g["ttft_s.p50"], marker="o", label=f"{label} p50")
            ax.plot(g["host_to_device_ratio"], g["ttft_s.p99"], marker="x", linestyle="--",
                    color=line[0].get_color(), label=f"{label} p99")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("host / device ratio")
        ax.set_ylabel("TTFT (s)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize=7)
        p = folder / "ttft_vs_ratio.png"
        _save(fig, p)
        written.append(p)
    return written
