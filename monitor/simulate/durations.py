"""Durations ("90s", "30m", "1h30m") and event times (RFC 3339 or Unix seconds)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import numpy as np

from monitor.simulate.exceptions import SimulationError

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h|d|w)")


def parse_duration(text: str | float | int) -> float:
    """Seconds in a duration such as ``"90s"``, ``"30m"``, ``"2h"``, ``"1d"`` or ``"1h30m"``.

    A bare number is seconds.

    >>> parse_duration("1h30m"), parse_duration("90s"), parse_duration(5)
    (5400.0, 90.0, 5.0)
    """
    if isinstance(text, int | float) and not isinstance(text, bool):
        seconds = float(text)
    else:
        s = str(text).strip().lower()
        try:
            seconds = float(s)
        except ValueError:
            parts = _PART.findall(s)
            if not parts or "".join(n + u for n, u in parts) != s:
                raise SimulationError(
                    f"bad duration {text!r}: use seconds or e.g. 90s, 30m, 2h, 1d, 1h30m"
                ) from None
            seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if not np.isfinite(seconds) or seconds < 0:
        raise SimulationError(f"bad duration {text!r}: must be finite and >= 0")
    return seconds


def format_duration(seconds: float) -> str:
    """The shortest ``parse_duration`` spelling of whole seconds (fractions stay in seconds).

    >>> format_duration(5400), format_duration(86400), format_duration(2.5)
    ('90m', '1d', '2.5s')
    """
    if seconds != int(seconds):
        return f"{seconds:g}s"
    for unit in ("d", "h", "m"):
        if seconds and seconds % _UNITS[unit] == 0:
            return f"{int(seconds // _UNITS[unit])}{unit}"
    return f"{int(seconds)}s"


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
