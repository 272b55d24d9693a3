"""Before and after: each setup change judged from the rollups, per metric and overall.

**Sides.** A change at ``at`` on a route compares two series of the rollups, each side
counting only its own series (a canary serves both setups at once):

- *before*: the series of the ``previous`` setup over ``[at - window, at)``, starting no
  earlier than that setup's own arrival on the route (when the store recorded it);
- *after*: the series of the ``current`` setup over ``[at, at + window)``, cut at the next
  change on the route to another setup.

Both ends are floored to the bucket (a minute): the minute holding ``at`` belongs to the
after side. Series keys carry no temperature and no engine, so the verdicts cover every
temperature bucket of the route, and an engine-only change compares the same series before
and after ``at``. When the minute rows of a change are gone (``store.retention_minute``),
hour rows are read instead (``granularity`` says which).

**Metrics** (``monitor/changes/metrics.py``): acceptance (at the shared draft positions when
the draft length changed: ``basis`` ``shared_positions``), mean accepted length, p50 decode
throughput, p50/p99 TTFT and end-to-end latency, error rate; intervals from
``monitor/changes/stats.py``.

**Overall verdict**, Kayenta style: ``worse`` if a critical metric (acceptance, decode
throughput, error rate, p99 e2e) is worse; otherwise ``insufficient_data`` if the key metric
cannot be judged (acceptance; p50 e2e for a change that turns speculation on or off, where
there is no acceptance on one side); otherwise ``better`` if some metric is better and none
worse; otherwise ``same``. The record's ``live`` state (the detector's sequential decision,
made while the change was new) is shown beside the acceptance verdict, never replacing it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from monitor.aggregate.bucket import BucketStats
from monitor.aggregate.series import SeriesKey
from monitor.change_record import SETUP_FIELDS, ChangeRecord
from monitor.changes.metrics import (
    BETTER,
    BY_NAME,
    INSUFFICIENT,
    METRICS,
    SAME,
    WORSE,
    MetricSpec,
    MetricVerdict,
    classify,
    format_change,
    insufficient,
)
from monitor.changes.stats import (
    absolute_change,
    quantile_bounds,
    ratio_estimate,
    relative_change,
    relative_quantile_change,
    t95,
)
from monitor.store.query import rfc3339

if TYPE_CHECKING:
    from monitor.config import DetectionConfig
    from monitor.store.store import Store

__all__ = ["DEFAULT_MIN_REQUESTS", "DEFAULT_WINDOW", "ChangeJudgement", "JudgeSettings", "Side",
           "judge_change", "judge_changes", "judge_sides", "series_of", "side_windows"]

DEFAULT_WINDOW = 21600.0  # detection.change_window's default
DEFAULT_MIN_REQUESTS = 200
STEPS = {"minute": 60, "hour": 3600}
CRITICAL = tuple(m.name for m in METRICS if m.critical)


@dataclass(frozen=True, slots=True)
class JudgeSettings:
    """How far each side reaches and how much it takes to call a metric better or worse.

    ``acceptance_min_effect`` is detection's ``min_effect`` (the smallest relative change
    of acceptance worth an alert); ``min_effect`` that of the other relative metrics;
    ``error_rate_min_change`` the absolute change of the error rate (1 point).
    """

    window: float = DEFAULT_WINDOW
    min_requests: int = DEFAULT_MIN_REQUESTS
    acceptance_min_effect: float = 0.05
    min_effect: float = 0.05
    error_rate_min_change: float = 0.01

    def __post_init__(self) -> None:
        if self.window <= 0:
            raise ValueError(f"window must be positive, got {self.window}")
        if self.min_requests < 1:
            raise ValueError(f"min_requests must be >= 1, got {self.min_requests}")

    @classmethod
    def from_config(cls, det: DetectionConfig, **overrides: Any) -> JudgeSettings:
        """``detection.change_window`` and ``detection.min_effect`` of the configuration."""
        values: dict[str, Any] = {"window": det.change_window,
                                  "acceptance_min_effect": det.min_effect}
        values.update(overrides)
        return cls(**values)

    def min_effect_of(self, spec: MetricSpec) -> float:
        if spec.name == "error_rate":
            return self.error_rate_min_change
        if spec.name in ("acceptance", "mean_accepted_length"):
            return self.acceptance_min_effect
        return self.min_effect


# -- the sides --------------------------------------------------------------------------------


def series_of(route: str, setup: Mapping[str, str]) -> SeriesKey:
    """The rollup series of a setup on a route (no engine, no temperature in a series key).

    >>> key = series_of("chat", {"target_model": "t", "num_speculative_tokens": "3"})
    >>> key.route, key.num_speculative_tokens, key.draft_model
    ('chat', 3, '')
    """
    try:
        k = int(setup.get("num_speculative_tokens") or 0)
    except ValueError:
        k = -1  # matches no series
    return SeriesKey(route, setup.get("target_model", ""), setup.get("target_revision", ""),
                     setup.get("target_tokenizer", ""), setup.get("draft_model", ""),
                     setup.get("draft_revision", ""), setup.get("draft_tokenizer", ""),
                     setup.get("method", ""), k)


def _setup(setup: Mapping[str, str]) -> tuple[str, ...]:
    return tuple(setup.get(f, "") for f in SETUP_FIELDS)


def _floor(ts: float, step: int) -> int:
    return int(ts // step * step)


Window = tuple[float, float]


def side_windows(record: ChangeRecord, route_changes: Sequence[ChangeRecord], window: float,
                 step: int = 60) -> tuple[Window, Window]:
    """((before since, before until), (after since, after until)) in Unix seconds.

    ``route_changes``: the route's other changes (any order; ``record`` may be among them).
    The same change seen in another temperature bucket has the same ``current`` setup and
    cuts nothing.
    """
    t = _floor(record.at, step)
    before_since = t - window
    prev, cur = _setup(record.previous), _setup(record.current)
    arrived = [c.at for c in route_changes if c.at < record.at and _setup(c.current) == prev]
    if arrived:
        before_since = max(before_since, _floor(max(arrived), step))
    after_until = t + window
    following = [c.at for c in route_changes if c.at > record.at and _setup(c.current) != cur]
    if following:
        after_until = min(after_until, _floor(min(following), step))
    return (before_since, t), (t, max(t, after_until))


@dataclass(frozen=True, slots=True)
class Side:
    """One side of a change: its series, its range and its buckets in time order."""

    series: SeriesKey
    since: float
    until: float
    buckets: tuple[BucketStats, ...]

    @property
    def merged(self) -> BucketStats:
        acc = BucketStats()
        for b in self.buckets:
            acc.merge(b)
        return acc

    def to_json(self) -> dict[str, Any]:
        return {"since": rfc3339(_utc(self.since)), "until": rfc3339(_utc(self.until)),
                "series": _series_json(self.series), "buckets": len(self.buckets)}


def _utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def _series_json(key: SeriesKey) -> dict[str, Any]:
    return key._asdict()


def _read_sides(store: Store, record: ChangeRecord, windows: tuple[Window, Window],
                granularity: str) -> tuple[Side, Side]:
    (b0, b1), (a0, a1) = windows
    old, new = series_of(record.route, record.previous), series_of(record.route, record.current)
    rows = store.buckets(granularity=granularity, route=record.route, since=_utc(b0),
                         until=_utc(max(b1, a1)))
    before: list[tuple[datetime, BucketStats]] = []
    after: list[tuple[datetime, BucketStats]] = []
    for (key, start), stats in rows.items():
        ts = start.timestamp()
        if key == old and b0 <= ts < b1:
            before.append((start, stats))
        if key == new and a0 <= ts < a1:
            after.append((start, stats))
    before.sort(key=lambda p: p[0])
    after.sort(key=lambda p: p[0])
    return (Side(old, b0, b1, tuple(s for _, s in before)),
            Side(new, a0, a1, tuple(s for _, s in after)))


# -- the metrics --------------------------------------------------------------------------------


def _k(setup: Mapping[str, str]) -> int:
    try:
        return int(setup.get("num_speculative_tokens") or 0)
    except ValueError:
        return 0


Pair = Callable[[BucketStats], tuple[float, float] | None]


def _ratio_metric(spec: MetricSpec, s: JudgeSettings, before: Side, after: Side, pairs:
                  tuple[Pair, Pair], count: Callable[[BucketStats], int], *, offset: float = 0.0,
                  what: str, **extra: Any) -> MetricVerdict:
    """A ratio metric over clustered buckets: ``offset + sum(y) / sum(x)`` per side."""
    me = s.min_effect_of(spec)
    used: list[list[tuple[float, float]]] = []
    counts: list[int] = []
    for side, pair in zip((before, after), pairs, strict=True):
        clusters, n = [], 0
        for b in side.buckets:
            p = pair(b)
            if p is not None and p[1] > 0:
                clusters.append(p)
                n += count(b)
        used.append(clusters)
        counts.append(n)
    est = [ratio_estimate(c) for c in used]
    values = [None if e is None else offset + e.value for e in est]
    extra = {**extra, "minutes_before": len(used[0]), "minutes_after": len(used[1])}
    for side_name, n in zip(("before", "after"), counts, strict=True):
        if n < s.min_requests:
            return insufficient(spec, f"{n} {what} {side_name} the change (need "
                                f"{s.min_requests})", before=values[0], after=values[1],
                                requests=(counts[0], counts[1]), min_effect=me, **extra)
    eb, ea = est
    if eb is None or ea is None:
        return insufficient(spec, "fewer than 2 buckets on a side", before=values[0],
                            after=values[1], requests=(counts[0], counts[1]), min_effect=me,
                            **extra)
    vb, va = offset + eb.value, offset + ea.value
    z = t95(min(eb.clusters, ea.clusters) - 1)
    if spec.scale == "absolute":
        change, interval = absolute_change(vb, eb.variance, va, ea.variance, z)
    else:
        rel, interval = relative_change(vb, eb.variance, va, ea.variance, z)
        if rel is None:
            return insufficient(spec, "the value before the change is 0", before=vb, after=va,
                                requests=(counts[0], counts[1]), min_effect=me, **extra)
        change = rel
    verdict = classify(spec, change, interval, me)
    return MetricVerdict(spec, verdict, vb, va, change, interval, counts[0], counts[1], me,
                         extra)


def _acceptance(s: JudgeSettings, before: Side, after: Side, k_old: int,
                k_new: int) -> MetricVerdict:
    spec = BY_NAME["acceptance"]
    if k_old <= 0 or k_new <= 0:
        return insufficient(spec, "speculation off on one side: no acceptance to compare",
                            min_effect=s.min_effect_of(spec), basis="rate")
    tokens = {}
    for name, side in (("before", before), ("after", after)):
        drafting = [b for b in side.buckets if b.drafted_tokens > 0]
        tokens[f"drafted_tokens_{name}"] = sum(b.drafted_tokens for b in drafting)
        tokens[f"accepted_tokens_{name}"] = sum(b.accepted_tokens for b in drafting)
    if k_old == k_new:
        def rate(b: BucketStats) -> tuple[float, float] | None:
            return (b.accepted_tokens, b.drafted_tokens) if b.drafted_tokens > 0 else None

        return _ratio_metric(spec, s, before, after, (rate, rate),
                             lambda b: b.drafting_requests, what="drafting requests",
                             basis="rate", **tokens)
    # A longer draft lowers the raw rate with no drift at all: compare the positions both
    # setups draft, rate_m = accepted at positions 1..m / (m * verification steps), with
    # steps = drafted / K (each step drafts K tokens).
    m = min(k_old, k_new)

    def shared(k: int) -> Pair:
        def pair(b: BucketStats) -> tuple[float, float] | None:
            if b.drafted_tokens <= 0 or not b.per_position:
                return None
            return (float(sum(b.per_position[:m])), m * b.drafted_tokens / k)
        return pair

    def count(b: BucketStats) -> int:
        return b.drafting_requests if b.per_position else 0

    return _ratio_metric(spec, s, before, after, (shared(k_old), shared(k_new)), count,
                         what="drafting requests with per-position counts",
                         basis="shared_positions", positions=m, **tokens)


def _accepted_length(s: JudgeSettings, before: Side, after: Side, k_old: int,
                     k_new: int) -> MetricVerdict:
    spec = BY_NAME["mean_accepted_length"]
    if k_old <= 0 or k_new <= 0:
        return insufficient(spec, "speculation off on one side",
                            min_effect=s.min_effect_of(spec))

    def pair(b: BucketStats) -> tuple[float, float] | None:
        return (b.accepted_tokens, b.verify_steps) if b.verify_steps > 0 else None

    return _ratio_metric(spec, s, before, after, (pair, pair),
                         lambda b: b.drafting_requests if b.verify_steps > 0 else 0,
                         offset=1.0, what="drafting requests with verify steps")


def _error_rate(s: JudgeSettings, before: Side, after: Side) -> MetricVerdict:
    spec = BY_NAME["error_rate"]

    def pair(b: BucketStats) -> tuple[float, float] | None:
        return (b.errors, b.requests) if b.requests > 0 else None

    return _ratio_metric(spec, s, before, after, (pair, pair), lambda b: b.requests,
                         what="requests", errors_before=sum(b.errors for b in before.buckets),
                         errors_after=sum(b.errors for b in after.buckets))


def _quantile(spec: MetricSpec, s: JudgeSettings, before: BucketStats,
              after: BucketStats) -> MetricVerdict:
    me = s.min_effect_of(spec)
    hb, ha = getattr(before, spec.sketch), getattr(after, spec.sketch)
    qb, qa = quantile_bounds(hb, spec.q), quantile_bounds(ha, spec.q)
    counts = (hb.count, ha.count)
    values = (None if qb is None else qb.value, None if qa is None else qa.value)
    for side_name, n in zip(("before", "after"), counts, strict=True):
        if n < s.min_requests:
            return insufficient(spec, f"{n} requests with this measurement {side_name} the "
                                f"change (need {s.min_requests})", before=values[0],
                                after=values[1], requests=counts, min_effect=me)
    assert qb is not None and qa is not None
    change, interval = relative_quantile_change(qb, qa)
    if change is None:
        return insufficient(spec, "the value before the change is 0", before=qb.value,
                            after=qa.value, requests=counts, min_effect=me)
    bounds = {"bounds_before": [qb.low, qb.high], "bounds_after": [qa.low, qa.high]}
    return MetricVerdict(spec, classify(spec, change, interval, me), qb.value, qa.value, change,
                         interval, counts[0], counts[1], me, bounds)


def judge_sides(before: Side, after: Side, previous: Mapping[str, str],
                current: Mapping[str, str], settings: JudgeSettings) -> tuple[MetricVerdict, ...]:
    """Every metric of :data:`~monitor.changes.metrics.METRICS`, in that order."""
    k_old, k_new = _k(previous), _k(current)
    mb, ma = before.merged, after.merged
    out: dict[str, MetricVerdict] = {
        "acceptance": _acceptance(settings, before, after, k_old, k_new),
        "mean_accepted_length": _accepted_length(settings, before, after, k_old, k_new),
        "error_rate": _error_rate(settings, before, after),
    }
    for spec in METRICS:
        if spec.sketch:
            out[spec.name] = _quantile(spec, settings, mb, ma)
    return tuple(out[m.name] for m in METRICS)


def overall(metrics: Sequence[MetricVerdict], speculation_toggled: bool) -> tuple[str, str]:
    """The change's verdict and the sentence that explains it (see the module docstring)."""
    worse_critical = [m for m in metrics if m.spec.critical and m.verdict == WORSE]
    if worse_critical:
        return WORSE, "worse: " + "; ".join(format_change(m) for m in worse_critical)
    key = "e2e_p50" if speculation_toggled else "acceptance"
    by = {m.name: m for m in metrics}
    if by[key].verdict == INSUFFICIENT:
        return INSUFFICIENT, (f"insufficient data: {by[key].spec.label}: "
                              f"{by[key].extra.get('reason', 'no data')}")
    worse = [m for m in metrics if m.verdict == WORSE]
    better = [m for m in metrics if m.verdict == BETTER]
    if better and not worse:
        return BETTER, "better: " + "; ".join(format_change(m) for m in better)
    if worse:
        return SAME, ("no critical metric worse; " + "; ".join(format_change(m) for m in worse)
                      + (" but " + "; ".join(format_change(m) for m in better) if better else ""))
    return SAME, "no metric moved by its minimum effect"


# -- judging ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChangeJudgement:
    """One change, its sides and its verdicts: what ``specwatch changes`` prints."""

    record: ChangeRecord
    metrics: tuple[MetricVerdict, ...]
    verdict: str
    reason: str
    before: Side
    after: Side
    granularity: str

    def metric(self, name: str) -> MetricVerdict:
        for m in self.metrics:
            if m.name == name:
                return m
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        r = self.record
        return {
            "change_id": r.change_id, "route": r.route, "temperature": r.temperature,
            "at": rfc3339(_utc(r.at)), "kind": r.kind, "summary": r.summary,
            "previous": dict(r.previous), "current": dict(r.current),
            "changed": {k: list(v) for k, v in r.changed.items()}, "live": dict(r.live),
            "metrics": {m.name: m.to_json() for m in self.metrics},
            "verdict": self.verdict, "reason": self.reason,
            "before": {**self.before.to_json(), "granularity": self.granularity},
            "after": {**self.after.to_json(), "granularity": self.granularity},
        }


_Cache = dict[tuple[Any, ...], tuple[tuple[MetricVerdict, ...], Side, Side, str]]


def judge_change(store: Store, record: ChangeRecord, route_changes: Sequence[ChangeRecord],
                 settings: JudgeSettings | None = None, *,
                 _cache: _Cache | None = None) -> ChangeJudgement:
    """Judge one change from the rollups. ``route_changes``: the changes of its route the
    store holds (the next change cuts the after side; the previous setup's arrival, the
    before side)."""
    settings = settings or JudgeSettings()
    sides = metrics = None
    granularity = "minute"
    for granularity, step in STEPS.items():
        windows = side_windows(record, route_changes, settings.window, step)
        key = (record.route, _setup(record.previous), _setup(record.current), windows,
               granularity)
        hit = None if _cache is None else _cache.get(key)
        if hit is not None:
            metrics, before, after, granularity = hit
            sides = (before, after)
            break
        before, after = _read_sides(store, record, windows, granularity)
        if before.buckets or after.buckets or granularity == "hour":
            metrics = judge_sides(before, after, record.previous, record.current, settings)
            sides = (before, after)
            if _cache is not None:
                _cache[key] = (metrics, before, after, granularity)
            break
    assert sides is not None and metrics is not None
    # The live comparison sits beside the acceptance verdict, never in its place.
    live = record.live.get("state")
    metrics = tuple(dataclasses.replace(m, extra={**m.extra, "live": live})
                    if m.name == "acceptance" else m for m in metrics)
    toggled = _k(record.previous) == 0 or _k(record.current) == 0
    verdict, reason = overall(metrics, toggled)
    return ChangeJudgement(record, metrics, verdict, reason, sides[0], sides[1], granularity)


def judge_changes(
    store: Store,
    *,
    route: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    settings: JudgeSettings | None = None,
) -> list[ChangeJudgement]:
    """Every stored change of ``route`` (all routes by default) with ``since <= at < until``,
    judged, ordered by ``at``. Reads all changes of the routes concerned: a change outside
    the range still cuts the sides of one inside it."""
    records = store.changes(route=route)
    by_route: dict[str, list[ChangeRecord]] = {}
    for r in records:
        by_route.setdefault(r.route, []).append(r)
    cache: _Cache = {}
    out = []
    for r in records:
        at = _utc(r.at)
        if (since is not None and at < since) or (until is not None and at >= until):
            continue
        out.append(judge_change(store, r, by_route[r.route], settings, _cache=cache))
    return out
