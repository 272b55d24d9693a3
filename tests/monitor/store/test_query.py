"""Reading back: ratio filters and formats, merged quantiles, retention, odd strings."""

from __future__ import annotations

import csv
import io
import json
import math
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor.aggregate.series import SeriesKey, series_key
from monitor.store import Checkpoint, Store, format_ratios
from monitor.store.query import COLUMNS, NARROW_COLUMNS
from tests.monitor.store.helpers import T0, at, checkpoint, event, rollups_of

CLI_COLUMNS = [
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
]


def _two_routes(store: Store) -> None:
    evs = [event(f"c{i}", T0 + 30 * i, "code") for i in range(240)]  # 22:00 .. 23:59:30
    evs += [event(f"w{i}", T0 + 3600 + 60 * i, "creative", spec=False) for i in range(90)]
    evs += [
        event("nodraft", T0 + 5, "ngram", drafted=0, accepted=0, method="ngram", verify_steps=None)
    ]
    store.commit(checkpoint(evs, next_offset=len(evs)))


def test_ratio_filters(store: Store) -> None:
    _two_routes(store)
    hours = store.ratios()  # hour by default
    assert [(r.bucket_start.hour, r.route) for r in hours] == [
        (22, "code"),
        (22, "ngram"),
        (23, "code"),
        (23, "creative"),
        (0, "creative"),
    ]
    assert [r.requests for r in store.ratios(route="code")] == [120, 120]
    assert store.ratios(route="nope") == []
    assert store.ratios(route="cod") == []  # equality, not a prefix match

    since, until = at(T0 + 3600), at(T0 + 7200)
    assert {r.bucket_start for r in store.ratios(since=since)} == {since, at(T0 + 7200)}
    assert {r.bucket_start for r in store.ratios(until=since)} == {at(T0)}
    assert {r.bucket_start for r in store.ratios(since=since, until=until)} == {since}
    minutes = store.ratios(granularity="minute", route="code", since=since, until=until)
    assert len(minutes) == 60 and sum(r.requests for r in minutes) == 120
    # Zones are honoured: 23:00 UTC is 00:00 in UTC+1.
    plus1 = timezone_plus(1)
    assert store.ratios(since=datetime(2026, 11, 3, 0, tzinfo=plus1), route="code") == (
        store.ratios(since=since, route="code")
    )
    days = store.ratios(granularity="day")
    assert [(r.bucket_start.day, r.route, r.requests) for r in days] == [
        (2, "code", 240),
        (2, "creative", 60),
        (2, "ngram", 1),
        (3, "creative", 30),
    ]

    (ngram,) = store.ratios(route="ngram")
    assert ngram.spec_requests == 1 and ngram.drafting_requests == 0
    assert ngram.acceptance_rate is None and ngram.mean_accepted_length is None
    (creative,) = store.ratios(route="creative", until=since + timedelta(hours=1))
    assert creative.draft_model == "" and creative.num_speculative_tokens == 0

    with pytest.raises(ValueError, match="aware"):
        store.ratios(since=datetime(2026, 11, 2))
    with pytest.raises(ValueError, match="granularity"):
        store.ratios(granularity="week")


def timezone_plus(hours: int):
    from datetime import timezone

    return timezone(timedelta(hours=hours))


def test_formats(store: Store) -> None:
    _two_routes(store)
    rows = store.ratios()

    data = json.loads(format_ratios(rows, "json"))
    assert isinstance(data, list) and len(data) == len(rows)
    assert list(data[0]) == list(COLUMNS) and list(COLUMNS[: len(CLI_COLUMNS)]) == CLI_COLUMNS
    assert data[0]["bucket_start"] == "2026-11-02T22:00:00Z"
    code = data[0]
    assert code["route"] == "code" and code["draft_model"] == "llama-1b"
    assert code["acceptance_rate"] == pytest.approx(0.7)
    creative = next(d for d in data if d["route"] == "creative")
    assert creative["draft_model"] is None and creative["method"] is None
    assert creative["acceptance_rate"] is None and creative["target_model"] == "llama-70b"
    assert json.loads(format_ratios([], "json")) == []

    parsed = list(csv.reader(io.StringIO(format_ratios(rows, "csv"))))
    assert parsed[0] == list(COLUMNS)
    assert len(parsed) == len(rows) + 1
    by_name = [dict(zip(parsed[0], line, strict=True)) for line in parsed[1:]]
    assert by_name[0]["bucket_start"] == "2026-11-02T22:00:00Z"
    assert float(by_name[0]["acceptance_rate"]) == pytest.approx(0.7)
    c = next(d for d in by_name if d["route"] == "creative")
    assert c["draft_model"] == "" and c["acceptance_rate"] == ""
    assert format_ratios([], "csv") == ",".join(COLUMNS) + "\n"

    table = format_ratios(rows, "table").splitlines()
    assert table[0].split() == list(COLUMNS)
    assert len(table) == len(rows) + 1
    assert table[1].startswith("2026-11-02T22:00:00Z  code ")
    assert "0.7000" in table[1]
    # Right-aligned numbers end in the same column.
    col = table[0].index("requests") + len("requests")
    assert all(line[col - 1].isdigit() for line in table[1:])

    with pytest.raises(ValueError, match="format"):
        format_ratios(rows, "xml")


def _true_quantile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[math.floor(q * (len(s) - 1))]


def test_stats_quantiles_of_a_range_match_the_raw_values(store: Store) -> None:
    rng = random.Random(7)
    evs = []
    for i in range(3000):
        e2e = rng.lognormvariate(6.5, 0.8)
        ttft = e2e * rng.uniform(0.05, 0.3)
        evs.append(event(f"q{i}", T0 + rng.uniform(0, 7200), "code", e2e_ms=e2e, ttft_ms=ttft))
    store.commit(checkpoint(evs, next_offset=len(evs)))

    since, until = at(T0 + 1200), at(T0 + 5400)
    inside = [e for e in evs if since <= at(e.ts - e.ts % 60) < until]
    (key,) = {series_key(e) for e in evs}
    stats = store.stats(since=since, until=until)
    assert list(stats) == [key]
    got = stats[key]
    assert got.requests == len(inside)
    decode_tps = [e.decode_throughput for e in inside if e.decode_throughput is not None]
    for q in (0.5, 0.99):
        for sketch, values in (
            (got.e2e_ms, [e.e2e_ms for e in inside]),
            (got.ttft_ms, [e.ttft_ms for e in inside]),
            (got.decode_tps, decode_tps),
        ):
            true = _true_quantile(values, q)
            assert abs(sketch.quantile(q) - true) <= 0.01 * true + 1e-9

    # Whole hours read from minute rows or from hour rows agree.
    whole = store.stats(since=at(T0), until=at(T0 + 3600))[key]
    assert whole == store.stats(granularity="hour", since=at(T0), until=at(T0 + 3600))[key]
    assert store.stats(route="other") == {}


def test_retention_deletes_only_old_rows_per_granularity(store: Store) -> None:
    now = at(T0 + 10 * 86400)
    ages = [timedelta(hours=1), timedelta(days=3), timedelta(days=40), timedelta(days=400)]
    evs = [event(f"a{i}", (now - age).timestamp()) for i, age in enumerate(ages)]
    store.commit(checkpoint(evs, next_offset=4))
    before = {g: len(store.ratios(granularity=g)) for g in ("minute", "hour", "day")}
    assert before == {"minute": 4, "hour": 4, "day": 4}

    deleted = store.apply_retention(
        now, {"minute": timedelta(days=2), "hour": timedelta(days=30), "day": timedelta(days=365)}
    )
    assert deleted == {"minute": 3, "hour": 2, "day": 1}
    assert len(store.ratios(granularity="minute")) == 1
    hours = store.ratios(granularity="hour")
    assert all(now - r.bucket_start < timedelta(days=30) for r in hours) and len(hours) == 2
    assert len(store.ratios(granularity="day")) == 3

    assert store.apply_retention(now, {"minute": timedelta(days=2)}) == {"minute": 0}
    with pytest.raises(ValueError):
        store.apply_retention(now, {"week": timedelta(days=1)})
    with pytest.raises(ValueError):
        store.apply_retention(datetime(2026, 1, 1), {"minute": timedelta(days=1)})


NASTY = [
    'it\'s "quoted"',
    "x'); DROP TABLE series; --",
    "1 OR 1=1; SELECT * FROM rollups",
    "%_\\ like wildcards",
    "🚀🔥 👩‍💻 emoji",
    "שלום עולם",
    "مرحبا \u202eevil\u202c",
    "tab\tnew\nline\rcr\x1b[31mred\x7f",
    "nul\x00byte",
    "\uffff0 escape lookalike \uffff\uffff",
    "r" * 128,
    " leading and trailing ",
]


def test_odd_strings_roundtrip_unchanged(store: Store) -> None:
    evs = []
    for i, s in enumerate(NASTY):
        evs.append(
            event(
                f"id-{s}-{i}",
                T0 + i,
                route=s,
                target_model=s,
                target_revision=s[::-1],
                draft_model=s,
                draft_tokenizer="",
                method=s,
            )
        )
    source = "src 'x' \x00 🚀"
    state = {f"key {s}": {"version": 1, "value": s} for s in NASTY}
    cp = checkpoint(evs, source=source, next_offset=len(evs), state=state)
    store.commit(cp)

    expected_keys = {series_key(e) for e in evs}
    assert set(store.stats()) == expected_keys
    for s in NASTY:
        (row,) = store.ratios(granularity="minute", route=s)
        assert row.series == SeriesKey(s, s, s[::-1], "llama3", s, "d1", "", s, 4)
    assert store.load_state(source) == state
    assert store.load_state(source, prefix="key nul\x00") == {
        "key nul\x00byte": state["key nul\x00byte"]
    }
    seen = store.load_partitions(source, [0])[0].seen
    assert seen == {e.request_id: e.ts for e in evs}

    rows = store.ratios(granularity="minute")
    assert [d["route"] for d in json.loads(format_ratios(rows, "json"))] == [r.route for r in rows]
    parsed = list(csv.reader(io.StringIO(format_ratios(rows, "csv"), newline="")))
    assert [line[1] for line in parsed[1:]] == [r.route for r in rows]
    # The table shows control characters escaped, one line per row.
    table = format_ratios(rows, "table")
    assert len(table.splitlines()) == len(rows) + 1
    assert "\x1b" not in table and "\\x1b[31mred" in table and "\\u202e" in table
    # and so does the narrow one, whose quantile columns show "-" for buckets without sketches
    narrow = format_ratios(rows, "table", columns=NARROW_COLUMNS)
    assert len(narrow.splitlines()) == len(rows) + 1
    assert "\x1b" not in narrow and "\\x1b[31mred" in narrow and "\\u202e" in narrow
    assert all(line.split()[-2:] == ["-", "-"] for line in narrow.splitlines()[1:])


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(route=st.text(min_size=1, max_size=128), model=st.text(max_size=40))
def test_any_text_roundtrips(store: Store, route: str, model: str) -> None:
    evs = [event("h", T0, route=route, target_model=model, draft_model=model)]
    store.commit(Checkpoint("hyp", rollups=rollups_of(evs)))
    rows = [r for r in store.ratios(granularity="day", route=route) if r.target_model == model]
    assert len(rows) == 1
    assert rows[0].series == series_key(evs[0])


def test_buckets_are_row_by_row(store: Store) -> None:
    evs = [event(f"b{i}", T0 + 60 * i, "code") for i in range(3)]
    store.commit(checkpoint(evs, next_offset=3))
    got = store.buckets(granularity="minute", since=at(T0 + 60))
    assert sorted(start for _, start in got) == [at(T0 + 60), at(T0 + 120)]
    assert all(b.requests == 1 for b in got.values())
    assert all(start.tzinfo is UTC for _, start in got)


def test_narrow_table_tells_apart_pairs_that_would_read_the_same(store: Store) -> None:
    evs = [event("a", T0 + 5, "code"), event("b", T0 + 6, "code", target_revision="r2"),
           event("c", T0 + 7, "code", draft_revision="d2", target_revision="r2"),
           event("d", T0 + 8, "chat")]
    store.commit(checkpoint(evs, next_offset=len(evs)))
    rows = store.ratios()
    latency = store.buckets(granularity="hour")
    table = format_ratios(rows, "table", columns=NARROW_COLUMNS, latency=latency).splitlines()
    pairs = sorted(line.split("  ")[2].strip() for line in table[1:])
    # chat has one pair: no tag; code's three series are told apart by their revisions
    assert pairs == ["llama-70b/…1b", "llama-70b/…1b @r1 draft@d1", "llama-70b/…1b @r2 draft@d1",
                     "llama-70b/…1b @r2 draft@d2"]
    assert all(line.split()[-2:] == ["100ms", "100ms"] for line in table[1:])


def test_sketches_read_only_the_named_sketches_and_make_the_same_table(store: Store) -> None:
    rng = random.Random(11)
    evs = [event(f"s{i}", T0 + rng.uniform(0, 7200), rng.choice(["code", "chat"]),
                 e2e_ms=rng.lognormvariate(6.5, 0.8), ttft_ms=rng.lognormvariate(4.5, 0.5))
           for i in range(600)]
    store.commit(checkpoint(evs, next_offset=len(evs)))
    span = {"granularity": "minute", "route": "code", "since": at(T0 + 600)}
    full = store.buckets(**span)
    got = store.ratio_table(("ttft_ms", "e2e_ms"), **span)[1]
    assert got.keys() == full.keys() and got
    for key, sketches in got.items():
        assert sketches.ttft_ms == full[key].ttft_ms and sketches.e2e_ms == full[key].e2e_ms
        assert not hasattr(sketches, "decode_tps")  # not read
    rows = store.ratios(**span)
    columns = (*NARROW_COLUMNS, "e2e_p99")
    assert (format_ratios(rows, "table", columns=columns, latency=got)
            == format_ratios(rows, "table", columns=columns, latency=full))
    with pytest.raises(ValueError, match="unknown sketch"):
        store.ratio_table(("requests",), granularity="hour")


def test_a_routes_hour_rows_are_read_by_the_primary_key(tmp_path: Path) -> None:
    """``ratios --route`` on a large store (``bench/ratios.py``): the route's series are read
    first, then each one's hour rows as a range of the primary key (granularity, series,
    start), never a pass over every series' rows of the time range. On SQLite only:
    PostgreSQL's plan is its planner's choice by table size (``bench/ratios.py --db``
    prints it)."""
    from monitor.store.db import upgrade
    from monitor.store.query import per_series_statement
    from monitor.store.tables import rollups_table

    url = f"sqlite:///{tmp_path / 'plan.db'}"
    upgrade(url)
    store = Store(url)
    _two_routes(store)
    r = rollups_table.c
    stmt = per_series_statement([r.requests], "hour", at(T0), None)
    with store.engine.connect() as conn:
        conn.exec_driver_sql("ANALYZE")
        sql = str(stmt.params(sid=1).compile(conn, compile_kwargs={"literal_binds": True}))
        plan = " | ".join(str(row[-1]) for row in conn.exec_driver_sql(
            "EXPLAIN QUERY PLAN " + sql))
    store.close()
    assert "SEARCH rollups USING INDEX sqlite_autoindex_rollups_1 (granularity=? AND " \
           "series_id=? AND bucket_start>?)" in plan, plan


def test_ratio_table_gives_the_ratios_and_their_sketches_in_one_read(store: Store) -> None:
    _two_routes(store)
    span = {"granularity": "minute", "since": at(T0)}
    rows, latency = store.ratio_table(("ttft_ms",), **span)
    assert rows == store.ratios(**span)
    assert latency.keys() == store.buckets(**span).keys()
    assert format_ratios(rows, "table", columns=NARROW_COLUMNS, latency=latency) == \
        format_ratios(rows, "table", columns=NARROW_COLUMNS, latency=store.buckets(**span))
    assert store.ratio_table((), **span) == (rows, {})


def test_a_stored_sketchs_quantiles_are_its_histograms() -> None:
    """StoredSketch keeps the running counts between quantiles: each read still equals the
    decoded histogram's, in any order, zeros and the ends included."""
    import random

    from monitor.aggregate.sketch import LogHistogram
    from monitor.store.query import StoredSketch

    rng = random.Random(7)
    for n in (1, 5, 200):
        h = LogHistogram()
        for _ in range(n):
            h.update(0.0 if rng.random() < 0.2 else rng.lognormvariate(3.0, 1.5))
        stored = StoredSketch(h.to_json())
        for q in (0.99, 0.0, 0.5, 0.1, 1.0, 0.5, 0.999):
            assert stored.quantile(q) == h.quantile(q)
    assert StoredSketch(None).quantile(0.5) is None
    with pytest.raises(ValueError):
        StoredSketch(h.to_json()).quantile(1.5)
