"""Factories for the sink tests: alert items and notifications with sensible defaults."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from alerts.notification import AlertItem, Notification, episode_id
from monitor.alert_record import AlertRecord

T0 = datetime(2026, 11, 2, 14, 20, tzinfo=UTC)
PAIR = {"target_model": "m70b", "target_revision": "r2", "draft_model": "m1b",
        "draft_revision": "d1"}
ROUTING_KEY = "R0UT1NGKEY0123456789abcdefABCDEF"  # 32 characters, like a real one


def item(rule: str = "acceptance_drop", status: str = "firing", *, route: str = "code",
         severity: str = "warning", summary: str | None = None,
         details: dict[str, Any] | None = None, labels: dict[str, str] | None = None,
         started: datetime = T0, at: datetime | None = None, repeat: bool = False,
         pair: bool = True) -> AlertItem:
    """An item of ``rule`` on ``route``; resolved items resolve 10 minutes after start."""
    lab = {"route": route, **(PAIR if pair else {}), **(labels or {})}
    when = at or (started if status == "firing" else started + timedelta(minutes=10))
    rec = AlertRecord(
        rule, status, when, severity, lab,
        summary if summary is not None else f"{route}: acceptance 0.61 -> 0.49",
        details if details is not None else {"baseline": 0.61, "current": 0.49,
                                             "drafted_tokens": 48120},
    )
    return AlertItem(rec, status, episode_id(rec.fingerprint, started), started,  # type: ignore[arg-type]
                     repeat)


def notification(*items: AlertItem, key: str = "k1", active: tuple[AlertItem, ...] = (),
                 at: datetime | None = None) -> Notification:
    items = items or (item(),)
    return Notification(key, {"route": items[0].labels["route"]}, at or T0, items, active)
