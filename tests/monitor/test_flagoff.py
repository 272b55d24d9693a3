"""The flag-off report: the change judge applied to ``speculation_off`` changes, its verdicts
and the stored reports."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from monitor.aggregate.bucket import BucketStats
from monitor.aggregate.series import SeriesKey, series_key
from monitor.change_record import ChangeRecord, change_kind, diff
from monitor.changes import JudgeSettings, judge_change
from monitor.detect.lineage import setup_of
from monitor.flagoff import (
    MetricChange,
    compare_flag_off,
    load_reports,
    save_reports,
    verdict,
)
from monitor.store import Checkpoint, Store
from monitor.telemetry.event import Event
from tests.monitor.store.helpers import event

NOW = datetime(2026, 11, 16, 6, tzinfo=UTC)  # a Monday: when the weekly job fires
WEEK = timedelta(days=7)
SWITCH = NOW - WEEK
HOUR = timedelta(hours=1)
PER_HOUR = 10
MIN_REQUESTS = 1000


RETURN_AFTER = 3600.0  # detection.change_return_after's default


@dataclass
class Rollups:
    """Hourly rollups, and the setup changes detection records from the same requests
    (``monitor/detect/lineage.py``): the first request of a setup on a route whose latest
    setup was another one, unless the setup served there within ``RETURN_AFTER`` (a canary
    serving beside the old setup is one change, a setup coming back after that long another).
    """

    rollups: dict[tuple[SeriesKey, int], BucketStats] = field(default_factory=dict)
    changes: list[ChangeRecord] = field(default_factory=list)
    latest: dict[str, dict[str, str]] = field(default_factory=dict)
    last_seen: dict[tuple[str, str], float] = field(default_factory=dict)

    def add(self, e: Event) -> None:
        s = setup_of(e)
        seen = (e.route, json.dumps(s, sort_keys=True))
        prev = self.latest.get(e.route)
        recent = e.ts - self.last_seen.get(seen, -1e18) <= RETURN_AFTER
        if prev is not None and prev != s and not recent:
            changed = diff(prev, s)
            self.changes.append(ChangeRecord(
                change_id=f"{e.route}-{e.ts}", route=e.route, temperature="", at=e.ts,
                kind=change_kind(changed), previous=prev, current=s, changed=changed,
                segment=f"seg-{e.ts}", previous_segment="prev", updated_at=e.ts,
            ))
        if prev is None or not recent:
            self.latest[e.route] = s
        self.last_seen[seen] = e.ts
        key = (series_key(e), int(e.ts) // 3600 * 3600)
        self.rollups.setdefault(key, BucketStats()).update(e)


def traffic(
    r: Rollups,
    route: str,
    since: datetime,
    until: datetime,
    *,
    spec: bool,
    scale: float = 1.0,
    tail: float = 2000.0,
    per_hour: int = PER_HOUR,
    also_on: int = 0,
) -> Rollups:
    """The same hour of requests repeated over [since, until): ``per_hour - 1`` typical
    requests (e2e 400..., scaled by ``scale``) and one slow one (e2e ``tail``), so p50 and
    p99 are exact by construction. ``also_on``: that many requests with speculation on
    (unscaled) at the start of each hour as well (a rollout in progress)."""
    t = since
    while t < until:
        ts = int(t.timestamp())
        for i in range(also_on):
            slow = i == also_on - 1
            r.add(event(
                f"{route}-{ts}-on-{i}", ts + i, route, spec=True,
                e2e_ms=2000.0 if slow else 400.0 + 4 * i, ttft_ms=300.0 if slow else 100.0 + i,
            ))
        for i in range(per_hour):
            slow = i == per_hour - 1
            r.add(event(
                f"{route}-{ts}-{i}", ts + also_on + i, route, spec=spec,
                e2e_ms=tail if slow else (400.0 + 4 * i) * scale,
                ttft_ms=300.0 if slow else 100.0 + i,
            ))
        t += HOUR
    return r


def switched(r: Rollups, route: str, **off: float) -> Rollups:
    """Speculation on for the week before ``SWITCH``, off (shaped by ``off``) after it."""
    traffic(r, route, SWITCH - WEEK, SWITCH, spec=True)
    return traffic(r, route, SWITCH, NOW, spec=False, **off)


def commit(store: Store, r: Rollups) -> None:
    store.commit(Checkpoint(source="test", rollups=r.rollups, changes=list(r.changes)))


# --- on both databases ----------------------------------------------------------------------


def test_verdicts_on_synthetic_rollups(store: Store) -> None:
    r = Rollups()
    switched(r, "fine", scale=0.97)  # typical requests 3% faster: under the minimum effect
    switched(r, "worse", tail=2760.0)  # the slow request 38% slower
    switched(r, "better", scale=0.85)
    switched(r, "mixed", scale=0.85, tail=2760.0)
    traffic(r, "few", SWITCH - WEEK, SWITCH, spec=True)
    traffic(r, "few", SWITCH, SWITCH + HOUR, spec=False)  # 10 requests off, then silence
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
        "decode_tps_p50": "same", "error_rate": "same",
    }
    # The judge's own verdict of the same change: p99 e2e is critical.
    assert (worse.change_verdict, worse.change_id) == ("worse", f"worse-{SWITCH.timestamp()}")

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
    assert {c.outcome for c in few.changes} == {"unknown"}

    doc = json.loads(json.dumps(worse.to_json()))
    assert doc["switched_at"] == "2026-11-09T06:00:00Z"
    assert doc["on"]["since"] == "2026-11-02T06:00:00Z" and doc["off"]["until"] == (
        "2026-11-16T06:00:00Z"
    )
    assert doc["metrics"]["e2e_p99"]["outcome"] == "worse"
    assert doc["metrics"]["e2e_p99"]["threshold"] == 0.05
    assert doc["metrics"]["e2e_p99"]["interval"][0] > 0.05
    assert doc["verdict"] == "turn_back_on" and doc["summary"] == worse.summary
    assert doc["change"]["kind"] == "speculation_off" and doc["change"]["verdict"] == "worse"


def test_same_verdicts_as_the_change_report(store: Store) -> None:
    """One method: the change report, over the same sides, judges each metric the same
    (when the change persists through both halves of the off side)."""
    r = Rollups()
    switched(r, "mixed", scale=0.85, tail=2760.0)
    commit(store, r)
    (res,) = compare_flag_off(store, NOW, WEEK, min_requests=MIN_REQUESTS)
    (record,) = store.changes(route="mixed")
    j = judge_change(store, record, [record], JudgeSettings(window=WEEK.total_seconds(),
                                                             min_requests=MIN_REQUESTS))
    assert {c.metric: c.outcome for c in res.changes} == {
        c.metric: j.metric(c.metric).verdict for c in res.changes
    }


def test_bad_days_that_pass_do_not_make_the_verdict(store: Store) -> None:
    r = Rollups()
    traffic(r, "incident", SWITCH - WEEK, SWITCH, spec=True)
    # An unrelated incident on the first two days off: the slow request 38% slower then only.
    # (One such day would not move the week's p99 beyond the interval of its ranks.)
    traffic(r, "incident", SWITCH, SWITCH + 48 * HOUR, spec=False, tail=2760.0)
    traffic(r, "incident", SWITCH + 48 * HOUR, NOW, spec=False)
    commit(store, r)
    (res,) = compare_flag_off(store, NOW, WEEK, min_requests=MIN_REQUESTS)
    p99 = {c.metric: c for c in res.changes}["e2e_p99"]
    # Over the whole week the p99 moved by 38%, and the judge alone calls the change worse...
    assert p99.delta == pytest.approx(0.38, abs=0.02)
    assert res.change_verdict == "worse"
    # ...but the second half of the week did not move: the change did not persist.
    assert p99.outcome == "same"
    assert p99.halves is not None and p99.halves[0] == pytest.approx(0.38, abs=0.02)
    assert p99.halves[1] == pytest.approx(0.0, abs=0.01)
    assert p99.reason is not None and p99.reason.startswith("worse overall but not in both")
    assert res.verdict == "keep_off"
    assert res.to_json()["metrics"]["e2e_p99"]["halves"] == list(p99.halves)


def test_switched_back_on_compares_only_the_off_stretch(store: Store) -> None:
    r = Rollups()
    day = 24 * HOUR
    traffic(r, "trial", SWITCH - WEEK, SWITCH + 2 * day, spec=True)
    traffic(r, "trial", SWITCH + 2 * day, SWITCH + 4 * day, spec=False, tail=2760.0)
    traffic(r, "trial", SWITCH + 4 * day, NOW, spec=True)
    commit(store, r)
    assert [c.kind for c in store.changes(route="trial")] == ["speculation_off", "speculation_on"]
    (res,) = compare_flag_off(store, NOW, WEEK, min_requests=400)
    assert res.switched_at == SWITCH + 2 * day
    assert (res.off.since, res.off.until) == (SWITCH + 2 * day, SWITCH + 4 * day)
    assert (res.on.since, res.on.until) == (SWITCH, SWITCH + 2 * day)  # as long, just before
    assert res.on.requests == res.off.requests == 2 * 24 * PER_HOUR
    assert res.verdict == "turn_back_on"


def test_routes_and_switches_come_from_the_recorded_changes(store: Store) -> None:
    r = Rollups()
    # flapping: the latest switch off in the window counts
    traffic(r, "flap", SWITCH - WEEK, SWITCH, spec=True)
    traffic(r, "flap", SWITCH, SWITCH + HOUR, spec=False)
    traffic(r, "flap", SWITCH + HOUR, SWITCH + 2 * HOUR, spec=True)
    traffic(r, "flap", SWITCH + 2 * HOUR, NOW, spec=False)
    # a rollout: for a day a third of the requests still draft beside the off ones
    traffic(r, "rollout", SWITCH - WEEK, SWITCH, spec=True)
    traffic(r, "rollout", SWITCH, SWITCH + 24 * HOUR, spec=False, tail=2760.0, also_on=5)
    traffic(r, "rollout", SWITCH + 24 * HOUR, NOW, spec=False, tail=2760.0)
    # the switch after the report's end
    traffic(r, "later", SWITCH - WEEK, NOW, spec=True)
    traffic(r, "later", NOW, NOW + HOUR, spec=False)
    commit(store, r)
    by_route = {x.route: x for x in compare_flag_off(store, NOW, WEEK, min_requests=100)}
    assert list(by_route) == ["flap", "rollout"]
    flap = by_route["flap"]
    assert flap.switched_at == SWITCH + 2 * HOUR
    assert flap.off.requests == (7 * 24 - 2) * PER_HOUR
    # The on side stops at the on setup's own arrival (it came back at SWITCH + 1h).
    assert flap.on.since == SWITCH + HOUR and flap.on.requests == PER_HOUR
    assert flap.verdict == "insufficient_data"
    # The switch is the first request that ran off, not the first mostly-off hour, and each
    # side counts only its own requests: the stragglers that still drafted count for neither.
    rollout = by_route["rollout"]
    assert rollout.switched_at == SWITCH + timedelta(seconds=5)
    assert (rollout.on.until, rollout.off.since) == (SWITCH, SWITCH)
    assert rollout.off.requests == 7 * 24 * PER_HOUR
    assert rollout.on.requests == 7 * 24 * PER_HOUR
    assert rollout.verdict == "turn_back_on"


def test_reports_are_upserted_once_per_route_and_window(store: Store) -> None:
    r = Rollups()
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
    r = Rollups()
    switched(r, odd, per_hour=2)
    commit(store, r)
    res = compare_flag_off(store, NOW, WEEK, min_requests=1)
    save_reports(store, res, NOW)
    (row,) = load_reports(store, route=odd)
    assert row["route"] == odd


# --- pure parts ---------------------------------------------------------------------------


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
    errors = MetricChange("error_rate", 0.001, 0.031, 0.03, 0.01, "worse")
    assert verdict([errors], 5000, 5000, 1000) == (
        "turn_back_on", "error rate rose 3.0 points with speculation off: turn it back on"
    )
    # Metrics the judge could not decide (``unknown``) neither worsen nor improve.
    assert verdict([_change("ttft_p99", 0.5, "unknown")], 5000, 5000, 1000)[0] == "keep_off"
    assert verdict([worse], 999, 5000, 1000)[0] == "insufficient_data"


def test_bad_arguments(store: Store) -> None:
    with pytest.raises(ValueError, match="aware"):
        compare_flag_off(store, datetime(2026, 11, 16), WEEK)
    with pytest.raises(ValueError, match="at least 2h"):
        compare_flag_off(store, NOW, 3600)
    with pytest.raises(ValueError, match="min_requests"):
        compare_flag_off(store, NOW, WEEK, min_requests=0)
    assert compare_flag_off(store, NOW, 2 * 86400.0) == []
