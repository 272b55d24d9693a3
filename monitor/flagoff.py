"""The flag-off comparison: did a route get worse when speculation was turned off?

Operators switch speculation off on a route to win back the draft's GPU memory, or because
the acceptance rate looked poor. This report, run weekly by ``monitor/jobs.py``, tells them
whether the route paid for it.

**Which routes.** A request ran with speculation *off* when it carried no ``spec`` object:
its series has ``num_speculative_tokens`` 0 and no draft, and ``BucketStats`` counts it in
``requests`` but not in ``spec_requests``. (A request with speculation on that drafted
nothing is still *on*: the flag was on.) Per route and hour, the hour is *off* when more
than half of its requests ran with speculation off, *on* otherwise; hours without traffic
say nothing. A route **switched off** at the start of an off hour whose previous hour with
traffic was on; the report takes the last such switch inside the window
``[end - window, end)``, where ``end`` is the report time floored to the hour (only whole
hour rollups are read, so retention of minute rows does not matter).

**What is compared.** The *off side* runs from the switch to the next on hour (the route was
switched back) or to ``end``; the *on side* is the same length of time just before the
switch. Each side counts only requests of its own kind (rollout stragglers of the other kind
are left out). From the merged latency sketches (1% relative error) of each side:

=================  ==========================================  ===============
metric             what                                        worse when
=================  ==========================================  ===============
``e2e_p99``        end-to-end latency, 99th percentile         higher
``e2e_p50``        end-to-end latency, median                  higher
``ttft_p99``       time to first token, 99th percentile        higher
``ttft_p50``       time to first token, median                 higher
``decode_tps_p50`` per-request decode throughput, median       lower
=================  ==========================================  ===============

**Thresholds.** The change of a metric is ``off / on - 1``. It counts as *worse* (or
*better*) only when all of these hold, else the metric is *same*:

1. it is at least :data:`MIN_EFFECT` (5%) in size: five times the sketches' error, and
   about the smallest latency change anyone acts on;
2. it is larger than the *noise* of the on side: the relative change of the metric between
   the first and the second half of the on side, when nothing was switched (0 when a half
   has no requests);
3. it is *consistent*: each half of the off side, alone against the whole on side, moved the
   same way by at least half the threshold, so one bad day (an unrelated incident) cannot
   make the verdict. A side shorter than two hours has no halves and never calls a change.

**Verdicts** (``verdict``, plus a one-line ``summary`` for the operator):

- ``insufficient_data``: a side has fewer than ``min_requests`` requests (default 1000,
  about ten requests beyond the 99th percentile);
- ``turn_back_on``: some metric worse and none better ("p99 e2e worsened 38% with
  speculation off: turn it back on");
- ``mixed``: some worse and some better ("mixed with speculation off: p50 e2e 12% better,
  p99 e2e 9% worse ...");
- ``keep_off``: nothing worse ("p99 did not worsen with speculation off ...: the draft was
  not earning its memory; keep it off", or "... improved 12% ...: keep it off").
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from monitor.aggregate.bucket import BucketStats
from monitor.store.flag_off import flag_off_rows, upsert_flag_off

if TYPE_CHECKING:
    from monitor.store.query import RatioRow
    from monitor.store.store import Store

__all__ = [
    "DEFAULT_MIN_REQUESTS",
    "METRICS",
    "MIN_EFFECT",
    "FlagOffResult",
    "MetricChange",
    "SideStats",
    "compare_flag_off",
    "find_switches",
    "judge",
    "load_reports",
    "route_hash",
    "save_reports",
    "verdict",
]

log = logging.getLogger(__name__)

MIN_EFFECT = 0.05
DEFAULT_MIN_REQUESTS = 1000
OFF_SHARE = 0.5  # an hour is off when more than this share of its requests ran without spec
HOUR = timedelta(hours=1)

INSUFFICIENT, TURN_BACK_ON, MIXED, KEEP_OFF = (
    "insufficient_data", "turn_back_on", "mixed", "keep_off"
)
WORSE, BETTER, SAME, UNKNOWN = "worse", "better", "same", "unknown"


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    label: str
    sketch: str  # a BucketStats sketch property
    q: float
    higher_is_worse: bool


# In the order the summary prefers to cite them: the tail first.
METRICS: tuple[Metric, ...] = (
    Metric("e2e_p99", "p99 e2e", "e2e_ms", 0.99, True),
    Metric("e2e_p50", "p50 e2e", "e2e_ms", 0.50, True),
    Metric("ttft_p99", "p99 TTFT", "ttft_ms", 0.99, True),
    Metric("ttft_p50", "p50 TTFT", "ttft_ms", 0.50, True),
    Metric("decode_tps_p50", "p50 decode throughput", "decode_tps", 0.50, False),
)
_BY_NAME = {m.name: m for m in METRICS}


def _iso(dt: datetime) -> str:
    return dt.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _rel(new: float | None, old: float | None) -> float | None:
    """``new / old - 1``; ``None`` when either is unknown or ``old`` is 0."""
    if new is None or old is None or old <= 0.0:
        return None
    return new / old - 1.0


def _value(stats: BucketStats, metric: Metric) -> float | None:
    return getattr(stats, metric.sketch).quantile(metric.q)  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class SideStats:
    """One side of the comparison: its time range, request counts and metric values."""

    since: datetime
    until: datetime
    requests: int
    errors: int
    values: Mapping[str, float | None]

    @classmethod
    def of(cls, since: datetime, until: datetime, stats: BucketStats) -> SideStats:
        values = {m.name: _value(stats, m) for m in METRICS}
        return cls(since, until, stats.requests, stats.errors, values)

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
    """One metric, on versus off: ``delta = off / on - 1`` and what it was judged."""

    metric: str
    on: float | None
    off: float | None
    delta: float | None
    threshold: float
    outcome: str  # worse | better | same | unknown

    @property
    def worse_by(self) -> float | None:
        """``delta`` signed so that positive is worse with speculation off."""
        if self.delta is None:
            return None
        return self.delta if _BY_NAME[self.metric].higher_is_worse else -self.delta

    def to_json(self) -> dict[str, Any]:
        return {
            "on": self.on,
            "off": self.off,
            "delta": self.delta,
            "threshold": self.threshold,
            "outcome": self.outcome,
        }


def judge(
    metric: Metric,
    on: float | None,
    off: float | None,
    on_halves: tuple[float | None, float | None],
    off_halves: tuple[float | None, float | None],
    *,
    min_effect: float = MIN_EFFECT,
) -> MetricChange:
    """Judge one metric by the module's three rules.

    >>> p99 = METRICS[0]
    >>> judge(p99, 1000.0, 1380.0, (990.0, 1010.0), (1370.0, 1390.0)).outcome
    'worse'
    >>> judge(p99, 1000.0, 1030.0, (990.0, 1010.0), (1020.0, 1040.0)).outcome  # under 5%
    'same'
    >>> judge(p99, 1000.0, 1150.0, (850.0, 1100.0), (1140.0, 1160.0)).outcome  # noisy on side
    'same'
    >>> judge(p99, 1000.0, 1200.0, (990.0, 1010.0), (1420.0, 1010.0)).outcome  # one bad half
    'same'
    >>> judge(METRICS[-1], 50.0, 40.0, (50.0, 50.0), (40.0, 40.0)).outcome  # throughput fell
    'worse'
    """
    delta = _rel(off, on)
    noise = abs(_rel(on_halves[1], on_halves[0]) or 0.0)
    threshold = max(min_effect, noise)
    if delta is None:
        return MetricChange(metric.name, on, off, None, threshold, UNKNOWN)
    sign = 1.0 if metric.higher_is_worse else -1.0
    worse_by = sign * delta
    direction = 1.0 if worse_by > 0 else -1.0
    halves = [_rel(h, on) for h in off_halves]
    consistent = all(h is not None and direction * sign * h >= threshold / 2 for h in halves)
    outcome = SAME
    if abs(worse_by) >= threshold and consistent:
        outcome = WORSE if worse_by > 0 else BETTER
    return MetricChange(metric.name, on, off, delta, threshold, outcome)


def _pct(x: float, digits: int = 0) -> str:
    return f"{abs(x) * 100:.{digits}f}%"


def _moved(c: MetricChange) -> str:
    m = _BY_NAME[c.metric]
    worse = c.outcome == WORSE
    if m.higher_is_worse:
        verb = "worsened" if worse else "improved"
    else:
        verb = "fell" if worse else "rose"
    return f"{m.label} {verb} {_pct(c.delta or 0.0)}"


def _signed(c: MetricChange) -> str:
    return f"{_BY_NAME[c.metric].label} {(c.delta or 0.0) * 100:+.1f}%"


def verdict(
    changes: Sequence[MetricChange], on_requests: int, off_requests: int, min_requests: int
) -> tuple[str, str]:
    """The route's verdict and its one-line summary.

    >>> same = MetricChange("e2e_p99", 1000.0, 1010.0, 0.01, 0.05, "same")
    >>> print(*verdict([same], 5000, 5000, 1000))
    keep_off p99 did not worsen with speculation off (p99 e2e +1.0%): the draft was not
    earning its memory; keep it off
    >>> print(*verdict([same], 5000, 40, 1000))
    insufficient_data insufficient data: 5000 requests with speculation on, 40 off
    (need 1000 per side)
    """
    if on_requests < min_requests or off_requests < min_requests:
        return INSUFFICIENT, (
            f"insufficient data: {on_requests} requests with speculation on, {off_requests} off "
            f"(need {min_requests} per side)"
        )
    worse = sorted((c for c in changes if c.outcome == WORSE), key=lambda c: -(c.worse_by or 0))
    better = sorted((c for c in changes if c.outcome == BETTER), key=lambda c: c.worse_by or 0)
    if worse and better:
        parts = [f"{_BY_NAME[c.metric].label} {_pct(c.delta or 0.0)} better" for c in better]
        parts += [f"{_BY_NAME[c.metric].label} {_pct(c.delta or 0.0)} worse" for c in worse]
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

    @property
    def deltas(self) -> dict[str, float | None]:
        """Per metric, ``off / on - 1``."""
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
        }


# --- finding the switch ---------------------------------------------------------------------


def find_switches(
    rows: Iterable[RatioRow], start: datetime, end: datetime
) -> dict[str, tuple[datetime, datetime]]:
    """Per route that switched speculation off in ``[start, end)``: (switch, off until).

    ``rows`` are hourly ratio rows; see the module docstring for the rule.
    """
    counts: dict[str, dict[datetime, list[int]]] = {}
    for r in rows:
        on_off = counts.setdefault(r.route, {}).setdefault(r.bucket_start, [0, 0])
        on_off[0] += r.spec_requests
        on_off[1] += r.requests - r.spec_requests
    out: dict[str, tuple[datetime, datetime]] = {}
    for route, hours in counts.items():
        states = [
            (h, off > OFF_SHARE * (on + off)) for h, (on, off) in sorted(hours.items()) if on + off
        ]
        switch: tuple[datetime, datetime] | None = None
        for i in range(1, len(states)):
            hour, is_off = states[i]
            if not (is_off and not states[i - 1][1] and start <= hour < end):
                continue
            back_on = next((h for h, o in states[i + 1 :] if not o), end)
            switch = (hour, min(back_on, end))
        if switch is not None:
            out[route] = switch
    return out


# --- comparing ------------------------------------------------------------------------------


def _floor_hour(dt: datetime) -> datetime:
    dt = dt.astimezone(UTC)
    return dt.replace(minute=0, second=0, microsecond=0)


def _merged(stats: Iterable[BucketStats]) -> BucketStats:
    acc = BucketStats()
    for s in stats:
        acc.merge(s)
    return acc


def _halves(
    store: Store, route: str, since: datetime, until: datetime, *, off: bool
) -> tuple[BucketStats, BucketStats]:
    """The route's requests of one kind (off: no speculation) in two halves of the range.

    Read with ``stats()``, which merges as it reads: memory stays one sketch set per series
    whatever the range, where ``buckets()`` would hold every hour's.
    """
    mid = since + (until - since) // 2 // HOUR * HOUR
    out = []
    for a, b in ((since, mid), (mid, until)):
        per_series = store.stats(granularity="hour", route=route, since=a, until=b) if a < b else {}
        out.append(
            _merged(s for k, s in per_series.items() if (k.num_speculative_tokens == 0) == off)
        )
    return out[0], out[1]


def _compare_route(
    store: Store,
    route: str,
    switched_at: datetime,
    off_until: datetime,
    window: tuple[datetime, datetime],
    min_requests: int,
) -> FlagOffResult:
    on_since = switched_at - (off_until - switched_at)
    on_halves = _halves(store, route, on_since, switched_at, off=False)
    off_halves = _halves(store, route, switched_at, off_until, off=True)
    on_all, off_all = _merged(on_halves), _merged(off_halves)
    changes = tuple(
        judge(
            m,
            _value(on_all, m),
            _value(off_all, m),
            (_value(on_halves[0], m), _value(on_halves[1], m)),
            (_value(off_halves[0], m), _value(off_halves[1], m)),
        )
        for m in METRICS
    )
    code, summary = verdict(changes, on_all.requests, off_all.requests, min_requests)
    return FlagOffResult(
        route=route,
        window_start=window[0],
        window_end=window[1],
        switched_at=switched_at,
        on=SideStats.of(on_since, switched_at, on_all),
        off=SideStats.of(switched_at, off_until, off_all),
        changes=changes,
        verdict=code,
        summary=summary,
    )


def compare_flag_off(
    store: Store,
    now: datetime,
    window: timedelta | float,
    *,
    min_requests: int = DEFAULT_MIN_REQUESTS,
) -> list[FlagOffResult]:
    """One result per route that switched speculation off in the ``window`` before ``now``
    (floored to the hour), sorted by route. Reads hour rollups back to twice the window."""
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
    rows = store.ratios(granularity="hour", since=end - 2 * (end - start), until=end)
    switches = find_switches(rows, start, end)
    return [
        _compare_route(store, route, sw, until, (start, end), min_requests)
        for route, (sw, until) in sorted(switches.items())
    ]


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
