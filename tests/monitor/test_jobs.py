"""The daemon's scheduler: schedules, leases between daemons, the staleness hand-off, reports."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from monitor.flagoff import load_reports
from monitor.jobs import (
    FLAG_OFF,
    JOB_NAMES,
    POLICY,
    RETENTION,
    STALENESS,
    Jobs,
    JobsConfig,
    cron_trigger,
    last_fire_time,
)
from monitor.store import Store
from tests.monitor.store.helpers import T0, at, checkpoint, event
from tests.monitor.test_flagoff import NOW, Rollups, commit, switched

RETENTION_S = {"minute": 7 * 86400.0, "hour": 90 * 86400.0, "day": 730 * 86400.0}
TUESDAY = datetime(2026, 11, 17, 12, tzinfo=UTC)


class Clock:
    """A settable clock for the jobs (the scheduler itself fires on the wall clock)."""

    def __init__(self, t: datetime) -> None:
        self.t = t.timestamp()

    def __call__(self) -> float:
        return self.t

    def set(self, t: datetime) -> None:
        self.t = t.timestamp()

    def advance(self, seconds: float) -> None:
        self.t += seconds


class Ticks:
    """What the app gives as ``request_tick``: it only records and signals."""

    def __init__(self) -> None:
        self.requested = threading.Event()
        self.threads: list[str] = []

    def __call__(self) -> None:
        self.threads.append(threading.current_thread().name)
        self.requested.set()


def make_jobs(
    store: Store, clock: Clock, holder: str = "a", ticks: Ticks | None = None,
    policy: Any = None, **config: object
) -> Jobs:
    return Jobs(
        store, JobsConfig(**config), retention=RETENTION_S, request_tick=ticks or Ticks(),
        holder=holder, clock=clock, policy=policy,
    )


@pytest.fixture
def stores(migrated_url: str) -> Iterator[tuple[Store, Store]]:
    """Two daemons' stores on one database."""
    a, b = Store(migrated_url), Store(migrated_url)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


# --- configuration and schedule -----------------------------------------------------------


def test_config_defaults_and_validation() -> None:
    cfg = JobsConfig()
    assert (cfg.retention_every, cfg.staleness_every, cfg.flag_off_cron) == (600, 15, "mon 06:00")
    assert (cfg.flag_off_window, cfg.flag_off_min_requests) == (7 * 86400, 1000)
    assert JobsConfig(staleness_every="30s", flag_off_window="14d").flag_off_window == 14 * 86400
    for bad, where in [
        ({"flag_off_cron": "mon 25:00"}, "flag_off_cron"),
        ({"flag_off_cron": "0 6 * * 1"}, "name the weekdays"),
        ({"flag_off_cron": "whenever"}, "want e.g. 'mon 06:00'"),
        ({"flag_off_window": "1h"}, "flag_off_window"),
        ({"retention_every": 0}, "retention_every"),
        ({"retentoin_every": 5}, "extra"),
    ]:
        with pytest.raises(ValidationError, match=where):
            JobsConfig(**bad)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="frozen"):
        cfg.retention_every = 1.0  # type: ignore[misc]


def test_schedules_over_a_fake_week() -> None:
    week = datetime(2026, 11, 9, tzinfo=UTC)  # Monday 00:00

    def fires(trigger: object, start: datetime, end: datetime) -> list[datetime]:
        out, prev, now = [], None, start
        while True:
            t = trigger.get_next_fire_time(prev, now)  # type: ignore[attr-defined]
            if t is None or t >= end:
                return out
            out.append(t)
            prev, now = t, t + timedelta(microseconds=1)

    assert fires(cron_trigger("mon 06:00"), week, week + timedelta(days=14)) == [
        datetime(2026, 11, 9, 6, tzinfo=UTC), datetime(2026, 11, 16, 6, tzinfo=UTC)
    ]
    assert [t.weekday() for t in fires(cron_trigger("0 6 * * mon-fri"), week,
                                       week + timedelta(days=7))] == [0, 1, 2, 3, 4]
    assert len(fires(cron_trigger("daily 07:30"), week, week + timedelta(days=7))) == 7
    # The anchor of the report window: the latest scheduled time, whenever the job runs.
    trigger = cron_trigger("mon 06:00")
    assert last_fire_time(trigger, datetime(2026, 11, 16, 6, tzinfo=UTC)) == (
        datetime(2026, 11, 16, 6, tzinfo=UTC)
    )
    assert last_fire_time(trigger, datetime(2026, 11, 16, 5, 59, tzinfo=UTC)) == (
        datetime(2026, 11, 9, 6, tzinfo=UTC)
    )


def test_started_scheduler_holds_the_four_jobs(store: Store) -> None:
    jobs = make_jobs(store, Clock(TUESDAY), retention_every="5m", policy=lambda end: end)
    before = datetime.now(UTC)
    jobs.start()
    try:
        after = datetime.now(UTC)
        by_id = {j.id: j for j in jobs.scheduler.get_jobs()}
        assert sorted(by_id) == sorted(JOB_NAMES)
        assert by_id[RETENTION].trigger.interval == timedelta(minutes=5)
        assert by_id[STALENESS].trigger.interval == timedelta(seconds=15)
        stale_next = by_id[STALENESS].next_run_time
        assert before + timedelta(seconds=15) <= stale_next <= after + timedelta(seconds=15)
        flag_next = by_id[FLAG_OFF].next_run_time
        assert flag_next == cron_trigger("mon 06:00").get_next_fire_time(None, after)
        assert (flag_next.weekday(), flag_next.hour, flag_next.minute) == (0, 6, 0)
        for job in by_id.values():
            assert (job.coalesce, job.max_instances) == (True, 1)
        assert by_id[STALENESS].misfire_grace_time == 15
        assert by_id[FLAG_OFF].misfire_grace_time == 6 * 3600
        policy_next = by_id[POLICY].next_run_time
        assert policy_next == cron_trigger("daily 05:00").get_next_fire_time(None, after)
        assert str(jobs.scheduler.timezone) == "UTC"
    finally:
        jobs.shutdown()
    assert not jobs.scheduler.running
    jobs.shutdown()  # twice is fine


def test_missed_flag_off_is_caught_up_within_grace(store: Store) -> None:
    clock = Clock(datetime(2026, 11, 16, 7, tzinfo=UTC))  # an hour after Monday 06:00
    jobs = make_jobs(store, clock)
    assert jobs.missed_flag_off() == datetime(2026, 11, 16, 6, tzinfo=UTC)
    clock.set(datetime(2026, 11, 16, 12, 1, tzinfo=UTC))  # past the 6 h grace
    assert jobs.missed_flag_off() is None
    clock.set(datetime(2026, 11, 16, 5, 59, tzinfo=UTC))
    assert jobs.missed_flag_off() is None


# --- the staleness hand-off ---------------------------------------------------------------


class PipelineOwned:
    """Stands in for Detection: not thread-safe, so it refuses any thread but its owner's."""

    def __init__(self) -> None:
        self.owner = threading.get_ident()
        self.ticks: list[float] = []

    def tick(self, now: float) -> None:
        assert threading.get_ident() == self.owner, "detection touched off its thread"
        self.ticks.append(now)


def test_staleness_job_only_requests_a_tick(store: Store) -> None:
    ticks, detection = Ticks(), PipelineOwned()
    jobs = make_jobs(store, Clock(TUESDAY), ticks=ticks)
    jobs.start()
    try:
        # Fire the scheduled job now instead of waiting 15 s for it.
        jobs.scheduler.modify_job(STALENESS, next_run_time=datetime.now(UTC))
        assert ticks.requested.wait(timeout=30), "the scheduled staleness job never ran"
    finally:
        jobs.shutdown()
    assert ticks.threads and all(t.startswith("specwatch-job") for t in ticks.threads)
    # The poll loop's side: it runs the sweep on its own thread when asked.
    if ticks.requested.is_set():
        ticks.requested.clear()
        detection.tick(1.0)
    assert detection.ticks == [1.0]
    assert jobs.run_now(STALENESS).ran and ticks.requested.is_set()


# --- run_now, leases and failures ---------------------------------------------------------


def test_run_now_applies_retention(store: Store) -> None:
    old = [event(f"o{i}", T0 + 60 * i) for i in range(3)]
    new = [event(f"n{i}", T0 + 8 * 86400 + 60 * i) for i in range(3)]
    store.commit(checkpoint(old + new, next_offset=6))
    clock = Clock(at(T0 + 8 * 86400 + 3600))
    run = make_jobs(store, clock).run_now(RETENTION)
    assert run.ran and run.skipped is None
    assert run.result == {"minute": 3, "hour": 0, "day": 0}
    assert {r.bucket_start for r in store.ratios(granularity="minute")} == {
        at(e.ts) for e in new
    }
    assert len(store.ratios(granularity="hour")) == 2  # hours are kept 90 days
    with pytest.raises(ValueError, match="unknown granularity in retention: week"):
        Jobs(store, JobsConfig(), retention={"week": 1.0}, request_tick=Ticks(), holder="a")


def test_lease_makes_a_second_daemon_skip(stores: tuple[Store, Store]) -> None:
    clock = Clock(TUESDAY)
    ticks_a, ticks_b = Ticks(), Ticks()
    a = make_jobs(stores[0], clock, "daemon-a", ticks_a)
    b = make_jobs(stores[1], clock, "daemon-b", ticks_b)

    assert a.run_now(RETENTION).ran
    skipped = b.run_now(RETENTION)
    assert not skipped.ran and skipped.skipped == "lease job:retention held by daemon-a"
    assert a.run_now(FLAG_OFF).ran
    assert not b.run_now(FLAG_OFF).ran
    # Staleness has no lease: each daemon sweeps its own partitions.
    assert a.run_now(STALENESS).ran and b.run_now(STALENESS).ran
    assert len(ticks_a.threads) == len(ticks_b.threads) == 1

    # The holder renews at each run and keeps the job...
    clock.advance(600)
    assert a.run_now(RETENTION).ran
    assert not b.run_now(RETENTION).ran
    # ...a dead holder's lease expires after 1.5 intervals,
    clock.advance(901)
    assert b.run_now(RETENTION).ran
    assert not a.run_now(RETENTION).ran
    # and shutting down hands retention over at once.
    b.shutdown()
    assert a.run_now(RETENTION).ran
    # The flag-off lease lasts an hour from the run: it is not released.
    assert not b.run_now(FLAG_OFF).ran
    clock.set(TUESDAY + timedelta(seconds=3601))
    assert b.run_now(FLAG_OFF).ran


def test_flag_off_job_writes_each_report_once(stores: tuple[Store, Store]) -> None:
    r = Rollups()
    switched(r, "code", tail=2760.0)
    commit(stores[0], r)
    clock = Clock(NOW + timedelta(seconds=1))  # Monday 06:00:01, the scheduled run
    a = make_jobs(stores[0], clock, "daemon-a", flag_off_min_requests=100)
    b = make_jobs(stores[1], clock, "daemon-b", flag_off_min_requests=100)

    run = a.run_now(FLAG_OFF)
    assert run.ran
    (result,) = run.result
    assert (result.route, result.verdict, result.window_end) == ("code", "turn_back_on", NOW)
    assert not b.run_now(FLAG_OFF).ran  # the other daemon's schedule fires: skipped

    # A rerun on Wednesday, and the other daemon once the lease is gone: the same window.
    clock.set(NOW + timedelta(days=2, hours=3))
    assert a.run_now(FLAG_OFF).result[0].window_end == NOW
    clock.advance(3601)
    assert b.run_now(FLAG_OFF).ran
    (row,) = load_reports(stores[0])
    assert (row["route"], row["window_end"], row["verdict"]) == (
        "code", "2026-11-16T06:00:00Z", "turn_back_on"
    )
    assert row["created_at"] == "2026-11-16T06:00:01Z"
    assert row["updated_at"] == "2026-11-18T10:00:01Z"


def test_flag_off_logs_one_line_per_route(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    r = Rollups()
    switched(r, "code", tail=2760.0)
    switched(r, "chat")
    commit(store, r)
    jobs = make_jobs(store, Clock(NOW), flag_off_min_requests=100)
    with caplog.at_level(logging.INFO, logger="monitor.jobs"):
        jobs.run_now(FLAG_OFF)
    lines = [rec.getMessage() for rec in caplog.records if rec.name == "monitor.jobs"]
    assert lines[0].startswith("flag-off chat: p99 did not worsen with speculation off")
    assert lines[1].startswith("flag-off code: p99 e2e worsened")
    assert len(lines) == 2


def test_a_failing_job_is_logged_and_the_schedule_goes_on(
    store: Store, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = make_jobs(store, Clock(TUESDAY))

    def broken(*_: object) -> dict[str, int]:
        raise RuntimeError("database went away")

    monkeypatch.setattr(store, "apply_retention", broken)
    with pytest.raises(RuntimeError):
        jobs.run_now(RETENTION)  # run_now lets errors through
    with caplog.at_level(logging.ERROR, logger="monitor.jobs"):
        jobs._scheduled(RETENTION)  # what the scheduler calls: never raises
    assert "job retention failed; it runs again as scheduled" in caplog.text
    with pytest.raises(ValueError, match="unknown job 'compaction' .known: retention, "):
        jobs.run_now("compaction")


def test_without_a_policy_body_the_policy_job_is_not_scheduled(store: Store) -> None:
    jobs = make_jobs(store, Clock(TUESDAY))
    jobs.start()
    try:
        assert POLICY not in {j.id for j in jobs.scheduler.get_jobs()}
        assert jobs.run_now(POLICY).result is None
    finally:
        jobs.shutdown()


def test_policy_job_learns_on_the_window_of_its_scheduled_time(stores: tuple[Store, Store]
                                                               ) -> None:
    ends: list[datetime] = []
    a, b = stores
    clock = Clock(TUESDAY.replace(hour=5, minute=40))
    first = make_jobs(a, clock, "a", policy=ends.append)
    second = make_jobs(b, clock, "b", policy=ends.append)
    assert first.run_now(POLICY).ran
    # The lease marks the day's policy as done while the other daemon's schedule fires.
    run = second.run_now(POLICY)
    assert not run.ran and "held by a" in (run.skipped or "")
    assert ends == [TUESDAY.replace(hour=5, minute=0)]
