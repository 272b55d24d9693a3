"""Rows added in their stored form give exactly what the statistics objects give.

The store folds and merges checkpoint rows with :class:`RowAdder` and :func:`merge_json`
instead of ``from_row`` / ``merge`` / ``to_row``; the stored values (float sums to the last
bit, JSON text byte for byte) must be the same either way.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.aggregate.bucket import BUCKET_ROWS, BucketStats
from monitor.aggregate.rows import RowAdder, add_lists
from monitor.aggregate.sketch import LogHistogram, merge_json
from monitor.policy.slices import SLICE_COUNTERS, SLICE_FLOATS, SliceStats
from monitor.store.slices import SLICE_ROWS
from monitor.telemetry.event import Event

values = st.lists(st.one_of(st.just(0.0), st.floats(min_value=0.0, max_value=1e7,
                                                    allow_nan=False)), max_size=60)


def _sketch(vs: list[float]) -> LogHistogram:
    h = LogHistogram()
    h.extend(vs)  # the store's sketches are filled this way (vectorised from 16 values)
    return h


def _sketch_json(vs: list[float] | None) -> dict[str, Any] | None:
    """``None`` stands for a NULL column (a row written before the sketch existed)."""
    return None if vs is None else _sketch(vs).to_json()


@given(st.one_of(st.none(), values), st.one_of(st.none(), values))
def test_merge_json_equals_merging_the_sketches(a: list[float] | None,
                                                b: list[float] | None) -> None:
    ja, jb = _sketch_json(a), _sketch_json(b)
    expected = LogHistogram.from_json(ja)
    expected.merge(LogHistogram.from_json(jb))
    got = merge_json(ja, jb)
    assert orjson.dumps(got) == orjson.dumps(expected.to_json())
    assert ja == _sketch_json(a) and jb == _sketch_json(b)  # the inputs are untouched


@given(st.lists(st.floats(min_value=1e-3, max_value=1e9, allow_nan=False), min_size=40,
                max_size=400), st.lists(st.floats(min_value=0.0, max_value=1e9,
                                                  allow_nan=False), max_size=8),
       st.booleans())
def test_a_few_buckets_merged_into_many_equal_merging_the_sketches(
        many: list[float], few: list[float], few_first: bool) -> None:
    # a minute's delta into a stored hour: the short side goes in by bisection
    ja, jb = _sketch_json(many), _sketch_json(few)
    if few_first:
        ja, jb = jb, ja
    expected = LogHistogram.from_json(ja)
    expected.merge(LogHistogram.from_json(jb))
    got = merge_json(ja, jb)
    assert orjson.dumps(got) == orjson.dumps(expected.to_json())
    assert ja == _sketch_json(few if few_first else many)  # the inputs are untouched


def test_merge_json_refuses_what_merge_refuses() -> None:
    with pytest.raises(ValueError, match="relative accuracy"):
        merge_json(LogHistogram(0.05).to_json(), _sketch([1.0]).to_json())
    broken = {**_sketch([1.0, 2.0]).to_json(), "c": [1]}
    with pytest.raises(ValueError, match="differ in length"):
        merge_json(broken, _sketch([3.0]).to_json())


@given(st.lists(st.integers(0, 1000), max_size=6), st.lists(st.integers(0, 1000), max_size=6))
def test_add_lists_pads_the_shorter(a: list[int], b: list[int]) -> None:
    padded = [0] * max(len(a), len(b))
    expected = [x + y for x, y in zip(a + padded[len(a):], b + padded[len(b):], strict=True)]
    assert add_lists(a, b) == expected


events = st.builds(
    dict,
    e2e_ms=st.floats(1.0, 1e5), ttft=st.one_of(st.none(), st.floats(0.0, 1e4)),
    drafted=st.integers(0, 40), accepted=st.integers(0, 40), steps=st.integers(0, 12),
    app=st.one_of(st.none(), st.lists(st.integers(0, 9), min_size=1, max_size=5)),
    output=st.integers(0, 500), gpu=st.one_of(st.none(), st.floats(0.0, 50.0)),
    ok=st.one_of(st.none(), st.booleans()), status=st.sampled_from(["ok", "error"]),
    itl=st.one_of(st.none(), st.floats(0.0, 200.0)), spec=st.booleans(),
)


def _event(i: int, p: dict[str, Any]) -> Event:
    return Event(f"r{i}", 1000.0 + i, "code", p["status"], "t", "r", "tok",
                 output_tokens=p["output"], e2e_ms=p["e2e_ms"], ttft_ms=p["ttft"],
                 has_spec=p["spec"], num_speculative_tokens=4 if p["spec"] else 0,
                 drafted_tokens=p["drafted"] if p["spec"] else 0,
                 accepted_tokens=min(p["accepted"], p["drafted"]) if p["spec"] else 0,
                 verify_steps=p["steps"] if p["spec"] else None,
                 accepted_per_position=tuple(p["app"]) if p["spec"] and p["app"] else None,
                 gpu_seconds=p["gpu"], outcome_ok=p["ok"], itl_p50_ms=p["itl"],
                 itl_p99_ms=None if p["itl"] is None else 2 * p["itl"], batch_size=1 + i % 4)


def _filled(cls: type, ps: list[dict[str, Any]], offset: int) -> Any:
    stats = cls()
    for i, p in enumerate(ps):
        stats.update(_event(offset + i, p))
    return stats


@pytest.mark.parametrize(("cls", "adder"), [(BucketStats, BUCKET_ROWS),
                                            (SliceStats, SLICE_ROWS)])
@settings(max_examples=200)
@given(st.lists(events, max_size=40), st.lists(events, max_size=40))
def test_rows_add_as_the_objects_merge(cls: type, adder: RowAdder, a: list[dict[str, Any]],
                                       b: list[dict[str, Any]]) -> None:
    ra, rb = _filled(cls, a, 0).to_row(), _filled(cls, b, 1000).to_row()
    expected = cls.from_row(ra)
    expected.merge(cls.from_row(rb))
    assert orjson.dumps(adder.add(ra, rb)) == orjson.dumps(expected.to_row())


@given(st.lists(events, min_size=1, max_size=20))
def test_a_stored_row_with_null_columns_adds_as_from_row_reads_it(
        ps: list[dict[str, Any]]) -> None:
    # A row written before the v1.1 columns existed: NULL counters, sums and sketches.
    stored = _filled(BucketStats, ps, 0).to_row()
    stored.update(dict.fromkeys(("successes", "gpu_seconds", "itl_p50_ms", "itl_p99_ms",
                                 "gpu_seconds_sq", "per_position")))
    delta = _filled(BucketStats, ps, 100).to_row()
    expected = BucketStats.from_row(stored)
    expected.merge(BucketStats.from_row(delta))
    assert orjson.dumps(BUCKET_ROWS.add(stored, delta)) == orjson.dumps(expected.to_row())


@pytest.mark.parametrize(("cls", "adder"), [(BucketStats, BUCKET_ROWS),
                                            (SliceStats, SLICE_ROWS)])
@settings(max_examples=100)
@given(st.lists(st.lists(events, max_size=12), min_size=2, max_size=8), st.data())
def test_many_rows_added_at_once_equal_adding_them_one_by_one(
        cls: type, adder: RowAdder, parts: list[list[dict[str, Any]]], data: Any) -> None:
    # fold_chunks adds an hour's minute rows in one pass: the bytes stored must not change
    rows = [_filled(cls, ps, 100 * i).to_row() for i, ps in enumerate(parts)]
    for row in data.draw(st.lists(st.sampled_from(rows), max_size=2)):
        # rows written before the v1.1 columns existed, among them
        row.update((name, None) for name in ("successes", "gpu_seconds", "per_position",
                                             "itl_p50_ms") if name in row)
    expected = rows[0]
    for row in rows[1:]:
        expected = adder.add(expected, row)
    before = orjson.dumps(rows)
    assert orjson.dumps(adder.add_all(rows)) == orjson.dumps(expected)
    assert orjson.dumps(rows) == before  # the inputs are untouched
    with pytest.raises(ValueError, match="at least two"):
        adder.add_all(rows[:1])


def test_fresh_stats_are_zero_in_every_column() -> None:
    # SliceStats.__init__ spells its columns out: none may be missed or mistyped.
    assert SliceStats().to_row() == {**dict.fromkeys(SLICE_COUNTERS, 0),
                                     **dict.fromkeys(SLICE_FLOATS, 0.0), "per_position": []}
    assert [type(v) for v in SliceStats().to_row().values()] == (
        [int] * len(SLICE_COUNTERS) + [float] * len(SLICE_FLOATS) + [list])
