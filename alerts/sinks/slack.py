"""Slack incoming webhooks: one Block Kit message per notification.

The webhook URL *is* the credential (``hooks.slack.com/services/T…/B…/<token>``), so it
appears only in :attr:`HttpRequest.url`: never in ``describe``, reasons or logs.

Every piece of text that comes from the data (routes, labels, summaries, details) goes
through :func:`slack_escape` before it enters mrkdwn: a route named ``<!channel>`` must not
ping a channel, nor ``<https://evil|docs>`` become a disguised link. The header is
``plain_text``, which Slack never parses, so it is only truncated.

>>> from alerts.notification import AlertItem, Notification
>>> from monitor.alert_record import AlertRecord
>>> from monitor.config import SlackConfig
>>> t = datetime(2026, 11, 2, 14, 20, tzinfo=UTC)
>>> rec = AlertRecord("telemetry_stale", "firing", t, "warning", {"route": "a&b<c>"}, "quiet")
>>> n = Notification("k1", {"route": "a&b<c>"}, t, (AlertItem(rec, "firing", "e-1", t),))
>>> msg = render(n)
>>> msg["blocks"][0]["text"]["text"]
'FIRING · route a&b<c> · 1 alert'
>>> msg["text"]
'FIRING · route a&amp;b&lt;c&gt; · 1 alert: FIRING telemetry_stale (warning): quiet'
>>> SlackSink("https://hooks.slack.com/services/T0/B0/s3cr3t", SlackConfig()).classify(
...     404, {}, b"no_service")
Outcome(kind='permanent', reason='HTTP 404 no_service', retry_after=None, broken=True)
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import orjson

from alerts.notification import AlertItem, Notification
from alerts.sinks.base import HttpRequest, Outcome
from alerts.sinks.text import (
    answer_code,
    one_line,
    reason,
    retry_after,
    scrub,
    slack_escape,
    truncate,
    truncate_mrkdwn,
)
from monitor.config import SlackConfig

__all__ = ["SlackSink", "render"]

# Block Kit and message limits (reference A1).
MAX_BLOCKS = 50
HEADER_MAX = 150
SECTION_MAX = 3000
CONTEXT_MAX = 2000
TEXT_MAX = 40_000
# Slack has refused messages near 13k characters of block text in total (reported, not
# documented), so sections share this budget rather than each taking 3000.
SECTIONS_BUDGET = 12_000
SECTION_MIN = 300
SUMMARY_MAX = 1500
DETAILS_SHOWN = 5

# Codes that mean the webhook itself is unusable until someone reconfigures it: the URL is
# revoked, the channel is gone or archived, or the workspace forbids the post. A message
# that fails with one of them would fail the same way for every later message.
BROKEN_CODES = frozenset({
    "no_service", "channel_is_archived", "action_prohibited", "channel_not_found",
    "invalid_token", "team_disabled", "no_team", "posting_to_general_channel_denied",
})


def _marker(item: AlertItem) -> str:
    if item.status == "resolved":
        return "RESOLVED"
    return "REMINDER" if item.repeat else "FIRING"


def _status_word(n: Notification) -> str:
    firing = [i for i in n.items if i.status == "firing"]
    if firing and all(i.repeat for i in firing):
        return "REMINDER"
    return n.status.upper()


def header_text(n: Notification) -> str:
    """``FIRING · route code · 3 alerts``, the route shortened so the count always shows."""
    k = len(n.items)
    tail = f" · {k} alert{'s' if k != 1 else ''}"
    head = f"{_status_word(n)} · route "
    route = truncate(one_line(n.route), HEADER_MAX - len(head) - len(tail))
    return truncate(head + route + tail, HEADER_MAX)


def _date(t: datetime, label: str) -> str:
    # Slack renders <!date^…> in the reader's time zone; the text after | is the fallback.
    t = t.astimezone(UTC)
    ts = int(t.timestamp())
    shown = slack_escape(t.strftime("%Y-%m-%d %H:%M UTC"))
    return f"{label} <!date^{ts}^{{date_short_pretty}} {{time}}|{shown}>"


def _value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return truncate(one_line(str(v)), 80)


def _pair(labels: Mapping[str, str], who: str) -> str | None:
    model = labels.get(f"{who}_model")
    if not model:
        return None
    rev = labels.get(f"{who}_revision")
    return f"{who} {model}" + (f" @ {rev}" if rev else "")


def section_text(item: AlertItem, budget: int = SECTION_MAX) -> str:
    """One item as mrkdwn, at most ``budget`` characters, every data piece escaped."""
    rec = item.record
    first = f"*{_marker(item)}* `{rec.rule}` · *{slack_escape(rec.severity)}*"
    first += " · " + _date(item.started_at, "since")
    if item.status == "resolved":
        first += " · " + _date(rec.at, "resolved")
    lines = [first, slack_escape(truncate(rec.summary, min(SUMMARY_MAX, budget // 2)))]
    pairs = [p for p in (_pair(rec.labels, "target"), _pair(rec.labels, "draft")) if p]
    if pairs:
        lines.append(slack_escape(" · ".join(truncate(one_line(p), 200) for p in pairs)))
    shown = [(k, v) for k, v in rec.details.items()
             if isinstance(v, str | int | float | bool) or v is None][:DETAILS_SHOWN]
    if shown:
        lines.append(slack_escape(" · ".join(
            f"{truncate(one_line(str(k)), 40)}: {_value(v)}" for k, v in shown)))
    return truncate_mrkdwn("\n".join(lines), min(budget, SECTION_MAX))


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def _active_text(n: Notification) -> str:
    seen: list[str] = []
    for a in n.active:
        s = f"{a.rule} ({a.severity})"
        if s not in seen:
            seen.append(s)
    return truncate_mrkdwn("also firing: " + slack_escape(", ".join(seen)), CONTEXT_MAX)


def fallback_text(n: Notification) -> str:
    """The notification-only ``text``: header and one clause per item, escaped and capped."""
    clauses = [f"{_marker(i)} {i.rule} ({i.severity}): {one_line(i.record.summary)}"
               for i in n.items]
    return truncate_mrkdwn(slack_escape(header_text(n) + ": " + "; ".join(clauses)), TEXT_MAX)


def render(n: Notification) -> dict[str, Any]:
    """The webhook payload for ``n``: ``text`` fallback plus at most 50 blocks."""
    blocks: list[dict[str, Any]] = [{
        "type": "header", "text": {"type": "plain_text", "text": header_text(n), "emoji": True},
    }]
    room = MAX_BLOCKS - 1 - (1 if n.active else 0)
    items = list(n.items)
    shown = items if len(items) <= room else items[: room - 1]
    budget = max(SECTION_MIN, min(SECTION_MAX, SECTIONS_BUDGET // max(1, len(shown))))
    blocks += [_section(section_text(i, budget)) for i in shown]
    rest = items[len(shown):]
    if rest:
        names = ", ".join(f"{i.rule} ({i.status})" for i in rest)
        blocks.append(_section(truncate_mrkdwn(
            slack_escape(f"… and {len(rest)} more: {names}"), SECTION_MAX)))
    if n.active:
        blocks.append({"type": "context",
                       "elements": [{"type": "mrkdwn", "text": _active_text(n)}]})
    return {"text": fallback_text(n), "blocks": blocks}


class SlackSink:
    """One POST of :func:`render` per notification, to the webhook URL."""

    name = "slack"

    def __init__(self, url: str, config: SlackConfig) -> None:
        self._url = url
        self.min_interval = config.min_interval
        # What an echoing error body could leak: the URL, its path and the path's parts
        # (the last one is the webhook token).
        path = urlsplit(url).path
        self._secrets = sorted({url, path, *(p for p in path.split("/") if len(p) >= 8)},
                               key=len, reverse=True)

    def __repr__(self) -> str:
        return "SlackSink(url=[redacted])"

    def requests(self, n: Notification) -> list[HttpRequest]:
        k = len(n.items)
        route = scrub(one_line(n.route), self._secrets)  # a route could quote the URL
        describe = (f"slack {_status_word(n).lower()} route {truncate(route, 80)}"
                    f" ({k} alert{'s' if k != 1 else ''})")
        return [HttpRequest("POST", self._url, orjson.dumps(render(n)), describe)]

    def classify(self, status: int, headers: Mapping[str, str], body: bytes) -> Outcome:
        why = reason(status, body, self._secrets)
        if 200 <= status < 300:
            # Workflow webhooks answer JSON {"ok": false, "error": ...} with a 200.
            try:
                data = orjson.loads(body)
            except orjson.JSONDecodeError:
                data = None
            if isinstance(data, dict) and data.get("ok") is False:
                code = answer_code(body, secrets=self._secrets)
                return Outcome("permanent", f"HTTP {status} {code}".rstrip(),
                               broken=code in BROKEN_CODES)
            return Outcome("ok", why)
        if status == 429:
            return Outcome("retry", why, retry_after=retry_after(headers))
        if status == 0 or status >= 500:
            return Outcome("retry", why, retry_after=retry_after(headers))
        if 300 <= status < 400:
            # Redirects are not followed: a moved webhook needs a new URL in the config.
            return Outcome("permanent", why + " (redirect not followed)", broken=True)
        code = answer_code(body, secrets=self._secrets)
        return Outcome("permanent", why, broken=status == 410 or code in BROKEN_CODES)
