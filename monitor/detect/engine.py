"""Where a decision is made: every counted event meets its route's and segment's detectors.

:class:`Detection` is the pipeline's observer. It keeps, per **route**, the rules that watch
the route as a whole (metadata consistency, staleness, silent loss of speculation, draft
evictions) and, per **segment** (a series key plus a sampling-temperature bucket: the unit
within which acceptance is comparable), the acceptance change-point detector, the break-even
monitor, the per-position curve and the throughput monitor. A new revision, tokenizer or
draft length is a new segment with a fresh baseline, never a "drop".

Each detector flip becomes an alert record (alerts v1) stamped with the event time of the
deciding event. Records and dirty state snapshots leave through :meth:`drain` and
:meth:`snapshot`, which the pipeline writes in the checkpoint transaction together with the
rollups and offsets, so a restart resumes with exactly the state the stored offsets imply.

**In a consumer group** (several daemons, one source, traffic keyed by route) a route is
judged by the one process that reads its partition (``Route.partition`` in ``owned``): only
that process feeds, sweeps, resets and writes it. :meth:`load` therefore keeps the routes
of other partitions aside, out of the views, the sweeps and :meth:`recommendations`, and
takes one over only when its events show up on a partition read here (the topic was
repartitioned, or the producer does not key by route: a warning, since two processes may
then write one route). Nothing of the shared engine key is read in a consumer group: the
detection clock is the newest event of the routes judged here, and in ``wall`` mode the
last sweep is this process's own.
"""

from __future__ import annotations

import fnmatch
import hashlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from alerts.record import AlertRecord, fingerprint
from monitor.aggregate.guard import OVERFLOW
from monitor.config import DetectionConfig
from monitor.detect.acceptance import AcceptanceDetector, make_detector, restore_detector
from monitor.detect.activity import ContentionMonitor, InactivityMonitor, StalenessMonitor
from monitor.detect.breakeven import BreakevenMonitor, CostModel, cutoff
from monitor.detect.metadata import MetadataRules
from monitor.detect.positions import PositionCurve
from monitor.detect.state import require_version
from monitor.detect.throughput import ThroughputMonitor
from monitor.telemetry.event import Event

log = logging.getLogger(__name__)

ENGINE_KEY = "detect/engine"
ROUTE_PREFIX = "detect/route/"
SEGMENT_PREFIX = "detect/segment/"
TICK_EVERY = 60.0  # event-time seconds between staleness and idle-pair sweeps
SEGMENT_ID_CACHE = 65536


def temperature_bucket(t: float | None, edges: Iterable[float]) -> str:
    """The label of the temperature bucket ``t`` falls in ("" when not reported).

    >>> [temperature_bucket(t, (0.0, 0.5, 1.0)) for t in (None, 0.0, 0.3, 0.7, 1.0, 1.3)]
    ['', '0', '0-0.5', '0.5-1', '0.5-1', '>1']
    """
    if t is None:
        return ""
    lower = None
    for edge in edges:
        if t <= edge:
            return f"{edge:g}" if lower is None else f"{lower:g}-{edge:g}"
        lower = edge
    return f">{lower:g}"


def _key_id(parts: Iterable[Any]) -> str:
    return hashlib.sha256(orjson.dumps(list(parts))).hexdigest()[:24]


def _ts_or_never(value: float | None) -> float:
    return float("-inf") if value is None else float(value)


def _when(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def _short(ts: float) -> str:
    return _when(ts).strftime("%H:%M")


@dataclass
class Segment:
    """Detectors of one route x model pair x draft length x temperature bucket."""

    labels: dict[str, str]
    acceptance: AcceptanceDetector
    breakeven: BreakevenMonitor
    positions: PositionCurve
    throughput: ThroughputMonitor
    last_ts: float = 0.0
    firing: dict[str, str] = field(default_factory=dict)  # rule -> fingerprint

    @property
    def pair(self) -> tuple[str, ...]:
        lab = self.labels
        return (lab["target_model"], lab["target_revision"], lab["draft_model"],
                lab["draft_revision"])

    def snapshot(self) -> dict[str, Any]:
        return {
            "kind": "segment", "version": 1, "labels": self.labels, "last_ts": self.last_ts,
            "firing": self.firing, "acceptance": self.acceptance.snapshot(),
            "breakeven": self.breakeven.snapshot(), "positions": self.positions.snapshot(),
            "throughput": self.throughput.snapshot(),
        }

    @classmethod
    def restore(cls, data: dict[str, Any]) -> Segment:
        require_version(data, "segment", 1)
        return cls(
            labels=dict(data["labels"]),
            acceptance=restore_detector(data["acceptance"]),
            breakeven=BreakevenMonitor.restore(data["breakeven"]),
            positions=PositionCurve.restore(data["positions"]),
            throughput=ThroughputMonitor.restore(data["throughput"]),
            last_ts=float(data["last_ts"]),
            firing=dict(data["firing"]),
        )


@dataclass
class Route:
    """Rules that watch a route as a whole."""

    name: str
    metadata: MetadataRules
    staleness: StalenessMonitor
    inactivity: InactivityMonitor
    contention: ContentionMonitor
    segments: list[str] = field(default_factory=list)  # segment key ids
    firing: dict[str, str] = field(default_factory=dict)  # rule -> fingerprint
    partition: int | None = None  # where its events arrive: who may judge its silence

    def snapshot(self) -> dict[str, Any]:
        return {
            "kind": "route", "version": 1, "name": self.name, "segments": self.segments,
            "partition": self.partition,
            "firing": self.firing, "metadata": self.metadata.snapshot(),
            "staleness": self.staleness.snapshot(), "inactivity": self.inactivity.snapshot(),
            "contention": self.contention.snapshot(),
        }

    @classmethod
    def restore(cls, data: dict[str, Any]) -> Route:
        require_version(data, "route", 1)
        return cls(
            name=data["name"],
            metadata=MetadataRules.restore(data["metadata"]),
            staleness=StalenessMonitor.restore(data["staleness"]),
            inactivity=InactivityMonitor.restore(data["inactivity"]),
            contention=ContentionMonitor.restore(data["contention"]),
            segments=list(data["segments"]),
            firing=dict(data["firing"]),
            partition=data.get("partition"),
        )


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
        self._routes: dict[str, Route] = {}
        self._segments: dict[str, Segment] = {}
        # Stored routes (and their segments) of partitions another process reads: never
        # judged nor shown here, only taken over if their events arrive here.
        self._aside_routes: dict[str, Route] = {}
        self._aside_segments: dict[str, Segment] = {}
        self._moved_warned: set[str] = set()
        # raw event fields -> segment id: hashing a key once per segment, not per event
        self._segment_ids: dict[tuple[Any, ...], str] = {}
        self._dirty: set[str] = set()
        self._alerts: list[AlertRecord] = []
        self._max_ts = float("-inf")
        self._last_tick = float("-inf")
        self.loaded = False
        # Partitions whose routes this process judges for silence (None: every route).
        self.owned: set[int] | None = None

    # -- state ---------------------------------------------------------------------------------

    def load(self, states: dict[str, Any]) -> None:
        """Restore what a previous run stored (all keys of this source): the routes of
        ``owned`` partitions to judge, the others aside (set ``owned`` first)."""
        self._clear()
        engine = states.get(ENGINE_KEY)
        if engine is not None:
            require_version(engine, "engine", 1)
        segments: dict[str, Segment] = {}
        for key, data in states.items():
            if key.startswith(ROUTE_PREFIX):
                route = Route.restore(data)
                mine = self._judged_here(route)
                (self._routes if mine else self._aside_routes)[route.name] = route
            elif key.startswith(SEGMENT_PREFIX):
                segments[key[len(SEGMENT_PREFIX):]] = Segment.restore(data)
        for seg_id, seg in segments.items():
            aside = seg.labels["route"] in self._aside_routes
            (self._aside_segments if aside else self._segments)[seg_id] = seg
        if self.owned is None and engine is not None:
            self._max_ts = _ts_or_never(engine["max_ts"])
        else:
            # One clock per process: the newest event it judged, never a peer's.
            self._max_ts = max((s.last_ts for s in self._segments.values()),
                               default=float("-inf"))
        if self.clock == "event" and engine is not None:
            # Event-time sweeps resume on their minute grid; a wall-clock sweep is this
            # process's own (the engine key is shared by every process of the source).
            self._last_tick = _ts_or_never(engine["last_tick"])
        self.loaded = True

    def _judged_here(self, route: Route) -> bool:
        return (self.owned is None or route.partition is None
                or route.partition in self.owned)

    def _clear(self) -> None:
        self._routes.clear()
        self._segments.clear()
        self._aside_routes.clear()
        self._aside_segments.clear()
        self._moved_warned.clear()
        self._dirty.clear()
        self._alerts.clear()
        self._max_ts = self._last_tick = float("-inf")

    def snapshot(self) -> dict[str, Any]:
        """Snapshots of what changed since the last call, keyed for the state table."""
        out: dict[str, Any] = {}
        for key in self._dirty:
            kind, _, name = key.partition(":")
            if kind == "route" and name in self._routes:
                out[ROUTE_PREFIX + _key_id([name])] = self._routes[name].snapshot()
            elif kind == "segment" and name in self._segments:
                out[SEGMENT_PREFIX + name] = self._segments[name].snapshot()
        if self._dirty and self.clock == "event":
            # Only event-time runs read it back (a replay is one process); live, every
            # daemon of a consumer group would write this one row at every checkpoint.
            out[ENGINE_KEY] = {
                "kind": "engine", "version": 1,
                "max_ts": None if self._max_ts == float("-inf") else self._max_ts,
                "last_tick": None if self._last_tick == float("-inf") else self._last_tick,
            }
        self._dirty.clear()
        return out

    @property
    def now(self) -> float:
        """The detection clock: the newest event time, or the last wall-clock sweep when
        later (live). The alert lifecycle times its holds and group waits against it."""
        return max(self._max_ts, self._last_tick)

    @property
    def pending(self) -> bool:
        """Alerts or state changes not yet handed to a checkpoint."""
        return bool(self._alerts or self._dirty)

    def drain(self) -> list[AlertRecord]:
        """Alert state changes decided since the last call, in decision order."""
        out, self._alerts = self._alerts, []
        return out

    def drop_all(self) -> None:
        """Forget everything in memory (after a fenced checkpoint); reload before use."""
        self._clear()
        self.loaded = False

    # -- feeding -------------------------------------------------------------------------------

    def observe(self, partition: int, events: list[Event]) -> None:
        """Feed one message's counted events, in order."""
        routes, segments, ids = self._routes, self._segments, self._segment_ids
        edges = self.config.temperature_edges
        dirty = self._dirty
        for e in events:
            name = e.route
            if name == OVERFLOW:
                continue  # routes over the cardinality cap, mixed: nothing to judge
            route = routes.get(name)
            if route is None:
                route = self._take_over(name, partition) or self._new_route(name)
            if route.partition != partition:
                self._moved(route, partition)
            route.partition = partition
            dirty.add("route:" + name)
            self._route_rules(route, e)
            if e.target_model == OVERFLOW:
                # Pairs over the route's cap share one series: a change there may only be a
                # change in the mix. The route's own rules above still see every request.
                self._advance(e.ts)
                continue
            t = e.temperature
            parts = (name, e.target_model, e.target_revision, e.target_tokenizer,
                     e.draft_model, e.draft_revision, e.draft_tokenizer, e.method,
                     e.num_speculative_tokens, t)
            seg_id = ids.get(parts)
            if seg_id is None:
                if len(ids) >= SEGMENT_ID_CACHE:
                    ids.clear()  # a cache: raw temperatures may take many values
                seg_id = ids[parts] = self._segment_id(e, temperature_bucket(t, edges))
            segment = segments.get(seg_id)
            if segment is None:
                segment = self._new_segment(route, seg_id, e)
            dirty.add("segment:" + seg_id)
            ts = e.ts
            if ts > segment.last_ts:
                segment.last_ts = ts
            self._segment_rules(segment, e)
            if ts > self._max_ts:
                self._advance(ts)

    def _advance(self, ts: float) -> None:
        if ts > self._max_ts:
            self._max_ts = ts
            if self.clock == "event" and ts - self._last_tick >= TICK_EVERY:
                self.tick(ts)

    def tick(self, now: float) -> None:
        """Sweep for silence and for pairs a route has left behind."""
        self._last_tick = now
        idle = self.config.idle_pair_resolve
        owned = self.owned
        for route in self._routes.values():
            if owned is not None and route.partition not in owned:
                continue  # another consumer reads this route: silence here means nothing
            route.staleness.tick(now)
            if route.staleness.changed:
                self._dirty.add("route:" + route.name)
                ev = route.staleness.evidence()
                summary = (f"{route.name}: no telemetry for {ev['silent_for_s'] or 0:.0f}s "
                           f"(last event {_short(ev['last_event_ts'] or now)} UTC)")
                self._flip(route.firing, "telemetry_stale", route.staleness.firing,
                           "warning", {"route": route.name}, now, summary, ev)
            for seg_id in route.segments:
                seg = self._segments.get(seg_id)
                if seg is not None and seg.firing and now - seg.last_ts >= idle:
                    for rule in list(seg.firing):
                        self._resolve(seg.firing, rule, seg.labels, now,
                                      f"{route.name}: pair no longer serving traffic",
                                      {"reason_resolved": "pair idle", "idle_s": now - seg.last_ts})
                    self._dirty.add("segment:" + seg_id)

    def owns_route(self, route_name: str) -> bool:
        """Whether this process judges ``route_name``: its events arrive on a partition it
        owns (a route it has never seen is its own until a peer's state says otherwise)."""
        if route_name in self._aside_routes:
            return False
        route = self._routes.get(route_name)
        return route is None or self._judged_here(route)

    def _take_over(self, name: str, partition: int) -> Route | None:
        """A route stored as another partition's, whose events now arrive here: it goes on
        from its stored state rather than from scratch."""
        route = self._aside_routes.pop(name, None)
        if route is None:
            return None
        for seg_id in route.segments:
            seg = self._aside_segments.pop(seg_id, None)
            if seg is not None:
                self._segments[seg_id] = seg
                if seg.last_ts > self._max_ts:
                    self._max_ts = seg.last_ts
        self._routes[name] = route
        return route

    def _moved(self, route: Route, partition: int) -> None:
        if route.partition is not None and route.name not in self._moved_warned:
            self._moved_warned.add(route.name)
            log.warning(
                "route %s: events on partition %d, stored as partition %d's. Traffic must be "
                "keyed by route, and a topic repartitioned only once drained: until then two "
                "consumers may judge (and write) this route", route.name, partition,
                route.partition)

    def accept_baseline(self, route_name: str, now: float) -> bool:
        """An operator acknowledged a change on ``route_name``: every segment of the route
        starts a fresh acceptance and throughput baseline, and the alerts that compared
        against the old one resolve at once. ``False`` when the route is unknown here or
        judged by another process."""
        route = self._routes.get(route_name)
        if route is None or (self.owned is not None and route.partition not in self.owned):
            return False
        ts = max(now, self._max_ts) if now != float("-inf") else self._max_ts
        for seg_id in route.segments:
            seg = self._segments.get(seg_id)
            if seg is None:
                continue
            old = seg.acceptance
            seg.acceptance = self._new_acceptance()
            seg.throughput = ThroughputMonitor(min_effect=self.config.throughput_min_effect)
            for rule in ("acceptance_drop", "acceptance_rise", "throughput_drop"):
                if rule in seg.firing:
                    self._resolve(seg.firing, rule, seg.labels, ts,
                                  f"{route_name}: new baseline accepted by an operator",
                                  {"reason_resolved": "baseline accepted",
                                   "previous_baseline": old.baseline})
            self._dirty.add("segment:" + seg_id)
        self._dirty.add("route:" + route_name)
        return True

    # -- route rules -------------------------------------------------------------------------

    def _new_route(self, name: str) -> Route:
        cfg = self.config
        route = Route(
            name=name,
            metadata=MetadataRules(),
            staleness=StalenessMonitor(silence=cfg.stale_after),
            inactivity=InactivityMonitor(window=cfg.inactive_window,
                                          min_requests=cfg.inactive_min_requests),
            contention=ContentionMonitor(threshold=cfg.contention_share),
        )
        self._routes[name] = route
        return route

    def _route_rules(self, route: Route, e: Event) -> None:
        ts, name = e.ts, route.name
        route.staleness.update(e)
        if route.staleness.changed:
            self._flip(route.firing, "telemetry_stale", route.staleness.firing, "warning",
                       {"route": name}, ts, f"{name}: telemetry arriving again",
                       route.staleness.evidence())
        route.metadata.update(e)
        for flip in route.metadata.flips:
            self._record(flip.rule, flip.state, flip.severity, flip.labels, flip.at,
                         _metadata_summary(flip.rule, flip.state, flip.labels, flip.evidence),
                         flip.evidence)
        route.inactivity.update(e)
        if route.inactivity.changed:
            ev = route.inactivity.evidence()
            summary = (f"{name}: nothing drafted in {ev['requests']} requests over "
                       f"{ev['window_s'] / 60:.0f} min; the engine may have dropped speculation"
                       if route.inactivity.firing else f"{name}: drafting resumed")
            self._flip(route.firing, "speculation_inactive", route.inactivity.firing,
                       "critical", {"route": name}, ts, summary, ev)
        route.contention.update(e)
        if route.contention.changed:
            ev = route.contention.evidence()
            summary = (f"{name}: {ev['share']:.0%} of requests had the draft evicted or "
                       f"reloaded" if route.contention.firing
                       else f"{name}: draft evictions back to {ev['share']:.1%}")
            self._flip(route.firing, "memory_contention", route.contention.firing, "warning",
                       {"route": name}, ts, summary, ev)

    # -- segment rules -----------------------------------------------------------------------

    @staticmethod
    def _segment_id(e: Event, tbucket: str) -> str:
        return _key_id((e.route, e.target_model, e.target_revision, e.target_tokenizer,
                        e.draft_model or "", e.draft_revision or "", e.draft_tokenizer or "",
                        e.method or "", e.num_speculative_tokens, tbucket))

    def _new_segment(self, route: Route, seg_id: str, e: Event) -> Segment:
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
        seg = self._build_segment(labels, e)
        self._segments[seg_id] = seg
        route.segments.append(seg_id)
        return seg

    def _cost_model(self, e: Event) -> CostModel | None:
        for cm in self.config.cost_models:
            if fnmatch.fnmatchcase(e.target_model, cm.target_model) and fnmatch.fnmatchcase(
                e.draft_model or e.method or "", cm.draft_model
            ):
                return CostModel(cm.c, cm.v)
        return None

    def _build_segment(self, labels: dict[str, str], e: Event) -> Segment:
        cfg = self.config
        cost = self._cost_model(e)
        cut = cutoff(cost) if cost is not None else cfg.breakeven_cutoff
        return Segment(
            labels=labels,
            acceptance=self._new_acceptance(),
            breakeven=BreakevenMonitor(cutoff=cut, window=cfg.breakeven_window),
            positions=PositionCurve(cost_model=cost),
            throughput=ThroughputMonitor(min_effect=cfg.throughput_min_effect),
        )

    def _new_acceptance(self) -> AcceptanceDetector:
        cfg = self.config
        return make_detector(
            cfg.detector,
            **({"min_effect": cfg.min_effect, "false_alarm_days": cfg.false_alarm_days}
               if cfg.detector == "cusum" else {}),
        )

    def _segment_rules(self, seg: Segment, e: Event) -> None:
        ts, lab, name = e.ts, seg.labels, seg.labels["route"]
        if e.has_spec and e.drafted_tokens > 0:
            det = seg.acceptance
            det.update(e.accepted_tokens, e.drafted_tokens, ts)
            if det.drift_detected:
                rule = "acceptance_drop" if det.direction == "drop" else "acceptance_rise"
                ev = det.evidence()
                verb = "fell" if rule == "acceptance_drop" else "rose"
                since = ev.get("change_ts")
                summary = (f"{name}: acceptance {verb} {_fmt(det.baseline)} -> "
                           f"{_fmt(det.current)}"
                           + (f" since {_short(since)}" if since else "")
                           + f" (target {lab['target_revision']}, "
                           f"draft {lab['draft_revision'] or lab.get('method', 'none')})")
                self._flip(seg.firing, rule, True,
                           "warning" if rule == "acceptance_drop" else "info", lab, ts, summary, ev)
            elif det.recovered:
                for rule in ("acceptance_drop", "acceptance_rise"):
                    if rule in seg.firing:
                        self._flip(seg.firing, rule, False, "info", lab, ts,
                                   f"{name}: acceptance back at {_fmt(det.current)} "
                                   f"(baseline {_fmt(det.baseline)})", det.evidence())
            seg.positions.update(e)
        if e.has_spec:
            seg.breakeven.update(e)
            if seg.breakeven.changed:
                ev = seg.breakeven.evidence()
                ev["recommendation"] = seg.breakeven.recommendation
                knee = seg.positions.knee
                if knee is not None:
                    ev["recommended_num_speculative_tokens"] = knee
                if seg.breakeven.firing:
                    lo, hi = seg.breakeven.interval
                    summary = (f"{name}: acceptance {_fmt(seg.breakeven.rate)} is below the "
                               f"break-even {seg.breakeven.cutoff:.2f} (95% interval "
                               f"{lo:.2f}-{hi:.2f}); turn speculation off for this route")
                else:
                    summary = (f"{name}: acceptance {_fmt(seg.breakeven.rate)} back above "
                               f"break-even {seg.breakeven.cutoff:.2f}")
                self._flip(seg.firing, "below_breakeven", seg.breakeven.firing, "warning", lab,
                           ts, summary, ev)
        seg.throughput.update(e)
        if seg.throughput.changed:
            ev = seg.throughput.evidence()
            base = (seg.throughput.baseline or {}).get("0.5")
            cur = seg.throughput.current.get("0.5")
            summary = (f"{name}: decode throughput p50 {_fmt(cur, '.0f')} vs baseline "
                       f"{_fmt(base, '.0f')} tok/s with a flat error rate"
                       if seg.throughput.firing else
                       f"{name}: decode throughput back at {_fmt(cur, '.0f')} tok/s")
            self._flip(seg.firing, "throughput_drop", seg.throughput.firing, "warning", lab, ts,
                       summary, ev)

    # -- records -------------------------------------------------------------------------------

    def _flip(self, firing: dict[str, str], rule: str, now_firing: bool, severity: str,
              labels: dict[str, str], ts: float, summary: str, details: dict[str, Any]) -> None:
        """One firing alert per fingerprint: fire if not firing, resolve if firing."""
        if now_firing and rule not in firing:
            firing[rule] = fingerprint(rule, labels)
            self._record(rule, "firing", severity, labels, ts, summary, details)
        elif not now_firing and rule in firing:
            self._resolve(firing, rule, labels, ts, summary, details)

    def _resolve(self, firing: dict[str, str], rule: str, labels: dict[str, str], ts: float,
                 summary: str, details: dict[str, Any]) -> None:
        del firing[rule]
        severity = "info" if rule == "acceptance_rise" else (
            "critical" if rule in ("speculation_inactive", "tokenizer_mismatch") else "warning")
        self._record(rule, "resolved", severity, labels, ts, summary, details)

    def _record(self, rule: str, state: str, severity: str, labels: dict[str, str], ts: float,
                summary: str, details: dict[str, Any]) -> None:
        self._alerts.append(AlertRecord(rule, state, _when(ts), severity, dict(labels), summary,
                                        _jsonable(details)))

    # -- reporting -------------------------------------------------------------------------------

    def recommendations(self) -> list[dict[str, Any]]:
        """Per segment: keep speculation on, turn it off, or not enough data, with evidence."""
        out = []
        for seg in self._segments.values():
            if seg.labels["num_speculative_tokens"] == "0":
                continue  # speculation already off
            ev = seg.breakeven.evidence()
            out.append({
                "labels": dict(seg.labels),
                "recommendation": seg.breakeven.recommendation,
                "recommended_num_speculative_tokens": seg.positions.knee,
                "evidence": _jsonable(ev),
                "acceptance": _jsonable(seg.acceptance.evidence()),
            })
        out.sort(key=lambda r: (r["labels"]["route"], sorted(r["labels"].items())))
        return out


def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "n/a" if value is None else format(value, spec)


def _metadata_summary(rule: str, state: str, labels: dict[str, str], ev: dict[str, Any]) -> str:
    route = labels["route"]
    if state == "resolved":
        return f"{route}: {rule.replace('_', ' ')} cleared for draft {labels['draft_model']}"
    if rule == "tokenizer_mismatch":
        return (f"{route}: draft {labels['draft_model']} uses tokenizer "
                f"{ev.get('draft_tokenizer')} but target {labels['target_model']} uses "
                f"{ev.get('target_tokenizer')}: drafts will be rejected")
    if ev.get("reason") == "pinned_target_revision":
        return (f"{route}: target revision {ev.get('target_revision')} differs from the "
                f"revision {ev.get('pinned_target_revision')} draft {labels['draft_model']} "
                f"was validated against")
    return (f"{route}: target revision changed {ev.get('previous_target_revision')} -> "
            f"{ev.get('target_revision')} while draft {labels['draft_model']} stayed at "
            f"{labels['draft_revision']}")


def _jsonable(data: Any) -> Any:
    """Plain JSON types (numpy scalars and tuples appear in detector evidence)."""
    options = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
    return orjson.loads(orjson.dumps(data, option=options))


__all__ = ["Detection", "Route", "Segment", "temperature_bucket"]
