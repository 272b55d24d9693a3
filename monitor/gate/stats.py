"""Always-valid statistics for the release gate: normal-mixture confidence sequences.

A pipeline polls the gate whenever it likes, and stops at the first ``pass`` or ``fail``.
A fixed-horizon 95% interval read after every batch of requests would, over enough looks,
exclude the truth almost surely; the gate uses instead the mixture sequential probability
ratio test (mSPRT) of Johari, Pekelis and Walsh ("Always Valid Inference", Operations
Research 2022). For an estimate ``d`` of an effect ``theta`` that is approximately normal with
variance ``V`` (shrinking as requests accrue), and a normal mixing distribution
``N(theta0, tau^2)`` over the alternative, the mixture likelihood ratio is

    L = sqrt(V / (V + tau^2)) * exp(tau^2 (d - theta0)^2 / (2 V (V + tau^2)))

a nonnegative martingale under ``theta = theta0``: by Ville's inequality the chance it ever
exceeds ``1 / alpha``, at any look, is at most ``alpha``. Inverting the test gives the
confidence sequence ``d +- h(V)`` with

    h(V) = sqrt(V (V + tau^2) / tau^2 * (2 log(1 / alpha) + log((V + tau^2) / V)))

which covers ``theta`` at every look at once with probability ``1 - alpha``. It is wider than
a fixed 95% interval (about 1.5-2x at the sample sizes of a release), the price of looking
whenever one likes. ``tau`` is the scale of the effects that matter: the sequence is
tightest when ``V`` is near ``tau^2 / 10`` or so, and ``tau`` enters only under a logarithm.

The variances are plug-in estimates (delta method, binomial), as in the paper's treatment of
proportions; the always-valid property test (tests/monitor/gate/test_always_valid.py)
simulates null experiments and checks the share of runs that ever fail against ``alpha``.

Estimators, each returning ``(estimate, variance)``:

- :func:`rate_difference`: candidate rate minus baseline rate (outcome and error rates);
- :func:`efficiency`: successful tasks per GPU-second ``R = S / G`` of one side, with the
  delta-method variance ``sum((s_i - R g_i)^2) / G^2 = (S - 2 R SG + R^2 Q) / G^2`` from the
  sums a bucket keeps (``S`` successes, ``G`` GPU-seconds, ``Q`` their squares, ``SG``
  GPU-seconds of the successful requests; ``s_i`` is 0 or 1, so ``sum(s_i^2) = S``);
- :func:`relative_ratio_change`: ``R_c / R_b - 1`` of two independent sides;
- :func:`exceedance_difference`: the share of candidate requests above a threshold minus
  the share of baseline requests above the baseline's own quantile (p99 regression, latency
  class improvement), read from the log-bucket sketches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from monitor.aggregate.sketch import LogHistogram

__all__ = ["ConfidenceSequence", "confidence_sequence", "efficiency", "exceedance_difference",
           "growth_needed", "half_width", "mixture_likelihood_ratio", "rate_difference",
           "relative_ratio_change", "share_above"]

Estimate = tuple[float, float]


def mixture_likelihood_ratio(estimate: float, variance: float, tau: float,
                             theta0: float = 0.0) -> float:
    """The normal-mixture likelihood ratio of ``theta = theta0`` against the mixture.

    >>> mixture_likelihood_ratio(0.0, 0.01, 0.1) < 1.0   # no effect seen: evidence for theta0
    True
    >>> mixture_likelihood_ratio(0.5, 0.01, 0.1) > 20.0  # five standard errors away
    True
    """
    if variance <= 0.0 or tau <= 0.0:
        raise ValueError("variance and tau must be positive")
    s = variance + tau * tau
    exponent = tau * tau * (estimate - theta0) ** 2 / (2.0 * variance * s)
    return math.sqrt(variance / s) * math.exp(min(exponent, 700.0))


def half_width(variance: float, alpha: float, tau: float) -> float:
    """Half the width of the level-``alpha`` confidence sequence at variance ``variance``.

    Increasing in ``variance``; at ``variance = tau^2 / 10`` and ``alpha = 0.05`` it is about
    1.5x the fixed-horizon 95% half-width ``1.96 sqrt(variance)``.

    >>> v = 0.001
    >>> round(half_width(v, 0.05, math.sqrt(10 * v)) / (1.96 * math.sqrt(v)), 2)
    1.55
    """
    if variance <= 0.0:
        return 0.0
    s = variance + tau * tau
    return math.sqrt(variance * s / (tau * tau) * (2.0 * math.log(1.0 / alpha)
                                                   + math.log(s / variance)))


@dataclass(frozen=True, slots=True)
class ConfidenceSequence:
    """``estimate +- half_width``: covers the effect at every look with chance ``1 - alpha``."""

    estimate: float
    variance: float
    half_width: float
    alpha: float
    tau: float

    @property
    def low(self) -> float:
        return self.estimate - self.half_width

    @property
    def high(self) -> float:
        return self.estimate + self.half_width

    def above(self, boundary: float) -> bool:
        """The whole sequence lies above ``boundary``: the effect is shown to exceed it."""
        return self.low > boundary

    def below(self, boundary: float) -> bool:
        return self.high < boundary


def confidence_sequence(estimate: float, variance: float, alpha: float,
                        tau: float) -> ConfidenceSequence:
    """
    >>> cs = confidence_sequence(0.05, 0.0001, 0.05, 0.02)
    >>> cs.above(0.0), cs.below(0.1), round(cs.low, 4)
    (True, True, 0.0192)
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    return ConfidenceSequence(estimate, variance, half_width(variance, alpha, tau), alpha, tau)


def growth_needed(variance: float, margin: float, alpha: float, tau: float, *,
                  limit: float = 1e9) -> float | None:
    """By how much every side's request count must grow (a factor ``k >= 1``, the variance
    falling as ``variance / k``) for the sequence's half-width to fall below ``margin``, the
    distance from the estimate to the boundary it must clear: ``None`` if no growth up to
    ``limit`` does (the estimate sits on the boundary).

    >>> round(growth_needed(0.0004, 0.02, 0.05, 0.02), 1)
    9.2
    >>> growth_needed(0.0004, 0.0, 0.05, 0.02) is None
    True
    """
    if margin <= 0.0:
        return None
    if half_width(variance, alpha, tau) < margin:
        return 1.0
    if half_width(variance / limit, alpha, tau) >= margin:
        return None
    # h(V / k)^2 is V / k times a factor that grows only with log k, so the fixed point of
    # k -> k (h(V / k) / margin)^2 contracts fast (its slope is about 1 / (2 log(1 / alpha)
    # + log(k tau^2 / V))): a few steps, then a nudge to be strictly inside the margin.
    k = max(1.0, (half_width(variance, alpha, tau) / margin) ** 2)
    for _ in range(100):
        nxt = max(1.0, k * (half_width(variance / k, alpha, tau) / margin) ** 2)
        if nxt > limit:
            return None
        done = abs(nxt / k - 1.0) < 1e-3
        k = nxt
        if done:
            break
    while half_width(variance / k, alpha, tau) >= margin:
        k *= 1.001
    return k


# -- estimators -------------------------------------------------------------------------------


def _smoothed(hits: float, n: float) -> float:
    """A rate for the variance only, never 0 or 1: a side with no errors yet still has
    uncertainty (the "add one half" of Agresti and Caffo)."""
    return (hits + 0.5) / (n + 1.0)


def rate_difference(hits_b: float, n_b: float, hits_c: float, n_c: float) -> Estimate:
    """Candidate rate minus baseline rate, with the binomial variance of each side.

    >>> d, v = rate_difference(90, 100, 80, 100)
    >>> round(d, 3), round(math.sqrt(v), 4)
    (-0.1, 0.0505)
    """
    if n_b <= 0 or n_c <= 0:
        raise ValueError("each side needs at least one request")
    pb, pc = _smoothed(hits_b, n_b), _smoothed(hits_c, n_c)
    return hits_c / n_c - hits_b / n_b, pb * (1 - pb) / n_b + pc * (1 - pc) / n_c


def efficiency(successes: float, gpu_seconds: float, gpu_seconds_sq: float,
               success_gpu_seconds: float) -> Estimate:
    """Successful tasks per GPU-second and its delta-method variance (module docstring).

    >>> efficiency(successes=3, gpu_seconds=4.0, gpu_seconds_sq=4.0, success_gpu_seconds=3.0)
    (0.75, 0.046875)
    """
    if gpu_seconds <= 0.0:
        raise ValueError("no GPU-seconds: efficiency undefined")
    r = successes / gpu_seconds
    resid = successes - 2.0 * r * success_gpu_seconds + r * r * gpu_seconds_sq
    # A side where every request succeeds on the same GPU-seconds has no residual at all;
    # a floor (a relative standard error of S^-1.5) keeps the sequence from claiming certainty.
    return r, max(resid / (gpu_seconds * gpu_seconds), r * r / max(successes, 1.0) ** 3)


def relative_ratio_change(r_b: float, v_b: float, r_c: float, v_c: float) -> Estimate:
    """``r_c / r_b - 1`` of two independent positive estimates, with the delta-method
    variance ``(r_c / r_b)^2 (v_b / r_b^2 + v_c / r_c^2)``.

    >>> d, v = relative_ratio_change(2.0, 0.01, 2.2, 0.01)
    >>> round(d, 3), round(v, 5)
    (0.1, 0.00553)
    """
    if r_b <= 0.0:
        raise ValueError("the baseline rate must be positive")
    ratio = r_c / r_b
    rel_var = v_b / (r_b * r_b) + (v_c / (r_c * r_c) if r_c > 0 else v_c / (r_b * r_b))
    return ratio - 1.0, ratio * ratio * rel_var if r_c > 0 else rel_var


def share_above(h: LogHistogram, threshold: float) -> float:
    """The share of the sketch's values above ``threshold``, the bucket holding the
    threshold counted half (a bucket is 2% wide: counting it whole or not at all would bias
    a comparison at the baseline's own quantile by up to the bucket's mass).

    >>> h = LogHistogram()
    >>> h.extend([float(v) for v in range(1, 101)])
    >>> round(share_above(h, 90.5), 2)
    0.1
    """
    if h.count == 0:
        return 0.0
    if threshold <= 0.0:
        return (h.count - h.zeros) / h.count
    key = math.ceil(math.log(threshold) * h._inv_log_gamma)
    above = sum(n for k, n in h.bins.items() if k > key)
    return (above + 0.5 * h.bins.get(key, 0)) / h.count


def exceedance_difference(baseline: LogHistogram, candidate: LogHistogram, q: float,
                          tolerance: float = 0.0, *, baseline_quantile: float | None = None
                          ) -> tuple[float, float, float]:
    """``(estimate, variance, threshold)``: the share of candidate values above the baseline's
    ``q`` quantile times ``1 + tolerance``, minus the share of baseline values above that
    quantile (about ``1 - q``). Positive: the candidate's tail is heavier than the baseline's
    tail plus the tolerance. The variance is binomial on each side at ``1 - q``: the
    candidate's share is a proportion, and the baseline's quantile moves by as much as a
    proportion of ``n_b`` requests would (``q (1 - q) / n_b``). ``baseline_quantile``: the
    baseline's ``q`` quantile when the caller has read it already.

    >>> b, c = LogHistogram(), LogHistogram()
    >>> b.extend([float(v) for v in range(1, 1001)])
    >>> c.extend([float(v) * 1.5 for v in range(1, 1001)])
    >>> d, v, t = exceedance_difference(b, c, 0.99)
    >>> round(t), d > 0.3
    (983, True)
    """
    if baseline.count == 0 or candidate.count == 0:
        raise ValueError("each side needs at least one value")
    t = baseline.quantile(q) if baseline_quantile is None else baseline_quantile
    assert t is not None
    threshold = t * (1.0 + tolerance)
    s_b, s_c = share_above(baseline, t), share_above(candidate, threshold)
    pb = _smoothed(s_b * baseline.count, baseline.count)
    pc = _smoothed(s_c * candidate.count, candidate.count)
    p0 = 1.0 - q
    var = max(pb * (1 - pb), p0 * (1 - p0)) / baseline.count + pc * (1 - pc) / candidate.count
    return s_c - s_b, var, threshold
