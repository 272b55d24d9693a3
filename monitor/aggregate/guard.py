"""The cardinality guard: caps how many series the pipeline keeps, so memory stays bounded.

Every string of a series key comes from producers (``route`` is "any Unicode"), so a bug or
an attacker minting a fresh revision per request would otherwise grow the pending rollups,
the detectors, the exposition and the ``series`` table without limit. The guard sits right
after parsing (``Pipeline(..., guard=...)``) and rewrites events of series over the caps into
overflow series, counted and reported:

- **per route** (``ingest.max_series_per_route``): a new model pair (target and draft model,
  revision, tokenizer, method, draft length) of a route already holding that many series
  keeps its route, but its pair fields become :data:`OVERFLOW` and its draft length 0 (the
  key :func:`route_overflow_key`). The route's totals stay exact; only the split by pair is
  lost for the excess pairs.
- **in total** (``ingest.max_series``): a new series once that many exist goes to its route's
  overflow series if the route is known, and a new route goes to the single series
  :data:`OVERFLOW_KEY` (route :data:`OVERFLOW`, every pair field :data:`OVERFLOW`).

Overflow events keep every counter (requests, tokens, latencies) and lose only their series
identity and ``pinned_target_revision`` (meaningless once the pair is gone). The name
``__overflow__`` is reserved: a producer that sends it is merged with the overflow.

Bounds: at most ``max_series`` series are admitted as themselves; each route may add one
overflow series and :data:`OVERFLOW_KEY` is one more, so the guard never tracks more than
``2 * max_series + 1`` series (in practice ``max_series`` plus the routes that overflowed).

Admission is deterministic across a crash: a decision depends only on the series committed
in the store when the guard (re)loaded, plus those it admitted since, in order.
:meth:`CardinalityGuard.drop_all` forgets everything and the next use reloads from the
store, so a stretch read again after ``kill -9`` or a fenced checkpoint meets exactly the
view the lost run had at its start, and the tables stay exact. The guard sees only events
that count (after deduplication, lateness and the future check): a duplicate or late event
of a new pair would otherwise hold a slot it never stores and push another route into
overflow until the checkpoint. After each checkpoint the series admitted in the stretch are
still checked against what was stored (the checkpoint's rollups when
:meth:`CardinalityGuard.committed` is given it, else the store) and any other forgotten, as
a restart would.

Limits: the caps count every series in the table (it keeps series whose rollups retention
deleted); with several consumers sharing a store, a series a peer committed since this
guard loaded counts only after a reload, so the total cap is approximate by what peers add
meanwhile (the per-route cap holds: a route's events all go to one partition).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import fields
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge

from monitor.aggregate.series import SeriesKey, series_fields
from monitor.telemetry.event import Event

if TYPE_CHECKING:
    from monitor.store.checkpoint import Checkpoint

__all__ = [
    "OVERFLOW",
    "OVERFLOW_KEY",
    "CardinalityGuard",
    "GuardMetrics",
    "SeriesSource",
    "is_overflow",
    "route_overflow_key",
    "shown",
]

log = logging.getLogger(__name__)

OVERFLOW = "__overflow__"
_PAIR: tuple[Any, ...] = (OVERFLOW,) * 7 + (0,)  # every key field after the route
OVERFLOW_KEY = SeriesKey(OVERFLOW, *_PAIR)
ROUTE_CAP, TOTAL_CAP = "route_cap", "total_cap"
SHOWN_CHARS = 64  # of a route name in a log line

# Overflow copies are built positionally: copy.copy of a slots dataclass costs ~4x more.
_FIELDS = tuple(f.name for f in fields(Event))
_ALL = attrgetter(*_FIELDS)
_KEY_AT = tuple(_FIELDS.index(name) for name in SeriesKey._fields)
_PINNED = _FIELDS.index("pinned_target_revision")


class SeriesSource(Protocol):
    """What the guard reads from the store (:meth:`monitor.store.store.Store.series_keys`)."""

    def series_keys(self, keys: Iterable[SeriesKey] | None = None) -> set[SeriesKey]: ...


def route_overflow_key(route: str) -> SeriesKey:
    """The series a route's pairs over the cap are counted in.

    >>> route_overflow_key("chat")[:3], route_overflow_key("chat").num_speculative_tokens
    (('chat', '__overflow__', '__overflow__'), 0)
    """
    return SeriesKey(route, *_PAIR)


def is_overflow(key: Iterable[Any]) -> bool:
    """Whether a series key (any 9-tuple in :class:`SeriesKey` order) is an overflow series:
    detection should leave these out, they mix model pairs (and, for :data:`OVERFLOW`, routes).

    >>> is_overflow(route_overflow_key("chat")), is_overflow(("chat", "t", "1", "tok", "", "",
    ...                                                        "", "", 0))
    (True, False)
    """
    return tuple(key)[1:] == _PAIR


def shown(route: str, limit: int = SHOWN_CHARS) -> str:
    """A route name safe for a log line: ``repr`` (control, bidi and line-separator characters
    come out as escapes, so no name can forge or reorder a line) of at most ``limit`` chars.

    >>> shown("a\\nfake: line\\u202e")
    "'a\\\\nfake: line\\\\u202e'"
    >>> shown("x" * 100, 4)
    "'xxxx'…(100 chars)"
    """
    if len(route) <= limit:
        return repr(route)
    return f"{route[:limit]!r}…({len(route)} chars)"


class GuardMetrics:
    """The guard's Prometheus metrics; no route label, so they are bounded whatever arrives.

    >>> m = GuardMetrics(CollectorRegistry(), max_series_per_route=8, max_series=100)
    >>> m.registry.get_sample_value("specwatch_series_limit", {"scope": "route"})
    8.0
    """

    def __init__(self, registry: CollectorRegistry, max_series_per_route: int,
                 max_series: int) -> None:
        self.registry = registry
        self.overflow_events = Counter(
            "specwatch_series_overflow_events",
            "Events rewritten into an overflow series by the cardinality guard (reason "
            "route_cap: their route had max_series_per_route series; total_cap: max_series "
            "series existed). Counted when read: a re-read after a restart counts again.",
            ["reason"], registry=registry,
        )
        for reason in (ROUTE_CAP, TOTAL_CAP):
            self.overflow_events.labels(reason)  # both exist from the start, at 0
        self.tracked = Gauge(
            "specwatch_series_tracked",
            "Series the cardinality guard knows: committed in the store plus admitted since.",
            registry=registry,
        )
        self.overflow_series = Gauge(
            "specwatch_series_overflow_series",
            "Overflow series among them (one per route that overflowed, plus the overflow "
            "route's).", registry=registry,
        )
        self.limit = Gauge(
            "specwatch_series_limit",
            "The cardinality guard's caps: scope route (max_series_per_route) and total "
            "(max_series).", ["scope"], registry=registry,
        )
        self.limit.labels("route").set(max_series_per_route)
        self.limit.labels("total").set(max_series)


class CardinalityGuard:
    """Admits events of known series as they are and rewrites the excess (the pipeline's
    :class:`~monitor.pipeline.EventGuard`).

    ``store`` gives the committed series; it is read lazily, on the first :meth:`admit`
    after construction or :meth:`drop_all`. ``log_interval``: at most one log line per that
    many seconds (``clock``), each naming one newly overflowing route and how many were
    not logged since.
    """

    def __init__(
        self,
        store: SeriesSource,
        max_series_per_route: int,
        max_series: int,
        registry: CollectorRegistry,
        *,
        log_interval: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_series_per_route < 1 or max_series < 1:
            raise ValueError("max_series_per_route and max_series must be >= 1")
        self.store = store
        self.max_series_per_route = max_series_per_route
        self.max_series = max_series
        self.metrics = GuardMetrics(registry, max_series_per_route, max_series)
        self.log_interval = log_interval
        self._clock = clock
        self._loaded = False
        # Key tuples in the pipeline's own field order: a SeriesKey equals (and hashes as)
        # the plain tuple, so keys read from the store and keys built per event match.
        self._known: set[tuple[Any, ...]] = set()
        self._regular: dict[str, int] = {}  # route -> series admitted as themselves
        self._series: dict[str, int] = {}  # route -> all its series (overflow included)
        self._overflows = 0
        self._new: list[tuple[Any, ...]] = []  # admitted since the last commit, in order
        # Logging only (never decisions): routes already reported, bounded like the routes.
        self._logged: set[str] = set()
        self._total_logged = False
        self._last_log = float("-inf")
        self._unlogged = 0

    @property
    def tracked(self) -> int:
        """Series known: committed plus admitted since the last commit."""
        return len(self._known)

    # -- the pipeline's hooks -----------------------------------------------------------------

    def admit(self, events: list[Event]) -> list[Event]:
        """``events`` with those over the caps rewritten (the same list when none is)."""
        return self.admit_keyed(events, list(map(series_fields, events)))[0]

    def admit_keyed(self, events: list[Event], keys: list[tuple[Any, ...]]
                    ) -> tuple[list[Event], list[tuple[Any, ...]]]:
        """:meth:`admit`, given each event's :func:`series_fields` (the pipeline builds them
        once for this and for its sums): the events and their fields, those over the caps
        rewritten (the same lists when none is)."""
        if not self._loaded:
            self.load()
        known = self._known
        if all(map(known.__contains__, keys)):  # nearly every batch: no Python loop
            return events, keys
        out: list[Event] | None = None
        out_keys: list[tuple[Any, ...]] = keys
        for i, key in enumerate(keys):
            if key in known:
                continue
            e = events[i]
            admitted = self._decide(e, key)
            if admitted is not e:
                if out is None:
                    out, out_keys = list(events), list(keys)
                out[i] = admitted
                out_keys[i] = series_fields(admitted)
        return (events, keys) if out is None else (out, out_keys)

    def committed(self, cp: Checkpoint | None = None) -> None:
        """The checkpoint ``cp`` is stored: keep the series admitted since the last one that
        reached the table, forget any that did not, as a restart would. Without ``cp`` the
        store is asked which of them it holds."""
        new, self._new = self._new, []
        if not new or not self._loaded:
            return
        if cp is not None:
            stored: set[Any] = {key for key, _start in cp.rollups}
        else:
            try:
                stored = self.store.series_keys(new)
            except Exception:
                # The checkpoint is stored either way: the next event reloads the exact view.
                log.warning("cardinality guard could not read back the committed series; "
                            "reloading them on the next event", exc_info=True)
                self.drop_all()
                return
        for key in new:
            if key not in stored:
                self._forget(key)
        self._publish()

    def drop_all(self) -> None:
        """Forget everything; the next :meth:`admit` reloads the committed series."""
        self._loaded = False
        self._known = set()
        self._regular.clear()
        self._series.clear()
        self._overflows = 0
        self._new = []

    # -- decisions ------------------------------------------------------------------------------

    def load(self) -> None:
        """Read the committed series from the store now (otherwise the first :meth:`admit`
        does): where store outages are handled, such as a partition assignment."""
        keys = self.store.series_keys()
        self.drop_all()
        for key in keys:
            self._add(tuple(key))
        self._loaded = True
        self._publish()
        log.info("cardinality guard: %d series committed (%d overflow), caps %d per route and "
                 "%d in total", len(self._known), self._overflows, self.max_series_per_route,
                 self.max_series)

    def _add(self, key: tuple[Any, ...]) -> None:
        route = key[0]
        self._known.add(key)
        self._series[route] = self._series.get(route, 0) + 1
        if key[1:] == _PAIR:
            self._overflows += 1
            self._regular.setdefault(route, 0)
        else:
            self._regular[route] = self._regular.get(route, 0) + 1

    def _forget(self, key: tuple[Any, ...]) -> None:
        self._known.discard(key)
        route = key[0]
        if key[1:] == _PAIR:
            self._overflows -= 1
        else:
            self._regular[route] -= 1
        left = self._series[route] - 1
        if left:
            self._series[route] = left
        else:  # the route itself was never stored: after a restart it would be new
            del self._series[route]
            del self._regular[route]

    def _decide(self, e: Event, key: tuple[Any, ...]) -> Event:
        """An event of a series not known yet: admit its series, or rewrite it."""
        route = key[0]
        regular = self._regular.get(route)
        full = len(self._known) >= self.max_series
        if regular is None and full:
            reason: str | None = TOTAL_CAP
            target: tuple[Any, ...] = OVERFLOW_KEY
        elif key[1:] == _PAIR:
            reason, target = None, key  # a producer sent the reserved values: it is the overflow
        elif regular is not None and regular >= self.max_series_per_route:
            reason, target = ROUTE_CAP, route_overflow_key(route)
        elif full:
            reason, target = TOTAL_CAP, route_overflow_key(route)
        else:
            self._add(key)
            self._new.append(key)
            self._publish()
            return e
        if target not in self._known:
            self._add(target)
            self._new.append(target)
            self._publish()
        if reason is None:
            return e
        self.metrics.overflow_events.labels(reason).inc()
        self._report(route, reason)
        values = list(_ALL(e))
        for i, value in zip(_KEY_AT, target, strict=True):
            values[i] = value
        values[_PINNED] = None
        return Event(*values)

    def _publish(self) -> None:
        self.metrics.tracked.set(len(self._known))
        self.metrics.overflow_series.set(self._overflows)

    def _report(self, route: str, reason: str) -> None:
        """A line the first time the total cap is hit, and a rate-limited one per route that
        starts overflowing its own cap."""
        if reason == TOTAL_CAP:
            if not self._total_logged:
                self._total_logged = True
                log.warning("cardinality guard: total series cap (%d) reached at route %s: new "
                            "series go to their route's overflow series, new routes to %r",
                            self.max_series, shown(route), OVERFLOW)
            return
        if route in self._logged:
            return
        self._logged.add(route)  # bounded: routes are (max_series of them, at most)
        now = self._clock()
        if now - self._last_log < self.log_interval:
            self._unlogged += 1
            return
        more = (f" ({self._unlogged} more routes reached it since the last line)"
                if self._unlogged else "")
        self._last_log, self._unlogged = now, 0
        log.warning("cardinality guard: route %s reached its series cap (%d): its new model "
                    "pairs go to its overflow series%s", shown(route),
                    self.max_series_per_route, more)
