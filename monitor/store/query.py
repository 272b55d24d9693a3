"""Reading the rollups back: ratio rows, merged statistics, and their text formats."""

from __future__ import annotations

import bisect
import collections
import csv
import functools
import io
import itertools
import json
import operator
import unicodedata
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import orjson
from sqlalchemy import (
    Connection,
    Select,
    String,
    Text,
    bindparam,
    cast,
    null,
    select,
    type_coerce,
)

from monitor.aggregate.bucket import COUNTERS, FLOATS, OUTCOME_COUNTERS, SKETCHES, BucketStats
from monitor.aggregate.outcome import OutcomeRates, cost_per_success
from monitor.aggregate.series import SeriesKey
from monitor.aggregate.sketch import LogHistogram, quantile_of
from monitor.heap import collector_paused
from monitor.store.checkpoint import GRANULARITIES
from monitor.store.pipelined import rows_per_value
from monitor.store.sketch_columns import SketchColumn
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
    # Task outcome and cost (telemetry v1.1): raw sums, then what is derived from them.
    *OUTCOME_COUNTERS,
    *FLOATS,
    "success_rate",
    "ok_rate",
    "schema_valid_rate",
    "tool_calls_valid_rate",
    "gpu_seconds_estimated_share",
    "gpu_seconds_per_success",
    "successes_per_gpu_second",
    "cost_per_success",
    "itl_p50_ms",
    "itl_p99_ms",
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
    "successes",
    "outcome_ok_reported",
    "outcome_ok_true",
    "schema_valid_reported",
    "schema_valid_true",
    "tool_calls_valid_reported",
    "tool_calls_valid_true",
    "gpu_reported_requests",
    "gpu_seconds",
    "gpu_seconds_sq",
    "success_gpu_seconds",
)
# Derived values shown right-aligned in tables.
_DERIVED = frozenset({
    "acceptance_rate", "mean_accepted_length", "success_rate", "ok_rate", "schema_valid_rate",
    "tool_calls_valid_rate", "gpu_seconds_estimated_share", "gpu_seconds_per_success",
    "successes_per_gpu_second", "cost_per_success", "itl_p50_ms", "itl_p99_ms",
})


@dataclass(frozen=True, slots=True)
class RatioRow(OutcomeRates):
    """One series over one bucket: the counts behind the acceptance ratio, task outcome and
    cost.

    Outcome rates count only the requests that report that outcome (``None`` when none
    does). ``gpu_seconds`` holds reported GPU time where events carry it and the pipeline's
    estimate elsewhere; ``cost_per_success`` needs ``price_per_gpu_hour`` (the store's
    reader passes ``cost.price_per_gpu_hour``). ``itl_p50_ms`` is the median over requests
    of their own median inter-token gap, ``itl_p99_ms`` the 99th percentile over requests of
    their own p99 gap (from the sketches; ``None`` when no request reported ``itl_ms``).
    """

    bucket_start: datetime
    granularity: str
    # One key object per series, shared by its rows; its nine parts are properties below.
    series: SeriesKey
    requests: int
    errors: int
    spec_requests: int
    drafting_requests: int
    drafted_tokens: int
    accepted_tokens: int
    verify_steps: int
    output_tokens: int
    successes: int = 0
    outcome_ok_reported: int = 0
    outcome_ok_true: int = 0
    schema_valid_reported: int = 0
    schema_valid_true: int = 0
    tool_calls_valid_reported: int = 0
    tool_calls_valid_true: int = 0
    gpu_reported_requests: int = 0
    gpu_seconds: float = 0.0
    gpu_seconds_sq: float = 0.0
    success_gpu_seconds: float = 0.0
    # The ITL sketches as stored (JSON text): decoded only when a quantile is asked for,
    # which a table without the ITL columns never does.
    itl_p50_sketch: str | dict[str, Any] | None = field(default=None, repr=False)
    itl_p99_sketch: str | dict[str, Any] | None = field(default=None, repr=False)
    price_per_gpu_hour: float | None = None

    @property
    def route(self) -> str:
        return self.series.route

    @property
    def target_model(self) -> str:
        return self.series.target_model

    @property
    def target_revision(self) -> str:
        return self.series.target_revision

    @property
    def target_tokenizer(self) -> str:
        return self.series.target_tokenizer

    @property
    def draft_model(self) -> str:
        return self.series.draft_model

    @property
    def draft_revision(self) -> str:
        return self.series.draft_revision

    @property
    def draft_tokenizer(self) -> str:
        return self.series.draft_tokenizer

    @property
    def method(self) -> str:
        return self.series.method

    @property
    def num_speculative_tokens(self) -> int:
        return self.series.num_speculative_tokens

    @property
    def itl_p50_ms(self) -> float | None:
        return _stored_quantile(self.itl_p50_sketch, 0.5)

    @property
    def itl_p99_ms(self) -> float | None:
        return _stored_quantile(self.itl_p99_sketch, 0.99)

    @property
    def acceptance_rate(self) -> float | None:
        """accepted / drafted, token-weighted; ``None`` when nothing was drafted."""
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else None

    @property
    def cost_per_success(self) -> float | None:
        """Cost per successful task at :attr:`price_per_gpu_hour` (``None``: no price, or no
        success)."""
        return cost_per_success(self.gpu_seconds_per_success, self.price_per_gpu_hour)

    @property
    def mean_accepted_length(self) -> float | None:
        """1 + accepted / verify_steps; ``None`` without verification steps."""
        return 1.0 + self.accepted_tokens / self.verify_steps if self.verify_steps else None

    def sort_key(self) -> tuple[Any, ...]:
        return (self.bucket_start, *self.series)


def _stored_quantile(stored: str | dict[str, Any] | None, q: float) -> float | None:
    return quantile_of(orjson.loads(stored) if isinstance(stored, str) else stored, q)


def _check_layout() -> None:
    from dataclasses import fields

    names = tuple(f.name for f in fields(RatioRow))
    if names != _ROW_LAYOUT:  # a field added or moved: ratio_table would mislabel values
        raise AssertionError(f"RatioRow fields {names} differ from {_ROW_LAYOUT}")


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

# Above this many series a route's rows are read in one pass over the time range rather than
# one primary-key range per series (each range is a query's round trip).
PER_SERIES_MAX = 2000


def series_of(conn: Connection, route: str | None) -> dict[int, SeriesKey]:
    """The stored series (of ``route``), by id: read once, so that the rollup rows need not
    carry their nine key columns each (a route's 30 days of hours repeat each key 720 times)."""
    s = series_table.c
    stmt = select(s.id, *_KEY_COLUMNS)
    if route is not None:
        stmt = stmt.where(s.route == route)
    return {row[0]: SeriesKey(*row[1:]) for row in conn.execute(stmt)}


def _in_range(columns: Sequence[Any], granularity: str, since: datetime | None,
              until: datetime | None, start: Any = None) -> Select[Any]:
    check_range(granularity, since, until)
    r = rollups_table.c
    stmt = select(r.series_id, r.bucket_start if start is None else start, *columns).where(
        r.granularity == granularity)
    if since is not None:
        stmt = stmt.where(r.bucket_start >= since)
    if until is not None:
        stmt = stmt.where(r.bucket_start < until)
    return stmt


def per_series_statement(columns: Sequence[Any], granularity: str, since: datetime | None,
                         until: datetime | None, start: Any = None) -> Select[Any]:
    """``(series_id, bucket_start, *columns)`` of one series' rows in the range, by start;
    the series id is the bound parameter ``sid``: a range of the primary key. ``start``
    replaces the ``bucket_start`` column (:data:`RAW_START`)."""
    r = rollups_table.c
    return (_in_range(columns, granularity, since, until, start)
            .where(r.series_id == bindparam("sid")).order_by(r.bucket_start))


def rollup_batches(
    conn: Connection,
    columns: Sequence[Any],
    granularity: str,
    series: Mapping[int, SeriesKey],
    route: str | None,
    since: datetime | None,
    until: datetime | None,
    start: Any = None,
    *,
    tuples: bool = False,
) -> Iterator[tuple[SeriesKey, Sequence[Any]]]:
    """``(series_id, bucket_start, *columns)`` of the rollup rows of ``series`` in the range,
    a list of them per series key: for a route, one primary-key range (granularity,
    series, start) per series, in series order and by start; without one, one pass over
    the range by the (granularity, start) index. Not sorted across series. ``start``
    replaces the ``bucket_start`` column (:data:`RAW_START`). A list per series, fetched at
    once, rather than a row at a time: a route's 30 days of hours are 28,800 rows.
    ``tuples``: rows read by position only, so plain tuples will do (a route's ranges are
    then sent at once on PostgreSQL: :mod:`monitor.store.pipelined`)."""
    stmt = _in_range(columns, granularity, since, until, start)
    if route is None or len(series) > PER_SERIES_MAX:
        by_id: dict[int, list[Any]] = {}
        for row in conn.execute(stmt).all():
            if row[0] in series:
                by_id.setdefault(row[0], []).append(row)
        for sid, rows in by_id.items():
            yield series[sid], rows
        return
    # One statement, compiled once, run per series (sent all at once on PostgreSQL).
    per_series = per_series_statement(columns, granularity, since, until, start)
    sids = sorted(series)
    batches = rows_per_value(conn, per_series, "sid", sids, tuples=tuples)
    for sid, rows in zip(sids, batches, strict=True):
        yield series[sid], rows


# RatioRow's fields in the order ratio_table builds them positionally (a keyword call per
# row builds and unpacks a dict of 34 entries).
_ROW_LAYOUT = ("bucket_start", "granularity", "series", *_RATIO_COUNTERS,
               "itl_p50_sketch", "itl_p99_sketch", "price_per_gpu_hour")


def ratio_table(
    conn: Connection,
    granularity: str,
    route: str | None,
    since: datetime | None,
    until: datetime | None,
    price_per_gpu_hour: float | None = None,
    sketches: Sequence[str] = (),
    fields: Collection[str] | None = None,
) -> tuple[list[RatioRow], RowSketches]:
    """Ratio rows, sorted, and per row the stored sketches ``sketches`` (of
    :data:`SKETCHES`) that a table's quantile columns read, in one pass over the rows.

    ``fields`` (:func:`fields_for` a table's columns): the only counters and ITL sketches of
    :class:`RatioRow` read; the rows hold ``None`` for the others (so that anything reading
    one fails rather than shows a wrong number). None: every field."""
    _check_sketches(sketches)
    check_range(granularity, since, until)
    r = rollups_table.c

    def wanted(field: str, column: Any) -> Any:
        # NULL for a field not read: the row's layout stays, its stored value is not read.
        return column if fields is None or field in fields else null().label(field)

    # Every column as the driver gives it: the start and the sketches skip SQLAlchemy's
    # per-row result processing (a route's 30 days are 28,800 rows); the start is converted
    # once per distinct value below, the sketches decoded only when a quantile is read.
    columns = [*(wanted(name, r[name]) for name in _RATIO_COUNTERS),
               *(wanted(f"{n[:-3]}_sketch", cast(r[n], Text))
                 for n in ("itl_p50_ms", "itl_p99_ms")),
               *(cast(r[n], Text) for n in sketches)]
    series = series_of(conn, route)
    # Sorted by key here rather than in SQL: string order must not depend on the server's
    # collation. Rows sort by (start, rank of their series), never comparing keys per row.
    rank = {key: i for i, key in enumerate(sorted(series.values()))}
    p50 = 2 + len(_RATIO_COUNTERS)
    p99 = p50 + 1
    # Each row's sorting key, the row, and the driver's row (its sketches' texts after p99).
    keyed: list[tuple[datetime, int, RatioRow, Any]] = []
    starts = _Starts()
    for key, batch in rollup_batches(conn, columns, granularity, series, route, since, until,
                                     RAW_START, tuples=True):
        made = _ratio_rows(batch, starts, granularity, key, price_per_gpu_hour)
        order = rank[key]
        keyed += [(r.bucket_start, order, r, row) for r, row in zip(made, batch, strict=True)]
    keyed.sort(key=_START_AND_RANK)
    rows = [t[2] for t in keyed]
    # Each sketch's texts in the rows' order: the driver's rows are not kept.
    texts: dict[str, list[Any]] = {}
    for j, name in enumerate(sketches):
        texts[name] = [t[3][p99 + 1 + j] for t in keyed]
    return rows, RowSketches(rows, texts)


class RowSketches(Mapping[tuple[SeriesKey, datetime], "Sketches"]):
    """The stored sketches ``names`` of each row :func:`ratio_table` read, by (series,
    start): each row's :class:`Sketches`, made on the first lookup. A table of those very
    rows reads each sketch's column of texts instead (:meth:`texts`): 28,800 rows' mapping
    entries are not made at all."""

    def __init__(self, rows: list[RatioRow], texts: Mapping[str, list[Any]]) -> None:
        """``texts``: each sketch's stored text (or None) of each of ``rows``, by name."""
        self.names = tuple(texts)
        self._rows = rows
        self._texts = texts
        self._made: dict[tuple[SeriesKey, datetime], Sketches] | None = None

    def _mapping(self) -> dict[tuple[SeriesKey, datetime], Sketches]:
        made = self._made
        if made is None:
            made = {}
            if self.names:
                names = self.names
                made = {(r.series, r.bucket_start): Sketches({
                    n: StoredSketch(t) for n, t in zip(names, row_texts, strict=True)})
                    for r, *row_texts in zip(self._rows, *self._texts.values(), strict=True)}
            self._made = made
        return made

    def __getitem__(self, key: tuple[SeriesKey, datetime]) -> Sketches:
        return self._mapping()[key]

    def __iter__(self) -> Iterator[tuple[SeriesKey, datetime]]:
        return iter(self._mapping())

    def __len__(self) -> int:
        return len(self._mapping())

    def __bool__(self) -> bool:  # without making the mapping
        return bool(self.names and self._rows)

    def texts(self, rows: Sequence[RatioRow], name: str) -> list[Any] | None:
        """Sketch ``name``'s stored text of each of ``rows``, when they are the rows read
        with it (the same objects, in the same order); else None."""
        if name not in self._texts or len(rows) != len(self._rows) or not all(
                map(operator.is_, rows, self._rows)):
            return None
        return self._texts[name]


class _Made(Sequence[Any]):
    """``make(v)`` of each value of ``values`` (None stays None), made when asked for: what
    :class:`SketchColumn` falls back to for a text not in the store's layout."""

    def __init__(self, values: Sequence[Any], make: Callable[[Any], Any]) -> None:
        self._values = values
        self._make = make

    def __len__(self) -> int:
        return len(self._values)

    def __getitem__(self, i: Any) -> Any:
        make = self._make
        if isinstance(i, slice):
            return [None if v is None else make(v) for v in self._values[i]]
        v = self._values[i]
        return None if v is None else make(v)


# RatioRow's slots, in _ROW_LAYOUT order: each field's setter (what the frozen dataclass's
# __init__ reaches through object.__setattr__).
_SETTERS = tuple(RatioRow.__dict__[name].__set__ for name in _ROW_LAYOUT)
_VALUES = tuple(operator.itemgetter(i) for i in range(2, 3 + len(_RATIO_COUNTERS) + 1))


def _ratio_rows(batch: Sequence[Any], starts: Mapping[Any, datetime], granularity: str,
                key: SeriesKey, price_per_gpu_hour: float | None) -> list[RatioRow]:
    """``RatioRow(starts[row[1]], granularity, key, *row[2:], price_per_gpu_hour)`` of each
    driver row ``(series_id, raw start, *counters, itl_p50, itl_p99, ...)``, made a field at a
    time over all rows: one C-level pass per field (a series' 720 hours) costs less than 25
    attribute calls per row through the dataclass's __init__."""
    rows = list(map(object.__new__, itertools.repeat(RatioRow, len(batch))))
    setters = iter(_SETTERS)
    for values in (map(starts.__getitem__, map(_RAW_START_OF, batch)),
                   itertools.repeat(granularity), itertools.repeat(key),
                   *(map(get, batch) for get in _VALUES),
                   itertools.repeat(price_per_gpu_hour)):
        _consume(map(next(setters), rows, values), 0)
    if next(setters, None) is not None:  # a field left unset would read as missing
        raise AssertionError("RatioRow has more fields than ratio_table sets")
    return rows


_RAW_START_OF = operator.itemgetter(1)
_consume = collections.deque


# ``bucket_start`` as the driver returns it: SQLite's text, PostgreSQL's aware datetime.
RAW_START = type_coerce(rollups_table.c.bucket_start, String).label("bucket_start")


class _Starts(dict[Any, datetime]):
    """Raw start -> aware UTC datetime, as :class:`~monitor.store.coltypes.UTCDateTime`
    reads it, each distinct value converted once (a route's rows share their hours)."""

    def __missing__(self, raw: Any) -> datetime:
        value = self[raw] = utc_start(raw)
        return value


def utc_start(raw: str | datetime) -> datetime:
    """A stored start as an aware UTC datetime.

    >>> utc_start("2026-11-01 05:00:00.000000")
    datetime.datetime(2026, 11, 1, 5, 0, tzinfo=datetime.timezone.utc)
    """
    value = datetime.fromisoformat(raw) if isinstance(raw, str) else raw
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


_START_AND_RANK = operator.itemgetter(0, 1)


_check_layout()


def _check_sketches(names: Sequence[str]) -> None:
    unknown = set(names) - set(SKETCHES)
    if unknown:
        raise ValueError(f"unknown sketch {sorted(unknown)}; known: {', '.join(SKETCHES)}")


class StoredSketch:
    """A sketch as stored (its JSON form, or that form's text), for reading quantiles off
    without building the histogram."""

    __slots__ = ("_data", "_running")

    def __init__(self, data: str | dict[str, Any] | None) -> None:
        self._data = data
        self._running: list[int] | None = None

    @property
    def raw(self) -> str | dict[str, Any] | None:
        """As read: the stored text, until a quantile decoded it."""
        return self._data

    @property
    def data(self) -> dict[str, Any] | None:
        data = self._data
        if isinstance(data, str):  # decoded on the first read, once
            data = self._data = orjson.loads(data)
        return data

    def quantile(self, q: float) -> float | None:
        data = self.data
        if not data or not data["n"] or not 0.0 <= q <= 1.0:
            return quantile_of(data, q)
        # A table reads two quantiles (p50, p99) of each sketch: the running counts that
        # quantile_of builds for each are built once here.
        running = self._running
        if running is None:
            running = self._running = list(itertools.accumulate(data["c"]))
        rank = q * (int(data["n"]) - 1) - int(data["z"])
        if rank < 0:
            return 0.0
        keys = data["k"]
        i = bisect.bisect_right(running, rank)
        gamma = (1.0 + data["a"]) / (1.0 - data["a"])
        return 2.0 * gamma ** (keys[i] if i < len(keys) else max(keys)) / (gamma + 1.0)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LogHistogram):
            return LogHistogram.from_json(self.data) == other
        return isinstance(other, StoredSketch) and self.data == other.data

    __hash__ = None  # type: ignore[assignment]


class Sketches:
    """Some of a bucket's latency sketches, by name (``ttft_ms``...), as attributes with a
    ``quantile``: what a table's quantile columns read, without decoding the rest of the
    row or the sketches themselves."""

    def __init__(self, sketches: Mapping[str, StoredSketch]) -> None:
        self.__dict__.update(sketches)


def bucket_rows(
    conn: Connection,
    granularity: str,
    route: str | None,
    since: datetime | None,
    until: datetime | None,
) -> Iterator[tuple[SeriesKey, datetime, BucketStats]]:
    """Each row's statistics, by bucket start, then series id: read as :func:`ratio_table`
    reads (the series' keys once, a primary-key range per series of a route)."""
    r = rollups_table.c
    values = [r[name] for name in (*COUNTERS, *FLOATS, "per_position", *SKETCHES)]
    series = series_of(conn, route)
    rows = [(key, row) for key, batch in rollup_batches(
        conn, values, granularity, series, route, since, until) for row in batch]
    rows.sort(key=lambda kr: (kr[1][1], kr[1][0]))
    for key, row in rows:
        yield key, row.bucket_start, BucketStats.from_row(row)


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


# Routes and model names repeat on every row of their series.
_display_cached = functools.lru_cache(maxsize=4096)(lambda s: _display(s))


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
    if s.isascii():
        return len(s)  # nearly every cell: _display has escaped the control characters
    return _wide_width(s)


@functools.lru_cache(maxsize=4096)  # pair labels ("…"), routes: one per series, many rows
def _wide_width(s: str) -> int:
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
    """Every field, headed by its name (``specwatch ratios --wide``)."""
    numeric = {*_RATIO_COUNTERS, "num_speculative_tokens", *_DERIVED}
    body = ([_table_value(r, c) for c in COLUMNS] for r in rows)
    return _aligned(COLUMNS, [c in numeric for c in COLUMNS], body)


# --- the terminal table: chosen columns --------------------------------------------------

# One bucket of one series, the latency sketches behind the ttft/e2e/decode columns: a
# BucketStats, or the Sketches that ``ratio_table`` reads (only those the columns need).
Latency = Mapping[tuple[SeriesKey, datetime], BucketStats | Sketches]


@dataclass(frozen=True, slots=True)
class _Column:
    heading: str
    value: Callable[[RatioRow, Any], str]
    numeric: bool = False
    sketch: str | None = None  # the bucket sketch it reads (a second read), if any
    # The whole column at once (rows, and each row's latency sketches): the same text as
    # ``value`` per row, made with fewer calls per cell.
    cells: Callable[[Sequence[RatioRow], Sequence[Any]], list[str]] | None = None

    @property
    def latency(self) -> bool:
        return self.sketch is not None

    def column(self, rows: Sequence[RatioRow], stats: Sequence[Any]) -> list[str]:
        if self.cells is not None:
            return self.cells(rows, stats)
        value = self.value
        return [value(r, s) for r, s in zip(rows, stats, strict=True)]


def _bucket(row: RatioRow, _: BucketStats | None) -> str:
    return _bucket_text(row.bucket_start)


def _buckets(rows: Sequence[RatioRow], _: Sequence[Any]) -> list[str]:
    return list(map(_bucket_text, map(_get_start, rows)))


_get_start = operator.attrgetter("bucket_start")


@functools.lru_cache(maxsize=4096)  # a table's rows share a few hundred bucket starts
def _bucket_text(start: datetime) -> str:
    # Buckets start on whole minutes; Python reads this form back (--since 2026-11-02T22:00Z).
    text = rfc3339(start)
    return text[:-4] + "Z" if text.endswith(":00Z") else text


def _short_model(name: str) -> str:
    return name.rsplit("/", 1)[-1]  # "meta-llama/Llama-3.1-8B" -> "Llama-3.1-8B"


def short_pair(target_model: str, draft_model: str, method: str, k: int,
               width: int = 42, tag: str = "") -> str:
    """``target/draft`` for a narrow column: organisations dropped, the draft's leading words
    that repeat the target's elided, ``tag`` added, the middle cut when still wider than
    ``width``.

    >>> short_pair("Qwen/qwen2.5-coder-32b-instruct", "Qwen/qwen2.5-coder-0.5b-instruct", "", 5)
    'qwen2.5-coder-32b-instruct/…0.5b-instruct'
    >>> short_pair("llama-3.1-70b-instruct", "", "ngram", 4)
    'llama-3.1-70b-instruct/ngram'
    >>> short_pair("llama-3.1-70b-instruct", "", "", 0)
    'llama-3.1-70b-instruct (no speculation)'
    >>> short_pair("a" * 30, "b" * 30, "", 3, width=20)
    'aaaaaaaaa…bbbbbbbbbb'
    >>> short_pair("llama-3.1-70b-instruct", "llama-3.2-1b-instruct", "", 3, tag=" @2026-12-01")
    'llama-3.1-70b-instru…-instruct @2026-12-01'
    """
    target = _short_model(target_model)
    if draft_model:
        draft = _short_model(draft_model)
        t_words, d_words = target.split("-"), draft.split("-")
        same = 0
        while same < min(len(t_words), len(d_words) - 1) and t_words[same] == d_words[same]:
            same += 1
        pair = f"{target}/" + ("…" if same else "") + "-".join(d_words[same:])
    elif method or k:
        pair = f"{target}/{method or 'draft'}"
    else:
        pair = f"{target} (no speculation)"
    pair += tag
    if len(pair) <= width:
        return pair
    head = (width - 1) // 2
    return pair[:head] + "…" + pair[len(pair) - (width - 1 - head):]


def _quantile(heading: str, sketch: str, q: float, spec: str, unit: str = "") -> _Column:
    def value(_: RatioRow, stats: Any) -> str:
        v = None if stats is None else getattr(stats, sketch).quantile(q)
        return "-" if v is None else format(v, spec) + unit

    def cells(_: Sequence[RatioRow], column: SketchColumn) -> list[str]:
        values = column.quantiles(q)
        distinct = set(values)
        if 0.0 in distinct:  # 0.0 and -0.0 are one key, not one text
            return ["-" if v is None else format(v, spec) + unit for v in values]
        # A column's quantiles are a few hundred bucket values: each formatted once.
        texts = {v: "-" if v is None else format(v, spec) + unit for v in distinct}
        return list(map(texts.__getitem__, values))

    return _Column(heading, value, numeric=True, sketch=sketch, cells=cells)


def _field(name: str, heading: str | None = None) -> _Column:
    get = operator.attrgetter(name)

    def value(row: RatioRow, _: BucketStats | None) -> str:
        # The common cell types first, without _text_value's checks: every cell of a long
        # table comes through here.
        v = get(row)
        kind = type(v)
        if kind is int:
            return str(v)
        if kind is float:
            return f"{v:.3f}"
        if kind is str:
            return _display_cached(v)
        if v is None:
            return "-"
        return _display(_text_value(row, name))

    def cells(rows: Sequence[RatioRow], _: Sequence[Any]) -> list[str]:
        # A column holds one or two kinds (counts; rates or None; strings): each kind's
        # text made by one call over the column, any other column cell by cell.
        values = list(map(get, rows))
        kinds = set(map(type, values))
        if kinds == {int}:
            return list(map(str, values))
        if kinds <= {float, type(None)}:
            return ["-" if v is None else f"{v:.3f}" for v in values]
        if kinds == {str}:
            return list(map(_display_cached, values))
        return [value(r, None) for r in rows]

    numeric = name in _RATIO_COUNTERS or name in _DERIVED or name == "num_speculative_tokens"
    return _Column(heading or name, value, numeric=numeric, cells=cells)


# Short headings where the field name is much wider than its values.
_HEADINGS = {"num_speculative_tokens": "k", "acceptance_rate": "accept",
             "mean_accepted_length": "acc_len"}
TABLE_COLUMNS: dict[str, _Column] = {
    "bucket_start": _Column("bucket", _bucket, cells=_buckets),
    **{name: _field(name, _HEADINGS.get(name)) for name in COLUMNS[1:]},
    "pair": _Column("pair", lambda r, _: _display(short_pair(
        r.target_model, r.draft_model, r.method, r.num_speculative_tokens))),
    "ttft_p50": _quantile("ttft_p50", "ttft_ms", 0.5, ".0f", "ms"),
    "ttft_p99": _quantile("ttft_p99", "ttft_ms", 0.99, ".0f", "ms"),
    "e2e_p50": _quantile("e2e_p50", "e2e_ms", 0.5, ".0f", "ms"),
    "e2e_p99": _quantile("e2e_p99", "e2e_ms", 0.99, ".0f", "ms"),
    "decode_tps_p50": _quantile("decode_tps_p50", "decode_tps", 0.5, ".1f"),
}
# A heading names its column too: what the table shows can be asked for by what it says.
_ALIASES = {c.heading: name for name, c in TABLE_COLUMNS.items() if c.heading != name}
# The common question in about 120 terminal columns: which pair on which route, at what
# draft length, how much traffic, how much is accepted, and what it costs in TTFT.
NARROW_COLUMNS = ("bucket_start", "route", "pair", "num_speculative_tokens", "requests",
                  "acceptance_rate", "ttft_p50", "ttft_p99")


def table_columns(spec: str) -> tuple[str, ...]:
    """``"route,k,accept"`` -> column names; ``ValueError`` naming the valid ones.

    >>> table_columns("route, k,ttft_p99")
    ('route', 'num_speculative_tokens', 'ttft_p99')
    """
    names = [n.strip() for n in spec.split(",") if n.strip()]
    unknown = [n for n in names if n not in TABLE_COLUMNS and n not in _ALIASES]
    if unknown or not names:
        valid = ", ".join(c.heading if c.heading != n else n for n, c in TABLE_COLUMNS.items())
        what = f"unknown column {', '.join(map(repr, unknown))}" if unknown else "no column"
        raise ValueError(f"{what}; valid: {valid} (or a JSON field name)")
    return tuple(_ALIASES.get(n, n) for n in names)


def needs_latency(columns: Iterable[str]) -> bool:
    """Whether ``columns`` show quantiles: the caller reads the buckets' sketches for them."""
    return bool(sketches_for(columns))


def sketches_for(columns: Iterable[str]) -> tuple[str, ...]:
    """The bucket sketches ``columns`` read (for :func:`ratio_table`), in column order.

    >>> sketches_for(NARROW_COLUMNS)
    ('ttft_ms',)
    """
    names = (TABLE_COLUMNS[c].sketch for c in columns)
    return tuple(dict.fromkeys(n for n in names if n is not None))


# The RatioRow fields each derived table column reads (a column named after a field reads
# that field; the series key, the start and the granularity are always read).
_DERIVED_FROM: dict[str, tuple[str, ...]] = {
    "acceptance_rate": ("accepted_tokens", "drafted_tokens"),
    "mean_accepted_length": ("accepted_tokens", "verify_steps"),
    "success_rate": ("successes", "requests"),
    "ok_rate": ("outcome_ok_true", "outcome_ok_reported"),
    "schema_valid_rate": ("schema_valid_true", "schema_valid_reported"),
    "tool_calls_valid_rate": ("tool_calls_valid_true", "tool_calls_valid_reported"),
    "gpu_seconds_estimated_share": ("requests", "gpu_reported_requests"),
    "gpu_seconds_per_success": ("successes", "gpu_seconds"),
    "successes_per_gpu_second": ("successes", "gpu_seconds"),
    "cost_per_success": ("successes", "gpu_seconds"),
    "itl_p50_ms": ("itl_p50_sketch",),
    "itl_p99_ms": ("itl_p99_sketch",),
}
# What a table of any columns reads whatever they are: not a counter or a stored sketch.
_ALWAYS_READ = frozenset({"bucket_start", "pair", *SeriesKey._fields, "granularity"})


_NO_COLUMN = _Column("", lambda r, s: "")


def fields_for(columns: Iterable[str]) -> frozenset[str] | None:
    """The :class:`RatioRow` counters and ITL sketches that ``columns`` (of
    :data:`TABLE_COLUMNS`) show, for :func:`ratio_table`'s ``fields``; None (every field)
    when a column is not known to read only those.

    >>> sorted(fields_for(NARROW_COLUMNS))
    ['accepted_tokens', 'drafted_tokens', 'requests']
    """
    out: set[str] = set()
    for c in columns:
        if c in _ALWAYS_READ or TABLE_COLUMNS.get(c, _NO_COLUMN).sketch is not None:
            continue
        if c in _DERIVED_FROM:
            out.update(_DERIVED_FROM[c])
        elif c in _RATIO_COUNTERS:
            out.add(c)
        else:
            return None
    return frozenset(out)


def _aligned(headings: Sequence[str], numeric: Sequence[bool],
             body: Iterable[Sequence[str]]) -> str:
    return _aligned_columns(numeric, list(zip(*[list(headings), *body], strict=True)))


def _aligned_columns(numeric: Sequence[bool], columns: Sequence[Sequence[str]]) -> str:
    """Columns of cells (each headed by its heading) as aligned lines."""
    # Column by column: a column of ASCII cells (nearly all of them) is measured and padded
    # by str's own methods; only a column holding wide or combining characters pays for
    # measuring each cell in terminal columns.
    padded = []
    for is_num, column in zip(numeric, columns, strict=True):
        if "".join(column).isascii():
            w = max(map(len, column))
            padded.append(list(map(str.rjust if is_num else str.ljust, column,
                                   itertools.repeat(w))))
            continue
        # Such a column (pairs with "…", routes in other scripts) repeats a few values:
        # each distinct one measured and padded once.
        widths = {c: _width(c) for c in set(column)}
        w = max(widths.values())
        pad = {c: " " * (w - cw) + c if is_num else c + " " * (w - cw)
               for c, cw in widths.items()}
        padded.append(list(map(pad.__getitem__, column)))
    if not padded:
        return "\n"
    lines = zip(*padded, strict=True)
    # Each line without its trailing whitespace: only the last column can leave any, and
    # when none of its cells ends in whitespace no line has any to strip.
    last = padded[-1]
    ends = "".join(map(operator.itemgetter(-1), last)) if all(last) else " "
    if "".join(ends.split()) == ends:
        return "\n".join(map("  ".join, lines)) + "\n"
    return "\n".join("  ".join(line).rstrip() for line in lines) + "\n"


def _pair_labels(rows: Iterable[RatioRow]) -> dict[SeriesKey, str]:
    """Each series' pair; where two series of a route and draft length would read the same,
    the revisions that differ (else the tokenizers) tell them apart."""
    plain: dict[SeriesKey, str] = {}
    alike: dict[tuple[str, int, str], set[SeriesKey]] = {}
    for r in rows:
        key = r.series
        if key not in plain:
            plain[key] = short_pair(r.target_model, r.draft_model, r.method,
                                    r.num_speculative_tokens)
            alike.setdefault((key.route, key.num_speculative_tokens, plain[key]), set()).add(key)
    labels = {}
    for (_, _, _text), keys in alike.items():
        for key in keys:
            tag = ""
            if len(keys) > 1:
                differ = [f"@{key.target_revision}"] if len(
                    {k.target_revision for k in keys}) > 1 else []
                if len({k.draft_revision for k in keys}) > 1:
                    differ.append(f"draft@{key.draft_revision}")
                tag = " " + (" ".join(differ) or
                             f"{key.target_tokenizer}/{key.draft_tokenizer or key.method}")
            labels[key] = _display(short_pair(key.target_model, key.draft_model, key.method,
                                              key.num_speculative_tokens, tag=tag))
    return labels


def _chosen_table(rows: Sequence[RatioRow], columns: Sequence[str], latency: Latency) -> str:
    cols = [TABLE_COLUMNS[name] for name in columns]
    if "pair" in columns:
        pairs = _pair_labels(rows)
        cols = [replace(c, value=lambda r, _: pairs[r.series],
                        cells=lambda rs, _: [pairs[r.series] for r in rs])
                if name == "pair" else c for name, c in zip(columns, cols, strict=True)]
    stats: Sequence[Any] = [None] * len(rows)
    # A quantile column reads its sketches' column, parsed once for p50 and p99 alike.
    names = dict.fromkeys(c.sketch for c in cols if c.sketch)
    sketches: dict[str, SketchColumn] = {}
    if isinstance(latency, RowSketches):  # ratio_table's: the texts, row by row, as read
        for name in names:
            texts = latency.texts(rows, name)
            if texts is None:
                break
            sketches[name] = SketchColumn(texts, _Made(texts, StoredSketch))
        else:
            names = {}
    if names and latency:
        stats = [latency.get((r.series, r.bucket_start)) for r in rows]
    sketches.update((name, _sketch_column(stats, name)) for name in names)
    return _aligned_columns([c.numeric for c in cols], [
        [c.heading, *c.column(rows, stats if c.sketch is None else sketches[c.sketch])]
        for c in cols])


def _sketch_column(stats: Sequence[Any], name: str) -> SketchColumn:
    sketches = [None if s is None else getattr(s, name) for s in stats]
    return SketchColumn([s.raw if isinstance(s, StoredSketch) else None for s in sketches],
                        sketches)


def format_ratios(rows: Iterable[RatioRow], fmt: str, *, columns: Sequence[str] | None = None,
                  latency: Latency | None = None) -> str:
    """``rows`` as ``table`` (aligned text), ``json`` (one array) or ``csv`` (with a header).

    JSON and CSV always carry every field. The table shows every field too, unless
    ``columns`` (names of :data:`TABLE_COLUMNS`, e.g. :data:`NARROW_COLUMNS`) picks some;
    quantile columns read ``latency`` (``Store.buckets`` of the same range) and show ``-``
    for a bucket it lacks.
    """
    with collector_paused():  # every row's cells at once (see monitor/heap.py)
        return _format_ratios(list(rows), fmt, columns, latency)


def _format_ratios(rows: list[RatioRow], fmt: str, columns: Sequence[str] | None,
                   latency: Latency | None) -> str:
    if fmt == "json":
        # One array, one object per line: valid JSON that still diffs and greps by row.
        objs = _json_objects(rows)
        return "[\n" + ",\n".join(objs) + "\n]\n" if objs else "[]\n"
    if fmt == "csv":
        return _csv(rows)
    if fmt == "table":
        return _table(rows) if columns is None else _chosen_table(rows, columns, latency or {})
    raise ValueError(f"format must be one of {', '.join(FORMATS)}: {fmt!r}")


# --- JSON and CSV of many rows -------------------------------------------------------------
# A route's 30 days of hours are 28,800 rows of 42 fields: what varies by row is the start
# and the numbers; the series key and the granularity repeat over a series' rows, so their
# text is made once per series and each row fills in its numbers.

_SERIES_FIELDS = frozenset(SeriesKey._fields) | {"granularity"}
# The fields that vary by row, bucket_start aside, in COLUMNS order.
_NUMBERS = tuple(c for c in COLUMNS[1:] if c not in _SERIES_FIELDS)
# The ITL quantiles close every row (COLUMNS' last two): read for all rows at once
# (_itl_quantiles), the other numbers row by row.
_ITL = (("itl_p50_sketch", 0.5), ("itl_p99_sketch", 0.99))
assert COLUMNS[-2:] == _NUMBERS[-2:] == ("itl_p50_ms", "itl_p99_ms")
_get_numbers = operator.attrgetter(*_NUMBERS[:-2])


class _Decoded:
    """A row's stored ITL sketch read as its property reads it (:func:`_stored_quantile`):
    what :class:`SketchColumn` falls back to for a sketch not in the store's text layout."""

    __slots__ = ("_stored",)

    def __init__(self, stored: str | dict[str, Any]) -> None:
        self._stored = stored

    def quantile(self, q: float) -> float | None:
        return _stored_quantile(self._stored, q)


def _itl_quantiles(rows: Sequence[RatioRow]) -> Iterator[tuple[float | None, float | None]]:
    """Each row's ``(itl_p50_ms, itl_p99_ms)``, the same values as its properties, from
    each sketch column parsed at once (:class:`SketchColumn`) rather than each sketch
    decoded by orjson and read by quantile_of."""
    columns = []
    for name, q in _ITL:
        stored = list(map(operator.attrgetter(name), rows))
        try:
            distinct = list(dict.fromkeys(stored))
        except TypeError:  # a decoded sketch (a dict) among them
            distinct = stored
        if len(distinct) * 2 > len(stored):
            columns.append(SketchColumn(stored, _Made(stored, _Decoded)).quantiles(q))
            continue
        # Mostly repeated texts (a route without ITL reports: one empty sketch's text on
        # every row): each distinct text read once.
        values = dict(zip(distinct, SketchColumn(distinct, _Made(distinct, _Decoded))
                          .quantiles(q), strict=True))
        columns.append(list(map(values.__getitem__, stored)))
    return zip(*columns, strict=True)


def _json_objects(rows: Sequence[RatioRow]) -> list[str]:
    """Each row as ``json.dumps({c: _json_value(r, c) for c in COLUMNS},
    ensure_ascii=False)`` writes it, byte for byte, from a per-series template: ``%s`` of an
    int or a finite float is its JSON text (``str`` of a float is its ``repr``, as in
    ``json``); None and the non-finite floats are spelled out first."""
    templates: dict[tuple[SeriesKey, str], str] = {}
    starts: dict[datetime, str] = {}
    out = []
    for r, itl in zip(rows, _itl_quantiles(rows), strict=True):
        series = (r.series, r.granularity)
        template = templates.get(series)
        if template is None:
            template = templates[series] = _json_template(r)
        start = starts.get(r.bucket_start)
        if start is None:
            start = starts[r.bucket_start] = json.dumps(rfc3339(r.bucket_start))
        out.append(template % (start, *[
            "null" if v is None else v if v.__class__ is not float or v - v == 0.0
            else json.dumps(v) for v in _get_numbers(r) + itl]))
    return out


def _json_template(row: RatioRow) -> str:
    """``row``'s JSON object with ``%s`` for its start and numbers, its series' text in
    place (``%`` in it doubled)."""
    parts = []
    for c in COLUMNS:
        if c in _SERIES_FIELDS:
            text = json.dumps(_json_value(row, c), ensure_ascii=False).replace("%", "%%")
        else:
            text = "%s"
        parts.append(f"{json.dumps(c)}: {text}")
    return "{" + ", ".join(parts) + "}"


_get_fields = operator.attrgetter(*COLUMNS[1:-2])  # the ITL quantiles: _itl_quantiles


def _csv(rows: Sequence[RatioRow]) -> str:
    """The rows as CSV with a header. The writer spells each value as :func:`_text_value`
    does (``str``, a float's ``repr``, None as empty), so values go to it as they are."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    # The writer quotes a field holding "\n" but not a lone "\r", which every reader
    # takes for a line break: such rows are written fully quoted instead.
    quoted = csv.writer(buf, lineterminator="\n", quoting=csv.QUOTE_ALL)
    w.writerow(COLUMNS)
    writers: dict[tuple[SeriesKey, str], Any] = {}
    for r, itl in zip(rows, _itl_quantiles(rows), strict=True):
        series = (r.series, r.granularity)
        write = writers.get(series)
        if write is None:  # only the series' strings can hold a "\r"
            texts = [_text_value(r, c) for c in _SERIES_FIELDS]
            write = writers[series] = (quoted if any("\r" in v for v in texts) else w).writerow
        write((_bucket_rfc3339(r.bucket_start), *_get_fields(r), *itl))
    return buf.getvalue()


@functools.lru_cache(maxsize=4096)  # a table's rows share a few hundred bucket starts
def _bucket_rfc3339(start: datetime) -> str:
    return rfc3339(start)
