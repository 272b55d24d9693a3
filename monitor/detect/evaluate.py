"""Rule evaluation: detector flips become alert records, with the catalogue's text.

After each update the engine asks its detectors whether a condition flipped; a flip becomes
one alert record (alerts v1) stamped with the event time of the deciding event. Severities
and summaries come from the rule catalogue (``monitor/rules.py``); only the resolutions the
engine itself decides (a pair gone idle, a baseline accepted by an operator) write their own.
One firing alert per fingerprint: ``firing`` maps rule -> fingerprint per route or segment.

A message's events may be judged a segment at a time (:meth:`Evaluator.segment_rules_many`,
the acceptance bank on arrays): between :meth:`Evaluator.begin_batch` and
:meth:`Evaluator.end_batch` every record carries :attr:`Evaluator.key`, the position its
decision has in request-by-request order, and leaves in that order.
"""

from __future__ import annotations

from typing import Any

from monitor.alert_record import AlertRecord, fingerprint
from monitor.change_record import ChangeRecord
from monitor.detect.activity import ContentionMonitor, InactivityMonitor
from monitor.detect.lossless import LosslessMonitor
from monitor.detect.segments import Route, Segment, when
from monitor.jsonable import jsonable
from monitor.rules import CATALOGUE
from monitor.telemetry.event import Event

__all__ = ["BASELINE_RULES", "Evaluator"]

BASELINE_RULES = ("acceptance_drop", "acceptance_rise", "throughput_drop")
"""The rules that compare against a baseline: an accepted new baseline resolves them."""
_NO_HOLDS: frozenset[str] = frozenset()  # a segment without a live comparison

# Sort keys of a batch's records: event index * STEP + the phase that decided within the
# event, in the order the request-by-request path decides them.
STEP = 32
ROUTE, LOSSLESS, CHANGE, SEGMENT, ACCEPTANCE, BREAKEVEN, THROUGHPUT, TICK = (
    0, 4, 8, 12, 13, 14, 15, 16)
BATCH_MIN = 16  # a segment's requests in a message judged as arrays from this many on
# Within ROUTE: the route's detectors in the order route_rules decides them, so a batch that
# feeds them one detector at a time puts their records of one event back in that order.
STALE, METADATA, INACTIVE, CONTENTION = ROUTE, ROUTE + 1, ROUTE + 2, ROUTE + 3


class Evaluator:
    """Turns flips into records, kept in :attr:`alerts` until the engine drains them."""

    def __init__(self) -> None:
        self.alerts: list[AlertRecord] = []
        self.changes: list[ChangeRecord] = []  # created or updated since the last drain
        self.key = 0  # inside a batch: where the next record stands in per-event order
        self._keys: list[int] | None = None  # per record of the batch; None: no batch
        self._change_keys: list[int] = []
        self._bases = (0, 0)

    # -- batches -----------------------------------------------------------------------------

    def begin_batch(self) -> None:
        """Records from now on carry :attr:`key` until :meth:`end_batch`."""
        self._keys, self._change_keys = [], []
        self._bases = (len(self.alerts), len(self.changes))

    def end_batch(self) -> None:
        """Put the batch's records in per-event order (stable: one decision's records keep
        theirs)."""
        keys, change_keys = self._keys, self._change_keys
        self._keys = None
        if keys is None:
            return
        alerts_base, changes_base = self._bases
        _reorder(self.alerts, alerts_base, keys)
        _reorder(self.changes, changes_base, change_keys)

    def change(self, record: ChangeRecord) -> None:
        """A change record created or updated now."""
        self.changes.append(record)
        if self._keys is not None:
            self._change_keys.append(self.key)

    # -- route rules -------------------------------------------------------------------------

    def route_rules(self, route: Route, e: Event) -> None:
        # Runs per event: labels are built only for a flip, which is rare.
        ts = e.ts
        route.staleness.update(e)
        if route.staleness.changed:
            self.flip(route.firing, "telemetry_stale", route.staleness.firing,
                      {"route": route.name}, ts, route.staleness.evidence())
        route.metadata.update(e)
        for flip in route.metadata.flips:
            self.record(flip.rule, flip.state, flip.labels, flip.at, flip.evidence)
        route.inactivity.update(e)
        if route.inactivity.changed:
            self.flip(route.firing, "speculation_inactive", route.inactivity.firing,
                      {"route": route.name}, ts, route.inactivity.evidence())
        route.contention.update(e)
        if route.contention.changed:
            self.flip(route.firing, "memory_contention", route.contention.firing,
                      {"route": route.name}, ts, route.contention.evidence())

    def route_rules_many(self, route: Route, keys: list[int], events: list[Event]) -> None:
        """:meth:`route_rules` for a route's events of one batch (``keys``: their
        :attr:`key`), in order; the same records and state as one event at a time.

        The four detectors read nothing of each other (each flips only its own rules), so
        each takes the whole run through its ``update_many``, and the keys (:data:`STALE` ..
        :data:`CONTENTION`) put their records back in the order :meth:`route_rules` gives.
        """
        n = len(events)
        labels = {"route": route.name}
        det = route.staleness
        ts = [e.ts for e in events]
        done = 0
        while done < n:
            done += det.update_many(ts[done:] if done else ts)
            if det.changed:
                self.key = keys[done - 1] + STALE
                self.flip(route.firing, "telemetry_stale", det.firing, labels, ts[done - 1],
                          det.evidence())
        meta = route.metadata
        done = 0
        while done < n:
            done += meta.update_many(events[done:] if done else events)
            if meta.changed:
                self.key = keys[done - 1] + METADATA
                for flip in meta.flips:
                    self.record(flip.rule, flip.state, flip.labels, flip.at, flip.evidence)
        monitors: tuple[tuple[str, int, InactivityMonitor | ContentionMonitor], ...] = (
            ("speculation_inactive", INACTIVE, route.inactivity),
            ("memory_contention", CONTENTION, route.contention))
        for rule, phase, monitor in monitors:
            done = 0
            while done < n:
                done += monitor.update_many(events[done:] if done else events)
                if monitor.changed:
                    self.key = keys[done - 1] + phase
                    self.flip(route.firing, rule, monitor.firing, labels, ts[done - 1],
                              monitor.evidence())

    def lossless(self, monitor: LosslessMonitor, e: Event) -> None:
        """Match a greedy request against its prompt's outputs (rule ``output_mismatch``)."""
        monitor.update(e)
        if monitor.changed:
            for flip in monitor.flips:
                self.record(flip.rule, flip.state, flip.labels, flip.at, flip.evidence)

    def lossless_tick(self, monitor: LosslessMonitor, now: float) -> bool:
        """Sweep the monitor for pairs gone quiet at ``now``; True when its state changed."""
        monitor.tick(now)
        for flip in monitor.flips:
            self.record(flip.rule, flip.state, flip.labels, flip.at, flip.evidence)
        return monitor.changed

    def staleness(self, route: Route, now: float) -> bool:
        """Sweep the route for silence at ``now``; True when its state changed."""
        route.staleness.tick(now)
        if not route.staleness.changed:
            return False
        self.flip(route.firing, "telemetry_stale", route.staleness.firing,
                  {"route": route.name}, now, route.staleness.evidence())
        return True

    # -- segment rules -----------------------------------------------------------------------

    def segment_rules(self, seg: Segment, e: Event) -> None:
        held: set[str] | frozenset[str] = _NO_HOLDS
        versus = seg.versus
        if versus is not None and versus.active:
            versus.update(e)
            for rule, now_firing, details in versus.flips:
                self.flip(seg.firing, rule, now_firing, seg.labels, e.ts, details)
            if versus.changed:
                versus.record.updated_at = e.ts
                self.change(versus.record)
            held = versus.holds  # the comparison's alerts: the own detectors leave them be
        if e.has_spec and e.drafted_tokens > 0:
            det = seg.acceptance
            det.update(e.accepted_tokens, e.drafted_tokens, e.ts)
            if det.drift_detected or det.recovered:
                self._acceptance_flip(seg, held, e.ts)
        self._after_acceptance(seg, e, held)

    def segment_rules_many(self, seg: Segment, keys: list[int], events: list[Event]) -> None:
        """:meth:`segment_rules` for a segment's events of one batch (``keys``: their
        :attr:`key`), in order; the same records and state as one event at a time.

        Each detector takes the requests as a run (the acceptance bank on arrays) up to its
        next flip; the flip's record carries the key of the event that decided it, so the
        records leave in per-event order. The detectors read nothing of each other but for
        break-even's evidence, which names the position curve's knee: the curve is fed up to
        the deciding event first. A live comparison (after a change) holds alerts of the
        segment's own detectors, so a segment that has one goes event by event.
        """
        versus = seg.versus
        if len(events) < BATCH_MIN or (versus is not None and versus.active):
            for key, e in zip(keys, events, strict=True):
                self.key = key + SEGMENT
                self.segment_rules(seg, e)
            return
        spec = [i for i, e in enumerate(events) if e.has_spec and e.drafted_tokens > 0]
        if spec:
            det = seg.acceptance
            accepted = [events[i].accepted_tokens for i in spec]
            drafted = [events[i].drafted_tokens for i in spec]
            ts = [events[i].ts for i in spec]
            done = 0
            while done < len(spec):
                done += det.update_many(accepted[done:], drafted[done:], ts[done:])
                if det.drift_detected or det.recovered:
                    self.key = keys[spec[done - 1]] + ACCEPTANCE
                    self._acceptance_flip(seg, _NO_HOLDS, ts[done - 1])
        self._after_acceptance_many(seg, keys, events)

    def _after_acceptance_many(self, seg: Segment, keys: list[int],
                               events: list[Event]) -> None:
        """:meth:`_after_acceptance` for a run of a segment's events, nothing held."""
        lab = seg.labels
        spec = [i for i, e in enumerate(events) if e.has_spec]
        if spec:
            breakeven, positions = seg.breakeven, seg.positions
            spec_events = [events[i] for i in spec]
            done = 0
            while done < len(spec_events):
                taken = breakeven.update_many(spec_events[done:] if done else spec_events)
                run = spec_events[done:done + taken] if done or taken < len(spec_events) \
                    else spec_events
                positions.update_many([e for e in run if e.drafted_tokens > 0])
                done += taken
                if breakeven.changed:
                    ev = breakeven.evidence()
                    ev["recommendation"] = breakeven.recommendation
                    knee = positions.knee
                    if knee is not None:
                        ev["recommended_num_speculative_tokens"] = knee
                    last = spec[done - 1]
                    self.key = keys[last] + BREAKEVEN
                    self.flip(seg.firing, "below_breakeven", breakeven.firing, lab,
                              events[last].ts, ev)
        throughput = seg.throughput
        done = 0
        while done < len(events):
            done += throughput.update_many(events[done:] if done else events)
            if throughput.changed:
                last = done - 1
                self.key = keys[last] + THROUGHPUT
                self.flip(seg.firing, "throughput_drop", throughput.firing, lab,
                          events[last].ts, throughput.evidence())

    def _acceptance_flip(self, seg: Segment, held: set[str] | frozenset[str],
                         ts: float) -> None:
        det = seg.acceptance
        if det.drift_detected:
            rule = "acceptance_drop" if det.direction == "drop" else "acceptance_rise"
            self.flip(seg.firing, rule, True, seg.labels, ts, det.evidence())
        elif det.recovered:
            for rule in ("acceptance_drop", "acceptance_rise"):
                if rule in seg.firing and rule not in held:
                    self.flip(seg.firing, rule, False, seg.labels, ts, det.evidence())

    def _after_acceptance(self, seg: Segment, e: Event,
                          held: set[str] | frozenset[str]) -> None:
        """The position curve, break-even and throughput for one event."""
        ts, lab = e.ts, seg.labels
        if e.has_spec:
            if e.drafted_tokens > 0:
                seg.positions.update(e)
            seg.breakeven.update(e)
            if seg.breakeven.changed:
                ev = seg.breakeven.evidence()
                ev["recommendation"] = seg.breakeven.recommendation
                knee = seg.positions.knee
                if knee is not None:
                    ev["recommended_num_speculative_tokens"] = knee
                self.flip(seg.firing, "below_breakeven", seg.breakeven.firing, lab, ts, ev)
        seg.throughput.update(e)
        if seg.throughput.changed and "throughput_drop" not in held:
            self.flip(seg.firing, "throughput_drop", seg.throughput.firing, lab, ts,
                      seg.throughput.evidence())

    def released(self, seg: Segment, ts: float, reason: str) -> None:
        """The comparison of ``seg`` stops; the alerts it held resolve, saying why."""
        versus = seg.versus
        if versus is None:
            return
        for rule in sorted(versus.holds):
            if rule in seg.firing:
                self.resolve(seg.firing, rule, seg.labels, ts,
                             f"{seg.labels['route']}: {reason}", {"reason_resolved": reason})
        versus.release(ts, reason)
        versus.record.updated_at = ts
        self.change(versus.record)

    def idle_pair(self, route: Route, seg: Segment, now: float) -> None:
        """The pair stopped serving: what it had firing resolves."""
        if seg.versus is not None and seg.versus.holds:
            self.released(seg, now, "pair no longer serving traffic")
        for rule in list(seg.firing):
            self.resolve(seg.firing, rule, seg.labels, now,
                         f"{route.name}: pair no longer serving traffic",
                         {"reason_resolved": "pair idle", "idle_s": now - seg.last_ts})

    def baseline_accepted(self, seg: Segment, previous_baseline: float | None,
                          ts: float) -> None:
        """An operator accepted a new baseline: the alerts against the old one resolve."""
        if seg.versus is not None and seg.versus.active:
            self.released(seg, ts, "new baseline accepted by an operator")
        for rule in BASELINE_RULES:
            if rule in seg.firing:
                self.resolve(seg.firing, rule, seg.labels, ts,
                             f"{seg.labels['route']}: new baseline accepted by an operator",
                             {"reason_resolved": "baseline accepted",
                              "previous_baseline": previous_baseline})

    # -- records -----------------------------------------------------------------------------

    def flip(self, firing: dict[str, str], rule: str, now_firing: bool,
             labels: dict[str, str], ts: float, details: dict[str, Any]) -> None:
        """One firing alert per fingerprint: fire if not firing, resolve if firing."""
        if now_firing and rule not in firing:
            firing[rule] = fingerprint(rule, labels)
            self.record(rule, "firing", labels, ts, details)
        elif not now_firing and rule in firing:
            del firing[rule]
            self.record(rule, "resolved", labels, ts, details)

    def resolve(self, firing: dict[str, str], rule: str, labels: dict[str, str], ts: float,
                summary: str, details: dict[str, Any]) -> None:
        """Resolve ``rule`` for a reason of the engine's own, told in ``summary``."""
        del firing[rule]
        self.record(rule, "resolved", labels, ts, details, summary)

    def record(self, rule: str, state: str, labels: dict[str, str], ts: float,
               details: dict[str, Any], summary: str | None = None) -> None:
        entry = CATALOGUE[rule]
        if summary is None:
            summary = entry.summary(state, labels, details)
        self.alerts.append(AlertRecord(rule, state, when(ts), entry.severity, dict(labels),
                                       summary, jsonable(details)))
        if self._keys is not None:
            self._keys.append(self.key)


def _reorder(records: list[Any], base: int, keys: list[int]) -> None:
    """Sort ``records[base:]`` by ``keys`` (one per record), stably, in place."""
    if all(a <= b for a, b in zip(keys, keys[1:], strict=False)):
        return
    tail = records[base:]
    records[base:] = [tail[i] for i in sorted(range(len(tail)), key=keys.__getitem__)]
