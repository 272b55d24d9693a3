"""Event time against the clock: which events are dated too far in the future to count.

One event with a wrong clock must not decide what counts after it: the newest event time of a
partition is its watermark (older events are late), so an event dated 2099 would make every
later valid event late, and the stored watermark would carry that into the next run. The
pipeline therefore asks a :class:`FutureRule` about every event before it may count, and an
event refused as *future* is dead-lettered and moves nothing (watermark, dedup horizon,
detector clocks, staleness sweeps: they all only ever see counted events).

- **The daemon** (:class:`WallClock`): an event more than ``max_future_skew`` ahead of the
  wall clock is future.
- **A replay with** ``--now`` (:class:`FixedNow`): the same against the time given.
- **A replay** (:class:`PlausibleTime`): a file has no "now" of its own, and a year-old file
  replayed today is all valid. Its reference is the *newest plausible time* of the file so
  far: the newest event time counted (the watermark). An event beyond that plus the skew
  counts only when the input that follows supports it: more than half of the next
  :data:`LOOKAHEAD` messages holding valid events, and at least :data:`MIN_SUPPORT` of
  them, reach its time minus the tolerance (the larger of the skew and the lateness
  allowance: a stream is never more disordered than that, or its events would be late
  anyway). A trace that resumes after a quiet night goes on from the new time, so every
  message after the gap supports the first one; an outlier is followed by events of the old
  time, so almost none do. A few outliers in a row (fewer than half the window) are refused
  together. Before anything was counted (no reference yet), an input too short to give
  :data:`MIN_SUPPORT` supporters is taken unless what follows contradicts it. The cost:
  messages are read ahead until :data:`LOOKAHEAD` with valid events follow the one counted
  (each parsed once), and a trace whose last :data:`MIN_SUPPORT` messages or fewer come
  after a gap longer than the skew has them refused, since nothing follows to support them.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

from monitor.telemetry.event import Event, Rejection
from monitor.telemetry.serialize import format_ts as _iso

__all__ = [
    "LOOKAHEAD",
    "MAX_HELD_BYTES",
    "MAX_HELD_LINES",
    "MIN_SUPPORT",
    "FixedNow",
    "FutureRule",
    "Lookahead",
    "PlausibleTime",
    "WallClock",
    "newest_time",
]

LOOKAHEAD = 16  # messages with valid events read ahead of the one being counted (replay)
MAX_HELD_LINES = 1024  # ... and at most this many lines held in all
MAX_HELD_BYTES = 32 << 20
MIN_SUPPORT = 3  # following messages that must reach an event's time, at the least


class FutureRule(Protocol):
    """Decides which events are too far ahead to count."""

    skew: float
    #: ``True`` when :meth:`limit` is ``newest + skew``: the hot path then adds instead of
    #: calling (it runs once per message).
    relative: bool

    def limit(self, newest: float) -> float:
        """The latest event time that counts without question, for one message; ``newest``
        is the newest event time counted in its partition."""
        ...

    def refuses(self, ts: float, newest: float) -> str | None:
        """For an event beyond :meth:`limit`: the ``future: ...`` reason, or ``None`` when
        it counts after all (its time is then the newest)."""
        ...


class WallClock:
    """The daemon's rule: nothing counts more than ``skew`` ahead of the wall clock."""

    relative = False

    def __init__(self, skew: float, wall: Callable[[], float] = time.time) -> None:
        self.skew = skew
        self._wall = wall
        self._now = 0.0

    def limit(self, newest: float) -> float:
        self._now = self._wall()  # once per message: the hot path only compares
        return self._now + self.skew

    def refuses(self, ts: float, newest: float) -> str | None:
        return (f"future: event time {ts:.3f} ({_iso(ts)}) is {ts - self._now:.0f}s ahead of "
                f"the wall clock (allowance {self.skew:.0f}s)")


class FixedNow:
    """``replay --now``: the file is judged as if the wall clock read ``now``."""

    relative = False

    def __init__(self, now: float, skew: float) -> None:
        self.now, self.skew = now, skew

    def limit(self, newest: float) -> float:
        return self.now + self.skew

    def refuses(self, ts: float, newest: float) -> str | None:
        return (f"future: event time {ts:.3f} ({_iso(ts)}) is {ts - self.now:.0f}s ahead of "
                f"--now {_iso(self.now)} (allowance {self.skew:.0f}s)")


class PlausibleTime:
    """A replay's rule (see the module docstring): :attr:`ahead` holds the newest event time
    of each message with valid events read after the one being counted, oldest first
    (:class:`Lookahead` keeps it)."""

    relative = True

    def __init__(self, skew: float, lateness: float) -> None:
        self.skew = skew
        self.tolerance = max(skew, lateness)
        self.ahead: deque[float] = deque()

    def limit(self, newest: float) -> float:
        return newest + self.skew

    def refuses(self, ts: float, newest: float) -> str | None:
        floor = ts - self.tolerance
        timed = len(self.ahead)
        support = sum(1 for t in self.ahead if t >= floor)
        if 2 * support > timed and (support >= MIN_SUPPORT or newest == float("-inf")):
            # Supported; or the input ends before enough can follow, nothing contradicts
            # it, and nothing was counted yet that it could make late.
            return None
        if timed == 0 and newest == float("-inf"):
            return None  # the only valid message of the input: nothing to judge it by
        where = ("" if newest == float("-inf") else
                 f" is {ts - newest:.0f}s ahead of the newest event of the file "
                 f"({_iso(newest)}) and")
        return (f"future: event time {ts:.3f} ({_iso(ts)}){where} only {support} of the next "
                f"{timed} messages reach it (allowance {self.skew:.0f}s)")


Parsed = tuple[list[Event], list[Rejection]]


class _Process(Protocol):
    def __call__(self, partition: int, offset: int, raw: bytes, key: bytes | None = None,
                 *, parsed: Parsed | None = None) -> None: ...


class Lookahead:
    """Hands messages to ``process`` behind the reader, each parsed once by ``parse``, so
    that ``rule`` sees the times of the :data:`LOOKAHEAD` messages with valid events that
    follow the one counted (``rule`` ``None``: no look ahead, each message goes straight
    to ``process``). Invalid lines in between are held too, up to :data:`MAX_HELD_LINES`
    lines and :data:`MAX_HELD_BYTES` bytes in all.

    Only a message the rule may have to judge is held: one dated beyond ``rule.limit`` of
    the newest event counted so far (``newest()``). While nothing is held, a message within
    the limit goes straight through, and once every held message is within it they all do:
    their events never meet the rule, so reading ahead for them would only cost time.

    Messages held here are not counted yet, so a checkpoint stores none of them: after a
    crash they are read again. :meth:`drain` before the last checkpoint.
    """

    def __init__(self, rule: PlausibleTime | None, parse: Callable[[bytes], Parsed],
                 process: _Process, partition: int,
                 newest: Callable[[], float] = lambda: float("-inf")) -> None:
        self.rule, self._parse, self._process, self._partition = rule, parse, process, partition
        self._newest = newest
        #: messages read but not counted yet, oldest first (empty: the reader may count the
        #: next one straight away when it is within the limit)
        self.held: deque[tuple[int, bytes, Parsed, float | None]] = deque()
        self._bytes = 0

    def feed(self, offset: int, raw: bytes) -> None:
        rule = self.rule
        if rule is None:  # a rule that needs no look ahead: straight through
            self._process(self._partition, offset, raw)
            return
        parsed = self._parse(raw)
        newest = newest_time(parsed[0])
        if not self.held and (newest is None or newest <= self._newest() + rule.skew):
            self._process(self._partition, offset, raw, parsed=parsed)  # nothing to judge
            return
        self.hold(offset, raw, parsed, newest)

    def hold(self, offset: int, raw: bytes, parsed: Parsed, newest: float | None) -> None:
        """:meth:`feed`'s slow path, for a reader that does the fast one itself: ``raw``,
        parsed, with its newest event time, when something is held or it is beyond the
        limit."""
        rule = self.rule
        assert rule is not None
        held = self.held
        held.append((offset, raw, parsed, newest))
        self._bytes += len(raw)
        if newest is not None:
            rule.ahead.append(newest)
        while held and (len(rule.ahead) - (held[0][3] is not None) >= LOOKAHEAD
                        or len(held) > MAX_HELD_LINES or self._bytes > MAX_HELD_BYTES):
            self._next()
        if held:
            limit = rule.limit(self._newest())
            if all(t is None or t <= limit for *_, t in held):
                self.drain()  # nothing held is beyond the limit any more

    def drain(self) -> None:
        while self.held:
            self._next()

    def _next(self) -> None:
        offset, raw, parsed, newest = self.held.popleft()
        self._bytes -= len(raw)
        if newest is not None:
            self.rule.ahead.popleft()  # type: ignore[union-attr]  # now: what comes after it
        self._process(self._partition, offset, raw, parsed=parsed)


def newest_time(events: list[Event]) -> float | None:
    """The newest event time of one parsed message (``None``: no valid event)."""
    if not events:
        return None
    if len(events) == 1:
        return events[0].ts
    return max(e.ts for e in events)
