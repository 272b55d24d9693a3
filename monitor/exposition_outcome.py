"""``/metrics`` of task outcome and cost: successes, outcome checks, GPU-seconds, and per pair
the success and outcome ratios, successes per GPU-second, cost per successful task and the
inter-token gaps over the last minutes of event time (names: ``docs/outcome-and-cost.md``).

Fed like :class:`monitor.exposition.RollupCounters`: one *committed* checkpoint at a time (the
pipeline's ``on_commit`` hook), so the counters only ever hold what the store holds. The
scrape thread renders under a lock; the pipeline thread folds each checkpoint in under it.

Bounded: the ``max_series`` most recently active model pairs (route, target model, draft
model) are exported; a pair that falls out keeps counting and comes back when active again.
Counters stay monotonic through that (their totals are kept), only their presence changes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from monitor.aggregate.bucket import SKETCHES, BucketStats
from monitor.aggregate.outcome import OutcomeRates, cost_per_success
from monitor.aggregate.series import SeriesKey
from monitor.aggregate.sketch import DEFAULT_RELATIVE_ACCURACY, MinuteSketches
from monitor.store.checkpoint import MINUTE, Checkpoint

__all__ = ["DEFAULT_MAX_SERIES", "OUTCOMES", "WINDOW_MINUTES", "Minute", "OutcomeCollector",
           "OutcomeCounts", "PairOutcome"]

DEFAULT_MAX_SERIES = 1000
WINDOW_MINUTES = 5
PAIR_LABELS = ("route", "target_model", "draft_model")
# outcome label -> (BucketStats true counter, reported counter, rate property)
OUTCOMES: dict[str, tuple[str, str, str]] = {
    "ok": ("outcome_ok_true", "outcome_ok_reported", "ok_rate"),
    "schema_valid": ("schema_valid_true", "schema_valid_reported", "schema_valid_rate"),
    "tool_calls_valid": ("tool_calls_valid_true", "tool_calls_valid_reported",
                         "tool_calls_valid_rate"),
}

Pair = tuple[str, str, str]


# What the window reads of a minute's latencies: the requests' own inter-token gaps.
GAPS = ("itl_p50_ms", "itl_p99_ms")
_GAP_COLUMNS = tuple(SKETCHES.index(name) for name in GAPS)
# The counts the counters and gauges read (OutcomeRates' names), summed exactly as
# BucketStats sums them.
COUNTS = ("requests", "successes", "outcome_ok_true", "outcome_ok_reported",
          "schema_valid_true", "schema_valid_reported", "tool_calls_valid_true",
          "tool_calls_valid_reported", "gpu_reported_requests", "gpu_seconds")


class OutcomeCounts(OutcomeRates):
    """The counts of a pair (since start, or over a minute) that ``/metrics`` reads, and
    nothing else: a :class:`BucketStats` kept for them held every other counter, the
    per-position counts and five latency sketches, for thousands of pairs.

    >>> from monitor.telemetry.event import Event
    >>> b = BucketStats()
    >>> b.update(Event("r1", 0.0, "code", "ok", "t", "r", "tok", output_tokens=9,
    ...          e2e_ms=500.0, gpu_seconds=2.0))
    >>> c = OutcomeCounts()
    >>> c.add(b)
    >>> c.add(b)
    >>> c.requests, c.success_rate, c.successes_per_gpu_second, c.cost_per_success(3.6)
    (2, 1.0, 0.5, 0.002)
    """

    __slots__ = COUNTS

    def __init__(self) -> None:
        for name in COUNTS:
            setattr(self, name, 0)
        self.gpu_seconds = 0.0

    def add(self, other: BucketStats | OutcomeCounts) -> None:
        for name in COUNTS:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def cost_per_success(self, price_per_gpu_hour: float | None) -> float | None:
        return cost_per_success(self.gpu_seconds_per_success, price_per_gpu_hour)


@dataclass
class Minute:
    """One minute of a pair's window: its counts and the two gap sketches, the only
    latencies the gauges read; once the minute is closed, the sketches are packed. Own
    copies: a checkpoint's statistics are not ours to keep or change."""

    counts: OutcomeCounts = field(default_factory=OutcomeCounts)
    gaps: MinuteSketches = field(
        default_factory=lambda: MinuteSketches(DEFAULT_RELATIVE_ACCURACY for _ in GAPS))

    def add(self, stats: BucketStats) -> None:
        self.counts.add(stats)
        stats.merge_sketches(_GAP_COLUMNS, self.gaps.opened())

    def merge(self, other: Minute) -> None:
        self.counts.add(other.counts)
        self.gaps.merge(other.gaps)

    @property
    def packed(self) -> bool:
        return self.gaps.packed

    def pack(self) -> None:
        self.gaps.pack()


@dataclass
class PairOutcome:
    """One pair: its counts since start, and the minute buckets of the window.

    Only what the gauges read is kept: counts since start, and per minute the counts and
    the inter-token gap sketches (packed once the minute is closed). A pair's latency
    distribution since start and the other sketches of each minute would never be read;
    at thousands of pairs they were most of the exposition's memory.

    >>> from monitor.telemetry.event import Event
    >>> b = BucketStats()
    >>> b.update(Event("r1", 0.0, "code", "ok", "t", "r", "tok", output_tokens=9, e2e_ms=500.0,
    ...          gpu_seconds=2.0, itl_p50_ms=12.0))
    >>> p = PairOutcome()
    >>> p.update(60, b, oldest=0)
    >>> p.total.successes, p.window_stats().counts.successes_per_gpu_second
    (1, 0.5)
    >>> p.window_stats().gaps[0].quantile(0.5)
    12.0
    """

    total: OutcomeCounts = field(default_factory=OutcomeCounts)
    window: dict[int, Minute] = field(default_factory=dict)
    newest: int = 0  # newest minute bucket seen: what "most recently active" orders by
    # The window merged, until the window changes: a scrape merged every pair's minutes (with
    # their sketches) under the lock the checkpoint waits for, though most had not changed.
    _merged: Minute | None = field(default=None, repr=False, compare=False)

    def update(self, minute: int, stats: BucketStats, *, oldest: int) -> None:
        self.total.add(stats)
        self.newest = max(self.newest, minute)
        if minute < oldest:
            return  # a late minute already out of the window
        self._merged = None
        slot = self.window.get(minute)
        if slot is None:
            slot = self.window[minute] = Minute()
        slot.add(stats)

    def expire(self, oldest: int, newest: int) -> None:
        """Forget the minutes before ``oldest``; pack those before ``newest`` (closed)."""
        for minute in [m for m in self.window if m < oldest]:
            del self.window[minute]
            self._merged = None
        for minute, slot in self.window.items():
            if minute < newest:
                slot.pack()

    def window_stats(self) -> Minute:
        """The window's minutes merged (empty when the pair was silent all window); kept
        until the window changes, so not to be changed by the caller."""
        if self._merged is None:
            merged = Minute()
            for minute in self.window.values():
                merged.merge(minute)
            self._merged = merged
        return self._merged


class OutcomeCollector(Collector):
    """Task outcome and cost per model pair, fed by committed checkpoints (``observe``).

    The window ends at the newest minute of any pair (event time), so a pair silent for
    longer than ``window_minutes`` shows no ratios rather than stale ones; its counters stay.
    ``price_per_gpu_hour`` (``cost.price_per_gpu_hour``) gives the cost gauge; without it the
    gauge is absent.

    >>> from prometheus_client import CollectorRegistry
    >>> from monitor.telemetry.event import Event
    >>> b = BucketStats()
    >>> for i, ok in enumerate((True, True, False)):
    ...     b.update(Event(f"r{i}", 0.0, "code", "ok", "t", "r", "tok", output_tokens=9,
    ...              e2e_ms=500.0, gpu_seconds=1.0, outcome_ok=ok))
    >>> key = SeriesKey("code", "t", "r", "tok", "", "", "", "", 0)
    >>> registry = CollectorRegistry()
    >>> collector = OutcomeCollector(price_per_gpu_hour=3.6)
    >>> registry.register(collector)
    >>> collector.observe(Checkpoint("replay", rollups={(key, 0): b}))
    >>> pair = {"route": "code", "target_model": "t", "draft_model": ""}
    >>> registry.get_sample_value("specwatch_task_successes_total", pair)
    2.0
    >>> registry.get_sample_value("specwatch_cost_per_successful_task", pair)  # 1.5 GPU-s
    0.0015
    """

    def __init__(self, *, price_per_gpu_hour: float | None = None,
                 max_series: int = DEFAULT_MAX_SERIES,
                 window_minutes: int = WINDOW_MINUTES) -> None:
        if window_minutes < 1:
            raise ValueError("window_minutes must be >= 1")
        self.price_per_gpu_hour = price_per_gpu_hour
        self.max_series = max_series
        self.window_minutes = window_minutes
        self._lock = threading.Lock()
        self._pairs: dict[Pair, PairOutcome] = {}
        self._newest: int | None = None

    def observe(self, cp: Checkpoint) -> None:
        """Add one committed checkpoint's rollup deltas (the pipeline's ``on_commit``)."""
        self.update(cp.rollups)

    def update(self, rollups: Mapping[tuple[SeriesKey, int], BucketStats]) -> None:
        if not rollups:
            return
        deltas = [((key.route, key.target_model, key.draft_model), int(minute), stats)
                  for (key, minute), stats in rollups.items()]
        with self._lock:
            newest = max(minute for _, minute, _ in deltas)
            if self._newest is None or newest > self._newest:
                self._newest = newest
            oldest = self._newest - (self.window_minutes - 1) * MINUTE
            for pair, minute, stats in deltas:
                held = self._pairs.get(pair)
                if held is None:
                    held = self._pairs[pair] = PairOutcome()
                held.update(minute, stats, oldest=oldest)
            for held in self._pairs.values():
                held.expire(oldest, self._newest)

    def exported(self) -> list[tuple[Pair, PairOutcome]]:
        """The ``max_series`` most recently active pairs, in label order."""
        with self._lock:
            return self._exported()

    def _exported(self) -> list[tuple[Pair, PairOutcome]]:
        ranked = sorted(self._pairs.items(), key=lambda kv: (-kv[1].newest, kv[0]))
        return sorted(ranked[: self.max_series], key=lambda kv: kv[0])

    def _families(self) -> dict[str, GaugeMetricFamily | CounterMetricFamily]:
        m = self.window_minutes
        pair, outcome = list(PAIR_LABELS), [*PAIR_LABELS, "outcome"]
        return {
            "successes": CounterMetricFamily(
                "specwatch_task_successes",
                "Successful tasks per model pair: outcome.ok where the request reports it, "
                "else status ok (exact: follows committed checkpoints).", labels=pair),
            "outcomes": CounterMetricFamily(
                "specwatch_task_outcomes",
                "Requests reporting a task outcome check (ok, schema_valid, "
                "tool_calls_valid), per result (true, false).",
                labels=[*outcome, "result"]),
            "gpu": CounterMetricFamily(
                "specwatch_gpu_seconds",
                "GPU-seconds spent per model pair: reported by the request, else estimated "
                "from e2e_ms, batch_size and cost.gpus_per_replica.", labels=pair),
            "gpu_requests": CounterMetricFamily(
                "specwatch_gpu_seconds_requests",
                "Requests behind specwatch_gpu_seconds_total, per source (reported, "
                "estimated).", labels=[*PAIR_LABELS, "source"]),
            "success_ratio": GaugeMetricFamily(
                "specwatch_task_success_ratio",
                f"Successful tasks / requests over the last {m} minutes of event time.",
                labels=pair),
            "outcome_ratio": GaugeMetricFamily(
                "specwatch_task_outcome_ratio",
                f"Share of the requests reporting the outcome check that passed it, over the "
                f"last {m} minutes of event time; absent when none reported it.",
                labels=outcome),
            "per_gpu": GaugeMetricFamily(
                "specwatch_successes_per_gpu_second",
                f"Successful tasks per GPU-second over the last {m} minutes of event time.",
                labels=pair),
            "cost": GaugeMetricFamily(
                "specwatch_cost_per_successful_task",
                f"GPU cost per successful task (in the currency of cost.price_per_gpu_hour) "
                f"over the last {m} minutes of event time; absent without a price.",
                labels=pair),
            "itl_p50": GaugeMetricFamily(
                "specwatch_itl_p50_seconds",
                f"Median over the requests of the last {m} minutes of event time of each "
                "request's median inter-token gap.", labels=pair),
            "itl_p99": GaugeMetricFamily(
                "specwatch_itl_p99_seconds",
                f"p99 over the requests of the last {m} minutes of event time of each "
                "request's p99 inter-token gap.", labels=pair),
        }

    def describe(self) -> list[Metric]:
        return list(self._families().values())

    def collect(self) -> Iterator[Metric]:
        f = self._families()
        with self._lock:  # one consistent picture: the pipeline thread waits for the scrape
            self._render(f)
        yield from f.values()

    def _render(self, f: dict[str, GaugeMetricFamily | CounterMetricFamily]) -> None:
        for pair, held in self._exported():
            labels = list(pair)
            total = held.total
            f["successes"].add_metric(labels, float(total.successes))
            for name, (true, reported, _) in OUTCOMES.items():
                n_true, n_reported = getattr(total, true), getattr(total, reported)
                if n_reported:
                    f["outcomes"].add_metric([*labels, name, "true"], float(n_true))
                    f["outcomes"].add_metric([*labels, name, "false"],
                                              float(n_reported - n_true))
            f["gpu"].add_metric(labels, total.gpu_seconds)
            f["gpu_requests"].add_metric([*labels, "reported"],
                                         float(total.gpu_reported_requests))
            f["gpu_requests"].add_metric([*labels, "estimated"],
                                         float(total.requests - total.gpu_reported_requests))
            merged = held.window_stats()
            window = merged.counts
            gauges = {"success_ratio": window.success_rate,
                      "per_gpu": window.successes_per_gpu_second,
                      "cost": window.cost_per_success(self.price_per_gpu_hour)}
            for q, name, gaps in zip((0.5, 0.99), ("itl_p50", "itl_p99"), merged.gaps,
                                     strict=True):
                v = gaps.quantile(q)
                gauges[name] = None if v is None else v / 1000.0
            for name, value in gauges.items():
                if value is not None:
                    f[name].add_metric(labels, value)
            for name, (_, _, rate) in OUTCOMES.items():
                value = getattr(window, rate)
                if value is not None:
                    f["outcome_ratio"].add_metric([*labels, name], value)
