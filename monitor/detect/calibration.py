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

import math
from collections.abc import Sequence

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
    ``arl``; h is capped at 1e7 ("never alarms").

    >>> round(threshold_for_rate(1e6, [0.01, 0.01], [1.0, 1.0], [0.5, 0.5]), 3)
    9.21
    >>> h = threshold_for_rate(1e6, [0.02, 0.005], [1.0, 1.0], [0.5, 0.5])
    >>> 0.5 / siegmund_arl(h, 0.02) + 0.5 / siegmund_arl(h, 0.005) <= 1e-6 * (1 + 1e-9)
    True
    """
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
    root exists (all increments on one side of 0, or mean 0).

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
    """Threshold h (and theta) of a CUSUM from a weighted sample of its pre-change increments.

    - The false-alarm rate is averaged over an uncertain baseline: under the hypothesis that
      the true baseline is ``p0 (1 + eta)``, the increments move by ``eta * shift``; ``eta``
      runs over Gauss-Hermite nodes of N(0, se^2) (:func:`threshold_for_rate`).
    - ``theta_max`` caps each hypothesis's theta (a small sample misses the rare extreme
      requests that dominate the moment generating function, which overstates theta).
    - ``min_requests``: the CUSUM clips each increment at ``h / min_requests``; theta is then
      solved on increments clipped at the h of the previous pass (a higher clip than the
      final one: conservative), two passes.

    Returns ``(h, theta)``, theta at the estimated baseline (the central node).

    >>> rng = np.random.default_rng(1)
    >>> x = rng.normal(-0.5, 1.0, 5000)          # theta = 2 |mean| / var = 1
    >>> h, theta = quasi_cusum_threshold(x, np.ones_like(x), 1e4)
    >>> round(theta, 2), round(h, 2)
    (1.0, 8.55)
    >>> mean = float(x.mean())
    >>> round(siegmund_arl(h, -mean, theta))       # the ARL asked for
    10000
    """
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
    """Gauss-Hermite nodes and weights (summing to 1) for averaging over N(0, 1).

    >>> z, w = normal_nodes(3)
    >>> [round(float(v), 4) for v in z], round(float(w.sum()), 12)
    ([-1.7321, 0.0, 1.7321], 1.0)
    """
    z, w = np.polynomial.hermite_e.hermegauss(n)
    return z, w / w.sum()
