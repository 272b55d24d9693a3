"""``/metrics`` gauges of the change report: the newest change per route and kind, judged.

The verdicts come from the rollups in the store (``monitor/changes``), not from live
detectors, so the collector reads the store itself, at most once per ``every`` seconds. That
read is the judge's, and it grows with the store: each change reads its route's rollups over
both sides of the change, every series of the route, so at 10,000 series one refresh took
about 10 s. A scrape must not wait for it: the refresh runs on a thread of its own, started
by the scrape that finds the judgements due, and a scrape waits for it at most ``wait``
seconds, then renders the judgements it has (the previous ones, or none yet); a scrape that
comes while a refresh runs waits for nothing. A small store is judged well within ``wait``,
so there a scrape shows what it always did. The next refresh is due ``every`` seconds after
the last one ended. A store that fails leaves the last judgements in place (logged), so a
database blip does not blank the gauges.

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

__all__ = ["DEFAULT_EVERY_S", "DEFAULT_WAIT_S", "VERDICT_VALUES", "ChangeCollector",
           "newest_per_kind"]

log = logging.getLogger(__name__)

DEFAULT_EVERY_S = 60.0
# Well under Prometheus' default 10 s scrape timeout, and far above a small store's judging.
DEFAULT_WAIT_S = 0.5
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
    """Renders ``judge()`` (the judgements to show), refreshed at most every ``every`` s on a
    thread of its own; a scrape waits for a refresh at most ``wait`` s (``None``: until it
    is done, which is what a test that wants the newest judgements asks for)."""

    def __init__(self, judge: Callable[[], Sequence[ChangeJudgement]], *,
                 every: float = DEFAULT_EVERY_S, wait: float | None = DEFAULT_WAIT_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.judge = judge
        self.every = every
        self.wait = wait
        self.clock = clock
        self._lock = threading.Lock()
        self._judged: tuple[ChangeJudgement, ...] = ()
        self._at: float | None = None
        self._refresh: threading.Thread | None = None
        self.last_refresh_s: float | None = None  # how long the last finished refresh took

    @classmethod
    def for_store(cls, store: Store, settings: JudgeSettings, *,
                  max_series: int = DEFAULT_MAX_SERIES, every: float = DEFAULT_EVERY_S,
                  wait: float | None = DEFAULT_WAIT_S,
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

        return cls(judge, every=every, wait=wait, clock=clock)

    def judgements(self) -> tuple[ChangeJudgement, ...]:
        """The judgements to show: a refresh is started when they are older than ``every``
        and waited for at most ``wait`` seconds."""
        started: threading.Thread | None = None
        with self._lock:
            if self._refresh is None and (self._at is None
                                          or self.clock() - self._at >= self.every):
                started = self._refresh = threading.Thread(
                    target=self._run, daemon=True, name="specwatch-change-gauges")
                started.start()
        # Only the scrape that started a refresh waits for it, outside the lock: the scrapes
        # that arrive while a long one runs render the last judgements at once.
        if started is not None and self.wait != 0:
            started.join(self.wait)
        with self._lock:
            return self._judged

    def join(self, timeout: float | None = None) -> bool:
        """Wait for a refresh in progress; ``True`` when none is left running."""
        with self._lock:
            refresh = self._refresh
        if refresh is not None:
            refresh.join(timeout)
            return not refresh.is_alive()
        return True

    def _run(self) -> None:
        started = time.perf_counter()
        judged: tuple[ChangeJudgement, ...] | None = None
        try:
            judged = tuple(self.judge())
        except Exception as e:  # noqa: BLE001 - the gauges must outlive a failing store
            log.warning("change gauges not refreshed, showing the last ones: %s", e)
        with self._lock:
            if judged is not None:
                self._judged = judged
                self.last_refresh_s = time.perf_counter() - started
            # ``every`` counts from the end, failed or not: a refresh that takes longer than
            # ``every`` leaves the store that long alone before the next, never none
            self._at = self.clock()
            self._refresh = None

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
