"""Where a decision is made: every counted event meets its route's and segment's detectors.

:class:`Detection` is the pipeline's observer, a facade over four parts, each in its module:

- state and ownership (:mod:`monitor.detect.ownership`): load and snapshot, which routes a
  process of a consumer group judges, taking a route over;
- event routing (:mod:`monitor.detect.routing`): an event finds or creates its route and
  segment (:mod:`monitor.detect.segments`) and feeds their detectors;
- rule evaluation and alert text (:mod:`monitor.detect.evaluate`, with the rule catalogue
  ``monitor/rules.py``): detector flips become alert records stamped with the event time of
  the deciding event;
- recommendations (:mod:`monitor.detect.recommend`).

Records and dirty state snapshots leave through :meth:`Detection.drain` and
:meth:`Detection.snapshot`, which the pipeline writes in the checkpoint transaction together
with the rollups and offsets, so a restart resumes with exactly the state the stored offsets
imply. The exposition, the API and the report read :meth:`Detection.view`.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from monitor.alert_record import AlertRecord
from monitor.change_record import ChangeRecord
from monitor.config import DetectionConfig
from monitor.detect.deferred import DeferredStates
from monitor.detect.evaluate import Evaluator
from monitor.detect.ownership import ENGINE_KEY, ROUTE_PREFIX, SEGMENT_PREFIX, DetectionState
from monitor.detect.recommend import recommendations
from monitor.detect.routing import TICK_EVERY, Router
from monitor.detect.segments import Route, Segment, key_id, temperature_bucket
from monitor.detect.view import JudgedView
from monitor.telemetry.event import Event

__all__ = ["ENGINE_KEY", "ROUTE_PREFIX", "SEGMENT_PREFIX", "TICK_EVERY", "Detection", "Route",
           "Segment", "key_id", "temperature_bucket"]


class Detection:
    """The pipeline's observer: routes events to detectors and turns flips into alerts.

    ``clock`` is ``"event"`` for replay (silence is measured in event time, swept every
    minute of it) or ``"wall"`` for the live daemon (the app calls :meth:`tick` with the
    wall clock).
    """

    def __init__(self, config: DetectionConfig, *, clock: str = "event") -> None:
        if clock not in ("event", "wall"):
            raise ValueError("clock must be 'event' or 'wall'")
        self.config = config
        self.clock = clock
        self._state = DetectionState(clock)
        self._evaluator = Evaluator()
        self._router = Router(config, self._state, self._evaluator, self.tick)
        # The routes and segments judged here (the state's own dicts, cleared in place).
        self._routes = self._state.routes
        self._segments = self._state.segments
        self._lossless = self._router.lossless
        self._view = JudgedView(MappingProxyType(self._routes),
                                MappingProxyType(self._segments),
                                MappingProxyType(self._lossless.judged))
        self.loaded = False

    @property
    def owned(self) -> set[int] | None:
        """Partitions whose routes this process judges (None: every route). Set it before
        :meth:`load`."""
        return self._state.owned

    @owned.setter
    def owned(self, value: set[int] | None) -> None:
        self._state.owned = value

    # -- state ---------------------------------------------------------------------------------

    def load(self, states: dict[str, Any]) -> None:
        """Restore what a previous run stored (all keys of this source): the routes of
        ``owned`` partitions to judge, the others aside (set ``owned`` first)."""
        self._evaluator.alerts.clear()
        self._evaluator.changes.clear()
        self._state.load(states)
        self._lossless.load(states, self._state.owns_route)
        self.loaded = True

    def snapshot(self) -> DeferredStates:
        """Snapshots of what changed since the last call, keyed for the state table; a
        segment's is built when the store reads it (``DeferredStates``)."""
        out = self._state.snapshot()
        out.update(self._lossless.snapshot())
        return out

    @property
    def now(self) -> float:
        """The detection clock: the newest event time, or the last wall-clock sweep when
        later (live). The alert lifecycle times its holds and group waits against it."""
        return max(self._state.max_ts, self._state.last_tick)

    @property
    def pending(self) -> bool:
        """Alerts or state changes not yet handed to a checkpoint."""
        ev = self._evaluator
        return bool(ev.alerts or ev.changes or self._state.dirty or self._lossless.dirty)

    def drain(self) -> list[AlertRecord]:
        """Alert state changes decided since the last call, in decision order."""
        out, self._evaluator.alerts = self._evaluator.alerts, []
        return out

    def drain_changes(self) -> list[ChangeRecord]:
        """Changes on routes created or updated since the last call, each once (its latest
        state), in the order first touched."""
        changes, self._evaluator.changes = self._evaluator.changes, []
        return list({c.change_id: c for c in changes}.values())

    def drop_all(self) -> None:
        """Forget everything in memory (after a fenced checkpoint); reload before use."""
        self._state.clear()
        self._lossless.clear()
        self._evaluator.alerts.clear()
        self._evaluator.changes.clear()
        self.loaded = False

    def owns_route(self, route_name: str) -> bool:
        """Whether this process judges ``route_name``: its events arrive on a partition it
        owns (a route it has never seen is its own until a peer's state says otherwise)."""
        return self._state.owns_route(route_name)

    def view(self) -> JudgedView:
        """Read-only routes and segments judged here (read on the thread that feeds this)."""
        return self._view

    # -- feeding -------------------------------------------------------------------------------

    def observe(self, partition: int, events: list[Event]) -> None:
        """Feed one message's counted events, in order."""
        self._router.observe(partition, events)

    def tick(self, now: float) -> None:
        """Sweep for silence and for pairs a route has left behind."""
        st, ev = self._state, self._evaluator
        st.last_tick = now
        idle = self.config.idle_pair_resolve
        owned = st.owned
        for route in st.routes.values():
            if owned is not None and route.partition not in owned:
                continue  # another consumer reads this route: silence here means nothing
            if ev.staleness(route, now):
                st.dirty.add("route:" + route.name)
            for seg_id in route.segments:
                seg = st.segments.get(seg_id)
                if seg is not None and seg.firing and now - seg.last_ts >= idle:
                    ev.idle_pair(route, seg, now)
                    st.dirty.add("segment:" + seg_id)
        lossless = self._lossless
        for name, monitor in lossless.judged.items():
            if monitor.firing and ev.lossless_tick(monitor, now):
                lossless.dirty.add(name)

    def accept_baseline(self, route_name: str, now: float) -> bool:
        """An operator acknowledged a change on ``route_name``: every segment of the route
        starts a fresh acceptance and throughput baseline, and the alerts that compared
        against the old one resolve at once. ``False`` when the route is unknown here or
        judged by another process."""
        st = self._state
        route = st.routes.get(route_name)
        if route is None or (st.owned is not None and route.partition not in st.owned):
            return False
        ts = max(now, st.max_ts) if now != float("-inf") else st.max_ts
        for seg_id in route.segments:
            seg = st.segments.get(seg_id)
            if seg is None:
                continue
            old = seg.acceptance
            seg.acceptance = self._router.new_acceptance()
            seg.throughput = self._router.new_throughput()
            self._evaluator.baseline_accepted(seg, old.baseline, ts)
            st.dirty.add("segment:" + seg_id)
        st.dirty.add("route:" + route_name)
        return True

    # -- reporting -------------------------------------------------------------------------------

    def recommendations(self) -> list[dict[str, Any]]:
        """Per segment: keep speculation on, turn it off, or not enough data, with evidence."""
        return recommendations(self._segments.values())
