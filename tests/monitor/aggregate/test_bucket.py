"""BucketStats: everything merges by addition, and no-draft requests stay undefined."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.aggregate.bucket import SKETCHES, BucketStats
from monitor.aggregate.series import series_key
from monitor.aggregate.sketch import LogHistogram
from monitor.telemetry.event import Event


def event(i: int, drafted: int, accepted: int, **kw: object) -> Event:
    base: dict = dict(
        request_id=f"r{i}", ts=1000.0 + i, route="code", status="ok", target_model="t",
        target_revision="r1", target_tokenizer="tok", output_tokens=50, e2e_ms=1000.0,
        ttft_ms=100.0, has_spec=True, num_speculative_tokens=3, drafted_tokens=drafted,
        accepted_tokens=accepted, verify_steps=drafted // 3,
        accepted_per_position=(accepted,) + (0, 0) if accepted else (0, 0, 0),
    )
    base.update(kw)
    return Event(**base)


def test_merge_of_parts_equals_the_whole() -> None:
    events = [event(i, 30, i % 30, status="error" if i % 7 == 0 else "ok",
                    draft_evicted=i % 5 == 0, batch_size=1 + i % 8) for i in range(100)]
    whole, a, b = BucketStats(), BucketStats(), BucketStats()
    for i, e in enumerate(events):
        whole.update(e)
        (a if i % 2 else b).update(e)
    a.merge(b)
    assert a == whole
    assert BucketStats.from_row(whole.to_row()) == whole
    assert whole.errors == 15 and whole.evicted_requests == 20
    assert whole.per_position[0] == whole.accepted_tokens


def test_requests_that_draft_nothing_have_no_rate() -> None:
    b = BucketStats()
    b.update(event(1, 0, 0))
    assert b.acceptance_rate is None
    assert (b.requests, b.spec_requests, b.drafting_requests) == (1, 1, 0)
    b.update(event(2, 10, 5))
    assert b.acceptance_rate == 0.5


def test_speculation_off_events_count_requests_only() -> None:
    b = BucketStats()
    b.update(event(1, 0, 0, has_spec=False, num_speculative_tokens=0, verify_steps=None,
                   accepted_per_position=None))
    assert (b.requests, b.spec_requests, b.drafted_tokens) == (1, 0, 0)


def test_series_key_separates_model_pairs_and_draft_lengths() -> None:
    a = series_key(event(1, 3, 1))
    assert series_key(event(2, 3, 1, draft_revision="d2")) != a
    assert series_key(event(3, 3, 1, num_speculative_tokens=4)) != a
    assert series_key(event(4, 6, 2)) == a
    assert a.draft_model == ""


# --- task outcome and cost (telemetry v1.1) -----------------------------------------------


def _v11_events() -> list[Event]:
    """Mixed: some report outcomes, some GPU time (reported or estimated), some ITL."""
    out = []
    for i in range(60):
        out.append(event(
            i, 30, i % 30,
            status="error" if i % 11 == 0 else "ok",
            outcome_ok=None if i % 3 == 0 else i % 4 != 1,
            outcome_schema_valid=None if i % 2 else i % 5 != 0,
            outcome_tool_calls_valid=True if i % 7 == 0 else None,
            gpu_seconds=None if i % 6 == 0 else 0.25 * (1 + i % 5),
            gpu_estimated=i % 10 == 0,
            itl_p50_ms=None if i % 4 == 0 else 10.0 + i,
            itl_p99_ms=None if i % 4 == 0 else 40.0 + 2 * i,
        ))
    return out


def test_outcome_and_cost_counts_follow_their_definitions() -> None:
    events = _v11_events()
    b = BucketStats()
    for e in events:
        b.update(e)
    assert b.successes == sum(e.success for e in events)
    for field, reported, true in (
        ("outcome_ok", "outcome_ok_reported", "outcome_ok_true"),
        ("outcome_schema_valid", "schema_valid_reported", "schema_valid_true"),
        ("outcome_tool_calls_valid", "tool_calls_valid_reported", "tool_calls_valid_true"),
    ):
        values = [getattr(e, field) for e in events if getattr(e, field) is not None]
        assert getattr(b, reported) == len(values) and getattr(b, true) == sum(values)
    gpu = [e.gpu_seconds for e in events if e.gpu_seconds is not None]
    assert b.gpu_seconds == sum(gpu) and b.gpu_seconds_sq == sum(g * g for g in gpu)
    assert b.success_gpu_seconds == sum(e.gpu_seconds for e in events
                                        if e.gpu_seconds is not None and e.success)
    assert b.gpu_reported_requests == sum(
        e.gpu_seconds is not None and not e.gpu_estimated for e in events)
    assert b.itl_p50_ms.count == b.itl_p99_ms.count == sum(e.itl_p50_ms is not None
                                                           for e in events)
    assert b.success_rate == b.successes / 60
    assert b.ok_rate == b.outcome_ok_true / b.outcome_ok_reported
    assert b.tool_calls_valid_rate == 1.0
    assert b.gpu_seconds_per_success == b.gpu_seconds / b.successes
    assert b.successes_per_gpu_second == b.successes / b.gpu_seconds
    assert b.cost_per_success(2.0) == b.gpu_seconds / b.successes * 2.0 / 3600
    assert b.cost_per_success(None) is None


def test_outcome_absent_is_unknown_never_false() -> None:
    b = BucketStats()
    b.update(event(1, 3, 1))
    b.update(event(2, 3, 1, status="timeout"))
    assert (b.successes, b.success_rate) == (1, 0.5)  # status decides without outcome.ok
    assert b.ok_rate is b.schema_valid_rate is b.tool_calls_valid_rate is None
    assert b.successes_per_gpu_second is None and b.cost_per_success(3.0) is None
    b.update(event(3, 3, 1, status="error", outcome_ok=True))  # the verdict wins over status
    assert (b.successes, b.errors, b.ok_rate) == (2, 2, 1.0)


def test_outcome_and_cost_merge_and_roundtrip_exactly() -> None:
    whole, a, b = BucketStats(), BucketStats(), BucketStats()
    for i, e in enumerate(_v11_events()):
        whole.update(e)
        (a if i % 3 else b).update(e)
    a.merge(b)
    assert a.gpu_seconds == pytest.approx(whole.gpu_seconds, rel=1e-12)
    a.gpu_seconds, a.gpu_seconds_sq = whole.gpu_seconds, whole.gpu_seconds_sq
    a.success_gpu_seconds = whole.success_gpu_seconds
    assert a == whole
    row = whole.to_row()
    back = BucketStats.from_row(row)
    assert back == whole
    # Float sums come back as floats, not truncated to an int.
    assert isinstance(back.gpu_seconds, float) and back.gpu_seconds == whole.gpu_seconds
    assert back.itl_p99_ms.quantile(0.99) == whole.itl_p99_ms.quantile(0.99)
    # A row written before the v1.1 columns existed reads back as nothing reported.
    old = {k: v for k, v in row.items() if k not in (
        "successes", "gpu_seconds", "gpu_seconds_sq", "success_gpu_seconds", "itl_p50_ms",
        "itl_p99_ms")}
    old.update(dict.fromkeys(("successes", "gpu_seconds", "itl_p50_ms", "itl_p99_ms",
                              "gpu_seconds_sq", "success_gpu_seconds")))
    legacy = BucketStats.from_row(old)
    assert legacy.gpu_seconds == 0.0 and legacy.itl_p50_ms.count == 0


def test_a_float_difference_makes_buckets_unequal() -> None:
    a, b = BucketStats(), BucketStats()
    a.update(event(1, 3, 1, gpu_seconds=0.5))
    b.update(event(1, 3, 1, gpu_seconds=0.25))
    assert a != b


@pytest.mark.parametrize("n", [1, 2, 15, 16, 17, 250])
def test_buffered_latencies_give_the_sketches_of_their_values_in_order(n: int) -> None:
    """The latencies buffered per request (one array, NaN where a request reported none)
    fold into sketches equal, to the last bit of each sum, to sketches fed each column's
    values in arrival order; on either side of the size where the columns are cut with
    numpy, and whether the sketches are read between requests or only written."""
    import json
    import random

    from monitor.aggregate.sketch import LogHistogram

    rng = random.Random(n)
    events, columns = [], [[] for _ in range(5)]
    for i in range(n):
        e2e = rng.uniform(1.0, 5000.0) if i % 9 else float(rng.randint(1, 5000))
        ttft = None if rng.random() < 0.2 else rng.choice([rng.uniform(0.0, 900.0), e2e])
        itl50 = None if rng.random() < 0.3 else rng.uniform(0.0, 80.0)
        itl99 = None if rng.random() < 0.3 else rng.uniform(0.0, 400.0)
        out = rng.randint(0, 500)
        events.append(event(i, 30, 10, e2e_ms=e2e, ttft_ms=ttft, output_tokens=out,
                            itl_p50_ms=itl50, itl_p99_ms=itl99))
        columns[1].append(e2e)
        if ttft is not None:
            columns[0].append(ttft)
            if e2e > ttft:
                columns[2].append(out * 1000.0 / (e2e - ttft))
        for j, v in ((3, itl50), (4, itl99)):
            if v is not None:
                columns[j].append(v)
    expected = []
    for values in columns:
        sketch = LogHistogram()
        if values:
            sketch.extend(values)
        expected.append(json.dumps(sketch.to_json()))
    written, read = BucketStats(), BucketStats()
    for i, e in enumerate(events):
        written.update(e)
        read.update(e)
        if i == n // 2:
            _ = read.ttft_ms  # folds what is buffered so far; the rest later
    for stats in (written, read):
        row = stats.to_row()
        got = [json.dumps(row[name]) for name in
               ("ttft_ms", "e2e_ms", "decode_tps", "itl_p50_ms", "itl_p99_ms")]
        if stats is written:
            assert got == expected
        else:  # folded in two parts: the same buckets and counts (sums may round apart)
            assert [json.loads(g)["c"] for g in got] == [json.loads(x)["c"] for x in expected]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.booleans()), min_size=0, max_size=24),
       st.integers(0, 2**32 - 1))
def test_rows_folded_at_once_are_the_rows_folded_one_by_one(
        shapes: list[tuple[int, bool]], seed: int) -> None:
    """A checkpoint folds the latencies of all its unread buckets in one pass (rows_of):
    the rows written must be byte for byte those of to_row, for buckets of 0 to 40
    requests (either side of the size extend() cuts with numpy), with latencies missing,
    zero and on bucket edges, and for buckets whose sketches were read before."""
    import random

    import orjson

    from monitor.aggregate.bucket import rows_of

    rng = random.Random(seed)
    gamma = 1.01 / 0.99  # the 1% sketch's: values on its bucket edges take math.log's side
    edges = [gamma ** k for k in range(-5, 400, 37)]
    stats = []
    for n, read in shapes:
        b = BucketStats()
        for i in range(n):
            e2e = rng.choice([rng.uniform(0.0, 9000.0), 0.0, rng.choice(edges)])
            ttft = rng.choice([None, 0.0, rng.uniform(0.0, e2e), e2e])
            itl = rng.choice([None, rng.uniform(0.0, 300.0), rng.choice(edges)])
            b.update(event(i, 30, 10, e2e_ms=e2e, ttft_ms=ttft, itl_p50_ms=itl,
                           itl_p99_ms=None if itl is None else 2 * itl,
                           output_tokens=rng.randint(0, 900)))
            if read and i == n // 2:
                _ = b.e2e_ms  # read: its sketches are built, the rest is buffered
        stats.append(b)
    expected = [orjson.dumps(b.to_row()) for b in stats]
    assert [orjson.dumps(row) for row in rows_of(stats)] == expected
    assert [orjson.dumps(b.to_row()) for b in stats] == expected  # nothing folded for good


_POSITIVE = st.floats(min_value=1e-3, max_value=1e6, allow_nan=False)
_LATENCY = st.one_of(st.none(), st.just(0.0), _POSITIVE)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.tuples(_LATENCY, _POSITIVE, _LATENCY), max_size=40), max_size=6),
       st.lists(st.booleans(), min_size=6, max_size=6),
       st.lists(st.integers(0, 4), min_size=1, max_size=5, unique=True))
def test_merge_sketches_equals_merging_the_built_sketches_to_the_bit(
        buckets: list[list[tuple[float | None, ...]]], read: list[bool], columns: list[int]
) -> None:
    # /metrics merges a checkpoint's deltas this way: into one target per column, some
    # deltas read before (their sketches built), most never; the targets must come out as
    # if every delta's sketches had been built and merged, sums included, to the bit.
    direct = [LogHistogram() for _ in columns]
    built = [LogHistogram() for _ in columns]
    for i, values in enumerate(buckets):
        a, b = BucketStats(), BucketStats()
        for j, (ttft, e2e, p50) in enumerate(values):
            e = Event(f"r{i}-{j}", 0.0, "c", "ok", "t", "r", "tok", output_tokens=9,
                      ttft_ms=ttft, e2e_ms=e2e, itl_p50_ms=p50, itl_p99_ms=p50)
            a.update(e)
            b.update(e)
        if read[i]:
            a.ttft_ms  # noqa: B018 - builds its sketches before the merge
        got = a.merge_sketches(columns, direct)
        want = []
        for target, j in zip(built, columns, strict=True):
            sketch = getattr(b, SKETCHES[j])
            target.merge(sketch)
            want.append((sketch.count, sketch.total))
        assert got == want
        assert (a._sketches is None) == (not read[i])
    assert [h.to_json() for h in direct] == [h.to_json() for h in built]
