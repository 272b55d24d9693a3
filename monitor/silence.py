"""A silence: an operator's "I know, stop telling me" for a route (and optionally one rule).

The type and its matching live here, below ``alerts/`` and ``monitor/store/``: the store
keeps silences and alerting obeys them, and neither depends on the other for the type.
What a silence mutes (and never mutes) is described in :mod:`alerts.silences`.

>>> from datetime import UTC, datetime, timedelta
>>> t = datetime(2026, 11, 2, 14, 0, tzinfo=UTC)
>>> s = Silence(1, "batch-*", None, t, t + timedelta(hours=2), "load test", "alice")
>>> s.matches("acceptance_drop", {"route": "batch-eu"}, t + timedelta(minutes=5))
True
>>> s.to_json()["ends_at"]
'2026-11-02T16:00:00Z'
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from monitor.alert_record import iso_utc

__all__ = ["Silence"]


@dataclass(frozen=True, slots=True)
class Silence:
    """``route`` is a glob (``*`` any); ``rule`` ``None`` mutes every rule of the route.
    In force from ``starts_at`` (inclusive) to ``ends_at`` (exclusive)."""

    id: int
    route: str
    rule: str | None
    starts_at: datetime
    ends_at: datetime
    reason: str
    created_by: str = ""

    def active(self, now: datetime) -> bool:
        return self.starts_at <= now < self.ends_at

    def matches(self, rule: str, labels: Mapping[str, str], now: datetime) -> bool:
        return (
            self.active(now)
            and (self.rule is None or self.rule == rule)
            and fnmatch.fnmatchcase(labels.get("route", ""), self.route)
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "route": self.route, "rule": self.rule,
            "starts_at": iso_utc(self.starts_at), "ends_at": iso_utc(self.ends_at),
            "reason": self.reason, "created_by": self.created_by,
        }
