"""Prometheus Alertmanager API v2: alerts posted to every replica.

Alertmanager identifies an alert by its labels, so they are few and stable (rule, route,
severity and the model pair); what changes goes in annotations. It keeps no state a client
can rely on: a firing alert expires at ``endsAt`` unless re-posted, so every post of a
firing alert carries ``endsAt = now + firing_ttl`` and :meth:`AlertmanagerSink.resync`
re-posts the open episodes (and those resolved in the last ``resolved_resend_for``) as the
Alertmanager docs ask of clients.

>>> from datetime import UTC, datetime
>>> from alerts.notification import AlertItem, Notification
>>> from monitor.alert_record import AlertRecord
>>> from monitor.config import AlertmanagerConfig
>>> t = datetime(2026, 11, 2, 14, 20, tzinfo=UTC)
>>> rec = AlertRecord("telemetry_stale", "firing", t, "warning", {"route": "code"}, "quiet")
>>> n = Notification("k1", {"route": "code"}, t, (AlertItem(rec, "firing", "e-1", t),))
>>> sink = AlertmanagerSink(["http://am:9093/"], AlertmanagerConfig(), clock=lambda: 0.0)
>>> [req] = sink.requests(n)
>>> req.url
'http://am:9093/api/v2/alerts'
>>> [alert] = orjson.loads(req.body)
>>> alert["labels"]
{'alertname': 'telemetry_stale', 'route': 'code', 'severity': 'warning'}
>>> alert["startsAt"], alert["endsAt"]
('2026-11-02T14:20:00Z', '2026-11-02T14:24:00Z')
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import orjson

from alerts.notification import Notification
from alerts.sinks.base import Episode, HttpRequest, Outcome
from alerts.sinks.text import (
    compact_json,
    reason,
    retry_after,
    rfc3339,
    truncate,
    url_secrets,
)
from monitor.config import AlertmanagerConfig

__all__ = ["PAIR_LABELS", "AlertmanagerSink"]

# The record labels that identify a segment; anything else stays out of the identity.
PAIR_LABELS = ("target_model", "target_revision", "draft_model", "draft_revision",
               "num_speculative_tokens", "method", "temperature")
ANNOTATION_MAX = 4000
ONE_SECOND = timedelta(seconds=1)


def _labels(rule: str, severity: str, labels: Mapping[str, str]) -> dict[str, str]:
    out = {"alertname": rule, "route": labels["route"], "severity": severity}
    for k in PAIR_LABELS:
        v = labels.get(k)
        # Alertmanager drops empty-valued labels; keeping them out keeps our identity and
        # its identical (a "draft_model": "" would otherwise vanish on their side only).
        if v is not None and str(v) != "":
            out[k] = str(v)
    return out


def _alert(rule: str, severity: str, labels: Mapping[str, str], summary: str,
           details: Mapping[str, Any], episode: str, starts: datetime, ends: datetime,
           generator_url: str) -> dict[str, Any]:
    if ends <= starts:  # Alertmanager answers 400 "start time must be before end time"
        ends = starts + ONE_SECOND
    annotations = {
        "summary": truncate(summary, ANNOTATION_MAX),
        "episode": episode,
        "details": truncate(compact_json(dict(details)), ANNOTATION_MAX),
    }
    return {
        "labels": _labels(rule, severity, labels),
        "annotations": {k: v for k, v in annotations.items() if v},
        "startsAt": rfc3339(starts),
        "endsAt": rfc3339(ends),
        "generatorURL": generator_url,
    }


def _host(url: str) -> str:
    # for describe: the host and port only, never userinfo or a path that may hold a token
    parts = urlsplit(url)
    return parts.hostname + (f":{parts.port}" if parts.port else "") if parts.hostname else "?"


class AlertmanagerSink:
    """One POST of all items to ``/api/v2/alerts`` of each configured Alertmanager."""

    name = "alertmanager"
    min_interval = 0.0

    def __init__(self, urls: list[str], config: AlertmanagerConfig,
                 clock: Callable[[], float] = time.time) -> None:
        self._urls = [u.rstrip("/") for u in urls]
        # Basic auth in a URL (http://user:pass@am:9093) may come back quoted in an error.
        self._secrets = sorted({s for u in urls for s in url_secrets(u)},
                               key=lambda s: (-len(s), s))
        self._config = config
        self._clock = clock
        self._ttl = timedelta(seconds=config.firing_ttl)

    def __repr__(self) -> str:
        return f"AlertmanagerSink({len(self._urls)} url(s))"

    def _posts(self, alerts: list[dict[str, Any]], what: str) -> list[HttpRequest]:
        body = orjson.dumps(alerts)
        return [HttpRequest("POST", f"{u}/api/v2/alerts", body,
                            f"alertmanager {_host(u)} {what} ({len(alerts)} alerts)")
                for u in self._urls]

    def requests(self, n: Notification) -> list[HttpRequest]:
        alerts = []
        wall = datetime.fromtimestamp(self._clock(), UTC)
        for item in n.items:
            rec = item.record
            if item.status == "firing":
                # never before the record: a clock behind event time would expire it early
                ends = max(wall, rec.at) + self._ttl
            else:
                ends = rec.at
            alerts.append(_alert(rec.rule, rec.severity, rec.labels, rec.summary, rec.details,
                                 item.episode, item.started_at, ends,
                                 self._config.generator_url))
        return self._posts(alerts, n.status) if alerts else []

    def resync(self, episodes: list[Episode], now: datetime) -> list[HttpRequest]:
        """The periodic re-post: every open episode (kept alive for ``firing_ttl``) and every
        one resolved within ``resolved_resend_for`` of ``now`` (so a restarted
        Alertmanager still learns of the resolve). No request when none qualifies."""
        recent = timedelta(seconds=self._config.resolved_resend_for)
        alerts = []
        for e in episodes:
            if e.resolved_at is None:
                ends = now + self._ttl
            elif now - e.resolved_at <= recent:
                ends = e.resolved_at
            else:
                continue
            alerts.append(_alert(e.rule, e.severity, e.labels, e.summary, e.details, e.episode,
                                 e.started_at, ends, self._config.generator_url))
        return self._posts(alerts, "resync") if alerts else []

    def classify(self, status: int, headers: Mapping[str, str], body: bytes) -> Outcome:
        why = reason(status, body, self._secrets)
        if 200 <= status < 300:
            return Outcome("ok", why)
        if status == 429 or status == 0 or status >= 500:
            return Outcome("retry", why, retry_after(headers))
        if 300 <= status < 400:
            return Outcome("permanent", why + " (redirect not followed)", broken=True)
        # 404: no v2 API at this URL (a wrong path, or API v1 only); 401/403: an auth proxy
        # refusing us. Neither gets better by itself.
        return Outcome("permanent", why, broken=status in (401, 403, 404))
