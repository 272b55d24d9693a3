"""A statement run for many values of a parameter gives, pipelined or not, what one
``Connection.execute`` per value gives: the same values, converted the same way."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import Float, Numeric, String, bindparam, cast, literal, select

from monitor.store import Store
from monitor.store.pipelined import rows_per_value
from monitor.store.tables import rollups_table, series_table
from tests.monitor.store.helpers import T0, checkpoint, event


def test_rows_per_value_are_each_executes_rows_with_their_conversions(store: Store) -> None:
    store.commit(checkpoint([event(f"e{i}", T0 + 60 * i, f"route-{i % 3}", drafted=5,
                                   accepted=i % 6) for i in range(30)], next_offset=30))
    r = rollups_table.c
    since = datetime.fromtimestamp(T0, UTC) + timedelta(minutes=3)
    # a numeric read as float (a conversion on PostgreSQL), a float, a string, a datetime
    # bound through its column type
    stmt = (select(r.series_id, r.bucket_start.label("start"),
                   cast(r.accepted_tokens, Numeric(12, 2, asdecimal=False)).label("n"),
                   cast(r.accepted_tokens, Float).label("f"),
                   literal("x", String).label("s"))
            .where(r.granularity == "minute", r.series_id == bindparam("sid"),
                   r.bucket_start >= since)
            .order_by(r.bucket_start))
    with store.engine.connect() as conn:
        ids = sorted(conn.execute(select(series_table.c.id)).scalars())
        values = [*ids, -1, ids[0]]
        want = [[tuple(row) for row in conn.execute(stmt, {"sid": v}).all()] for v in values]
        got = [[tuple(row) for row in rows]
               for rows in rows_per_value(conn, stmt, "sid", values, tuples=True)]
        plain = [[tuple(row) for row in rows]
                 for rows in rows_per_value(conn, stmt, "sid", values)]
    assert got == want == plain
    assert sum(map(len, got)) == 27 + 9 and got[len(ids)] == []
    if store.engine.dialect.name == "postgresql":  # numeric arrives as Decimal: converted
        assert all(type(row[2]) is float for rows in got for row in rows)
