"""Intervals for the change report: ratios over clustered buckets, quantiles from sketches.

Requests of one minute are not independent (one prompt mix, one batch, one load), so a ratio
metric (acceptance, error rate, mean accepted length) treats each minute bucket as a
*cluster*: the ratio ``R = sum(y) / sum(x)`` has the delta-method (linearisation) variance

    Var(R) = n / (n - 1) * sum((y_i - R x_i)^2) / (sum x_i)^2

over the ``n`` buckets, which is the cluster-robust (sandwich) variance of a ratio estimator.
The relative change of two independent sides is judged on the log scale
(``log(a / b)`` has variance ``Var(a) / a^2 + Var(b) / b^2``), which keeps the interval of a
ratio inside (-1, inf). The interval uses Student's t with ``min(n_before, n_after) - 1``
degrees of freedom (:func:`t95`): the same as 1.96 for hours of minute buckets, and honest
about the few hour buckets left once minute rows have expired.

Quantiles (p50, p99 of latency and throughput) are read from the merged log-bucket sketch of
each side; the distribution-free 95% bounds of a quantile ``q`` of ``n`` observations are the
order statistics at ranks ``q +- 1.96 sqrt(q (1 - q) / n)``, read off the same sketch and
widened by its relative accuracy. The interval of the relative change of two sides combines
the bounds conservatively: ``[low_after / high_before - 1, high_after / low_before - 1]``.
Minute clustering is not accounted for there: the order-statistic bounds assume independent
requests, which the 5% minimum effect (far above a sketch's 1%) and the wide combination
make up for.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from monitor.aggregate.sketch import LogHistogram

__all__ = ["Z95", "Interval", "t95", "QuantileBounds", "RatioEstimate", "absolute_change",
           "quantile_bounds", "ratio_estimate", "relative_change", "relative_quantile_change"]

Z95 = 1.959963984540054

Interval = tuple[float | None, float | None]

# Two-sided 95% quantiles of Student's t for 1..10 degrees of freedom.
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)


def t95(df: int) -> float:
    """The 97.5% quantile of Student's t with ``df`` degrees of freedom (a table to 10, then
    the Cornish-Fisher expansion, within 0.1% of the exact value).

    >>> t95(1), round(t95(30), 3), round(t95(10_000), 3)
    (12.706, 2.042, 1.96)
    """
    if df < 1:
        raise ValueError(f"df must be >= 1, got {df}")
    if df <= len(_T95):
        return _T95[df - 1]
    z = Z95
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


@dataclass(frozen=True, slots=True)
class RatioEstimate:
    """``sum(y) / sum(x)`` over clusters, its delta-method variance and the cluster count."""

    value: float
    variance: float
    clusters: int
    numerator: float
    denominator: float


def ratio_estimate(clusters: Iterable[tuple[float, float]]) -> RatioEstimate | None:
    """The clustered ratio of ``(y, x)`` pairs (pairs with ``x <= 0`` carry no ratio and are
    left out); ``None`` with fewer than two clusters, where no variance can be estimated.

    >>> r = ratio_estimate([(6, 10), (7, 10), (5, 10)])
    >>> round(r.value, 3), round(r.variance, 6), r.clusters
    (0.6, 0.003333, 3)
    >>> ratio_estimate([(6, 10)]) is None
    True
    """
    pairs = [(float(y), float(x)) for y, x in clusters if x > 0]
    n = len(pairs)
    if n < 2:
        return None
    sy = math.fsum(y for y, _ in pairs)
    sx = math.fsum(x for _, x in pairs)
    r = sy / sx
    resid = math.fsum((y - r * x) ** 2 for y, x in pairs)
    return RatioEstimate(r, n / (n - 1) * resid / (sx * sx), n, sy, sx)


def relative_change(before: float, var_before: float, after: float, var_after: float,
                    z: float = Z95) -> tuple[float | None, Interval]:
    """``after / before - 1`` and its interval from two independent estimates' variances.

    Log scale when both are positive; linear (delta method on ``after / before``) when only
    ``before`` is; nothing when ``before`` is not positive.

    >>> change, (lo, hi) = relative_change(0.58, 0.0001, 0.47, 0.0001)
    >>> round(change, 3), round(lo, 3), round(hi, 3)
    (-0.19, -0.232, -0.145)
    """
    if not (before > 0 and math.isfinite(before) and math.isfinite(after)):
        return None, (None, None)
    change = after / before - 1.0
    if after > 0:
        se = math.sqrt(var_after / after**2 + var_before / before**2)
        log_ratio = math.log(after / before)
        return change, (math.expm1(log_ratio - z * se), math.expm1(log_ratio + z * se))
    se = math.sqrt(var_after + (after / before) ** 2 * var_before) / before
    return change, (change - z * se, change + z * se)


def absolute_change(before: float, var_before: float, after: float, var_after: float,
                    z: float = Z95) -> tuple[float, Interval]:
    """``after - before`` and its interval.

    >>> d, (lo, hi) = absolute_change(0.01, 0.000004, 0.05, 0.000009)
    >>> round(d, 3), round(lo, 4), round(hi, 4)
    (0.04, 0.0329, 0.0471)
    """
    d = after - before
    se = math.sqrt(var_before + var_after)
    return d, (d - z * se, d + z * se)


@dataclass(frozen=True, slots=True)
class QuantileBounds:
    """A quantile read from a sketch, with distribution-free 95% bounds and the count."""

    value: float
    low: float
    high: float
    count: int


def quantile_bounds(h: LogHistogram, q: float, z: float = Z95) -> QuantileBounds | None:
    """The ``q`` quantile of ``h`` and its order-statistic bounds; ``None`` when empty.

    >>> h = LogHistogram()
    >>> h.extend([float(v) for v in range(1, 1001)])
    >>> b = quantile_bounds(h, 0.5)
    >>> round(b.value), round(b.low), round(b.high), b.count
    (498, 464, 534, 1000)
    """
    n = h.count
    if n == 0:
        return None
    d = z * math.sqrt(q * (1.0 - q) / n)
    value = h.quantile(q)
    low = h.quantile(max(0.0, q - d))
    high = h.quantile(min(1.0, q + d))
    if value is None or low is None or high is None:
        return None
    a = h.relative_accuracy
    return QuantileBounds(value, low * (1.0 - a), high * (1.0 + a), n)


def relative_quantile_change(before: QuantileBounds,
                             after: QuantileBounds) -> tuple[float | None, Interval]:
    """``after / before - 1`` of a quantile, with the conservative combined interval; an end
    that would divide by 0 is ``None`` (unbounded).

    >>> b, a = QuantileBounds(100.0, 95.0, 105.0, 500), QuantileBounds(130.0, 120.0, 140.0, 500)
    >>> change, (lo, hi) = relative_quantile_change(b, a)
    >>> round(change, 3), round(lo, 3), round(hi, 3)
    (0.3, 0.143, 0.474)
    """
    if before.value <= 0:
        return None, (None, None)
    change = after.value / before.value - 1.0
    low = after.low / before.high - 1.0 if before.high > 0 else None
    high = after.high / before.low - 1.0 if before.low > 0 else None
    return change, (low, high)
