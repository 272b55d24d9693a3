"""Durations as people write them in configs and on the command line."""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Annotated, Any

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler
    from pydantic_core import CoreSchema

__all__ = ["Duration", "format_duration", "parse_duration"]

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h|d|w)")


def parse_duration(value: object) -> float:
    """Seconds in ``90``, ``"90s"``, ``"5m"``, ``"2h"``, ``"7d"``, ``"250ms"``, ``"1h30m"``.

    A bare number is seconds. Raises ``ValueError`` for anything else, negative or infinite.

    >>> parse_duration("2h"), parse_duration(30), parse_duration("1.5m"), parse_duration("1h30m")
    (7200.0, 30.0, 90.0, 5400.0)
    """
    if isinstance(value, bool):
        raise ValueError(f"invalid duration {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        s = value.strip().lower()
        try:
            seconds = float(s)
        except ValueError:
            parts = _PART.findall(s)
            if not parts or "".join(n + u for n, u in parts) != s:
                raise ValueError(
                    f"invalid duration {value!r} (want e.g. 90s, 5m, 2h, 7d, 1h30m)"
                ) from None
            seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    else:
        raise ValueError(f"invalid duration {value!r}")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"invalid duration {value!r}: must be finite and >= 0")
    return seconds


class _ReadAsDuration:
    """pydantic's ``BeforeValidator(parse_duration)``, declared without importing pydantic
    (the command line parses durations, and `specwatch ratios` builds no config model):
    pydantic asks for the schema when a model using :data:`Duration` is built."""

    def __get_pydantic_core_schema__(self, source: Any,
                                     handler: GetCoreSchemaHandler) -> CoreSchema:
        from pydantic_core import core_schema

        return core_schema.no_info_before_validator_function(parse_duration, handler(source))


# A config field in seconds that reads "90s", "5m", "1h30m" or a bare number.
Duration = Annotated[float, _ReadAsDuration()]


def format_duration(seconds: float) -> str:
    """The shortest :func:`parse_duration` spelling of whole seconds.

    >>> format_duration(5400), format_duration(86400), format_duration(2.5)
    ('90m', '1d', '2.5s')
    """
    if seconds != int(seconds):
        return f"{seconds:g}s"
    for unit in ("d", "h", "m"):
        if seconds and seconds % _UNITS[unit] == 0:
            return f"{int(seconds // _UNITS[unit])}{unit}"
    return f"{int(seconds)}s"
