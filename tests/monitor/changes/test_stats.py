"""The intervals hold their 95%: clustered ratios whose minutes wander, and quantile bounds
read off a sketch. Simulated with known truth, no database."""

from __future__ import annotations

import numpy as np

from monitor.aggregate.sketch import LogHistogram
from monitor.changes.stats import (
    quantile_bounds,
    ratio_estimate,
    relative_change,
    relative_quantile_change,
    t95,
)

REPS = 400


def _side(rng: np.random.Generator, p: float, minutes: int, spread: float) -> list[tuple]:
    """Per minute (accepted, drafted): requests of one minute share a wandering rate."""
    out = []
    for _ in range(minutes):
        p_min = np.clip(p + rng.normal(0, spread), 0.01, 0.99)
        drafted = int(rng.integers(200, 800))
        out.append((int(rng.binomial(drafted, p_min)), drafted))
    return out


def _covered(rng: np.random.Generator, minutes: int, spread: float) -> float:
    hits = 0
    for _ in range(REPS):
        b = ratio_estimate(_side(rng, 0.6, minutes, spread))
        a = ratio_estimate(_side(rng, 0.6, minutes, spread))
        _, (lo, hi) = relative_change(b.value, b.variance, a.value, a.variance,
                                      t95(min(b.clusters, a.clusters) - 1))
        hits += lo <= 0.0 <= hi
    return hits / REPS


def test_the_clustered_ratio_interval_covers_no_change_95_percent() -> None:
    rng = np.random.default_rng(7)
    # Minutes that wander 5 points: a token-level binomial interval would cover far less.
    assert 0.92 <= _covered(rng, 120, 0.05) <= 0.98
    assert 0.92 <= _covered(rng, 6, 0.05) <= 0.99  # few clusters: t keeps it honest


def test_a_token_level_interval_would_not_have() -> None:
    """Why clusters: the naive binomial variance under minute-to-minute wander."""
    rng = np.random.default_rng(8)
    hits = 0
    for _ in range(REPS):
        b, a = _side(rng, 0.6, 120, 0.05), _side(rng, 0.6, 120, 0.05)
        rb = sum(y for y, _ in b) / sum(x for _, x in b)
        ra = sum(y for y, _ in a) / sum(x for _, x in a)
        vb = rb * (1 - rb) / sum(x for _, x in b)
        va = ra * (1 - ra) / sum(x for _, x in a)
        _, (lo, hi) = relative_change(rb, vb, ra, va)
        hits += lo <= 0.0 <= hi
    assert hits / REPS < 0.6


def test_quantile_bounds_cover_the_true_quantile() -> None:
    rng = np.random.default_rng(9)
    true_p50 = float(np.exp(np.log(1000.0)))  # lognormal median
    true_p99 = float(1000.0 * np.exp(0.3 * 2.3263478740408408))
    hits = {0.5: 0, 0.99: 0}
    for _ in range(200):
        h = LogHistogram()
        h.extend(list(1000.0 * rng.lognormal(0.0, 0.3, 2000)))
        for q, truth in ((0.5, true_p50), (0.99, true_p99)):
            b = quantile_bounds(h, q)
            hits[q] += b.low <= truth <= b.high
    assert hits[0.5] / 200 >= 0.93 and hits[0.99] / 200 >= 0.9


def test_same_distribution_rarely_moves_the_combined_quantile_interval() -> None:
    rng = np.random.default_rng(10)
    excluded = 0
    for _ in range(200):
        hb, ha = LogHistogram(), LogHistogram()
        hb.extend(list(rng.lognormal(6.0, 0.4, 1000)))
        ha.extend(list(rng.lognormal(6.0, 0.4, 1000)))
        _, (lo, hi) = relative_quantile_change(quantile_bounds(hb, 0.99),
                                               quantile_bounds(ha, 0.99))
        excluded += not (lo <= 0.0 <= hi)
    assert excluded / 200 <= 0.05
