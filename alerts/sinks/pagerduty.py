"""PagerDuty Events API v2: one event per alert item.

Pages are keyed by episode (``dedup_key = "specwatch/<episode>"``): a reminder re-triggers
the same open alert, the resolve closes it, and a later episode of the same alert opens a
new incident rather than merging into a closed one. Rules in ``change_event_rules`` (a
model revision that moved) are announced once as change events, which page nobody.

The routing key is the credential: it is in the request body only, never in ``describe``
or a reason.

>>> from datetime import UTC, datetime
>>> from alerts.notification import AlertItem, Notification
>>> from monitor.alert_record import AlertRecord
>>> from monitor.config import PagerDutyConfig
>>> t = datetime(2026, 11, 2, 14, 20, tzinfo=UTC)
>>> rec = AlertRecord("telemetry_stale", "firing", t, "warning", {"route": "code"}, "quiet")
>>> n = Notification("k1", {"route": "code"}, t, (AlertItem(rec, "firing", "e-1", t),))
>>> [req] = PagerDutySink("k" * 32, PagerDutyConfig()).requests(n)
>>> req.url
'https://events.pagerduty.com/v2/enqueue'
>>> req.describe
'pagerduty trigger telemetry_stale route code (dedup specwatch/e-1)'
>>> orjson.loads(req.body)["payload"]["severity"]
'warning'
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import orjson

from alerts.notification import AlertItem, Notification
from alerts.sinks.base import HttpRequest, Outcome
from alerts.sinks.text import (
    one_line,
    reason,
    retry_after,
    rfc3339,
    scrub,
    truncate,
    url_secrets,
)
from monitor.config import PagerDutyConfig

__all__ = ["PagerDutySink", "dedup_key"]

SUMMARY_MAX = 1024
DEDUP_MAX = 255
BODY_MAX = 512_000
DEFAULT_RETRY_AFTER = 60.0  # PD asks for "a backoff of a few minutes" on 429
TOO_LARGE = {"error": "custom_details too large, see specwatch"}


def dedup_key(episode: str) -> str:
    """The incident key of an episode; over-long ids are hashed rather than cut, so two
    episodes can never share a key by sharing a prefix.

    >>> dedup_key("9c1e0f2a3b4c5d6e-1793629200")
    'specwatch/9c1e0f2a3b4c5d6e-1793629200'
    >>> len(dedup_key("x" * 300))
    81
    """
    key = "specwatch/" + episode
    if len(key) <= DEDUP_MAX:
        return key
    return "specwatch/sha256:" + hashlib.sha256(episode.encode()).hexdigest()


class PagerDutySink:
    """Trigger/resolve events for alerts, change events for ``change_event_rules``."""

    name = "pagerduty"

    def __init__(self, routing_key: str, config: PagerDutyConfig,
                 base_url: str = "https://events.pagerduty.com") -> None:
        self._key = routing_key
        self._config = config
        self._base = base_url.rstrip("/")
        # The key, and a base URL's credentials (an egress proxy's basic auth), longest first.
        self._secrets = sorted({routing_key, *url_secrets(base_url)},
                               key=lambda s: (-len(s), s))
        self.min_interval = config.min_interval
        self._severity: dict[str, str] = {str(k): str(v) for k, v in config.severity_map.items()}

    def __repr__(self) -> str:
        parts = urlsplit(self._base)
        shown = f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")
        return f"PagerDutySink(routing_key=[redacted], base_url={shown!r})"

    def requests(self, n: Notification) -> list[HttpRequest]:
        out: list[HttpRequest] = []
        for item in n.items:
            req = self._request(item)
            if req is not None:
                out.append(req)
        return out

    def _request(self, item: AlertItem) -> HttpRequest | None:
        rec = item.record
        route = truncate(scrub(one_line(rec.labels["route"]), self._secrets), 80)
        if rec.rule in self._config.change_event_rules:
            # A change is a point in time: announced once, never reminded nor resolved.
            if item.status != "firing" or item.repeat:
                return None
            payload: dict[str, Any] = {
                "summary": truncate(rec.summary, SUMMARY_MAX),
                "source": self._config.source,
                "timestamp": rfc3339(rec.at),
                "custom_details": {"labels": dict(rec.labels), "details": dict(rec.details)},
            }
            body = self._fit({"routing_key": self._key, "payload": payload})
            return HttpRequest("POST", f"{self._base}/v2/change/enqueue", body,
                               f"pagerduty change {rec.rule} route {route}")
        key = dedup_key(item.episode)
        if item.status == "resolved":
            event: dict[str, Any] = {
                "routing_key": self._key, "event_action": "resolve", "dedup_key": key}
            return HttpRequest("POST", f"{self._base}/v2/enqueue", orjson.dumps(event),
                               f"pagerduty resolve {rec.rule} route {route} (dedup {key})")
        payload = {
            "summary": truncate(rec.summary, SUMMARY_MAX),
            "source": self._config.source,
            "severity": self._severity.get(rec.severity, rec.severity),
            "timestamp": rfc3339(rec.at),
            "group": rec.labels["route"],
            "class": rec.rule,
            "custom_details": {
                "labels": dict(rec.labels), "details": dict(rec.details),
                "episode": item.episode, "started_at": rfc3339(item.started_at),
            },
        }
        if rec.labels.get("draft_model"):
            payload["component"] = rec.labels["draft_model"]
        event = {"routing_key": self._key, "event_action": "trigger", "dedup_key": key,
                 "payload": payload, "client": "specwatch"}
        what = "reminder" if item.repeat else "trigger"
        return HttpRequest("POST", f"{self._base}/v2/enqueue", self._fit(event),
                           f"pagerduty {what} {rec.rule} route {route} (dedup {key})")

    @staticmethod
    def _fit(event: dict[str, Any]) -> bytes:
        """The encoded event, with ``custom_details`` swapped for a note when the whole
        would pass PagerDuty's 512 KB limit (what Alertmanager's notifier does)."""
        body = orjson.dumps(event, default=str)
        if len(body) > BODY_MAX:
            event["payload"]["custom_details"] = dict(TOO_LARGE)
            body = orjson.dumps(event, default=str)
        return body

    def classify(self, status: int, headers: Mapping[str, str], body: bytes) -> Outcome:
        why = reason(status, body, self._secrets)
        if 200 <= status < 300:
            return Outcome("ok", why)
        if status == 429:
            after = retry_after(headers)
            return Outcome("retry", why, DEFAULT_RETRY_AFTER if after is None else after)
        if status == 0 or status >= 500:
            return Outcome("retry", why, retry_after(headers))
        if status == 400:
            # A bad key is a bad sink; any other invalid event is this event's problem.
            return Outcome("permanent", why, broken=b"routing_key" in body.lower()
                           or b"routing key" in body.lower())
        if 300 <= status < 400:
            return Outcome("permanent", why + " (redirect not followed)", broken=True)
        return Outcome("permanent", why, broken=status in (401, 403, 404))
