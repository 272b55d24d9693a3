"""Prometheus exposition of what specwatch counts and decides (the names: ``docs/metrics.md``).

Two threads meet here. The pipeline thread owns the rollups and the detectors and changes
them with every event; a scrape runs on the HTTP server's thread. So a scrape never reads a
live detector:

- :class:`RollupCounters` follows the exact rollups one *committed* checkpoint at a time (the
  pipeline's ``on_commit`` hook): the pair counters only ever hold what the store holds, and
  a checkpoint that failed or was fenced adds nothing. The pair counters
  (:class:`PairCounters`) and the latency window (:class:`LatencyWindow`) each take a lock
  around a checkpoint's update and around a scrape.
- :func:`snapshot_view` copies, on the pipeline thread after each checkpoint, what the
  segment gauges show into a frozen :class:`DetectionView`; :class:`DetectionCollector`
  renders whichever view was published last. Publishing is one attribute assignment, atomic
  for the scrape thread.

Segments are bounded: only the ``max_series`` most recently active are exported, and one
idle for ``detection.idle_pair_resolve`` (a pair no longer served, an old revision) has
retired: its gauges would only repeat the last numbers it had, so it leaves the exposition.
"""

from __future__ import annotations

import heapq
import threading
import time
import weakref
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

from monitor.aggregate.bucket import SKETCHES, BucketStats
from monitor.aggregate.series import SeriesKey
from monitor.aggregate.sketch import (
    DEFAULT_RELATIVE_ACCURACY,
    LogHistogram,
    MinuteSketches,
    merge_into,
)
from monitor.detect.acceptance import DROP, RISE, OverdispersedCusum
from monitor.detect.engine import Detection
from monitor.detect.segments import Segment
from monitor.rules import severity
from monitor.store.checkpoint import MINUTE, Checkpoint

__all__ = [
    "DEFAULT_MAX_SERIES",
    "PAIR_LABELS",
    "SEGMENT_LABELS",
    "DetectionCollector",
    "DetectionView",
    "LatencyWindow",
    "PairCounters",
    "RollupCounters",
    "SegmentRow",
    "snapshot_view",
]

DEFAULT_MAX_SERIES = 1000
PAIR_LABELS = ("route", "target_model", "draft_model")
SEGMENT_LABELS = ("route", "target_model", "target_revision", "draft_model", "draft_revision",
                  "num_speculative_tokens", "temperature")
QUANTILES = (0.5, 0.99)
WINDOW_MINUTES = 5
RECOMMENDATIONS = ("on", "off", "insufficient_data")


# -- the rollups -------------------------------------------------------------------------------


class RollupCounters:
    """Pair counters and per-route latency summaries, fed by committed checkpoints.

    >>> from monitor.telemetry.event import Event
    >>> b = BucketStats()
    >>> b.update(Event("r1", 0.0, "code", "ok", "t", "2026-10", "tok", output_tokens=10,
    ...          e2e_ms=500.0, ttft_ms=100.0, has_spec=True, num_speculative_tokens=2,
    ...          drafted_tokens=8, accepted_tokens=6, draft_model="d"))
    >>> key = SeriesKey("code", "t", "2026-10", "tok", "d", "", "", "", 2)
    >>> registry = CollectorRegistry()
    >>> RollupCounters(registry).observe(Checkpoint("replay", rollups={(key, 0): b}))
    >>> pair = {"route": "code", "target_model": "t", "draft_model": "d"}
    >>> registry.get_sample_value("specwatch_accepted_tokens_total", pair)
    6.0
    >>> registry.get_sample_value("specwatch_requests_total", {**pair, "status": "ok"})
    1.0
    >>> registry.get_sample_value("specwatch_ttft_seconds", {"route": "code", "quantile": "0.5"})
    0.1
    """

    def __init__(self, registry: CollectorRegistry, window_minutes: int = WINDOW_MINUTES) -> None:
        self.pairs = PairCounters()
        registry.register(self.pairs)
        self.latency = LatencyWindow(window_minutes)
        registry.register(self.latency)

    def observe(self, cp: Checkpoint) -> None:
        """Add one committed checkpoint's rollup deltas (the pipeline's ``on_commit``)."""
        self.pairs.observe(cp.rollups)
        self.latency.observe(cp.rollups)


# (metric name, help) of PairCounters' counters, in the order of their sums
_PAIR_COUNTERS = (
    ("specwatch_drafted_tokens",
     "Drafted tokens counted, per model pair (exact: follows committed checkpoints)."),
    ("specwatch_accepted_tokens",
     "Accepted draft tokens counted, per model pair (exact: follows committed checkpoints)."),
    ("specwatch_requests",
     "Requests counted, per model pair and status (ok, error: any other status)."),
)


class PairCounters(Collector):
    """The counters per model pair: drafted and accepted tokens, requests by status.

    One list of sums per pair, rendered at scrape. A prometheus_client ``Counter`` child
    per pair and counter (four a pair, each with its own lock) held about 2.4 KB a pair;
    at thousands of pairs that was more than the detectors of the pair's series. The
    samples are the same: ``_total`` and ``_created`` (when the pair was first counted).
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        # (route, target model, draft model) -> [drafted, accepted, ok, errors, created]
        self._sums: dict[tuple[str, str, str], list[Any]] = {}

    def observe(self, rollups: Mapping[tuple[SeriesKey, int], BucketStats]) -> None:
        # Summed per pair first: one update per pair and checkpoint, not per minute.
        pairs: dict[tuple[str, str, str], list[int]] = {}
        for (key, _minute), stats in rollups.items():
            pair = (key.route, key.target_model, key.draft_model)
            sums = pairs.get(pair)
            if sums is None:
                sums = pairs[pair] = [0, 0, 0, 0]
            sums[0] += stats.drafted_tokens
            sums[1] += stats.accepted_tokens
            sums[2] += stats.requests - stats.errors
            sums[3] += stats.errors
        if not pairs:
            return
        now = self._clock()
        with self._lock:
            held = self._sums
            for pair, (drafted, accepted, ok, errors) in pairs.items():
                mine = held.get(pair)
                if mine is None:
                    # both statuses exist from a pair's first request, zero or not
                    held[pair] = [drafted, accepted, ok, errors, now]
                else:
                    mine[0] += drafted
                    mine[1] += accepted
                    mine[2] += ok
                    mine[3] += errors

    def _families(self) -> list[CounterMetricFamily]:
        return [CounterMetricFamily(name, doc, labels=[*PAIR_LABELS, "status"]
                                    if name == "specwatch_requests" else PAIR_LABELS)
                for name, doc in _PAIR_COUNTERS]

    def describe(self) -> list[Metric]:
        return list(self._families())

    def collect(self) -> Iterator[Metric]:
        drafted, accepted, requests = families = self._families()
        with self._lock:
            for pair, (d, a, ok, errors, created) in self._sums.items():
                labels = list(pair)
                drafted.add_metric(labels, float(d), created=created)
                accepted.add_metric(labels, float(a), created=created)
                requests.add_metric([*labels, "ok"], float(ok), created=created)
                requests.add_metric([*labels, "error"], float(errors), created=created)
        yield from families


# (metric name, BucketStats sketch, factor to base units, help)
_LATENCIES = (
    ("specwatch_ttft_seconds", "ttft_ms", 1e-3,
     "Time to first token per route: quantiles over the last {m} minutes of event time, "
     "count and sum since start."),
    ("specwatch_e2e_latency_seconds", "e2e_ms", 1e-3,
     "End-to-end request latency per route: quantiles over the last {m} minutes of event "
     "time, count and sum since start."),
    ("specwatch_decode_throughput_tokens_per_second", "decode_tps", 1.0,
     "Decode throughput (output tokens per second after the first token) per route: "
     "quantiles over the last {m} minutes of event time, count and sum since start."),
)

_LATENCY_COLUMNS = tuple(SKETCHES.index(attr) for _, attr, _, _ in _LATENCIES)


class LatencyWindow(Collector):
    """Per route, the latency sketches of the newest minute buckets, as summaries.

    A summary in the client_golang sense: quantiles over a sliding window (the last
    ``minutes`` minute buckets of *event* time, the newest one still filling), ``_count`` and
    ``_sum`` over everything since start. The window ends at the newest minute of any route,
    so a route silent for longer than the window has no quantiles rather than stale ones.
    Typed summary, not gauge: ``quantile`` is a label reserved to summaries (promtool).
    """

    def __init__(self, minutes: int = WINDOW_MINUTES) -> None:
        if minutes < 1:
            raise ValueError("minutes must be >= 1")
        self.minutes = minutes
        self._lock = threading.Lock()
        # route -> minute bucket start -> one sketch per _LATENCIES entry; a minute before
        # the newest is packed (at thousands of routes, these sketches were most of the
        # daemon's memory per route), unpacked again only if a late delta comes for it
        self._window: dict[str, dict[int, MinuteSketches]] = {}
        # route -> [count, sum] per _LATENCIES entry, in base units, since start
        self._totals: dict[str, list[list[float]]] = {}
        # route -> per _LATENCIES entry, its window's QUANTILES; merging every minute's sketch
        # is most of a scrape at 1,000 routes, and only a checkpoint can change the answer
        self._quantiles: dict[str, list[tuple[float | None, ...]]] = {}
        self._newest: int | None = None

    def observe(self, rollups: Mapping[tuple[SeriesKey, int], BucketStats]) -> None:
        deltas = [(key.route, int(minute), stats) for (key, minute), stats in rollups.items()]
        if not deltas:
            return
        none = (None,) * len(_LATENCIES)
        with self._lock:
            newest = max(minute for _, minute, _ in deltas)
            if self._newest is None or newest > self._newest:
                self._newest = newest
            oldest = self._newest - (self.minutes - 1) * MINUTE
            for route, minute, stats in deltas:
                totals = self._totals.setdefault(route, [[0, 0.0] for _ in _LATENCIES])
                if minute < oldest:  # a late minute already out of the window: totals only
                    targets: tuple[LogHistogram | None, ...] = none
                else:
                    minutes = self._window.setdefault(route, {})
                    slot = minutes.get(minute)
                    if slot is None:
                        slot = minutes[minute] = MinuteSketches(
                            DEFAULT_RELATIVE_ACCURACY for _ in _LATENCIES)
                    targets = slot.opened()
                    self._quantiles.pop(route, None)
                # Merged from the delta's buffered values: no sketch built per delta (nor
                # folded into it: the checkpoint's statistics are not ours to change).
                merged = stats.merge_sketches(_LATENCY_COLUMNS, targets)
                for total, (count, value_sum), (_, _, factor, _) in zip(
                    totals, merged, _LATENCIES, strict=True
                ):
                    total[0] += count
                    total[1] += value_sum * factor
            newest = self._newest
            for route in list(self._window):
                minutes = self._window[route]
                expired = [m for m in minutes if m < oldest]
                if expired:
                    self._quantiles.pop(route, None)
                for minute in expired:
                    del minutes[minute]
                if not minutes:
                    del self._window[route]
                    continue
                for minute, slot in minutes.items():
                    if minute < newest:
                        slot.pack()

    def _families(self) -> list[SummaryMetricFamily]:
        return [SummaryMetricFamily(name, doc.format(m=self.minutes), labels=["route"])
                for name, _, _, doc in _LATENCIES]

    def describe(self) -> list[Metric]:
        return list(self._families())

    def collect(self) -> Iterator[Metric]:
        families = self._families()
        with self._lock:
            for route in sorted(self._totals):
                quantiles = self._quantiles.get(route)
                if quantiles is None:
                    quantiles = self._quantiles[route] = self._window_quantiles(route)
                for i, (family, (name, _, factor, _)) in enumerate(
                    zip(families, _LATENCIES, strict=True)
                ):
                    for q, value in zip(QUANTILES, quantiles[i], strict=True):
                        if value is not None:
                            family.add_sample(name, {"route": route, "quantile": f"{q:g}"},
                                              value * factor)
                    count, total = self._totals[route][i]
                    family.add_metric([route], count, total)
        yield from families

    def _window_quantiles(self, route: str) -> list[tuple[float | None, ...]]:
        minutes = self._window.get(route, {})
        out = []
        for i in range(len(_LATENCIES)):
            merged: LogHistogram | None = None
            for sketches in minutes.values():
                sketch = sketches[i]
                if merged is None:
                    merged = LogHistogram(sketch.relative_accuracy)
                merge_into(merged, sketch)
            out.append(tuple(None if merged is None else merged.quantile(q)
                             for q in QUANTILES))
        return out


# -- the detectors' view -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SegmentRow:
    """What one segment's gauges show; ``None`` (or empty) where the detector has no value.

    ``labels`` are the values of :data:`SEGMENT_LABELS`. ``statistic`` holds
    ``(direction, CUSUM / threshold)`` while the change-point bank watches; it is empty during
    warm-up (no baseline, no threshold yet), after an alarm (the bank is paused while the
    recovery test runs: the alert itself is in ``specwatch_alerts_firing``) and for the river
    detectors, which have no per-direction statistic.
    """

    labels: tuple[str, ...]
    last_ts: float
    acceptance_ratio: float | None
    mean_accepted_length: float | None
    position_ratios: tuple[float, ...]
    baseline: float | None
    statistic: tuple[tuple[str, float], ...]
    threshold: float | None
    cutoff: float
    recommendation: str


@dataclass(frozen=True, slots=True)
class DetectionView:
    """A plain-data snapshot of the detectors for one scrape thread to read at any time.

    ``segments`` most recently active first; ``firing`` is ``((rule, route, severity),
    episodes firing)`` in sorted order.
    """

    segments: tuple[SegmentRow, ...] = ()
    firing: tuple[tuple[tuple[str, str, str], int], ...] = ()


def snapshot_view(
    detection: Detection,
    firing: Iterable[tuple[str, str, str]] | None = None,
    *,
    max_series: int = DEFAULT_MAX_SERIES,
) -> DetectionView:
    """Copy what the exposition shows out of ``detection``: call it on the pipeline thread.

    ``firing`` lists ``(rule, route, severity)`` once per episode firing now (the alert
    lifecycle's); ``None`` counts the detectors' own firing conditions instead.

    Exported: segments with speculation on (a segment with ``num_speculative_tokens`` 0 has
    no acceptance to show) that were active within ``idle_pair_resolve`` of the detection
    clock, the ``max_series`` most recent of them. Two segments that differ only in what the
    labels leave out (tokenizer, drafting method) would collide: the most recent one wins.
    """
    if max_series < 0:
        raise ValueError("max_series must be >= 0")
    now = detection.now
    idle = detection.config.idle_pair_resolve
    live = [seg for seg in detection.view().segments.values()
            if seg.labels["num_speculative_tokens"] != "0" and now - seg.last_ts < idle]
    rows = _newest_rows(_newest(live, 2 * max_series), max_series)
    if len(rows) < max_series and len(live) > 2 * max_series:
        rows = _newest_rows(_ordered(live), max_series)  # collisions ate the candidates
    tally = Tally(_conditions(detection) if firing is None else firing)
    return DetectionView(segments=tuple(rows), firing=tuple(sorted(tally.items())))


def _ordered(segments: Iterable[Segment]) -> list[Segment]:
    """Most recently active first, ties in label order."""
    keyed = [(-seg.last_ts, _label_values(seg), i, seg) for i, seg in enumerate(segments)]
    keyed.sort(key=lambda k: k[:3])
    return [k[3] for k in keyed]


def _newest(live: list[Segment], n: int) -> list[Segment]:
    """The first ``n`` or more of ``_ordered(live)``, in that order: every segment at least
    as recent as the ``n``-th most recent (ties at the cut all come along, so the order up to
    the cut is the full sort's). Ordering only those is what keeps a checkpoint cheap at
    100,000 segments, where a full sort with label keys cost the pipeline thread 0.2 s."""
    if n == 0:
        return []
    if len(live) <= n:
        return _ordered(live)
    cut = heapq.nlargest(n, (seg.last_ts for seg in live))[-1]
    return _ordered(seg for seg in live if seg.last_ts >= cut)


def _newest_rows(ordered: list[Segment], max_series: int) -> list[SegmentRow]:
    rows: list[SegmentRow] = []
    seen: set[tuple[str, ...]] = set()
    for seg in ordered:
        if len(rows) >= max_series:
            break
        labels = _label_values(seg)
        if labels not in seen:
            seen.add(labels)
            rows.append(_row(seg, labels))
    return rows


def _label_values(seg: Segment) -> tuple[str, ...]:
    # absent draft fields and temperature are "" (the engine stores them that way or not at all)
    return tuple(seg.labels.get(name, "") for name in SEGMENT_LABELS)


def _row(seg: Segment, labels: tuple[str, ...]) -> SegmentRow:
    det = seg.acceptance
    statistic = _directions(det) if isinstance(det, OverdispersedCusum) else {}
    return SegmentRow(
        labels=labels,
        last_ts=seg.last_ts,
        acceptance_ratio=seg.breakeven.rate,
        mean_accepted_length=seg.positions.tau,
        position_ratios=tuple(seg.positions.survival or ()),
        baseline=det.baseline,
        statistic=tuple(sorted(statistic.items())),
        threshold=det.threshold if statistic else None,
        cutoff=seg.breakeven.cutoff,
        recommendation=seg.breakeven.recommendation,
    )


# detector -> (its request count and phase when computed, per-direction statistics). The
# detector exposes only the largest statistic of its bank; the split per direction comes out
# of its snapshot, which copies the baseline histogram: worth doing once per change only.
_DIRECTIONS: weakref.WeakKeyDictionary[OverdispersedCusum, tuple[tuple[Any, ...], dict]] = (
    weakref.WeakKeyDictionary()
)


def _directions(det: OverdispersedCusum) -> dict[str, float]:
    """Per direction, the largest CUSUM of the bank over its threshold (alarm at 1)."""
    if det.phase != "watch":
        return {}
    ev = det.evidence()
    # every change to the bank happens in an update that counts a request, and a reset (which
    # restarts the count) changes the baseline: together they say whether the cache holds
    key = (ev["requests"], ev["baseline"], ev["baseline_requests"])
    cached = _DIRECTIONS.get(det)
    if cached is not None and cached[0] == key:
        return cached[1]
    state = det.snapshot()["state"]
    out: dict[str, float] = {}
    for side, s, h in zip(state["side"], state["s"], state["h"], strict=True):
        direction = DROP if side < 0 else RISE
        out[direction] = max(out.get(direction, 0.0), s / h)
    _DIRECTIONS[det] = (key, out)
    return out


def _conditions(detection: Detection) -> Iterator[tuple[str, str, str]]:
    """(rule, route, severity) of every condition the detectors hold as firing."""
    view = detection.view()
    for route in view.routes.values():
        for rule in route.firing:
            yield rule, route.name, severity(rule)
    yield from view.pair_conditions()  # metadata and losslessness, per model pair
    for seg in view.segments.values():
        for rule in seg.firing:
            yield rule, seg.labels["route"], severity(rule)


# -- the collector ------------------------------------------------------------------------------

_SEGMENT_GAUGES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("specwatch_acceptance_ratio",
     "Accepted / drafted tokens of the segment over the break-even window (recent).", ()),
    ("specwatch_mean_accepted_length",
     "Tokens per verification step, 1 + accepted / verify steps, over the per-position "
     "window.", ()),
    ("specwatch_position_acceptance_ratio",
     "Share of verification steps whose draft survived to this position (1..k), over the "
     "per-position window.", ("position",)),
    ("specwatch_acceptance_baseline_ratio",
     "The acceptance change-point detector's baseline (accepted / drafted).", ()),
    ("specwatch_acceptance_detector_statistic",
     "Largest acceptance CUSUM of the direction over its threshold (fires at the threshold); "
     "absent during warm-up and while a change is firing.", ("direction",)),
    ("specwatch_acceptance_detector_threshold",
     "Threshold of specwatch_acceptance_detector_statistic (the statistic is normalised: 1).",
     ("direction",)),
    ("specwatch_breakeven_cutoff_ratio",
     "Acceptance ratio below which speculation costs more than it saves.", ()),
    ("specwatch_recommendation",
     "1 for the segment's current recommendation (on, off, insufficient_data), 0 for the "
     "others.", ("recommendation",)),
)


class DetectionCollector(Collector):
    """Renders the last published :class:`DetectionView` (``source()``; ``None``: nothing yet).

    A collector, not gauges set from the pipeline: each scrape shows exactly one view, and a
    segment absent from it (retired, or beyond ``max_series``) is absent from the scrape.
    """

    def __init__(
        self, source: Callable[[], DetectionView | None], max_series: int = DEFAULT_MAX_SERIES
    ) -> None:
        if max_series < 0:
            raise ValueError("max_series must be >= 0")
        self.source = source
        self.max_series = max_series

    def _families(self) -> dict[str, GaugeMetricFamily]:
        out = {name: GaugeMetricFamily(name, doc, labels=[*SEGMENT_LABELS, *extra])
               for name, doc, extra in _SEGMENT_GAUGES}
        out["specwatch_alerts_firing"] = GaugeMetricFamily(
            "specwatch_alerts_firing", "Alert episodes firing now.",
            labels=["rule", "route", "severity"],
        )
        return out

    def describe(self) -> list[Metric]:
        return list(self._families().values())

    def collect(self) -> Iterator[Metric]:
        f = self._families()
        view = self.source()
        if view is not None:
            # the view is most recently active first: the cap keeps the newest segments
            for row in view.segments[: self.max_series]:
                self._add_segment(f, row)
            for key, episodes in view.firing:
                f["specwatch_alerts_firing"].add_metric(list(key), episodes)
        yield from f.values()

    @staticmethod
    def _add_segment(f: dict[str, GaugeMetricFamily], row: SegmentRow) -> None:
        labels = list(row.labels)
        if row.acceptance_ratio is not None:
            f["specwatch_acceptance_ratio"].add_metric(labels, row.acceptance_ratio)
        if row.mean_accepted_length is not None:
            f["specwatch_mean_accepted_length"].add_metric(labels, row.mean_accepted_length)
        for position, ratio in enumerate(row.position_ratios, start=1):
            f["specwatch_position_acceptance_ratio"].add_metric([*labels, str(position)], ratio)
        if row.baseline is not None:
            f["specwatch_acceptance_baseline_ratio"].add_metric(labels, row.baseline)
        for direction, value in row.statistic:
            f["specwatch_acceptance_detector_statistic"].add_metric([*labels, direction], value)
            if row.threshold is not None:
                f["specwatch_acceptance_detector_threshold"].add_metric(
                    [*labels, direction], row.threshold)
        f["specwatch_breakeven_cutoff_ratio"].add_metric(labels, row.cutoff)
        for rec in RECOMMENDATIONS:
            f["specwatch_recommendation"].add_metric([*labels, rec],
                                                     1.0 if rec == row.recommendation else 0.0)
