"""BucketStats: everything merges by addition, and no-draft requests stay undefined."""

from __future__ import annotations

from monitor.aggregate.bucket import BucketStats
from monitor.aggregate.series import series_key
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
