"""The judge on hand-built rollups: worse, better, same, insufficient, a draft length change
compared at the shared positions, a canary serving both setups, sides cut by the next
change, errors, speculation turned off, and hour rows once the minute rows are gone."""

from __future__ import annotations

from datetime import timedelta

import pytest

from monitor.changes import JudgeSettings, judge_change, judge_changes
from monitor.changes.judge import side_windows
from monitor.store.query import rfc3339
from monitor.store.store import Store
from tests.monitor.changes.traffic import OLD, T0, change, commit, setup, traffic
from tests.monitor.store.helpers import at

HOUR = 3600
S = JudgeSettings(window=2 * HOUR)
AT = T0 + 2 * HOUR + 17.5  # mid-minute, as a real first event is


def _before_after(store: Store, new: dict[str, str], *, before: dict | None = None,
                  after: dict | None = None, minutes_after: int = 120, **kw: object) -> None:
    commit(store, traffic("chat", OLD, T0, 120, seed=1, **(before or {}))
           + traffic("chat", new, T0 + 2 * HOUR, minutes_after, seed=2, **(after or {})), **kw)


def _one(store: Store, settings: JudgeSettings = S):
    (j,) = judge_changes(store, settings=settings)
    return j


def test_draft_drift_that_lowers_acceptance_is_worse_with_its_interval(lite: Store) -> None:
    new = setup(target_revision="t2")
    rec = change("c1", AT, OLD, new, live={"state": "worse", "previous_rate": 0.44})
    _before_after(lite, new, after={"p": 0.6, "e2e": 1150.0}, changes=[rec])
    j = _one(lite)
    acc = j.metric("acceptance")
    assert acc.verdict == "worse" and acc.extra["basis"] == "rate"
    low, high = acc.interval
    assert low < acc.change < high < -0.05  # the whole interval is a fall of at least 5%
    assert acc.before == pytest.approx(0.443, abs=0.02)
    assert acc.after == pytest.approx(0.326, abs=0.02)
    assert acc.requests_before == acc.requests_after == 2400
    assert acc.extra["drafted_tokens_before"] == 2400 * 32 and acc.extra["live"] == "worse"
    assert acc.extra["minutes_before"] == 120
    assert j.metric("mean_accepted_length").verdict == "worse"
    assert j.metric("e2e_p50").verdict == "worse" and j.metric("decode_tps_p50").verdict == "worse"
    assert j.metric("ttft_p50").verdict == "same" and j.metric("error_rate").verdict == "same"
    assert j.verdict == "worse" and j.reason.startswith("worse: acceptance 0.4")
    doc = j.to_json()
    assert doc["kind"] == "draft_drift" and doc["verdict"] == "worse"
    assert doc["summary"] == "chat: target t1 -> t2, draft d1 unchanged (draft drift)"
    assert doc["at"] == rfc3339(at(AT)) and doc["live"]["state"] == "worse"
    assert doc["before"]["since"] == rfc3339(at(T0)) and doc["after"]["granularity"] == "minute"
    assert doc["metrics"]["acceptance"]["direction_bad"] == "lower"
    assert doc["metrics"]["e2e_p99"]["direction_bad"] == "higher"


def test_a_better_draft_is_better(lite: Store) -> None:
    new = setup(draft_revision="d2")
    _before_after(lite, new, before={"p": 0.6}, after={"p": 0.75, "e2e": 850.0},
                  changes=[change("c1", AT, OLD, new)])
    j = _one(lite)
    assert j.record.kind == "new_draft"
    assert j.metric("acceptance").verdict == "better"
    assert j.metric("acceptance").interval[0] > 0.05
    assert j.metric("decode_tps_p50").verdict == "better"
    assert j.verdict == "better" and "worse" not in {m.verdict for m in j.metrics}


def test_a_fine_tune_that_leaves_acceptance_alone_is_the_same(lite: Store) -> None:
    new = setup(target_revision="t2")
    _before_after(lite, new, changes=[change("c1", AT, OLD, new)])
    j = _one(lite)
    acc = j.metric("acceptance")
    assert acc.verdict == "same"
    low, high = acc.interval
    assert low < 0 < high and high - low < 0.1  # tight, and around no change
    assert {m.verdict for m in j.metrics} == {"same"}
    assert j.verdict == "same" and j.reason == "no metric moved by its minimum effect"


def test_too_few_requests_after_is_insufficient_data(lite: Store) -> None:
    new = setup(target_revision="t2")
    _before_after(lite, new, after={"p": 0.4}, minutes_after=5,
                  changes=[change("c1", AT, OLD, new)])
    j = _one(lite)
    acc = j.metric("acceptance")
    assert acc.verdict == "insufficient_data" and acc.interval is None
    assert acc.requests_after == 100 and acc.after is not None  # the value is still shown
    assert acc.extra["reason"] == "100 drafting requests after the change (need 200)"
    assert j.verdict == "insufficient_data"
    assert j.reason.startswith("insufficient data: acceptance: 100 drafting requests")
    # Fewer required: the same data decides.
    assert _one(lite, JudgeSettings(window=2 * HOUR, min_requests=50)).verdict == "worse"


def test_a_longer_draft_is_compared_at_the_shared_positions(lite: Store) -> None:
    old, new = setup(num_speculative_tokens="3"), setup(num_speculative_tokens="5")
    commit(lite, traffic("chat", old, T0, 120, seed=1)
           + traffic("chat", new, T0 + 2 * HOUR, 120, seed=2),
           [change("c1", AT, old, new)])
    j = _one(lite)
    assert j.record.kind == "draft_length"
    acc = j.metric("acceptance")
    assert acc.extra["basis"] == "shared_positions" and acc.extra["positions"] == 3
    assert acc.verdict == "same"
    # The raw rate fell by a fifth with no drift at all: that is what the basis avoids.
    raw_before = acc.extra["accepted_tokens_before"] / acc.extra["drafted_tokens_before"]
    raw_after = acc.extra["accepted_tokens_after"] / acc.extra["drafted_tokens_after"]
    assert raw_after / raw_before - 1 < -0.15
    assert acc.before == pytest.approx((0.7 + 0.49 + 0.343) / 3, abs=0.02)
    # More tokens per step with the longer draft: a real gain, and nothing got worse.
    assert j.metric("mean_accepted_length").verdict == "better"
    assert j.verdict == "better"


def test_a_worse_longer_draft_is_worse_at_the_shared_positions(lite: Store) -> None:
    old, new = setup(num_speculative_tokens="3"), setup(num_speculative_tokens="5",
                                                        draft_revision="d2")
    commit(lite, traffic("chat", old, T0, 120, seed=1)
           + traffic("chat", new, T0 + 2 * HOUR, 120, p=0.55, seed=2),
           [change("c1", AT, old, new)])
    acc = _one(lite).metric("acceptance")
    assert acc.extra["basis"] == "shared_positions" and acc.verdict == "worse"


def test_a_canary_counts_each_side_in_its_own_series(lite: Store) -> None:
    new = setup(draft_revision="d2")
    # The old setup keeps serving most traffic after the change, at its old rate; the canary
    # gets a fifth of it, at a worse rate. Mixing them would hide most of the fall.
    commit(lite, traffic("chat", OLD, T0, 240, per_minute=20, seed=1)
           + traffic("chat", new, T0 + 2 * HOUR, 120, per_minute=5, p=0.55, seed=2),
           [change("c1", AT, OLD, new)])
    j = _one(lite)
    acc = j.metric("acceptance")
    assert acc.requests_before == 2400 and acc.requests_after == 600
    assert acc.verdict == "worse"
    assert acc.after == pytest.approx((0.55 + 0.55**2 + 0.55**3 + 0.55**4) / 4, abs=0.02)


def test_the_next_change_cuts_the_after_side_and_temperature_twins_do_not(lite: Store) -> None:
    b, c = setup(target_revision="t2"), setup(target_revision="t3")
    t_next = AT + 40 * 60
    commit(lite, traffic("chat", OLD, T0, 120, seed=1)
           + traffic("chat", b, T0 + 2 * HOUR, 40, seed=2)
           + traffic("chat", c, T0 + 2 * HOUR + 40 * 60, 80, p=0.5, seed=3),
           [change("c1", AT, OLD, b, temperature="0-0.5"),
            change("c1b", AT + 30, OLD, b, temperature="0.5-1"),  # the same change, seen later
            change("c2", t_next, b, c)])
    first, twin, second = judge_changes(lite, settings=S)
    assert first.record.change_id == "c1" and second.record.change_id == "c2"
    assert first.after.until == (T0 + 2 * HOUR + 40 * 60)  # cut at the next change's minute
    assert first.metric("acceptance").requests_after == 800
    assert first.metric("acceptance").verdict == "same"
    assert twin.after.until == first.after.until
    assert [m.to_json() for m in twin.metrics] == [m.to_json() for m in first.metrics]
    # The second change's before side starts where its previous setup arrived.
    assert second.before.since == T0 + 2 * HOUR
    assert second.metric("acceptance").requests_before == 800
    assert second.metric("acceptance").verdict == "worse"
    # Filters keep the neighbours: c2 alone is still cut by c1's arrival of setup b.
    (only,) = judge_changes(lite, since=at(t_next), settings=S)
    assert only.before.since == second.before.since


def test_side_windows_floor_to_the_bucket() -> None:
    rec = change("c1", AT, OLD, setup(target_revision="t2"))
    (b0, b1), (a0, a1) = side_windows(rec, [rec], 2 * HOUR)
    assert (b1, a0) == (T0 + 2 * HOUR, T0 + 2 * HOUR)
    assert (b0, a1) == (T0, T0 + 4 * HOUR)
    (b0, b1), (a0, a1) = side_windows(rec, [rec], 2 * HOUR, step=3600)
    assert b1 == a0 == T0 + 2 * HOUR


def test_more_errors_make_the_change_worse(lite: Store) -> None:
    new = setup(engine="vllm-0.10")
    _before_after(lite, new, before={"error_rate": 0.01}, after={"error_rate": 0.05},
                  changes=[change("c1", AT, OLD, new)])
    j = _one(lite)
    assert j.record.kind == "engine"
    err = j.metric("error_rate")
    assert err.verdict == "worse" and err.spec.scale == "absolute"
    assert err.change == pytest.approx(0.04, abs=0.015) and err.interval[0] > 0
    assert err.extra["errors_after"] > err.extra["errors_before"]
    # An engine-only change reads the same series on both sides, split at the change.
    assert j.before.series == j.after.series
    assert j.metric("acceptance").requests_before == 2400
    assert j.verdict == "worse"


def test_speculation_turned_off_is_judged_on_latency(lite: Store) -> None:
    off = setup(num_speculative_tokens="0")
    _before_after(lite, off, after={"e2e": 1400.0}, changes=[change("c1", AT, OLD, off)])
    j = _one(lite)
    assert j.record.kind == "speculation_off"
    assert j.metric("acceptance").verdict == "insufficient_data"
    assert "speculation off" in j.metric("acceptance").extra["reason"]
    assert j.metric("e2e_p99").verdict == "worse"
    assert j.verdict == "worse"


def test_speculation_off_with_nothing_moved_is_the_same_not_insufficient(lite: Store) -> None:
    off = setup(num_speculative_tokens="0")
    _before_after(lite, off, changes=[change("c1", AT, OLD, off)])
    assert _one(lite).verdict == "same"


def test_hour_rows_once_the_minute_rows_are_gone(lite: Store) -> None:
    new = setup(target_revision="t2")
    # The change at 00:00, both sides on whole hours.
    at_hour = T0 + 2 * HOUR
    commit(lite, traffic("chat", OLD, T0, 120, seed=1)
           + traffic("chat", new, at_hour, 120, p=0.6, seed=2),
           [change("c1", at_hour + 5, OLD, new)])
    lite.apply_retention(at(T0 + 30 * 24 * HOUR), {"minute": timedelta(days=7)})
    assert lite.ratios(granularity="minute") == []
    j = _one(lite)
    assert j.granularity == "hour"
    acc = j.metric("acceptance")
    assert acc.requests_before == acc.requests_after == 2400
    assert acc.extra["minutes_before"] == 2  # two hour buckets: t with one degree of freedom
    assert acc.verdict == "worse"
    assert acc.interval[1] < -0.05


def test_no_rows_at_all_is_insufficient(lite: Store) -> None:
    commit(lite, [], [change("c1", AT, OLD, setup(target_revision="t2"))])
    j = _one(lite)
    assert j.verdict == "insufficient_data"
    assert {m.verdict for m in j.metrics} == {"insufficient_data"}
    assert j.granularity == "hour"
    j2 = judge_change(lite, j.record, [j.record], S)
    assert j2.to_json() == j.to_json()
