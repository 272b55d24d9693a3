"""Reading the rollups back: ratio rows, merged statistics, and their text formats."""

from __future__ import annotations

import csv
import io
import json
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Select, select

from monitor.aggregate.bucket import COUNTERS, BucketStats
from monitor.aggregate.series import SeriesKey
from monitor.store.checkpoint import GRANULARITIES
from monitor.store.series_ids import series_key_of
from monitor.store.tables import rollups_table, series_table

FORMATS = ("table", "json", "csv")

# The CLI spec's columns first, then the rest of the series key and counters.
COLUMNS = (
    "bucket_start",
    "route",
    "target_model",
    "target_revision",
    "draft_model",
    "draft_revision",
    "num_speculative_tokens",
    "requests",
    "drafted_tokens",
    "accepted_tokens",
    "acceptance_rate",
    "granularity",
    "target_tokenizer",
    "draft_tokenizer",
    "method",
    "errors",
    "spec_requests",
    "drafting_requests",
    "verify_steps",
    "output_tokens",
    "mean_accepted_length",
)
# Absent when speculation was off; '' in the database, null in JSON.
_OPTIONAL = frozenset({"draft_model", "draft_revision", "draft_tokenizer", "method"})
_RATIO_COUNTERS = (
    "requests",
    "errors",
    "spec_requests",
    "drafting_requests",
    "drafted_tokens",
    "accepted_tokens",
    "verify_steps",
    "output_tokens",
)


@dataclass(frozen=True, slots=True)
class RatioRow:
    """One series over one bucket: the counts behind the acceptance ratio."""

    bucket_start: datetime
    granularity: str
    route: str
    target_model: str
    target_revision: str
    target_tokenizer: str
    draft_model: str
    draft_revision: str
    draft_tokenizer: str
    method: str
    num_speculative_tokens: int
    requests: int
    errors: int
    spec_requests: int
    drafting_requests: int
    drafted_tokens: int
    accepted_tokens: int
    verify_steps: int
    output_tokens: int

    @property
    def acceptance_rate(self) -> float | None:
        """accepted / drafted, token-weighted; ``None`` when nothing was drafted."""
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else None

    @property
    def mean_accepted_length(self) -> float | None:
        """1 + accepted / verify_steps; ``None`` without verification steps."""
        return 1.0 + self.accepted_tokens / self.verify_steps if self.verify_steps else None

    @property
    def series(self) -> SeriesKey:
        return series_key_of(self)

    def sort_key(self) -> tuple[Any, ...]:
        return (self.bucket_start, *self.series)


def check_range(granularity: str, since: datetime | None, until: datetime | None) -> None:
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {', '.join(GRANULARITIES)}: {granularity!r}")
    for name, value in (("since", since), ("until", until)):
        if value is not None and (value.tzinfo is None or value.utcoffset() is None):
            raise ValueError(f"{name} must be an aware datetime, got {value.isoformat()}")


def _filtered(
    stmt: Select[Any],
    granularity: str,
    route: str | None,
    since: datetime | None,
    until: datetime | None,
) -> Select[Any]:
    check_range(granularity, since, until)
    r, s = rollups_table.c, series_table.c
    stmt = stmt.select_from(rollups_table.join(series_table, r.series_id == s.id)).where(
        r.granularity == granularity
    )
    if route is not None:
        stmt = stmt.where(s.route == route)
    if since is not None:
        stmt = stmt.where(r.bucket_start >= since)
    if until is not None:
        stmt = stmt.where(r.bucket_start < until)
    return stmt


_KEY_COLUMNS = [series_table.c[name] for name in SeriesKey._fields]


def ratio_rows(
    conn: Connection,
    granularity: str,
    route: str | None,
    since: datetime | None,
    until: datetime | None,
) -> list[RatioRow]:
    r = rollups_table.c
    stmt = select(r.bucket_start, *_KEY_COLUMNS, *(r[name] for name in _RATIO_COUNTERS))
    stmt = _filtered(stmt, granularity, route, since, until)
    rows = [RatioRow(granularity=granularity, **row._asdict()) for row in conn.execute(stmt)]
    # Sorted here rather than in SQL: string order must not depend on the server's collation.
    rows.sort(key=RatioRow.sort_key)
    return rows


def bucket_rows(
    conn: Connection,
    granularity: str,
    route: str | None,
    since: datetime | None,
    until: datetime | None,
) -> Iterator[tuple[SeriesKey, datetime, BucketStats]]:
    r = rollups_table.c
    values = [r[name] for name in (*COUNTERS, "per_position", "ttft_ms", "e2e_ms", "decode_tps")]
    stmt = select(r.bucket_start, *_KEY_COLUMNS, *values)
    stmt = _filtered(stmt, granularity, route, since, until)
    for row in conn.execute(stmt.order_by(r.bucket_start, r.series_id)):
        yield series_key_of(row), row.bucket_start, BucketStats.from_row(row)


# --- text formats -------------------------------------------------------------------------


def rfc3339(dt: datetime) -> str:
    """``2026-11-02T14:03:00Z``; fractional seconds only when present.

    >>> rfc3339(datetime(2026, 11, 2, 14, 3, tzinfo=UTC))
    '2026-11-02T14:03:00Z'
    """
    return dt.astimezone(UTC).replace(tzinfo=None).isoformat() + "Z"


def _json_value(row: RatioRow, name: str) -> Any:
    value = getattr(row, name)
    if name == "bucket_start":
        return rfc3339(value)
    if name in _OPTIONAL and value == "":
        return None
    return value


def _text_value(row: RatioRow, name: str) -> str:
    value = getattr(row, name)
    if name == "bucket_start":
        return rfc3339(value)
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


# Shown escaped in the table: C0/C1 controls (a route could carry terminal escape sequences)
# and the bidi overrides and isolates that would reorder the rest of the line.
_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _display(s: str) -> str:
    if s.isprintable() and not _BIDI_CONTROLS.intersection(s):
        return s
    out = []
    for ch in s:
        if unicodedata.category(ch) == "Cc" or ch in _BIDI_CONTROLS:
            out.append(ch.encode("unicode_escape").decode("ascii"))
        else:
            out.append(ch)
    return "".join(out)


def _width(s: str) -> int:
    """Terminal columns: East Asian wide and emoji count 2, combining marks and ZWJ 0."""
    w = 0
    for ch in s:
        if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
            continue
        w += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return w


def _table_value(row: RatioRow, name: str) -> str:
    value = getattr(row, name)
    if isinstance(value, float):
        return f"{value:.4f}"
    return _display(_text_value(row, name))


def _table(rows: Sequence[RatioRow]) -> str:
    numeric = {*_RATIO_COUNTERS, "num_speculative_tokens", "acceptance_rate"}
    numeric.add("mean_accepted_length")
    cells = [list(COLUMNS)] + [[_table_value(r, c) for c in COLUMNS] for r in rows]
    widths = [max(_width(line[i]) for line in cells) for i in range(len(COLUMNS))]
    lines = []
    for line in cells:
        parts = []
        for name, cell, w in zip(COLUMNS, line, widths, strict=True):
            pad = " " * (w - _width(cell))
            parts.append(pad + cell if name in numeric else cell + pad)
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines) + "\n"


def format_ratios(rows: Iterable[RatioRow], fmt: str) -> str:
    """``rows`` as ``table`` (aligned text), ``json`` (one array) or ``csv`` (with a header)."""
    rows = list(rows)
    if fmt == "json":
        # One array, one object per line: valid JSON that still diffs and greps by row.
        objs = [
            json.dumps({c: _json_value(r, c) for c in COLUMNS}, ensure_ascii=False) for r in rows
        ]
        return "[\n" + ",\n".join(objs) + "\n]\n" if objs else "[]\n"
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        # The writer quotes a field holding "\n" but not a lone "\r", which every reader
        # takes for a line break: such rows are written fully quoted instead.
        quoted = csv.writer(buf, lineterminator="\n", quoting=csv.QUOTE_ALL)
        w.writerow(COLUMNS)
        for r in rows:
            values = [_text_value(r, c) for c in COLUMNS]
            (quoted if any("\r" in v for v in values) else w).writerow(values)
        return buf.getvalue()
    if fmt == "table":
        return _table(rows)
    raise ValueError(f"format must be one of {', '.join(FORMATS)}: {fmt!r}")
