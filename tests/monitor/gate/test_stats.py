"""The always-valid statistics: the confidence sequence is the mSPRT inverted, covers at every
look, and the estimators' variances match the spread of simulated estimates."""

from __future__ import annotations

import math

import numpy as np
import pytest

from monitor.aggregate.sketch import LogHistogram
from monitor.gate.stats import (
    confidence_sequence,
    efficiency,
    exceedance_difference,
    growth_needed,
    half_width,
    mixture_likelihood_ratio,
    rate_difference,
    relative_ratio_change,
    share_above,
)


@pytest.mark.parametrize(("variance", "tau"), [(1e-4, 0.02), (1e-6, 0.05), (0.01, 0.005)])
def test_the_sequence_is_the_msprt_inverted(variance: float, tau: float) -> None:
    """On the sequence's edge the mixture likelihood ratio is exactly 1 / alpha: outside it
    the mSPRT rejects, inside it does not."""
    alpha = 0.01
    h = half_width(variance, alpha, tau)
    assert mixture_likelihood_ratio(h, variance, tau) == pytest.approx(1 / alpha, rel=1e-9)
    assert mixture_likelihood_ratio(1.01 * h, variance, tau) > 1 / alpha
    assert mixture_likelihood_ratio(0.99 * h, variance, tau) < 1 / alpha


def test_the_sequence_is_wider_than_a_fixed_interval_and_shrinks() -> None:
    widths = [half_width(v, 0.05, 0.02) for v in (1e-3, 1e-4, 1e-5, 1e-6)]
    assert widths == sorted(widths, reverse=True)
    for v, w in zip((1e-3, 1e-4, 1e-5, 1e-6), widths, strict=True):
        assert w > 1.96 * math.sqrt(v)  # the price of looking whenever one likes
    assert half_width(0.0, 0.05, 0.02) == 0.0


def test_coverage_over_every_look_of_a_gaussian_stream() -> None:
    """Ville: a running mean of N(0, 1) draws, looked at after every draw for 2,000 draws,
    leaves its sequence at some look in at most alpha of the runs; the fixed 95% interval
    looked at as often leaves it in far more."""
    rng = np.random.default_rng(7)
    runs, n, alpha = 400, 2000, 0.05
    x = rng.normal(0.0, 1.0, (runs, n))
    k = np.arange(1, n + 1)
    mean = np.cumsum(x, axis=1) / k
    var = 1.0 / k
    tau = 0.1
    h = np.sqrt(var * (var + tau**2) / tau**2 * (2 * np.log(1 / alpha)
                                                 + np.log((var + tau**2) / var)))
    assert np.allclose(h[:5], [half_width(v, alpha, tau) for v in var[:5]])
    ever = (np.abs(mean) > h)[:, 10:].any(axis=1).mean()
    naive = (np.abs(mean) > 1.96 * np.sqrt(var))[:, 10:].any(axis=1).mean()
    assert ever <= alpha
    assert naive > 3 * alpha


def test_growth_needed_is_the_growth_that_clears_the_margin() -> None:
    v, alpha, tau, margin = 4e-4, 0.01, 0.02, 0.015
    k = growth_needed(v, margin, alpha, tau)
    assert k is not None and k > 1
    assert half_width(v / k, alpha, tau) < margin <= half_width(v / (k * 0.99), alpha, tau)
    assert growth_needed(v, 1.0, alpha, tau) == 1.0  # already clear
    assert growth_needed(v, 0.0, alpha, tau) is None  # on the boundary: never


def test_rate_difference_variance_matches_simulation() -> None:
    rng = np.random.default_rng(1)
    nb, nc, pb, pc = 2000, 3000, 0.9, 0.85
    xb, xc = rng.binomial(nb, pb, 4000), rng.binomial(nc, pc, 4000)
    d = xc / nc - xb / nb
    _, v = rate_difference(pb * nb, nb, pc * nc, nc)
    assert d.mean() == pytest.approx(pc - pb, abs=1e-3)
    assert d.var() == pytest.approx(v, rel=0.1)
    d0, v0 = rate_difference(0, 500, 0, 500)
    assert d0 == 0.0 and v0 > 0  # no errors yet is no certainty


def test_efficiency_delta_variance_matches_simulation() -> None:
    """R = successes / GPU-seconds over n requests: the delta-method variance from the four
    sums is the spread of R over repeated samples."""
    rng = np.random.default_rng(2)
    n, reps = 2000, 2000
    s = rng.random((reps, n)) < 0.7
    g = rng.gamma(4.0, 0.25, (reps, n)) * np.where(s, 1.3, 1.0)  # failures are cheaper
    r = s.sum(axis=1) / g.sum(axis=1)
    i = 0
    est, v = efficiency(float(s[i].sum()), float(g[i].sum()), float((g[i] ** 2).sum()),
                        float(g[i][s[i]].sum()))
    assert est == pytest.approx(r[i])
    assert r.var() == pytest.approx(v, rel=0.15)


def test_relative_change_and_its_variance() -> None:
    d, v = relative_ratio_change(1.0, 1e-4, 1.1, 1e-4)
    assert d == pytest.approx(0.1)
    assert v == pytest.approx(1.21 * (1e-4 + 1e-4 / 1.21))
    d, v = relative_ratio_change(1.0, 1e-4, 0.0, 1e-4)
    assert d == -1.0 and v > 0


def test_share_above_and_exceedance_under_the_null_and_a_slower_candidate() -> None:
    rng = np.random.default_rng(3)
    h = LogHistogram()
    h.extend(rng.lognormal(0.0, 0.3, 100_000).tolist())
    q99 = h.quantile(0.99)
    assert q99 is not None and share_above(h, q99) == pytest.approx(0.01, abs=0.001)
    assert share_above(h, 0.0) == 1.0 and share_above(LogHistogram(), 1.0) == 0.0
    # the same distribution: the difference is about 0, within a few standard errors
    ests = []
    for _ in range(200):
        b, c = LogHistogram(), LogHistogram()
        b.extend((1000 * rng.lognormal(0.0, 0.3, 5000)).tolist())
        c.extend((1000 * rng.lognormal(0.0, 0.3, 5000)).tolist())
        d, v, _t = exceedance_difference(b, c, 0.99)
        ests.append(d / math.sqrt(v))
    z = np.asarray(ests)
    assert abs(z.mean()) < 0.25 and 0.7 < z.std() < 1.3
    # a candidate 50% slower everywhere: far more than 1% above the baseline's p99 x 1.1
    c = LogHistogram()
    c.extend((1500 * rng.lognormal(0.0, 0.3, 5000)).tolist())
    d, v, t = exceedance_difference(b, c, 0.99, tolerance=0.1)
    assert t == pytest.approx(1.1 * b.quantile(0.99))
    assert confidence_sequence(d, v, 0.01, 0.005).above(0.0)


def test_confidence_sequence_rejects_bad_alpha() -> None:
    with pytest.raises(ValueError, match="alpha"):
        confidence_sequence(0.0, 1.0, 0.0, 1.0)
