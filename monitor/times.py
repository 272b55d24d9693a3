"""Times as people write them on the command line and in query strings.

Not :func:`monitor.simulate.durations.parse_time`: that one reads event times for the
simulator (Unix seconds or RFC 3339, a zone-less time taken as UTC) and returns Unix
seconds; this one reads a point in time an operator names (RFC 3339 with a zone, or a
duration meaning that long ago) and returns an aware datetime.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta

from monitor.durations import parse_duration

__all__ = ["parse_time_arg"]


def parse_time_arg(value: str, *, now: datetime | None = None) -> datetime:
    """An RFC 3339 time, or a duration meaning that long ago (``30d``, ``2h``).

    An argparse ``type``: a bad value raises :class:`argparse.ArgumentTypeError`.

    >>> parse_time_arg("2026-11-02T14:00:00Z").isoformat()
    '2026-11-02T14:00:00+00:00'
    >>> parse_time_arg("1h", now=datetime(2026, 1, 1, tzinfo=UTC)).isoformat()
    '2025-12-31T23:00:00+00:00'
    """
    now = now or datetime.now(UTC)
    try:
        return now - timedelta(seconds=parse_duration(value))
    except ValueError:
        pass
    try:
        t = datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"cannot read time {value!r} (want RFC 3339, e.g. 2026-11-02T14:00:00Z, or 30d)"
        ) from None
    if t.tzinfo is None:
        raise argparse.ArgumentTypeError(f"time {value!r} needs a zone (Z or +hh:mm)")
    return t.astimezone(UTC)
