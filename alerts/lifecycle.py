"""From condition records to notifications: Prometheus ``for``/``keep_firing_for`` per alert,
Alertmanager grouping per group of alerts.

Detectors say *what holds* (an :class:`~monitor.alert_record.AlertRecord` firing or resolved); this
module decides *who is told what, when*. It is a state machine in event time: its clock is
the largest of every ``now`` passed to :meth:`Lifecycle.advance` and every record's event
time, so the same inputs always give the same notifications, in replay and after a restart
from its snapshots. The one exception is the reminder clock when a ``wall`` clock is given
(the daemon, ``replay --deliver``): see :class:`Lifecycle`.

Per alert (one fingerprint), an *episode* goes::

    inactive --firing--> pending --min_firing--> firing --resolved--> resolving
                            |                       ^                     |
                            +--resolved: "short"    +--firing: "flap"     +--keep_firing_for-->
                                                                                   inactive

Entering ``firing`` makes a firing item due (unless a silence holds it back), leaving
``resolving`` a resolved item (only for an episode that was announced). Due items wait in
their group's buffer for ``group_wait`` (a group nobody was told about yet: companions get
a chance to join) or ``group_interval`` (a group with episodes out: changes are batched),
then leave together as one :class:`~alerts.notification.Notification`.

The lifecycle is a discrete-event simulation in event time. Every timer (a promotion after
``min_firing``, the end of a hold, a group's flush, a reminder, the end of a silence holding an
alert back) is decided at its own time, in time order, and before any record that comes
later, however records are batched into :meth:`Lifecycle.update` calls and however often
:meth:`Lifecycle.advance` is called: a checkpoint holding an hour of records, handed over at
once, gives the notifications the same records fed one at a time would, stamped the same.
Calls only choose *when* the caller gets what was decided, never what nor at what time.

>>> from datetime import UTC, datetime
>>> cfg = LifecycleConfig(group_wait=30, keep_firing_for=600)
>>> lc = Lifecycle(cfg)
>>> t0 = datetime(2026, 11, 2, 14, 0, tzinfo=UTC).timestamp()
>>> def rec(state, at):
...     return AlertRecord("acceptance_drop", state, datetime.fromtimestamp(at, UTC),
...                        "warning", {"route": "code"}, f"code: {state}")
>>> lc.update([rec("firing", t0)])
>>> lc.advance(t0)               # due now, but the group waits 30 s for companions
[]
>>> [(n.key[-2:], n.status, len(n.items)) for n in lc.advance(t0 + 30)]
[('-1', 'firing', 1)]
>>> lc.update([rec("resolved", t0 + 60)])
>>> lc.advance(t0 + 400)         # still within keep_firing_for: nothing yet
[]
>>> [(n.key[-2:], n.status) for n in lc.advance(t0 + 660)]
[('-2', 'resolved')]
>>> sorted(lc.snapshot())[0].startswith(Lifecycle.STATE_PREFIX)
True
"""

from __future__ import annotations

import hashlib
import heapq
import logging
import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from alerts.notification import AlertItem, Notification, episode_id, record_from_json
from alerts.silences import Silence, silenced_by
from monitor.alert_record import AlertRecord, iso_utc, parse_iso
from monitor.config import LifecycleConfig
from monitor.versioned import require_version

__all__ = ["BASELINE_ACCEPTED", "EpisodeRow", "Lifecycle", "group_id"]

BASELINE_ACCEPTED = "baseline accepted"
"""``details["reason_resolved"]`` of a resolve the operator asked for: no hysteresis hold."""

_KIND = "alert_group"
_META_KIND = "alert_lifecycle"
_META_KEY = "alerts/lifecycle"
_VERSION = 1

log = logging.getLogger(__name__)


def group_id(group: dict[str, str]) -> str:
    """Stable id of a group: sha256 of its canonical JSON, 16 hex digits.

    >>> group_id({"route": "code"}) == group_id({"route": "code"})
    True
    >>> len(group_id({"route": "code"}))
    16
    """
    return hashlib.sha256(orjson.dumps(group, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def _dt(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


@dataclass(frozen=True, slots=True)
class EpisodeRow:
    """One episode as the store's episode table shows it (latest state wins).

    ``state`` is ``pending``/``firing``/``resolving`` while open, then ``resolved`` or
    ``dropped`` (cleared before ``min_firing``: nobody was ever told). ``resolved_at`` is the
    event time the condition cleared; ``updated_at`` the event time of the change (the record's
    or the timer's that made it). ``silenced_by`` is the id of the silence holding back the
    episode's announcement (or, once announced, a reminder that was due).
    """

    episode: str
    fingerprint: str
    group: dict[str, str]
    rule: str
    severity: str
    route: str
    labels: dict[str, str]
    summary: str
    details: dict[str, Any]
    state: str
    started_at: datetime
    updated_at: datetime
    resolved_at: datetime | None
    notified: bool
    silenced_by: int | None


class _Alert:
    """One fingerprint's open episode (an inactive alert has no object at all)."""

    __slots__ = (
        "announced", "cleared_at", "episode", "fingerprint", "last_notified", "notified",
        "phase", "record", "resolved", "silence_counted", "silenced_by", "skip_hold",
        "started", "started_at",
    )

    def __init__(self, record: AlertRecord) -> None:
        self.fingerprint = record.fingerprint
        self.record = record                   # latest firing record
        self.started_at = record.at
        self.started = record.at.timestamp()
        self.episode = episode_id(self.fingerprint, record.at)
        self.phase = "pending"
        self.resolved: AlertRecord | None = None   # latest resolved record while resolving
        self.cleared_at: float | None = None
        self.skip_hold = False
        # announced: its firing item was made due (buffered or sent); notified: it was sent.
        # The gap between the two is what a resolve in the same buffer collapses.
        self.announced = False
        self.notified = False
        self.last_notified: float | None = None
        self.silenced_by: int | None = None
        self.silence_counted = False

    def item(self, *, repeat: bool = False) -> AlertItem:
        return AlertItem(self.record, "firing", self.episode, self.started_at, repeat)

    def to_json(self) -> dict[str, Any]:
        return {
            "record": self.record.to_json(), "started_at": iso_utc(self.started_at),
            "phase": self.phase,
            "resolved": None if self.resolved is None else self.resolved.to_json(),
            "cleared_at": self.cleared_at, "skip_hold": self.skip_hold,
            "announced": self.announced, "notified": self.notified,
            "last_notified": self.last_notified, "silenced_by": self.silenced_by,
            "silence_counted": self.silence_counted,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> _Alert:
        a = cls(record_from_json(data["record"]))
        # the episode is named after its first firing record, not the latest one
        a.started_at = parse_iso(data["started_at"])
        a.started = a.started_at.timestamp()
        a.episode = episode_id(a.fingerprint, a.started_at)
        a.phase = data["phase"]
        a.resolved = None if data["resolved"] is None else record_from_json(data["resolved"])
        a.cleared_at = data["cleared_at"]
        a.skip_hold = bool(data["skip_hold"])
        a.announced = bool(data["announced"])
        a.notified = bool(data["notified"])
        a.last_notified = data["last_notified"]
        a.silenced_by = data["silenced_by"]
        a.silence_counted = bool(data["silence_counted"])
        return a


class _Group:
    """A group's open episodes, its buffer of due items and its notification sequence.

    Kept for good once created, even empty: ``seq`` must never restart, or a later
    notification would reuse the key of an earlier one. ``out`` holds the notifications it
    sent (flushed) that no :meth:`Lifecycle.advance` handed out yet, with their flush times.
    """

    __slots__ = ("alerts", "buffer", "flush_at", "gid", "labels", "last_flush", "out", "seq")

    def __init__(self, gid: str, labels: dict[str, str]) -> None:
        self.gid = gid
        self.labels = labels
        self.alerts: dict[str, _Alert] = {}
        self.buffer: list[AlertItem] = []
        self.flush_at: float | None = None
        self.last_flush: float | None = None
        self.seq = 1                           # of the next notification
        self.out: list[tuple[float, int, Notification]] = []

    def ordered(self) -> list[_Alert]:
        # A canonical order, not dict order: a restored lifecycle must decide alerts in the
        # same order as the one that never stopped.
        return sorted(self.alerts.values(), key=lambda a: (a.started, a.fingerprint))

    def routes(self) -> set[str]:
        """The routes this group's alerts are about."""
        if "route" in self.labels:
            return {self.labels["route"]}
        return {a.record.labels.get("route", "") for a in self.alerts.values()}

    def has_open_notified(self) -> bool:
        return any(a.notified for a in self.alerts.values())

    def buffered(self, episode: str) -> bool:
        return any(i.episode == episode for i in self.buffer)

    def to_json(self, clock: float | None) -> dict[str, Any]:
        return {
            "kind": _KIND, "version": _VERSION, "gid": self.gid, "group": dict(self.labels),
            "seq": self.seq, "last_flush": self.last_flush, "flush_at": self.flush_at,
            "clock": clock, "buffer": [i.to_json() for i in self.buffer],
            "alerts": [self.alerts[fp].to_json() for fp in sorted(self.alerts)],
            "out": [{"at": t, "seq": seq, "notification": n.to_json()}
                    for t, seq, n in self.out],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> _Group:
        require_version(data, _KIND, _VERSION)
        g = cls(data["gid"], dict(data["group"]))
        g.seq = int(data["seq"])
        g.last_flush = data["last_flush"]
        g.flush_at = data["flush_at"]
        g.buffer = [AlertItem.from_json(i) for i in data["buffer"]]
        for raw in data["alerts"]:
            a = _Alert.from_json(raw)
            g.alerts[a.fingerprint] = a
        g.out = [(o["at"], int(o["seq"]), Notification.from_json(o["notification"]))
                 for o in data.get("out", ())]
        return g


def _silence_from_json(data: dict[str, Any]) -> Silence:
    return Silence(int(data["id"]), data["route"], data["rule"], parse_iso(data["starts_at"]),
                   parse_iso(data["ends_at"]), data["reason"], data.get("created_by", ""))


class Lifecycle:
    """Condition records in (:meth:`update`), notifications out (:meth:`advance`).

    Parameters
    ----------
    config : LifecycleConfig
        Grouping labels and timings (per-rule overrides through ``config.timing``).
    wall : callable, optional
        The wall clock, read only when a notification goes out. The next reminder of an
        episode is then due ``repeat_interval`` after the later of the notification's event
        time and the wall-clock time it went out, so a stretch of time the lifecycle catches
        up on (a backlog months old, a restart after a long stop: the clock jumps) sends at
        most one reminder per episode instead of one per ``repeat_interval`` of that
        stretch. Live, event time and the wall clock agree and nothing changes. ``None``
        (a backtest): reminders in event time alone, as if delivered when decided.

    Notes
    -----
    State lives per group and leaves through :meth:`snapshot` (only the groups that
    changed) under ``STATE_PREFIX + gid``, plus the silences last passed to :meth:`advance`
    under ``alerts/lifecycle`` (when they changed); :meth:`load` takes them back.
    ``suppressed`` counts what was held back, by reason: ``short`` (cleared before
    ``min_firing``), ``silenced`` (once per episode), ``flap`` (fired again within
    ``keep_firing_for``: the same episode continues) and ``collapsed`` (fired, cleared and
    held out before its group's notification went out, in event time: nothing to tell). It
    is a process counter, not restored.

    Every timer is decided at its own event time, before any record that is later (see the
    module docstring). So the notifications do not depend on how records are batched nor on
    when ``advance`` is called, as long as records come in event-time order and no
    ``advance`` goes past a record still to come. One that did (a wall-clock tick ahead of a
    backlog) has decided the timers up to its ``now`` without those records; they are then
    applied at their own times all the same, and what they make due is decided at its own
    time too, earlier than the tick.

    Silences are those of the latest :meth:`advance`: records applied by :meth:`update`
    before it are decided against the previous ones.

    In a consumer group each group is timed by the one process that reads its route
    (``group_by`` always holds ``route``): :meth:`load` with ``owns`` keeps the other
    groups aside, untimed and unsent, and takes one over once its route is read here (a
    record of it arrives, or ``owns`` says so at an :meth:`update` or :meth:`advance`: the
    route moved to this process), so its timers and notification sequence go on instead of
    restarting at a key already used.
    """

    STATE_PREFIX = "alerts/group/"

    def __init__(self, config: LifecycleConfig, wall: Callable[[], float] | None = None) -> None:
        self.config = config
        self._wall = wall
        self.loaded = False
        self.suppressed: Counter[str] = Counter()
        self._groups: dict[str, _Group] = {}
        self._where: dict[str, str] = {}          # fingerprint -> gid of its open episode
        # Stored groups of routes another process reads, and their open fingerprints.
        self._aside: dict[str, _Group] = {}
        self._aside_where: dict[str, str] = {}
        self._owns: Callable[[str], bool] | None = None
        self._clock: float | None = None          # the largest time seen
        self._now: float | None = None            # the event time being decided
        self._silences: tuple[Silence, ...] = ()
        self._silences_dirty = False
        self._dirty: set[str] = set()
        self._episodes: dict[str, EpisodeRow] = {}

    # -- state ---------------------------------------------------------------------------------

    def load(
        self, states: dict[str, Any], owns: Callable[[str], bool] | None = None
    ) -> None:
        """Restore every group stored under ``STATE_PREFIX`` and the silences (other keys are
        not ours). With ``owns``, only the groups whose routes it owns: in a consumer group,
        each route's timers run in the one process that reads the route."""
        self._reset()
        self._owns = owns
        for key, data in states.items():
            if key == _META_KEY:
                require_version(data, _META_KIND, _VERSION)
                self._silences = tuple(_silence_from_json(s) for s in data["silences"])
                continue
            if not key.startswith(self.STATE_PREFIX):
                continue
            g = _Group.from_json(data)
            if owns is not None and not all(owns(r) for r in g.routes()):
                self._aside[g.gid] = g
                for fp in g.alerts:
                    self._aside_where[fp] = g.gid
                continue
            self._groups[g.gid] = g
            for fp in g.alerts:
                self._where[fp] = g.gid
            clock = data.get("clock")
            if clock is not None and (self._clock is None or clock > self._clock):
                self._clock = clock
        self.loaded = True

    @property
    def pending(self) -> bool:
        """State changed since the last :meth:`snapshot`."""
        return bool(self._dirty) or self._silences_dirty

    @property
    def clock(self) -> float | None:
        """The lifecycle's clock (epoch seconds), ``None`` before any input."""
        return self._clock

    @property
    def silences(self) -> tuple[Silence, ...]:
        """The silences of the latest :meth:`advance` (or restored by :meth:`load`)."""
        return self._silences

    def snapshot(self) -> dict[str, Any]:
        """Snapshots of the groups changed since the last call, keyed for the state table."""
        out: dict[str, Any] = {self.STATE_PREFIX + gid: self._groups[gid].to_json(self._clock)
                               for gid in sorted(self._dirty)}
        if self._silences_dirty:
            out[_META_KEY] = {"kind": _META_KIND, "version": _VERSION,
                              "silences": [s.to_json() for s in self._silences]}
        self._dirty.clear()
        self._silences_dirty = False
        return out

    def drop_all(self) -> None:
        """Forget everything in memory (after a fenced checkpoint); reload before use."""
        self._reset()
        self.loaded = False

    def _reset(self) -> None:
        self._groups.clear()
        self._where.clear()
        self._aside.clear()
        self._aside_where.clear()
        self._owns = None
        self._dirty.clear()
        self._episodes.clear()
        self._clock = self._now = None
        self._silences = ()
        self._silences_dirty = False

    def firing(self) -> list[tuple[str, str, str]]:
        """(rule, route, severity) of each open episode that fired: firing, or cleared and
        still held for keep_firing_for (its resolve is not out yet)."""
        return [(a.record.rule, a.record.labels.get("route", ""), a.record.severity)
                for g in self._groups.values() for a in g.alerts.values()
                if a.phase in ("firing", "resolving")]

    def episodes_changed(self) -> list[EpisodeRow]:
        """Episode rows changed since the last call, the latest state of each."""
        out = list(self._episodes.values())
        self._episodes.clear()
        return out

    # -- input ---------------------------------------------------------------------------------

    def update(self, records: Iterable[AlertRecord]) -> None:
        """Apply condition changes, in decision order.

        Each record is applied at its event time, after every timer due by then: what those
        send waits in the lifecycle for the next :meth:`advance`.
        """
        if self._aside:
            self._adopt()
        for r in records:
            t = r.at.timestamp()
            if self._aside:
                self._take_over_for(r)  # before its timers are decided up to ``t``
            self._run_until(t)
            self._tick(t)
            self._now = t
            fp = r.fingerprint
            gid = self._where.get(fp)
            if r.state == "firing":
                self._on_firing(r, t, gid)
            elif gid is not None:
                self._on_resolved(r, t, self._groups[gid], self._groups[gid].alerts[fp])
            # a resolve of an alert with no open episode has nothing to update

    def _on_firing(self, r: AlertRecord, t: float, gid: str | None) -> None:
        if gid is not None:
            g = self._groups[gid]
            a = g.alerts[r.fingerprint]
            if a.phase != "resolving":
                a.record = r                   # duplicate: newer summary/details only
                self._changed(g, a)
                return
            _, keep, _ = self.config.timing(r.rule)
            assert a.cleared_at is not None
            if not a.skip_hold and t < a.cleared_at + keep:
                # back within the hold: the same episode goes on, and nobody hears of it
                a.phase, a.record, a.resolved, a.cleared_at = "firing", r, None, None
                self.suppressed["flap"] += 1
                self._changed(g, a)
                # firing again now: announced now if it never was and no silence holds it,
                # a reminder now if one fell due during the hold
                self._decide(g, a, t)
                return
            # The hold ran out before this record but was not decided (a state stored by an
            # earlier version): the old episode ends here, then a new one starts.
            self._finish(g, a, t)
        labels = {k: r.labels.get(k, "") for k in self.config.group_by}
        gid = group_id(labels)
        g = self._groups.get(gid)
        if g is None:
            g = self._groups[gid] = _Group(gid, labels)
        a = _Alert(r)
        g.alerts[a.fingerprint] = a
        self._where[a.fingerprint] = gid
        self._changed(g, a)

    def _take_over_for(self, r: AlertRecord) -> None:
        """A group set aside at :meth:`load` gets a record here: its route's events now
        arrive at this process, which times the group from its stored state on."""
        gid = self._aside_where.get(r.fingerprint)
        if gid is None and r.state == "firing":
            gid = group_id({k: r.labels.get(k, "") for k in self.config.group_by})
        if gid is not None and gid in self._aside:
            self._take_over(gid)

    def _adopt(self) -> None:
        """Take over the groups set aside whose routes are read here by now, records or
        not: a route that moved with an episode resolving or a flush pending has timers
        due all the same."""
        owns = self._owns
        if owns is None:
            return
        for gid in [gid for gid, g in self._aside.items() if all(owns(r) for r in g.routes())]:
            self._take_over(gid)

    def _take_over(self, gid: str) -> None:
        g = self._aside.pop(gid)
        for fp in g.alerts:
            self._aside_where.pop(fp, None)
            self._where[fp] = gid
        self._groups[gid] = g
        self._dirty.add(gid)
        log.warning("alert group %s (%s) taken over from another process", gid, g.labels)

    def _on_resolved(self, r: AlertRecord, t: float, g: _Group, a: _Alert) -> None:
        skip = r.details.get("reason_resolved") == BASELINE_ACCEPTED
        if a.phase == "resolving":
            a.resolved = r                     # duplicate: newer summary/details only
            if skip and not a.skip_hold:
                # ... but an operator's accept still counts: the hold ends now
                a.skip_hold, a.cleared_at = True, t
            self._changed(g, a)
            return
        if a.phase == "pending":
            min_firing, _, _ = self.config.timing(r.rule)
            if t < a.started + min_firing:
                a.resolved = r
                self._remove(g, a)
                self.suppressed["short"] += 1
                self._row(g, a, "dropped")
                return
            # It held for min_firing but the promotion was not decided (a state stored by an
            # earlier version): it goes on as a firing episode that cleared.
        a.phase, a.resolved, a.cleared_at, a.skip_hold = "resolving", r, t, skip
        self._changed(g, a)

    # -- deciding ------------------------------------------------------------------------------

    def advance(self, now: float, silences: Sequence[Silence] = ()) -> list[Notification]:
        """Decide every timer due by the clock under ``silences``; return what was sent since
        the last call, in (flush time, group) order.

        The clock moves on to ``now`` (epoch seconds) if that is later: it is the largest of
        every ``now`` and every record's time.
        """
        if math.isfinite(now):             # -inf: "no clock yet" from a caller; not a time
            self._tick(now)
        silences = tuple(silences)
        if silences != self._silences:
            self._silences = silences
            self._silences_dirty = True
        if self._aside:
            self._adopt()
        if self._clock is None:
            return []                          # nothing seen, nothing can be due
        self._run_until(self._clock)
        out: list[tuple[float, str, int, Notification]] = []
        for gid in sorted(self._groups):
            g = self._groups[gid]
            if g.out:
                out.extend((t, gid, seq, n) for t, seq, n in g.out)
                g.out = []
                self._dirty.add(gid)
        out.sort(key=lambda x: x[:3])
        return [n for *_, n in out]

    def _run_until(self, until: float) -> None:
        """Decide every timer due at or before ``until``, each at its own time, in order:
        the groups due at the earliest deadline, in group id order, then the next.

        Each group's deadline is computed once and again only after the group is decided:
        deciding one group changes no other's (nor the clock or the silences it reads), and
        a scan of every group per distinct deadline was quadratic in open alerts.
        """
        heap = [(t, gid) for gid, g in self._groups.items()
                if (t := self._deadline(g)) is not None and t <= until]
        heapq.heapify(heap)
        while heap:
            d = heap[0][0]
            due: list[str] = []             # popped by (deadline, group id): in id order
            while heap and heap[0][0] == d:
                due.append(heapq.heappop(heap)[1])
            self._now = d
            for gid in due:
                g = self._groups[gid]
                for a in g.ordered():
                    self._decide(g, a, d)
                if g.flush_at is not None and g.flush_at <= d and g.buffer:
                    g.out.append((d, g.seq, self._flush(g, d)))
                after = self._deadline(g)
                if after is not None and after <= d:
                    # A timer that stays due once decided would never let time move on. It
                    # cannot happen (each one is decided by the test it is computed from);
                    # should it, the group waits for the next call rather than hang here.
                    log.error("alert group %s: timer at %s still due after deciding it",
                              g.gid, iso_utc(_dt(d)))
                elif after is not None and after <= until:
                    heapq.heappush(heap, (after, gid))

    def _deadline(self, g: _Group) -> float | None:
        """The earliest time something is due in ``g`` (``None``: nothing will be)."""
        best = g.flush_at if g.buffer else None
        for a in g.alerts.values():
            t = self._alert_deadline(g, a)
            if t is not None and (best is None or t < best):
                best = t
        return best

    def _alert_deadline(self, g: _Group, a: _Alert) -> float | None:
        # Each mirrors a test of _decide with the same arithmetic: a timer computed as due
        # at d is decided as due at d, so deciding it always moves it on.
        min_firing, keep, repeat = self.config.timing(a.record.rule)
        if a.phase == "pending":
            return a.started + min_firing
        if not a.announced and a.silenced_by is None:
            return self._clock                 # only from a state of an earlier version
        if a.phase == "resolving":
            assert a.cleared_at is not None
            return a.cleared_at if a.skip_hold else a.cleared_at + keep
        if a.silenced_by is not None:          # firing, held back: until the silence ends
            return self._silence_end(a.silenced_by)
        if a.notified and a.last_notified is not None and not g.buffered(a.episode):
            return a.last_notified + repeat    # the next reminder
        return None                            # announced, in the buffer: the flush decides

    def _silence_end(self, sid: int) -> float | None:
        for s in self._silences:
            if s.id == sid:
                return s.ends_at.timestamp()
        return self._clock                     # no longer passed (expired): decide it now

    def _decide(self, g: _Group, a: _Alert, c: float) -> None:
        silences, at = self._silences, _dt(c)
        min_firing, keep, repeat = self.config.timing(a.record.rule)
        if a.phase == "pending" and c >= a.started + min_firing:
            a.phase = "firing"
            self._changed(g, a)
        # A firing episode nobody was told of is announced as soon as no silence holds it.
        # A resolving one only if it never met the silences (a state of an earlier version,
        # which promoted only at an advance); one silenced and then cleared stays untold.
        if not a.announced and (a.phase == "firing" or
                                (a.phase == "resolving" and a.silenced_by is None)):
            s = silenced_by(silences, a.record.rule, a.record.labels, at)
            if s is not None:
                self._silence(g, a, s)
            else:
                a.announced, a.silenced_by = True, None
                self._due(g, a.item(), c)
                self._changed(g, a)
        elif a.phase == "firing" and a.notified:
            due = (a.last_notified is not None and c >= a.last_notified + repeat
                   and not g.buffered(a.episode))
            # silences are looked at when a reminder is due, and while one holds it back
            if due or a.silenced_by is not None:
                s = silenced_by(silences, a.record.rule, a.record.labels, at)
                if s is not None:
                    self._silence(g, a, s)     # no reminders while silenced
                else:
                    if a.silenced_by is not None:
                        a.silenced_by = None
                        self._changed(g, a)
                    if due:                    # one as soon as the silence ends
                        self._due(g, a.item(repeat=True), c)
        if a.phase == "resolving":
            assert a.cleared_at is not None
            if c >= (a.cleared_at if a.skip_hold else a.cleared_at + keep):
                self._finish(g, a, c)

    def _silence(self, g: _Group, a: _Alert, s: Silence) -> None:
        if not a.silence_counted:
            a.silence_counted = True
            self.suppressed["silenced"] += 1
        if a.silenced_by != s.id:
            a.silenced_by = s.id
            self._changed(g, a)

    def _finish(self, g: _Group, a: _Alert, c: float) -> None:
        """End an episode whose hold ran out: its resolve is due if it was announced."""
        assert a.resolved is not None
        if a.announced:
            # Silences never hold back the resolve of an announced episode. Due while the
            # episode still counts as open: the group has news out, so group_interval applies.
            self._due(g, AlertItem(a.resolved, "resolved", a.episode, a.started_at), c)
        elif a.silenced_by is None:
            self.suppressed["collapsed"] += 1  # only from a state of an earlier version
        self._remove(g, a)
        self._row(g, a, "resolved")

    def _due(self, g: _Group, item: AlertItem, c: float) -> None:
        """Put an item into its group's buffer, collapsing what it makes moot."""
        buf = g.buffer
        for i, old in enumerate(buf):
            if old.episode != item.episode:
                continue
            if old.repeat:
                del buf[i]                     # a reminder is replaced by anything newer
                break
            if old.status == "firing" and item.status == "resolved":
                # Fired and resolved before anyone was told: tell nothing. The episode is
                # gone already (resolve), so "never notified" needs no flag change.
                del buf[i]
                self.suppressed["collapsed"] += 1
                if not buf:
                    g.flush_at = None
                self._dirty.add(g.gid)
                return
        if g.flush_at is None:
            if g.last_flush is None or not g.has_open_notified():
                g.flush_at = c + self.config.group_wait
            else:
                g.flush_at = max(c, g.last_flush + self.config.group_interval)
        buf.append(item)
        self._dirty.add(g.gid)

    def _flush(self, g: _Group, c: float) -> Notification:
        items = tuple(g.buffer)
        sent = {i.episode for i in items}
        active = tuple(a.item() for a in g.ordered() if a.notified and a.episode not in sent)
        n = Notification(f"{g.gid}-{g.seq}", dict(g.labels), _dt(c), items, active)
        for i in items:
            if i.status != "firing":
                continue
            a = g.alerts.get(i.fingerprint)
            # a firing item in the buffer always has its episode open (a resolve collapses)
            if a is not None and a.episode == i.episode:
                # The reminder clock starts when the news really went out: in a catch-up the
                # event time ``c`` lags the wall clock by the whole stretch still to decide.
                a.last_notified = c if self._wall is None else max(c, self._wall())
                if not a.notified:
                    a.notified = True
                    self._changed(g, a)
        g.seq += 1
        g.last_flush = c
        g.buffer = []
        g.flush_at = None
        self._dirty.add(g.gid)
        return n

    # -- bookkeeping ---------------------------------------------------------------------------

    def _tick(self, t: float) -> None:
        if self._clock is None or t > self._clock:
            self._clock = t

    def _remove(self, g: _Group, a: _Alert) -> None:
        del g.alerts[a.fingerprint]
        del self._where[a.fingerprint]
        self._dirty.add(g.gid)

    def _changed(self, g: _Group, a: _Alert) -> None:
        self._dirty.add(g.gid)
        self._row(g, a, a.phase)

    def _row(self, g: _Group, a: _Alert, state: str) -> None:
        latest = a.resolved if a.resolved is not None else a.record
        now = self._now if self._now is not None else self._clock
        assert now is not None
        ended = state in ("resolved", "dropped")
        self._episodes[a.episode] = EpisodeRow(
            episode=a.episode, fingerprint=a.fingerprint, group=dict(g.labels),
            rule=latest.rule, severity=latest.severity, route=latest.labels["route"],
            labels=dict(latest.labels), summary=latest.summary, details=dict(latest.details),
            state=state, started_at=a.started_at, updated_at=_dt(now),
            resolved_at=latest.at if ended else None, notified=a.notified,
            silenced_by=a.silenced_by,
        )
