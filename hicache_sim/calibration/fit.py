"""Fit the link model to replay measurements and say how well it predicts copies it has not seen.

For one direction x io backend x layout the model (``linkmodel``) is, per transfer of ``bytes`` in
``segments`` contiguous pieces issued as ``launches`` separate operations (H2D per layer: one per
layer),

    time = launches * latency + segments * segment_overhead + (bytes + segments * half_eff) / bandwidth

since ``bytes / (bandwidth * eff(bytes / segments))`` expands to ``(bytes + segments * half_eff) /
bandwidth``. It is linear in three costs: per operation, per piece and per byte. Isolated copies
cannot tell a per-piece *launch* cost (``segment_overhead_s``) from a per-piece *efficiency* loss
(``half_efficiency_bytes``); they differ only when the timed world shares bandwidth between
concurrent transfers. The fitted per-piece cost is therefore assigned by io backend: ``kernel``
copies are bandwidth work (into ``half_efficiency_bytes``), ``direct`` copies are one call per piece
(into ``segment_overhead_s``).

The fit minimises relative error (each row weighted by its own duration, so a 10 us copy counts as
much as a 100 ms one) over configurations (the median of each size's repeats): a non-negative
least squares start, refined in log-time with a soft-L1 loss
so a few disturbed timings on a shared machine do not drag it. A seeded share of the *configurations*
(all repeats of a size together) is held out, and the median and p90 absolute percentage error on
them is reported and stored in the calibration file. The parameters written are those fitted
without the held-out rows, so the stored error describes the stored parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares, nnls

from ..hardware.calibration import Calibration, CalibrationError
from ..hardware.linkmodel import LinkParams
from ..hardware.presets import IO_BACKEND_MODELS, IO_BACKENDS, MEM_LAYOUTS
from ..output.write import atomic_write

GROUP_KEYS = ("direction", "io_backend", "layout")
REQUIRED_COLUMNS = (*GROUP_KEYS, "bytes", "segments", "duration_s")
DIRECTIONS = ("d2h", "h2d")
MAX_BANDWIDTH_BPS = 1e15
"""Stands in for "no measurable per-byte cost" (a bandwidth the file format accepts)."""


# ------------------------------------------------------------------------------- measurements


def read_measurements(path: str | Path) -> pd.DataFrame:
    """Read and validate a measurements file (parquet, CSV or JSON lines); CalibrationError names
    the file, the row and the column of the first problem."""
    p = Path(path)
    if not p.is_file():
        raise CalibrationError(f"{path}: measurements file not found")
    suffix = p.suffix.lower()
    try:
        if suffix == ".parquet":
            df = pd.read_parquet(p)
        elif suffix == ".csv":
            df = pd.read_csv(p)
        elif suffix in (".jsonl", ".json"):
            df = pd.read_json(p, lines=suffix == ".jsonl")
        else:
            raise CalibrationError(f"{path}: expected a .parquet, .csv or .jsonl measurements file")
    except CalibrationError:
        raise
    except Exception as e:  # any reader failure is the file's fault, reported in one line
        raise CalibrationError(
            f"{path}: cannot read as {suffix[1:]}: {str(e).splitlines()[0] if str(e) else e}"
        ) from None
    return validate_measurements(df, str(path))


def validate_measurements(df: pd.DataFrame, source: str = "measurements") -> pd.DataFrame:
    """Check columns and every row; returns a clean copy with ``launches`` (default 1) and numeric types."""
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise CalibrationError(
            f"{source}: missing column(s) {', '.join(missing)} (expected {', '.join(REQUIRED_COLUMNS)}[, launches])"
        )
    if df.empty:
        raise CalibrationError(f"{source}: no measurements")
    out = df.copy().reset_index(drop=True)
    if "launches" not in out.columns:
        out["launches"] = 1
    allowed = {"direction": DIRECTIONS, "io_backend": IO_BACKENDS, "layout": MEM_LAYOUTS}
    for col, values in allowed.items():
        bad = ~out[col].isin(values)
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise CalibrationError(
                f"{source}: row {i + 1}: {col}: expected one of {', '.join(values)}, got {out[col].iloc[i]!r}"
            )
    for col, low, integer in (
        ("bytes", 1, True),
        ("segments", 1, True),
        ("launches", 1, True),
        ("duration_s", 0.0, False),
    ):
        num = pd.to_numeric(out[col], errors="coerce")
        ok = num.notna() & np.isfinite(num.astype(float))
        if integer:
            ok &= (num >= low) & (num.fillna(0.5) % 1 == 0)
        if not ok.all():
            i = int(np.flatnonzero(~ok.to_numpy())[0])
            what = f"an integer >= {low}" if integer else "a finite number (seconds)"
            raise CalibrationError(f"{source}: row {i + 1}: {col}: expected {what}, got {out[col].iloc[i]!r}")
        out[col] = num.astype("int64" if integer else "float64")
    return _drop_clock_noise(out, source)


def _drop_clock_noise(df: pd.DataFrame, source: str) -> pd.DataFrame:
    """``df`` without its timings of 0 s or less, their count in ``attrs["dropped_timings"]``.

    A copy takes time, so such a timing is the clock's, not the copy's: the CPU sweep times copies
    with this thread's CPU time, which stands still while the kernel charges it time it did not run
    (a virtual machine's stolen time is subtracted from the task clock, and a lump of it can cover a
    microsecond copy whole). One such row once made the whole file, and a one-shot run's budget,
    fail; now it is dropped and counted, and the report says so.
    """
    bad = df["duration_s"].to_numpy() <= 0
    if bad.all():
        raise CalibrationError(f"{source}: duration_s: every timing is 0 s or less; expected copies that took time")
    out = df[~bad].reset_index(drop=True) if bad.any() else df
    out.attrs["dropped_timings"] = int(bad.sum())
    return out


def dropped_note(n: int) -> str:
    """The report's line for ``n`` timings dropped as clock noise ('' when none)."""
    if not n:
        return ""
    return (
        f"{n} timing{'s' if n > 1 else ''} of 0 s or less dropped as clock noise (a copy takes time; the clock "
        "did not advance across it)"
    )


# ------------------------------------------------------------------------------------- model


def predict(params: LinkParams, nbytes, segments, launches=1) -> np.ndarray:
    """Seconds the link model gives for transfers alone on the link (vectorised over rows)."""
    b = np.asarray(nbytes, dtype=float)
    s = np.asarray(segments, dtype=float)
    n = np.asarray(launches, dtype=float)
    return (
        n * params.latency_s
        + s * params.segment_overhead_s
        + (b + s * params.half_efficiency_bytes) / params.bandwidth_Bps
    )


def fit_costs(launches, segments, nbytes, duration_s) -> np.ndarray:
    """Non-negative (per operation s, per piece s, per byte s) minimising relative error."""
    X = np.column_stack([np.asarray(launches, float), np.asarray(segments, float), np.asarray(nbytes, float)])
    t = np.asarray(duration_s, dtype=float)
    scale = X.max(axis=0)
    Xs = X / scale
    x0, _ = nnls(Xs / t[:, None], np.ones_like(t))
    floor = 1e-3 * t.min()

    def residuals(theta: np.ndarray) -> np.ndarray:
        return np.log(np.maximum(Xs @ theta, floor)) - np.log(t)

    start = np.maximum(x0, 1e-9 * t.max())
    res = least_squares(
        residuals,
        start,
        bounds=(0.0, np.inf),
        loss="soft_l1",
        f_scale=0.05,
        x_scale=np.maximum(start, t.max() * 1e-6),
        method="trf",
    )
    return res.x / scale


def costs_to_params(costs: np.ndarray, io_backend: str) -> LinkParams:
    """Per-operation/piece/byte costs as LinkParams (per-piece cost placed by io backend, see module)."""
    per_op, per_piece, per_byte = (float(x) for x in costs)
    bandwidth = min(1.0 / per_byte, MAX_BANDWIDTH_BPS) if per_byte > 0 else MAX_BANDWIDTH_BPS
    if IO_BACKEND_MODELS.get(io_backend).pieces_in_one_launch:  # the piece's cost as lost efficiency
        return LinkParams(bandwidth, per_op, per_piece * bandwidth, 0.0)
    return LinkParams(bandwidth, per_op, 0.0, per_piece)


def per_piece_cost(params: LinkParams) -> float:
    """Seconds each contiguous piece adds, whichever parameter carries it."""
    return params.segment_overhead_s + params.half_efficiency_bytes / params.bandwidth_Bps


def ape_stats(predicted, measured) -> tuple[float, float]:
    """(median, p90) absolute percentage error of ``predicted`` against ``measured``, in percent."""
    p = np.asarray(predicted, float)
    m = np.asarray(measured, float)
    ape = np.abs(p - m) / m * 100.0
    return float(np.median(ape)), float(np.percentile(ape, 90))


# ----------------------------------------------------------------------------------- fitting


def holdout_mask(df: pd.DataFrame, share: float, seed: int) -> np.ndarray:
    """True for held-out rows: a seeded ``share`` of each group's configurations (repeats of one
    size go together, so a held-out row is a size the fit never saw). Groups with fewer than four
    configurations hold nothing out."""
    mask = np.zeros(len(df), dtype=bool)
    for gi, (_, g) in enumerate(df.groupby(list(GROUP_KEYS), sort=True)):
        configs = (
            g[["bytes", "segments", "launches"]]
            .drop_duplicates()
            .sort_values(["bytes", "segments", "launches"])
            .to_records(index=False)
            .tolist()
        )
        n_out = round(share * len(configs)) if len(configs) >= 4 else 0
        if n_out == 0:
            continue
        rng = np.random.default_rng([seed, gi])
        chosen = {configs[i] for i in rng.choice(len(configs), size=n_out, replace=False)}
        keys = list(zip(g["bytes"].tolist(), g["segments"].tolist(), g["launches"].tolist()))
        mask[g.index.to_numpy()] = [k in chosen for k in keys]
    return mask


@dataclass
class GroupFit:
    """One group's fitted parameters and errors (percent; None when nothing was held out)."""

    key: tuple[str, str, str]
    params: LinkParams
    n_fit: int
    n_holdout: int
    fit_median_ape: float
    fit_p90_ape: float
    holdout_median_ape: float | None
    holdout_p90_ape: float | None
    repeat_spread_pct: float | None = None  # median over the group's configurations (None: no repeats)

    def errors(self) -> dict:
        """The ``holdout`` entry of the calibration file."""

        def r(x):
            return None if x is None else round(float(x), 3)

        return {
            "n_fit": int(self.n_fit),
            "n_holdout": int(self.n_holdout),
            "median_ape_pct": r(self.holdout_median_ape),
            "p90_ape_pct": r(self.holdout_p90_ape),
            "fit_median_ape_pct": r(self.fit_median_ape),
            "fit_p90_ape_pct": r(self.fit_p90_ape),
            "repeat_spread_pct": r(self.repeat_spread_pct),
        }


COST_NAMES = ("per-operation latency", "per-piece cost", "bandwidth")
DESIGN_COLUMNS = ("launches", "segments", "bytes")
IDENTIFIABLE_RTOL = 1e-6
"""Singular values below this share of the largest count as zero: such a direction of the three
costs is not constrained by the measurements."""


def check_identifiable(train: pd.DataFrame, where: str) -> None:
    """Refuse a fit whose configurations cannot separate the three costs.

    Copies of one page size replayed from a scenario vary only in page count, so bytes and pieces
    grow together: per-piece cost and bandwidth trade off freely and a fit returns any point of a
    line (1e6 GB/s and 0 us, say), which the calibration file would then carry as truth. The test
    is the rank of the (operations, pieces, bytes) design over the distinct configurations.
    """
    X = train[list(DESIGN_COLUMNS)].drop_duplicates().to_numpy(dtype=float)
    sv = np.linalg.svd(X / X.max(axis=0), compute_uv=False)
    rank = int((sv > IDENTIFIABLE_RTOL * sv[0]).sum())
    if rank >= 3:
        return
    why = f"the sizes vary along only {rank} independent direction(s)"
    for a, b, text in (
        ("bytes", "segments", "every piece has the same size, so bytes grow with pieces"),
        ("segments", "launches", "pieces grow in proportion to operations"),
        ("bytes", "launches", "bytes grow in proportion to operations"),
    ):
        if (train[a] / train[b]).nunique() == 1:
            why = text
            break
    raise CalibrationError(
        f"{where}: these measurements cannot separate {', '.join(COST_NAMES)} ({why}: {3 - rank} of the 3 "
        "costs is unconstrained); measure copies that vary the number of pieces and the bytes per piece "
        "independently, as `hicache-sim replay --sweep` does"
    )


@dataclass
class CalibrationResult:
    calibration: Calibration
    fits: list[GroupFit]
    rows: pd.DataFrame  # measurements with predicted_s and split ('fit' | 'holdout')
    overall: dict = field(default_factory=dict)


CONFIG_KEYS = (*GROUP_KEYS, "bytes", "segments", "launches")


#: A repeat further than this many robust standard deviations (1.4826 x MAD) from its
#: configuration's median is flagged as an outlier (the median already ignores it).
OUTLIER_SIGMAS = 3.0
#: Median repeat spread (robust coefficient of variation, %) above which timing noise, not the
#: model, dominates the held-out error: the fit is reported as untrustworthy.
NOISE_WARN_PCT = 10.0


def _robust_cv_pct(x: pd.Series) -> float:
    """1.4826 x MAD / median, in percent: the spread of one configuration's repeats."""
    med = float(x.median())
    return 1.4826 * float((x - med).abs().median()) / med * 100.0 if med > 0 else 0.0


def _outliers(x: pd.Series) -> int:
    med = float(x.median())
    mad = 1.4826 * float((x - med).abs().median())
    return int(((x - med).abs() > OUTLIER_SIGMAS * mad).sum()) if mad > 0 else 0


def aggregate_repeats(df: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration: the median duration of its repeats, how many there were, their
    spread (robust coefficient of variation, %) and how many lie beyond ``OUTLIER_SIGMAS``.

    A copy timed on a shared machine now and then loses a scheduler tick, and whole stretches of
    time run slow when neighbours load the machine; the median of a size's repeats (taken in
    separate passes over the grid, see ``replay.sweep``) is what the model should explain, and its
    held-out error is then about the model rather than about the neighbours' load. The spread says
    how much of the error the timings themselves carry.
    """
    extra = [c for c in ("device", "device_name") if c in df.columns]
    agg = {
        "duration_s": ("duration_s", "median"),
        "repeats": ("duration_s", "size"),
        "spread_pct": ("duration_s", _robust_cv_pct),
        "outliers": ("duration_s", _outliers),
    }
    agg.update({c: (c, "first") for c in extra})
    return df.groupby(list(CONFIG_KEYS), sort=True, as_index=False).agg(**agg)


def noise_summary(configs: pd.DataFrame) -> dict:
    """Timing noise of the measurements, reported apart from the model's error: the median and p90
    repeat spread over configurations, outlier repeats, and a warning when noise dominates."""
    if "spread_pct" not in configs.columns or (configs["repeats"] < 2).all():
        return {}
    multi = configs[configs["repeats"] >= 2]
    med = float(multi["spread_pct"].median())
    out = {
        "repeat_spread_median_pct": med,
        "repeat_spread_p90_pct": float(multi["spread_pct"].quantile(0.9)),
        "outlier_repeats": int(multi["outliers"].sum()),
        "repeats_total": int(multi["repeats"].sum()),
    }
    if med > NOISE_WARN_PCT:
        out["warning"] = (
            f"timing noise: a configuration's repeats spread by {med:.1f} % (median; over {NOISE_WARN_PCT:g} %), "
            "so the held-out error measures the machine's load as much as the model; rerun on a quieter "
            "machine or with more --repeats before trusting this calibration"
        )
    return out


def calibrate(
    df: pd.DataFrame, *, holdout: float = 0.25, seed: int = 0, source: str = "", aggregate: bool = True
) -> CalibrationResult:
    """Fit every group present in validated measurements ``df``; errors on the held-out share.

    ``aggregate``: fit and evaluate per configuration (median of repeats, see ``aggregate_repeats``)
    rather than per raw row.
    """
    if not 0 <= holdout < 1:
        raise CalibrationError(f"--holdout {holdout}: expected a share in [0, 1)")
    dropped = int(df.attrs.get("dropped_timings", 0))
    df = aggregate_repeats(df) if aggregate else df.reset_index(drop=True)
    mask = holdout_mask(df, holdout, seed)
    rows = df.copy()
    rows["split"] = np.where(mask, "holdout", "fit")
    rows["predicted_s"] = np.nan
    fits: list[GroupFit] = []
    cal = Calibration(device=_device_text(df), source=source)
    for key, g in df.groupby(list(GROUP_KEYS), sort=True):
        train = g[~mask[g.index]]
        if train[["bytes", "segments", "launches"]].drop_duplicates().shape[0] < 3:
            raise CalibrationError(
                f"{source or 'measurements'}: {'/'.join(key)}: need at least 3 distinct "
                "sizes to fit latency, per-piece cost and bandwidth"
            )
        check_identifiable(train, f"{source or 'measurements'}: {'/'.join(key)}")
        params = costs_to_params(
            fit_costs(train["launches"], train["segments"], train["bytes"], train["duration_s"]), key[1]
        )
        pred = predict(params, g["bytes"], g["segments"], g["launches"])
        rows.loc[g.index, "predicted_s"] = pred
        held = mask[g.index]
        fm, fp = ape_stats(pred[~held], g["duration_s"].to_numpy()[~held])
        hm, hp = ape_stats(pred[held], g["duration_s"].to_numpy()[held]) if held.any() else (None, None)
        spread = float(g["spread_pct"].median()) if "spread_pct" in g.columns and (g["repeats"] > 1).any() else None
        fit = GroupFit(tuple(key), params, int((~held).sum()), int(held.sum()), fm, fp, hm, hp, spread)
        fits.append(fit)
        cal.groups[tuple(key)] = params
        cal.errors[tuple(key)] = fit.errors()
    overall = {}
    if mask.any():
        h = rows[rows["split"] == "holdout"]
        overall["median_ape_pct"], overall["p90_ape_pct"] = ape_stats(h["predicted_s"], h["duration_s"])
        overall["n_holdout"] = len(h)
    overall.update(noise_summary(rows))
    if dropped:
        overall["dropped_timings"] = dropped
    return CalibrationResult(cal, fits, rows, overall)


def _device_text(df: pd.DataFrame) -> str:
    for col in ("device_name", "device"):
        if col in df.columns:
            vals = sorted({str(v) for v in df[col].dropna().unique()})
            if vals:
                return "; ".join(vals)
    return ""


# ----------------------------------------------------------------------------------- reports


def error_table_markdown(result: CalibrationResult, title: str = "Link-model calibration") -> str:
    """Per group: rows, fitted parameters, and held-out median / p90 absolute percentage error."""

    def pct(x):
        return "–" if x is None else f"{x:.1f}"

    lines = [
        f"# {title}",
        "",
        f"Device: {result.calibration.device or 'unknown'}. Source: {result.calibration.source}.",
        "",
        "| direction | io_backend | layout | configs fit | configs held out | bandwidth GB/s | latency us | "
        "per piece ns | held-out median APE % | held-out p90 APE % | fit median APE % | repeat spread % |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for f in result.fits:
        p = f.params
        lines.append(
            f"| {' | '.join(f.key)} | {f.n_fit} | {f.n_holdout} | {p.bandwidth_Bps / 1e9:.2f} | "
            f"{p.latency_s * 1e6:.2f} | {per_piece_cost(p) * 1e9:.1f} | {pct(f.holdout_median_ape)} | "
            f"{pct(f.holdout_p90_ape)} | {pct(f.fit_median_ape)} | {pct(f.repeat_spread_pct)} |"
        )
    o = result.overall
    if "n_holdout" in o:
        lines += [
            "",
            f"All held-out configurations ({o['n_holdout']}): median APE {o['median_ape_pct']:.1f} %, "
            f"p90 APE {o['p90_ape_pct']:.1f} %.",
        ]
    if "repeat_spread_median_pct" in o:
        lines += [
            "",
            f"Timing noise, apart from the model: repeats of one configuration spread by "
            f"{o['repeat_spread_median_pct']:.1f} % (median; p90 {o['repeat_spread_p90_pct']:.1f} %), "
            f"{o['outlier_repeats']} of {o['repeats_total']} repeats flagged as outliers (beyond "
            f"{OUTLIER_SIGMAS:g} robust standard deviations; the median ignores them).",
        ]
    if "warning" in o:
        lines += ["", f"**Warning: {o['warning']}.**"]
    if o.get("dropped_timings"):
        lines += ["", f"{dropped_note(o['dropped_timings'])}."]
    lines += [
        "",
        "APE: |predicted - measured| / measured. A configuration is one transfer size (bytes, pieces, "
        "operations) with the median of its repeats; held-out configurations are sizes the fit never "
        "saw. Repeat spread: 1.4826 x MAD / median of a configuration's repeats (each repeat a separate "
        "pass over the grid). Per piece: segment_overhead_s + half_efficiency_bytes / bandwidth (kernel carries it as "
        "efficiency, direct as per-piece overhead).",
    ]
    return "\n".join(lines) + "\n"


def scatter_figure(rows: pd.DataFrame, path: str | Path, title: str, *, only_split: str | None = None) -> None:
    """Predicted vs measured seconds (log-log), one panel per direction, a colour per io x layout."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    data = rows if only_split is None else rows[rows["split"] == only_split]
    dirs = [d for d in DIRECTIONS if (data["direction"] == d).any()] or list(DIRECTIONS)
    fig, axes = plt.subplots(1, len(dirs), figsize=(5.2 * len(dirs), 4.8), squeeze=False)
    for ax, d in zip(axes[0], dirs):
        sub = data[data["direction"] == d]
        for (io, lay), g in sub.groupby(["io_backend", "layout"], sort=True):
            ax.scatter(g["duration_s"] * 1e3, g["predicted_s"] * 1e3, s=10, alpha=0.7, label=f"{io} / {lay}")
        if len(sub):
            lo = float(min(sub["duration_s"].min(), sub["predicted_s"].min())) * 1e3 * 0.7
            hi = float(max(sub["duration_s"].max(), sub["predicted_s"].max())) * 1e3 * 1.4
            ax.plot([lo, hi], [lo, hi], color="black", lw=1, label="predicted = measured")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlim(lo, hi)
            ax.set_ylim(lo, hi)
            for axis in (ax.xaxis, ax.yaxis):
                axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
                axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
                axis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("measured (ms)")
        ax.set_ylabel("predicted (ms)")
        ax.set_title(f"{d.upper()}")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7, loc="upper left")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=110, format="png", metadata={"Software": None}))
    plt.close(fig)
