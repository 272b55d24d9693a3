"""The API's own Prometheus metrics: requests by endpoint and status, and their duration."""

from __future__ import annotations

import time
import weakref

from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class ApiMetrics:
    """Registered once per registry (a second app on the same registry shares them)."""

    _by_registry: weakref.WeakKeyDictionary[CollectorRegistry, ApiMetrics] = (
        weakref.WeakKeyDictionary()
    )

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "specwatch_api_requests",
            "HTTP API requests answered, by method, endpoint (path template) and status code.",
            ["method", "endpoint", "code"], registry=registry,
        )
        self.duration = Histogram(
            "specwatch_api_request_duration_seconds",
            "Time to answer an HTTP API request, by endpoint (path template).",
            ["endpoint"], registry=registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
        )

    @classmethod
    def of(cls, registry: CollectorRegistry) -> ApiMetrics:
        metrics = cls._by_registry.get(registry)
        if metrics is None:
            metrics = cls._by_registry[registry] = cls(registry)
        return metrics


class MetricsMiddleware:
    def __init__(self, app: ASGIApp, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        code = 500  # unless a response starts

        async def _send(message: Message) -> None:
            nonlocal code
            if message["type"] == "http.response.start":
                code = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, _send)
        finally:
            # The template (/api/v1/silences/{silence_id}), never the raw path: bounded labels.
            route = scope.get("route")
            endpoint = getattr(route, "path", None) or "unmatched"
            method = scope["method"] if scope["method"] in _METHODS else "other"
            self.metrics.requests.labels(method, endpoint, str(code)).inc()
            self.metrics.duration.labels(endpoint).observe(time.perf_counter() - started)
