"""Metrics of the alerting side, on a registry passed in (tests use a fresh one)."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

OUTCOMES = ("delivered", "retried", "failed", "given_up")
SUPPRESSED = ("short", "silenced", "flap", "collapsed")


class AlertMetrics:
    """Delivery outcomes per sink, sink health and what the lifecycle held back.

    >>> m = AlertMetrics(CollectorRegistry(), sinks=["slack"])
    >>> m.notifications.labels(sink="slack", outcome="delivered").inc()
    >>> m.registry.get_sample_value(
    ...     "specwatch_notifications_total", {"sink": "slack", "outcome": "delivered"})
    1.0
    >>> m.registry.get_sample_value("specwatch_sink_broken", {"sink": "slack"})
    0.0
    """

    def __init__(self, registry: CollectorRegistry, sinks: Iterable[str] = ()) -> None:
        self.registry = registry
        self.notifications = Counter(
            "specwatch_notifications",
            "Outbox rows by sink and outcome: delivered, retried (a failed attempt that will "
            "be tried again), failed (refused for good), given_up (retried past the limit).",
            ["sink", "outcome"], registry=registry,
        )
        self.request_duration = Histogram(
            "specwatch_notification_request_duration_seconds",
            "Duration of one HTTP request to a sink, answered or not.",
            ["sink"], registry=registry,
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
        )
        self.broken = Gauge(
            "specwatch_sink_broken",
            "1 while a sink answers that it can never accept anything (revoked webhook, "
            "archived channel, bad key); its queue waits for a fix.",
            ["sink"], registry=registry,
        )
        self.pending = Gauge(
            "specwatch_outbox_pending",
            "Notifications written but not yet delivered, by sink.", ["sink"], registry=registry,
        )
        self.oldest_pending = Gauge(
            "specwatch_outbox_oldest_pending_age_seconds",
            "Age of the oldest undelivered notification, by sink (0 when none).",
            ["sink"], registry=registry,
        )
        self.suppressed = Counter(
            "specwatch_alerts_suppressed",
            "Alert transitions the lifecycle did not send: short (cleared within the minimum "
            "firing time), silenced, flap (re-fired within the resolve hold: same episode), "
            "collapsed (fired and resolved before its group was notified).",
            ["reason"], registry=registry,
        )
        self.notifications_decided = Counter(
            "specwatch_notifications_decided",
            "Notifications the lifecycle decided, before routing to sinks.", registry=registry,
        )
        for sink in sinks:
            self.add_sink(sink)
        for reason in SUPPRESSED:
            self.suppressed.labels(reason=reason)

    def add_sink(self, sink: str) -> None:
        """Pre-create a sink's series so dashboards see zeros, not gaps."""
        for outcome in OUTCOMES:
            self.notifications.labels(sink=sink, outcome=outcome)
        self.request_duration.labels(sink=sink)
        self.broken.labels(sink=sink).set(0)
        self.pending.labels(sink=sink).set(0)
        self.oldest_pending.labels(sink=sink).set(0)
