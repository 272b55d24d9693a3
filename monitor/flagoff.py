"""The flag-off report: did a route get worse when speculation was turned off?

Operators switch speculation off on a route to win back the draft's GPU memory, or because
the acceptance rate looked poor. This report, run weekly by ``monitor/jobs.py``, tells them
whether the route paid for it. It is the change report (``monitor/changes/``,
``docs/changes.md``) applied to one kind of change, ``speculation_off``: one method judges
every change of setup, and this module only picks the changes, sets the sides' length and
words the verdict for the operator.

**Which routes.** Detection records a ``speculation_off`` change at the first request of a
route that ran without speculation (``num_speculative_tokens`` 0) while the route's latest
setup drafted (``monitor/detect/lineage.py``); the store keeps it in ``setup_changes``. The
report covers every route with such a change inside the window ``[end - window, end)``,
``end`` being the report time floored to the hour, and takes the route's **latest** one.
Routes whose changes the store does not hold (rollups written without detection) are not
reported.

*What changed from the older hour-majority rule*: a switch used to be the first hour in
which most requests ran without speculation. Detection's change is the first request
instead, and each side counts **only its own setup's requests** (the judge's rule), so a
rollout that turns speculation off on part of the traffic first (a canary) is judged at
once on the requests that ran off, against those that ran on before the switch, whatever
their share of the hour. An hour of mixed traffic no longer hides or delays the switch, and
the stragglers of either kind never count for the other side. ``switched_at`` is that
first request's time (it was the start of the first mostly-off hour). A trickle of requests without
speculation is judged the same way and is ``insufficient_data`` until it reaches
``min_requests``.

**The sides** (the judge's, on **hour** rollups: a week reaches past the retention of minute
rows, so the whole window is read at one granularity):

- *off*: the off setup's series from the hour holding the switch up to the next change of
  the route to another setup (speculation back on, a rollback) or to ``end``;
- *on*: the setup it replaced, over as long a stretch just before the switch's hour (and no
  earlier than that setup's own arrival on the route).

**Metrics and thresholds** are the judge's (``monitor/changes/metrics.py``): p99 and p50
end-to-end latency, p99 and p50 TTFT, p50 decode throughput from the merged sketches with
order-statistic 95% intervals, and the error rate (clustered by hour, absolute change). A
metric is *worse* or *better* only when its whole interval lies on one side of 0 **and** the
change is at least 5% (the error rate: 1 point); otherwise *same*; with fewer than
``min_requests`` measurements on a side it is *unknown*. Acceptance has no off side and
takes no part.

One rule is added for a report that spans a week, where the order-statistic interval of a
quantile is narrow and does not see how the hours differ: a change must **persist**. Each
half of the off side (split on the hour), judged alone against the whole on side, must
have moved the same way by at least half the minimum effect; otherwise a *worse* or
*better* metric is reported *same* (``reason`` says why, ``halves`` holds both changes), so
an unrelated incident that passed cannot make the verdict. An off stretch shorter than
two hours has no halves and calls no change. The judge's own verdict of the change, which
has no such rule, is kept beside (``change``). The earlier rule that the on side's own
drift between its halves raised the threshold is gone: the judge's interval stands for it.

**Verdicts** (``verdict``, plus a one-line ``summary`` for the operator):

- ``insufficient_data``: a side has fewer than ``min_requests`` requests (default 1000,
  about ten requests beyond the 99th percentile);
- ``turn_back_on``: some metric worse and none better ("p99 e2e worsened 38% with
  speculation off: turn it back on");
- ``mixed``: some worse and some better ("mixed with speculation off: p50 e2e 12% better,
  p99 e2e 9% worse ...");
- ``keep_off``: nothing worse ("p99 did not worsen with speculation off ...: the draft was
  not earning its memory; keep it off", or "... improved 12% ...: keep it off").

The stored report (``flag_off_reports``, one row per route and window) keeps its shape; each
metric also carries the judge's ``interval`` and ``verdict``, and ``change`` names the
change record and the judge's overall verdict.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from monitor.aggregate.bucket import BucketStats
from monitor.change_record import ChangeRecord
from monitor.changes.judge import JudgeSettings, Side, judge_sides, overall, series_of, side_windows
from monitor.changes.metrics import BETTER, INSUFFICIENT, WORSE, MetricVerdict
from monitor.store.flag_off import flag_off_rows, upsert_flag_off

if TYPE_CHECKING:
    from monitor.store.store import Store

__all__ = [
    "DEFAULT_MIN_REQUESTS",
    "KIND",
    "METRICS",
    "MIN_EFFECT",
    "FlagOffResult",
    "MetricChange",
    "SideStats",
    "compare_flag_off",
    "judge_switch",
    "load_reports",
    "route_hash",
    "save_reports",
    "verdict",
]

log = logging.getLogger(__name__)

KIND = "speculation_off"  # the change kind this report judges
MIN_EFFECT = 0.05
ERROR_RATE_MIN_CHANGE = 0.01
DEFAULT_MIN_REQUESTS = 1000
HOUR = timedelta(hours=1)
_STEP = 3600  # the sides are read from hour rollups

INSUFFICIENT_DATA, TURN_BACK_ON, MIXED, KEEP_OFF = (
    "insufficient_data", "turn_back_on", "mixed", "keep_off"
)
SAME, UNKNOWN = "same", "unknown"


@dataclass(frozen=True, slots=True)
class Metric:
    name: str  # the judge's metric name
    label: str  # for the summary
    higher_is_worse: bool
    absolute: bool = False  # change in rate units (the error rate), not relative


# In the order the summary prefers to cite them: the tail first.
METRICS: tuple[Metric, ...] = (
    Metric("e2e_p99", "p99 e2e", True),
    Metric("e2e_p50", "p50 e2e", True),
    Metric("ttft_p99", "p99 TTFT", True),
    Metric("ttft_p50", "p50 TTFT", True),
    Metric("decode_tps_p50", "p50 decode throughput", False),
    Metric("error_rate", "error rate", True, absolute=True),
)
_BY_NAME = {m.name: m for m in METRICS}


def _iso(dt: datetime) -> str:
    return dt.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


@dataclass(frozen=True, slots=True)
class SideStats:
    """One side of the comparison: its time range, request counts and metric values."""

    since: datetime
    until: datetime
    requests: int
    errors: int
    values: Mapping[str, float | None]

    def to_json(self) -> dict[str, Any]:
        return {
            "since": _iso(self.since),
            "until": _iso(self.until),
            "requests": self.requests,
            "errors": self.errors,
            **self.values,
        }


@dataclass(frozen=True, slots=True)
class MetricChange:
    """One metric, on versus off: ``delta`` is ``off / on - 1`` (the error rate: ``off -
    on``), ``outcome`` the judge's verdict (``unknown`` for its ``insufficient_data``; a
    change that did not persist through both halves of the off side: ``same``, with
    ``reason``), ``threshold`` its minimum effect, ``interval`` the 95% interval of
    ``delta`` and ``halves`` the change of each half of the off side."""

    metric: str
    on: float | None
    off: float | None
    delta: float | None
    threshold: float
    outcome: str  # worse | better | same | unknown
    interval: tuple[float | None, float | None] | None = None
    reason: str | None = None
    halves: tuple[float | None, float | None] | None = None

    @classmethod
    def of(cls, m: MetricVerdict) -> MetricChange:
        outcome = UNKNOWN if m.verdict == INSUFFICIENT else m.verdict
        return cls(m.name, m.before, m.after, m.change, m.min_effect, outcome, m.interval,
                   m.extra.get("reason"))

    @property
    def worse_by(self) -> float | None:
        """``delta`` signed so that positive is worse with speculation off."""
        if self.delta is None:
            return None
        return self.delta if _BY_NAME[self.metric].higher_is_worse else -self.delta

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "on": self.on,
            "off": self.off,
            "delta": self.delta,
            "threshold": self.threshold,
            "outcome": self.outcome,
            "interval": None if self.interval is None else list(self.interval),
        }
        if self.reason is not None:
            out["reason"] = self.reason
        if self.halves is not None:
            out["halves"] = list(self.halves)
        return out


def _size(c: MetricChange) -> str:
    x = abs(c.delta or 0.0)
    return f"{x * 100:.1f} points" if _BY_NAME[c.metric].absolute else f"{x * 100:.0f}%"


def _moved(c: MetricChange) -> str:
    m = _BY_NAME[c.metric]
    worse = c.outcome == WORSE
    if m.absolute:
        verb = "rose" if worse else "fell"
    elif m.higher_is_worse:
        verb = "worsened" if worse else "improved"
    else:
        verb = "fell" if worse else "rose"
    return f"{m.label} {verb} {_size(c)}"


def _signed(c: MetricChange) -> str:
    m = _BY_NAME[c.metric]
    if m.absolute:
        return f"{m.label} {(c.delta or 0.0) * 100:+.1f} points"
    return f"{m.label} {(c.delta or 0.0) * 100:+.1f}%"


def verdict(
    changes: Sequence[MetricChange], on_requests: int, off_requests: int, min_requests: int
) -> tuple[str, str]:
    """The route's verdict and its one-line summary, from the metrics' outcomes.

    >>> same = MetricChange("e2e_p99", 1000.0, 1010.0, 0.01, 0.05, "same")
    >>> print(*verdict([same], 5000, 5000, 1000))
    keep_off p99 did not worsen with speculation off (p99 e2e +1.0%): the draft was not
    earning its memory; keep it off
    >>> print(*verdict([same], 5000, 40, 1000))
    insufficient_data insufficient data: 5000 requests with speculation on, 40 off
    (need 1000 per side)
    """
    if on_requests < min_requests or off_requests < min_requests:
        return INSUFFICIENT_DATA, (
            f"insufficient data: {on_requests} requests with speculation on, {off_requests} off "
            f"(need {min_requests} per side)"
        )
    worse = sorted((c for c in changes if c.outcome == WORSE), key=lambda c: -(c.worse_by or 0))
    better = sorted((c for c in changes if c.outcome == BETTER), key=lambda c: c.worse_by or 0)
    if worse and better:
        parts = [f"{_BY_NAME[c.metric].label} {_size(c)} better" for c in better]
        parts += [f"{_BY_NAME[c.metric].label} {_size(c)} worse" for c in worse]
        return MIXED, (
            f"mixed with speculation off: {', '.join(parts)}; decide by which of these "
            "the route's users feel"
        )
    if worse:
        also = f" (also {', '.join(_signed(c) for c in worse[1:])})" if worse[1:] else ""
        return TURN_BACK_ON, f"{_moved(worse[0])} with speculation off{also}: turn it back on"
    if better:
        also = f" (also {', '.join(_signed(c) for c in better[1:])})" if better[1:] else ""
        return KEEP_OFF, (
            f"{_moved(better[0])} with speculation off and nothing worsened{also}: the draft "
            "was costing more than it saved; keep it off"
        )
    tails = [c for c in changes if c.metric in ("e2e_p99", "ttft_p99") and c.delta is not None]
    shown = f" ({', '.join(_signed(c) for c in tails)})" if tails else ""
    return KEEP_OFF, (
        f"p99 did not worsen with speculation off{shown}: the draft was not earning its "
        "memory; keep it off"
    )


@dataclass(frozen=True, slots=True)
class FlagOffResult:
    """The comparison of one route that switched speculation off inside the window."""

    route: str
    window_start: datetime
    window_end: datetime
    switched_at: datetime
    on: SideStats
    off: SideStats
    changes: tuple[MetricChange, ...]
    verdict: str
    summary: str
    change_id: str = ""
    change_verdict: str = ""  # the judge's overall verdict of the change
    change_reason: str = ""

    @property
    def deltas(self) -> dict[str, float | None]:
        """Per metric, ``off / on - 1`` (the error rate: ``off - on``)."""
        return {c.metric: c.delta for c in self.changes}

    def to_json(self) -> dict[str, Any]:
        return {
            "route": self.route,
            "window_start": _iso(self.window_start),
            "window_end": _iso(self.window_end),
            "switched_at": _iso(self.switched_at),
            "verdict": self.verdict,
            "summary": self.summary,
            "on": self.on.to_json(),
            "off": self.off.to_json(),
            "metrics": {c.metric: c.to_json() for c in self.changes},
            "change": {"change_id": self.change_id, "kind": KIND,
                       "verdict": self.change_verdict, "reason": self.change_reason},
        }


# --- judging one switch -----------------------------------------------------------------------


def _floor_hour(dt: datetime) -> datetime:
    dt = dt.astimezone(UTC)
    return dt.replace(minute=0, second=0, microsecond=0)


def _hour_sides(store: Store, record: ChangeRecord,
                windows: tuple[tuple[float, float], tuple[float, float]]
                ) -> tuple[Side, Side, list[tuple[float, BucketStats]]]:
    """The judge's two sides, from hour rollups: each side only its own setup's series; and
    the off side's buckets with their start times (for its halves)."""
    (b0, b1), (a0, a1) = windows
    on, off = series_of(record.route, record.previous), series_of(record.route, record.current)
    rows = store.buckets(granularity="hour", route=record.route, since=_utc(b0),
                         until=_utc(max(b1, a1)))
    before, after = [], []
    for (key, start), stats in sorted(rows.items(), key=lambda kv: kv[0][1]):
        ts = start.timestamp()
        if key == on and b0 <= ts < b1:
            before.append(stats)
        if key == off and a0 <= ts < a1:
            after.append((ts, stats))
    return (Side(on, b0, b1, tuple(before)), Side(off, a0, a1, tuple(b for _, b in after)),
            after)


def _side_stats(side: Side, merged: BucketStats, changes: Sequence[MetricChange],
                which: str) -> SideStats:
    values = {c.metric: (c.on if which == "on" else c.off) for c in changes
              if not _BY_NAME[c.metric].absolute}
    return SideStats(_utc(side.since), _utc(side.until), merged.requests, merged.errors, values)


def _halves(before: Side, after: Side, after_rows: Sequence[tuple[float, BucketStats]],
            record: ChangeRecord, settings: JudgeSettings
            ) -> dict[str, tuple[float | None, float | None]] | None:
    """Per metric, the change of each half of the off side (split on the hour) alone
    against the whole on side; ``None`` when the off side is shorter than two hours."""
    hours = int(after.until - after.since) // _STEP
    if hours < 2:
        return None
    mid = after.since + hours // 2 * _STEP
    halves = (Side(after.series, after.since, mid,
                   tuple(b for ts, b in after_rows if ts < mid)),
              Side(after.series, mid, after.until,
                   tuple(b for ts, b in after_rows if ts >= mid)))
    # Only the direction and size of each half's change count: no minimum of requests.
    loose = replace(settings, min_requests=1)
    judged = [{m.name: m.change for m in judge_sides(before, h, record.previous,
                                                     record.current, loose)} for h in halves]
    return {m.name: (judged[0][m.name], judged[1][m.name]) for m in METRICS}


def _persists(change: MetricChange, halves: tuple[float | None, float | None] | None
              ) -> MetricChange:
    """``change`` as it stands once each half of the off side has been looked at alone."""
    if change.outcome not in (WORSE, BETTER):
        return change
    delta = change.delta or 0.0
    ok = halves is not None and all(
        h is not None and h * delta > 0 and abs(h) >= change.threshold / 2 for h in halves)
    if ok:
        return replace(change, halves=halves)
    shown = "no halves: the off side is shorter than two hours" if halves is None else (
        "the halves of the off side moved "
        + " and ".join("?" if h is None else f"{h * 100:+.1f}%" for h in halves))
    return replace(change, outcome=SAME, halves=halves,
                   reason=f"{change.outcome} overall but not in both halves ({shown})")


def judge_switch(
    store: Store,
    record: ChangeRecord,
    route_changes: Sequence[ChangeRecord],
    window: tuple[datetime, datetime],
    *,
    min_requests: int = DEFAULT_MIN_REQUESTS,
) -> FlagOffResult:
    """Judge one ``speculation_off`` change for the report of ``window`` (start, end).

    ``route_changes``: the route's stored changes (the next one ends the off side, the on
    setup's arrival bounds the on side). The off side ends at ``window[1]`` at the latest;
    the on side is as long, just before the switch's hour.
    """
    # Where the off side ends: the next change to another setup, or the report's end
    # (the switch's hour is before ``end``, so that is at least an hour away).
    t = record.at // _STEP * _STEP
    _, (_, off_until) = side_windows(record, route_changes, window[1].timestamp() - t, _STEP)
    length = off_until - t  # 0 when the route moved on within the switch's hour
    # Both sides with that length: the on side just before the switch's hour.
    windows = side_windows(record, route_changes, max(length, 1.0), _STEP)
    if length <= 0:
        windows = ((t, t), (t, t))
    before, after, after_rows = _hour_sides(store, record, windows)
    settings = JudgeSettings(window=max(length, 1.0), min_requests=min_requests,
                             min_effect=MIN_EFFECT, error_rate_min_change=ERROR_RATE_MIN_CHANGE)
    judged = {m.name: m for m in judge_sides(before, after, record.previous, record.current,
                                             settings)}
    change_verdict, change_reason = overall(tuple(judged.values()), True)
    halves = _halves(before, after, after_rows, record, settings)
    changes = tuple(_persists(MetricChange.of(judged[m.name]),
                              None if halves is None else halves[m.name]) for m in METRICS)
    on_all, off_all = before.merged, after.merged
    code, summary = verdict(changes, on_all.requests, off_all.requests, min_requests)
    return FlagOffResult(
        route=record.route,
        window_start=window[0],
        window_end=window[1],
        switched_at=_utc(record.at),
        on=_side_stats(before, on_all, changes, "on"),
        off=_side_stats(after, off_all, changes, "off"),
        changes=changes,
        verdict=code,
        summary=summary,
        change_id=record.change_id,
        change_verdict=change_verdict,
        change_reason=change_reason,
    )


def compare_flag_off(
    store: Store,
    now: datetime,
    window: timedelta | float,
    *,
    min_requests: int = DEFAULT_MIN_REQUESTS,
) -> list[FlagOffResult]:
    """One result per route whose latest ``speculation_off`` change lies in the ``window``
    before ``now`` (floored to the hour), sorted by route."""
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError(f"now must be an aware datetime, got {now.isoformat()}")
    if not isinstance(window, timedelta):
        window = timedelta(seconds=window)
    if window < 2 * HOUR:
        raise ValueError(f"window must be at least 2h, got {window}")
    if min_requests < 1:
        raise ValueError(f"min_requests must be >= 1, got {min_requests}")
    end = _floor_hour(now)
    start = end - window // HOUR * HOUR
    latest: dict[str, ChangeRecord] = {}
    for c in store.changes(since=start, until=end):
        if c.kind == KIND and (c.route not in latest or c.at >= latest[c.route].at):
            latest[c.route] = c
    out = []
    for route, record in sorted(latest.items()):
        route_changes = store.changes(route=route)
        out.append(judge_switch(store, record, route_changes, (start, end),
                                min_requests=min_requests))
    return out


# --- the reports table ----------------------------------------------------------------------


def route_hash(route: str) -> str:
    """sha256 hex of the route's ASCII-escaped JSON (any string, lone surrogates included).

    >>> route_hash("code")[:12]
    '4a1933b06cf6'
    """
    return hashlib.sha256(json.dumps(route, ensure_ascii=True).encode("ascii")).hexdigest()


def save_reports(store: Store, results: Sequence[FlagOffResult], now: datetime) -> int:
    """Upsert one ``flag_off_reports`` row per result, keyed by (route, window); returns how
    many rows were written. A rerun replaces the report and keeps ``created_at``."""
    if not results:
        return 0
    rows = [
        {
            "route": r.route,
            "route_hash": route_hash(r.route),
            "window_start": r.window_start,
            "window_end": r.window_end,
            "switched_at": r.switched_at,
            "verdict": r.verdict,
            "summary": r.summary,
            "on_requests": r.on.requests,
            "off_requests": r.off.requests,
            "report": r.to_json(),
            "created_at": now,
            "updated_at": now,
        }
        for r in results
    ]
    upsert_flag_off(store, rows)
    return len(rows)


def load_reports(
    store: Store, *, route: str | None = None, since: datetime | None = None
) -> list[dict[str, Any]]:
    """Stored reports (newest window first, then by route): each the ``to_json()`` of its
    result plus ``created_at`` and ``updated_at``. ``since`` filters on the window end."""
    rows = flag_off_rows(store, route_hash=None if route is None else route_hash(route),
                         since=since)
    rows.sort(key=lambda r: (-r.window_end.timestamp(), r.route))
    return [
        {**r.report, "created_at": _iso(r.created_at), "updated_at": _iso(r.updated_at)}
        for r in rows
    ]
