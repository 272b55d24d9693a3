"""What the lifecycle decides to send: a group's alert transitions, as one notification.

A :class:`Notification` is the unit of the outbox: one row per (notification, sink), written
in the checkpoint transaction that decided it and delivered later by the worker. Its ``key``
is stable (group and sequence number), so a notification re-decided after a crash is the
same row, never a second page.

>>> from datetime import UTC, datetime
>>> rec = AlertRecord("telemetry_stale", "firing", datetime(2026, 11, 2, 14, 20, tzinfo=UTC),
...                   "warning", {"route": "code"}, "code: no telemetry for 600s")
>>> item = AlertItem(rec, "firing", episode_id(rec.fingerprint, rec.at), rec.at)
>>> n = Notification("k1", {"route": "code"}, rec.at, (item,))
>>> n.status, n.route
('firing', 'code')
>>> Notification.from_json(n.to_json()) == n
True
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from monitor.alert_record import AlertRecord, iso_utc, parse_iso

__all__ = ["AlertItem", "Notification", "episode_id", "record_from_json"]

Status = Literal["firing", "resolved"]


def episode_id(fingerprint: str, started_at: datetime) -> str:
    """One episode of one alert: its fingerprint and the second it started firing.

    >>> from datetime import UTC
    >>> episode_id("9c1e0f2a3b4c5d6e", datetime(2026, 11, 2, 14, 20, tzinfo=UTC))
    '9c1e0f2a3b4c5d6e-1793629200'
    """
    return f"{fingerprint}-{int(started_at.timestamp())}"


def record_from_json(data: dict[str, Any]) -> AlertRecord:
    """The inverse of :meth:`AlertRecord.to_json` (``fingerprint`` is recomputed)."""
    return AlertRecord(
        data["rule"], data["state"], parse_iso(data["at"]), data["severity"],
        dict(data["labels"]), data["summary"], dict(data.get("details") or {}),
    )


@dataclass(frozen=True, slots=True)
class AlertItem:
    """One alert's part in a notification.

    ``record`` is the alert's latest condition record: the firing record while ``status``
    is ``firing``, the resolving one once ``resolved``. ``repeat`` marks a reminder of an
    episode already notified (repeat interval, or the end of a silence is *not* a repeat).
    """

    record: AlertRecord
    status: Status
    episode: str
    started_at: datetime
    repeat: bool = False

    @property
    def fingerprint(self) -> str:
        return self.record.fingerprint

    @property
    def rule(self) -> str:
        return self.record.rule

    @property
    def severity(self) -> str:
        return self.record.severity

    @property
    def labels(self) -> dict[str, str]:
        return self.record.labels

    def to_json(self) -> dict[str, Any]:
        return {
            "record": self.record.to_json(), "status": self.status, "episode": self.episode,
            "started_at": iso_utc(self.started_at), "repeat": self.repeat,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AlertItem:
        return cls(record_from_json(data["record"]), data["status"], data["episode"],
                   parse_iso(data["started_at"]), bool(data.get("repeat", False)))


@dataclass(frozen=True, slots=True)
class Notification:
    """A group's alert transitions decided together (one Slack message, say).

    ``group`` holds the grouping labels (``{"route": ...}`` by default); ``items`` are the
    transitions this notification announces, in decision order; ``active`` are the group's
    other alerts still firing, for context only (sinks never re-trigger them).
    """

    key: str
    group: dict[str, str]
    at: datetime
    items: tuple[AlertItem, ...]
    active: tuple[AlertItem, ...] = ()

    @property
    def status(self) -> Status:
        """``firing`` when any item fires, ``resolved`` when every item resolved."""
        return "firing" if any(i.status == "firing" for i in self.items) else "resolved"

    @property
    def route(self) -> str:
        return self.group.get("route") or self.items[0].labels["route"]

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key, "group": dict(self.group), "at": iso_utc(self.at),
            "items": [i.to_json() for i in self.items],
            "active": [i.to_json() for i in self.active],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Notification:
        return cls(
            data["key"], dict(data["group"]), parse_iso(data["at"]),
            tuple(AlertItem.from_json(i) for i in data["items"]),
            tuple(AlertItem.from_json(i) for i in data.get("active", ())),
        )
