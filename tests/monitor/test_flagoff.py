"""The flag-off comparison: switch detection, the judging rules, verdicts and stored reports."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from monitor.aggregate.bucket import BucketStats
from monitor.aggregate.series import SeriesKey, series_key
from monitor.flagoff import (
    METRICS,
    MetricChange,
    compare_flag_off,
    find_switches,
    judge,
    load_reports,
    save_reports,
    verdict,
)
from monitor.store import Checkpoint, Store
from tests.monitor.store.helpers import event

NOW = datetime(2026, 11, 16, 6, tzinfo=UTC)  # a Monday: when the weekly job fires
WEEK = timedelta(days=7)
SWITCH = NOW - WEEK
HOUR = timedelta(hours=1)
PER_HOUR = 10
MIN_REQUESTS = 1000

Rollups = dict[tuple[SeriesKey, int], BucketStats]


def traffic(
    rollups: Rollups,
    route: str,
    since: datetime,
    until: datetime,
    *,
    spec: bool,
    scale: float = 1.0,
    tail: float = 2000.0,
    per_hour: int = PER_HOUR,
) -> Rollups:
    """The same hour of requests repeated over [since, until): ``per_hour - 1`` typical
    requests (e2e 400..., scaled by ``scale``) and one slow one (e2e ``tail``), so p50 and
    p99 are exact by construction and both halves of a side agree."""
    t = since
    while t < until:
        ts = int(t.timestamp())
        for i in range(per_hour):
            slow = i == per_hour - 1
            e = event(
                f"{route}-{ts}-{i}", ts + i, route, spec=spec,
                e2e_ms=tail if slow else (400.0 + 4 * i) * scale,
                ttft_ms=300.0 if slow else 100.0 + i,
            )
            rollups.setdefault((series_key(e), ts), BucketStats()).update(e)
        t += HOUR
    return rollups


def switched(rollups: Rollups, route: str, **off: float) -> Rollups:
    """Speculation on for the week before ``SWITCH``, off (shaped by ``off``) after it."""
    traffic(rollups, route, SWITCH - WEEK, SWITCH, spec=True)
    return traffic(rollups, route, SWITCH, NOW, spec=False, **off)


def commit(store: Store, rollups: Rollups) -> None:
    store.commit(Checkpoint(source="test", rollups=rollups))


# --- on both databases ----------------------------------------------------------------------


def test_verdicts_on_synthetic_rollups(store: Store) -> None:
    r: Rollups = {}
    switched(r, "fine", scale=0.97)  # typical requests 3% faster: under the threshold
    switched(r, "worse", tail=2760.0)  # the slow request 38% slower
    switched(r, "better", scale=0.85)
    switched(r, "mixed", scale=0.85, tail=2760.0)
    traffic(r, "few", SWITCH - WEEK, SWITCH, spec=True)
    traffic(r, "few", SWITCH, SWITCH + HOUR, spec=False)  # 20 requests off, then silence
    traffic(r, "always-on", SWITCH - WEEK, NOW, spec=True)
    traffic(r, "always-off", SWITCH - WEEK, NOW, spec=False)
    traffic(r, "long-ago", SWITCH - WEEK, SWITCH - 3 * 24 * HOUR, spec=True)  # before the window
    traffic(r, "long-ago", SWITCH - 3 * 24 * HOUR, NOW, spec=False)
    commit(store, r)

    results = compare_flag_off(store, NOW + timedelta(minutes=7), WEEK, min_requests=MIN_REQUESTS)
    by_route = {x.route: x for x in results}
    assert list(by_route) == ["better", "few", "fine", "mixed", "worse"]  # sorted by route

    fine = by_route["fine"]
    assert fine.switched_at == SWITCH
    assert (fine.window_start, fine.window_end) == (SWITCH, NOW)
    assert (fine.on.since, fine.on.until, fine.off.since, fine.off.until) == (
        SWITCH - WEEK, SWITCH, SWITCH, NOW
    )
    assert fine.on.requests == fine.off.requests == 7 * 24 * PER_HOUR
    assert fine.verdict == "keep_off"
    assert fine.summary.startswith("p99 did not worsen with speculation off (p99 e2e +0.0%")
    assert fine.summary.endswith("the draft was not earning its memory; keep it off")
    assert fine.deltas["e2e_p50"] == pytest.approx(-0.03, abs=0.02)
    assert {c.outcome for c in fine.changes} == {"same"}

    worse = by_route["worse"]
    assert worse.verdict == "turn_back_on"
    assert re.fullmatch(r"p99 e2e worsened 3[6-9]% with speculation off: turn it back on",
                        worse.summary), worse.summary
    assert {c.metric: c.outcome for c in worse.changes} == {
        "e2e_p99": "worse", "e2e_p50": "same", "ttft_p99": "same", "ttft_p50": "same",
        "decode_tps_p50": "same",
    }

    better = by_route["better"]
    assert better.verdict == "keep_off"
    assert re.fullmatch(
        r"p50 (e2e improved 1[4-6]%|decode throughput rose \d+%) with speculation off and "
        r"nothing worsened \(also .*\): the draft was costing more than it saved; keep it off",
        better.summary,
    ), better.summary

    mixed = by_route["mixed"]
    assert mixed.verdict == "mixed"
    assert mixed.summary.startswith("mixed with speculation off: ")
    assert "p50 e2e 1" in mixed.summary and "% better" in mixed.summary
    assert re.search(r"p99 e2e 3[6-9]% worse", mixed.summary), mixed.summary

    few = by_route["few"]
    assert few.verdict == "insufficient_data"
    assert few.off.requests == PER_HOUR
    assert few.summary == (
        f"insufficient data: {7 * 24 * PER_HOUR} requests with speculation on, {PER_HOUR} off "
        f"(need {MIN_REQUESTS} per side)"
    )

    doc = json.loads(json.dumps(worse.to_json()))
    assert doc["switched_at"] == "2026-11-09T06:00:00Z"
    assert doc["on"]["since"] == "2026-11-02T06:00:00Z" and doc["off"]["until"] == (
        "2026-11-16T06:00:00Z"
    )
    assert doc["metrics"]["e2e_p99"]["outcome"] == "worse"
    assert doc["metrics"]["e2e_p99"]["threshold"] == 0.05
    assert doc["verdict"] == "turn_back_on" and doc["summary"] == worse.summary


def test_switched_back_on_compares_only_the_off_stretch(store: Store) -> None:
    r: Rollups = {}
    day = 24 * HOUR
    traffic(r, "trial", SWITCH - WEEK, SWITCH + 2 * day, spec=True)
    traffic(r, "trial", SWITCH + 2 * day, SWITCH + 4 * day, spec=False, tail=2760.0)
    traffic(r, "trial", SWITCH + 4 * day, NOW, spec=True)
    commit(store, r)
    (res,) = compare_flag_off(store, NOW, WEEK, min_requests=400)
    assert res.switched_at == SWITCH + 2 * day
    assert (res.off.since, res.off.until) == (SWITCH + 2 * day, SWITCH + 4 * day)
    assert (res.on.since, res.on.until) == (SWITCH, SWITCH + 2 * day)  # as long, just before
    assert res.on.requests == res.off.requests == 2 * 24 * PER_HOUR
    assert res.verdict == "turn_back_on"


def test_reports_are_upserted_once_per_route_and_window(store: Store) -> None:
    r: Rollups = {}
    switched(r, "worse", tail=2760.0)
    switched(r, "fine")
    commit(store, r)
    first = compare_flag_off(store, NOW, WEEK, min_requests=MIN_REQUESTS)
    assert save_reports(store, first, NOW) == 2
    later = NOW + timedelta(hours=3)
    # A rerun (or a second daemon) with more data for the same window: updated, not added.
    rerun = compare_flag_off(store, NOW, WEEK, min_requests=10**6)
    assert save_reports(store, rerun, later) == 2
    rows = load_reports(store)
    assert [(x["route"], x["verdict"]) for x in rows] == [
        ("fine", "insufficient_data"), ("worse", "insufficient_data")
    ]
    assert {x["created_at"] for x in rows} == {"2026-11-16T06:00:00Z"}
    assert {x["updated_at"] for x in rows} == {"2026-11-16T09:00:00Z"}
    (w,) = load_reports(store, route="worse")
    assert w == {**rerun[1].to_json(), "created_at": w["created_at"], "updated_at": w["updated_at"]}
    # Another window is another row.
    eight_days = compare_flag_off(store, NOW + HOUR, WEEK + 2 * HOUR, min_requests=MIN_REQUESTS)
    save_reports(store, eight_days, later)
    assert [x["window_end"] for x in load_reports(store, route="worse")] == [
        "2026-11-16T07:00:00Z", "2026-11-16T06:00:00Z"
    ]
    assert len(load_reports(store, since=NOW + HOUR)) == 2
    assert save_reports(store, [], NOW) == 0


def test_odd_route_names_round_trip(store: Store) -> None:
    odd = "r\x00ute/\u202e\U0001f600"
    r: Rollups = {}
    switched(r, odd, per_hour=2)
    commit(store, r)
    res = compare_flag_off(store, NOW, WEEK, min_requests=1)
    save_reports(store, res, NOW)
    (row,) = load_reports(store, route=odd)
    assert row["route"] == odd


# --- pure parts ---------------------------------------------------------------------------


def _row(route: str, hour: int, on: int, off: int) -> SimpleNamespace:
    return SimpleNamespace(
        route=route, bucket_start=SWITCH + hour * HOUR, requests=on + off, spec_requests=on
    )


def test_find_switches() -> None:
    start, end = SWITCH, SWITCH + 10 * HOUR
    rows = [
        # on, then a rollout hour mostly on, then off: the switch is the first mostly-off hour
        *(_row("clean", h, 10, 0) for h in range(-3, 2)),
        _row("clean", 2, 6, 4),
        *(_row("clean", h, 1, 9) for h in range(3, 10)),
        # off, back on at hour 6: the off stretch ends there
        _row("trial", 0, 10, 0), _row("trial", 1, 0, 10), _row("trial", 5, 0, 10),
        _row("trial", 6, 10, 0),
        # flapping: the last switch in the window counts
        _row("flap", 0, 10, 0), _row("flap", 1, 0, 10), _row("flap", 2, 10, 0),
        _row("flap", 3, 0, 10),
        # a switch before the window, an always-off route, a quiet gap before the switch
        _row("early", -5, 10, 0), _row("early", -4, 0, 10), _row("early", 3, 0, 10),
        _row("off", 0, 0, 5), _row("off", 9, 0, 5),
        _row("gap", -2, 3, 0), _row("gap", 7, 0, 3),
    ]
    got = find_switches(rows, start, end)  # type: ignore[arg-type]
    at = {route: ((sw - SWITCH) // HOUR, (until - SWITCH) // HOUR)
          for route, (sw, until) in got.items()}
    assert at == {"clean": (3, 10), "trial": (1, 6), "flap": (3, 10), "gap": (7, 10)}


def test_judge_rules() -> None:
    e2e_p99, tps = METRICS[0], METRICS[-1]
    assert judge(e2e_p99, 1000.0, 1060.0, (1000.0, 1000.0), (1060.0, 1060.0)).outcome == "worse"
    assert judge(e2e_p99, 1000.0, 1049.0, (1000.0, 1000.0), (1049.0, 1049.0)).outcome == "same"
    assert judge(e2e_p99, 1000.0, 900.0, (1000.0, 1000.0), (900.0, 900.0)).outcome == "better"
    # The on side moved 20% on its own: a 15% change is within that noise.
    noisy = judge(e2e_p99, 1000.0, 1150.0, (900.0, 1080.0), (1150.0, 1150.0))
    assert (noisy.outcome, noisy.threshold) == ("same", pytest.approx(0.2))
    # One bad half: the other half moved less than half the threshold.
    assert judge(e2e_p99, 1000.0, 1100.0, (1000.0, 1000.0), (1180.0, 1020.0)).outcome == "same"
    assert judge(e2e_p99, 1000.0, 1100.0, (1000.0, 1000.0), (1180.0, 1030.0)).outcome == "worse"
    # Too short to have halves: never calls a change.
    assert judge(e2e_p99, 1000.0, 2000.0, (None, 1000.0), (None, 2000.0)).outcome == "same"
    assert judge(e2e_p99, None, 2000.0, (None, None), (2000.0, 2000.0)).outcome == "unknown"
    # Throughput: lower is worse.
    assert judge(tps, 50.0, 40.0, (50.0, 50.0), (40.0, 40.0)).outcome == "worse"
    assert judge(tps, 50.0, 60.0, (50.0, 50.0), (60.0, 60.0)).outcome == "better"


def _change(metric: str, delta: float, outcome: str) -> MetricChange:
    return MetricChange(metric, 100.0, 100.0 * (1 + delta), delta, 0.05, outcome)


def test_verdict_lines() -> None:
    worse = _change("e2e_p99", 0.38, "worse")
    tps_worse = _change("decode_tps_p50", -0.2, "worse")
    p50_better = _change("e2e_p50", -0.12, "better")
    assert verdict([worse, tps_worse], 5000, 5000, 1000) == (
        "turn_back_on",
        "p99 e2e worsened 38% with speculation off (also p50 decode throughput -20.0%): "
        "turn it back on",
    )
    assert verdict([tps_worse], 5000, 5000, 1000)[1] == (
        "p50 decode throughput fell 20% with speculation off: turn it back on"
    )
    assert verdict([p50_better, _change("e2e_p99", 0.09, "worse")], 5000, 5000, 1000) == (
        "mixed",
        "mixed with speculation off: p50 e2e 12% better, p99 e2e 9% worse; decide by which "
        "of these the route's users feel",
    )
    assert verdict([p50_better], 5000, 5000, 1000) == (
        "keep_off",
        "p50 e2e improved 12% with speculation off and nothing worsened: the draft was "
        "costing more than it saved; keep it off",
    )
    assert verdict([worse], 999, 5000, 1000)[0] == "insufficient_data"


def test_bad_arguments(store: Store) -> None:
    with pytest.raises(ValueError, match="aware"):
        compare_flag_off(store, datetime(2026, 11, 16), WEEK)
    with pytest.raises(ValueError, match="at least 2h"):
        compare_flag_off(store, NOW, 3600)
    with pytest.raises(ValueError, match="min_requests"):
        compare_flag_off(store, NOW, WEEK, min_requests=0)
    assert compare_flag_off(store, NOW, 2 * 86400.0) == []
