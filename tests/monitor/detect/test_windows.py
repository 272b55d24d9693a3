"""The event-time windows against brute force: fast paths, late events, deferred work, state."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.detect import windows
from monitor.detect.windows import _BIN_EVERY, BucketRing, SlidingHistogram, ThinnedSample

WINDOW, BUCKET = 300.0, 60.0
SIZE = 5  # buckets in the window


STEPS = st.tuples(
    st.sampled_from(["next", "next", "next", "same", "late", "very_late", "gap"]),
    st.floats(0.0, 1.0),
    st.integers(0, 50),
    st.integers(0, 9),
)


def _times(steps: list[tuple[str, float, int, int]]) -> list[tuple[float, int, int]]:
    ts, out = 1000.0, []
    for kind, u, a, b in steps:
        if kind == "next":
            ts += 30.0 * u
        elif kind == "gap":
            ts += 60.0 + 840.0 * u
        late = {"late": 250.0 * u, "very_late": 2000.0}.get(kind, 0.0)
        out.append((ts - late, a, b))
    return out


def streams(max_size: int = 300) -> st.SearchStrategy[list[tuple[float, int, int]]]:
    """Event times mostly in order, with late ones (inside the window and beyond) and gaps."""
    lengths = st.integers(1, max_size)
    return lengths.flatmap(lambda n: st.lists(STEPS, min_size=n, max_size=n)).map(_times)


def in_window(times: list[float]) -> tuple[list[int], int]:
    """Which events the window holds after ``times`` (indices) and how many were dropped."""
    kept, head, dropped = [], None, 0
    for n, ts in enumerate(times):
        i = math.floor(ts / BUCKET)
        head = i if head is None else max(head, i)
        if i <= head - SIZE:
            dropped += 1
        else:
            kept.append(n)
    assert head is not None
    return [n for n in kept if math.floor(times[n] / BUCKET) > head - SIZE], dropped


@given(streams())
def test_bucket_ring_totals_are_the_window_sums(events) -> None:
    slow, fast = BucketRing(WINDOW, BUCKET, 3), BucketRing(WINDOW, BUCKET, 3)
    for ts, a, b in events:
        slow.add(ts, (1, a, b))
        bucket = fast.slot(ts)  # the detectors' way: the caller adds the fields
        if bucket is not None:
            for j, v in enumerate((1, a, b)):
                bucket[j] += v
                fast.sums[j] += v
    kept, dropped = in_window([ts for ts, _, _ in events])
    expected = (len(kept), sum(events[n][1] for n in kept), sum(events[n][2] for n in kept))
    assert slow.totals == fast.totals == expected
    assert slow.dropped == fast.dropped == dropped
    assert slow.snapshot() == fast.snapshot()


@given(streams(), st.integers(0, 300))
def test_bucket_ring_restores_mid_stream(events, cut) -> None:
    a = BucketRing(WINDOW, BUCKET, 2)
    for ts, x, _ in events[:cut]:
        a.add(ts, (1, x))
    b = BucketRing.restore(json.loads(json.dumps(a.snapshot())))
    assert b.snapshot() == a.snapshot()
    for ts, x, _ in events[cut:]:
        assert a.add(ts, (1, x)) == b.add(ts, (1, x))
        assert a.totals == b.totals
    assert a.snapshot() == b.snapshot()


def test_bucket_ring_float_totals_restore_bit_for_bit() -> None:
    a = BucketRing(WINDOW, BUCKET, 1)
    for i in range(500):
        a.add(7.3 * i, (i / 7,))
    b = BucketRing.restore(json.loads(json.dumps(a.snapshot())))
    for i in range(500, 900):
        a.add(7.3 * i, (i / 7,))
        b.add(7.3 * i, (i / 7,))
        assert a.totals == b.totals


_VALUES = st.one_of(st.integers(0, 2**40), st.integers(2**62, 2**66),  # squares pass int64
                    st.floats(0.0, 1e6))


@given(streams(), st.lists(_VALUES, min_size=3, max_size=3), st.integers(0, 300))
def test_closed_buckets_packed_change_no_number(events, extra, cut) -> None:
    """Closed buckets are packed (ints as int64, floats as doubles, a mix or an int past
    int64 left a list); late events unpack them. Totals, drops and snapshots are those of
    a ring that never packs, before and after a restore."""
    packed, plain = BucketRing(WINDOW, BUCKET, 4), BucketRing(WINDOW, BUCKET, 4)

    def unpacked(call: Any) -> Any:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(windows, "_packed", lambda values: values)
            return call()

    for n, (ts, a, _) in enumerate(events):
        row = (1, a, extra[n % 3], a * a)
        assert unpacked(lambda: plain.add(ts, row)) == packed.add(ts, row)  # noqa: B023
        if n == cut:
            packed = BucketRing.restore(json.loads(json.dumps(packed.snapshot())))
        assert packed.totals == plain.totals
    assert packed.snapshot() == plain.snapshot() and packed.dropped == plain.dropped


def test_closed_buckets_of_counts_share_one_int64_array() -> None:
    ring = BucketRing(WINDOW, BUCKET, 2)
    for t in range(0, 300, 10):
        ring.add(float(t), (1, 1000 + t))
    assert list(ring._buckets) == [ring.head] and type(ring._buckets[ring.head]) is list
    assert ring._closed is not None and ring._closed.typecode == "q"
    assert list(ring._closed_keys or ()) == [0, 1, 2, 3] and len(ring._closed) == 8
    ring.add(5.0, (1, 7))  # late, inside the window: that bucket is a list again
    assert ring._buckets[0] == [7, 6157] and ring.totals == (31, 1000 * 30 + 4350 + 7)
    assert list(ring._closed_keys or ()) == [1, 2, 3] and len(ring._closed) == 6
    ring.advance(BUCKET * 7)  # buckets 0 to 2 fall out, from the list and from the array
    assert list(ring._closed_keys or ()) == [3, 4] and list(ring._buckets) == []
    assert ring.totals == (12, sum(1000 + t for t in range(180, 300, 10)))


def test_a_bucket_that_packs_to_the_other_typecode_stays_a_list() -> None:
    ring = BucketRing(WINDOW, BUCKET, 1)
    ring.add(0.0, (3,))
    ring.add(BUCKET, (0.5,))
    ring.add(2 * BUCKET, (4,))
    assert list(ring._closed_keys or ()) == [0] and ring._buckets[1] == [0.5]
    snap = ring.snapshot()
    assert snap["buckets"] == [[0, [3]], [1, [0.5]], [2, [4]]]
    assert BucketRing.restore(json.loads(json.dumps(snap))).snapshot() == snap


def test_bucket_ring_advance_alone_and_bad_width() -> None:
    ring = BucketRing(WINDOW, BUCKET, 1)
    ring.add(0.0, (1,))
    ring.advance(400.0)  # nothing counted, the window moved on
    assert ring.totals == (0,) and ring.oldest == 2
    assert ring.slot(399.0) is not None and ring.slot(60.0) is None and ring.dropped == 1
    with pytest.raises(ValueError):
        ring.add(400.0, (1, 2))


# -- SlidingHistogram --------------------------------------------------------------------------


def reference_bins(h: SlidingHistogram, values: list[float]) -> dict[int, int]:
    bins: dict[int, int] = {}
    for v in values:
        bins[h.key(v)] = bins.get(h.key(v), 0) + 1
    return bins


def reference_quantile(h: SlidingHistogram, values: list[float], q: float) -> float | None:
    bins = reference_bins(h, values)
    if not values:
        return None
    rank, seen = q * (len(values) - 1), 0
    for key in sorted(bins):
        seen += bins[key]
        if seen > rank:
            return h.value(key)
    raise AssertionError("unreachable")


@settings(max_examples=50)
@given(streams(max_size=600), st.sampled_from([None, 5, 1]))
def test_histogram_matches_brute_force(events, read_every) -> None:
    h = SlidingHistogram(WINDOW, BUCKET)
    tracked = SlidingHistogram(WINDOW, BUCKET)  # tracks a bin from the start: values bin at once
    probe = h.key(20.0)
    tracked.count_below(probe)
    values: list[tuple[float, float]] = []
    for n, (ts, a, b) in enumerate(events):
        x = a + b / 10.0  # zeros too: the bin under every positive one
        assert h.add(ts, x) == tracked.add(ts, x)
        values.append((ts, x))
        if read_every and n % read_every == 0:
            h.quantile(0.5)  # reads bin the pending values early: nothing may change
    kept, _ = in_window([ts for ts, _ in values])
    window = [values[n][1] for n in kept]
    for hist in (h, tracked):
        assert hist.count == len(window)
        assert hist.bins() == reference_bins(hist, window)
        for q in (0.0, 0.25, 0.5, 1.0):
            assert hist.quantile(q) == reference_quantile(hist, window, q)
        assert hist.count_below(probe) == sum(1 for x in window if hist.key(x) < probe)
    assert h.snapshot() == tracked.snapshot()


def test_histogram_keeps_pending_values_bounded_and_in_order() -> None:
    h = SlidingHistogram(WINDOW, BUCKET)
    eager = SlidingHistogram(WINDOW, BUCKET)
    for i in range(3 * _BIN_EVERY + 7):  # one busy bucket
        v = 50.0 + (i * 37) % 101
        h.add(1.0, v)
        eager.add(1.0, v)
        eager.bins()  # binned on arrival
        assert len(h._pending) < _BIN_EVERY
    assert h.snapshot() == eager.snapshot()  # same bins, same order within the bucket


@given(streams(max_size=400), st.integers(0, 400))
def test_histogram_restores_mid_stream(events, cut) -> None:
    a = SlidingHistogram(WINDOW, BUCKET)
    for ts, x, _ in events[:cut]:
        a.add(ts, float(x))
    b = SlidingHistogram.restore(json.loads(json.dumps(a.snapshot())))
    assert b.snapshot() == a.snapshot()
    for ts, x, _ in events[cut:]:
        a.add(ts, float(x))
        b.add(ts, float(x))
    assert a.quantile(0.3) == b.quantile(0.3) and a.snapshot() == b.snapshot()


@settings(max_examples=50)
@given(streams(max_size=600), st.lists(st.integers(1, 700), min_size=1, max_size=4),
       st.booleans())
def test_histogram_add_many_equals_add(events, sizes, track) -> None:
    """Runs of values of one bucket (as ``ThroughputMonitor.update_many`` makes them) added at
    once: the same counts, bins, tracked counts and snapshot as one add per value."""
    one, many = SlidingHistogram(WINDOW, BUCKET), SlidingHistogram(WINDOW, BUCKET)
    probe = one.key(20.0)
    if track:
        one.count_below(probe)
        many.count_below(probe)
    for ts, a, b in events:
        one.add(ts, a + b / 10.0)
    runs: list[tuple[float, list[float]]] = []
    call = 0
    for ts, a, b in events:  # consecutive values of one bucket, at most sizes[...] per run
        if (runs and math.floor(runs[-1][0] / BUCKET) == math.floor(ts / BUCKET)
                and len(runs[-1][1]) < sizes[call % len(sizes)]):
            runs[-1][1].append(a + b / 10.0)
        else:
            call += 1
            runs.append((ts, [a + b / 10.0]))
    for ts, values in runs:
        many.add_many(ts, values)
    assert many.add_many(0.0, []) and many.add_many(-1e9, [1.0]) is False
    assert many.count == one.count and many.bins() == one.bins()
    assert many.count_below(probe) == one.count_below(probe)
    assert many.snapshot() == one.snapshot()


def test_histogram_tracking_follows_expiry_and_untrack() -> None:
    h = SlidingHistogram(WINDOW, BUCKET)
    low = h.key(10.0)
    for i in range(20):
        h.add(10.0 * i, 5.0 if i % 2 else 50.0)
    assert h.count_below(low) == 10
    h.add(1000.0, 1.0)  # everything before fell out of the window
    assert h.count_below(low) == 1 and h.count == 1
    h.untrack()
    h.add(1001.0, 2.0)
    assert h.count_below(low) == 2  # counted again from the bins


# -- ThinnedSample -----------------------------------------------------------------------------


def test_thinned_sample_round_trip() -> None:
    s = ThinnedSample(capacity=8)
    for i in range(100):
        s.add((i, float(i)))
    again = ThinnedSample.restore(json.loads(json.dumps(s.snapshot())))
    assert again.items == s.items and again.stride == s.stride == 16


def test_a_pair_sample_keeps_int32_until_an_int_needs_int64() -> None:
    sample, reference = windows.PairSample(capacity=8), ThinnedSample(capacity=8)
    pairs = [(k, k / 8) for k in range(5)] + [(2**40, 0.5), (3, 0.25), (2**31, 1.5)]
    for n, pair in enumerate(pairs):
        sample.add(pair)
        reference.add(pair)
        assert sample._ints.typecode == ("q" if n >= 5 else "i")
    assert sample.items == reference.items == pairs
    for snap in (sample.snapshot(), reference.snapshot()):
        restored = windows.PairSample.restore(json.loads(json.dumps(snap)))
        assert restored.snapshot() == sample.snapshot() and restored._ints.typecode == "q"
    small = windows.PairSample.restore(windows.PairSample(capacity=8).snapshot())
    assert small._ints.typecode == "i"
