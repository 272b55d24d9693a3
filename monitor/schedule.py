"""When the daemon's jobs run: the ``jobs`` settings and the schedule strings they hold.

Below the config (``monitor.config`` imports :class:`JobsConfig`, and every command reads
the config): pydantic and the durations only; APScheduler is imported when a trigger is built.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from monitor.durations import Duration

if TYPE_CHECKING:
    from apscheduler.triggers.cron import CronTrigger

__all__ = ["JobsConfig", "cron_trigger", "last_fire_time"]

_DAYS_TIME = re.compile(r"(\S+)\s+(\d{1,2}):(\d{2})")


def cron_trigger(spec: str) -> CronTrigger:
    """A UTC trigger for ``"mon 06:00"`` (weekdays, then time of day; ``daily`` or ``*`` for
    every day, ``mon-fri``, ``mon,thu``) or a five-field crontab such as ``"0 6 * * mon"``.

    Crontab weekdays must be names: APScheduler 3 counts 0 as Monday where cron counts
    Sunday, so a number would silently shift the day.

    >>> t = cron_trigger("mon 06:00")
    >>> t.get_next_fire_time(None, datetime(2026, 11, 4, tzinfo=UTC)).isoformat()
    '2026-11-09T06:00:00+00:00'
    >>> cron_trigger("0 6 * * 1")
    Traceback (most recent call last):
    ...
    ValueError: invalid schedule '0 6 * * 1': name the weekdays (mon, tue, ...), cron and ...
    """
    from apscheduler.triggers.cron import CronTrigger

    fields = spec.split()
    m = _DAYS_TIME.fullmatch(spec.strip())
    try:
        if m is not None:
            days, hour, minute = m.groups()
            days = "*" if days.lower() == "daily" else days.lower()
            return CronTrigger(day_of_week=days, hour=int(hour), minute=int(minute), timezone=UTC)
        if len(fields) == 5:
            if re.search(r"\d", fields[4]):
                raise ValueError(
                    "name the weekdays (mon, tue, ...), cron and APScheduler number them "
                    "differently"
                )
            return CronTrigger.from_crontab(spec, timezone=UTC)
    except ValueError as e:
        raise ValueError(f"invalid schedule {spec!r}: {e}") from None
    raise ValueError(f"invalid schedule {spec!r} (want e.g. 'mon 06:00' or '0 6 * * mon')")


def last_fire_time(trigger: Any, now: datetime) -> datetime | None:
    """The trigger's latest fire time at or before ``now`` (``None``: none within a year).

    >>> t = cron_trigger("mon 06:00")
    >>> last_fire_time(t, datetime(2026, 11, 11, 12, tzinfo=UTC)).isoformat()
    '2026-11-09T06:00:00+00:00'
    """
    step = timedelta(hours=1)
    # APScheduler 3 triggers only look forward: start ever further back, then walk forward.
    while step <= timedelta(days=400):
        fire = trigger.get_next_fire_time(None, now - step)
        if fire is not None and fire <= now:
            while True:
                nxt = trigger.get_next_fire_time(fire, fire + timedelta(microseconds=1))
                if nxt is None or nxt > now:
                    return fire  # type: ignore[no-any-return]
                fire = nxt
        step *= 2
    return None


class JobsConfig(BaseModel):
    """When the daemon's jobs run (``jobs`` in the config file).

    >>> JobsConfig(flag_off_window="14d", retention_every="5m").flag_off_window
    1209600.0
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    retention_every: Duration = Field(600.0, gt=0)
    staleness_every: Duration = Field(15.0, gt=0)
    flag_off_cron: str = "mon 06:00"
    flag_off_window: Duration = Field(7 * 86400.0, ge=7200.0)
    flag_off_min_requests: int = Field(1000, ge=1)  # per side, else "insufficient data"
    flag_off_misfire_grace: Duration = Field(6 * 3600.0, ge=0)
    # The stored policy (specwatch policy, docs/policy.md): learnt daily over this much
    # history, the last policy.holdout_share of it held out.
    policy_cron: str = "daily 05:00"
    policy_window: Duration = Field(7 * 86400.0, ge=7200.0)

    @field_validator("flag_off_cron", "policy_cron")
    @classmethod
    def _schedule(cls, v: str) -> str:
        cron_trigger(v)
        return v
