"""The log sink: every notification as log lines, always available, never failing.

>>> from datetime import UTC, datetime
>>> from alerts.notification import AlertItem, Notification
>>> from monitor.alert_record import AlertRecord
>>> t = datetime(2026, 11, 2, 14, 20, tzinfo=UTC)
>>> rec = AlertRecord("telemetry_stale", "firing", t, "warning", {"route": "code"}, "quiet")
>>> line(AlertItem(rec, "firing", "e-1", t))
'ALERT FIRING telemetry_stale code warning: quiet (episode e-1)'
"""

from __future__ import annotations

import logging

from alerts.notification import AlertItem, Notification
from alerts.sinks.text import one_line

__all__ = ["LogSink", "line"]

LOUD = frozenset({"critical", "error", "warning"})


def line(item: AlertItem) -> str:
    """``ALERT FIRING|RESOLVED|REMINDER rule route severity: summary (episode …)``, on one
    line whatever the summary or route hold (a newline would forge a second log entry)."""
    if item.status == "resolved":
        what = "RESOLVED"
    else:
        what = "REMINDER" if item.repeat else "FIRING"
    return one_line(f"ALERT {what} {item.rule} {item.labels['route']} {item.severity}: "
                    f"{item.record.summary} (episode {item.episode})")


class LogSink:
    """Logs one line per item: WARNING while a critical/error/warning alert fires."""

    name = "log"

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self._log = logger or logging.getLogger("specwatch.alerts")

    def emit(self, n: Notification) -> None:
        for item in n.items:
            loud = item.status == "firing" and item.severity in LOUD
            self._log.log(logging.WARNING if loud else logging.INFO, "%s", line(item))
