"""ColumnSums: the same sums, to the bit, as adding each row in arrival order."""

from __future__ import annotations

import math
import random
from array import array

from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.aggregate.bucket import COUNTERS, FLOATS, SKETCHES, BucketStats, bucket_values
from monitor.aggregate.columns import ColumnSums, as_stats
from monitor.policy.slices import (
    SLICE_COUNTERS,
    SLICE_FLOATS,
    SliceStats,
    slice_positions,
    slice_values,
)
from monitor.telemetry.event import Event

_row = st.tuples(
    st.integers(0, 5),  # key
    st.lists(st.integers(0, 10**9), min_size=2, max_size=2),
    st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=2, max_size=2),
    st.floats(0, 1e4) | st.just(math.nan),  # kept (NaN: absent)
    st.none() | st.lists(st.integers(0, 10**9), min_size=1, max_size=6),
)


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(_row, max_size=60), fold_every=st.integers(1, 9))
def test_sums_equal_adding_each_row_in_order(rows, fold_every) -> None:
    sums = ColumnSums(n_ints=2, n_floats=2, n_kept=1, fold_every=fold_every)
    want: dict[int, list] = {}
    for key, ints, floats, kept, positions in rows:
        sums.add(key, (*ints, *floats, kept), positions)
        w = want.setdefault(key, [[0, 0], [0.0, 0.0], [], []])
        w[0] = [a + b for a, b in zip(w[0], ints, strict=True)]
        for j, v in enumerate(floats):
            w[1][j] += v  # a running sum: the order the columns must keep
        if positions:
            pp = w[2] + [0] * (len(positions) - len(w[2]))
            w[2] = [a + (positions[i] if i < len(positions) else 0) for i, a in enumerate(pp)]
        w[3].append(kept)
    got = {key: (ints, floats, pp, kept.tolist()) for key, ints, floats, pp, kept in sums.sums()}
    assert list(got) == list(want)  # first-added order
    for key, (ints, floats, pp, kept) in got.items():
        w = want[key]
        assert ints == w[0] and all(type(v) is int for v in ints)
        assert [v.hex() for v in floats] == [v.hex() for v in w[1]]
        assert pp == w[2]
        assert [("nan" if math.isnan(v) else v) for v in kept] == [
            ("nan" if math.isnan(v) else v) for v in w[3]]


def _events(n: int, seed: int) -> list[Event]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        spec = rng.random() < 0.7
        k = rng.choice((2, 3, 5))
        drafted = rng.choice((0, k * 3, k * 7)) if spec else 0
        accepted = rng.randint(0, drafted)
        positions = None
        if spec and drafted and rng.random() < 0.8:
            positions = tuple(rng.randint(0, 9) for _ in range(rng.randint(1, k)))
        out.append(Event(
            f"r{i}", float(i), "code", rng.choice(("ok", "ok", "error")), "t", "r", "tok",
            output_tokens=rng.randint(0, 400), e2e_ms=rng.uniform(10, 4000),
            has_spec=spec, num_speculative_tokens=k if spec else 0,
            drafted_tokens=drafted, accepted_tokens=accepted,
            verify_steps=rng.choice((None, drafted // k + 1)) if spec else None,
            accepted_per_position=positions,
            ttft_ms=rng.choice((None, rng.uniform(1, 9))),
            itl_p50_ms=rng.choice((None, rng.uniform(1, 50))),
            batch_size=rng.choice((None, rng.randint(1, 64))),
            prompt_tokens=rng.choice((None, rng.randint(1, 9000))),
            outcome_ok=rng.choice((None, True, False)),
            outcome_schema_valid=rng.choice((None, True, False)),
            gpu_seconds=rng.choice((None, rng.uniform(0.01, 3.0))),
            draft_evicted=rng.random() < 0.05,
        ))
    return out


def test_bucket_and_slice_stats_from_columns_equal_those_updated_one_event_at_a_time() -> None:
    events = _events(3000, seed=7)
    buckets = ColumnSums(len(COUNTERS), len(FLOATS), len(SKETCHES), fold_every=512)
    slices = ColumnSums(len(SLICE_COUNTERS), len(SLICE_FLOATS), fold_every=512)
    want_b: dict[int, BucketStats] = {}
    want_s: dict[int, SliceStats] = {}
    for e in events:
        key = int(e.ts) % 7
        buckets.add(key, bucket_values(e), e.accepted_per_position if e.has_spec else None)
        slices.add(key, slice_values(e), slice_positions(e))
        want_b.setdefault(key, BucketStats()).update(e)
        want_s.setdefault(key, SliceStats()).update(e)
    got_b = as_stats(buckets, BucketStats.from_sums)
    got_s = as_stats(slices, SliceStats.from_sums)
    assert got_b == want_b
    assert {k: v.to_row() for k, v in got_b.items()} == {k: v.to_row() for k, v in want_b.items()}
    assert {k: v.to_row() for k, v in got_s.items()} == {k: v.to_row() for k, v in want_s.items()}


def test_reading_the_sums_changes_nothing() -> None:
    sums = ColumnSums(n_ints=1, n_floats=1, n_kept=1, fold_every=2)
    for i in range(5):
        sums.add("a", (i, 0.5, float(i)), (i,) if i else None)
    first = [(k, i, f, p, kept.tolist()) for k, i, f, p, kept in sums.sums()]
    assert first == [(k, i, f, p, kept.tolist()) for k, i, f, p, kept in sums.sums()]
    assert first == [("a", [10], [2.5], [10], [0.0, 1.0, 2.0, 3.0, 4.0])]


def test_from_sums_sets_each_name_from_its_place() -> None:
    counters = list(range(1, len(COUNTERS) + 1))
    floats = [0.5 * (i + 1) for i in range(len(FLOATS))]
    b = BucketStats.from_sums(counters, floats, [3], array("d"))
    assert [getattr(b, n) for n in COUNTERS] == counters
    assert [getattr(b, n) for n in FLOATS] == floats
    counters = list(range(1, len(SLICE_COUNTERS) + 1))
    floats = [0.5 * (i + 1) for i in range(len(SLICE_FLOATS))]
    s = SliceStats.from_sums(counters, floats, [3])
    assert [getattr(s, n) for n in SLICE_COUNTERS] == counters
    assert [getattr(s, n) for n in SLICE_FLOATS] == floats


def test_positions_are_read_as_they_were_added() -> None:
    """Per-position counts wait for the fold as added: a list changed afterwards by its
    owner does not change the sums."""
    sums = ColumnSums(n_ints=1, n_floats=0, fold_every=4)
    counts = [3, 2]
    sums.add("a", (1,), counts)
    counts[0] = 100
    sums.add("a", (1,), (1, 1, 1))
    assert [(k, ints, pp) for k, ints, _, pp, _ in sums.sums()] == [("a", [2], [4, 3, 1])]
