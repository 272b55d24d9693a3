"""``/metrics`` of the policy in force: the recommended draft length per model pair and
batch-size bucket (``specwatch_policy_num_speculative_tokens``, 0 = speculation off), and when
that policy was computed (``specwatch_policy_computed_timestamp_seconds``).

The policy in force is the newest stored one (the daily job writes it, ``docs/policy.md``):
read once at start, then replaced each time the job stores a new one. Bounded by the
schedule itself: one series per (pair, covered batch bucket).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["PolicyCollector"]

LABELS = ("target_model", "target_revision", "draft_model", "method", "batch")


class PolicyCollector(Collector):
    """Exports the schedules of a stored policy row (``Store.policies()`` shape).

    >>> from prometheus_client import CollectorRegistry, generate_latest
    >>> c = PolicyCollector()
    >>> c.set({"computed_at": datetime(2026, 11, 2), "document": {"schedules": [
    ...     {"pair": {"target_model": "t", "target_revision": "r", "draft_model": "d",
    ...               "draft_revision": "1", "method": "draft_model"},
    ...      "buckets": [{"batch": "1-1", "num_speculative_tokens": 4},
    ...                  {"batch": "256+", "num_speculative_tokens": 0}]}]}})
    >>> r = CollectorRegistry(); r.register(c)
    >>> text = generate_latest(r).decode()
    >>> 'specwatch_policy_num_speculative_tokens{batch="256+",draft_model="d",' in text
    True
    >>> [ln.rsplit(" ", 1)[1] for ln in text.splitlines()
    ...  if ln.startswith("specwatch_policy_num")]
    ['4.0', '0.0']
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._row: dict[str, Any] | None = None

    @classmethod
    def for_store(cls, store: Any) -> PolicyCollector:
        """A collector holding the newest stored policy (none yet: nothing exported)."""
        c = cls()
        try:
            rows = store.policies(limit=1)
        except Exception:  # noqa: BLE001 - /metrics must come up even if this read fails
            rows = []
        if rows:
            c.set(rows[0])
        return c

    def set(self, row: dict[str, Any]) -> None:
        with self._lock:
            self._row = row

    def describe(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("specwatch_policy_num_speculative_tokens",
                                "Recommended draft length of the policy in force per model "
                                "pair and batch-size bucket (0: speculation off)",
                                labels=LABELS)
        yield GaugeMetricFamily("specwatch_policy_computed_timestamp_seconds",
                                "When the policy in force was computed")

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            row = self._row
        k = GaugeMetricFamily("specwatch_policy_num_speculative_tokens",
                              "Recommended draft length of the policy in force per model "
                              "pair and batch-size bucket (0: speculation off)",
                              labels=LABELS)
        at = GaugeMetricFamily("specwatch_policy_computed_timestamp_seconds",
                               "When the policy in force was computed")
        if row is not None:
            for schedule in (row.get("document") or {}).get("schedules") or []:
                pair = schedule.get("pair") or {}
                for bucket in schedule.get("buckets") or []:
                    k.add_metric([str(pair.get("target_model", "")),
                                  str(pair.get("target_revision", "")),
                                  str(pair.get("draft_model", "")),
                                  str(pair.get("method", "")), str(bucket.get("batch", ""))],
                                 float(bucket.get("num_speculative_tokens") or 0))
            computed = row.get("computed_at")
            if isinstance(computed, datetime):
                at.add_metric([], computed.timestamp())
        yield k
        yield at
