"""Drift correction for timings taken on a shared machine: a reference copy as a control.

A CPU copy's time on a machine shared with other work is its own cost times the machine's
momentary slowdown, and that slowdown drifts (0.55-1.5x between minutes under load average 6-8):
far more than the differences the link model is fitted to. The sweep therefore times a fixed
reference copy (same bytes, same cold cache, every time) right before each measured point. The
reference's cost never changes, so its time relative to its own median is the slowdown at that
moment; dividing the measured copy by it removes the drift.

Assumptions, each checked by the measurements in ``results/calibration/README.md``:

- the slowdown is one multiplicative factor shared by the reference and the measured copy (both are
  memory copies of the same process, measured milliseconds apart);
- it moves slowly compared with a few points (seconds), so the factor is the rolling median of the
  reference over ``window`` consecutive points: a scheduler tick that hits one reference copy alone
  (one-sided noise, not drift) does not rescale its neighbour;
- the median slowdown over the sweep is the reference: normalised durations are in the units of the
  sweep's typical state, not of an idle machine (an idle machine has no stable state to measure).

The raw durations stay in ``duration_raw_s`` and the reference times in ``reference_s``: the
correction can be undone or redone with another window.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

DEFAULT_WINDOW = 9
"""Consecutive points whose reference times give one point's drift factor (odd: centred)."""


def drift_factors(reference_s, window: int = DEFAULT_WINDOW) -> np.ndarray:
    """The machine's slowdown at each point, in measurement order: the centred rolling median of
    the reference times over ``window`` points, divided by the median of all of them."""
    ref = pd.Series(np.asarray(reference_s, dtype=float))
    if ref.empty:
        return np.zeros(0)
    local = ref.rolling(max(1, int(window)), center=True, min_periods=1).median()
    return (local / float(ref.median())).to_numpy()


def normalise_drift(df: pd.DataFrame, window: int = DEFAULT_WINDOW) -> pd.DataFrame:
    """``df`` (rows in measurement order, with ``duration_raw_s`` and ``reference_s``) with
    ``drift_factor`` and ``duration_s`` = raw duration / drift factor."""
    out = df.copy()
    f = drift_factors(out["reference_s"], window)
    out["drift_factor"] = f
    out["duration_s"] = out["duration_raw_s"].to_numpy(dtype=float) / f
    return out
