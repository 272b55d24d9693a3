"""What a route of the ``policy`` scenario looks like to a speculation policy.

A policy route differs from the default routes in three ways a policy can find from signals
known before a request runs:

- per-request chain acceptance depends on a tag (``lang``): each value has its own mean of
  the per-request Beta(alpha);
- verification is not free at large batch sizes: a speculative step with ``k`` drafts costs
  ``step_ms x (1 + k (c + v(batch)))``, with ``v`` from :class:`VerifyCost`;
- a share of its requests run without speculation on the same target (no draft, no ``spec``
  block), with the same batch sizes, so ``v`` can be measured per batch bucket.

Batch sizes are log-uniform over 1..1.25 ``batch_max`` capped at ``batch_max`` (about 4 % of
requests in full batches), shifted a little by the load (busier hours run fuller batches), so
every bucket of the default edges gets traffic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from monitor.simulate.exceptions import SimulationError

_OVERSHOOT = 1.25


@dataclass(frozen=True)
class TagValue:
    """One value of the route's tag: its share of the requests and its mean chain alpha."""

    value: str
    share: float
    alpha: float

    def __post_init__(self) -> None:
        if not self.value or not 0.0 < self.share <= 1.0 or not 0.0 < self.alpha < 1.0:
            raise SimulationError(
                f"tag value {self.value!r}: share in (0, 1] and alpha in (0, 1) required"
            )


@dataclass(frozen=True)
class VerifyCost:
    """Verification overhead ``v(batch)`` per drafted position, in plain target steps.

    Piecewise linear in log2(batch) through ``knots`` ((batch, v), increasing batch), flat
    outside them: free while the batch leaves compute idle, then rising as the drafted
    positions compete with other requests' tokens for the GPU.

    >>> cost = VerifyCost(((16, 0.0), (64, 0.4)))
    >>> [round(float(x), 3) for x in cost.at(np.array([1, 16, 32, 64, 500]))]
    [0.0, 0.0, 0.2, 0.4, 0.4]
    """

    knots: tuple[tuple[int, float], ...]

    def __post_init__(self) -> None:
        batches = [b for b, _ in self.knots]
        if not self.knots or batches != sorted(set(batches)) or batches[0] < 1:
            raise SimulationError("verify cost knots need distinct increasing batch sizes >= 1")
        if any(v < 0 for _, v in self.knots):
            raise SimulationError("verify cost must be >= 0")

    def at(self, batch: np.ndarray | float) -> np.ndarray:
        """``v`` at each batch size."""
        x = np.log2(np.maximum(np.asarray(batch, dtype=np.float64), 1.0))
        xs = np.log2(np.array([b for b, _ in self.knots], dtype=np.float64))
        return np.asarray(np.interp(x, xs, [v for _, v in self.knots]))


@dataclass(frozen=True)
class PolicyTraits:
    """How a policy route's acceptance, verification cost and batch sizes are drawn.

    ``tag_key`` None: one ``alpha`` for every request (no tag). ``plain_share`` of the
    requests run without speculation. Batch sizes: ``rint(exp(u ln (1.25 batch_max) +
    load_exponent ln load))`` with u uniform, clipped to 1..``batch_max``.

    >>> t = PolicyTraits(verify=VerifyCost(((16, 0.0),)), tag_key="lang",
    ...                  values=(TagValue("a", 0.75, 0.8), TagValue("b", 0.25, 0.3)))
    >>> t.value_index(np.array([0.1, 0.8, 0.74]))
    array([0, 1, 0])
    >>> t.alpha_of({"lang": "b"}), t.alpha_of({})
    (0.3, None)
    """

    verify: VerifyCost
    tag_key: str | None = None
    values: tuple[TagValue, ...] = ()
    alpha: float = 0.6
    plain_share: float = 0.15
    batch_max: int = 256
    load_exponent: float = 0.5

    def __post_init__(self) -> None:
        if (self.tag_key is None) != (not self.values):
            raise SimulationError("a tag key needs its values, and values need a tag key")
        if self.values and not math.isclose(sum(v.share for v in self.values), 1.0):
            raise SimulationError(f"shares of tag {self.tag_key!r} must add up to 1")
        if not 0.0 < self.alpha < 1.0 or not 0.0 <= self.plain_share < 1.0:
            raise SimulationError("alpha in (0, 1) and plain_share in [0, 1) required")
        if self.batch_max < 1:
            raise SimulationError("batch_max must be >= 1")

    def value_index(self, u: np.ndarray) -> np.ndarray:
        """Which tag value each request gets, from uniforms ``u``."""
        bounds = np.cumsum([v.share for v in self.values])[:-1]
        return np.searchsorted(bounds, u, side="right")

    def alphas(self) -> np.ndarray:
        """Mean chain alpha per tag value (one entry when the route has no tag)."""
        return np.array([v.alpha for v in self.values] or [self.alpha])

    def alpha_of(self, tags: dict[str, str]) -> float | None:
        """Mean chain alpha of requests with ``tags``; None if they do not name the tag."""
        if self.tag_key is None:
            return self.alpha
        if self.tag_key not in tags:
            return None
        for v in self.values:
            if v.value == tags[self.tag_key]:
                return v.alpha
        known = ", ".join(v.value for v in self.values)
        raise SimulationError(f"unknown {self.tag_key}={tags[self.tag_key]!r}; known: {known}")

    @property
    def _log_top(self) -> float:
        # a little past the limit: the engine caps the batch (max_num_seqs), so full batches
        # are a lump at batch_max, as on a busy server
        return math.log(self.batch_max * _OVERSHOOT)

    def batch_sizes(self, u: np.ndarray, load: np.ndarray) -> np.ndarray:
        """Batch size of each request from uniforms ``u`` and the load ratio there."""
        x = u * self._log_top + self.load_exponent * np.log(np.maximum(load, 1e-9))
        return np.clip(np.rint(np.exp(x)), 1, self.batch_max).astype(np.int64)

    def batch_weights(self) -> np.ndarray:
        """P(batch = b) for b = 1..batch_max at the mean load (index b - 1).

        >>> w = PolicyTraits(verify=VerifyCost(((16, 0.0),))).batch_weights()
        >>> round(float(w.sum()), 9), round(float(w[-1]), 3)
        (1.0, 0.039)
        """
        top = self._log_top
        b = np.arange(1, self.batch_max + 1, dtype=np.float64)
        lo = np.where(b > 1, np.log(b - 0.5), 0.0) / top
        hi = np.where(b < self.batch_max, np.log(b + 0.5) / top, 1.0)
        return np.asarray(hi - lo)
