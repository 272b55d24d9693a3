"""Everything one route's report shows, read from the store once.

Sources, all per route:

- ``Store.ratios`` at the chosen granularity: acceptance per series and bucket (exact counts).
- ``Store.buckets``: the TTFT, decode-throughput and inter-token-gap sketches, per-position
  counts and task outcome and GPU-second sums of the same buckets, from which p50/p99, the
  survival curve, outcome rates and cost per successful task are read for any range.
- ``Store.alerts``: ``acceptance_drop``/``acceptance_rise`` decisions (the change points).
- ``store.alerting.episodes``: what the on-call saw, as spans.
- The detector snapshots (``detect/route/...`` and ``detect/segment/...``): the current
  break-even recommendation, cutoff, knee and acceptance baseline of each segment.
- ``setup_changes``, judged by ``monitor/changes``: each change of setup in the range against
  the setup it replaced, per metric and overall.
- ``Store.slice_records``, learnt by ``monitor/policy``: where the route should speculate and
  how far (``monitor/report/policy.py``).

Series are grouped by **model pair** (target model, draft model or drafting method): a new
revision, tokenizer or draft length is a new series of the same pair, drawn as a change on
the pair's charts rather than as a separate chart.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from monitor.aggregate.bucket import BucketStats
from monitor.aggregate.series import SeriesKey
from monitor.changes import ChangeJudgement, JudgeSettings, judge_changes
from monitor.config import Config
from monitor.detect.breakeven import DEFAULT_CUTOFF
from monitor.detect.ownership import ROUTE_PREFIX, SEGMENT_PREFIX
from monitor.detect.report import recommendation_lines
from monitor.detect.segments import Segment, key_id
from monitor.exceptions import SpecwatchError
from monitor.gate import GateJudgement, GateSettings
from monitor.gate.listing import judge_experiments
from monitor.jsonable import jsonable
from monitor.policy.result import Pair as PolicyPair
from monitor.report.options import GRANULARITIES
from monitor.report.policy import PolicySection, gather_policy
from monitor.store.query import RatioRow
from monitor.store.report_queries import routes_with_series, state_sources
from monitor.store.store import Store

__all__ = [
    "GRANULARITIES",
    "ChangePoint",
    "EpisodeSpan",
    "Pair",
    "PairView",
    "RouteReport",
    "SegmentState",
    "SeriesChange",
    "SeriesView",
    "choose_granularity",
    "gather_report",
]

STEP = {"minute": timedelta(minutes=1), "hour": timedelta(hours=1), "day": timedelta(days=1)}
# Auto granularity keeps a chart to at most ~720-1440 points per series: minute buckets up to
# half a day of data, hour buckets up to two months, days beyond.
MINUTE_SPAN = timedelta(hours=12)
HOUR_SPAN = timedelta(days=60)
CHANGE_RULES = ("acceptance_drop", "acceptance_rise")


# -- the model -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Pair:
    """A target model and what drafts for it (a draft model, or a method such as n-gram)."""

    target_model: str
    draft_model: str
    method: str

    @property
    def drafter(self) -> str:
        return self.draft_model or self.method or "no speculation"

    @property
    def label(self) -> str:
        """
        >>> Pair("llama-70b", "", "ngram").label
        'ngram → llama-70b'
        """
        return f"{self.drafter} → {self.target_model}"

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether an alert with ``labels`` concerns this pair. Route-wide alerts (staleness,
        evictions, speculation off) carry no model and concern every pair.

        >>> p = Pair("t", "d", "draft_model")
        >>> p.matches({"route": "r"}), p.matches({"route": "r", "target_model": "t",
        ...     "draft_model": "d"}), p.matches({"target_model": "t", "draft_model": "x"})
        (True, True, False)
        """
        if "target_model" not in labels:
            return True
        return (
            labels["target_model"] == self.target_model
            and labels.get("draft_model", "") == self.draft_model
            and labels.get("method", self.method) == self.method
        )


def pair_of(key: SeriesKey) -> Pair:
    return Pair(key.target_model, key.draft_model, key.method)


@dataclass
class SeriesView:
    """One series over the report range: per-bucket values and range totals."""

    key: SeriesKey
    label: str = ""
    times: list[datetime] = field(default_factory=list)
    acceptance: list[float | None] = field(default_factory=list)
    requests: list[int] = field(default_factory=list)
    ttft_p50: list[float | None] = field(default_factory=list)
    ttft_p99: list[float | None] = field(default_factory=list)
    tps_p50: list[float | None] = field(default_factory=list)
    tps_p25: list[float | None] = field(default_factory=list)
    total_requests: int = 0
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    verify_steps: int = 0
    per_position: list[int] = field(default_factory=list)
    # Task outcome and cost: per bucket, and the range's buckets merged (docs/outcome-and-cost.md)
    success_rate: list[float | None] = field(default_factory=list)
    tool_calls_valid_rate: list[float | None] = field(default_factory=list)
    schema_valid_rate: list[float | None] = field(default_factory=list)
    outcome: BucketStats = field(default_factory=BucketStats)

    @property
    def first(self) -> datetime:
        return self.times[0]

    @property
    def outcome_reported(self) -> bool:
        """Whether any request of the range reported a task outcome check."""
        o = self.outcome
        return bool(o.outcome_ok_reported or o.schema_valid_reported
                    or o.tool_calls_valid_reported)

    @property
    def last(self) -> datetime:
        return self.times[-1]

    @property
    def acceptance_rate(self) -> float | None:
        """accepted / drafted over the whole range, token-weighted."""
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else None

    @property
    def survival(self) -> list[float] | None:
        """Share of verification steps that kept at least ``i + 1`` drafts, over the range.

        >>> s = SeriesView(SeriesKey("r", "t", "1", "x", "d", "1", "x", "", 3), verify_steps=10,
        ...                per_position=[8, 5, 2])
        >>> s.survival
        [0.8, 0.5, 0.2]
        """
        if self.verify_steps <= 0 or not self.per_position:
            return None
        return [n / self.verify_steps for n in self.per_position]


@dataclass(frozen=True, slots=True)
class SeriesChange:
    """A pair's new series: a revision, tokenizer or draft-length change."""

    at: datetime
    what: str
    series: SeriesKey


@dataclass(frozen=True, slots=True)
class ChangePoint:
    """An ``acceptance_drop``/``acceptance_rise`` decision; ``at`` is the detector's estimate of
    when the change began (``change_ts``), ``decided_at`` when it was sure."""

    at: datetime
    decided_at: datetime
    rule: str
    summary: str
    labels: dict[str, str]


@dataclass(frozen=True, slots=True)
class EpisodeSpan:
    """One alert episode; ``end`` is ``None`` while it is still open."""

    start: datetime
    end: datetime | None
    rule: str
    severity: str
    state: str
    summary: str
    labels: dict[str, str]
    notified: bool


@dataclass
class SegmentState:
    """The detectors' present view of one segment (series x temperature bucket)."""

    labels: dict[str, str]
    source: str
    last_event: datetime | None
    recommendation: str  # "on", "off" or "insufficient_data"
    knee: int | None
    cutoff: float
    breakeven: dict[str, Any]
    positions: dict[str, Any]
    acceptance: dict[str, Any]
    line: str
    idle: bool = False  # no traffic for a while: a pair the route has left behind

    @property
    def pair(self) -> Pair:
        lab = self.labels
        return Pair(lab["target_model"], lab.get("draft_model", ""), lab.get("method", ""))


@dataclass
class PairView:
    pair: Pair
    series: list[SeriesView]
    changes: list[SeriesChange]
    change_points: list[ChangePoint]
    episodes: list[EpisodeSpan]
    segments: list[SegmentState]
    cutoffs: list[float]

    @property
    def first(self) -> datetime:
        return min(s.first for s in self.series)

    @property
    def outcome_reported(self) -> bool:
        """Whether any series of the pair has requests reporting a task outcome check."""
        return any(s.outcome_reported for s in self.series)

    @property
    def last(self) -> datetime:
        return max(s.last for s in self.series)


@dataclass
class RouteReport:
    route: str
    since: datetime | None
    until: datetime
    granularity: str
    pairs: list[PairView]
    episodes: list[EpisodeSpan]
    segments: list[SegmentState]
    generated_at: datetime
    other_routes: list[str] = field(default_factory=list)  # when empty: what the range has
    notes: list[str] = field(default_factory=list)
    changes: list[ChangeJudgement] = field(default_factory=list)  # setup changes, judged
    price_per_gpu_hour: float | None = None  # cost.price_per_gpu_hour: cost per success
    gates: list[GateJudgement] = field(default_factory=list)  # experiments on the route, gated
    policy: PolicySection | None = None  # where to speculate; None: not asked for

    @property
    def empty(self) -> bool:
        return not self.pairs

    @property
    def step(self) -> timedelta:
        return STEP[self.granularity]

    @property
    def first(self) -> datetime | None:
        return min((p.first for p in self.pairs), default=None)

    @property
    def last(self) -> datetime | None:
        """The end of the newest bucket with data."""
        last = max((p.last for p in self.pairs), default=None)
        return None if last is None else last + self.step

    def no_data_message(self) -> str:
        since = "the beginning" if self.since is None else when(self.since)
        msg = f"no telemetry for route {self.route!r} between {since} and {when(self.until)}"
        if self.other_routes:
            msg += f" (routes with telemetry then: {', '.join(map(repr, self.other_routes))})"
        return msg


def when(t: datetime) -> str:
    """
    >>> when(datetime(2026, 11, 2, 14, 3, 7, tzinfo=UTC))
    '2026-11-02 14:03:07 UTC'
    """
    return t.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


# -- gathering -------------------------------------------------------------------------------


def choose_granularity(first: datetime, last: datetime) -> str:
    """Minute buckets for up to 12 hours of data, hours up to 60 days, then days.

    >>> t = datetime(2026, 11, 2, tzinfo=UTC)
    >>> [choose_granularity(t, t + timedelta(hours=h)) for h in (6, 13, 24 * 61)]
    ['minute', 'hour', 'day']
    """
    span = last - first
    if span <= MINUTE_SPAN:
        return "minute"
    return "hour" if span <= HOUR_SPAN else "day"


def floor_to(t: datetime, granularity: str) -> datetime:
    """The start of the bucket holding ``t``.

    >>> floor_to(datetime(2026, 11, 2, 14, 3, 7, tzinfo=UTC), "hour").isoformat()
    '2026-11-02T14:00:00+00:00'
    """
    t = t.astimezone(UTC).replace(second=0, microsecond=0)
    if granularity in ("hour", "day"):
        t = t.replace(minute=0)
    return t.replace(hour=0) if granularity == "day" else t


def _rows(
    store: Store, route: str, since: datetime | None, until: datetime, granularity: str
) -> tuple[str, list[RatioRow]]:
    """The ratio rows at the chosen granularity; the bucket holding ``since`` counts whole."""

    def read(gran: str) -> list[RatioRow]:
        start = None if since is None else floor_to(since, gran)
        return store.ratios(granularity=gran, route=route, since=start, until=until)

    if granularity != "auto":
        return granularity, read(granularity)
    probe = read("hour")  # hour rows are the cheap probe of where the data is
    if not probe:
        return "hour", []
    first = probe[0].bucket_start if since is None else max(since, probe[0].bucket_start)
    last = min(until, probe[-1].bucket_start + STEP["hour"])
    chosen = choose_granularity(first, last)
    if chosen == "hour":
        return "hour", probe
    rows = read(chosen)
    # Minute rows may be gone already (retention_minute is shorter than retention_hour).
    return (chosen, rows) if rows else ("hour", probe)


def _series_views(
    rows: Sequence[RatioRow], stats: Mapping[tuple[SeriesKey, datetime], BucketStats]
) -> list[SeriesView]:
    views: dict[SeriesKey, SeriesView] = {}
    for r in rows:
        key = r.series
        v = views.get(key)
        if v is None:
            v = views[key] = SeriesView(key)
        v.times.append(r.bucket_start)
        v.acceptance.append(r.acceptance_rate)
        v.requests.append(r.requests)
        v.total_requests += r.requests
        v.drafted_tokens += r.drafted_tokens
        v.accepted_tokens += r.accepted_tokens
        v.verify_steps += r.verify_steps
        b = stats.get((key, r.bucket_start))
        if b is None:  # written between the two reads: the counts above stand alone
            for seq in (v.ttft_p50, v.ttft_p99, v.tps_p50, v.tps_p25, v.success_rate,
                        v.tool_calls_valid_rate, v.schema_valid_rate):
                seq.append(None)
            continue
        v.success_rate.append(b.success_rate)
        v.tool_calls_valid_rate.append(b.tool_calls_valid_rate)
        v.schema_valid_rate.append(b.schema_valid_rate)
        v.outcome.merge(b)
        ttft, tps = b.ttft_ms, b.decode_tps
        v.ttft_p50.append(ttft.quantile(0.5))
        v.ttft_p99.append(ttft.quantile(0.99))
        v.tps_p50.append(tps.quantile(0.5))
        v.tps_p25.append(tps.quantile(0.25))
        pp = v.per_position
        if len(pp) < len(b.per_position):
            pp.extend([0] * (len(b.per_position) - len(pp)))
        for i, n in enumerate(b.per_position):
            pp[i] += n
    _label_series(list(views.values()))
    return sorted(views.values(), key=lambda v: (v.first, v.key))


def _label_series(views: list[SeriesView]) -> None:
    """Revisions and draft length; tokenizers only where they tell a pair's series apart."""
    for v in views:
        k = v.key
        v.label = (f"target {k.target_revision}, draft {k.draft_revision or '-'}, "
                   f"k={k.num_speculative_tokens}")
    same = Counter((pair_of(v.key), v.label) for v in views)
    for v in views:
        if same[(pair_of(v.key), v.label)] > 1:
            k = v.key
            v.label += f", tokenizers {k.target_tokenizer}/{k.draft_tokenizer or '-'}"


_CHANGE_FIELDS = (
    ("target_revision", "target revision"),
    ("draft_revision", "draft revision"),
    ("target_tokenizer", "target tokenizer"),
    ("draft_tokenizer", "draft tokenizer"),
    ("num_speculative_tokens", "k"),
)


def describe_change(old: SeriesKey, new: SeriesKey) -> str:
    """
    >>> a = SeriesKey("r", "t", "1", "x", "d", "5", "x", "", 4)
    >>> describe_change(a, a._replace(target_revision="2", num_speculative_tokens=3))
    'target revision 1 → 2; k 4 → 3'
    """
    parts = [
        f"{name} {getattr(old, f) or '-'} → {getattr(new, f) or '-'}"
        for f, name in _CHANGE_FIELDS
        if getattr(old, f) != getattr(new, f)
    ]
    return "; ".join(parts) or "new series"


def _changes(series: Sequence[SeriesView]) -> list[SeriesChange]:
    """A series that starts after the pair's first bucket is a change against the series
    that started before it (series already there at the start are not changes)."""
    out = []
    start = series[0].first
    for prev, cur in zip(series, series[1:], strict=False):
        if cur.first > start:
            out.append(SeriesChange(cur.first, describe_change(prev.key, cur.key), cur.key))
    return out


def _change_points(store: Store, route: str, since: datetime | None,
                   until: datetime) -> list[ChangePoint]:
    out = []
    for a in store.alerts(route=route, since=since, until=until):
        if a.rule not in CHANGE_RULES or a.state != "firing":
            continue
        ts = a.details.get("change_ts") if isinstance(a.details, dict) else None
        began = datetime.fromtimestamp(ts, UTC) if isinstance(ts, int | float) else a.at
        out.append(ChangePoint(began, a.at, a.rule, a.summary, dict(a.labels)))
    return out


def _episodes(store: Store, route: str, since: datetime | None,
              until: datetime) -> list[EpisodeSpan]:
    out = []
    for e in store.alerting.episodes(route=route):
        start, end = e["started_at"], e["resolved_at"]
        if start >= until or (since is not None and end is not None and end < since):
            continue
        out.append(EpisodeSpan(start, end, e["rule"], e["severity"], e["state"], e["summary"],
                               dict(e["labels"] or {}), bool(e["notified"])))
    return out


def _segments(store: Store, route: str, idle_after: float,
              notes: list[str]) -> list[SegmentState]:
    """Segment snapshots of every source that judged the route (a daemon, replays), the
    newest per segment: a report reads whatever process wrote the state."""
    route_key = ROUTE_PREFIX + key_id([route])
    sources = state_sources(store, route_key)
    best: dict[str, tuple[str, dict[str, Any]]] = {}
    for source in sources:
        snap = store.load_state_key(source, route_key)
        for seg_id in (snap or {}).get("segments", []):
            data = store.load_state_key(source, SEGMENT_PREFIX + seg_id)
            if not isinstance(data, dict):
                continue
            held = best.get(seg_id)
            if held is None or float(data.get("last_ts", 0)) > float(held[1].get("last_ts", 0)):
                best[seg_id] = (source, data)
    out = []
    for seg_id, (source, data) in best.items():
        try:
            seg = Segment.restore(data)
        except (SpecwatchError, KeyError, TypeError, ValueError) as e:
            notes.append(f"detector state of segment {seg_id} ({source}) is unreadable: {e}")
            continue
        if seg.labels.get("num_speculative_tokens") == "0":
            continue  # speculation already off: nothing to recommend
        ev = jsonable(seg.breakeven.evidence())
        rec = {
            "labels": dict(seg.labels),
            "recommendation": seg.breakeven.recommendation,
            "recommended_num_speculative_tokens": seg.positions.knee,
            "evidence": ev,
        }
        out.append(SegmentState(
            labels=dict(seg.labels), source=source,
            last_event=datetime.fromtimestamp(seg.last_ts, UTC) if seg.last_ts else None,
            recommendation=seg.breakeven.recommendation, knee=seg.positions.knee,
            cutoff=seg.breakeven.cutoff, breakeven=ev,
            positions=jsonable(seg.positions.evidence()),
            acceptance=jsonable(seg.acceptance.evidence()),
            line=recommendation_lines([rec])[0],
        ))
    newest = max((s.last_event for s in out if s.last_event is not None), default=None)
    for s in out:
        s.idle = (newest is not None and s.last_event is not None
                  and (newest - s.last_event).total_seconds() > idle_after)
    # current segments first, then by pair and labels: a stable order for the header
    out.sort(key=lambda s: (s.idle, s.pair.label, sorted(s.labels.items())))
    return out


def _other_routes(store: Store, since: datetime | None, until: datetime,
                  limit: int = 10) -> list[str]:
    """Routes with series seen in the range: what a mistyped ``--route`` probably meant."""
    routes = routes_with_series(
        store, first_seen_before=until,
        last_seen_since=None if since is None else since - STEP["hour"])
    return routes[:limit]


def _current_pair(series: Sequence[SeriesView]) -> PolicyPair | None:
    """The model pair (with revisions) of the speculative series seen last: the one in force,
    whose schedule the policy section charts."""
    spec = [v for v in series if v.key.num_speculative_tokens > 0]
    if not spec:
        return None
    k = max(spec, key=lambda v: (v.last, v.key)).key
    return PolicyPair(k.target_model, k.target_revision, k.draft_model, k.draft_revision,
                      k.method)


def gather_report(
    store: Store,
    route: str,
    *,
    since: datetime | None,
    until: datetime | None = None,
    granularity: str = "auto",
    default_cutoff: float = DEFAULT_CUTOFF,
    idle_after: float = 1800.0,
    now: datetime | None = None,
    changes: JudgeSettings | None = None,
    price_per_gpu_hour: float | None = None,
    gate: GateSettings | None = None,
    policy: Config | None = None,
) -> RouteReport:
    """Read everything the report of ``route`` over ``[since, until)`` shows.

    ``granularity`` ``auto`` picks minute buckets for short ranges of data (see
    :func:`choose_granularity`). ``default_cutoff`` is the break-even line of pairs without a
    detector snapshot (the configuration's ``detection.breakeven_cutoff``). A segment whose
    last event is more than ``idle_after`` seconds older than the route's newest is marked
    idle. ``changes`` judges the route's setup changes in the range (window, minimum
    effects: ``JudgeSettings.from_config``). ``price_per_gpu_hour``
    (``cost.price_per_gpu_hour``) prices GPU-seconds: without it the report gives GPU-seconds
    per successful task but no cost. ``gate`` (``GateSettings.from_config``) gates the
    experiments with traffic on the route in the range. ``policy``: the configuration (cost
    models, ``policy`` settings) the route's policy over the range is learnt with, for the
    "Where to speculate" section (``None``: no such section). The report is
    :attr:`RouteReport.empty` when the route has no rows in the range.
    """
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {', '.join(GRANULARITIES)}")
    generated = now or datetime.now(UTC)
    until = until or generated
    if since is not None and since >= until:
        raise SpecwatchError(
            f"empty range: since {when(since)} is not before until {when(until)}")
    gran, rows = _rows(store, route, since, until, granularity)
    notes: list[str] = []
    if not rows:
        return RouteReport(route, since, until, gran, [], [], [], generated,
                           other_routes=[r for r in _other_routes(store, since, until)
                                         if r != route], price_per_gpu_hour=price_per_gpu_hour)
    stats = store.buckets(granularity=gran, route=route, since=rows[0].bucket_start,
                          until=rows[-1].bucket_start + STEP[gran])
    series = _series_views(rows, stats)
    change_points = _change_points(store, route, since, until)
    episodes = _episodes(store, route, since, until)
    segments = _segments(store, route, idle_after, notes)

    by_pair: dict[Pair, list[SeriesView]] = {}
    for v in series:
        by_pair.setdefault(pair_of(v.key), []).append(v)
    pairs = []
    for pair, views in sorted(by_pair.items(), key=lambda kv: (kv[1][0].first, kv[0].label)):
        segs = [s for s in segments if s.pair == pair]
        cutoffs = sorted({s.cutoff for s in segs if math.isfinite(s.cutoff)}) or [default_cutoff]
        pairs.append(PairView(
            pair=pair, series=views, changes=_changes(views),
            change_points=[c for c in change_points if pair.matches(c.labels)],
            episodes=[e for e in episodes if pair.matches(e.labels)],
            segments=segs, cutoffs=cutoffs,
        ))
    judged = judge_changes(store, route=route, since=since, until=until, settings=changes)
    section = None if policy is None else gather_policy(
        store, policy, route, since=since, until=until, current=_current_pair(series))
    return RouteReport(route, since, until, gran, pairs, episodes, segments, generated,
                       notes=notes, changes=judged, price_per_gpu_hour=price_per_gpu_hour,
                       gates=judge_experiments(store, route=route, since=since, until=until,
                                               settings=gate), policy=section)
