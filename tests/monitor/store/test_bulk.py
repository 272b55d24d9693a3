"""monitor/store/bulk.py writes what ``Connection.execute`` writes, on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import insert, select
from sqlalchemy.exc import IntegrityError

from monitor.aggregate.bucket import BucketStats
from monitor.store import Store
from monitor.store.bulk import executemany
from monitor.store.tables import rollups_table, series_table, state_table
from monitor.store.writer import _UPDATE_ROLLUP, upsert_state
from tests.monitor.store.helpers import T0, at, event, rollups_of


def _series_rows(tag: str) -> list[dict[str, Any]]:
    # NUL and the escape character: SafeText's processor must run on PostgreSQL.
    return [
        {"id": 100 * len(tag) + i, "key_hash": f"{tag}{i:062d}", "route": f"r\x00{i}\uffff",
         "target_model": "t", "target_revision": "1", "target_tokenizer": "tok",
         "draft_model": "", "draft_revision": "",
         "draft_tokenizer": "", "method": "", "num_speculative_tokens": i,
         "first_seen_at": at(T0), "last_seen_at": at(T0 + 60 * i)}
        for i in range(5)
    ]


def _rollup_rows(sids: list[int]) -> list[dict[str, Any]]:
    stats = list(rollups_of([event(f"e{i}", T0 + i) for i in range(3)]).values())[0]
    empty = BucketStats()
    return [{"granularity": "minute", "series_id": sid, "bucket_start": at(T0 + 60 * (i % 2)),
             **(stats if i % 2 else empty).to_row()} for i, sid in enumerate(sids)]


def _dump(store: Store) -> dict[str, list[tuple[Any, ...]]]:
    out = {}
    with store.engine.connect() as conn:
        for table in (series_table, rollups_table, state_table):
            rows = conn.execute(select(table).order_by(*table.primary_key.columns)).all()
            out[table.name] = [tuple(r) for r in rows]
    return out


def test_bulk_writes_what_execute_writes(store: Store) -> None:
    with store.engine.begin() as conn:
        conn.execute(insert(series_table), _series_rows("a"))
        sids = sorted(conn.execute(select(series_table.c.id)).scalars())
        conn.execute(insert(rollups_table), _rollup_rows(sids))
    expected = _dump(store)
    with store.engine.begin() as conn:
        for table in (rollups_table, series_table):
            conn.execute(table.delete())
        executemany(conn, insert(series_table), _series_rows("a"))
        sids = sorted(conn.execute(select(series_table.c.id)).scalars())
        executemany(conn, insert(rollups_table), _rollup_rows(sids))
    assert _dump(store) == expected


def test_bulk_update_and_upsert(store: Store) -> None:
    with store.engine.begin() as conn:
        executemany(conn, insert(series_table), _series_rows("b"))
        sids = sorted(conn.execute(select(series_table.c.id)).scalars())
        executemany(conn, insert(rollups_table), _rollup_rows(sids))
        doubled = []
        for row in _rollup_rows(sids):
            b = BucketStats.from_row(row)
            b.merge(BucketStats.from_row(row))
            doubled.append({"b_granularity": row["granularity"], "b_series_id": row["series_id"],
                            "b_bucket_start": row["bucket_start"], **b.to_row()})
        executemany(conn, _UPDATE_ROLLUP, doubled)
        state = [{"source": "s", "key": f"k{i}", "version": 1, "data": {"v": i},
                  "updated_at": at(T0)} for i in range(3)]
        upsert_state(conn, state)
        upsert_state(conn, [{**state[0], "version": 2, "data": {"v": "new"}}])
    with store.engine.connect() as conn:
        reqs = conn.execute(select(rollups_table.c.requests).order_by(
            rollups_table.c.series_id)).scalars().all()
        data = dict(conn.execute(select(state_table.c.key, state_table.c.data)).all())
    assert reqs == [0, 6, 0, 6, 0]
    assert data == {"k0": {"v": "new"}, "k1": {"v": 1}, "k2": {"v": 2}}
    assert store.load_state("s")["k0"] == {"v": "new"}


def test_a_duplicate_row_is_an_integrity_error(store: Store) -> None:
    with store.engine.begin() as conn:
        executemany(conn, insert(series_table), _series_rows("c"))
        sids = sorted(conn.execute(select(series_table.c.id)).scalars())
        executemany(conn, insert(rollups_table), _rollup_rows(sids))
    # PostgreSQL: raised by COPY, wrapped as conn.execute wraps it (the commit's retry reads it)
    with pytest.raises(IntegrityError), store.engine.begin() as conn:
        executemany(conn, insert(rollups_table), _rollup_rows(sids)[:1])
