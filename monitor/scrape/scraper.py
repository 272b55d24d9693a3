"""Telemetry from engines that only expose Prometheus counters: scrape, difference, emit.

Per-request telemetry is the better source (vLLM >= 0.29 per-request metrics, SGLang
``meta_info``, TRT-LLM ``perf_metrics``), but many deployments only have ``/metrics``.
``EngineScraper`` reads one target's counters every interval and turns their increases into
one telemetry v1 event per interval (the mapping is in ``event.py``; counter resets
in ``counters.py``; metric names per engine in ``engines.py``).
``ScrapeSource`` runs a set of scrapers on a schedule and sends what they produce to Kafka
or a JSON-lines file, where the daemon or ``specwatch replay`` count it like any telemetry.

Intervals sit on a grid: interval ``n`` of a target with period ``p`` ends at ``n * p``
(Unix time), and a target is scraped once per grid slot. The event id is the target's key
plus that grid time, so an interval sent twice (a crash between sending and saving state,
a retry after a broker error) is dropped as a duplicate downstream. A failed scrape produces
nothing and moves no baseline: the next good scrape's event covers the gap, so counts are
delayed, never lost.

Delivery is write-ahead when ``state_path`` is set: new baselines are saved together with
the events they produced before anything is sent, and the events are forgotten (saved
again) only once the sink confirmed them. A crash anywhere re-sends at most the last events,
with the same ids.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from monitor.scrape.counters import CounterTracker
from monitor.scrape.engines import PROFILES, read_exposition, totals
from monitor.scrape.event import Interval, build_event, spec_counts
from monitor.scrape.exceptions import ScrapeError
from monitor.scrape.sinks import EventSink
from monitor.scrape_config import ScrapeConfig, ScrapeTarget

__all__ = ["EngineScraper", "ScrapeCollector", "ScrapeSource", "ScrapeStats", "fetch"]

log = logging.getLogger(__name__)

# Text format 0.0.4 only: every engine serves it, and prometheus_client's exporter (which all
# three engines use) picks OpenMetrics whenever the Accept header names it, whatever its q.
# An exporter that answers OpenMetrics anyway is read with the OpenMetrics parser.
ACCEPT = "text/plain;version=0.0.4"
# A torn read (counters incremented while the exposition was written) can show more accepted
# than drafted tokens for one short interval; the next interval sets it right, so such an
# interval is held back and merged into the next, at most this many times in a row.
MAX_DEFERS = 2
STATE_VERSION = 1
OUTBOX_LIMIT = 10_000  # events kept while the sink is down: ~40 h of 4 targets at 15 s


@dataclass(slots=True)
class ScrapeStats:
    """What happened to one target's scrapes; exported by :class:`ScrapeCollector`."""

    scrapes: int = 0  # successful fetch and parse
    failures: int = 0  # no answer, HTTP error or unparseable: no event, baseline kept
    baselines: int = 0  # first reading: nothing to difference against
    events: int = 0
    idle: int = 0  # intervals without engine activity: no event
    resets: int = 0  # readings in which a counter was reset or the process restarted
    deferred: int = 0
    clamped: int = 0
    nonfinite: int = 0  # NaN/Inf samples skipped
    unmatched: int = 0  # readings with none of the engine's series (wrong engine or labels?)
    per_position_dropped: int = 0
    unusable: int = 0  # intervals whose spec counts could not be derived
    last_error: str = ""


def fetch(client: httpx.Client, url: str) -> tuple[str, bool]:
    """The exposition at ``url`` and whether it is OpenMetrics; ``ScrapeError`` otherwise."""
    try:
        r = client.get(url, headers={"Accept": ACCEPT})
    except httpx.TimeoutException:
        raise ScrapeError("timed out") from None
    except httpx.HTTPError as e:
        raise ScrapeError(f"no answer ({type(e).__name__})") from None
    if r.status_code != 200:
        raise ScrapeError(f"HTTP {r.status_code}")
    content_type = r.headers.get("content-type", "")
    return r.text, content_type.startswith("application/openmetrics-text")


def slot_of(now: float, period: float) -> int:
    """The grid slot ``now`` falls in.

    >>> slot_of(1793628014.9, 15.0), slot_of(1793628015.0, 15.0)
    (119575200, 119575201)
    """
    return math.floor(now / period)


class EngineScraper:
    """One target: its previous reading, the interval in progress, its statistics.

    ``scrape_once()`` fetches and observes; :class:`ScrapeSource` fetches a URL shared by
    several targets once and calls :meth:`observe` / :meth:`failed` on each. Each returns
    the event of the interval it closed, or ``None`` (first reading, failure, a second
    reading within the same grid slot, an idle interval).
    """

    def __init__(self, target: ScrapeTarget, *, client: httpx.Client | None = None,
                 timeout: float = 5.0, clock: Callable[[], float] = time.time) -> None:
        self.target = target
        self.profile = PROFILES[target.engine]
        self.stats = ScrapeStats()
        self._client = client
        self._own_client = client is None
        self._timeout = timeout
        self._clock = clock
        self._tracker = CounterTracker()
        self._interval: Interval | None = None
        self._last_slot: int | None = None  # slot of the last event sent
        self._tried_slot: int | None = None  # slot of the last scrape attempt
        self._defers = 0
        self._warned_unmatched = False

    def scrape_once(self) -> dict[str, Any] | None:
        now = self._clock()
        if self._client is None:
            self._client = httpx.Client(timeout=self._timeout)
        try:
            text, openmetrics = fetch(self._client, self.target.url)
        except ScrapeError as e:
            return self.failed(str(e), now)
        return self.observe(text, now, openmetrics=openmetrics)

    def close(self) -> None:
        """Close the HTTP client if this scraper made it (``scrape_once`` without one)."""
        if self._client is not None and self._own_client:
            self._client.close()
            self._client = None

    def due(self, now: float) -> bool:
        return self._tried_slot is None or slot_of(now, self.target.interval) > self._tried_slot

    def next_due(self, now: float) -> float:
        """When the next grid slot of this target begins."""
        period = self.target.interval
        return (slot_of(now, period) + 1) * period

    def failed(self, reason: str, now: float) -> None:
        """A scrape that produced nothing usable: skip the interval, keep the baseline."""
        self._tried_slot = slot_of(now, self.target.interval)
        self.stats.failures += 1
        self.stats.last_error = reason
        if self._interval is not None:
            self._interval.failures += 1
        log.warning("scrape %s: %s", self.target.display_name, reason)
        return None

    def observe(self, text: str, now: float, *, openmetrics: bool = False
                ) -> dict[str, Any] | None:
        """Take one exposition read at ``now``; the event of the interval it closes, if any."""
        try:
            reading = read_exposition(text, self.profile, self.target.labels,
                                      openmetrics=openmetrics)
        except ScrapeError as e:
            return self.failed(str(e), now)
        self._tried_slot = slot_of(now, self.target.interval)
        self.stats.scrapes += 1
        self.stats.nonfinite += len(reading.nonfinite)
        if not reading.values and not reading.nonfinite:
            self.stats.unmatched += 1
            if not self._warned_unmatched:
                self._warned_unmatched = True
                log.warning("scrape %s: no %s series matching labels %s at %s",
                            self.target.display_name, self.target.engine,
                            self.target.labels or "{}", self.target.instance_name)
        increase = self._tracker.update(reading)
        if increase is None or self._interval is None:
            self.stats.baselines += 1
            self._interval = Interval(start=now)
            return None
        if increase.resets:
            self.stats.resets += 1
            log.info("scrape %s: counters reset: %s", self.target.display_name,
                     "; ".join(increase.resets[:3]))
        self._interval.add(totals(increase.values, self.profile), reset=bool(increase.resets))
        return self._close(now)

    def _close(self, now: float) -> dict[str, Any] | None:
        interval = self._interval
        assert interval is not None
        period = self.target.interval
        slot = slot_of(now, period)
        if self._last_slot is not None and slot <= self._last_slot:
            return None  # this slot's event is out; keep counting into the next one
        if not interval.active:
            self.stats.idle += 1
            return None  # nothing happened; anything that did counts into the next event
        counts = spec_counts(self.target, interval.totals)
        if counts is None and self.profile.spec_quantity in interval.totals:
            # SGLang without a generated-tokens counter: acceptance cannot be derived.
            self.stats.unusable += 1
            log.warning("scrape %s: spec-decode counts cannot be derived (no generation "
                        "tokens counter); interval dropped", self.target.display_name)
            self._interval = Interval(start=now)
            return None
        clamped = False
        if counts is not None and counts.accepted > counts.drafted:
            if self._defers < MAX_DEFERS:
                self._defers += 1
                self.stats.deferred += 1
                return None
            counts, clamped = counts.clamped(), True
            self.stats.clamped += 1
            log.warning("scrape %s: accepted > drafted tokens over %d intervals; clamped",
                        self.target.display_name, self._defers + 1)
        if counts is not None and counts.per_position_problem:
            self.stats.per_position_dropped += 1
        self._defers = 0
        event = build_event(self.target, interval, counts, now=now, end=slot * period,
                            clamped=clamped)
        self._last_slot = slot
        self._interval = Interval(start=now)
        self.stats.events += 1
        return event

    # -- saved state ------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "tracker": self._tracker.to_json(),
            "interval": None if self._interval is None else self._interval.to_json(),
            "last_slot": self._last_slot,
            "defers": self._defers,
        }

    def restore(self, data: dict[str, Any]) -> None:
        self._tracker = CounterTracker.from_json(data["tracker"])
        interval = data.get("interval")
        self._interval = None if interval is None else Interval.from_json(interval)
        self._last_slot = data.get("last_slot")
        self._defers = int(data.get("defers", 0))


class ScrapeSource:
    """Scrapers for every configured target, a schedule, and a sink.

    ``scrape_once()`` scrapes every target now and delivers (``specwatch scrape --once`` and
    tests); ``run(stop)`` scrapes each target once per grid slot of its interval until
    ``stop`` is set. ``clock`` and ``wait`` are injectable so a test drives time itself.
    """

    def __init__(
        self,
        config: ScrapeConfig,
        sink: EventSink,
        *,
        client: httpx.Client | None = None,
        clock: Callable[[], float] = time.time,
        state_path: str | Path | None = None,
    ) -> None:
        self.config = config
        self.sink = sink
        self._own_client = client is None
        self._client = client or httpx.Client(timeout=config.timeout)
        self._clock = clock
        self.scrapers = [EngineScraper(t, client=self._client, clock=clock)
                         for t in config.targets]
        path = state_path if state_path is not None else config.state_path
        self.state_path = Path(path) if path else None
        self._outbox: list[dict[str, Any]] = []
        self.delivered = 0
        self.delivery_failures = 0
        if self.state_path is not None:
            self._load_state()

    def scrape_once(self) -> list[dict[str, Any]]:
        """Scrape every target now; returns the events this scrape produced (sent, or kept
        for the next attempt when the sink failed)."""
        return self._cycle(self.scrapers, self._clock())

    def run(self, stop: threading.Event,
            wait: Callable[[float], object] | None = None) -> None:
        """Scrape on schedule until ``stop`` is set. ``wait(seconds)`` defaults to
        ``stop.wait``."""
        wait = wait or stop.wait
        while not stop.is_set():
            now = self._clock()
            due = [s for s in self.scrapers if s.due(now)]
            if due:
                self._cycle(due, now)
            elif self._outbox:
                self._deliver()
            if stop.is_set() or not self.scrapers:
                break
            now = self._clock()
            wake = min(s.next_due(now) for s in self.scrapers)
            wait(max(0.0, wake - now))

    @property
    def pending(self) -> int:
        """Events produced but not yet confirmed by the sink."""
        return len(self._outbox)

    def _cycle(self, scrapers: Sequence[EngineScraper], now: float) -> list[dict[str, Any]]:
        pages = self._fetch_all({s.target.url for s in scrapers})
        events: list[dict[str, Any]] = []
        for scraper in scrapers:
            page = pages[scraper.target.url]
            if isinstance(page, ScrapeError):
                scraper.failed(str(page), now)
                continue
            event = scraper.observe(page[0], now, openmetrics=page[1])
            if event is not None:
                events.append(event)
        self._outbox.extend(events)
        if len(self._outbox) > OUTBOX_LIMIT:
            dropped = len(self._outbox) - OUTBOX_LIMIT
            del self._outbox[:dropped]
            log.error("scrape: sink down too long; dropped the %d oldest unsent events", dropped)
        # Write-ahead: the baselines just advanced are saved with the events they produced,
        # before anything is sent; a crash from here on re-sends these same events.
        self._save_state()
        self._deliver()
        return events

    def _fetch_all(self, urls: Iterable[str]) -> dict[str, tuple[str, bool] | ScrapeError]:
        urls = sorted(urls)

        def one(url: str) -> tuple[str, bool] | ScrapeError:
            try:
                return fetch(self._client, url)
            except ScrapeError as e:
                return e

        if len(urls) <= 1:
            return {url: one(url) for url in urls}
        # Concurrently: one engine that hangs until the timeout must not delay the others.
        with ThreadPoolExecutor(max_workers=min(8, len(urls))) as pool:
            return dict(zip(urls, pool.map(one, urls), strict=True))

    def _deliver(self) -> None:
        if not self._outbox:
            return
        try:
            self.sink.write(self._outbox)
            self.sink.flush()
        except Exception as e:  # kept for the next cycle; ids make a partial send harmless
            self.delivery_failures += 1
            log.error("scrape: sending %d event(s) failed, kept for the next attempt: %s",
                      len(self._outbox), e)
            return
        self.delivered += len(self._outbox)
        self._outbox = []
        self._save_state()

    def close(self) -> None:
        try:
            self._deliver()
        finally:
            self.sink.close()
            if self._own_client:
                self._client.close()

    # -- saved state ------------------------------------------------------------------------

    def _save_state(self) -> None:
        if self.state_path is None:
            return
        data = {
            "version": STATE_VERSION,
            "targets": {s.target.key: s.to_json() for s in self.scrapers},
            "outbox": self._outbox,
        }
        tmp = self.state_path.with_name(self.state_path.name + ".tmp")
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.state_path)

    def _load_state(self) -> None:
        assert self.state_path is not None
        try:
            text = self.state_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return
        try:
            data = json.loads(text)
            if data.get("version") != STATE_VERSION:
                raise ValueError(f"state version {data.get('version')!r}, "
                                 f"want {STATE_VERSION}")
            by_key = {s.target.key: s for s in self.scrapers}
            for key, saved in data["targets"].items():
                if key in by_key:  # a target no longer configured is forgotten
                    by_key[key].restore(saved)
            self._outbox = list(data["outbox"])
        except (ValueError, KeyError, TypeError) as e:
            # Starting over costs one baseline-only scrape; refusing to start costs all.
            log.error("scrape: ignoring unreadable state file %s (%s); starting with "
                      "fresh baselines", self.state_path, e)
            self.scrapers = [EngineScraper(s.target, client=self._client, clock=self._clock)
                             for s in self.scrapers]
            self._outbox = []


class ScrapeCollector(Collector):
    """The scrapers' statistics as Prometheus counters, labelled by target name.

    >>> from prometheus_client import CollectorRegistry
    >>> t = ScrapeTarget(url="http://e:8000/metrics", engine="vllm", route="code",
    ...                  target_model="m", target_revision="1", target_tokenizer="t",
    ...                  num_speculative_tokens=4)
    >>> s = EngineScraper(t)
    >>> s.failed("timed out", 0.0)
    >>> registry = CollectorRegistry()
    >>> registry.register(ScrapeCollector([s]))
    >>> registry.get_sample_value("specwatch_scrape_failures_total",
    ...                           {"target": "code@e:8000"})
    1.0
    """

    _HELP = {
        "scrapes": "Successful scrapes of an engine's metrics endpoint.",
        "failures": "Scrapes that failed (no answer, HTTP error, unparseable); no event.",
        "events": "Telemetry events produced, one per active interval.",
        "idle": "Intervals without engine activity (no event).",
        "resets": "Scrapes in which a counter was reset or the engine process restarted.",
        "deferred": "Intervals held back because accepted exceeded drafted tokens.",
        "clamped": "Events whose accepted tokens were clamped to drafted tokens.",
        "nonfinite": "NaN or infinite counter samples skipped.",
        "unmatched": "Scrapes in which no series of the engine matched the target's labels.",
        "per_position_dropped": "Events sent without per-position counts that did not fit.",
        "unusable": "Intervals dropped because spec-decode counts could not be derived.",
    }

    def __init__(self, scrapers: Sequence[EngineScraper]) -> None:
        self._scrapers = list(scrapers)

    def collect(self) -> Iterator[CounterMetricFamily]:
        stats = [(s.target.display_name, asdict(s.stats)) for s in self._scrapers]
        for field_name, help_text in self._HELP.items():
            name = "specwatch_scrapes" if field_name == "scrapes" else (
                "specwatch_scrape_" + field_name)
            family = CounterMetricFamily(name, help_text, labels=["target"])
            for target, values in stats:
                family.add_metric([target], float(values[field_name]))
            yield family
