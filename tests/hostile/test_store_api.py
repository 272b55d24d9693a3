"""Hostile names through the pipeline into the store (SQLite and PostgreSQL) and back out of
the store and the HTTP API, byte-equal, as JSON and CSV.

CSV and formula injection: ``/api/v1/ratios?format=csv`` (and ``specwatch ratios --format
csv``) hands back the exact stored strings, a route ``=1+1`` included. The CSV is a data
export for programs (the same bytes as the CLI, read back exactly by any CSV reader);
prefixing ``'`` as spreadsheets want would change the data for every program. Whoever opens
it in a spreadsheet imports the columns as text.
"""

from __future__ import annotations

import csv
import io
import itertools
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor.aggregate.series import SeriesKey
from monitor.api.app import create_app
from monitor.store.store import Store
from tests.hostile import count_into, event, names
from tests.monitor.api import TestClient

_sources = itertools.count()

# The ratio rows' name columns, and the event field each comes from.
COLUMNS = {"route": "route", "target_model": "target.model",
           "target_revision": "target.revision", "target_tokenizer": "target.tokenizer",
           "draft_model": "draft.model", "draft_revision": "draft.revision",
           "draft_tokenizer": "draft.tokenizer", "method": "spec.method"}


def key_of(fields: dict[str, str]) -> SeriesKey:
    return SeriesKey(*(fields[COLUMNS[c]] for c in SeriesKey._fields[:-1]), 2)


def names_of(row: dict[str, str]) -> dict[str, str]:
    return {c: row[c] for c in COLUMNS}


def api_rows(client: TestClient, route: str, fmt: str) -> list[dict[str, str]]:
    answer = client.get("/api/v1/ratios", params={"granularity": "minute", "route": route,
                                                  "format": fmt})
    assert answer.status_code == 200, answer.text
    if fmt == "json":
        return json.loads(answer.content.decode("utf-8"))
    # newline="": a field's own line breaks are data, not row ends
    return list(csv.DictReader(io.StringIO(answer.content.decode("utf-8"), newline="")))


@settings(max_examples=20, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(names(), min_size=1, max_size=5))
def test_names_come_back_byte_equal_from_store_and_api(store: Store,
                                                       batch: list[dict[str, str]]) -> None:
    docs = [event(fields, i) for i, fields in enumerate(batch)]
    _, dead, _ = count_into(store, f"hostile-{next(_sources)}", docs)
    assert dead.count == 0
    stored = store.series_keys()
    client = TestClient(create_app(store))
    for fields in batch:
        key = key_of(fields)
        assert key in stored
        want = {c: fields[f] for c, f in COLUMNS.items()}
        rows = store.ratios(granularity="minute", route=key.route)
        assert {r.route for r in rows} == {key.route}  # the filter is exact, no LIKE
        assert key in {r.series for r in rows}
        for fmt in ("json", "csv"):
            got = [names_of(r) for r in api_rows(client, key.route, fmt)]
            assert want in got, fmt
            assert {r["route"] for r in got} == {key.route}


@pytest.mark.parametrize("route", ["=1+1", "+SUM(A1)", "-1", "@cmd", "a\rb", "\r", "x\r\ny",
                                   "\x00", '"', "\u2028", ",\n,"])
def test_csv_is_exact_and_one_record_per_row(store: Store, route: str) -> None:
    fields = {"route": route, "target.model": route, "target.revision": "=HYPERLINK(\"x\")"}
    count_into(store, "csv", [event(fields, 0), event({"route": "plain"}, 1)])
    client = TestClient(create_app(store))
    answer = client.get("/api/v1/ratios", params={"granularity": "minute", "format": "csv"})
    records = list(csv.reader(io.StringIO(answer.text, newline="")))
    assert len(records) == 3 and {len(r) for r in records} == {len(records[0])}
    rows = [dict(zip(records[0], r, strict=True)) for r in records[1:]]
    [mine] = [r for r in rows if r["route"] == route]  # exact: no quote prefix, no escape
    assert mine["target_model"] == route and mine["target_revision"] == '=HYPERLINK("x")'
