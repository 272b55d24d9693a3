"""Mapping series keys to ``series.id``: hashing, lookup and insert-if-missing."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import Connection, bindparam, case, or_, select, update
from sqlalchemy.sql.dml import Insert

from monitor.aggregate.series import SeriesKey
from monitor.store.bulk import dialect_statement, executemany
from monitor.store.exceptions import StoreError
from monitor.store.tables import series_table

# Bound parameters per IN list: far below SQLite's 32766 and psycopg's 65535 limits, large
# enough that a checkpoint needs only a handful of statements.
CHUNK = 1000

T = TypeVar("T")


def chunks(items: Sequence[T], size: int = CHUNK) -> Iterator[Sequence[T]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def dialect_insert(conn: Connection, table: Any) -> Insert:
    """An INSERT that supports ``on_conflict_*`` on this connection's database."""
    # Imported here: a reader never needs either dialect's INSERT, and importing
    # PostgreSQL's dialect costs every command's start-up on SQLite.
    name = conn.dialect.name
    if name == "postgresql":
        from sqlalchemy.dialects import postgresql

        return postgresql.insert(table)
    if name == "sqlite":
        from sqlalchemy.dialects import sqlite

        return sqlite.insert(table)
    raise StoreError(f"unsupported database: {name}")


def series_key_hash(key: SeriesKey) -> str:
    """sha256 hex of the key's JSON; ASCII-escaped so that any string hashes the same way.

    >>> series_key_hash(SeriesKey("r", "t", "1", "tok", "", "", "", "", 0))[:12]
    '94f63046120e'
    """
    payload = json.dumps(list(key), ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha256(payload.encode("ascii")).hexdigest()


def series_key_of(row: Any) -> SeriesKey:
    return SeriesKey(*(getattr(row, name) for name in SeriesKey._fields))


def _lookup(conn: Connection, hashes: Sequence[str]) -> dict[str, int]:
    found: dict[str, int] = {}
    c = series_table.c
    for part in chunks(sorted(hashes)):
        for sid, h in conn.execute(select(c.id, c.key_hash).where(c.key_hash.in_(part))):
            found[h] = sid
    return found


def stored_series(conn: Connection, keys: Sequence[SeriesKey] | None = None) -> set[SeriesKey]:
    """Every series key in the table or, given ``keys``, those of them that are stored."""
    c = series_table.c
    columns = [c[name] for name in SeriesKey._fields]
    if keys is None:
        return {series_key_of(row) for row in conn.execute(select(*columns))}
    found: set[SeriesKey] = set()
    for part in chunks(sorted({series_key_hash(k) for k in keys})):
        found.update(
            series_key_of(row) for row in conn.execute(select(*columns).where(c.key_hash.in_(part)))
        )
    return found


def _insert_series(conn: Connection) -> Insert:
    return dialect_insert(conn, series_table).on_conflict_do_nothing(index_elements=["key_hash"])


_first, _last = (
    bindparam("b_first", type_=series_table.c.first_seen_at.type),
    bindparam("b_last", type_=series_table.c.last_seen_at.type),
)
_WIDEN = (
    update(series_table)
    .where(series_table.c.id == bindparam("b_id"),
           or_(series_table.c.first_seen_at > _first, series_table.c.last_seen_at < _last))
    .values(
        first_seen_at=case((series_table.c.first_seen_at > _first, _first),
                           else_=series_table.c.first_seen_at),
        last_seen_at=case((series_table.c.last_seen_at < _last, _last),
                          else_=series_table.c.last_seen_at),
    )
)


def resolve_series(
    conn: Connection,
    spans: Mapping[SeriesKey, tuple[datetime, datetime]],
    known: Mapping[SeriesKey, int],
) -> dict[SeriesKey, int]:
    """The ids of ``spans``' keys, inserting missing series; widens their seen-at range.

    ``spans`` maps each key to the (first, last) bucket start of this checkpoint; ``known``
    holds ids resolved by earlier, committed transactions.
    """
    ids = {k: known[k] for k in spans if k in known}
    missing = {series_key_hash(k): k for k in spans if k not in known}
    if missing:
        found = _lookup(conn, list(missing))
        new = [h for h in missing if h not in found]
        if new:
            insert = dialect_statement(conn, "insert_series", _insert_series)
            # A chunk of rows at a time: a checkpoint that meets tens of thousands of new
            # series would otherwise hold a row dict for each until the last is written.
            for part in chunks(new):
                rows = []
                for h in part:
                    key = missing[h]
                    first, last = spans[key]
                    rows.append({"key_hash": h, **key._asdict(), "first_seen_at": first,
                                 "last_seen_at": last})
                executemany(conn, insert, rows)
            found.update(_lookup(conn, new))
        for h, key in missing.items():
            if h not in found:
                raise StoreError(f"series {key!r} vanished while being inserted")
            ids[key] = found[h]

    # Sorted by id: concurrent writers then lock shared rows in one order and cannot deadlock.
    # The parameter rows are built a chunk at a time, in that order.
    order = sorted((ids[k], k) for k in spans)
    for part in chunks(order):
        executemany(conn, _WIDEN, [{"b_id": sid, "b_first": spans[k][0], "b_last": spans[k][1]}
                                   for sid, k in part])
    return ids
