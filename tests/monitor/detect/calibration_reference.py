"""The scalar CUSUM calibration of :mod:`monitor.detect.calibration` before issue 18.

One bisection per threshold and one safeguarded Newton iteration per CUSUM and baseline
hypothesis, as the detector calibrated until its solvers went to arrays. Kept verbatim
(docstrings aside) as the reference :mod:`test_calibration_solvers` holds the array solvers
to; the closed forms both share (``siegmund_arl``) come from the module itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from monitor.detect.calibration import _H_MAX, siegmund_arl


def threshold_for_rate(arl: float, drifts: Sequence[float], thetas: Sequence[float],
                       weights: Sequence[float]) -> float:
    """The smallest h with ``sum_m w_m / ARL_m(h) <= 1 / arl``."""
    if not arl > 1.0:
        raise ValueError(f"arl must be > 1, got {arl}")
    target = 1.0 / arl

    def rate(h: float) -> float:
        total = 0.0
        for drift, theta, w in zip(drifts, thetas, weights, strict=True):
            if w > 0.0:
                total += w / siegmund_arl(h, drift, theta)
        return total

    lo, hi = 0.0, 1.0
    while rate(hi) > target:
        lo, hi = hi, hi * 2.0
        if hi > _H_MAX:
            return _H_MAX
    # rate(h) is decreasing in h: bisect to a relative precision far below the ARL's noise
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if rate(mid) > target:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return hi


def adjustment_coefficient(
    increments: Sequence[float] | np.ndarray,
    weights: Sequence[float] | np.ndarray | None = None,
) -> float:
    """The non-zero root theta of ``mean(exp(theta l)) = 1`` over a sample of increments."""
    x = np.asarray(increments, dtype=np.float64)
    if x.size == 0:
        raise ValueError("no increments")
    wts = np.ones_like(x) if weights is None else np.asarray(weights, dtype=np.float64)
    total = float(wts.sum())
    mean = float((wts * x).sum()) / total
    if mean == 0.0:
        raise ValueError("increments have mean 0: no non-zero root")
    sign = 1.0 if mean < 0 else -1.0
    y = x * sign  # now mean(y) < 0 and the root is positive
    top = float(y[wts > 0].max())
    if top <= 0.0:
        raise ValueError("no increment on the far side of 0: theta is infinite")

    def g(t: float) -> tuple[float, float]:
        # log mean exp(t y) and its derivative, shifted by the max for stability
        z = t * y
        m = float(z.max())
        e = wts * np.exp(z - m)
        s = float(e.sum())
        return m + math.log(s / total), float((e * y).sum() / s)

    var = float((wts * (y + mean * sign) ** 2).sum()) / total
    # Gaussian guess 2|mean|/var, then bracket: g < 0 just right of 0, g > 0 far enough out.
    lo = 0.0
    hi = max(2.0 * abs(mean) / var if var > 0 else 1.0, 1e-12)
    while g(hi)[0] <= 0.0:
        lo, hi = hi, hi * 2.0
        if hi > 1e12:
            raise ValueError("theta diverges")
    t = hi
    for _ in range(200):
        val, der = g(t)
        if val > 0.0:
            hi = t
        else:
            lo = t
        if abs(val) < 1e-13 or hi - lo <= 1e-12 * hi:
            break
        # Newton from the right of a convex function; fall back to bisection when it leaves
        # the bracket
        step = t - val / der if der > 0 else 0.5 * (lo + hi)
        t = step if lo < step < hi else 0.5 * (lo + hi)
    return float(sign * t)


def quasi_cusum_threshold(
    increments: np.ndarray,
    weights: np.ndarray,
    arl: float,
    shift: np.ndarray | None = None,
    se: float = 0.0,
    theta_max: float = math.inf,
    min_requests: int | None = None,
    nodes: int = 5,
) -> tuple[float, float]:
    """Threshold h (and theta) of a CUSUM from a weighted sample of its pre-change increments."""
    z, pz = normal_nodes(nodes) if se > 0.0 and shift is not None else (np.zeros(1), np.ones(1))
    clip = math.inf
    h, theta0 = _H_MAX, 1.0
    for _ in range(2 if min_requests else 1):
        drifts, thetas = [], []
        for zm in z.tolist():
            inc = increments if zm == 0.0 or shift is None else increments + zm * se * shift
            if clip < math.inf:
                inc = np.minimum(inc, clip)
            mean = float((weights * inc).sum() / weights.sum())
            try:
                theta = adjustment_coefficient(inc, weights)
            except ValueError:
                # nothing on the far side of 0: the Gaussian root
                var = float((weights * (inc - mean) ** 2).sum() / weights.sum()) or 1e-12
                theta = -2.0 * mean / var
            if mean == 0.0 or theta == 0.0:
                mean, theta = -1e-12, 1e-12
            theta = min(theta, theta_max)
            drifts.append(-mean)
            thetas.append(theta)
            if zm == 0.0:
                theta0 = theta
        h = threshold_for_rate(arl, drifts, thetas, pz.tolist())
        if min_requests:
            clip = h / min_requests
    return h, theta0


def normal_nodes(n: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Hermite nodes and weights (summing to 1) for averaging over N(0, 1)."""
    z, w = np.polynomial.hermite_e.hermegauss(n)
    return z, w / w.sum()
