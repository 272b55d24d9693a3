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

from monitor.aggregate.bucket import BucketStats
from monitor.aggregate.series import SeriesKey
from monitor.store.checkpoint import MINUTE, Checkpoint

__all__ = ["DEFAULT_MAX_SERIES", "OUTCOMES", "WINDOW_MINUTES", "OutcomeCollector", "PairOutcome"]

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


def _copy(stats: BucketStats) -> BucketStats:
    # own copies: the checkpoint's statistics are not ours to keep or change
    mine = BucketStats()
    mine.merge(stats)
    return mine


@dataclass
class PairOutcome:
    """One pair: everything since start, and the minute buckets of the window.

    >>> from monitor.telemetry.event import Event
    >>> b = BucketStats()
    >>> b.update(Event("r1", 0.0, "code", "ok", "t", "r", "tok", output_tokens=9, e2e_ms=500.0,
    ...          gpu_seconds=2.0))
    >>> p = PairOutcome()
    >>> p.update(60, b, oldest=0)
    >>> p.total.successes, p.window_stats().successes_per_gpu_second
    (1, 0.5)
    """

    total: BucketStats = field(default_factory=BucketStats)
    window: dict[int, BucketStats] = field(default_factory=dict)
    newest: int = 0  # newest minute bucket seen: what "most recently active" orders by
    # The window merged, until the window changes: a scrape merged every pair's minutes (with
    # their sketches) under the lock the checkpoint waits for, though most had not changed.
    _merged: BucketStats | None = field(default=None, repr=False, compare=False)

    def update(self, minute: int, stats: BucketStats, *, oldest: int) -> None:
        self.total.merge(stats)
        self.newest = max(self.newest, minute)
        if minute < oldest:
            return  # a late minute already out of the window
        self._merged = None
        slot = self.window.get(minute)
        if slot is None:
            self.window[minute] = _copy(stats)
        else:
            slot.merge(stats)

    def expire(self, oldest: int) -> None:
        for minute in [m for m in self.window if m < oldest]:
            del self.window[minute]
            self._merged = None

    def window_stats(self) -> BucketStats:
        """The window's buckets merged (empty when the pair was silent all window); kept
        until the window changes, so not to be changed by the caller."""
        if self._merged is None:
            merged = BucketStats()
            for stats in self.window.values():
                merged.merge(stats)
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
        # Reading a sketch folds the bucket's buffered values in: pipeline thread, no lock.
        deltas = [((key.route, key.target_model, key.draft_model), int(minute), stats)
                  for (key, minute), stats in rollups.items()]
        for _, _, stats in deltas:
            stats.itl_p50_ms  # noqa: B018 - flushes every buffered sketch before the lock
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
                held.expire(oldest)

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
            window = held.window_stats()
            gauges = {"success_ratio": window.success_rate,
                      "per_gpu": window.successes_per_gpu_second,
                      "cost": window.cost_per_success(self.price_per_gpu_hour)}
            for q, name in ((0.5, "itl_p50"), (0.99, "itl_p99")):
                v = getattr(window, name + "_ms").quantile(q)
                gauges[name] = None if v is None else v / 1000.0
            for name, value in gauges.items():
                if value is not None:
                    f[name].add_metric(labels, value)
            for name, (_, _, rate) in OUTCOMES.items():
                value = getattr(window, rate)
                if value is not None:
                    f["outcome_ratio"].add_metric([*labels, name], value)
