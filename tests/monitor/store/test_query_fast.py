"""The fast paths of ``specwatch ratios`` and ``/api/v1/ratios`` (raw reads, per-series
JSON and CSV templates) give exactly what the plain ones gave, on random rows and on a
random store."""

from __future__ import annotations

import csv
import io
import json
import math
import random
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import orjson
import pytest
from sqlalchemy import select

from monitor.aggregate.series import SeriesKey
from monitor.aggregate.sketch import LogHistogram, quantile_of
from monitor.jsonable import json_text
from monitor.store import Store, format_ratios, pipelined, query
from monitor.store.pipelined import rows_per_value
from monitor.store.query import (
    _RATIO_COUNTERS,
    COLUMNS,
    NARROW_COLUMNS,
    TABLE_COLUMNS,
    RatioRow,
    StoredSketch,
    _json_value,
    _text_value,
    fields_for,
    sketches_for,
    utc_start,
)
from monitor.store.sketch_columns import SketchColumn
from monitor.store.tables import rollups_table, series_table
from tests.monitor.store.helpers import T0, checkpoint, event

# Strings that JSON escapes, that CSV quotes, that %-formatting would read, and empty ones
# (the optional fields' "absent").
_ODD = ["", "code", "50% off", "%s%%", 'say "hi"', "back\\slash", "a,b", "line\nbreak",
        "cr\ronly", "tab\t", "\x00nul", "\u2028sep", "日本語", "emoji 🚀", "\u202eevil"]
_FLOATS = [0.0, -0.0, 1.5, 1e16, 1e-05, 123.456789, float("nan"), float("inf"), -float("inf")]


def _plain_json(rows: list[RatioRow]) -> str:
    """What format_ratios(rows, "json") wrote before the templates."""
    objs = [json.dumps({c: _json_value(r, c) for c in COLUMNS}, ensure_ascii=False)
            for r in rows]
    return "[\n" + ",\n".join(objs) + "\n]\n" if objs else "[]\n"


def _plain_csv(rows: list[RatioRow]) -> str:
    """What format_ratios(rows, "csv") wrote before the per-series writers."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    quoted = csv.writer(buf, lineterminator="\n", quoting=csv.QUOTE_ALL)
    w.writerow(COLUMNS)
    for r in rows:
        values = [_text_value(r, c) for c in COLUMNS]
        (quoted if any("\r" in v for v in values) else w).writerow(values)
    return buf.getvalue()


def _random_rows(rng: random.Random, n: int) -> list[RatioRow]:
    keys = [SeriesKey(*(rng.choice(_ODD) for _ in range(8)), rng.choice([0, 3, 5]))
            for _ in range(6)]
    start = datetime(2026, 11, 2, tzinfo=UTC)
    rows = []
    for i in range(n):
        counters = [rng.choice([0, 1, 7, 12345, 2**40]) for _ in _RATIO_COUNTERS[:-3]]
        floats = [rng.choice(_FLOATS) for _ in range(3)]
        rows.append(RatioRow(
            start + timedelta(hours=i // 3, microseconds=rng.choice([0, 0, 250])),
            rng.choice(["hour", "minute"]), rng.choice(keys), *counters, *floats,
            price_per_gpu_hour=rng.choice([None, 2.5, 0.0])))
    return rows


@pytest.mark.parametrize("seed", range(5))
def test_json_and_csv_are_the_plain_ones_byte_for_byte(seed: int) -> None:
    rows = _random_rows(random.Random(seed), 300)
    assert format_ratios(rows, "json") == _plain_json(rows)
    assert format_ratios(rows, "csv") == _plain_csv(rows)
    assert format_ratios([], "json") == _plain_json([])
    assert format_ratios([], "csv") == _plain_csv([])


def test_a_raw_start_reads_as_the_typed_column_does() -> None:
    assert utc_start("2026-11-02 22:00:00.000000") == datetime(2026, 11, 2, 22, tzinfo=UTC)
    assert utc_start("2026-11-02 22:00:00.000250").microsecond == 250
    eastern = datetime(2026, 11, 2, 17, tzinfo=UTC).astimezone(timezone(timedelta(hours=-5)))
    assert utc_start(eastern) == datetime(2026, 11, 2, 17, tzinfo=UTC)
    assert utc_start(eastern).tzinfo is UTC


def _random_store(store: Store, seed: int) -> None:
    rng = random.Random(seed)
    routes = ["code", "chat", "50% off", 'q"uote', "日本"]
    evs = []
    for i in range(800):
        drafted = rng.randrange(0, 20)
        evs.append(event(f"e{i}", T0 + rng.uniform(0, 3 * 3600), rng.choice(routes),
                         drafted=drafted, accepted=rng.randrange(0, drafted + 1),
                         ttft_ms=rng.lognormvariate(4.5, 0.6),
                         e2e_ms=rng.lognormvariate(6.5, 0.8),
                         draft_revision=rng.choice(["d1", "d2"])))
    store.commit(checkpoint(evs, next_offset=len(evs)))


def _typed_starts(store: Store, granularity: str) -> set[tuple[int, datetime]]:
    r = rollups_table.c
    with store.engine.connect() as conn:
        return {(row[0], row[1]) for row in conn.execute(
            select(r.series_id, r.bucket_start).where(r.granularity == granularity))}


def test_the_raw_read_is_the_typed_one_on_a_random_store(store: Store) -> None:
    """Starts read raw equal SQLAlchemy's typed reads; every format of the rows equals the
    plain formats; the table's quantiles equal the decoded histograms'."""
    _random_store(store, 5)
    for granularity in ("minute", "hour"):
        rows, latency = store.ratio_table(sketches_for((*NARROW_COLUMNS, "e2e_p99")),
                                          granularity=granularity)
        assert rows and all(r.bucket_start.tzinfo is UTC for r in rows)
        with store.engine.connect() as conn:
            ids = {SeriesKey(*row[1:]): row[0] for row in conn.execute(
                select(series_table.c.id, *(series_table.c[n] for n in SeriesKey._fields)))}
        assert {(ids[r.series], r.bucket_start) for r in rows} == _typed_starts(
            store, granularity)
        assert format_ratios(rows, "json") == _plain_json(rows)
        assert format_ratios(rows, "csv") == _plain_csv(rows)
        full = store.buckets(granularity=granularity)
        columns = (*NARROW_COLUMNS, "e2e_p99")
        assert (format_ratios(rows, "table", columns=columns, latency=latency)
                == format_ratios(rows, "table", columns=columns, latency=full))
        # The table of ratio_table's own rows reads the sketches' texts column by column;
        # other rows (a subset, a copy) look them up: the same text either way.
        plain = dict(latency)
        assert len(plain) == len(rows) and latency.keys() == plain.keys()
        for some in (rows, rows[::2], [replace(r) for r in rows]):
            assert (format_ratios(some, "table", columns=columns, latency=latency)
                    == format_ratios(some, "table", columns=columns, latency=plain))
        bare_rows, bare = store.ratio_table((), granularity=granularity)
        assert bare_rows == rows and not bare and dict(bare) == {}
        for key, sketches in latency.items():
            for q in (0.0, 0.5, 0.99, 1.0):
                got, want = sketches.ttft_ms.quantile(q), full[key].ttft_ms.quantile(q)
                assert got == want or (got is not None and math.isclose(got, want))


def _random_sketch(rng: random.Random) -> LogHistogram:
    h = LogHistogram()
    for _ in range(rng.choice([0, 1, 2, 5, 60, 400])):
        h.update(rng.choice([0.0, rng.uniform(0.001, 1.0), rng.lognormvariate(4.0, 2.0)]))
    return h


@pytest.mark.parametrize("seed", range(4))
def test_a_sketch_columns_quantiles_are_each_sketchs(seed: int) -> None:
    """SketchColumn reads every quantile of a column of stored texts as quantile_of reads
    each decoded sketch (zeros, keys below 1, empty sketches, rows without one); any row
    not in the store's layout sends the column back to StoredSketch, value for value."""
    rng = random.Random(seed)
    sketches = [_random_sketch(rng) for _ in range(300)]
    texts: list[str | None] = [json_text(h.to_json()) for h in sketches]
    texts[3] = None
    odd = list(texts)
    odd[7] = json.dumps(sketches[7].to_json())  # another layout (spaces)
    for column_texts in (texts, odd):
        stored = [None if t is None else StoredSketch(t) for t in column_texts]
        column = SketchColumn([None if s is None else s.raw for s in stored], stored)
        parsed = [f for f, t in zip(column.parsed, column_texts, strict=True) if t is not None]
        assert all(parsed) if column_texts is texts else not any(parsed)
        for q in (0.0, 0.01, 0.5, 0.9, 0.99, 0.999, 1.0):
            want = [None if t is None else quantile_of(orjson.loads(t), q)
                    for t in column_texts]
            assert column.quantiles(q) == want
    with pytest.raises(ValueError):
        SketchColumn(texts, [None] * len(texts)).quantiles(1.5)


def test_a_sketch_column_reads_odd_texts_in_the_layout_as_each_sketch_does() -> None:
    """Texts that match the store's layout yet are not its sketches (keys and counts of
    different lengths, numbers that do not read, counts without keys), other accuracies and
    negative keys beside the store's own: every quantile is the decoded sketch's."""
    rng = random.Random(11)
    own = [json_text(_random_sketch(rng).to_json()) for _ in range(40)]
    other = LogHistogram(relative_accuracy=0.05)
    for v in (0.2, 0.5, 3.0, 3.0, 70.0):
        other.update(v)
    odd = [
        '{"a":0.01,"k":[-3,1,2],"c":[1,1,1],"z":1,"n":4,"s":1.0}',
        '{"a":0.01,"k":[],"c":[],"z":0,"n":0,"s":0.0}',
        '{"a":0.01,"k":[5],"c":[2],"z":0,"n":2,"s":9.0}',
        json_text(other.to_json()),
    ]
    broken = [
        '{"a":0.01,"k":[1,2],"c":[3],"z":0,"n":4,"s":1.0}',  # counts short of the keys
        '{"a":0.01,"k":[1,,2],"c":[1,1,1],"z":0,"n":3,"s":1.0}',  # an empty key
        '{"a":0.01,"k":[],"c":[],"z":0,"n":3,"s":1.0}',  # counts beyond the zeros, no key
        '{"a":1e,"k":[1],"c":[1],"z":0,"n":1,"s":1.0}',  # an accuracy that does not read
    ]
    for extra in [odd, *([b] for b in broken)]:
        texts: list[str | None] = [*own[:20], *extra, None, *own[20:]]
        stored = [None if t is None else StoredSketch(t) for t in texts]
        column = SketchColumn([None if s is None else s.raw for s in stored], stored)
        for q in (0.0, 0.01, 0.3, 0.5, 0.99, 1.0):
            want = []
            for t in texts:
                try:
                    want.append(None if t is None else quantile_of(orjson.loads(t), q))
                except (orjson.JSONDecodeError, ValueError):  # unreadable: StoredSketch too
                    want = None
                    break
            if want is None:
                with pytest.raises((orjson.JSONDecodeError, ValueError)):
                    column.quantiles(q)
            else:
                assert column.quantiles(q) == want


@pytest.mark.parametrize("seed", range(3))
def test_a_table_shows_the_same_from_only_the_fields_its_columns_read(seed: int) -> None:
    """fields_for names every counter a column's cells read: rows holding None for every
    other counter (as ratio_table reads them with ``fields``) show the same cells."""
    rows = _random_rows(random.Random(seed), 200)
    rows = [replace(r, itl_p50_sketch=json_text(_random_sketch(random.Random(i)).to_json()),
                    itl_p99_sketch=None if i % 3 else json_text(
                        _random_sketch(random.Random(-i)).to_json()))
            for i, r in enumerate(rows)]
    optional = {"itl_p50_sketch", "itl_p99_sketch"}
    for name, column in TABLE_COLUMNS.items():
        if column.sketch is not None:
            continue
        fields = fields_for([name])
        assert fields is not None, name
        unread = {f: None for f in (*_RATIO_COUNTERS, *optional) if f not in fields}
        reduced = [replace(r, **unread) for r in rows]
        assert (format_ratios(reduced, "table", columns=[name])
                == format_ratios(rows, "table", columns=[name])), name
    assert fields_for(["requests", "accept", "pair"]) is None  # a heading: not known here
    assert fields_for(NARROW_COLUMNS) == {"requests", "accepted_tokens", "drafted_tokens"}


def test_ratio_table_reads_only_the_fields_asked_for(store: Store) -> None:
    _random_store(store, 6)
    columns = (*NARROW_COLUMNS, "mean_accepted_length", "itl_p50_ms")
    fields = fields_for(columns)
    full, full_latency = store.ratio_table(sketches_for(columns))
    rows, latency = store.ratio_table(sketches_for(columns), fields=fields)
    assert rows and len(rows) == len(full)
    assert all(r.errors is None and r.gpu_seconds is None and r.itl_p99_sketch is None
               and r.verify_steps is not None and r.requests is not None for r in rows)
    assert (format_ratios(rows, "table", columns=columns, latency=latency)
            == format_ratios(full, "table", columns=columns, latency=full_latency))


def test_rows_made_field_by_field_are_the_dataclass_rows() -> None:
    """ratio_table sets RatioRow's slots a field at a time over a batch: the rows equal
    those its __init__ makes, every field set, and they stay frozen."""
    from dataclasses import FrozenInstanceError, fields

    from monitor.store.query import _ratio_rows, _Starts

    rng = random.Random(3)
    key = SeriesKey("r", "t", "1", "tok", "d", "2", "dtok", "", 4)
    batch = [(7, f"2026-11-0{1 + i % 3} 0{i % 10}:00:00.000000",
              *(rng.choice([0, 5, None, 2**40]) for _ in _RATIO_COUNTERS),
              rng.choice([None, '{"a":0.01}']), None, "ttft text") for i in range(50)]
    for price in (None, 2.5):
        rows = _ratio_rows(batch, _Starts(), "hour", key, price)
        want = [RatioRow(utc_start(b[1]), "hour", key, *b[2:4 + len(_RATIO_COUNTERS)], price)
                for b in batch]
        assert rows == want
        assert all(getattr(r, f.name) == getattr(w, f.name)
                   for r, w in zip(rows, want, strict=True) for f in fields(RatioRow))
    with pytest.raises(FrozenInstanceError):
        rows[0].requests = 1  # type: ignore[misc]
    assert _ratio_rows([], _Starts(), "hour", key, None) == []


def _plain_aligned(numeric: list[bool], columns: list[list[str]]) -> str:
    """What _aligned_columns wrote before distinct values were padded once and lines left
    unstripped when nothing trails."""
    from monitor.store.query import _width

    padded = []
    for is_num, column in zip(numeric, columns, strict=True):
        widths = [_width(c) for c in column]
        w = max(widths)
        padded.append([" " * (w - cw) + c if is_num else c + " " * (w - cw)
                       for c, cw in zip(column, widths, strict=True)])
    return "\n".join("  ".join(line).rstrip() for line in zip(*padded, strict=True)) + "\n"


@pytest.mark.parametrize("seed", range(6))
def test_aligned_columns_are_the_plain_ones(seed: int) -> None:
    from monitor.store.query import _aligned_columns

    rng = random.Random(seed)
    cells = ["1", "22", "-", "0.643", "route", "日本語", "x…y", "tail ", "\u3000", " ", "",
             "a\tb", "é", "e\u0301"]
    for _ in range(30):
        numeric = [rng.random() < 0.5 for _ in range(rng.randint(1, 4))]
        columns = [[f"h{i}", *(rng.choice(cells) for _ in range(rng.randint(0, 8)))]
                   for i in range(len(numeric))]
        length = min(map(len, columns))
        columns = [c[:length] for c in columns]
        assert _aligned_columns(numeric, columns) == _plain_aligned(numeric, columns)
    assert _aligned_columns([], []) == "\n"


@pytest.mark.parametrize("seed", range(3))
def test_json_and_csv_itl_quantiles_are_each_rows_properties(seed: int) -> None:
    """JSON and CSV read the ITL quantiles of all rows at once (SketchColumn): the same
    values as each row's itl_p50_ms / itl_p99_ms, whatever form its sketch is stored in."""
    rng = random.Random(seed)

    def stored() -> str | dict | None:
        h = _random_sketch(rng)
        return rng.choice([None, json_text(h.to_json()), json_text(h.to_json()),
                           json.dumps(h.to_json()), h.to_json()])

    rows = [replace(r, itl_p50_sketch=stored(), itl_p99_sketch=stored())
            for r in _random_rows(rng, 200)]
    assert format_ratios(rows, "json") == _plain_json(rows)
    assert format_ratios(rows, "csv") == _plain_csv(rows)
    texts_only = [replace(r, itl_p50_sketch=json_text(_random_sketch(rng).to_json()))
                  for r in rows]
    assert format_ratios(texts_only, "json") == _plain_json(texts_only)
    # Repeated texts (each read once) beside unique ones and None.
    rng2 = random.Random(seed + 100)
    few = [None, json_text(LogHistogram().to_json()), json_text(_random_sketch(rng2).to_json())]
    repeated = [replace(r, itl_p50_sketch=rng2.choice(few), itl_p99_sketch=few[i % 2])
                for i, r in enumerate(rows)]
    assert format_ratios(repeated, "json") == _plain_json(repeated)
    assert format_ratios(repeated, "csv") == _plain_csv(repeated)


def _texts(latency: Mapping[object, object]) -> dict[object, dict[str, object]]:
    """Each row's sketches as the stored texts they hold."""
    return {key: {name: sketch.raw for name, sketch in vars(sketches).items()}
            for key, sketches in latency.items()}


def test_a_routes_ranges_sent_at_once_read_as_one_at_a_time(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """A route's per-series ranges, pipelined on PostgreSQL, give the rows and sketch texts
    that one execute per series gives, whatever the range (the bound datetimes go through
    their column type's processing)."""
    _random_store(store, 7)
    pipelined_reads = []
    result_processors = pipelined._result_processors

    def counted(*args: object) -> list:
        pipelined_reads.append(args)
        return result_processors(*args)

    def one_at_a_time(*args: object, tuples: bool = False) -> object:
        return rows_per_value(*args, tuples=False)

    columns = (*NARROW_COLUMNS, "e2e_p99", "itl_p99_ms")
    t0 = datetime.fromtimestamp(T0, UTC)
    spans = [{}, {"since": t0 + timedelta(hours=1)},
             {"since": (t0 + timedelta(minutes=30)).astimezone(timezone(timedelta(hours=5))),
              "until": t0 + timedelta(hours=2, minutes=30)}]
    for route in ("code", "50% off", "日本", "no such route"):
        for granularity in ("minute", "hour"):
            for span in spans:
                for fields in (None, fields_for(columns)):
                    monkeypatch.setattr(pipelined, "_result_processors", counted)
                    rows, latency = store.ratio_table(
                        sketches_for(columns), granularity=granularity, route=route,
                        fields=fields, **span)
                    monkeypatch.setattr(query, "rows_per_value", one_at_a_time)
                    want, want_latency = store.ratio_table(
                        sketches_for(columns), granularity=granularity, route=route,
                        fields=fields, **span)
                    monkeypatch.undo()
                    assert rows == want
                    assert _texts(latency) == _texts(want_latency)
                    if route != "no such route" and not span:
                        assert rows
    # PostgreSQL took the pipelined path (SQLite has none)
    assert bool(pipelined_reads) == (store.engine.dialect.name == "postgresql")
