"""The alert record of ``shared/spec/alerts-v1.md``: one state change of one alert.

Below ``alerts/``, ``monitor/detect/`` and ``monitor/store/``: detection makes records, the
store keeps them, alerting sends them; none of them depends on another for the type.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from monitor import rules
from monitor.exceptions import InvalidAlert

__all__ = ["STATES", "AlertRecord", "fingerprint", "iso_utc", "parse_iso"]

STATES = frozenset({"firing", "resolved"})


def iso_utc(t: datetime) -> str:
    """RFC 3339 in UTC with ``Z``, as every alert document writes times.

    >>> iso_utc(datetime(2026, 11, 2, 14, 20, tzinfo=UTC))
    '2026-11-02T14:20:00Z'
    """
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def parse_iso(s: str) -> datetime:
    """The inverse of :func:`iso_utc` (any RFC 3339 offset is accepted)."""
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


def fingerprint(rule: str, labels: dict[str, str]) -> str:
    """Stable for the same rule and labels, whatever their order.

    >>> fingerprint("acceptance_drop", {"route": "creative", "draft_model": "m1b"}) == \\
    ...     fingerprint("acceptance_drop", {"draft_model": "m1b", "route": "creative"})
    True
    >>> len(fingerprint("telemetry_stale", {"route": "code"}))
    16
    """
    canonical = orjson.dumps([rule, labels], option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(canonical).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class AlertRecord:
    """One alert state change, as written to ``--alerts-out``, the store and the sinks.

    >>> r = AlertRecord("telemetry_stale", "firing", datetime(2026, 11, 2, 14, 20, tzinfo=UTC),
    ...                 "warning", {"route": "code"}, "code: no events for 10m")
    >>> r.to_json()["at"]
    '2026-11-02T14:20:00Z'
    """

    rule: str
    state: str
    at: datetime
    severity: str
    labels: dict[str, str]
    summary: str
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.rule not in rules.CATALOGUE:
            raise InvalidAlert(f"unknown rule {self.rule!r}")
        if self.state not in STATES:
            raise InvalidAlert(f"state must be firing or resolved, not {self.state!r}")
        if self.severity not in rules.SEVERITIES:
            raise InvalidAlert(f"unknown severity {self.severity!r}")
        if not self.labels.get("route"):
            raise InvalidAlert("labels.route is required")
        if self.at.tzinfo is None:
            raise InvalidAlert("at must be an aware datetime")

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.rule, self.labels)

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "state": self.state,
            "at": iso_utc(self.at),
            "severity": self.severity,
            "labels": dict(self.labels),
            "summary": self.summary,
            "details": dict(self.details),
            "fingerprint": self.fingerprint,
        }

    def to_line(self) -> bytes:
        return orjson.dumps(self.to_json()) + b"\n"
