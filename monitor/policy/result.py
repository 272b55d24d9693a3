"""What ``specwatch policy`` computed: the windows, the costs, each slice's setting with its
evidence, the held-out judgement and what each route gains (docs/policy.md, "JSON").

Frozen dataclasses, each with ``to_json()``: plain dicts in a stable key order, floats
rounded, times as RFC 3339 text, so that two runs on the same data print the same bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "BucketChoice",
    "Comparison",
    "CostEstimate",
    "HoldoutEvaluation",
    "Pair",
    "PairSchedule",
    "PolicyResult",
    "RouteGain",
    "SliceCheck",
    "SliceDecision",
    "StrategyGoodput",
    "Window",
]

Interval = tuple[float, float]


def _r(x: float | None, digits: int = 4) -> float | None:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return None
    return round(float(x), digits)


def _ri(iv: Interval | None, digits: int = 4) -> list[float | None] | None:
    return None if iv is None else [_r(iv[0], digits), _r(iv[1], digits)]


def _iso(ts: int) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class Window:
    """A half-open time window ``[since, until)`` in Unix seconds (hour boundaries).

    >>> Window(0, 7200).to_json()
    {'since': '1970-01-01T00:00:00Z', 'until': '1970-01-01T02:00:00Z', 'hours': 2}
    """

    since: int
    until: int

    @property
    def hours(self) -> int:
        return max(0, (self.until - self.since) // 3600)

    def contains(self, ts: int) -> bool:
        return self.since <= ts < self.until

    def to_json(self) -> dict[str, Any]:
        return {"since": _iso(self.since), "until": _iso(self.until), "hours": self.hours}


@dataclass(frozen=True, slots=True, order=True)
class Pair:
    """A model pair: the target (model, revision), the draft (model, revision), the method.

    >>> Pair("llama-70b", "r2", "llama-1b", "d1", "draft_model").label
    'llama-70b@r2 <- llama-1b@d1 (draft_model)'
    """

    target_model: str
    target_revision: str
    draft_model: str
    draft_revision: str
    method: str

    @property
    def label(self) -> str:
        target = f"{self.target_model}@{self.target_revision}" if self.target_revision \
            else self.target_model
        draft = f"{self.draft_model}@{self.draft_revision}" if self.draft_revision \
            else (self.draft_model or "-")
        return f"{target} <- {draft}" + (f" ({self.method})" if self.method else "")

    def to_json(self) -> dict[str, Any]:
        return {"target_model": self.target_model, "target_revision": self.target_revision,
                "draft_model": self.draft_model, "draft_revision": self.draft_revision,
                "method": self.method}


@dataclass(frozen=True, slots=True)
class CostEstimate:
    """The marginal cost ``m = c + v`` per drafted position, in plain target steps, of one
    (target model, revision, draft model, batch bucket); ``source`` is ``measured`` (with its
    interval and the timed request counts), ``configured`` or ``default``."""

    target_model: str
    target_revision: str
    draft_model: str
    batch: str
    m: float
    source: str
    interval: Interval | None = None
    spec_timed: int = 0
    plain_timed: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"target_model": self.target_model, "target_revision": self.target_revision,
                "draft_model": self.draft_model, "batch": self.batch, "m": _r(self.m),
                "source": self.source, "interval": _ri(self.interval),
                "spec_timed": self.spec_timed, "plain_timed": self.plain_timed}


@dataclass(frozen=True, slots=True)
class SliceDecision:
    """One slice (route, pair, feature values) of the training window and its setting.

    ``speedups[j]`` is the predicted decode speedup at draft length ``j`` (``None`` where the
    per-position counts do not reach ``j``); ``best_length`` is what the slice's own evidence
    picks; ``num_speculative_tokens`` is the setting (the parent's when ``decided_by`` is
    ``parent``)."""

    id: str
    route: str
    pair: Pair
    features: tuple[tuple[str, str], ...]
    requests: int
    output_tokens: int
    measured_length: int
    acceptance: float | None
    acceptance_interval: Interval | None
    survival: tuple[float, ...]
    marginal_cost: float
    speedups: tuple[float | None, ...]
    best_length: int
    speculate: bool
    num_speculative_tokens: int
    decided_by: str
    reason: str

    @property
    def feature_map(self) -> dict[str, str]:
        return dict(self.features)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "route": self.route, "pair": self.pair.to_json(),
            "features": dict(self.features), "requests": self.requests,
            "output_tokens": self.output_tokens, "measured_length": self.measured_length,
            "acceptance": _r(self.acceptance),
            "acceptance_interval": _ri(self.acceptance_interval),
            "survival": [_r(p) for p in self.survival],
            "marginal_cost": _r(self.marginal_cost),
            "speedups": [_r(t) for t in self.speedups],
            "best_length": self.best_length,
            "setting": {"speculate": self.speculate,
                        "num_speculative_tokens": self.num_speculative_tokens},
            "decided_by": self.decided_by, "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class BucketChoice:
    """The draft length of one pair at one batch bucket, pooled over routes and tags."""

    batch: str
    lo: int
    hi: int | None
    requests: int
    output_tokens: int
    marginal_cost: float
    speedups: tuple[float | None, ...]
    num_speculative_tokens: int

    def to_json(self) -> dict[str, Any]:
        return {"batch": self.batch, "lo": self.lo, "hi": self.hi, "requests": self.requests,
                "output_tokens": self.output_tokens, "marginal_cost": _r(self.marginal_cost),
                "speedups": [_r(t) for t in self.speedups],
                "num_speculative_tokens": self.num_speculative_tokens}


@dataclass(frozen=True, slots=True)
class PairSchedule:
    """Per model pair, the draft length per batch bucket the training data covered."""

    pair: Pair
    buckets: tuple[BucketChoice, ...]

    def to_json(self) -> dict[str, Any]:
        return {"pair": self.pair.to_json(), "buckets": [b.to_json() for b in self.buckets]}


@dataclass(frozen=True, slots=True)
class SliceCheck:
    """A slice's acceptance predicted (training) against realized (held out)."""

    id: str
    predicted: float | None
    predicted_interval: Interval | None
    realized: float | None
    realized_interval: Interval | None
    difference: float | None
    allowed: float | None
    unstable: bool | None
    holdout_requests: int

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "predicted": _r(self.predicted),
                "predicted_interval": _ri(self.predicted_interval),
                "realized": _r(self.realized), "realized_interval": _ri(self.realized_interval),
                "difference": _r(self.difference), "allowed": _r(self.allowed),
                "unstable": self.unstable, "holdout_requests": self.holdout_requests}


@dataclass(frozen=True, slots=True)
class StrategyGoodput:
    """Predicted decode speedup over no speculation of one strategy on the held-out traffic."""

    name: str
    goodput: float
    interval: Interval | None  # None: too few held-out hours to resample

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "goodput": _r(self.goodput), "interval": _ri(self.interval)}


@dataclass(frozen=True, slots=True)
class Comparison:
    """The policy's goodput minus an alternative's, with its bootstrap interval."""

    against: str
    difference: float
    interval: Interval | None  # None: too few held-out hours to resample

    @property
    def better(self) -> bool:
        """Shown better: the whole interval above zero (never without an interval)."""
        return self.interval is not None and self.interval[0] > 0

    def to_json(self) -> dict[str, Any]:
        return {"against": self.against, "difference": _r(self.difference),
                "interval": _ri(self.interval), "better": self.better}


@dataclass(frozen=True, slots=True)
class HoldoutEvaluation:
    window: Window
    requests: int
    output_tokens: int
    slices: tuple[SliceCheck, ...]
    strategies: tuple[StrategyGoodput, ...]
    comparisons: tuple[Comparison, ...]
    resamples: int
    note: str

    def to_json(self) -> dict[str, Any]:
        return {"window": self.window.to_json(), "requests": self.requests,
                "output_tokens": self.output_tokens,
                "strategies": [s.to_json() for s in self.strategies],
                "comparisons": [c.to_json() for c in self.comparisons],
                "resamples": self.resamples,
                "unstable": sorted(c.id for c in self.slices if c.unstable),
                "slices": [c.to_json() for c in self.slices], "note": self.note}


@dataclass(frozen=True, slots=True)
class RouteGain:
    """What a route gains: its decode share and the predicted e2e saving of the policy."""

    route: str
    timed_requests: int
    decode_share: float | None
    mean_e2e_ms: float | None
    mean_decode_ms: float | None
    speedup_observed: float | None
    speedup_policy: float | None
    saving_ms: float | None
    decode_bound: bool | None
    note: str

    def to_json(self) -> dict[str, Any]:
        return {"route": self.route, "timed_requests": self.timed_requests,
                "decode_share": _r(self.decode_share), "mean_e2e_ms": _r(self.mean_e2e_ms, 1),
                "mean_decode_ms": _r(self.mean_decode_ms, 1),
                "speedup_observed": _r(self.speedup_observed),
                "speedup_policy": _r(self.speedup_policy), "saving_ms": _r(self.saving_ms, 1),
                "decode_bound": self.decode_bound, "note": self.note}


@dataclass(frozen=True, slots=True)
class PolicyResult:
    """Everything ``specwatch policy`` learnt and judged (``to_json`` is the documented
    shape, docs/policy.md)."""

    route: str | None
    features: tuple[str, ...]
    train: Window
    holdout: HoldoutEvaluation | None
    holdout_note: str
    costs: tuple[CostEstimate, ...]
    slices: tuple[SliceDecision, ...]
    schedules: tuple[PairSchedule, ...]
    routes: tuple[SliceDecision, ...]
    gains: tuple[RouteGain, ...]
    settings: tuple[tuple[str, float], ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "route": self.route,
            "features": list(self.features),
            "train": self.train.to_json(),
            "holdout_window": None if self.holdout is None else self.holdout.window.to_json(),
            "settings": dict(self.settings),
            "costs": [c.to_json() for c in self.costs],
            "routes": [r.to_json() for r in self.routes],
            "slices": [s.to_json() for s in self.slices],
            "schedules": [s.to_json() for s in self.schedules],
            "holdout": None if self.holdout is None else self.holdout.to_json(),
            "holdout_note": self.holdout_note,
            "gains": [g.to_json() for g in self.gains],
        }
