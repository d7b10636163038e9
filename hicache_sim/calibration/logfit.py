"""Fit the compute knobs an SGLang server log can pin, through the simulator's own step times.

The intervals of ``serverlog`` each time one step of a known shape. The timed world runs a decode
step in ``step_overhead + decode_time(B, K)`` and a prefill batch in ``step_overhead +
prefill_time(chunks)`` (``sim/engine.py``); the fit adjusts the knobs of ``FIT_KNOBS`` so those match
the log, minimising the log of the ratio (relative error) by least squares (soft L1 beyond 5 %, so a
few disturbed pairs do not drag it) within the calibration file's bounds. A prefill line gives
totals only, so a batch of ``n`` sequences is taken as ``n`` equal chunks.

A knob is fitted only if the intervals pin it: its effect on the step times (relative sensitivity
at the start point) must be non-negligible and not a near copy of a knob already chosen, the most
influential first (decode steps all of one shape cannot tell HBM efficiency from the per-layer fixed
cost; a MoE's prefills barely tell the dense GEMMs' efficiency from the experts'). The rest keep
their value (scenario, else its calibration file, else the preset) and the result says why.
``step_overhead_us`` is never fitted: a constant per step, the log cannot tell it from
``decode_us_per_layer``.

A seeded share of the intervals is held out; the written knobs are those fitted without them, so
the reported held-out error describes the written file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..hardware.calibration import COMPUTE_FIELDS
from ..scenario import Resolved
from ..sim.compute import ComputeModel, ComputeParams
from .serverlog import Interval

#: Kind of interval -> the knobs it may pin, in order of preference.
FIT_KNOBS = {
    "decode": ("hbm_efficiency", "decode_us_per_layer"),
    "prefill": ("linear_mfu", "attention_mfu", "moe_mfu"),
}
#: Calibration knob -> (ComputeParams field, factor from the knob's unit).
KNOB_PARAMS = {
    "linear_mfu": ("linear_mfu", 1.0),
    "attention_mfu": ("attention_mfu", 1.0),
    "moe_mfu": ("moe_mfu", 1.0),
    "hbm_efficiency": ("hbm_efficiency", 1.0),
    "decode_us_per_layer": ("decode_s_per_layer", 1e-6),
}
#: Knobs a server log never pins, with the reason the report gives.
NEVER_PINNED = {
    "step_overhead_us": "a constant per step: indistinguishable from decode_us_per_layer in a log",
    "request_overhead_us": "not in a scheduler line",
    "prefill_eager_us_per_layer": "the host floor is not separable from prefill efficiency in a log",
    "prefill_graph_us_per_layer": "the host floor is not separable from prefill efficiency in a log",
    "allreduce_latency_us": "folded into the step times; needs a collective benchmark",
    "allreduce_half_peak_mib": "folded into the step times; needs a collective benchmark",
    "allreduce_curve_exponent": "folded into the step times; needs a collective benchmark",
}
MIN_SENSITIVITY = 0.02  # d log(step time) / d log(knob), RMS over the intervals
MIN_INDEPENDENT = 0.1  # share of a knob's effect not explained by the knobs chosen before it
SMALL = 1e-4  # lower bound of a fitted fraction, and the step of a knob that starts at 0


@dataclass
class LogFit:
    """Fitted knobs, the ones left alone and why, and the held-out error per kind of interval."""

    knobs: dict[str, float]
    start: dict[str, float]
    not_pinned: dict[str, str]
    n_fit: dict[str, int] = field(default_factory=dict)
    n_holdout: dict[str, int] = field(default_factory=dict)
    holdout_ape: dict[str, tuple[float, float]] = field(default_factory=dict)  # kind -> (median, p90) %
    fit_ape: dict[str, float] = field(default_factory=dict)  # kind -> median % on the fitted intervals
    held_out: list[Interval] = field(default_factory=list)  # the intervals the fit did not see


def step_seconds(model: ComputeModel, iv: Interval) -> float:
    """What the timed world charges for one step of the interval's shape (as ``sim/engine.py``)."""
    if iv.kind == "decode":
        b, kv = iv.shape
        if iv.accept_len is not None:  # speculative: a round over the tokens it gave each request
            return model.spec_step_s(int(b), round(kv), iv.accept_len)
        return model.decode_step_s(int(b), round(kv))
    n, new, cached = iv.shape
    n = max(1, int(n))
    return model.step_overhead_s + model.prefill_time([(new / n, cached / n)] * n)


def model_with(base: ComputeParams, knobs: dict[str, float]) -> ComputeModel:
    """The scenario's compute model with some knobs replaced."""
    changes = {KNOB_PARAMS[k][0]: v * KNOB_PARAMS[k][1] for k, v in knobs.items()}
    return ComputeModel(base.with_overrides(**changes) if changes else base)


def _log_residuals(base: ComputeParams, knobs: dict[str, float], intervals: list[Interval]) -> list[float]:
    m = model_with(base, knobs)
    return [math.log(step_seconds(m, iv) / iv.seconds) for iv in intervals]


def _bounds(name: str) -> tuple[float, float]:
    low, high, _ = COMPUTE_FIELDS[name]
    return (max(low, SMALL) if high <= 1.0 else low), (high if high <= 1.0 else 1e6)


def choose_knobs(base: ComputeParams, start: dict[str, float], intervals: list[Interval], kind: str) -> dict:
    """Knob -> None (pinned) or why not, by relative sensitivity and independence at ``start``: the
    knob the step times depend on most is taken first (a MoE's prefill: the experts' efficiency)."""
    import numpy as np

    r0 = np.array(_log_residuals(base, start, intervals))
    effect = {}
    for name in FIT_KNOBS[kind]:
        v = start[name]
        step = v * 0.05 if v > 0 else 1.0
        up = min(v + step, _bounds(name)[1])
        if up == v:
            up = v - step
        col = np.array(_log_residuals(base, {**start, name: up}, intervals)) - r0
        effect[name] = col / ((up - v) / max(v, step))
    size = {n: float(np.sqrt(np.mean(c**2))) for n, c in effect.items()}
    columns: list = []
    verdict: dict[str, str | None] = {}
    for name in sorted(effect, key=lambda n: -size[n]):
        col = effect[name]
        if size[name] < MIN_SENSITIVITY:
            verdict[name] = "the intervals' step times barely depend on it"
            continue
        if columns:
            q, _ = np.linalg.qr(np.array(columns).T)
            rest = col - q @ (q.T @ col)
            if np.linalg.norm(rest) < MIN_INDEPENDENT * np.linalg.norm(col):
                verdict[name] = "the intervals' shapes cannot tell it from " + ", ".join(
                    k for k, w in verdict.items() if w is None
                )
                continue
        columns.append(col)
        verdict[name] = None
    return {n: verdict[n] for n in FIT_KNOBS[kind]}


def _fit(base: ComputeParams, start: dict[str, float], names: list[str], intervals: list[Interval]) -> dict:
    from scipy.optimize import least_squares

    if not names or not intervals:
        return {}
    lo = [_bounds(n)[0] for n in names]
    hi = [_bounds(n)[1] for n in names]
    x0 = [min(max(start[n], lo[i] + SMALL), hi[i]) for i, n in enumerate(names)]

    def residuals(x):
        return _log_residuals(base, {**start, **dict(zip(names, x))}, intervals)

    # soft L1 beyond 5 %: a pair disturbed by something the line does not show (a pause, a retraction)
    # does not drag the fit; exact figures converge to the same point.
    res = least_squares(
        residuals, x0, bounds=(lo, hi), x_scale=[max(abs(v), 1.0) for v in x0], xtol=1e-12, loss="soft_l1", f_scale=0.05
    )
    return {n: float(v) for n, v in zip(names, res.x)}


def _ape(base: ComputeParams, knobs: dict[str, float], intervals: list[Interval]) -> list[float]:
    m = model_with(base, knobs)
    return [abs(step_seconds(m, iv) / iv.seconds - 1.0) * 100.0 for iv in intervals]


def fit_log(r: Resolved, intervals: list[Interval], *, holdout: float = 0.25, seed: int = 0) -> LogFit:
    """Fit the knobs the intervals pin for the scenario ``r``; hold out a seeded share per kind."""
    import numpy as np

    base = ComputeParams.from_resolved(r)
    start = {k: float(r.compute_knobs[k]) for k in KNOB_PARAMS}
    out = LogFit(knobs={}, start=dict(start), not_pinned=dict(NEVER_PINNED))
    fitted = dict(start)
    for kind, names in FIT_KNOBS.items():
        group = [iv for iv in intervals if iv.kind == kind]
        if not group:
            for n in names:
                out.not_pinned[n] = f"no {kind}-only interval in the log"
            continue
        rng = np.random.default_rng([seed, list(FIT_KNOBS).index(kind)])
        n_out = round(holdout * len(group)) if len(group) > 1 else 0
        held = set(rng.choice(len(group), size=n_out, replace=False).tolist()) if n_out else set()
        train = [iv for i, iv in enumerate(group) if i not in held]
        test = [iv for i, iv in enumerate(group) if i in held]
        verdict = choose_knobs(base, fitted, train, kind)
        chosen = [n for n, why in verdict.items() if why is None]
        out.not_pinned.update({n: why for n, why in verdict.items() if why is not None})
        got = _fit(base, fitted, chosen, train)
        fitted.update(got)
        out.knobs.update(got)
        out.n_fit[kind], out.n_holdout[kind] = len(train), len(test)
        out.held_out += test
        out.fit_ape[kind] = float(np.median(_ape(base, fitted, train)))
        if test:
            ape = _ape(base, fitted, test)
            out.holdout_ape[kind] = (float(np.median(ape)), float(np.percentile(ape, 90)))
    return out
