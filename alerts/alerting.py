"""Between a decision and the outbox: lifecycle, silences and routing, one checkpoint at a time.

The pipeline hands :meth:`Alerting.decide` the condition records of each checkpoint together
with its clock; what comes back (outbox rows per sink, episode rows, lifecycle snapshots) is
written in the same transaction as the detector state that produced it. A crash therefore
loses or doubles no notification: the restart re-decides the same ones under the same keys.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from alerts.lifecycle import EpisodeRow, Lifecycle
from alerts.metrics import AlertMetrics
from alerts.notification import Notification
from alerts.routing import route_notification
from alerts.silences import Silence
from monitor.alert_record import AlertRecord
from monitor.config import AlertingConfig

__all__ = ["Alerting", "Decision"]


@dataclass(slots=True)
class Decision:
    """What one checkpoint adds to the store on the alerting side."""

    outbox: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    episodes: list[dict[str, Any]] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)
    notifications: list[Notification] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.outbox or self.episodes or self.state or self.notifications)


class Alerting:
    """The alert lifecycle of one source, routed to ``sinks``.

    ``deliver=False`` (a replay without ``--deliver``) decides and records everything but
    writes no outbox rows: a backtest pages no one. ``wall``: the clock reminders count from
    once a notification went out (:class:`~alerts.lifecycle.Lifecycle`); ``None`` for event
    time alone.
    """

    def __init__(
        self,
        config: AlertingConfig,
        sinks: Iterable[str],
        metrics: AlertMetrics | None = None,
        *,
        deliver: bool = True,
        wall: Callable[[], float] | None = time.time,
    ) -> None:
        self.config = config
        self.sinks = list(sinks)
        self.metrics = metrics
        self.deliver = deliver
        self.lifecycle = Lifecycle(config.lifecycle, wall)
        # The silences in force, as the caller last read them from the store; ``None``
        # until it did: a daemon's first checkpoints then keep the stored ones rather than
        # lift every silence until the first read.
        self.silences: Sequence[Silence] | None = None
        self._counted: Counter[str] = Counter()

    @property
    def loaded(self) -> bool:
        return self.lifecycle.loaded

    def load(
        self, states: dict[str, Any], owns: Callable[[str], bool] | None = None
    ) -> None:
        """Restore the lifecycle; with ``owns`` (a consumer group), only the groups of the
        routes read by this process are timed and notified here."""
        self.lifecycle.load(states, owns)
        self._counted = Counter(self.lifecycle.suppressed)

    def drop_all(self) -> None:
        self.lifecycle.drop_all()

    def decide(self, records: Sequence[AlertRecord], now: float) -> Decision:
        """Feed this checkpoint's condition records, advance to ``now``, route what is due."""
        lc = self.lifecycle
        if not records and now == float("-inf"):
            return Decision()  # nothing seen yet: no clock to time anything against
        if records:
            lc.update(records)
        silences = lc.silences if self.silences is None else self.silences
        notes = lc.advance(now, silences)
        d = Decision(notifications=notes)
        if self.deliver:
            for n in notes:
                for sink, routed in route_notification(n, self.config, self.sinks):
                    d.outbox.append((sink, n.key, routed.to_json()))
        d.episodes = [_episode_row(e) for e in lc.episodes_changed()]
        d.state = lc.snapshot()
        self._count(len(notes))
        return d

    def _count(self, decided: int) -> None:
        if self.metrics is None:
            return
        if decided:
            self.metrics.notifications_decided.inc(decided)
        now = self.lifecycle.suppressed
        for reason, n in now.items():
            delta = n - self._counted.get(reason, 0)
            if delta > 0:
                self.metrics.suppressed.labels(reason=reason).inc(delta)
        self._counted = Counter(now)


def _episode_row(e: EpisodeRow) -> dict[str, Any]:
    row = asdict(e)
    row.pop("group", None)
    return row
