"""The standard figures: pool residency (D, H, D+H) over time, hit rate per tier over the run, link
utilisation over time, and for sweeps hit rate per tier and TTFT vs the swept key (the host/device
ratio when the host size is swept)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from .columns import Columns, as_columns
from .rounds import per_round
from .saturation import SATURATED

if TYPE_CHECKING:
    import pandas as pd

TIER_COLORS = {"device": "tab:blue", "host": "tab:orange", "storage": "tab:green", "total": "black"}
#: Points drawn per line of a run figure: the 7-inch figure is 770 pixels wide at 110 dpi.
MAX_LINE_POINTS = 1000
#: Margins of the one-panel run figures (fractions of the figure): fixed, so that saving draws the figure
#: once; tight_layout would draw it once more to measure the labels, about as long as saving it.
RUN_MARGINS = {"left": 0.13, "right": 0.97, "bottom": 0.14, "top": 0.91}


def _figure(figsize: tuple[float, float], **subplots) -> tuple[Figure, object]:
    """A figure on its own Agg canvas: no pyplot, no backend lookup, nothing to close."""
    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig, fig.subplots(**subplots)


def _run_figure() -> tuple[Figure, object]:
    fig, ax = _figure((7, 3.6))
    fig.subplots_adjust(**RUN_MARGINS)
    return fig, ax


def _kept(n: int) -> np.ndarray:
    """Positions of every k-th row of a line of ``n`` points (the first and last kept): what the
    figure's pixels can show."""
    step = max(1, -(-n // MAX_LINE_POINTS))
    keep = list(range(0, n, step))
    if keep and keep[-1] != n - 1:
        keep.append(n - 1)
    return np.asarray(keep, dtype=np.int64)


def _rolling_sum(values: np.ndarray, window: int) -> np.ndarray:
    """Sum over the last ``window`` values at each row (fewer at the start), as float: pandas'
    ``rolling(window, min_periods=1).sum()`` of integer counts, which it sums exactly as well."""
    c = np.concatenate(([0], np.cumsum(values, dtype=np.int64)))
    n = len(values)
    lo = np.maximum(np.arange(n) + 1 - window, 0)
    return (c[1:] - c[lo]).astype(float)


def _save(fig: Figure, path: Path, *, tight: bool = False) -> None:
    if tight:
        fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})


def residency_figure(ts: Columns, path: Path, title: str) -> None:
    """Pages by state over time: device (D and D+H), host (H and D+H), mirrors (D+H)."""
    x = "t_s" if "t_s" in ts else "request"
    ts = ts.take(_kept(len(ts)))
    fig, ax = _run_figure()
    # Mirrors are drawn dashed on top: when every device page is mirrored the lines coincide.
    for col, label, color, style, width in (
        ("device_pages", "device pages (D, D+H)", "tab:blue", "-", 2.5),
        ("host_pages", "host pages (H, D+H)", "tab:orange", "-", 2.5),
        ("mirror_pages", "mirrors (D+H)", "tab:red", "--", 1.2),
    ):
        if col in ts:
            ax.plot(ts[x], ts[col], label=label, color=color, linestyle=style, linewidth=width)
    ax.set_xlabel("time (s): simulated, or trace arrival in instant mode" if x == "t_s" else "request")
    ax.set_ylabel("pages")
    ax.set_title(title, y=1.0)  # where matplotlib would put it, without measuring the axis again
    ax.legend(loc="best", fontsize=8)
    ax.grid(alpha=0.3)
    _save(fig, path)


def hit_rate_figure(req: Columns, path: Path, title: str, window: int | None = None) -> None:
    """Token hit rate per tier over the run (rolling over ``window`` requests, default n/20)."""
    window = window or max(5, len(req) // 20)
    fig, ax = _run_figure()
    prompt = _rolling_sum(req["prompt_tokens"], window)
    keep = _kept(len(req))
    total = 0
    with np.errstate(divide="ignore", invalid="ignore"):  # an empty window: no point, as pandas gives
        for tier in ("device", "host", "storage"):
            hits = _rolling_sum(req[f"{tier}_hit_tokens"], window)
            if req[f"{tier}_hit_tokens"].sum() > 0 or tier == "device":
                ax.plot(keep, (hits / prompt)[keep], label=tier, color=TIER_COLORS[tier])
            total = total + hits
        ax.plot(keep, (total / prompt)[keep], label="total", color="black", linestyle="--")
    ax.set_xlabel("request (arrival order)")
    ax.set_ylabel(f"hit rate (rolling {window})")
    ax.set_ylim(0, 1)
    ax.set_title(title, y=1.0)  # where matplotlib would put it, without measuring the axis again
    ax.legend(loc="best", fontsize=8)
    ax.grid(alpha=0.3)
    _save(fig, path)


def links_figure(ts: Columns, path: Path, title: str) -> None:
    """Utilisation per link direction over time (timed runs)."""
    cols = [c for c in ("h2d_util", "d2h_util", "storage_read_util", "storage_write_util") if c in ts]
    if not cols:
        return
    ts = ts.take(_kept(len(ts)))
    fig, ax = _run_figure()
    for c in cols:
        ax.plot(ts["t_s"], ts[c], label=c.replace("_util", ""))
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("utilisation")
    ax.set_ylim(0, 1.05)
    ax.set_title(title, y=1.0)  # where matplotlib would put it, without measuring the axis again
    ax.legend(loc="best", fontsize=8)
    ax.grid(alpha=0.3)
    _save(fig, path)


def ttft_figure(
    requests: Columns, path: Path, title: str, window: int | None = None, saturation: dict | None = None
) -> bool:
    """TTFT of every served request over its arrival time, with rolling p50 and p99 (timed runs): where
    the queue builds and whether the cache tiers keep the tail down. A saturated run (summary.json's
    ``saturation``) is shaded from when its waiting queue began to grow to the last arrival, and its
    title says so. False when there is nothing to draw. Rolling quantiles by pandas (imported here:
    timed runs only)."""
    if "ttft_s" not in requests:
        return False
    req = requests.to_frame()
    served = req[req["ttft_s"].notna()].sort_values("arrival_s")
    if served.empty:
        return False
    window = window or max(5, len(served) // 20)
    fig, ax = _run_figure()
    ax.scatter(served["arrival_s"], served["ttft_s"], s=4, alpha=0.3, color="tab:gray", label="request")
    roll = served["ttft_s"].rolling(window, min_periods=1)
    ax.plot(served["arrival_s"], roll.median(), color="tab:blue", label=f"p50 (rolling {window})")
    ax.plot(served["arrival_s"], roll.quantile(0.99), color="tab:red", linestyle="--", label=f"p99 (rolling {window})")
    note = saturation_note(saturation)
    if note is not None:
        start = saturation["queue_growing_since_s"]
        if start is not None:
            ax.axvspan(start, saturation["last_arrival_s"], color="tab:red", alpha=0.1, label="queue growing")
        title = f"{title}: {note}"
    ax.set_xlabel("arrival (simulated s)")
    ax.set_ylabel("TTFT (s)")
    ax.set_yscale("log")
    ax.set_title(title, y=1.0)  # where matplotlib would put it, without measuring the axis again
    ax.legend(loc="best", fontsize=8)
    ax.grid(alpha=0.3)
    _save(fig, path)
    return True


def saturation_note(saturation: dict | None) -> str | None:
    """The TTFT figure's title note of a saturated run (None otherwise)."""
    if not saturation or saturation.get("verdict") != SATURATED:
        return None
    util = saturation.get("utilisation")
    return "SATURATED" + (f" (utilisation {util:.2f})" if util is not None else "")


def rounds_figure(rounds: list[dict], path: Path, title: str) -> None:
    """bench_multiturn's per-round table drawn: hit rate per tier (stacked bars) and, when timed, mean,
    median and p90 TTFT per round on a second axis."""
    x = [r["round"] for r in rounds]
    fig, ax = _figure((7, 3.6))  # two y axes and a long label: tight_layout places them
    bottom = [0.0] * len(rounds)
    for tier in ("device", "host", "storage"):
        h = [r["hit_rate"][tier] for r in rounds]
        if tier != "device" and not any(h):
            continue
        ax.bar(x, h, bottom=bottom, color=TIER_COLORS[tier], label=f"hit rate: {tier}", width=0.6)
        bottom = [b + v for b, v in zip(bottom, h, strict=True)]
    ax.set_xlabel("round")
    ax.set_ylabel("cache hit rate (cached / prompt tokens)")
    ax.set_ylim(0, 1)
    ax.set_xticks(x)
    handles, labels = ax.get_legend_handles_labels()
    if rounds and "ttft_s" in rounds[0]:
        ax2 = ax.twinx()
        for key, style in (("mean", "-"), ("median", ":"), ("p90", "--")):
            ys = [r["ttft_s"][key] for r in rounds]
            ax2.plot(x, [float("nan") if y is None else y for y in ys], "k" + style, marker="o", label=f"TTFT {key}")
        ax2.set_ylabel("TTFT (s)")
        ax2.set_ylim(bottom=0)
        h2, l2 = ax2.get_legend_handles_labels()
        handles, labels = handles + h2, labels + l2
    ax.legend(handles, labels, loc="upper left", fontsize=7)
    ax.set_title(title)
    ax.grid(alpha=0.3, axis="y")
    _save(fig, path, tight=True)


def run_figures(
    name: str,
    mode: str,
    requests: Columns | pd.DataFrame,
    timeseries: Columns | pd.DataFrame,
    folder: Path,
    saturation: dict | None = None,
) -> list[Path]:
    """Figures of one run into ``folder`` (used by ``run`` and by ``plot``; ``saturation``: summary.json's
    block, marked on the TTFT figure). Returns the files written."""
    requests, timeseries = as_columns(requests), as_columns(timeseries)
    written = []
    if len(timeseries):
        residency_figure(timeseries, folder / "residency.png", f"{name}: pool residency ({mode})")
        written.append(folder / "residency.png")
        if "h2d_util" in timeseries:
            links_figure(timeseries, folder / "links.png", f"{name}: link utilisation")
            written.append(folder / "links.png")
    if len(requests):
        hit_rate_figure(requests, folder / "hit_rate.png", f"{name}: hit rate per tier")
        written.append(folder / "hit_rate.png")
        if mode == "timed" and ttft_figure(
            requests, folder / "ttft.png", f"{name}: time to first token", saturation=saturation
        ):
            written.append(folder / "ttft.png")
        if "round" in requests:
            rounds_figure(per_round(requests, mode == "timed"), folder / "rounds.png", f"{name}: per round")
            written.append(folder / "rounds.png")
    return written


#: Swept keys that size the host pool: a sweep over any of them is drawn against the resolved ratio.
HOST_SIZE_KEYS = ("cache.host_ratio", "cache.host_size_gb", "cache.host_tokens")
#: Swept keys assumed by folders written before the grid was recorded in sweep.json.
LEGACY_SWEEP_KEYS = ("cache.write_policy", "cache.host_eviction", "cache.host_memory_mode", "cache.host_ratio")


def grid_order(table: pd.DataFrame, keys: list[str]) -> list[str]:
    """The swept keys in the order the grid swept them, whatever order ``keys`` lists them in: a sweep
    table's row starts with its point's overrides in grid order, while the folder's manifest stores them
    sorted. So ``plot`` draws the figure ``sweep`` drew (same x axis, same line styles)."""
    columns = {c: i for i, c in enumerate(table.columns)}
    return sorted(keys, key=lambda k: columns.get(k, len(columns)))


def sweep_axes(table: pd.DataFrame, keys: list[str]) -> tuple[str, str, list[str]]:
    """(x column, x label, grouping columns) of a sweep's figures: the host/device ratio when the host
    size is swept, else the first numeric swept key (else the first swept key, in grid order); every
    other swept key that varies draws its own line."""
    varying = [k for k in grid_order(table, keys) if k in table and table[k].nunique() > 1]
    if "host_to_device_ratio" in table and any(k in HOST_SIZE_KEYS for k in varying):
        return "host_to_device_ratio", "host / device ratio", [k for k in varying if k not in HOST_SIZE_KEYS]
    numeric = [k for k in varying if _is_number(table[k])]
    x = (numeric or varying or ["host_to_device_ratio"])[0]
    return x, x, [k for k in varying if k != x]


def _is_number(col: pd.Series) -> bool:
    import pandas as pd

    return pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col)


def _x_positions(table: pd.DataFrame, x: str):
    """Plot positions of the x column and a function that styles an axis for it: log2 for a positive
    numeric key spanning a factor of 4 or more, linear for other numbers, evenly spaced categories."""
    col = table[x]
    if _is_number(col):
        values = col.astype(float)
        log = bool((values > 0).all() and values.max() >= 4 * values.min())

        ticks = sorted(values.unique())

        def style(ax) -> None:
            if log:
                ax.set_xscale("log", base=2)
            if len(ticks) <= 10:  # label the swept values themselves, not powers of two
                ax.set_xticks(ticks, [f"{t:g}" for t in ticks], fontsize=8)
                ax.minorticks_off()

        return values, style
    cats = sorted(col.astype(str).unique())
    pos = col.astype(str).map({c: i for i, c in enumerate(cats)}).astype(float)

    def style(ax) -> None:
        ax.set_xticks(range(len(cats)), cats, rotation=20, fontsize=8)

    return pos, style


def sweep_figures(table: pd.DataFrame, folder: Path, name: str, keys: list[str] | None = None) -> list[Path]:
    """Hit rate per tier vs the swept key (a line per value of the other swept keys), and TTFT p50/p99
    vs the same key for timed sweeps. ``keys``: the swept keys (None: a folder from before they were
    recorded). Returns the files written."""
    written: list[Path] = []
    if table.empty:
        return written
    x, xlabel, group_cols = sweep_axes(table, list(keys) if keys is not None else list(LEGACY_SWEEP_KEYS))
    if x not in table:
        return written
    xs, style_x = _x_positions(table, x)
    table = table.assign(_x=xs)
    stem = "ratio" if x == "host_to_device_ratio" else x.split(".")[-1]
    groups = list(table.groupby(group_cols, sort=True)) if group_cols else [((), table)]
    # Colour by the last grouping key, line style and marker by the first: coinciding lines stay visible.
    first_vals = sorted(table[group_cols[0]].unique()) if len(group_cols) > 1 else [None]
    last_vals = sorted(table[group_cols[-1]].unique()) if group_cols else [None]
    styles = ["-", "--", ":", "-."]
    markers = ["o", "s", "^", "D"]
    fig, axes = _figure((13, 4.6), ncols=3, sharey=True)
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        g = g.sort_values("_x")
        label = " / ".join(map(str, key)) or "run"
        i = first_vals.index(key[0]) if len(group_cols) > 1 else 0
        j = last_vals.index(key[-1]) if group_cols else 0
        for ax, col in zip(axes, ("hit_rate.device", "hit_rate.host", "hit_rate.total")):
            ax.plot(
                g["_x"],
                g[col],
                marker=markers[i % 4],
                linestyle=styles[i % 4],
                color=f"C{j}",
                markersize=4 + 2 * (len(first_vals) - i),
                alpha=0.85,
                label=label,
            )
    for ax, col in zip(axes, ("L1 (device)", "L2 (host)", "total (L1+L2+L3)")):
        style_x(ax)
        ax.set_xlabel(xlabel)
        ax.set_title(col)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("token hit rate")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(
        handles,
        labels,
        loc="lower center",
        ncol=min(3, len(labels)),
        fontsize=8,
        title=" / ".join(c.split(".")[-1] for c in group_cols) or None,
    )
    fig.suptitle(f"{name}: hit rate per tier vs {xlabel}")
    fig.tight_layout(rect=(0, 0.06 + 0.045 * ((len(labels) + 2) // 3), 1, 1))
    p = folder / f"hit_rate_vs_{stem}.png"
    fig.savefig(p, dpi=110, metadata={"Software": None})
    written.append(p)
    if "ttft_s.p50" in table and table["ttft_s.p50"].notna().any():
        fig, ax = _figure((7, 3.8))
        for key, g in groups:
            g = g.sort_values("_x")
            label = " / ".join(map(str, key if isinstance(key, tuple) else (key,))) or "run"
            line = ax.plot(g["_x"], g["ttft_s.p50"], marker="o", label=f"{label} p50")
            ax.plot(
                g["_x"], g["ttft_s.p99"], marker="x", linestyle="--", color=line[0].get_color(), label=f"{label} p99"
            )
        style_x(ax)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("TTFT (s)")
        ax.set_title(f"{name}: TTFT p50 and p99 vs {xlabel}")
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize=7)
        p = folder / f"ttft_vs_{stem}.png"
        _save(fig, p, tight=True)
        written.append(p)
    return written
