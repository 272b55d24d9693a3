"""Event routing: every counted event finds (or creates) its route and its segment.

A new revision, tokenizer or draft length is a new segment with a baseline of its own, and
a change on its route: its live comparison with the setup it replaced
(:mod:`monitor.detect.lineage`) is what judges it until its own baseline takes over. Events
of routes over the cardinality cap are skipped (mixed: nothing to judge), and pairs over a
route's cap feed only the route's own rules. This is the per-event path: keep it lean
(``bench/ingest.py`` measures it).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from typing import Any

from monitor import heap
from monitor.aggregate.guard import OVERFLOW
from monitor.config import DetectionConfig
from monitor.detect import lineage
from monitor.detect.acceptance import AcceptanceDetector, make_detector
from monitor.detect.activity import ContentionMonitor, InactivityMonitor, StalenessMonitor
from monitor.detect.breakeven import BreakevenMonitor, CostModel, cutoff
from monitor.detect.evaluate import CHANGE, LOSSLESS, STEP, TICK, Evaluator
from monitor.detect.lossless import LosslessBook, LosslessMonitor, greedy
from monitor.detect.metadata import MetadataRules
from monitor.detect.ownership import DetectionState
from monitor.detect.positions import PositionCurve
from monitor.detect.segments import Route, Segment, key_id, temperature_bucket
from monitor.detect.throughput import ThroughputMonitor
from monitor.telemetry.event import Event

__all__ = ["TICK_EVERY", "Router"]

TICK_EVERY = 60.0  # event-time seconds between staleness and idle-pair sweeps
SEGMENT_ID_CACHE = 65536
BATCH_MIN = 32  # a message's events judged a segment at a time from this many on


class Router:
    """Feeds events to the detectors of their route and segment, creating them as needed.

    ``tick`` is called with the event time when, in event-clock mode, a minute of event time
    has passed since the last sweep.
    """

    def __init__(self, config: DetectionConfig, state: DetectionState, evaluator: Evaluator,
                 tick: Callable[[float], None]) -> None:
        self.config = config
        self.state = state
        self.evaluator = evaluator
        self.tick = tick
        # per route, greedy outputs with and without speculation (rule output_mismatch)
        self.lossless = LosslessBook(self.new_lossless)
        # raw event fields -> segment id: hashing a key once per segment, not per event
        self._segment_ids: dict[tuple[Any, ...], str] = {}
        # messages of this many events on feed each segment's requests at once
        self.batch_min = BATCH_MIN

    def observe(self, partition: int, events: list[Event]) -> None:
        """Feed one message's counted events, in order.

        A message of at least ``batch_min`` events defers each segment's rules and each
        route's and feeds them a segment (:meth:`Evaluator.segment_rules_many`) and a route
        (:meth:`Evaluator.route_rules_many`) at a time; what reads across them (a new or
        returning setup, the minute sweep) first flushes what is deferred, and the records
        are put back in event order: the same records and state as one event at a time.
        """
        st = self.state
        routes, segments, ids = st.routes, st.segments, self._segment_ids
        edges = self.config.temperature_edges
        dirty = st.dirty
        ev = self.evaluator
        route_rules, segment_rules = ev.route_rules, ev.segment_rules
        lossless = self.lossless
        return_after = self.config.change_return_after
        # seg_id -> (segment, keys, events) of the batch, judged at the next flush
        deferred: dict[str, tuple[Segment, list[int], list[Event]]] | None = None
        # route name -> (route, keys, events) likewise
        by_route: dict[str, tuple[Route, list[int], list[Event]]] = {}
        if len(events) >= self.batch_min:
            deferred = {}
            ev.begin_batch()
        try:
            for i, e in enumerate(events):
                key = i * STEP
                if deferred is not None:
                    ev.key = key
                name = e.route
                if name == OVERFLOW:
                    continue  # routes over the cardinality cap, mixed: nothing to judge
                if e.tags is not None and e.is_shadow:
                    # A shadow twin (``specwatch proxy --shadow-upstream``) ran only to check
                    # losslessness: it is no request of the route's, and no setup of it.
                    if e.prompt_hash is not None and greedy(e) and e.target_model != OVERFLOW:
                        ev.key = key + LOSSLESS
                        ev.lossless(lossless.monitor(name), e)
                    continue
                route = routes.get(name)
                if route is None:
                    route = st.take_over(name) or self.new_route(name)
                if route.partition != partition:
                    st.moved(route, partition)
                route.partition = partition
                if deferred is None:
                    dirty.add("route:" + name)
                    route_rules(route, e)
                else:
                    pending = by_route.get(name)
                    if pending is None:
                        # once per route and flush: nothing clears ``dirty`` inside a message
                        dirty.add("route:" + name)
                        by_route[name] = (route, [key], [e])
                    else:
                        pending[1].append(key)
                        pending[2].append(e)
                if e.target_model == OVERFLOW:
                    # Pairs over the route's cap share one series: a change there may only
                    # be a change in the mix. The route's own rules above still see every
                    # request.
                    if deferred is not None and self._ticks(e.ts):
                        self._flush_for_sweep(deferred, by_route, e.ts)
                    ev.key = key + TICK
                    self.advance(e.ts)
                    continue
                if e.prompt_hash is not None and greedy(e):
                    # after the overflow check: an overflowed pair mixes revisions and reads
                    # as unspeculated (draft length 0), two ways to a false mismatch
                    ev.key = key + LOSSLESS
                    ev.lossless(lossless.monitor(name), e)
                t = e.temperature
                parts = (name, e.target_model, e.target_revision, e.target_tokenizer,
                         e.draft_model, e.draft_revision, e.draft_tokenizer, e.method,
                         e.num_speculative_tokens, t)
                seg_id = ids.get(parts)
                if seg_id is None:
                    if len(ids) >= SEGMENT_ID_CACHE:
                        ids.clear()  # a cache: raw temperatures may take many values
                    seg_id = ids[heap.interned(parts)] = segment_id(
                        e, temperature_bucket(t, edges))
                segment = segments.get(seg_id)
                ts = e.ts
                if segment is None:
                    if deferred is not None:
                        # A change reads its predecessor's state. Of the route, lineage
                        # reads only its name and segments, which route rules leave be; the
                        # routes are flushed too, so no change sees a route behind its events.
                        self._flush(deferred, by_route)
                    ev.key = key + CHANGE
                    segment = self.new_segment(route, seg_id, e)
                elif ts - segment.last_ts >= return_after:
                    if deferred is not None:
                        self._flush(deferred, by_route)
                    ev.key = key + CHANGE
                    self.came_back(route, seg_id, segment, e)
                if ts > segment.last_ts:
                    segment.last_ts = ts
                if deferred is None:
                    dirty.add("segment:" + seg_id)
                    segment_rules(segment, e)
                else:
                    waiting = deferred.get(seg_id)
                    if waiting is None:
                        dirty.add("segment:" + seg_id)
                        deferred[seg_id] = (segment, [key], [e])
                    else:
                        waiting[1].append(key)
                        waiting[2].append(e)
                if ts > st.max_ts:  # advance(), inline: nearly every event moves the clock
                    st.max_ts = ts
                    if st.clock == "event" and ts - st.last_tick >= TICK_EVERY:
                        if deferred is not None:
                            self._flush_for_sweep(deferred, by_route, ts)
                        ev.key = key + TICK
                        self.tick(ts)
            if deferred is not None:
                self._flush(deferred, by_route)
        finally:
            if deferred is not None:
                ev.end_batch()

    def _ticks(self, ts: float) -> bool:
        """Whether :meth:`advance` to ``ts`` sweeps."""
        st = self.state
        return ts > st.max_ts and st.clock == "event" and ts - st.last_tick >= TICK_EVERY

    def _flush(self, deferred: dict[str, tuple[Segment, list[int], list[Event]]],
               by_route: dict[str, tuple[Route, list[int], list[Event]]]) -> None:
        # Routes and segments read nothing of each other's detectors: either order gives
        # the same state, and the records' keys give their order.
        routes = self.evaluator.route_rules_many
        for route, keys, events in by_route.values():
            routes(route, keys, events)
        by_route.clear()
        many = self.evaluator.segment_rules_many
        for segment, keys, events in deferred.values():
            many(segment, keys, events)
        deferred.clear()

    def _flush_for_sweep(self, deferred: dict[str, tuple[Segment, list[int], list[Event]]],
                         by_route: dict[str, tuple[Route, list[int], list[Event]]],
                         now: float) -> None:
        """Flush what the sweep at ``now`` reads (``Detection.tick``): every route (its
        staleness), and the segments idle for ``idle_pair_resolve`` (their alerts).

        The other segments stay deferred: the sweep reads only their ``last_ts``, kept
        up to date here event by event. On slow traffic (a few requests a second) a minute
        holds a handful of each segment's requests; judged a minute at a time, each would
        go request by request, where across minutes they are judged as arrays.
        """
        routes = self.evaluator.route_rules_many
        for route, keys, events in by_route.values():
            routes(route, keys, events)
        by_route.clear()
        idle = self.config.idle_pair_resolve
        idle_ids = [seg_id for seg_id, (seg, _, _) in deferred.items()
                    if now - seg.last_ts >= idle]
        many = self.evaluator.segment_rules_many
        for seg_id in idle_ids:
            many(*deferred.pop(seg_id))

    def advance(self, ts: float) -> None:
        """Move the detection clock to ``ts``; sweep every minute of it in event mode."""
        st = self.state
        if ts > st.max_ts:
            st.max_ts = ts
            if st.clock == "event" and ts - st.last_tick >= TICK_EVERY:
                self.tick(ts)

    # -- creation ----------------------------------------------------------------------------

    def new_route(self, name: str) -> Route:
        cfg = self.config
        route = Route(
            name=name,
            metadata=MetadataRules(),
            staleness=StalenessMonitor(silence=cfg.stale_after),
            inactivity=InactivityMonitor(window=cfg.inactive_window,
                                          min_requests=cfg.inactive_min_requests),
            contention=ContentionMonitor(threshold=cfg.contention_share),
        )
        self.state.routes[name] = route
        return route

    def new_segment(self, route: Route, seg_id: str, e: Event) -> Segment:
        tbucket = temperature_bucket(e.temperature, self.config.temperature_edges)
        labels = {
            "route": e.route, "target_model": e.target_model,
            "target_revision": e.target_revision, "draft_model": e.draft_model or "",
            "draft_revision": e.draft_revision or "",
            "num_speculative_tokens": str(e.num_speculative_tokens),
        }
        if e.method:
            labels["method"] = e.method
        if tbucket:
            labels["temperature"] = tbucket
        # one copy of each name for all segments, not the strings of each one's first event
        labels = dict(zip(labels, heap.interned(tuple(labels.values())), strict=True))
        # one dict per distinct setup: a model pair's is the same on every route serving it
        setup = heap.shared(lineage.setup_of(e))
        cfg = self.config
        cost = self._cost_model(e)
        cut = cutoff(cost) if cost is not None else cfg.breakeven_cutoff
        seg = Segment(
            labels=labels,
            acceptance=self.new_acceptance(),
            breakeven=BreakevenMonitor(cutoff=cut, window=cfg.breakeven_window),
            positions=PositionCurve(cost_model=cost),
            throughput=self.new_throughput(),
            setup=setup,
        )
        self.state.segments[seg_id] = seg
        route.segments.append(seg_id)
        self._change(route, seg_id, seg, e)
        return seg

    def came_back(self, route: Route, seg_id: str, seg: Segment, e: Event) -> None:
        """A setup the route had left serves again (a rollback): a change, if another setup
        served meanwhile. Never a first event: that is :meth:`new_segment`."""
        if seg.last_ts > 0.0:
            self._change(route, seg_id, seg, e)

    def _change(self, route: Route, seg_id: str, seg: Segment, e: Event) -> None:
        found = lineage.predecessor(route, self.state.segments, seg_id, seg.temperature, e.ts,
                                    self.config.change_return_after)
        if found is None:
            return  # the route's first setup, or it comes back to a silent route
        if seg.versus is not None and seg.versus.holds:
            self.evaluator.released(seg, e.ts, "the route changed setup again")
        seg.versus = lineage.start(route, seg_id, seg, *found, e, self.config)
        self.evaluator.change(seg.versus.record)

    def _cost_model(self, e: Event) -> CostModel | None:
        for cm in self.config.cost_models:
            if fnmatch.fnmatchcase(e.target_model, cm.target_model) and fnmatch.fnmatchcase(
                e.draft_model or e.method or "", cm.draft_model
            ):
                return CostModel(cm.c, cm.v)
        return None

    def new_lossless(self) -> LosslessMonitor:
        cfg = self.config
        return LosslessMonitor(horizon=cfg.lossless_horizon,
                               max_prompts=cfg.lossless_max_prompts,
                               resolve_pairs=cfg.lossless_resolve_pairs)

    def new_acceptance(self) -> AcceptanceDetector:
        cfg = self.config
        return make_detector(
            cfg.detector,
            **({"min_effect": cfg.min_effect, "false_alarm_days": cfg.false_alarm_days}
               if cfg.detector == "cusum" else {}),
        )

    def new_throughput(self) -> ThroughputMonitor:
        return ThroughputMonitor(min_effect=self.config.throughput_min_effect)


def segment_id(e: Event, tbucket: str) -> str:
    """The stored id of the event's segment."""
    return key_id((e.route, e.target_model, e.target_revision, e.target_tokenizer,
                   e.draft_model or "", e.draft_revision or "", e.draft_tokenizer or "",
                   e.method or "", e.num_speculative_tokens, tbucket))
