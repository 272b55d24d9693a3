"""The daemon's scheduled work: retention, the staleness sweep and the weekly flag-off report.

One APScheduler 3 ``BackgroundScheduler`` per daemon, on a memory job store, in UTC. Job
stores are never shared between schedulers (3.x would run a shared job once per scheduler):
daemons sharing a store coordinate through database leases instead.

=============  =============================  ================  ==================================
job            when                           lease             what
=============  =============================  ================  ==================================
``retention``  at start, then every           ``job:retention`` ``Store.apply_retention``: drop
               ``retention_every`` (10 min)                     rollup rows past their
                                                                granularity's retention
``staleness``  every ``staleness_every``      none              ``request_tick()``: asks the
               (15 s)                                           app's poll loop to sweep
                                                                staleness
``flag_off``   ``flag_off_cron``              ``job:flag_off``  ``monitor/flagoff.py`` on the
               (Monday 06:00 UTC)                               window ending at the scheduled
                                                                time: the change judge on each
                                                                route's latest
                                                                ``speculation_off`` change;
                                                                reports upserted
=============  =============================  ================  ==================================

- **Retention only.** Minute rows are not compacted into hours and days by a job: the
  checkpoint writes all three granularities in one transaction, so there is nothing left to
  compact, and deleting expired rows is the whole job.
- **Staleness never touches detection.** ``Detection`` is not thread-safe and belongs to the
  pipeline thread; the job only calls ``request_tick`` (the app sets an event), and the poll
  loop runs ``detection.tick`` itself once the consumer is caught up. No lease: each daemon
  judges silence on the partitions it reads.
- **Leases.** A leased job first takes ``job:<name>``; while another daemon holds it, the
  run is skipped. Retention holds its lease for 1.5 intervals and renews it each run, so one
  daemon keeps the job and another takes over within 1.5 intervals of its death (it is
  released on shutdown). The flag-off lease is held for an hour and not released: it marks
  the week's report as done while other daemons' schedules fire.
- **Idempotent reports.** The flag-off window ends at the job's last scheduled time, not at
  the moment it runs, so a late run, a rerun (``run_now``) or a second daemon writes the
  same (route, window) rows again instead of new ones.
- **Misfires.** Runs coalesce, one instance per job at a time; an interval job may start up
  to one interval late. The flag-off job may start ``flag_off_misfire_grace`` (6 h) late,
  and a daemon started within that grace after a scheduled time runs it at once, so a
  Monday-morning deploy does not lose the week's report.

Heavy imports (APScheduler, SQLAlchemy) happen when a :class:`Jobs` is built, not on import.
The settings and schedule parsing live in :mod:`monitor.schedule`, below the config.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from monitor.schedule import JobsConfig, cron_trigger, last_fire_time
from monitor.store.checkpoint import GRANULARITIES

if TYPE_CHECKING:
    from monitor.store.store import Store

__all__ = [
    "FLAG_OFF",
    "JOB_NAMES",
    "POLICY",
    "RETENTION",
    "STALENESS",
    "JobRun",
    "Jobs",
    "JobsConfig",
    "cron_trigger",
    "last_fire_time",
]

log = logging.getLogger(__name__)

RETENTION, STALENESS, FLAG_OFF, POLICY = "retention", "staleness", "flag_off", "policy"
JOB_NAMES = (RETENTION, STALENESS, FLAG_OFF, POLICY)
LEASED = (RETENTION, FLAG_OFF, POLICY)
LEASE_FACTOR = 1.5  # retention's lease outlives one interval: its holder keeps it
FLAG_OFF_LEASE_S = 3600.0  # covers a run and the clock skew between daemons


@dataclass(frozen=True, slots=True)
class JobRun:
    """One run of a job: ``ran`` is ``False`` when it was ``skipped`` (and why)."""

    name: str
    ran: bool
    result: Any = None
    skipped: str | None = None


class Jobs:
    """The scheduler of one daemon; :meth:`start`, :meth:`shutdown`, :meth:`run_now`.

    ``retention`` maps each granularity to how long its rows are kept (seconds or
    ``timedelta``: ``Config.retention``). ``clock`` gives the time the jobs work with (their
    leases, retention cut-offs and report windows); the scheduler itself fires on the wall
    clock. Jobs run on the scheduler's threads; ``request_tick`` must only signal.
    """

    def __init__(
        self,
        store: Store,
        config: JobsConfig,
        *,
        retention: Mapping[str, float | timedelta],
        request_tick: Callable[[], object],
        holder: str,
        clock: Callable[[], float] = time.time,
        policy: Callable[[datetime], Any] | None = None,
    ) -> None:
        from apscheduler.executors.pool import ThreadPoolExecutor
        from apscheduler.jobstores.memory import MemoryJobStore
        from apscheduler.schedulers.background import BackgroundScheduler

        self.store = store
        self.config = config
        self.holder = holder
        self.clock = clock
        unknown = sorted(set(retention) - set(GRANULARITIES))
        if unknown:
            raise ValueError(f"unknown granularity in retention: {', '.join(unknown)}")
        self.retention = {
            g: v if isinstance(v, timedelta) else timedelta(seconds=v)
            for g, v in retention.items()
        }
        self._request_tick = request_tick
        self._flag_off_trigger = cron_trigger(config.flag_off_cron)
        self._policy_trigger = cron_trigger(config.policy_cron)
        # The policy job needs the whole configuration (cost models, policy settings): the
        # daemon hands in its body (monitor/policy/job.py); without one it does nothing.
        self._policy = policy
        self._bodies: dict[str, Callable[[datetime], Any]] = {
            RETENTION: self._retention,
            STALENESS: self._staleness,
            FLAG_OFF: self._flag_off,
            POLICY: self._run_policy,
        }
        # A run_now (CLI, tests) and a scheduled run of one job never overlap in a process.
        self._running = {name: threading.Lock() for name in JOB_NAMES}
        # APScheduler logs every run at INFO ("Running job ...", "... executed successfully"):
        # every 15 s for staleness. Our own lines say what matters; unless someone configured
        # that logger, keep its chatter to warnings (missed runs still show).
        executor_log = logging.getLogger("apscheduler.executors.default")
        if executor_log.level == logging.NOTSET:
            executor_log.setLevel(logging.WARNING)
        self.scheduler = BackgroundScheduler(
            jobstores={"default": MemoryJobStore()},
            # One thread per job: a long flag-off report never delays the staleness sweep.
            executors={
                "default": ThreadPoolExecutor(
                    len(JOB_NAMES), pool_kwargs={"thread_name_prefix": "specwatch-job"}
                )
            },
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": 60},
            timezone=UTC,
            daemon=True,
        )

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self.clock(), UTC)

    # -- the schedule ----------------------------------------------------------------------

    def start(self) -> None:
        from apscheduler.triggers.interval import IntervalTrigger

        cfg = self.config
        wall = datetime.now(UTC)  # the scheduler's own clock: "at once" for it
        self.scheduler.add_job(
            self._scheduled, IntervalTrigger(seconds=cfg.retention_every, timezone=UTC),
            args=[RETENTION], id=RETENTION, name=RETENTION,
            misfire_grace_time=max(1, int(cfg.retention_every)),
            next_run_time=wall,  # a daemon restarted often still applies retention
        )
        self.scheduler.add_job(
            self._scheduled, IntervalTrigger(seconds=cfg.staleness_every, timezone=UTC),
            args=[STALENESS], id=STALENESS, name=STALENESS,
            misfire_grace_time=max(1, int(cfg.staleness_every)),
        )
        catch_up: dict[str, Any] = {}
        if self.missed_flag_off() is not None:
            catch_up["next_run_time"] = wall
        self.scheduler.add_job(
            self._scheduled, self._flag_off_trigger, args=[FLAG_OFF], id=FLAG_OFF,
            name=FLAG_OFF, misfire_grace_time=max(1, int(cfg.flag_off_misfire_grace)),
            **catch_up,
        )
        if self._policy is not None:
            self.scheduler.add_job(
                self._scheduled, self._policy_trigger, args=[POLICY], id=POLICY, name=POLICY,
                misfire_grace_time=max(1, int(cfg.flag_off_misfire_grace)),
            )
        self.scheduler.start()
        log.info(
            "jobs: retention every %gs, staleness every %gs, flag-off report %r UTC%s",
            cfg.retention_every, cfg.staleness_every, cfg.flag_off_cron,
            f", policy {cfg.policy_cron!r} UTC" if self._policy is not None else "",
        )

    def missed_flag_off(self) -> datetime | None:
        """The scheduled flag-off time a daemon starting now should still catch up on."""
        now = self._now()
        fire = last_fire_time(self._flag_off_trigger, now)
        grace = timedelta(seconds=self.config.flag_off_misfire_grace)
        return fire if fire is not None and now - fire <= grace else None

    def shutdown(self, wait: bool = True) -> None:
        """Stop the scheduler (``wait``: let running jobs finish) and hand retention over."""
        if self.scheduler.running:
            self.scheduler.shutdown(wait=wait)
        from monitor.store.leases import release_lease

        try:
            release_lease(self.store.engine, f"job:{RETENTION}", self.holder)
        except Exception:  # it expires on its own
            log.debug("could not release the retention lease", exc_info=True)

    # -- running ---------------------------------------------------------------------------

    def run_now(self, name: str) -> JobRun:
        """Run job ``name`` in the calling thread, with its lease; errors propagate."""
        if name not in self._bodies:
            raise ValueError(f"unknown job {name!r} (known: {', '.join(JOB_NAMES)})")
        return self._run(name)

    def _scheduled(self, name: str) -> None:
        try:
            run = self._run(name)
        except Exception:
            # A database hiccup must not stop the schedule: log it, the next run comes.
            log.exception("job %s failed; it runs again as scheduled", name)
            return
        if not run.ran:
            log.debug("job %s skipped: %s", name, run.skipped)

    def _run(self, name: str) -> JobRun:
        lock = self._running[name]
        if not lock.acquire(blocking=False):
            return JobRun(name, False, skipped="already running in this process")
        try:
            now = self._now()
            if name in LEASED:
                from monitor.store.leases import acquire_lease, lease_holder

                lease = f"job:{name}"
                if not acquire_lease(self.store.engine, lease, self.holder, now, self._hold(name)):
                    other = lease_holder(self.store.engine, lease, now)
                    return JobRun(name, False, skipped=f"lease {lease} held by {other}")
            return JobRun(name, True, self._bodies[name](now))
        finally:
            lock.release()

    def _hold(self, name: str) -> float:
        if name == RETENTION:
            return LEASE_FACTOR * self.config.retention_every
        return FLAG_OFF_LEASE_S

    # -- the jobs --------------------------------------------------------------------------

    def _retention(self, now: datetime) -> dict[str, int]:
        deleted = self.store.apply_retention(now, self.retention)
        if any(deleted.values()):
            log.info("retention removed %s", deleted)
        return deleted

    def _staleness(self, now: datetime) -> None:
        self._request_tick()

    def _run_policy(self, now: datetime) -> Any:
        if self._policy is None:
            return None
        # Learnt on the window that ends at the scheduled time: a rerun learns the same.
        return self._policy(last_fire_time(self._policy_trigger, now) or now)

    def _flag_off(self, now: datetime) -> list[Any]:
        from monitor.flagoff import compare_flag_off, save_reports

        cfg = self.config
        end = last_fire_time(self._flag_off_trigger, now) or now
        results = compare_flag_off(
            self.store, end, cfg.flag_off_window, min_requests=cfg.flag_off_min_requests
        )
        save_reports(self.store, results, now)
        for r in results:
            log.info("flag-off %s: %s", r.route, r.summary)
        if not results:
            log.info("flag-off report to %s: no route switched speculation off", end.isoformat())
        return results
