"""What every sink is: a pure renderer of notifications into HTTP requests, and a judge of
the answers. The delivery worker (``alerts/delivery.py``) owns the network, the pacing, the
retries and the outbox; a sink never sends anything itself, so each one is tested by
rendering and classifying, and against a local receiver end to end.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

from alerts.notification import Notification

__all__ = ["Episode", "HttpRequest", "LocalSink", "Outcome", "Sink"]


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """One request a sink wants sent. ``url`` may hold a secret (a Slack webhook URL): it is
    never logged; ``describe`` is what logs and errors show instead."""

    method: str
    url: str
    body: bytes
    describe: str
    headers: Mapping[str, str] = field(default_factory=lambda: {
        "Content-Type": "application/json"})


@dataclass(frozen=True, slots=True)
class Outcome:
    """A sink's verdict on one answer.

    ``ok``: done. ``retry``: try again later, after ``retry_after`` seconds when the receiver
    said so (HTTP 429 ``Retry-After``), else after the worker's backoff. ``permanent``: the
    request can never succeed as it is (HTTP 400, a revoked webhook); ``broken`` additionally
    means the sink itself is unusable until reconfigured (Slack ``no_service``, 410).
    ``reason`` is short and free of secrets: it goes to logs and metrics.
    """

    kind: Literal["ok", "retry", "permanent"]
    reason: str = ""
    retry_after: float | None = None
    broken: bool = False


@dataclass(frozen=True, slots=True)
class Episode:
    """An alert as the episodes table knows it (for sinks that resend state periodically)."""

    episode: str
    fingerprint: str
    rule: str
    severity: str
    labels: dict[str, str]
    summary: str
    details: dict[str, Any]
    started_at: datetime
    resolved_at: datetime | None


class Sink(Protocol):
    """An HTTP sink.

    ``name``: the sink's name in the config and in metrics (``slack``, ``pagerduty``,
    ``alertmanager``, ``webhook``). ``min_interval``: seconds to leave between two requests
    to the same sink (Slack asks for one message per second per webhook).
    """

    name: str
    min_interval: float

    def requests(self, n: Notification) -> list[HttpRequest]:
        """The requests that deliver ``n``, in the order they must be sent."""
        ...

    def classify(self, status: int, headers: Mapping[str, str], body: bytes) -> Outcome:
        """The verdict on an HTTP answer (``status`` 0: no answer, a network error)."""
        ...


class LocalSink(Protocol):
    """A sink that needs no network (the log sink): it cannot fail transiently."""

    name: str

    def emit(self, n: Notification) -> None: ...
