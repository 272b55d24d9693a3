"""``/metrics`` gauges of the change report: the newest change per route and kind, judged.

The verdicts come from the rollups in the store (``monitor/changes``), not from live
detectors, so the collector reads the store itself, on the scrape thread, at most once per
``every`` seconds (a scrape in between renders the cached judgements): a scrape stays cheap
and a slow database delays one scrape a minute at most. A store that fails leaves the last
judgements in place (logged), so a database blip does not blank the gauges.

Bounded: one change per (route, kind), the ``max_series`` most recent of them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from monitor.change_record import ChangeRecord
from monitor.changes import ChangeJudgement, JudgeSettings, judge_change

if TYPE_CHECKING:
    from monitor.store.store import Store

__all__ = ["DEFAULT_EVERY_S", "VERDICT_VALUES", "ChangeCollector", "newest_per_kind"]

log = logging.getLogger(__name__)

DEFAULT_EVERY_S = 60.0
DEFAULT_MAX_SERIES = 1000
# worse up, better down: "> 0" is the alert expression
VERDICT_VALUES = {"worse": 1.0, "same": 0.0, "better": -1.0}


def newest_per_kind(records: Sequence[ChangeRecord], limit: int) -> list[ChangeRecord]:
    """The newest change of each (route, kind), the ``limit`` most recent, newest first."""
    newest: dict[tuple[str, str], ChangeRecord] = {}
    for r in records:
        kept = newest.get((r.route, r.kind))
        if kept is None or (r.at, r.change_id) > (kept.at, kept.change_id):
            newest[(r.route, r.kind)] = r
    return sorted(newest.values(), key=lambda r: (-r.at, r.route, r.kind))[:limit]


class ChangeCollector(Collector):
    """Renders ``judge()`` (the judgements to show), refreshed at most every ``every`` s."""

    def __init__(self, judge: Callable[[], Sequence[ChangeJudgement]], *,
                 every: float = DEFAULT_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.judge = judge
        self.every = every
        self.clock = clock
        self._lock = threading.Lock()
        self._judged: tuple[ChangeJudgement, ...] = ()
        self._at: float | None = None

    @classmethod
    def for_store(cls, store: Store, settings: JudgeSettings, *,
                  max_series: int = DEFAULT_MAX_SERIES, every: float = DEFAULT_EVERY_S,
                  clock: Callable[[], float] = time.monotonic) -> ChangeCollector:
        """The collector of a daemon or ``specwatch serve``: the newest change per route and
        kind in ``store``, each judged with ``settings``."""

        def judge() -> list[ChangeJudgement]:
            records = store.changes()
            by_route: dict[str, list[ChangeRecord]] = {}
            for r in records:
                by_route.setdefault(r.route, []).append(r)
            return [judge_change(store, r, by_route[r.route], settings)
                    for r in newest_per_kind(records, max_series)]

        return cls(judge, every=every, clock=clock)

    def judgements(self) -> tuple[ChangeJudgement, ...]:
        """The cached judgements, refreshed when older than ``every``."""
        with self._lock:
            now = self.clock()
            if self._at is None or now - self._at >= self.every:
                self._at = now  # a failure is retried after ``every`` too, not every scrape
                try:
                    self._judged = tuple(self.judge())
                except Exception as e:  # noqa: BLE001 - a scrape must not fail on the store
                    log.warning("change gauges not refreshed, showing the last ones: %s", e)
            return self._judged

    @staticmethod
    def _families() -> dict[str, GaugeMetricFamily]:
        return {
            "verdict": GaugeMetricFamily(
                "specwatch_change_verdict",
                "Verdict of the newest setup change of the route and kind, per metric and "
                "overall (metric=\"overall\"): 1 worse, 0 same, -1 better; absent while there "
                "is not enough data.", labels=["route", "kind", "metric"]),
            "acceptance": GaugeMetricFamily(
                "specwatch_change_acceptance_ratio",
                "Acceptance after the newest setup change of the route and kind over "
                "acceptance before it (at the shared draft positions when the draft length "
                "changed); absent while there is not enough data.", labels=["route", "kind"]),
            "at": GaugeMetricFamily(
                "specwatch_change_timestamp_seconds",
                "Event time of the newest setup change of the route and kind (its new setup's "
                "first event), Unix seconds.", labels=["route", "kind"]),
        }

    def describe(self) -> list[Metric]:
        return list(self._families().values())

    def collect(self) -> Iterator[Metric]:
        f = self._families()
        for j in self.judgements():
            r = j.record
            f["at"].add_metric([r.route, r.kind], r.at)
            for m in j.metrics:
                if m.verdict in VERDICT_VALUES:
                    f["verdict"].add_metric([r.route, r.kind, m.name], VERDICT_VALUES[m.verdict])
            if j.verdict in VERDICT_VALUES:
                f["verdict"].add_metric([r.route, r.kind, "overall"], VERDICT_VALUES[j.verdict])
            acc = j.metric("acceptance")
            if acc.verdict in VERDICT_VALUES and acc.before and acc.after is not None:
                f["acceptance"].add_metric([r.route, r.kind], acc.after / acc.before)
        yield from f.values()
