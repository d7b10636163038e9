"""Fit NCCL's all-reduce bus bandwidth curve once, to two measured 8-GPU nccl-tests tables.

``python -m validation.allreduce_fit`` prints the measured and fitted times per size and the fit's
errors; the two numbers it fits are ``NCCL_HALF_PEAK_MIB`` / ``NCCL_EXPONENT`` in
``hicache_sim/hardware/allreduce.py``. The form: one all-reduce of ``S`` bytes over 8 ranks takes
``latency + 1.75 S / busbw(S)``, ``busbw(S) = peak / (1 + (half / S)^exponent)``, latency 10 us (the
simulator's ``hardware.allreduce_latency_us``), ``peak`` each table's 8 GiB value. Fitted over
4-64 MiB (prefill messages: 2,152 tokens x 4096 x 2 B = 16.8 MiB); the objective is the largest
relative error of the predicted time over both tables (minimax), so one parameter set serves both.

Tables: Azure/AI-benchmarking-guide, ``Azure_Results/ND_H200_v5_results.md`` (8 x H200, NCCL 2.20.5,
NVLS, in-place busbw) and ``ND_A100_v4_results.md`` (8 x A100-SXM4-80GB, NCCL 2.18.5), section "NCCL
Bandwidth". nccl-tests' time is ``busbw`` back to seconds: ``1.75 S / busbw``.
"""

from __future__ import annotations

import statistics

import numpy as np
from scipy.optimize import minimize

from hicache_sim.hardware.allreduce import MIB, NCCL_EXPONENT, NCCL_HALF_PEAK_MIB

RING_8 = 2 * 7 / 8
LATENCY_S = 10e-6
# Message size (MiB) -> busbw (GB/s), and the 8 GiB (peak) value.
TABLES = {
    "8 x H200 (NVLS)": ({4: 138.44, 8: 181.94, 16: 240.41, 32: 300.91, 64: 368.11}, 479.98),
    "8 x A100 (ring)": ({4: 71.43, 8: 89.99, 16: 109.22, 32: 132.77, 64: 166.63}, 231.58),
}


def model_time(size_mib: float, peak_gbps: float, half_mib: float, exponent: float) -> float:
    """Seconds the curve gives for one 8-rank all-reduce of ``size_mib``."""
    s = size_mib * MIB
    busbw = peak_gbps * 1e9 / (1.0 + (half_mib / size_mib) ** exponent)
    return LATENCY_S + RING_8 * s / busbw


def measured_time(size_mib: float, busbw_gbps: float) -> float:
    return RING_8 * size_mib * MIB / (busbw_gbps * 1e9)


def errors(half_mib: float, exponent: float) -> list[tuple[str, int, float, float, float]]:
    """(table, size MiB, measured s, fitted s, relative error) for every row."""
    rows = []
    for name, (table, peak) in TABLES.items():
        for size, bw in table.items():
            t, m = measured_time(size, bw), model_time(size, peak, half_mib, exponent)
            rows.append((name, size, t, m, m / t - 1.0))
    return rows


def fit(exponent: float | None = None) -> tuple[float, float]:
    """Minimax (half MiB, exponent); with ``exponent`` given, only ``half`` is fitted."""

    def worst(x: np.ndarray) -> float:
        h, a = (x[0], x[1]) if exponent is None else (x[0], exponent)
        return max(abs(r[4]) for r in errors(h, a))

    x0 = [12.0, 0.6] if exponent is None else [12.0]
    res = minimize(worst, x0, method="Nelder-Mead", options={"xatol": 1e-6, "fatol": 1e-9, "maxiter": 20000})
    return (float(res.x[0]), float(res.x[1])) if exponent is None else (float(res.x[0]), exponent)


def summary(half_mib: float, exponent: float) -> tuple[float, float]:
    """(max, median) absolute relative error of the predicted times."""
    errs = [abs(r[4]) for r in errors(half_mib, exponent)]
    return max(errs), statistics.median(errs)


def main() -> int:
    print("| table | size | measured us | fitted us | error |")
    print("|---|---|---|---|---|")
    for name, size, t, m, e in errors(NCCL_HALF_PEAK_MIB, NCCL_EXPONENT):
        print(f"| {name} | {size} MiB | {t * 1e6:.1f} | {m * 1e6:.1f} | {e:+.1%} |")
    h, a = fit()
    print(
        f"shipped: half {NCCL_HALF_PEAK_MIB} MiB, exponent {NCCL_EXPONENT}: max / median error "
        "{:.1%} / {:.1%}".format(*summary(NCCL_HALF_PEAK_MIB, NCCL_EXPONENT))
    )
    print(f"fit:     half {h:.3f} MiB, exponent {a:.4f}: max / median error {{:.1%}} / {{:.1%}}".format(*summary(h, a)))
    h1, _ = fit(exponent=1.0)
    print(
        f"one parameter (exponent 1, busbw = peak S / (S + h)): h {h1:.2f} MiB: max / median error "
        "{:.1%} / {:.1%}".format(*summary(h1, 1.0))
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
