"""The pure math of CUSUM calibration: information, ARL <-> threshold, delay, and theta.

A CUSUM ``S_t = max(0, S_{t-1} + l_t)`` alarms when ``S_t >= h``. Everything here is a
function of the increments ``l_t`` only, so the same formulas serve an exact Bernoulli
log-likelihood ratio, a quasi-likelihood one on overdispersed requests, and an oracle.

- :func:`kl_bernoulli` is the information per drafted token, :func:`design_effect` the
  variance inflation of tokens that share a request (peers-and-style.md 1(d)).
- :func:`siegmund_arl` is Siegmund's approximation (overshoot ignored) of the expected run
  length of a CUSUM whose increments have mean ``-drift`` and adjustment coefficient
  ``theta`` (the non-zero root of ``E[exp(theta l)] = 1``). It is the mean time to a false
  alarm for pre-change increments, and -- with ``drift = -I1``, ``theta = -1`` -- the mean
  detection delay, which is what :func:`siegmund_delay` wraps. With an exact likelihood ratio
  ``theta`` is 1 before the change and -1 after it.
- :func:`siegmund_threshold` inverts the ARL; :func:`threshold_for_rate` does it for a
  mixture (the false-alarm *rate* averaged over an uncertain baseline).
- :func:`lorden_delay` is the first-order limit ``log(ARL) / I`` no detector beats
  (Lorden 1971; Moustakides 1986 for CUSUM's exact optimality).
- :func:`adjustment_coefficient` solves ``mean(exp(theta l)) = 1`` on a sample of increments:
  with it, the ARL of a mis-specified (quasi-likelihood) CUSUM is still honest;
  :func:`quasi_cusum_threshold` puts it all together for one CUSUM.

Worked numbers of peers-and-style.md 1(d) (p0 = 0.70, a 10 % drop, ARL 1e5 tokens):

>>> i1, i0 = kl_bernoulli(0.63, 0.70), kl_bernoulli(0.70, 0.63)
>>> round(i1, 4), round(lorden_delay(1e5, i1))
(0.0112, 1026)
>>> h = siegmund_threshold(1e5, i0)
>>> round(h, 2), round(siegmund_delay(h, i1))
(7.0, 534)
>>> round(siegmund_arl(4.0, i0)), round(siegmund_delay(4.0, i1))   # "h=4: 4.6k, 269"
(4577, 269)
>>> round(design_effect(64, 1 / 51), 2), round(design_effect(200, 1 / 11), 1)
(2.24, 19.1)

The whole table of 1(d): first-order ``ln(ARL)/I1`` -> Siegmund delay, in tokens.

>>> for p1 in (0.665, 0.63, 0.56):
...     i1, i0 = kl_bernoulli(p1, 0.70), kl_bernoulli(0.70, p1)
...     first = [lorden_delay(a, i1) for a in (1e5, 1e6, 1e7)]
...     sharp = [siegmund_delay(siegmund_threshold(a, i0), i1) for a in (1e5, 1e6, 1e7)]
...     cells = [f"{f:,.0f} -> {s:,.0f}" for f, s in zip(first, sharp)]
...     print(f"{1 - p1 / 0.7:.0%} {i1:.4f} | " + " | ".join(cells))
5% 0.0029 | 4,030 -> 1,632 | 4,836 -> 2,430 | 5,642 -> 3,235
10% 0.0112 | 1,026 -> 534 | 1,231 -> 739 | 1,437 -> 944
20% 0.0436 | 264 -> 168 | 317 -> 221 | 370 -> 274
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import TypedDict, Unpack

import numpy as np

_H_MAX = 1e7  # a threshold this large means "never alarms" for any practical stream


def kl_bernoulli(p: float, q: float) -> float:
    """KL(Bernoulli(p) || Bernoulli(q)) in nats: the information per token for p against q.

    >>> round(kl_bernoulli(0.665, 0.70), 5), kl_bernoulli(0.5, 0.5)
    (0.00286, 0.0)
    """
    if not (0.0 <= p <= 1.0 and 0.0 < q < 1.0):
        raise ValueError(f"need 0 <= p <= 1 and 0 < q < 1, got p={p}, q={q}")
    out = 0.0
    if p > 0.0:
        out += p * math.log(p / q)
    if p < 1.0:
        out += (1.0 - p) * math.log((1.0 - p) / (1.0 - q))
    return max(out, 0.0)


def design_effect(n: float, rho: float) -> float:
    """Variance inflation ``1 + (n - 1) rho`` of n tokens with intra-request correlation rho.

    A request of n tokens carries the information of ``n / design_effect`` independent ones;
    for a Beta(concentration c) spread of per-request acceptance, ``rho = 1 / (c + 1)``.

    >>> round(design_effect(64, 1 / 11), 1)
    6.7
    """
    return 1.0 + (n - 1.0) * rho


def _expm1_minus(x: float) -> float:
    """``exp(x) - x - 1`` without cancellation for small x."""
    if abs(x) < 1e-4:
        return x * x / 2.0 + x**3 / 6.0
    if x > 700.0:
        return math.inf
    return math.expm1(x) - x


def siegmund_arl(h: float, drift: float, theta: float = 1.0) -> float:
    """Expected run length of a CUSUM with threshold h, started at 0.

    The increments have mean ``-drift`` and adjustment coefficient ``theta`` (same sign as
    ``drift``): ``(exp(theta h) - theta h - 1) / (theta drift)``. For pre-change increments
    of an exact log-likelihood ratio, ``drift = KL(p0 || p1)`` and ``theta = 1``. A zero
    drift gives the Brownian limit ``theta h^2 / (2 drift)`` read as ``h^2 / variance``; pass
    ``theta = 2 drift / variance`` for it.

    >>> round(siegmund_arl(6.0, kl_bernoulli(0.70, 0.63)))   # simulated: ~43k
    36584
    >>> round(siegmund_arl(5.0, -0.5, -1.0), 2)   # drifting up at 0.5/step: ~ (h - 1) / 0.5
    8.01
    """
    if h <= 0.0:
        return 1.0
    if drift == 0.0 or theta == 0.0:
        raise ValueError("drift and theta must be non-zero (use a small value for the limit)")
    if (drift > 0) != (theta > 0):
        raise ValueError("drift and theta must have the same sign")
    return max(1.0, _expm1_minus(theta * h) / (theta * drift))


def siegmund_delay(h: float, information: float, theta: float = 1.0) -> float:
    """Mean detection delay (in increments) of a CUSUM with threshold h after the change.

    ``information`` is the post-change mean increment (KL(p1 || p0) for an exact LLR) and
    ``theta`` the magnitude of the post-change adjustment coefficient (1 for an exact LLR):
    ``(h + (exp(-theta h) - 1) / theta) / information``.

    >>> round(siegmund_delay(6.0, kl_bernoulli(0.63, 0.70)))   # simulated: 445
    446
    """
    if information <= 0.0:
        return math.inf
    return siegmund_arl(h, -information, -abs(theta))


def siegmund_threshold(arl: float, drift: float, theta: float = 1.0) -> float:
    """The threshold h whose :func:`siegmund_arl` is ``arl`` (pre-change drift > 0).

    >>> round(siegmund_threshold(1e6, kl_bernoulli(0.70, 0.63)), 3)
    9.292
    >>> round(siegmund_arl(siegmund_threshold(1e6, 0.01, 0.8), 0.01, 0.8))
    1000000
    """
    return threshold_for_rate(arl, [drift], [theta], [1.0])


def threshold_for_rate(
    arl: float,
    drifts: Sequence[float],
    thetas: Sequence[float],
    weights: Sequence[float],
) -> float:
    """The smallest h with ``sum_m w_m / ARL_m(h) <= 1 / arl``.

    Each ``(drift_m, theta_m)`` describes the pre-change increments under one hypothesis
    about the true baseline (weights ``w_m`` sum to 1): the false-alarm *rate* is averaged
    over what the baseline might be, which is what keeps an estimated baseline honest. A
    hypothesis whose increments drift upwards (negative drift) makes h grow linearly with
    ``arl``; h is capped at 1e7 ("never alarms"). One row of :func:`thresholds_for_rate`.

    >>> round(threshold_for_rate(1e6, [0.01, 0.01], [1.0, 1.0], [0.5, 0.5]), 3)
    9.21
    >>> h = threshold_for_rate(1e6, [0.02, 0.005], [1.0, 1.0], [0.5, 0.5])
    >>> 0.5 / siegmund_arl(h, 0.02) + 0.5 / siegmund_arl(h, 0.005) <= 1e-6 * (1 + 1e-9)
    True
    """
    row = thresholds_for_rate(arl, np.array([drifts], dtype=np.float64),
                              np.array([thetas], dtype=np.float64),
                              np.asarray(weights, dtype=np.float64))
    return float(row[0])


# Doubling from h = 1 reaches 2**23 before passing _H_MAX: a rate still above the target
# there means "never alarms" (what a scalar doubling search concludes).
_H_GRID = 2.0 ** np.arange(24)
_H_TOL = 1e-13  # relative: far below the ARL's own noise, well inside 1e-9 of any bisection
# Newton's error shrinks with the square of the step: after a relative step this small the
# root is known to ~1e-16, so the step is taken without evaluating the rate again
_H_LAST = 1e-8


def thresholds_for_rate(
    arl: float,
    drifts: np.ndarray,
    thetas: np.ndarray,
    weights: np.ndarray,
) -> np.ndarray:
    """:func:`threshold_for_rate` for every row of ``drifts`` and ``thetas`` (L x M) at once.

    ``weights`` (M) are shared by the rows. Each row's rate is bracketed on the powers of
    two in one evaluation; its log, close to linear in h (a sum of near-exponentials), is
    then solved by Newton's method from the secant of the bracket, bisecting where a step
    leaves it: two or three steps reach the root.

    >>> h = thresholds_for_rate(1e6, np.array([[0.01, 0.01], [0.02, 0.005]]),
    ...                         np.ones((2, 2)), np.array([0.5, 0.5]))
    >>> [round(float(v), 3) for v in h]
    [9.211, 9.434]
    """
    if not arl > 1.0:
        raise ValueError(f"arl must be > 1, got {arl}")
    drifts, thetas = np.atleast_2d(drifts), np.atleast_2d(thetas)
    _check_hypotheses(drifts, thetas, weights)
    with np.errstate(all="ignore"):  # overflowing ARLs are rates of 0, handled as such
        return _solve_thresholds(-math.log(arl), drifts, thetas, weights)


def _solve_thresholds(log_target: float, drifts: np.ndarray, thetas: np.ndarray,
                      weights: np.ndarray) -> np.ndarray:
    scale = thetas * drifts  # > 0: the ARL is exp_minus(theta h) / scale
    lo, hi, h, never = _bracket(scale, thetas, weights, log_target)
    active = ~never
    for _ in range(100):
        rows = np.flatnonzero(active)
        if not rows.size:
            break
        rate, slope = _rate_and_slope(h[rows], scale[rows], thetas[rows], weights)
        f = np.log(rate) - log_target
        lo[rows] = np.where(f > 0.0, h[rows], lo[rows])
        hi[rows] = np.where(f <= 0.0, h[rows], hi[rows])
        h[rows], done = _newton_step(h[rows], f, slope / rate, lo[rows], hi[rows])
        active[rows[done]] = False
    h[never] = _H_MAX
    return h


def _check_hypotheses(drifts: np.ndarray, thetas: np.ndarray, weights: np.ndarray) -> None:
    """What :func:`siegmund_arl` refuses, for every hypothesis that carries weight."""
    used = np.broadcast_to(weights > 0.0, drifts.shape)
    if ((drifts == 0.0) | (thetas == 0.0))[used].any():
        raise ValueError("drift and theta must be non-zero (use a small value for the limit)")
    if ((drifts > 0.0) != (thetas > 0.0))[used].any():
        raise ValueError("drift and theta must have the same sign")


def _bracket(scale: np.ndarray, thetas: np.ndarray, weights: np.ndarray,
             log_target: float) -> tuple[np.ndarray, ...]:
    """Per row: the powers of two (or 0) either side of the root, where the log rate's
    secant between them crosses the target (the start), and whether no power up to 2**23
    reaches the target (the threshold is then _H_MAX)."""
    x = _H_GRID[None, :, None] * thetas[:, None, :]
    f = np.log((weights * _inverse_arl(x, scale[:, None, :])).sum(-1)) - log_target
    below = f <= 0.0  # the rate decreases in h: one run of True at the end
    never = ~below[:, -1]
    first = np.where(never, len(_H_GRID) - 1, below.argmax(axis=1))
    rows = np.arange(len(first))
    hi = _H_GRID[first]
    lo = np.where(first > 0, 0.5 * hi, 0.0)
    f_hi, f_lo = f[rows, first], f[rows, np.maximum(first - 1, 0)]
    secant = hi - f_hi * (hi - lo) / (f_hi - f_lo)
    start = np.where((first > 0) & (secant > lo) & (secant < hi), secant, hi)
    return lo, hi.copy(), start, never


def _exp_minus(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``exp(x) - x - 1`` as :func:`_expm1_minus` computes it (the same series for small x,
    inf past 700), and ``expm1(x)``, elementwise."""
    m1 = np.expm1(np.minimum(x, 700.0))
    out = np.where(np.abs(x) < 1e-4, x * x / 2.0 + x**3 / 6.0, m1 - x)
    return np.where(x > 700.0, np.inf, out), m1


def _inverse_arl(x: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``1 / siegmund_arl(h, drift, theta)`` at ``x = theta h`` (h > 0), elementwise."""
    arl = _exp_minus(x)[0] / scale
    return np.where(arl > 1.0, 1.0 / arl, 1.0)


def _rate_and_slope(h: np.ndarray, scale: np.ndarray, thetas: np.ndarray,
                    weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the false-alarm rate at h and its derivative in h."""
    x = thetas * h[:, None]
    e, m1 = _exp_minus(x)
    inv = scale / e
    live = inv < 1.0  # an ARL under 1 is clamped to 1: flat in h
    inv = np.where(live, inv, 1.0)
    # d(1/ARL)/dh = -theta (1/ARL) expm1(x) / (exp(x) - x - 1); the ratio tends to 1 for
    # large x, where both overflow
    ratio = np.where(x > 700.0, 1.0, m1 / e)
    slope = np.where(live, -thetas * inv * ratio, 0.0)
    return inv @ weights, slope @ weights


def _newton_step(t: np.ndarray, f: np.ndarray, slope: np.ndarray, lo: np.ndarray,
                 hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Newton's step from t for f (bisection where it leaves ``(lo, hi)``); and which rows
    have converged: f is 0, the bracket or the step is within _H_TOL, or the step is
    Newton's and under _H_LAST (taken, not evaluated)."""
    newton = t - f / slope
    move = np.abs(newton - t)
    inside = (newton > lo) & (newton < hi)
    close = move <= _H_TOL * t
    done = (f == 0.0) | close | (hi - lo <= _H_TOL * hi) | (inside & (move <= _H_LAST * t))
    nxt = np.where(inside | close, newton, 0.5 * (lo + hi))
    return np.where(f == 0.0, t, nxt), done


def lorden_delay(arl: float, information: float) -> float:
    """First-order worst-case delay ``log(arl) / information``: the limit at that ARL.

    >>> round(lorden_delay(1e5, kl_bernoulli(0.56, 0.70)))
    264
    """
    if information <= 0.0:
        return math.inf
    return math.log(arl) / information


def adjustment_coefficient(
    increments: Sequence[float] | np.ndarray,
    weights: Sequence[float] | np.ndarray | None = None,
) -> float:
    """The non-zero root theta of ``mean(exp(theta l)) = 1`` over a sample of increments.

    Its sign is opposite to the sample mean's: positive for pre-change increments (mean < 0).
    For an exact log-likelihood ratio under its null, theta is 1 (``E0[f1/f0] = 1``); a
    quasi-likelihood ratio on overdispersed data has theta near 1 when its variance model is
    right, and the ARL formulas with the empirical theta stay calibrated when it is not.
    ``weights`` (counts, e.g. of histogram bins) weight the mean. Raises ValueError when no
    root exists (all increments on one side of 0, or mean 0). One row of
    :func:`adjustment_coefficients`.

    >>> rng = np.random.default_rng(0)
    >>> p0, p1 = 0.7, 0.63
    >>> x = rng.random(200_000) < p0            # tokens under the null
    >>> llr = np.where(x, math.log(p1 / p0), math.log((1 - p1) / (1 - p0)))
    >>> round(adjustment_coefficient(llr), 2)
    1.0
    >>> round(adjustment_coefficient(llr / 2.0), 2)   # an LLR halved needs theta 2
    2.0
    >>> values, counts = np.unique(llr, return_counts=True)   # the same, as a histogram
    >>> round(adjustment_coefficient(values, counts), 2)
    1.0
    """
    x = np.asarray(increments, dtype=np.float64)
    if x.size == 0:
        raise ValueError("no increments")
    theta = float(adjustment_coefficients(x[None, :], weights)[0])
    if math.isnan(theta):
        raise ValueError("no non-zero root: mean 0, every increment on one side of 0, "
                         "or theta diverges")
    return theta


_T_MAX = 1e12  # a root beyond this is "diverges" (increments barely reach past 0)
_G_TOL = 1e-13  # |log mean exp(theta l)| at which a root is taken as found
_T_TOL = 1e-12  # relative bracket width at which it is taken as found
_T_LAST = 1e-7  # a relative Halley step this small is the last one needed


def adjustment_coefficients(
    increments: np.ndarray,
    weights: Sequence[float] | np.ndarray | None = None,
    start: np.ndarray | None = None,
) -> np.ndarray:
    """:func:`adjustment_coefficient` of every row of ``increments`` (R x B) at once.

    ``weights`` (B, or R x B) weight each row's mean. A row without a root (mean 0,
    everything on one side of 0, a root past 1e12) gets NaN instead of an error, so that a
    caller can fall back row by row. Halley's method on ``log mean exp(theta y)`` (convex,
    0 at 0), kept inside a bracket, converges in a few steps from a good ``start`` (the
    roots' magnitudes, e.g. of a similar sample; default: the Gaussian root).

    >>> x = np.array([[-1.0, 0.5, 0.2], [-0.5, 0.25, 0.1], [1.0, 2.0, 3.0]])
    >>> [round(float(t), 4) for t in adjustment_coefficients(x)]
    [0.5162, 1.0323, nan]
    """
    x = np.atleast_2d(np.asarray(increments, dtype=np.float64))
    wts = np.ones(1) if weights is None else np.asarray(weights, dtype=np.float64)
    full = np.broadcast_to(wts, x.shape)
    total = full.sum(axis=-1)
    mean = (wts * x).sum(axis=-1) / total
    sign = np.where(mean < 0.0, 1.0, -1.0)
    y = x * sign[:, None]  # each row's mean now < 0, its root > 0
    top = np.where(full > 0.0, y, -np.inf).max(axis=-1)
    theta = np.full(len(x), np.nan)
    rows = np.flatnonzero((mean != 0.0) & (top > 0.0))
    if rows.size:
        own = wts if wts.ndim == 1 else wts[rows]
        guess = _gaussian_root(y[rows], own, total[rows], -np.abs(mean[rows]))
        if start is not None:
            given = np.abs(start[rows])
            guess = np.where(np.isfinite(given) & (given > 0.0), given, guess)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            theta[rows] = sign[rows] * _LogMgf(y[rows], own, total[rows], top[rows]).root(guess)
    return theta


def _gaussian_root(y: np.ndarray, wts: np.ndarray, total: np.ndarray,
                   mean: np.ndarray) -> np.ndarray:
    """``2 |mean| / variance``: the root for normal increments, a start for the others."""
    var = (wts * (y - mean[:, None]) ** 2).sum(axis=-1) / total
    return np.maximum(np.where(var > 0.0, 2.0 * np.abs(mean) / var, 1.0), 1e-12)


class _LogMgf:
    """``g(t) = log mean exp(t y)`` of rows of y (each with mean < 0 and max ``top`` > 0)
    and its first two derivatives, for all rows or those picked by index."""

    def __init__(self, y: np.ndarray, wts: np.ndarray, total: np.ndarray,
                 top: np.ndarray) -> None:
        self.y, self.wts, self.log_total, self.top = y, wts, np.log(total), top
        # y shifted by its max: exp(t (y - top)) <= 1 for t > 0, never overflows
        self.below = y - top[:, None]

    def __call__(self, t: np.ndarray, rows: np.ndarray | None) -> tuple[np.ndarray, ...]:
        pick = slice(None) if rows is None else rows
        y = self.y[pick]
        e = t[:, None] * self.below[pick]
        # below exp(-700) a bin adds nothing next to the top one's 1, and numpy's exp takes
        # a slow path for results under float's normal range
        np.maximum(e, -700.0, out=e)
        np.exp(e, out=e)
        e *= self.wts if self.wts.ndim == 1 else self.wts[pick]
        s = e.sum(axis=-1)
        e *= y
        m1 = e.sum(axis=-1) / s
        e *= y
        m2 = e.sum(axis=-1) / s
        g = t * self.top[pick] + np.log(s) - self.log_total[pick]
        return g, m1, m2 - m1 * m1

    def root(self, t: np.ndarray) -> np.ndarray:
        """The positive root of every row (NaN past _T_MAX), starting at ``t``."""
        t = t.copy()
        lo, hi = np.zeros_like(t), np.full_like(t, np.inf)
        active = np.ones(len(t), dtype=bool)
        for _ in range(200):
            rows = None if active.all() else np.flatnonzero(active)
            pick = slice(None) if rows is None else rows
            now = t[pick]
            g, g1, g2 = self(now, rows)
            right = g > 0.0
            lo[pick] = np.where(right, lo[pick], now)
            hi[pick] = np.where(right, now, hi[pick])
            t[pick], done = _halley(now, g, g1, g2, lo[pick], hi[pick])
            lost = t > _T_MAX  # "theta diverges"
            t[lost] = np.nan
            active &= ~lost
            active[np.arange(len(t))[pick][done]] = False
            if not active.any():
                break
        return t


def _halley(t: np.ndarray, g: np.ndarray, g1: np.ndarray, g2: np.ndarray, lo: np.ndarray,
            hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Halley's step from t (Newton's, then bisection -- or doubling while nothing right of
    the root is known -- where it leaves the bracket); and which rows have converged
    (their t is returned as it came)."""
    found = np.abs(g) < _G_TOL
    narrow = np.isfinite(hi) & (hi - lo <= _T_TOL * hi)
    halley = t - 2.0 * g * g1 / (2.0 * g1 * g1 - g * g2)
    newton = t - g / g1
    fallback = np.where(np.isfinite(hi), 0.5 * (lo + hi), 2.0 * t)
    inside = (halley > lo) & (halley < hi)
    step = np.where(inside, halley, np.where((newton > lo) & (newton < hi), newton, fallback))
    # Halley's error shrinks with the cube of the step: after a step under _T_LAST of t the
    # root is known far inside the |g| < _G_TOL the scalar solver stops at, unevaluated
    last = inside & (np.abs(halley - t) <= _T_LAST * t)
    return np.where(found | narrow, t, step), found | narrow | last


class QuasiOptions(TypedDict, total=False):
    """The options of :func:`quasi_cusum_threshold` beyond the sample and the ARL."""

    shift: np.ndarray | None
    se: float
    theta_max: float
    min_requests: int | None
    nodes: int


def quasi_cusum_threshold(
    increments: np.ndarray, weights: np.ndarray, arl: float, **options: Unpack[QuasiOptions],
) -> tuple[float, float]:
    """Threshold h (and theta) of a CUSUM from a weighted sample of its pre-change increments.

    - The false-alarm rate is averaged over an uncertain baseline: under the hypothesis that
      the true baseline is ``p0 (1 + eta)``, the increments move by ``eta * shift``; ``eta``
      runs over Gauss-Hermite nodes of N(0, se^2) (:func:`threshold_for_rate`).
    - ``theta_max`` caps each hypothesis's theta (a small sample misses the rare extreme
      requests that dominate the moment generating function, which overstates theta).
    - ``min_requests``: the CUSUM clips each increment at ``h / min_requests``; theta is then
      solved on increments clipped at the h of the previous pass (a higher clip than the
      final one: conservative), two passes.

    Options (:class:`QuasiOptions`) and their defaults: ``shift=None``, ``se=0.0``,
    ``theta_max=inf``, ``min_requests=None``, ``nodes=5``. Returns ``(h, theta)``, theta at
    the estimated baseline (the central node). One row of :func:`quasi_cusum_thresholds`.

    >>> rng = np.random.default_rng(1)
    >>> x = rng.normal(-0.5, 1.0, 5000)          # theta = 2 |mean| / var = 1
    >>> h, theta = quasi_cusum_threshold(x, np.ones_like(x), 1e4)
    >>> round(theta, 2), round(h, 2)
    (1.0, 8.55)
    >>> mean = float(x.mean())
    >>> round(siegmund_arl(h, -mean, theta))       # the ARL asked for
    10000
    """
    shift = options.get("shift")
    if shift is not None:
        options["shift"] = np.asarray(shift, dtype=np.float64)[None, :]
    h, theta = quasi_cusum_thresholds(
        np.asarray(increments, dtype=np.float64)[None, :], weights, arl, **options)
    return float(h[0]), float(theta[0])


def quasi_cusum_thresholds(
    increments: np.ndarray, weights: np.ndarray, arl: float, **options: Unpack[QuasiOptions],
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`quasi_cusum_threshold` of L CUSUMs at once: ``increments`` and ``shift`` are
    L x B (one row per CUSUM, over the same B weighted bins); returns h and theta (L each).

    Every CUSUM's increments under every baseline hypothesis form one (L x nodes) x B array
    whose adjustment coefficients are solved together, and each pass's thresholds in one
    call: a bank's calibration costs a few array operations per iteration, not a scalar
    root-finding per CUSUM and node.

    >>> rng = np.random.default_rng(1)
    >>> x = rng.normal(-0.5, 1.0, 5000)
    >>> h, theta = quasi_cusum_thresholds(np.stack([x, 2.0 * x]), np.ones_like(x), 1e4)
    >>> [round(float(v), 2) for v in h], [round(float(v), 2) for v in theta]
    ([8.55, 17.1], [1.0, 0.5])
    """
    inc = np.atleast_2d(np.asarray(increments, dtype=np.float64))
    wts = np.asarray(weights, dtype=np.float64)
    theta_max = options.get("theta_max", math.inf)
    min_requests = options.get("min_requests")
    moved, pz, central = _hypotheses(inc, options.get("shift"), options.get("se", 0.0),
                                     options.get("nodes", 5))
    clip = np.full(len(inc), math.inf)
    h = np.full(len(inc), _H_MAX)
    theta = roots = np.ones_like(moved[..., 0])
    for first in (True, False)[:2 if min_requests else 1]:
        # the second pass clips a few bins: its roots are next to the first pass's
        mean, theta, roots = _drift_and_theta(np.minimum(moved, clip[:, None, None]), wts,
                                              theta_max, None if first else roots)
        h = thresholds_for_rate(arl, -mean, theta, pz)
        if min_requests:
            clip = h / min_requests
    theta0 = theta[:, central] if central is not None else np.ones(len(inc))
    return h, theta0


def _hypotheses(inc: np.ndarray, shift: np.ndarray | None, se: float,
                nodes: int) -> tuple[np.ndarray, np.ndarray, int | None]:
    """Increments under each baseline hypothesis (L x nodes x B), the hypotheses' weights,
    and the node at the estimated baseline (the last at 0, None without one)."""
    if se > 0.0 and shift is not None:
        z, pz = normal_nodes(nodes)
        moved = inc[:, None, :] + (z * se)[None, :, None] * np.atleast_2d(shift)[:, None, :]
    else:
        z, pz = np.zeros(1), np.ones(1)
        moved = inc[:, None, :]
    zero = np.flatnonzero(z == 0.0)
    return moved, pz, int(zero[-1]) if zero.size else None


def _drift_and_theta(moved: np.ndarray, wts: np.ndarray, theta_max: float,
                     start: np.ndarray | None) -> tuple[np.ndarray, ...]:
    """Mean and (capped) adjustment coefficient of every CUSUM under every hypothesis, and
    the roots as solved (NaN where none: a start for a similar sample)."""
    shape = moved.shape[:-1]
    flat = moved.reshape(-1, moved.shape[-1])
    total = wts.sum()
    mean = (wts * flat).sum(axis=-1) / total
    roots = adjustment_coefficients(flat, wts, None if start is None else start.ravel())
    theta = roots.copy()
    lost = np.isnan(theta)
    if lost.any():
        # nothing on the far side of 0: the Gaussian root
        var = (wts * (flat[lost] - mean[lost, None]) ** 2).sum(axis=-1) / total
        theta[lost] = -2.0 * mean[lost] / np.where(var == 0.0, 1e-12, var)
    flat_zero = (mean == 0.0) | (theta == 0.0)
    mean[flat_zero], theta[flat_zero] = -1e-12, 1e-12
    capped = np.minimum(theta, theta_max)
    return mean.reshape(shape), capped.reshape(shape), roots.reshape(shape)


@functools.cache
def _normal_nodes(n: int) -> tuple[np.ndarray, np.ndarray]:
    z, w = np.polynomial.hermite_e.hermegauss(n)
    z.flags.writeable = False  # shared by every caller
    w = w / w.sum()
    w.flags.writeable = False
    return z, w


def normal_nodes(n: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Hermite nodes and weights (summing to 1) for averaging over N(0, 1).

    Computed once per n (every calibration asks for the same nodes); read-only.

    >>> z, w = normal_nodes(3)
    >>> [round(float(v), 4) for v in z], round(float(w.sum()), 12)
    ([-1.7321, 0.0, 1.7321], 1.0)
    """
    return _normal_nodes(n)
