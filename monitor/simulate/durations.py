"""Durations ("90s", "30m", "1h30m") and event times (RFC 3339 or Unix seconds)."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np

from monitor.durations import format_duration
from monitor.durations import parse_duration as _parse_duration
from monitor.simulate.exceptions import SimulationError

__all__ = ["format_duration", "format_time", "format_ts", "parse_duration", "parse_time"]



def parse_duration(text: str | float | int) -> float:
    """:func:`monitor.durations.parse_duration`, failing with a :class:`SimulationError`.

    >>> parse_duration("1h30m"), parse_duration("90s"), parse_duration(5)
    (5400.0, 90.0, 5.0)
    """
    try:
        return _parse_duration(text)
    except ValueError as e:
        raise SimulationError(str(e)) from None


def parse_time(value: str | float | int | datetime) -> float:
    """Unix seconds of an RFC 3339 string (``Z`` or an offset), Unix seconds, or a datetime.

    A datetime or string without a zone is taken as UTC.

    >>> parse_time("2026-11-02T00:00:00Z"), parse_time(1.5)
    (1793577600.0, 1.5)
    """
    if isinstance(value, datetime):
        dt = value if value.tzinfo else value.replace(tzinfo=UTC)
        return dt.timestamp()
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        s = str(value).strip()
        try:
            seconds = float(s)
        except ValueError:
            try:
                dt = datetime.fromisoformat(s.replace("z", "Z"))
            except ValueError:
                raise SimulationError(
                    f"bad time {value!r}: use RFC 3339 (2026-11-02T00:00:00Z) or Unix seconds"
                ) from None
            return parse_time(dt)
    if not np.isfinite(seconds):
        raise SimulationError(f"bad time {value!r}: not finite")
    return seconds


def format_ts(seconds: np.ndarray) -> list[str]:
    """RFC 3339 UTC strings with milliseconds, vectorised (one numpy call per chunk of events).

    >>> format_ts(np.array([1793577600.0, 1793577600.0126]))
    ['2026-11-02T00:00:00.000Z', '2026-11-02T00:00:00.013Z']
    """
    ms = np.rint(np.asarray(seconds, dtype=np.float64) * 1000.0).astype(np.int64)
    text = np.datetime_as_string(ms.astype("datetime64[ms]"), unit="ms")
    return [t + "Z" for t in text.tolist()]


def format_time(seconds: float) -> str:
    """One RFC 3339 UTC string with milliseconds."""
    return format_ts(np.array([seconds]))[0]
