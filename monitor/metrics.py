"""The daemon's own Prometheus metrics, on a registry passed in (tests use a fresh one)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class IngestMetrics:
    """Counters of what happened to input; every input ends in exactly one of them.

    >>> m = IngestMetrics(CollectorRegistry())
    >>> m.invalid_events.inc()
    >>> m.registry.get_sample_value("specwatch_invalid_events_total")
    1.0
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.messages = Counter(
            "specwatch_messages", "Telemetry messages read (Kafka records or replay lines).",
            registry=registry,
        )
        self.events = Counter(
            "specwatch_events", "Valid telemetry events counted into the rollups.",
            registry=registry,
        )
        self.invalid_events = Counter(
            "specwatch_invalid_events",
            "Invalid telemetry (a bad event, line or whole message), sent to the dead letter.",
            registry=registry,
        )
        self.duplicate_events = Counter(
            "specwatch_duplicate_events",
            "Events whose request_id was already counted within the dedup horizon.",
            registry=registry,
        )
        self.late_events = Counter(
            "specwatch_late_events",
            "Events older than the newest event of their partition minus the dedup horizon; "
            "not counted, sent to the dead letter.",
            registry=registry,
        )
        self.late_counted_events = Counter(
            "specwatch_late_counted_events",
            "Events older than the newest event of their partition minus the lateness "
            "allowance but within the dedup horizon: counted in the tables, not fed to the "
            "detectors.",
            registry=registry,
        )
        self.future_events = Counter(
            "specwatch_future_events",
            "Events dated more than ingest.max_future_skew ahead of the clock (the wall "
            "clock; in a replay the newest plausible time of the file); not counted, sent "
            "to the dead letter.",
            registry=registry,
        )
        self.dead_letters = Counter(
            "specwatch_dead_letters", "Records written to the dead-letter destination.",
            registry=registry,
        )
        self.checkpoints = Counter(
            "specwatch_checkpoints", "Checkpoint transactions committed.", registry=registry
        )
        self.fenced = Counter(
            "specwatch_checkpoint_fenced",
            "Checkpoints refused because another consumer advanced a partition.",
            registry=registry,
        )
        self.checkpoint_duration = Histogram(
            "specwatch_checkpoint_duration_seconds",
            "Time to write one checkpoint transaction.",
            registry=registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
        )
        self.event_time_lag = Gauge(
            "specwatch_event_time_lag_seconds",
            "Wall clock minus the newest event time seen (ingest lag as the user feels it).",
            registry=registry,
        )
        self.assigned_partitions = Gauge(
            "specwatch_assigned_partitions", "Source partitions owned by this process.",
            registry=registry,
        )
        self.store_up = Gauge(
            "specwatch_store_up",
            "1 while checkpoints reach the store; 0 from a connection-class store failure "
            "until the store answers again (ingestion is paused meanwhile).",
            registry=registry,
        )
        self.store_up.set(1)  # the store was reached at start (it was checked migrated)
        self.store_errors = Counter(
            "specwatch_store_errors",
            "Connection-class store failures (refused, reset, timed out, server gone) met by "
            "the ingest pipeline's checkpoints, loads and recovery probes.",
            registry=registry,
        )
        self.dead_letter_errors = Counter(
            "specwatch_dead_letter_errors",
            "Checkpoints abandoned because the dead-letter destination did not take "
            "their records (the stretch is read again).",
            registry=registry,
        )
        self.ingest_paused = Gauge(
            "specwatch_ingest_paused",
            "1 while fetching is paused because a checkpoint could not be made durable "
            "(store or dead-letter topic unavailable): backpressure.",
            registry=registry,
        )
        self.broker_errors = Counter(
            "specwatch_broker_errors",
            "Kafka client errors that escaped the consumer (connections reset or refused, "
            "coordinator lost): uncommitted work dropped, read again from the stored offsets "
            "after a backoff.",
            registry=registry,
        )
        self.loop_errors = Counter(
            "specwatch_loop_errors",
            "Unexpected errors in the daemon's poll loop (a bug or an unforeseen failure): "
            "logged with the traceback; the loop goes on from the stored offsets.",
            registry=registry,
        )
        self.broker_up: Gauge | None = None

    def watch_broker(self, up: Callable[[], bool]) -> None:
        """Export ``specwatch_broker_up``, evaluated at each scrape (sources with a broker)."""
        if self.broker_up is None:
            self.broker_up = Gauge(
                "specwatch_broker_up",
                "1 while the Kafka broker answered this process recently; 0 when no "
                "connection to it is open or none has answered for a while.",
                registry=self.registry,
            )
        self.broker_up.set_function(lambda: 1.0 if up() else 0.0)
