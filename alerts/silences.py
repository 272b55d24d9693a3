"""Silences: an operator's "I know, stop telling me" for a route (and optionally one rule).

A silence mutes new pages and reminders for the alerts it matches while it is in force. It
never mutes the resolve of an episode that was already announced: an incident opened in
PagerDuty must be closed by us, silence or not. When a silence ends and its alert still
fires, the alert is announced then.

>>> from datetime import UTC, datetime, timedelta
>>> t = datetime(2026, 11, 2, 14, 0, tzinfo=UTC)
>>> s = Silence(1, "batch-*", None, t, t + timedelta(hours=2), "load test", "alice")
>>> s.matches("acceptance_drop", {"route": "batch-eu"}, t + timedelta(minutes=5))
True
>>> s.matches("acceptance_drop", {"route": "code"}, t + timedelta(minutes=5))
False
>>> s.matches("acceptance_drop", {"route": "batch-eu"}, t + timedelta(hours=3))
False
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

# The type sits below alerts/ so that the store, which keeps silences, need not import alerts.
from monitor.silence import Silence

__all__ = ["Silence", "silenced_by"]


def silenced_by(
    silences: Iterable[Silence], rule: str, labels: Mapping[str, str], now: datetime
) -> Silence | None:
    """The first silence in force that matches, or ``None``."""
    for s in silences:
        if s.matches(rule, labels, now):
            return s
    return None
