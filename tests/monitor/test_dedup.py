from __future__ import annotations

import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.dedup import SeenIds

HORIZON, WIDTH = 60.0, 6.0

steps = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.sampled_from("abcdefgh"), st.floats(0.0, 400.0)),
        st.tuples(st.just("prune"), st.just(""), st.floats(0.0, 400.0)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(steps)
def test_an_id_is_kept_at_least_the_horizon_and_at_most_one_slice_longer(
    script: list[tuple[str, str, float]],
) -> None:
    ids = SeenIds(HORIZON, WIDTH)
    added: dict[str, float] = {}  # the reference: each id with its newest event time
    newest = float("-inf")  # the pipeline prunes at its newest event time: never falls
    for op, rid, ts in script:
        if op == "add":
            ids.add(rid, ts)
            added[rid] = max(ts, added.get(rid, ts))
            assert rid in ids
            continue
        newest = max(newest, ts)
        ids.prune(newest)
        cutoff = newest - HORIZON
        for rid_, ts_ in added.items():
            if ts_ >= cutoff:
                assert rid_ in ids, (rid_, ts_, cutoff)
            elif ts_ < cutoff - WIDTH:
                assert rid_ not in ids, (rid_, ts_, cutoff)
        added = {r: t for r, t in added.items() if r in ids}
        assert len(ids) >= len(added)


def test_prune_drops_whole_slices_at_the_boundary() -> None:
    ids = SeenIds(horizon=60.0, width=10.0)
    ids.add("early", 100.0)  # slice [100, 110)
    ids.add("late", 109.999)  # same slice
    ids.add("next", 110.0)  # slice [110, 120)
    ids.prune(newest=169.999)  # cutoff 109.999: the first slice still reaches past it
    assert "early" in ids and "late" in ids
    ids.prune(newest=170.0)  # cutoff 110: the first slice ends exactly there
    assert "early" not in ids and "late" not in ids and "next" in ids
    assert ids.slices == 1 and len(ids) == 1


def test_restoring_keeps_only_ids_within_the_horizon_of_the_newest() -> None:
    items = [("old", 1000.0), ("edge", 1400.0), ("new", 1900.0)]
    ids = SeenIds.from_items(items, horizon=500.0, newest=1900.0)
    assert "old" not in ids and "edge" in ids and "new" in ids


def test_no_events_yet_prunes_nothing() -> None:
    ids = SeenIds(horizon=60.0)
    ids.add("a", 5.0)
    ids.prune(newest=float("-inf"))
    assert "a" in ids


def test_width_must_be_positive() -> None:
    with pytest.raises(ValueError, match="width"):
        SeenIds(horizon=60.0, width=0.0)


def test_memory_in_steady_traffic_returns_to_the_same_level_every_slice() -> None:
    """Once the horizon is full, the footprint at the same point of each slice repeats.

    This is the property the soak benchmark's flat-RSS check rests on: no table that
    doubles late, nothing that accumulates across slices.
    """
    rate, seconds = 400, 300  # per second of event time; 24,000 ids in the horizon
    ids = SeenIds(HORIZON, WIDTH)
    level: list[int] = []
    tracemalloc.start()
    try:
        n = 0
        for second in range(seconds):
            for _ in range(rate):
                ids.add(f"req-{n:012d}", second + 0.5)
                n += 1
            ids.prune(newest=second + 0.5)
            if second % int(WIDTH) == int(WIDTH) - 1 and second > 2 * HORIZON:
                level.append(tracemalloc.get_traced_memory()[0])
    finally:
        tracemalloc.stop()
    assert ids.slices <= HORIZON / WIDTH + 1
    assert len(ids) <= rate * (HORIZON + WIDTH)
    assert max(level) - min(level) <= 0.01 * max(level), (min(level), max(level))


def test_among_finds_ids_in_any_slice_and_add_many_spreads_them_by_event_time() -> None:
    ids = SeenIds(horizon=600.0, width=60.0)
    ids.add_many([(100.0, "a"), (101.0, "b"), (400.0, "c"), (130.0, "d")])
    assert ids.slices == 3
    assert ids.among(["a", "c", "x", "d"]) == {"a", "c", "d"}
    assert ids.among(set()) == set()
    ids.prune(newest=780.0)  # cutoff 180: the slices [60, 120) and [120, 180) go
    assert ids.among(["a", "b", "c", "d"]) == {"c"}


@pytest.mark.parametrize(("horizon", "width"), [(60.0, 60.0), (900.0, 60.0), (3600.0, 225.0)])
def test_a_long_horizon_is_cut_into_at_most_sixteen_slices(horizon: float,
                                                           width: float) -> None:
    ids = SeenIds(horizon)
    assert ids.width == width
    for t in range(0, 10 * int(horizon), 7):  # an id every 7 s over ten horizons
        ids.add(f"r{t}", float(t))
        ids.prune(float(t))
        assert ids.slices <= ids.max_slices <= SeenIds.MAX_SLICES + 2
    newest = float(t)
    # kept at least the horizon, at most a slice longer
    assert f"r{int(newest - horizon) // 7 * 7 + 7}" in ids
    assert f"r{int(newest - horizon - width) // 7 * 7 - 7}" not in ids
    assert SeenIds.from_items([("a", newest)], horizon, newest).width == width
