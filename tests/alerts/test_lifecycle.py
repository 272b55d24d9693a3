"""The alert lifecycle: min_firing, keep_firing_for, repeats, silences, grouping, restarts.

Everything runs on a scripted clock: records carry event times relative to ``T0`` and the
driver calls ``advance`` at a fixed cadence, so no test sleeps.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from alerts.lifecycle import BASELINE_ACCEPTED, EpisodeRow, Lifecycle, group_id
from alerts.notification import AlertItem, Notification
from alerts.silences import Silence
from monitor.alert_record import AlertRecord
from monitor.config import LifecycleConfig, RuleTimingConfig
from monitor.detect.exceptions import StateVersionError

T0 = datetime(2026, 11, 2, 12, 0, tzinfo=UTC).timestamp()
MIN = 60.0
HOUR = 3600.0


def rec(state: str, at: float, rule: str = "acceptance_drop", route: str = "code",
        severity: str = "warning", **details: Any) -> AlertRecord:
    """A condition record at ``at`` seconds after T0."""
    return AlertRecord(rule, state, datetime.fromtimestamp(T0 + at, UTC), severity,
                       {"route": route}, f"{route}: {rule} {state} at {at:g}", details)


def cfg(**kw: Any) -> LifecycleConfig:
    base: dict[str, Any] = dict(group_wait=30, group_interval=300, repeat_interval=4 * HOUR,
                                min_firing=0, keep_firing_for=600)
    base.update(kw)
    return LifecycleConfig(**base)


def silence(sid: int, start: float, end: float, route: str = "code",
            rule: str | None = None) -> Silence:
    return Silence(sid, route, rule, datetime.fromtimestamp(T0 + start, UTC),
                   datetime.fromtimestamp(T0 + end, UTC), "test")


def fresh(config: LifecycleConfig) -> Lifecycle:
    lc = Lifecycle(config)
    lc.loaded = True
    return lc


def drive(lc: Lifecycle, records: Iterable[AlertRecord], end: float, step: float = MIN,
          silences: Sequence[Silence] = (), start: float = 0.0) -> list[Notification]:
    """Feed each record before the first advance at or after its time; advance every
    ``step`` seconds from ``start`` to ``end`` (relative to T0)."""
    pending = sorted(records, key=lambda r: r.at)
    out: list[Notification] = []
    t = start
    while t <= end:
        due = [r for r in pending if r.at.timestamp() <= T0 + t]
        pending = pending[len(due):]
        lc.update(due)
        out.extend(lc.advance(T0 + t, silences))
        t += step
    assert not pending
    return out


def rel(n: Notification) -> float:
    return n.at.timestamp() - T0


def items(ns: Iterable[Notification]) -> list[tuple[float, AlertItem]]:
    return [(rel(n), i) for n in ns for i in n.items]


def statuses(ns: Iterable[Notification]) -> list[tuple[float, str, bool]]:
    return [(t, i.status, i.repeat) for t, i in items(ns)]


def toggles(gaps: Sequence[float], **kw: Any) -> list[AlertRecord]:
    """Firing at 0, then resolved/firing alternately after each gap (ends resolved when
    ``gaps`` has an odd length)."""
    out = [rec("firing", 0.0, **kw)]
    t = 0.0
    for k, gap in enumerate(gaps):
        t += gap
        out.append(rec("resolved" if k % 2 == 0 else "firing", t, **kw))
    return out


# -- min_firing --------------------------------------------------------------------------------


def test_short_blip_is_never_sent_and_counted_short() -> None:
    lc = fresh(cfg(min_firing=300))
    ns = drive(lc, [rec("firing", 0), rec("resolved", 120)], end=HOUR)
    assert ns == []
    assert lc.suppressed["short"] == 1
    rows = lc.episodes_changed()
    assert [r.state for r in rows] == ["dropped"]
    assert rows[0].notified is False and rows[0].resolved_at == rec("resolved", 120).at


def test_condition_held_past_min_firing_is_sent_once() -> None:
    lc = fresh(cfg(min_firing=300))
    ns = drive(lc, [rec("firing", 0), rec("resolved", 1200)], end=2 * HOUR)
    # firing at 300, flushed after group_wait; resolved after the hold
    assert statuses(ns) == [(330.0, "firing", False), (1800.0, "resolved", False)]
    assert ns[0].items[0].started_at == rec("firing", 0).at
    assert lc.suppressed["short"] == 0


def test_min_firing_reached_between_two_advances_still_counts() -> None:
    # fired at 0 and cleared at 400 with no advance in between: it held for min_firing, was
    # announced at 300 and sent at 330, all before the resolve
    lc = fresh(cfg(min_firing=300))
    lc.update([rec("firing", 0), rec("resolved", 400)])
    ns = lc.advance(T0 + 400)
    assert statuses(ns) == [(330.0, "firing", False)]
    ns = lc.advance(T0 + 999) + lc.advance(T0 + 1000)
    assert statuses(ns) == [(1000.0, "resolved", False)]
    assert lc.suppressed["short"] == 0 and lc.suppressed["collapsed"] == 0


def test_per_rule_min_firing_override() -> None:
    config = cfg(min_firing=0, rules={"telemetry_stale": RuleTimingConfig(min_firing=600)})
    lc = fresh(config)
    ns = drive(lc, [rec("firing", 0, rule="telemetry_stale"), rec("resolved", 300,
                                                                    rule="telemetry_stale"),
                    rec("firing", 0, route="chat"), rec("resolved", 300, route="chat")],
               end=HOUR)
    assert {i.rule for _, i in items(ns)} == {"acceptance_drop"}
    assert lc.suppressed["short"] == 1


# -- keep_firing_for ---------------------------------------------------------------------------


def test_refire_within_keep_firing_for_continues_the_episode() -> None:
    lc = fresh(cfg())
    ns = drive(lc, toggles([300, 300, 300]), end=2 * HOUR)   # resolved 300, firing 600,
    assert statuses(ns) == [(30.0, "firing", False), (1500.0, "resolved", False)]  # res 900
    assert ns[1].items[0].record.at == rec("resolved", 900).at
    assert ns[0].items[0].episode == ns[1].items[0].episode
    assert lc.suppressed["flap"] == 1


def test_refire_after_keep_firing_for_is_a_new_episode() -> None:
    lc = fresh(cfg())
    ns = drive(lc, toggles([300, 900, 300]), end=2 * HOUR)   # clear for 900 s > 600 s
    sts = statuses(ns)
    assert [s for _, s, _ in sts] == ["firing", "resolved", "firing", "resolved"]
    episodes = [i.episode for _, i in items(ns)]
    assert episodes[0] == episodes[1] != episodes[2] == episodes[3]
    assert lc.suppressed["flap"] == 0


def test_hold_that_ran_out_between_advances_ends_the_episode() -> None:
    # no advance during a long clear gap: the re-fire still starts a new episode
    lc = fresh(cfg())
    lc.update([rec("firing", 0)])
    ns = lc.advance(T0) + lc.advance(T0 + 30)
    lc.update([rec("resolved", 60), rec("firing", 60 + 3000)])
    ns += lc.advance(T0 + 3060) + lc.advance(T0 + 3100)
    assert [(i.status, i.record.at.timestamp() - T0) for _, i in items(ns)] == [
        ("firing", 0.0), ("resolved", 60.0), ("firing", 3060.0)]
    assert len({i.episode for _, i in items(ns)}) == 2


def test_flapping_every_two_minutes_for_three_hours_is_one_episode() -> None:
    lc = fresh(cfg(keep_firing_for=600))
    gaps = [2 * MIN] * (3 * 30 - 1)                 # toggles every 2 min for 3 h, ends clear
    records = toggles(gaps)
    assert records[-1].state == "resolved"
    ns = drive(lc, records, end=4 * HOUR)
    sts = [(s, rep) for _, s, rep in statuses(ns)]
    assert sts == [("firing", False), ("resolved", False)]
    its = [i for _, i in items(ns)]
    assert its[0].episode == its[1].episode
    assert its[1].record.at == records[-1].at
    assert lc.suppressed["flap"] == len(records) // 2 - 1
    assert len({r.episode for r in lc.episodes_changed()}) == 1


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("step", [MIN, 17 * MIN])
def test_hovering_condition_is_at_most_one_episode_per_hold(seed: int, step: float) -> None:
    keep = 10 * MIN
    rng = random.Random(seed)
    gaps = [rng.randint(1, 30) * MIN for _ in range(301)]  # odd: ends clear
    records = toggles(gaps)
    lc = fresh(cfg(keep_firing_for=keep, repeat_interval=1000 * HOUR))
    episodes: dict[str, EpisodeRow] = {}
    ns: list[Notification] = []
    t, end, pending = 0.0, records[-1].at.timestamp() - T0 + HOUR, list(records)
    while t <= end:                   # drive() by hand, draining episode rows on the way
        due = [r for r in pending if r.at.timestamp() <= T0 + t]
        pending = pending[len(due):]
        lc.update(due)
        ns += lc.advance(T0 + t)
        episodes.update((r.episode, r) for r in lc.episodes_changed())
        t += step
    clear_gaps = gaps[1::2]           # resolved -> next firing (even ones are firing spans)
    expected = sum(1 for g in clear_gaps if g >= keep) + 1
    assert len(episodes) == expected
    assert all(r.state == "resolved" for r in episodes.values())
    starts = sorted(r.started_at.timestamp() for r in episodes.values())
    assert all(b - a >= keep for a, b in zip(starts, starts[1:], strict=False))
    # what was sent: at most one firing and one resolve per episode, the resolve after it
    seen: dict[str, list[str]] = {}
    for _, i in items(ns):
        seen.setdefault(i.episode, []).append(i.status)
    assert all(v == ["firing", "resolved"] for v in seen.values())
    assert set(seen) <= set(episodes)
    if step == MIN:                  # every episode outlives group_wait: all are announced
        assert set(seen) == set(episodes)


# -- repeats -----------------------------------------------------------------------------------


def test_reminders_every_repeat_interval() -> None:
    lc = fresh(cfg(repeat_interval=HOUR))
    ns = drive(lc, [rec("firing", 0), rec("resolved", 5 * HOUR)], end=6 * HOUR)
    sts = statuses(ns)
    assert sts[0] == (30.0, "firing", False)
    reminders = [t for t, s, rep in sts if rep]
    assert reminders == [30.0 + k * HOUR for k in range(1, 5)]
    assert sts[-1] == (5 * HOUR + 600, "resolved", False)
    assert all(i.record.state == "firing" for _, i in items(ns) if i.repeat)


def test_no_reminders_while_silenced_one_when_it_ends() -> None:
    lc = fresh(cfg(repeat_interval=HOUR))
    s = silence(7, 1.5 * HOUR, 3.5 * HOUR)
    ns = drive(lc, [rec("firing", 0), rec("resolved", 5 * HOUR)], end=6 * HOUR, silences=[s])
    reminders = [t for t, _, rep in statuses(ns) if rep]
    assert reminders == [30.0 + HOUR, 3.5 * HOUR, 4.5 * HOUR]
    assert statuses(ns)[-1] == (5 * HOUR + 600, "resolved", False)
    assert lc.suppressed["silenced"] == 1


def test_reminder_due_during_a_hold_goes_when_it_fires_again() -> None:
    lc = fresh(cfg(repeat_interval=HOUR))
    ns = drive(lc, [rec("firing", 0), rec("resolved", 3500), rec("firing", 3700),
                    rec("resolved", 5000)], end=2 * HOUR)
    # the reminder of 3630 fell in the hold: none while resolving, one at the re-fire
    assert statuses(ns) == [(30.0, "firing", False), (3700.0, "firing", True),
                            (5600.0, "resolved", False)]


# -- grouping ----------------------------------------------------------------------------------


def test_rules_of_one_route_within_group_wait_are_one_notification() -> None:
    lc = fresh(cfg(group_wait=30, group_interval=300))
    records = [rec("firing", 0, rule="acceptance_drop"),
               rec("firing", 10, rule="below_breakeven"),
               rec("firing", 20, rule="throughput_drop"),
               rec("firing", 100, rule="telemetry_stale"),
               rec("firing", 5, rule="acceptance_drop", route="chat")]
    ns = drive(lc, records, end=1000, step=10)
    assert [(rel(n), n.group, [i.rule for i in n.items]) for n in ns] == [
        (30.0, {"route": "code"}, ["acceptance_drop", "below_breakeven", "throughput_drop"]),
        (35.0, {"route": "chat"}, ["acceptance_drop"]),
        (330.0, {"route": "code"}, ["telemetry_stale"]),   # waits for group_interval
    ]
    assert [i.rule for i in ns[2].active] == ["acceptance_drop", "below_breakeven",
                                              "throughput_drop"]
    assert all(i.status == "firing" and not i.repeat for i in ns[2].active)
    assert ns[0].key == f"{group_id({'route': 'code'})}-1"
    assert ns[2].key == f"{group_id({'route': 'code'})}-2"
    assert ns[1].key == f"{group_id({'route': 'chat'})}-1"
    assert ns[0].active == ()


def test_group_by_more_labels_splits_groups() -> None:
    lc = fresh(cfg(group_by=("route", "target_model")))
    a = AlertRecord("acceptance_drop", "firing", datetime.fromtimestamp(T0, UTC), "warning",
                    {"route": "code", "target_model": "m1"}, "a")
    b = AlertRecord("acceptance_drop", "firing", datetime.fromtimestamp(T0, UTC), "warning",
                    {"route": "code", "target_model": "m2"}, "b")
    c = AlertRecord("telemetry_stale", "firing", datetime.fromtimestamp(T0, UTC), "warning",
                    {"route": "code"}, "c")
    ns = drive(lc, [a, b, c], end=300)
    assert sorted(tuple(sorted(n.group.items())) for n in ns) == [
        (("route", "code"), ("target_model", "")),
        (("route", "code"), ("target_model", "m1")),
        (("route", "code"), ("target_model", "m2")),
    ]


def test_resolve_of_a_group_with_news_out_waits_for_group_interval() -> None:
    lc = fresh(cfg(group_wait=30, group_interval=900, keep_firing_for=0))
    ns = drive(lc, [rec("firing", 0), rec("resolved", 120)], end=HOUR)
    assert statuses(ns) == [(30.0, "firing", False), (930.0, "resolved", False)]


def test_fired_and_resolved_before_the_flush_collapses_to_nothing() -> None:
    lc = fresh(cfg(group_wait=HOUR, keep_firing_for=60))
    ns = drive(lc, [rec("firing", 0), rec("resolved", 120)], end=3 * HOUR)
    assert ns == []
    assert lc.suppressed["collapsed"] == 1
    rows = lc.episodes_changed()
    assert rows[-1].state == "resolved" and not rows[-1].notified


def test_reminder_in_the_buffer_is_replaced_by_the_resolve() -> None:
    lc = fresh(cfg(group_interval=2 * HOUR, repeat_interval=HOUR, keep_firing_for=0))
    # sent at 30; the reminder due at 3630 waits for group_interval (7230) and the resolve,
    # due at 5010, takes its place
    ns = drive(lc, [rec("firing", 0), rec("resolved", 5000)], end=4 * HOUR, step=30)
    assert statuses(ns) == [(30.0, "firing", False), (7230.0, "resolved", False)]


# -- silences ----------------------------------------------------------------------------------


def test_silenced_trigger_is_sent_when_the_silence_ends() -> None:
    lc = fresh(cfg())
    s = silence(3, 0, HOUR)
    ns = drive(lc, [rec("firing", 0)], end=2 * HOUR, silences=[s])
    assert statuses(ns) == [(HOUR + 30, "firing", False)]
    assert lc.suppressed["silenced"] == 1
    rows = lc.episodes_changed()
    assert rows[-1].silenced_by is None and rows[-1].notified


def test_silence_records_its_id_on_the_episode() -> None:
    lc = fresh(cfg())
    lc.update([rec("firing", 0)])
    assert lc.advance(T0 + 60, [silence(3, 0, HOUR)]) == []
    rows = lc.episodes_changed()
    assert rows[-1].state == "firing" and rows[-1].silenced_by == 3


def test_silenced_through_its_resolve_is_never_sent() -> None:
    lc = fresh(cfg())
    s = silence(3, 0, HOUR)
    ns = drive(lc, [rec("firing", 0), rec("resolved", 1000)], end=3 * HOUR, silences=[s])
    assert ns == []
    assert lc.suppressed["silenced"] == 1
    assert lc.episodes_changed()[-1].state == "resolved"


def test_resolve_of_an_episode_notified_before_the_silence_is_sent() -> None:
    lc = fresh(cfg())
    s = silence(3, 600, 2 * HOUR)
    ns = drive(lc, [rec("firing", 0), rec("resolved", 1200)], end=3 * HOUR, silences=[s])
    assert statuses(ns) == [(30.0, "firing", False), (1800.0, "resolved", False)]


def test_silence_of_another_rule_or_route_does_not_mute() -> None:
    lc = fresh(cfg())
    ss = [silence(1, 0, HOUR, rule="telemetry_stale"), silence(2, 0, HOUR, route="chat*")]
    ns = drive(lc, [rec("firing", 0)], end=120, silences=ss)
    assert statuses(ns) == [(30.0, "firing", False)]


def test_baseline_accepted_resolve_skips_the_hold() -> None:
    lc = fresh(cfg(keep_firing_for=HOUR))
    r = rec("resolved", 600, reason_resolved=BASELINE_ACCEPTED)
    ns = drive(lc, [rec("firing", 0), r], end=2 * HOUR)
    assert statuses(ns) == [(30.0, "firing", False), (600.0, "resolved", False)]
    assert ns[1].items[0].record == r
    # a plain resolve waits for the hold
    lc = fresh(cfg(keep_firing_for=HOUR))
    ns = drive(lc, [rec("firing", 0), rec("resolved", 600)], end=2 * HOUR)
    assert statuses(ns)[-1] == (600.0 + HOUR, "resolved", False)


def test_duplicates_update_the_record_but_not_the_phase() -> None:
    lc = fresh(cfg(min_firing=20))
    lc.update([rec("resolved", 0)])                 # nothing open: ignored
    lc.update([rec("firing", 0), rec("firing", 10)])  # the newer one before it is announced
    ns = lc.advance(T0 + 20) + lc.advance(T0 + 60)
    assert len(ns) == 1 and ns[0].items[0].record == rec("firing", 10)
    assert ns[0].items[0].started_at == rec("firing", 0).at
    lc.update([rec("resolved", 100), rec("resolved", 200)])
    ns = drive(lc, [], start=300, end=HOUR, step=100)
    assert statuses(ns) == [(700.0, "resolved", False)]   # the hold counts from the first
    assert ns[0].items[0].record == rec("resolved", 200)  # ... and the latest record is sent


# -- episode rows ------------------------------------------------------------------------------


def test_episode_rows_follow_the_phases() -> None:
    lc = fresh(cfg(min_firing=120))
    seen: list[tuple[str, bool]] = []

    def step(records: list[AlertRecord], now: float) -> None:
        lc.update(records)
        lc.advance(T0 + now)
        seen.extend((r.state, r.notified) for r in lc.episodes_changed())

    step([rec("firing", 0)], 0)
    step([], 120)
    step([], 150)
    step([rec("resolved", 300)], 300)
    step([], 900)
    assert seen == [("pending", False), ("firing", False), ("firing", True),
                    ("resolving", True), ("resolved", True)]


def test_episode_rows_latest_wins_within_one_drain() -> None:
    lc = fresh(cfg())
    drive(lc, [rec("firing", 0), rec("resolved", 100)], end=HOUR)
    rows = lc.episodes_changed()
    assert len(rows) == 1 and rows[0].state == "resolved" and rows[0].notified
    assert rows[0].route == "code" and rows[0].group == {"route": "code"}
    assert lc.episodes_changed() == []


# -- state -------------------------------------------------------------------------------------


def test_snapshot_holds_only_changed_groups() -> None:
    lc = fresh(cfg(min_firing=60))
    lc.update([rec("firing", 0), rec("firing", 0, route="chat")])
    assert lc.pending
    first = lc.snapshot()
    assert len(first) == 2 and not lc.pending
    assert all(k.startswith(Lifecycle.STATE_PREFIX) for k in first)
    assert all(v["kind"] == "alert_group" and v["version"] == 1 for v in first.values())
    lc.update([rec("firing", 5, rule="telemetry_stale")])
    assert list(lc.snapshot()) == [Lifecycle.STATE_PREFIX + group_id({"route": "code"})]
    assert lc.snapshot() == {}


def test_load_ignores_other_keys_and_drop_all_forgets() -> None:
    lc = fresh(cfg())
    lc.update([rec("firing", 0)])
    store = {"route:xyz": {"kind": "route", "version": 3}, **lc.snapshot()}
    other = Lifecycle(cfg())
    assert not other.loaded
    other.load(store)
    assert other.loaded
    assert statuses(other.advance(T0) + other.advance(T0 + 30)) == [(30.0, "firing", False)]
    other.drop_all()
    assert not other.loaded and not other.pending
    assert other.advance(T0 + 60) == []


def test_advance_without_a_clock_decides_nothing() -> None:
    lc = fresh(cfg())
    assert lc.advance(float("-inf")) == [] and lc.clock is None
    lc.update([rec("firing", 0)])
    assert lc.advance(float("-inf")) == [] and lc.clock == T0   # records set the clock
    assert len(lc.advance(T0 + 30)) == 1


def test_bad_snapshot_version_raises() -> None:
    lc = fresh(cfg())
    lc.update([rec("firing", 0)])
    store = lc.snapshot()
    key = next(iter(store))
    with pytest.raises(StateVersionError):
        Lifecycle(cfg()).load({key: {**store[key], "version": 2}})
    with pytest.raises(StateVersionError):
        Lifecycle(cfg()).load({key: {**store[key], "kind": "engine"}})


Step = tuple[str, Any]


def long_script() -> list[Step]:
    """Several routes and rules through every path: short blips, flaps, holds, repeats,
    silences, baseline accepts, collapses, per-rule timings."""
    rng = random.Random(42)
    records: list[AlertRecord] = []
    routes = ["code", "chat", "batch-eu"]
    rules = ["acceptance_drop", "below_breakeven", "telemetry_stale"]
    for route in routes:
        for rule in rules:
            t = float(rng.randint(0, 20) * MIN)
            for _ in range(rng.randint(4, 10)):
                records.append(rec("firing", t, rule=rule, route=route))
                t += rng.choice([1, 3, 7, 20, 90]) * MIN
                reason = {"reason_resolved": BASELINE_ACCEPTED} if rng.random() < 0.15 else {}
                records.append(rec("resolved", t, rule=rule, route=route, **reason))
                t += rng.choice([2, 5, 15, 40]) * MIN
    records.sort(key=lambda r: (r.at, r.rule, r.labels["route"]))
    end = max(r.at.timestamp() for r in records) - T0 + 2 * HOUR
    steps: list[Step] = []
    t = 0.0
    i = 0
    while t <= end:
        due = []
        while i < len(records) and records[i].at.timestamp() <= T0 + t:
            due.append(records[i])
            i += 1
        if due:
            steps.append(("update", due))
        steps.append(("advance", T0 + t))
        t += rng.choice([10, 30, 60, 240])
    return steps


SCRIPT_CONFIG = cfg(
    group_wait=30, group_interval=300, repeat_interval=HOUR, min_firing=60, keep_firing_for=600,
    rules={"telemetry_stale": RuleTimingConfig(min_firing=300, keep_firing_for=120,
                                               repeat_interval=1800)},
)
SCRIPT_SILENCES = (silence(1, 2 * HOUR, 3 * HOUR), silence(2, HOUR, 5 * HOUR, route="batch-*",
                                                           rule="below_breakeven"))


def run(lc: Lifecycle, steps: Sequence[Step], store: dict[str, Any] | None = None,
        silences: Sequence[Silence] = SCRIPT_SILENCES) -> list[list[Notification]]:
    """Each step's notifications; snapshots after every step go into ``store`` (through
    JSON, as the state table would keep them)."""
    out = []
    for kind, arg in steps:
        if kind == "update":
            lc.update(arg)
            out.append([])
        else:
            out.append(lc.advance(arg, silences))
        if store is not None:
            store.update(orjson.loads(orjson.dumps(lc.snapshot())))
    return out


def test_long_script_exercises_every_path() -> None:
    lc = fresh(SCRIPT_CONFIG)
    ns = [n for step in run(lc, long_script()) for n in step]
    kinds = Counter((i.status, i.repeat) for n in ns for i in n.items)
    assert kinds[("firing", False)] > 5 and kinds[("resolved", False)] > 5
    assert kinds[("firing", True)] > 0
    assert {"short", "flap", "silenced"} <= set(lc.suppressed)
    assert any(len(n.items) > 1 for n in ns) and any(n.active for n in ns)


def test_resolves_come_after_their_triggers_and_keys_are_unique() -> None:
    lc = fresh(SCRIPT_CONFIG)
    ns = [n for step in run(lc, long_script()) for n in step]
    keys = [n.key for n in ns]
    assert len(keys) == len(set(keys))
    by_group: dict[str, list[int]] = {}
    for n in ns:
        gid, _, seq = n.key.rpartition("-")
        assert gid == group_id(n.group)
        by_group.setdefault(gid, []).append(int(seq))
    assert all(seqs == list(range(1, len(seqs) + 1)) for seqs in by_group.values())
    firing_at: dict[str, int] = {}
    resolved: set[str] = set()
    for k, n in enumerate(ns):
        assert all(n.at <= m.at for m in ns[k:])
        for i in n.items:
            if i.status == "firing" and not i.repeat:
                assert i.episode not in firing_at and i.episode not in resolved
                firing_at[i.episode] = k
            elif i.status == "firing":
                assert i.episode in firing_at and i.episode not in resolved
            else:
                assert firing_at[i.episode] < k
                resolved.add(i.episode)
        assert not {i.episode for i in n.items} & {i.episode for i in n.active}


def test_same_inputs_same_notifications() -> None:
    steps = long_script()
    a = [[n.to_json() for n in step] for step in run(fresh(SCRIPT_CONFIG), steps)]
    b = [[n.to_json() for n in step] for step in run(fresh(SCRIPT_CONFIG), steps)]
    assert a == b


def assert_restore_identity(steps: Sequence[Step], config: LifecycleConfig,
                            silences: Sequence[Silence]) -> list[list[Notification]]:
    """Stopping after any step and restoring from the stored snapshots sends exactly what
    the uninterrupted run sends, and leaves exactly the same stored state."""
    store_full: dict[str, Any] = {}
    full = run(fresh(config), steps, store_full, silences)
    original = fresh(config)
    store: dict[str, Any] = {}
    for cut in range(len(steps) + 1):
        if cut:
            run(original, steps[cut - 1:cut], store, silences)
        restored = Lifecycle(config)
        restored.load(dict(store))
        rest_store = dict(store)
        rest = run(restored, steps[cut:], rest_store, silences)
        assert rest == full[cut:], f"cut {cut}"
        assert rest_store == store_full, f"cut {cut}"
    return full


def test_restore_at_every_cut_point_gives_the_same_notifications() -> None:
    full = assert_restore_identity(long_script(), SCRIPT_CONFIG, SCRIPT_SILENCES)
    assert sum(map(len, full)) > 10


def test_restore_with_a_silence_ending_during_the_hold() -> None:
    # silenced while firing, cleared while silenced, silence ends during the hold, then it
    # fires again within the hold: announced only then (the same episode, told late)
    steps: list[Step] = [
        ("update", [rec("firing", 0)]), ("advance", T0 + 60), ("advance", T0 + 120),
        ("update", [rec("resolved", 300)]), ("advance", T0 + 360), ("advance", T0 + 600),
        ("advance", T0 + 660), ("update", [rec("firing", 700)]), ("advance", T0 + 720),
        ("advance", T0 + 780), ("update", [rec("resolved", 800)]), ("advance", T0 + 1400),
        ("advance", T0 + 1500),
        # a second episode silenced through its resolve: silence 3 ends in its hold
        ("update", [rec("firing", 4000)]), ("advance", T0 + 4000),
        ("update", [rec("resolved", 4100)]), ("advance", T0 + 4300), ("advance", T0 + 4800),
    ]
    silences = [silence(1, 0, 620), silence(3, 3900, 4200)]
    full = assert_restore_identity(steps, cfg(), silences)
    assert statuses(n for step in full for n in step) == [
        (730.0, "firing", False), (1400.0, "resolved", False)]




# -- event time, whatever the batching -----------------------------------------------------------


def _translation(state: str, at: datetime) -> AlertRecord:
    return AlertRecord("tokenizer_mismatch", state, at, "critical", {"route": "translation"},
                       "x" if state == "firing" else "y")


REPRO_T = datetime(2026, 11, 29, 16, 9, tzinfo=UTC)


def _repro_expected(ns: list[Notification]) -> None:
    t = REPRO_T.timestamp()
    assert [(n.at.timestamp() - t, [(i.status, i.repeat) for i in n.items]) for n in ns] == [
        (30.0, [("firing", False)]),               # group_wait after it fired
        (65 * MIN, [("resolved", False)]),         # resolved at 55 min + keep_firing_for
    ]
    assert ns[0].items[0].episode == ns[1].items[0].episode
    assert ns[1].items[0].record.at == REPRO_T + timedelta(minutes=55)


def test_flush_due_before_a_later_resolve_is_sent_not_collapsed() -> None:
    r1 = _translation("firing", REPRO_T)
    r2 = _translation("resolved", REPRO_T + timedelta(minutes=55))
    now = (REPRO_T + timedelta(hours=5)).timestamp()
    lc = fresh(LifecycleConfig())
    lc.update([r1])
    ns = lc.advance(REPRO_T.timestamp() + 1)
    lc.update([r2])
    ns += lc.advance(now)
    _repro_expected(ns)
    assert "collapsed" not in lc.suppressed
    # a checkpoint's worth of records at once: the same two
    lc = fresh(LifecycleConfig())
    lc.update([r1, r2])
    ns = lc.advance(now)
    _repro_expected(ns)
    assert "collapsed" not in lc.suppressed


def test_records_behind_a_wall_clock_tick_are_decided_at_their_own_times() -> None:
    # a tick puts the clock 2 h ahead, then a backlog's resolve from 55 min comes in
    r1 = _translation("firing", REPRO_T)
    r2 = _translation("resolved", REPRO_T + timedelta(minutes=55))
    lc = fresh(LifecycleConfig())
    lc.update([r1])
    ns = lc.advance((REPRO_T + timedelta(hours=2)).timestamp())
    assert len(ns) == 1 and ns[0].at == REPRO_T + timedelta(seconds=30)
    lc.update([r2])
    assert lc.clock == (REPRO_T + timedelta(hours=2)).timestamp()
    ns += lc.advance((REPRO_T + timedelta(hours=2)).timestamp())
    _repro_expected(ns)
    rows = lc.episodes_changed()
    assert rows[-1].state == "resolved"
    assert rows[-1].updated_at == REPRO_T + timedelta(minutes=65)   # event time, not the tick


def test_notifications_decided_in_update_survive_a_restart_before_advance() -> None:
    lc = fresh(cfg())
    lc.update([rec("firing", 0), rec("firing", 100, rule="telemetry_stale")])
    store = orjson.loads(orjson.dumps(lc.snapshot()))   # the flush at 30 happened in update
    restored = Lifecycle(cfg())
    restored.load(store)
    ns = restored.advance(T0 + 100)
    assert statuses(ns) == [(30.0, "firing", False)]
    assert ns == lc.advance(T0 + 100)
    assert restored.snapshot() == lc.snapshot()        # handed out: gone from both
    assert restored.advance(T0 + 400) == lc.advance(T0 + 400) != []


def test_silences_of_the_last_advance_hold_in_update_and_across_a_restart() -> None:
    s = silence(4, 0, HOUR)
    lc = fresh(cfg())
    assert lc.advance(T0 - 1, [s]) == []
    store = orjson.loads(orjson.dumps(lc.snapshot()))
    assert list(store) == ["alerts/lifecycle"]
    restored = Lifecycle(cfg())
    restored.load(store)
    # promoted at 0 while the update runs to the duplicate at 100: silence 4 holds it
    restored.update([rec("firing", 0), rec("firing", 100)])
    assert restored.episodes_changed()[-1].silenced_by == 4
    assert restored.advance(T0 + 200, [s]) == []
    assert not restored.snapshot().get("alerts/lifecycle")   # unchanged: not stored again


def test_an_expired_silence_releases_at_the_clock() -> None:
    lc = fresh(cfg())
    lc.update([rec("firing", 0)])
    assert lc.advance(T0 + 60, [silence(4, 0, HOUR)]) == []
    assert lc.advance(T0 + 600, []) == []          # gone from the list: announced at 600
    assert statuses(lc.advance(T0 + 630)) == [(630.0, "firing", False)]


def test_baseline_accept_on_a_duplicate_resolve_ends_the_hold_then() -> None:
    lc = fresh(cfg(keep_firing_for=HOUR))
    ns = drive(lc, [rec("firing", 0), rec("resolved", 600),
                    rec("resolved", 900, reason_resolved=BASELINE_ACCEPTED)], end=2 * HOUR)
    assert statuses(ns) == [(30.0, "firing", False), (900.0, "resolved", False)]


def batching_script(seed: int) -> tuple[list[AlertRecord], float]:
    """Records in event-time order over several routes and rules: blips, flaps, long holds,
    reminders, duplicates, baseline accepts, resolves of nothing; and the end time."""
    rng = random.Random(seed)
    records: list[AlertRecord] = []
    for route in ["code", "chat", "batch-eu", "batch-us"]:
        for rule in ["acceptance_drop", "below_breakeven", "telemetry_stale"]:
            t = rng.choice([0.0, 0.0, 20 * MIN, 40 * MIN]) + rng.choice([0, 0, 7.5, 31])
            if rng.random() < 0.2:
                records.append(rec("resolved", t, rule=rule, route=route))
            for _ in range(rng.randint(3, 9)):
                records.append(rec("firing", t, rule=rule, route=route))
                if rng.random() < 0.2:
                    records.append(rec("firing", t + rng.choice([0, 10, 45]), rule=rule,
                                       route=route, note="again"))
                t += rng.choice([0.5, 1, 3, 7, 20, 90, 150]) * MIN + rng.choice([0, 0, 13.25])
                accept = rng.random() < 0.1
                reason = {"reason_resolved": BASELINE_ACCEPTED} if accept else {}
                records.append(rec("resolved", t, rule=rule, route=route, **reason))
                if rng.random() < 0.2:
                    reason = {"reason_resolved": BASELINE_ACCEPTED} if rng.random() < 0.5 else {}
                    records.append(rec("resolved", t + rng.choice([0, 30, 200]), rule=rule,
                                       route=route, **reason))
                t += rng.choice([0.5, 2, 5, 9, 15, 40, 180]) * MIN
    records.sort(key=lambda r: r.at)   # stable: ties stay in decision order
    end = max(r.at.timestamp() for r in records) + 3 * HOUR
    return records, end


BATCH_SILENCES = (
    silence(1, 2 * HOUR, 3 * HOUR), silence(2, HOUR, 5 * HOUR, route="batch-*",
                                            rule="below_breakeven"),
    silence(3, 30 * MIN, 30 * MIN + 0.5, route="chat"), silence(4, 4 * HOUR, 9 * HOUR,
                                                                route="batch-us"),
)


class Outcome:
    """What a run hands out: notifications, the latest row of each episode, stored state."""

    def __init__(self) -> None:
        self.notes: list[Notification] = []
        self.rows: dict[str, EpisodeRow] = {}
        self.store: dict[str, Any] = {}
        self.suppressed: Counter[str] = Counter()

    def take(self, lc: Lifecycle, ns: list[Notification]) -> None:
        self.notes += ns
        self.suppressed = Counter(lc.suppressed)
        self.rows.update((r.episode, r) for r in lc.episodes_changed())
        self.store.update(orjson.loads(orjson.dumps(lc.snapshot())))

    def key(self) -> tuple[Any, ...]:
        assert all(a.at <= b.at for a, b in zip(self.notes, self.notes[1:], strict=False))
        notes = sorted((n.to_json() for n in self.notes), key=lambda n: (n["at"], n["key"]))
        # the clock stored with a group is when it was last written: a matter of batching
        store = {k: {f: x for f, x in v.items() if f != "clock"} for k, v in self.store.items()}
        return notes, self.rows, store


def one_at_a_time(records: Sequence[AlertRecord], end: float) -> Outcome:
    lc, out = fresh(SCRIPT_CONFIG), Outcome()
    out.take(lc, lc.advance(float("-inf"), BATCH_SILENCES))
    last = float("-inf")
    for r in records:
        lc.update([r])
        ns = lc.advance(r.at.timestamp(), BATCH_SILENCES)
        # nothing is ever decided in the past: all of it fell due since the last call
        assert all(last <= n.at.timestamp() <= r.at.timestamp() for n in ns)
        out.take(lc, ns)
        last = r.at.timestamp()
    out.take(lc, lc.advance(end, BATCH_SILENCES))
    return out


def all_at_once(records: Sequence[AlertRecord], end: float) -> Outcome:
    lc, out = fresh(SCRIPT_CONFIG), Outcome()
    out.take(lc, lc.advance(float("-inf"), BATCH_SILENCES))
    lc.update(records)
    out.take(lc, lc.advance(end, BATCH_SILENCES))
    return out


def random_chunks(records: Sequence[AlertRecord], end: float, seed: int,
                  restarts: bool) -> tuple[Outcome, int]:
    """Chunks of random size, each followed by none, one or two advances at random times up
    to the next record (its own time, far past the chunk, stale, -inf), restarting from the
    stored state at random points."""
    rng = random.Random(seed)
    lc, out, cuts = fresh(SCRIPT_CONFIG), Outcome(), 0
    out.take(lc, lc.advance(float("-inf"), BATCH_SILENCES))
    i = 0
    while i < len(records):
        j = min(len(records), i + rng.choice([1, 1, 2, 3, 5, 8, 20, 60]))
        lc.update(records[i:j])
        out.take(lc, [])
        last = records[j - 1].at.timestamp()
        nxt = records[j].at.timestamp() if j < len(records) else end
        for _ in range(rng.choice([0, 1, 1, 1, 2])):
            now = rng.choice([last, nxt, rng.uniform(last, nxt), nxt,
                              last - rng.uniform(0, HOUR), float("-inf")])
            out.take(lc, lc.advance(now, BATCH_SILENCES))
            if restarts and rng.random() < 0.5:
                lc = Lifecycle(SCRIPT_CONFIG)
                lc.load(dict(out.store))
                cuts += 1
        if restarts and rng.random() < 0.5:      # between an update and its advance, too
            lc = Lifecycle(SCRIPT_CONFIG)
            lc.load(dict(out.store))
            cuts += 1
        i = j
    out.take(lc, lc.advance(end, BATCH_SILENCES))
    return out, cuts


@pytest.mark.parametrize("seed", [7, 8, 9])
def test_batching_and_advance_times_do_not_change_what_is_sent(seed: int) -> None:
    records, end = batching_script(seed)
    a = one_at_a_time(records, end)
    b = all_at_once(records, end)
    c, _ = random_chunks(records, end, seed, restarts=False)
    assert a.key() == b.key()
    assert a.suppressed == b.suppressed == c.suppressed
    assert c.key() == a.key()
    # and the script is no trivial one
    kinds = Counter((i.status, i.repeat) for n in a.notes for i in n.items)
    assert kinds[("firing", False)] > 10 and kinds[("resolved", False)] > 10
    assert kinds[("firing", True)] > 0
    assert any(len(n.items) > 1 for n in a.notes)
    assert {"resolved", "dropped"} <= {r.state for r in a.rows.values()}
    assert any(r.silenced_by is not None for r in a.rows.values())


@pytest.mark.parametrize("seed", [7, 8, 9, 10, 11])
def test_batching_with_restarts_does_not_change_what_is_sent(seed: int) -> None:
    records, end = batching_script(seed)
    c, cuts = random_chunks(records, end, seed * 31, restarts=True)
    assert cuts >= 5
    assert c.key() == one_at_a_time(records, end).key()


def test_one_late_advance_over_many_groups_decides_each_timer_at_its_own_time() -> None:
    # 40 routes, each firing, resolving and firing again at its own offsets: their timers
    # (group_wait, keep_firing_for, group_interval, reminders) interleave across groups.
    rng = random.Random(5)
    records = []
    for n in range(40):
        route, t0 = f"r{n:02d}", rng.uniform(0, 600)
        cleared = t0 + rng.uniform(60, 1200)
        records += [rec("firing", t0, route=route), rec("resolved", cleared, route=route),
                    rec("firing", cleared + rng.uniform(0, 900), route=route)]
    end = 6 * HOUR
    stepped = drive(fresh(cfg(repeat_interval=HOUR)), records, end)
    late = fresh(cfg(repeat_interval=HOUR))
    late.update(records)
    once = late.advance(T0 + end)
    assert [n.to_json() for n in once] == [n.to_json() for n in stepped]
    assert [(n.at, n.key) for n in once] == sorted(
        ((n.at, n.key) for n in once), key=lambda k: (k[0], k[1].rsplit("-", 1)[0]))
    kinds = Counter((i.status, i.repeat) for n in once for i in n.items)
    assert kinds[("firing", False)] >= 40 and kinds[("firing", True)] >= 40
    assert kinds[("resolved", False)] >= 1


def test_a_timer_that_would_not_move_on_cannot_hang_the_lifecycle(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    lc = fresh(cfg())
    lc.update([rec("firing", 0)])
    assert statuses(lc.advance(T0 + 60)) == [(30.0, "firing", False)]
    # a broken timer: always due at 0
    monkeypatch.setattr(Lifecycle, "_alert_deadline", lambda self, g, a: T0)
    lc.update([rec("firing", 100, route="chat")])
    assert lc.advance(T0 + 200) == []
    assert "still due after deciding it" in caplog.text


# -- a consumer group: each group timed by the process that reads its route ----------------------

def _only(steps: Sequence[Step], routes: set[str]) -> list[Step]:
    """What one member sees: its routes' records, and every advance of its clock."""
    return [(kind, [r for r in arg if r.labels["route"] in routes] if kind == "update" else arg)
            for kind, arg in steps]


def _flat(per_step: Iterable[list[Notification]]) -> list[Notification]:
    return [n for step in per_step for n in step]


def _as_sent(ns: Iterable[Notification]) -> list[bytes]:
    return sorted(orjson.dumps(n.to_json()) for n in ns)


def test_a_process_that_does_not_own_a_route_never_notifies_for_it() -> None:
    steps = long_script()
    full = run(fresh(SCRIPT_CONFIG), steps)
    cut = len(steps) // 3
    store: dict[str, Any] = {}
    run(fresh(SCRIPT_CONFIG), steps[:cut], store)
    mine = Lifecycle(SCRIPT_CONFIG)
    mine.load(dict(store), owns=lambda route: route == "batch-eu")
    got = _flat(run(mine, _only(steps[cut:], {"batch-eu"})))
    # The other routes' groups had timers due (flushes, holds ending): none fired here.
    others = [n for n in _flat(full[cut:]) if n.group["route"] != "batch-eu"]
    assert others and got
    assert {n.group["route"] for n in got} == {"batch-eu"}
    assert _as_sent(got) == _as_sent(n for n in _flat(full[cut:])
                                     if n.group["route"] == "batch-eu")
    assert {route for _, route, _ in mine.firing()} <= {"batch-eu"}


@pytest.mark.parametrize("share", [0.2, 0.5, 0.8])
def test_a_killed_members_groups_go_on_at_a_peer_as_in_one_process(share: float) -> None:
    steps = long_script()
    full = _flat(run(fresh(SCRIPT_CONFIG), steps))
    routes_a, routes_b = {"code", "chat"}, {"batch-eu"}
    store: dict[str, Any] = {}
    a, b = Lifecycle(SCRIPT_CONFIG), Lifecycle(SCRIPT_CONFIG)
    a.load({}, owns=routes_a.__contains__)
    b.load({}, owns=routes_b.__contains__)
    cut = int(len(steps) * share)
    sent: list[Notification] = []
    for step in steps[:cut]:  # each member checkpoints after every step
        sent += _flat(run(a, _only([step], routes_a), store))
        sent += _flat(run(b, _only([step], routes_b), store))
    run(a, _only(steps[cut:cut + 1], routes_a))  # decided, never stored: a was killed
    survivor = Lifecycle(SCRIPT_CONFIG)  # b after the rebalance, reloaded from the store
    survivor.load(dict(store), owns=lambda route: True)
    sent += _flat(run(survivor, steps[cut:], store))
    assert {n.group["route"] for n in sent} == routes_a | routes_b
    assert _as_sent(sent) == _as_sent(full)


def test_a_group_set_aside_is_taken_over_when_a_record_of_its_route_arrives() -> None:
    steps = long_script()
    full = run(fresh(SCRIPT_CONFIG), steps)
    cut = len(steps) // 2
    assert any(r.labels["route"] == "code" for kind, arg in steps[cut:] if kind == "update"
               for r in arg)
    store: dict[str, Any] = {}
    run(fresh(SCRIPT_CONFIG), steps[:cut], store)
    moved = Lifecycle(SCRIPT_CONFIG)
    # "code" was read elsewhere at the load; its events arrive here from now on
    moved.load(dict(store), owns=lambda route: route != "code")
    got = _flat(run(moved, steps[cut:], store))
    assert _as_sent(got) == _as_sent(_flat(full[cut:]))
    before = {n.key for n in _flat(full[:cut]) if n.group["route"] == "code"}
    after = {n.key for n in got if n.group["route"] == "code"}
    assert before and after and not before & after  # its sequence went on, no key reused


def test_a_group_set_aside_goes_on_once_its_route_is_read_here_without_a_record() -> None:
    # Fired and cleared before the move: only timers are left (the end of the hold, the
    # flush of the resolve), and no record of the route comes to trigger a take-over.
    records = [rec("firing", 0), rec("resolved", 20 * MIN)]
    full = drive(fresh(cfg()), records, end=HOUR)
    assert statuses(full) == [(30.0, "firing", False), (1800.0, "resolved", False)]
    store: dict[str, Any] = {}
    before = run(fresh(cfg()), [("update", records[:1]), ("advance", T0 + MIN),
                                ("update", records[1:]), ("advance", T0 + 21 * MIN)], store)
    assert statuses(_flat(before)) == statuses(full[:1])
    read_here = {"code": False}
    moved = Lifecycle(cfg())
    moved.load(dict(store), owns=lambda route: read_here.get(route, True))
    assert moved.advance(T0 + HOUR) == []  # another process reads "code": nothing timed here
    read_here["code"] = True  # its partition (and so the route) came here, quietly
    got = moved.advance(T0 + HOUR)
    assert statuses(got) == statuses(full[1:])
    assert [n.key for n in got] == [full[1].key]  # the stored sequence went on


def test_alerting_keeps_the_stored_silences_until_the_daemon_has_read_them() -> None:
    from alerts.alerting import Alerting
    from monitor.config import AlertingConfig

    config = AlertingConfig(lifecycle=cfg())
    store: dict[str, Any] = {}
    first = Alerting(config, ["log"])
    first.load({})
    first.silences = [silence(1, 0, 2 * HOUR)]
    decision = first.decide([rec("firing", 0)], T0 + 60)
    assert not decision.notifications
    store.update(orjson.loads(orjson.dumps(decision.state)))
    restarted = Alerting(config, ["log"])
    restarted.load(store)
    # Its first checkpoint comes before it read the silences: the stored one still holds.
    assert not restarted.decide([rec("firing", 120, rule="below_breakeven")],
                                T0 + 300).notifications
    restarted.silences = []  # read now: an operator expired it meanwhile
    assert not restarted.decide([], T0 + 400).notifications  # released at the clock, 400 s
    # both episodes announced together after the group wait
    assert statuses(restarted.decide([], T0 + 500).notifications) == [
        (430.0, "firing", False), (430.0, "firing", False)]
