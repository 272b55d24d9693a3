"""The ``policy`` scenario's true speed model: what each draft length really gains.

Under the simulator's generative model a request with chain acceptance ``a`` emits on average
``tau_k(a) = 1 + a + ... + a^k`` tokens per verification step at draft length ``k``, and a
step costs ``1 + k m`` plain target steps, ``m = c + v(batch)``. Its output length does not
depend on ``a``, so over many requests decode time at draft length ``k`` is
``E[L] (1 + k m) E[1 / tau_k(a)]`` plain steps against ``E[L]`` without speculation:

    true speedup = 1 / ((1 + k m) E[1 / tau_k(a)]),   a ~ Beta(alpha mean, concentration)

the tokens per step pooled over steps (what per-position counts measure) over the cost of a
step. The expectation is taken numerically on a fine grid (error below 1e-6). Ignored, as too
small to matter: ``max_tokens`` cutting a last step short, and requests of one step.

>>> python, rust, haskell = ({"lang": v} for v in ("python", "rust", "haskell"))
>>> round(true_speedup("code-assistant", python, 1, 4), 3)
1.93
>>> [true_best_k("code-assistant", python, b, 4) for b in (8, 32, 64, 200)]
[4, 3, 1, 0]
>>> [true_best_k("code-assistant", rust, b, 4) for b in (8, 32, 64)]
[2, 1, 0]
>>> [round(true_speedup("code-assistant", haskell, 1, k), 2) for k in range(5)]
[1.0, 0.96, 0.84, 0.73, 0.65]
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

import numpy as np

from monitor.simulate.acceptance import beta_expectation
from monitor.simulate.exceptions import SimulationError
from monitor.simulate.model import batch_factor
from monitor.simulate.policy_traits import PolicyTraits
from monitor.simulate.profiles import POLICY_ROUTES, RouteProfile


def _profile(route: str) -> tuple[RouteProfile, PolicyTraits]:
    for profile in POLICY_ROUTES:
        if profile.name == route and profile.policy is not None:
            return profile, profile.policy
    known = ", ".join(r.name for r in POLICY_ROUTES)
    raise SimulationError(f"no route {route!r} in the policy scenario; known: {known}")


@lru_cache(maxsize=1024)
def _inverse_tau(alpha: float, concentration: float, k: int) -> float:
    """E[1 / tau_k(a)] over a ~ Beta with mean ``alpha``."""

    def inverse(a: np.ndarray) -> np.ndarray:
        return np.asarray(1.0 / (a[:, None] ** np.arange(k + 1)).sum(axis=1))

    return beta_expectation(inverse, alpha, concentration)


def _steps_per_token(route: str, tags: Mapping[str, str], k: int) -> float:
    """E[1 / tau_k] of the route's requests with ``tags``; the mix of the tag's values when
    ``tags`` does not name the route's tag (the route pooled)."""
    profile, traits = _profile(route)
    alpha = traits.alpha_of(dict(tags))
    if alpha is not None:
        return _inverse_tau(alpha, profile.concentration, k)
    return sum(v.share * _inverse_tau(v.alpha, profile.concentration, k) for v in traits.values)


def marginal_cost(route: str, batch_size: int) -> float:
    """``m = c + v(batch)``: the cost of one drafted position, in plain target steps.

    >>> marginal_cost("code-assistant", 1), round(marginal_cost("code-assistant", 64), 2)
    (0.2, 0.6)
    """
    profile, traits = _profile(route)
    return profile.draft_cost + float(traits.verify.at(batch_size))


def true_speedup(route: str, tags: Mapping[str, str], batch_size: int, k: int) -> float:
    """Expected decode speed at draft length ``k`` over no speculation (``k`` 0: 1.0).

    ``tags`` without the route's tag (``lang`` on code-assistant) means the route's mix of
    its values; other tags are ignored.
    """
    if k < 0 or batch_size < 1:
        raise SimulationError("k >= 0 and batch_size >= 1 required")
    if k == 0:
        _profile(route)
        return 1.0
    m = marginal_cost(route, batch_size)
    return 1.0 / ((1.0 + k * m) * _steps_per_token(route, tags, k))


def true_best_k(route: str, tags: Mapping[str, str], batch_size: int, k_max: int) -> int:
    """The draft length in 0..``k_max`` with the highest true speedup (0: don't speculate)."""
    speed = [true_speedup(route, tags, batch_size, k) for k in range(k_max + 1)]
    return int(np.argmax(speed))  # the first maximum: ties keep the shorter draft


def true_bucket_speedup(
    route: str, tags: Mapping[str, str], low: int, high: int | None, k: int
) -> float:
    """True speedup over the batch sizes ``low``..``high`` (None: to the largest) as the
    scenario draws them: plain decode time over speculative decode time, summed over the
    bucket's batch-size mix at mean load (a step at batch b takes ``batch_factor(b)``).

    >>> round(true_bucket_speedup("code-assistant", {"lang": "python"}, 2, 3, 4), 3)
    1.93
    >>> round(true_bucket_speedup("code-assistant", {"lang": "python"}, 128, 255, 4), 3)
    0.783
    """
    _, traits = _profile(route)
    top = traits.batch_max if high is None else min(high, traits.batch_max)
    if not 1 <= low <= top:
        raise SimulationError(f"no batch sizes in {low}..{high} (the scenario draws 1..{top})")
    if k == 0:
        return 1.0
    batch = np.arange(low, top + 1)
    weight = traits.batch_weights()[low - 1:top] * batch_factor(batch.astype(np.float64))
    cost = 1.0 + k * np.array([marginal_cost(route, int(b)) for b in batch.tolist()])
    per_token = _steps_per_token(route, tags, k)
    return float(weight.sum() / (weight * cost).sum() / per_token)
