"""Detection state and its ownership: what is loaded, judged here, set aside, and stored.

**In a consumer group** (several daemons, one source, traffic keyed by route) a route is
judged by the one process that reads its partition (``Route.partition`` in ``owned``): only
that process feeds, sweeps, resets and writes it. :meth:`DetectionState.load` therefore keeps
the routes of other partitions aside, out of the views, the sweeps and the recommendations,
and :meth:`DetectionState.take_over` brings one in only when its events show up on a
partition read here (the topic was repartitioned, or the producer does not key by route: a
warning, since two processes may then write one route). Nothing of the shared engine key is
read in a consumer group: the detection clock is the newest event of the routes judged here,
and in ``wall`` mode the last sweep is this process's own.
"""

from __future__ import annotations

import logging
from typing import Any

from monitor.detect.deferred import DeferredStates
from monitor.detect.segments import Route, Segment, key_id
from monitor.versioned import require_version

__all__ = ["ENGINE_KEY", "ROUTE_PREFIX", "SEGMENT_PREFIX", "DetectionState"]

log = logging.getLogger("monitor.detect.engine")

ENGINE_KEY = "detect/engine"
ROUTE_PREFIX = "detect/route/"
SEGMENT_PREFIX = "detect/segment/"


def _ts_or_never(value: float | None) -> float:
    return float("-inf") if value is None else float(value)


def _or_none(ts: float) -> float | None:
    return None if ts == float("-inf") else ts


class DetectionState:
    """Routes and segments judged here and aside, what changed since the last snapshot, and
    the detection clock (``max_ts``: newest event judged; ``last_tick``: last sweep)."""

    def __init__(self, clock: str) -> None:
        self.clock = clock
        self.routes: dict[str, Route] = {}
        self.segments: dict[str, Segment] = {}
        # Stored routes (and their segments) of partitions another process reads: never
        # judged nor shown here, only taken over if their events arrive here.
        self.aside_routes: dict[str, Route] = {}
        self.aside_segments: dict[str, Segment] = {}
        self.moved_warned: set[str] = set()
        self.dirty: set[str] = set()
        self.max_ts = float("-inf")
        self.last_tick = float("-inf")
        # Partitions whose routes this process judges for silence (None: every route).
        self.owned: set[int] | None = None

    def load(self, states: dict[str, Any]) -> None:
        """Restore what a previous run stored (all keys of this source): the routes of
        ``owned`` partitions to judge, the others aside (set ``owned`` first)."""
        self.clear()
        engine = states.get(ENGINE_KEY)
        if engine is not None:
            require_version(engine, "engine", 1)
        segments: dict[str, Segment] = {}
        for key, data in states.items():
            if key.startswith(ROUTE_PREFIX):
                route = Route.restore(data)
                mine = self.judged_here(route)
                (self.routes if mine else self.aside_routes)[route.name] = route
            elif key.startswith(SEGMENT_PREFIX):
                segments[key[len(SEGMENT_PREFIX):]] = Segment.restore(data)
        for seg_id, seg in segments.items():
            aside = seg.labels["route"] in self.aside_routes
            (self.aside_segments if aside else self.segments)[seg_id] = seg
        if self.owned is None and engine is not None:
            self.max_ts = _ts_or_never(engine["max_ts"])
        else:
            # One clock per process: the newest event it judged, never a peer's.
            self.max_ts = max((s.last_ts for s in self.segments.values()),
                              default=float("-inf"))
        if self.clock == "event" and engine is not None:
            # Event-time sweeps resume on their minute grid; a wall-clock sweep is this
            # process's own (the engine key is shared by every process of the source).
            self.last_tick = _ts_or_never(engine["last_tick"])

    def clear(self) -> None:
        # in place: the engine's read-only views hold these very dicts
        self.routes.clear()
        self.segments.clear()
        self.aside_routes.clear()
        self.aside_segments.clear()
        self.moved_warned.clear()
        self.dirty.clear()
        self.max_ts = self.last_tick = float("-inf")

    def snapshot(self) -> DeferredStates:
        """Snapshots of what changed since the last call, keyed for the state table; each
        is built when read (see :class:`~monitor.detect.deferred.DeferredStates`)."""
        out = DeferredStates()
        for key in self.dirty:
            kind, _, name = key.partition(":")
            if kind == "route" and name in self.routes:
                out.defer(ROUTE_PREFIX + key_id([name]), self.routes[name].snapshot)
            elif kind == "segment" and name in self.segments:
                out.defer(SEGMENT_PREFIX + name, self.segments[name].snapshot)
        if self.dirty and self.clock == "event":
            # Only event-time runs read it back (a replay is one process); live, every
            # daemon of a consumer group would write this one row at every checkpoint.
            out[ENGINE_KEY] = {"kind": "engine", "version": 1,
                               "max_ts": _or_none(self.max_ts),
                               "last_tick": _or_none(self.last_tick)}
        self.dirty.clear()
        return out

    def judged_here(self, route: Route) -> bool:
        return (self.owned is None or route.partition is None
                or route.partition in self.owned)

    def owns_route(self, route_name: str) -> bool:
        """Whether this process judges ``route_name`` (a route it has never seen is its own
        until a peer's state says otherwise)."""
        if route_name in self.aside_routes:
            return False
        route = self.routes.get(route_name)
        return route is None or self.judged_here(route)

    def take_over(self, name: str) -> Route | None:
        """A route stored as another partition's, whose events now arrive here: it goes on
        from its stored state rather than from scratch."""
        route = self.aside_routes.pop(name, None)
        if route is None:
            return None
        for seg_id in route.segments:
            seg = self.aside_segments.pop(seg_id, None)
            if seg is not None:
                self.segments[seg_id] = seg
                if seg.last_ts > self.max_ts:
                    self.max_ts = seg.last_ts
        self.routes[name] = route
        return route

    def moved(self, route: Route, partition: int) -> None:
        if route.partition is not None and route.name not in self.moved_warned:
            self.moved_warned.add(route.name)
            log.warning(
                "route %s: events on partition %d, stored as partition %d's. Traffic must be "
                "keyed by route, and a topic repartitioned only once drained: until then two "
                "consumers may judge (and write) this route", route.name, partition,
                route.partition)
