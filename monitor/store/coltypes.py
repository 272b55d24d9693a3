"""Column types that behave the same on SQLite and PostgreSQL."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import DateTime, Dialect, String, Text
from sqlalchemy.types import TypeDecorator, TypeEngine


class UTCDateTime(TypeDecorator[datetime]):
    """An aware datetime in, an aware UTC datetime out.

    PostgreSQL keeps it as ``timestamptz``; SQLite, which has no zone support, as naive UTC.
    Naive datetimes are refused on the way in: their meaning depends on the machine's zone.

    >>> from sqlalchemy.dialects import sqlite
    >>> t = UTCDateTime()
    >>> t.process_bind_param(datetime(2026, 1, 1, tzinfo=UTC), sqlite.dialect())
    datetime.datetime(2026, 1, 1, 0, 0)
    >>> t.process_result_value(datetime(2026, 1, 1), sqlite.dialect()).tzinfo
    datetime.timezone.utc
    """

    impl = DateTime
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        return dialect.type_descriptor(DateTime(timezone=dialect.name != "sqlite"))

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if not isinstance(value, datetime):
            raise TypeError(f"expected a datetime, got {type(value).__name__}")
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"naive datetime {value.isoformat()} refused: give it a zone")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


# PostgreSQL text cannot hold NUL, yet routes are "any Unicode". On PostgreSQL, NUL is stored
# as ESC + "0" and ESC itself as ESC + ESC, an injective escape that leaves every other string
# byte-identical (ESC is a Unicode noncharacter, so real text practically never pays for it).
_ESC = "\uffff"
_UNESCAPE = re.compile(_ESC + "(.)", re.DOTALL)


def escape_nul(s: str) -> str:
    """The PostgreSQL-storable form of ``s``.

    >>> unescape_nul(escape_nul("a\\x00b\\uffffc")) == "a\\x00b\\uffffc"
    True
    >>> escape_nul("plain")
    'plain'
    """
    if "\x00" not in s and _ESC not in s:
        return s
    return s.replace(_ESC, _ESC + _ESC).replace("\x00", _ESC + "0")


def unescape_nul(s: str) -> str:
    if _ESC not in s:
        return s
    return _UNESCAPE.sub(lambda m: "\x00" if m.group(1) == "0" else m.group(1), s)


class SafeText(TypeDecorator[str]):
    """Unicode text that round-trips any Python string, NUL included, on both databases."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        if value is None or dialect.name != "postgresql":
            return value
        return escape_nul(value)

    def process_result_value(self, value: str | None, dialect: Dialect) -> str | None:
        if value is None or dialect.name != "postgresql":
            return value
        return unescape_nul(value)


class SafeString(SafeText):
    """:class:`SafeText` with a length limit (``VARCHAR(n)``): ``SafeString(255)``."""

    impl = String
    cache_ok = True
