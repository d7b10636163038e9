"""Drift correction: a reference copy timed before each point divides out the machine's slowdown.

Synthetic sweeps are the link model's own durations, multiplied by a slowdown that drifts over the
sweep (0.55-1.5x, as measured under load) and seen by the reference as well; the reference alone
also loses a scheduler tick now and then (one-sided noise that is not drift)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from test_calibrate_fit import KERNEL, synthetic

from hicache_sim.calibration.drift import drift_factors, normalise_drift
from hicache_sim.calibration.fit import calibrate, per_piece_cost, validate_measurements
from hicache_sim.hardware.linkmodel import LinkParams

REF_S = 2e-4


def drifting_sweep(params: LinkParams, *, seed: int = 0, repeats: int = 3, ticks: float = 0.05) -> pd.DataFrame:
    """``synthetic`` measurements in the sweep's order (each repeat a shuffled pass), with drift."""
    rng = np.random.default_rng(seed)
    base = synthetic(params, repeats=repeats)
    passes = [base[base["repeat"] == r].sample(frac=1, random_state=seed + r) for r in range(repeats)]
    df = pd.concat(passes, ignore_index=True)
    t = np.arange(len(df)) / len(df)
    slowdown = np.exp(0.4 * np.sin(2 * np.pi * 2.3 * t) + 0.15 * np.sin(2 * np.pi * 7.1 * t + 1.0))
    assert 0.5 < slowdown.min() < 0.65 and 1.4 < slowdown.max() < 1.75
    df["seq"] = np.arange(len(df))
    df["duration_raw_s"] = df["duration_s"] * slowdown
    tick = rng.random(len(df)) < ticks
    df["reference_s"] = REF_S * slowdown * np.where(tick, 3.0, 1.0)
    df["duration_s"] = df["duration_raw_s"]
    return df


def test_drift_factor_follows_a_step_and_ignores_a_lone_tick():
    ref = np.full(60, 1e-4)
    ref[30:] *= 2.0  # the machine halves its speed from point 30
    ref[10] *= 5.0  # one reference copy loses a tick
    f = drift_factors(ref, window=9)
    med = float(np.median(ref))  # the sweep's typical state is the unit
    assert f[:25] == pytest.approx(1e-4 / med) and f[35:] == pytest.approx(2e-4 / med)
    assert f[10] == pytest.approx(f[9])  # the tick rescales neither its point nor its neighbours


def test_normalised_durations_keep_the_raw_ones():
    df = drifting_sweep(KERNEL)
    out = normalise_drift(df)
    assert (out["duration_raw_s"] == df["duration_raw_s"]).all()
    assert np.allclose(out["duration_s"] * out["drift_factor"], out["duration_raw_s"])


def test_fit_recovers_parameters_through_drift_only_with_the_correction():
    df = drifting_sweep(KERNEL, seed=3)
    corrected = calibrate(validate_measurements(normalise_drift(df)), source="synthetic")
    raw = calibrate(validate_measurements(df), source="synthetic")
    (fit,) = corrected.fits
    # the correction's unit is the sweep's median slowdown: the costs come back up to that one factor
    unit = float(np.median(df["reference_s"])) / REF_S
    assert fit.params.bandwidth_Bps * unit == pytest.approx(KERNEL.bandwidth_Bps, rel=0.03)
    assert fit.params.latency_s / unit == pytest.approx(KERNEL.latency_s, rel=0.03)
    assert per_piece_cost(fit.params) / unit == pytest.approx(per_piece_cost(KERNEL), rel=0.05)
    assert corrected.overall["median_ape_pct"] < 2.0
    assert corrected.overall["repeat_spread_median_pct"] < 2.0
    # without it the same sweep's repeats disagree and the held-out error is the drift's
    assert raw.overall["median_ape_pct"] > 10.0
    assert raw.overall["repeat_spread_median_pct"] > 10.0
