"""Acceptance math: engine rate <-> per-token chain probability, and its calibration.

Draft steps accept a prefix: with per-token probability ``a`` and draft length ``k``, a step
accepts at least ``i + 1`` tokens with probability ``a ** (i + 1)``, so the engine rate
accepted / drafted is ``r(a, k) = a (1 - a^k) / (k (1 - a))`` (engine-telemetry.md 5.3).
Profiles state ``r``, the measured number; the simulator needs ``a`` per request.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import numpy as np

_GRID = (np.arange(4000) + 0.5) / 4000  # midpoints: Beta densities may be infinite at 0 and 1


def engine_rate(alpha: np.ndarray | float, k: int) -> np.ndarray:
    """Expected accepted / drafted of a chain drafter with per-token acceptance ``alpha``.

    >>> float(engine_rate(0.8, 5).round(3)), float(engine_rate(1.0, 3))
    (0.538, 1.0)
    """
    a = np.clip(np.asarray(alpha, dtype=np.float64), 0.0, 1.0)
    # sum_{i=1..k} a^i / k, written as a polynomial so a = 1 needs no special case
    powers = a[..., None] ** np.arange(1, k + 1)
    return np.asarray(powers.sum(axis=-1) / k)


def chain_alpha(rate: float, k: int) -> float:
    """The per-token acceptance whose engine rate at draft length ``k`` is ``rate``.

    >>> round(chain_alpha(12208 / 33712, 7), 2)   # vLLM #26191: EAGLE-3, k = 7, tau 3.53
    0.74
    """
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if float(engine_rate(mid, k)) < rate:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _beta_weights(mean: float, concentration: float) -> np.ndarray:
    a, b = mean * concentration, (1.0 - mean) * concentration
    # unnormalised log density: the weights are normalised over the grid anyway
    logpdf = (a - 1) * np.log(_GRID) + (b - 1) * np.log1p(-_GRID)
    w = np.exp(logpdf - logpdf.max())
    return np.asarray(w / w.sum())


def pooled_rate(mean: float, k: int, concentration: float) -> float:
    """sum(accepted) / sum(drafted) over requests whose alpha ~ Beta(mean, concentration).

    Requests have a given output length, so a request with higher alpha needs fewer verify
    steps (output / (1 + k r)) and drafts fewer tokens: the pooled rate weights each request
    by 1 / (1 + k r), which pulls it below the plain mean of r.
    """
    w = _beta_weights(mean, concentration)
    r = engine_rate(_GRID, k)
    steps = w / (1.0 + k * r)
    return float((steps * r).sum() / steps.sum())


@lru_cache(maxsize=4096)
def calibrated_mean(rate: float, k: int, concentration: float) -> float:
    """Mean of the per-request Beta(alpha) that makes the pooled engine rate equal ``rate``.

    >>> round(pooled_rate(calibrated_mean(0.42, 3, 20.0), 3, 20.0), 4)
    0.42
    """
    rate = min(max(rate, 0.005), 0.995)
    lo, hi = 1e-4, 1.0 - 1e-4
    for _ in range(50):
        mid = (lo + hi) / 2
        if pooled_rate(mid, k, concentration) < rate:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def beta_expectation(f: Callable[[np.ndarray], np.ndarray], mean: float,
                     concentration: float) -> float:
    """E[f(a)] for a ~ Beta with ``mean`` and ``concentration`` (midpoint rule, 4000 points).

    >>> round(beta_expectation(lambda a: a, 0.3, 20.0), 6)
    0.3
    """
    return float((_beta_weights(mean, concentration) * f(_GRID)).sum())
