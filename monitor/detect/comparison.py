"""The live comparison of a new setup with the one it replaced (``acceptance_drop`` across
changes, ``throughput_drop`` across changes).

A new target revision with an unchanged draft (draft drift) is the fall users fear most, and
a fresh baseline for the new setup would learn the fall as normal. So from the new setup's
first request its acceptance is tested against the **predecessor's baseline**, carried over
(rate, overdispersion, thresholds: :meth:`OverdispersedCusum.carried`), with the same
calibrated CUSUM bank the segment's own detector uses; its decode throughput likewise
(:meth:`ThroughputMonitor.carried`, batch-normalised with the predecessor's fit).

Comparable quantities only:

- same draft length: the raw rate;
- a longer draft (K -> K' > K): the new requests' acceptance at the K positions both share
  (``sum(accepted_per_position[:K])`` over ``K x steps``), which is what the old raw rate
  measured; requests without per-position counts carry no evidence here;
- a shorter draft, or speculation switched on or off: no acceptance comparison (the change
  report compares shared positions from the rollups); throughput still is compared.

The comparison **decides** on a drop (``worse``: ``acceptance_drop`` fires, naming the old
setup in ``details.previous``), on a rise (``better``, no alert), or, after
``change_window`` seconds of event time without either, ``same``. Then the new setup's own
baseline (the segment's detector, warming up all along) takes over; a firing drop stays
with the comparison until acceptance is back at the old level, an operator accepts the new
baseline, or the pair goes idle.
"""

from __future__ import annotations

import math
from typing import Any

from monitor.change_record import ChangeRecord, describe
from monitor.detect.acceptance import DROP, OverdispersedCusum, restore_detector
from monitor.detect.throughput import ThroughputMonitor
from monitor.telemetry.event import Event
from monitor.versioned import require_version

__all__ = ["Comparison", "Flip"]

COMPARING, WORSE, BETTER, SAME, NOT_COMPARED, INSUFFICIENT = (
    "comparing", "worse", "better", "same", "not_compared", "insufficient_data")

Flip = tuple[str, bool, dict[str, Any]]  # rule, firing now, details

_NO_HOLDS: frozenset[str] = frozenset()


class Comparison:
    """One change's live test; :meth:`update` per event of the new setup, then read
    :attr:`flips` (alert conditions that changed) and :attr:`changed` (the record moved)."""

    def __init__(self, record: ChangeRecord, acceptance: OverdispersedCusum | None,
                 throughput: ThroughputMonitor | None, *, window: float,
                 shared: int | None = None) -> None:
        self.record = record
        self.acceptance = acceptance
        self.throughput = throughput
        self.window = window
        self.shared = shared  # positions compared when the draft got longer
        # rules this comparison has firing: a frozenset, replaced on change (an empty set
        # object is 216 bytes, and a fleet's changes are many; most never hold a rule)
        self.holds: frozenset[str] = _NO_HOLDS
        self.flips: list[Flip] = []
        self.changed = False
        self._a = 0  # accepted / drafted of the new setup, on the compared basis
        self._d = 0
        self._n = 0
        self._events = 0  # every request of the new setup, and those that failed
        self._errors = 0
        self.active = True  # still feeding a detector: deciding, or holding an alert
        self._settle()

    def _settle(self) -> None:
        # An attribute, not a property: the engine reads it on every event of the segment.
        self.active = self.acceptance is not None or self.throughput is not None

    @property
    def state(self) -> str:
        return str(self.record.live.get("state", COMPARING))

    # -- feeding ------------------------------------------------------------------------------

    def update(self, e: Event) -> None:
        self.flips = []
        self.changed = False
        live = self.record.live
        self._events += 1
        if e.status != "ok":
            self._errors += 1
        det = self.acceptance
        if det is not None and e.has_spec and e.drafted_tokens > 0:
            ad = self._compared(e)
            if ad is not None:
                a, d = ad
                self._a += a
                self._d += d
                self._n += 1
                det.update(a, d, e.ts)
                if det.drift_detected:
                    if det.direction == DROP:
                        self._decide(WORSE, e.ts)
                        self.holds = self.holds | {"acceptance_drop"}
                        self.flips.append(("acceptance_drop", True, self.evidence(det)))
                    else:
                        self._decide(BETTER, e.ts)
                        self.acceptance = None  # decided, and nothing to hold
                elif det.recovered and "acceptance_drop" in self.holds:
                    self.holds = self.holds - {"acceptance_drop"}
                    self.flips.append(("acceptance_drop", False, self.evidence(det)))
                    self._decide(SAME, e.ts, reason="acceptance back at the previous level")
                    self.acceptance = None
        tput = self.throughput
        if tput is not None:
            tput.update(e)
            if tput.changed:
                if tput.firing:
                    self.holds = self.holds | {"throughput_drop"}
                else:
                    self.holds = self.holds - {"throughput_drop"}
                self.flips.append(("throughput_drop", tput.firing, self._previous(
                    tput.evidence(), None)))
                live["throughput"] = "worse" if tput.firing else "same"
                self.changed = True
        if e.ts - self.record.at >= self.window:
            self._expire(e.ts)
        if self._n and (self._n & 255) == 0:
            self._counts()  # now and then: the record's counts, for the API and the report
        self._settle()

    def _compared(self, e: Event) -> tuple[int, int] | None:
        """The request's (accepted, drafted) on the basis both setups share."""
        m = self.shared
        if m is None:
            return e.accepted_tokens, e.drafted_tokens
        per = e.accepted_per_position
        if per is None or len(per) < m:
            return None
        k = e.num_speculative_tokens
        steps = e.verify_steps or -(-e.drafted_tokens // k)
        return min(sum(per[:m]), m * steps), m * steps

    def _expire(self, ts: float) -> None:
        """The window is over: what has not decided is the same; the own baseline takes
        over, except for an alert held here (it resolves here)."""
        if self.acceptance is not None and "acceptance_drop" not in self.holds:
            # No alarm in the window: no fall of the minimum effect, unless nothing came to
            # compare (a longer draft whose requests carry no per-position counts).
            self._decide(SAME if self._n else INSUFFICIENT, ts)
            self.acceptance = None
        if self.throughput is not None and "throughput_drop" not in self.holds:
            self.record.live.setdefault("throughput", "same")
            self.throughput = None
            self.changed = True

    def release(self, ts: float, reason: str) -> None:
        """Stop comparing (an operator accepted the new baseline, the pair went idle); the
        engine resolves what was held."""
        self.holds = _NO_HOLDS
        if self.acceptance is not None and self.state == COMPARING:
            self._decide(SAME, ts, reason=reason)
        self.acceptance = self.throughput = None
        self.record.live["released"] = reason
        self.changed = True
        self._settle()

    # -- the record ---------------------------------------------------------------------------

    def _decide(self, state: str, ts: float, reason: str | None = None) -> None:
        live = self.record.live
        live["state"] = state
        live["decided_at"] = ts
        if reason:
            live["reason"] = reason
        self._counts()

    def _counts(self) -> None:
        live = self.record.live
        live.update(requests=self._n, accepted_tokens=self._a, drafted_tokens=self._d)
        if self._events:
            live["error_rate"] = self._errors / self._events
        prev = live.get("previous_rate")
        if self._d and prev:
            rate = self._a / self._d
            live["current_rate"] = rate
            live["interval"] = _interval(rate, prev, self._n, self._d,
                                         float(live.get("rho", 0.0)))
        self.changed = True

    def evidence(self, det: OverdispersedCusum) -> dict[str, Any]:
        ev = det.evidence()
        if self._d:
            # Every request of the new setup, not the alarm's excursion: the change began at
            # its first request, and the excursion alone overstates the fall.
            ev["current"] = self._a / self._d
        return self._previous(ev, self.record.live.get("previous_rate"))

    def _previous(self, ev: dict[str, Any], rate: float | None) -> dict[str, Any]:
        rec = self.record
        ev["previous"] = {
            "setup": dict(rec.previous), "rate": rate, "kind": rec.kind,
            "change": describe(rec.changed, rec.current), "since": rec.at,
            "basis": rec.live.get("basis"), "change_id": rec.change_id,
        }
        return ev

    # -- persistence --------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        return {
            "kind": "comparison", "version": 1, "record": self.record.to_dict(),
            "acceptance": None if self.acceptance is None else self.acceptance.snapshot(),
            "throughput": None if self.throughput is None else self.throughput.snapshot(),
            "window": self.window, "shared": self.shared, "holds": sorted(self.holds),
            "counts": [self._a, self._d, self._n, self._events, self._errors],
        }

    @classmethod
    def restore(cls, data: dict[str, Any]) -> Comparison:
        require_version(data, "comparison", 1)
        acc = data["acceptance"]
        tput = data["throughput"]
        cmp = cls(ChangeRecord.from_dict(data["record"]),
                  None if acc is None else restore_detector(acc),  # type: ignore[arg-type]
                  None if tput is None else ThroughputMonitor.restore(tput),
                  window=float(data["window"]), shared=data["shared"])
        cmp.holds = frozenset(data["holds"]) or _NO_HOLDS
        cmp._a, cmp._d, cmp._n, cmp._events, cmp._errors = (int(x) for x in data["counts"])
        return cmp


def _interval(rate: float, previous: float, n: int, d: int, rho: float) -> list[float]:
    """A 95 % interval of the relative change ``rate / previous - 1`` (the previous rate
    taken as known): binomial variance times the design effect ``1 + (d/n - 1) rho`` of the
    mean request, since requests, not tokens, are the independent units. Shown beside the
    sequential decision, which does not use it.

    >>> [round(x, 3) for x in _interval(0.5, 0.6, 1000, 100_000, 0.02)]
    [-0.176, -0.158]
    """
    var = rate * (1.0 - rate) / d * (1.0 + (d / n - 1.0) * rho)
    half = 1.96 * math.sqrt(max(var, 0.0)) / previous
    change = rate / previous - 1.0
    return [change - half, change + half]
