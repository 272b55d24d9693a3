"""The proxy's own Prometheus metrics, on a registry passed in (tests use a fresh one)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

__all__ = ["SKIP_REASONS", "ProxyMetrics"]

# Why a request on a completion path produced no event.
SKIP_REASONS = ("no_route", "no_metadata", "no_counters", "unreadable", "client_error")


class ProxyMetrics:
    """Requests passed on, upstream failures, and what became of telemetry.

    >>> m = ProxyMetrics(CollectorRegistry())
    >>> m.skipped.labels(reason="no_route").inc()
    >>> m.registry.get_sample_value("specwatch_proxy_events_skipped_total", {"reason": "no_route"})
    1.0
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.requests = Counter(
            "specwatch_proxy_requests",
            "Requests passed to the upstream, by kind: completion (read for telemetry) or "
            "other (passed through only).",
            ["kind"], registry=registry,
        )
        self.upstream_failures = Counter(
            "specwatch_proxy_upstream_failures",
            "Requests the upstream did not answer: unreachable (502), timeout (504), or "
            "broken (the response stopped half-way).",
            ["kind"], registry=registry,
        )
        self.events = Counter(
            "specwatch_proxy_events",
            "Telemetry events handed to the publisher, by status (the publisher's own "
            "counters say which reached Kafka).",
            ["status"], registry=registry,
        )
        self.skipped = Counter(
            "specwatch_proxy_events_skipped",
            "Completion requests that produced no event, by reason: no_route, no_metadata, "
            "no_counters, unreadable, client_error.",
            ["reason"], registry=registry,
        )
        self.shadow = Counter(
            "specwatch_proxy_shadow_requests",
            "Shadow requests to the non-speculative upstream (--shadow-upstream), by outcome: "
            "published (its event went to the publisher), dropped (too many in flight), "
            "failed (unreachable, timeout, error status, unreadable or speculating answer).",
            ["outcome"], registry=registry,
        )
        for outcome in ("published", "dropped", "failed"):
            self.shadow.labels(outcome=outcome)
        for reason in SKIP_REASONS:
            self.skipped.labels(reason=reason)
        for kind in ("completion", "other"):
            self.requests.labels(kind=kind)
