"""A generic webhook: one POST per alert item, the body exactly the alerts-v1 record.

The record is the public contract (``shared/spec/alerts-v1.md``), so receivers need no
specwatch-specific schema; what the record alone can't say travels in headers: whether
this is a new page, a reminder or a resolve, the episode, and an idempotency key stable
across retries (``<notification key>/<item index>``).

>>> from datetime import UTC, datetime
>>> from alerts.notification import AlertItem, Notification
>>> from monitor.alert_record import AlertRecord
>>> t = datetime(2026, 11, 2, 14, 20, tzinfo=UTC)
>>> rec = AlertRecord("telemetry_stale", "firing", t, "warning", {"route": "code"}, "quiet")
>>> n = Notification("k1", {"route": "code"}, t, (AlertItem(rec, "firing", "e-1", t),))
>>> [req] = WebhookSink("https://example.test/hook?token=s3cr3t").requests(n)
>>> dict(req.headers)["X-Specwatch-Key"], req.describe
('k1/0', 'webhook trigger telemetry_stale route code')
"""

from __future__ import annotations

from collections.abc import Mapping

import orjson

from alerts.notification import AlertItem, Notification
from alerts.sinks.base import HttpRequest, Outcome
from alerts.sinks.text import one_line, reason, retry_after, truncate, url_secrets

__all__ = ["WebhookSink", "kind"]


def kind(item: AlertItem) -> str:
    """``trigger``, ``reminder`` or ``resolve``: the ``X-Specwatch-Notification`` header."""
    if item.status == "resolved":
        return "resolve"
    return "reminder" if item.repeat else "trigger"


def _header_value(s: str) -> str:
    # HTTP header values must be single-line latin-1; ours are ids, but keep them valid
    return one_line(s).encode("latin-1", "replace").decode("latin-1")


class WebhookSink:
    """POSTs each item's record to one URL (which may carry a token: never shown)."""

    name = "webhook"
    min_interval = 0.0

    def __init__(self, url: str) -> None:
        self._url = url
        self._secrets = url_secrets(url)  # a receiver may quote the URL in an error

    def __repr__(self) -> str:
        return "WebhookSink(url=[redacted])"

    def requests(self, n: Notification) -> list[HttpRequest]:
        out = []
        for i, item in enumerate(n.items):
            what = kind(item)
            headers = {
                "Content-Type": "application/json",
                "X-Specwatch-Notification": what,
                "X-Specwatch-Episode": _header_value(item.episode),
                "X-Specwatch-Key": _header_value(f"{n.key}/{i}"),
            }
            route = truncate(one_line(item.labels["route"]), 80)
            out.append(HttpRequest("POST", self._url, orjson.dumps(item.record.to_json()),
                                   f"webhook {what} {item.rule} route {route}", headers))
        return out

    def classify(self, status: int, headers: Mapping[str, str], body: bytes) -> Outcome:
        why = reason(status, body, self._secrets)
        if 200 <= status < 300:
            return Outcome("ok", why)
        if status in (0, 408, 429) or status >= 500:
            return Outcome("retry", why, retry_after(headers))
        if 300 <= status < 400:
            return Outcome("permanent", why + " (redirect not followed)", broken=True)
        return Outcome("permanent", why, broken=status == 410)
