"""Executemany of a fixed statement without SQLAlchemy's per-row parameter handling.

A checkpoint over thousands of series writes tens of thousands of rows through a handful of
statements. ``Connection.execute(stmt, rows)`` spends most of its time per row, building
each parameter set by name and running every column's bind processor (the UTC datetime's
alone costs more than SQLite's insert). Here a statement is compiled once per dialect and
its SQL text reused; each row becomes a tuple in one C call, and only the columns whose type
has a bind processor run it: the same processors SQLAlchemy would call, so the database
receives exactly the values it received before. A datetime column's processor is memoised
per call, since a checkpoint's rows share few bucket starts; a JSON column is serialised by
the engine's serializer (``json_text``) mapped in C over the column, and passed as text
(what SQLite stores; PostgreSQL casts it, ``::JSON``, to the same value).

SQLite runs the tuples through the driver's executemany (one prepared statement, a C loop).
On PostgreSQL a plain INSERT (rows the caller knows are new: rollup rows it found missing
under lock) goes by COPY, the server's bulk path; one with ON CONFLICT by psycopg's
executemany (pipelined). A unique violation under COPY is the same race, and the same retry,
as under INSERT (``store._retryable``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import itemgetter
from typing import Any

import orjson
from sqlalchemy import JSON, Connection, Dialect
from sqlalchemy.sql.base import Executable

from monitor.jsonable import JSON_OPTIONS, json_text
from monitor.store.coltypes import UTCDateTime

__all__ = ["dialect_statement", "executemany"]


@dataclass(frozen=True, slots=True)
class _Plan:
    sql: str
    names: tuple[str, ...]  # the bound parameters, in the statement's order when positional
    values: Callable[[Mapping[str, Any]], tuple[Any, ...]]  # a row's values in that order
    # (position, column -> processed column): only the columns that have a bind processor
    processors: tuple[tuple[int, Callable[[Sequence[Any]], Sequence[Any]]], ...]
    copy: str | None  # PostgreSQL: COPY ... FROM STDIN for a plain INSERT


_JSON_FAST = JSON_OPTIONS | orjson.OPT_PASSTHROUGH_SUBCLASS
_PYFORMAT = re.compile(r"%\(([^)]+)\)s")
_PLANS: dict[tuple[Executable, str, str, tuple[str, ...]], _Plan] = {}


def _plan(dialect: Dialect, stmt: Executable, keys: tuple[str, ...]) -> _Plan:
    # The statement itself is in the key: module-level statements live as long as the
    # process, so neither the cache nor an id can go stale.
    cache_key = (stmt, dialect.name, dialect.driver, keys)
    plan = _PLANS.get(cache_key)
    if plan is not None:
        return plan
    # for_executemany: no implicit RETURNING of an autoincrement key
    compiled: Any = stmt.compile(dialect=dialect, column_keys=list(keys), for_executemany=True)
    if compiled.escaped_bind_names:
        raise ValueError("bulk statements take plain parameter names")
    sql: str = compiled.string
    copy = None
    if dialect.positional:
        names = tuple(compiled.positiontup)
    elif dialect.paramstyle == "pyformat":
        # Rewritten to positional %s: every dialect then takes the same tuples.
        names = tuple(_PYFORMAT.findall(sql))
        sql = _PYFORMAT.sub("%s", sql)
        if getattr(stmt, "is_insert", False) and getattr(stmt, "_post_values_clause",
                                                         None) is None:
            table: Any = stmt.table  # type: ignore[attr-defined]
            columns = ", ".join(dialect.identifier_preparer.quote(n) for n in names)
            copy = f"COPY {dialect.identifier_preparer.format_table(table)} ({columns}) " \
                "FROM STDIN"
    else:
        raise ValueError(f"unsupported paramstyle {dialect.paramstyle!r}")
    bind_types = {name: bind.type for name, bind in compiled.binds.items()}
    processors = tuple(
        (i, _column_processor(dialect, bind_types[name], proc))
        for i, name in enumerate(names)
        if (proc := compiled._bind_processors.get(name)) is not None
    )
    getter = itemgetter(*names)
    values: Callable[[Mapping[str, Any]], tuple[Any, ...]] = (
        getter if len(names) > 1 else lambda row: (getter(row),))
    plan = _PLANS[cache_key] = _Plan(sql, names, values, processors, copy)
    return plan


def _column_processor(dialect: Dialect, bind_type: Any, proc: Callable[[Any], Any]
                      ) -> Callable[[Sequence[Any]], Sequence[Any]]:
    """What runs ``proc`` over a column: the same values, with fewer Python calls."""
    if isinstance(bind_type, UTCDateTime):
        def memoised(column: Sequence[Any]) -> Sequence[Any]:
            done = {v: proc(v) for v in set(column)}
            return tuple(map(done.__getitem__, column))
        return memoised
    # JSON in the engine's own text form; only where that is all its processor does (a
    # None is JSON null, never SQL NULL). Subclasses pass through to a TypeError: then
    # the column goes through the processor itself (SQLAlchemy's JSON.NULL marker is an
    # int subclass, null() no JSON at all).
    if (isinstance(bind_type, JSON) and not bind_type.none_as_null
            and getattr(dialect, "_json_serializer", None) is json_text):
        def as_text(column: Sequence[Any]) -> Sequence[Any]:
            try:
                return tuple(map(bytes.decode, map(orjson.dumps, column, repeat(None),
                                                   repeat(_JSON_FAST))))
            except TypeError:
                return tuple(map(proc, column))
        return as_text
    return lambda column: tuple(map(proc, column))


def executemany(conn: Connection, stmt: Executable, rows: Sequence[Mapping[str, Any]]) -> None:
    """``conn.execute(stmt, rows)`` for rows that all have the same keys."""
    if not rows:
        return
    keys = tuple(rows[0])
    plan = _plan(conn.dialect, stmt, keys)
    if len(set(map(len, rows))) != 1:
        raise ValueError(f"bulk rows must share their keys: {sorted(keys)}")
    # Column by column: the transposes and the maps run in C, leaving one Python call per
    # processed value (and one per distinct datetime).
    params: list[tuple[Any, ...]] = list(map(plan.values, rows))
    if plan.processors:
        columns: list[Sequence[Any]] = list(zip(*params, strict=True))
        for i, process in plan.processors:
            columns[i] = process(columns[i])
        params = list(zip(*columns, strict=True))
    if plan.copy is None:
        conn.exec_driver_sql(plan.sql, params)
        return
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
    try:
        with cursor.copy(plan.copy) as copy:
            for p in params:
                copy.write_row(p)
    except Exception as e:
        # What conn.execute does with a driver error: a DBAPIError (the commit's retry
        # and unavailability checks read it), the connection invalidated on a disconnect.
        conn._handle_dbapi_exception(e, plan.copy, None, cursor, None)
    finally:
        cursor.close()


_STATEMENTS: dict[tuple[str, str], Executable] = {}


def dialect_statement(conn: Connection, name: str,
                      build: Callable[[Connection], Executable]) -> Executable:
    """The statement ``build`` makes for this connection's database, built once per name and
    database: :func:`executemany` caches its compiled form by statement."""
    key = (name, conn.dialect.name)
    stmt = _STATEMENTS.get(key)
    if stmt is None:
        stmt = _STATEMENTS[key] = build(conn)
    return stmt
