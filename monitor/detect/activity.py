"""Is the route's speculation alive? Rules ``memory_contention``, ``telemetry_stale`` and
``speculation_inactive``.

All three count requests, not tokens, over event-time windows; none of them computes an
acceptance rate. Requests that drafted nothing are counted as such (their share is reported)
and never as a rate of zero.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from monitor.detect.base import CHANGED, FIRING, ConditionDetector, field, nested
from monitor.detect.windows import BucketRing
from monitor.telemetry.event import Event

__all__ = ["ContentionMonitor", "InactivityMonitor", "StalenessMonitor"]


class ContentionMonitor(ConditionDetector):
    """Share of a route's draft-model requests whose draft was evicted or reloaded.

    Parameters
    ----------
    threshold : float
        Fires when the window's share of ``draft_evicted`` requests exceeds it (5 %).
    window : float
        Sliding event-time window in seconds.
    min_requests : int
        Draft-model requests the window needs before anything is decided.
    min_evicted : int
        Evicted requests the window needs to fire: a handful of evictions on a quiet route
        is a share, not contention.
    hysteresis : float
        Resolution needs the share back under ``threshold - hysteresis``, so a share that
        hovers at the threshold does not flap.
    bucket : float
        Bucket width of the window, seconds.

    Notes
    -----
    Only requests that report a draft model count: without a draft there is nothing to evict.

    Examples
    --------
    >>> m = ContentionMonitor(min_requests=20)
    >>> def event(i, evicted):
    ...     return Event(f"r{i}", float(i), "chat", "ok", "t", "1", "tok", 10, 50.0,
    ...                  draft_model="d", draft_evicted=evicted)
    >>> for i in range(100):
    ...     m.update(event(i, evicted=i % 10 == 0))        # 10 %
    >>> m.firing, m.share
    (True, 0.1)
    >>> for i in range(100, 800):
    ...     m.update(event(i, evicted=False))
    ...     if m.changed:
    ...         print("resolved at", i)
    resolved at 250
    """

    rule = "memory_contention"
    KIND = "contention"
    PARAMS = {"threshold": float, "window": float, "min_requests": int, "min_evicted": int,
              "hysteresis": float, "bucket": float}
    STATE = (nested("ring", BucketRing), FIRING, CHANGED)

    def __init__(
        self,
        threshold: float = 0.05,
        window: float = 600.0,
        min_requests: int = 50,
        min_evicted: int = 3,
        hysteresis: float = 0.01,
        bucket: float = 60.0,
    ) -> None:
        if not 0.0 <= threshold < 1.0 or not 0.0 <= hysteresis <= threshold:
            raise ValueError("threshold in [0, 1) and hysteresis in [0, threshold] required")
        if min_requests < 1 or min_evicted < 1:
            raise ValueError("min_requests and min_evicted must be >= 1")
        self._set_params(locals())
        self._ring = BucketRing(window, bucket, 2)

    def update(self, event: Event) -> None:
        """Count one request (requests without a draft model only move the window)."""
        if event.draft_model is None:
            self.changed = False
            ring = self._ring
            head = ring.head
            ring.advance(event.ts)
            if ring.head != head:
                # only what left the window can change the decision: the last one stands
                # until then, since it is a function of the window's sums alone
                self._decide()
            return
        self.observe(event.draft_evicted, event.ts)

    def observe(self, evicted: bool, ts: float) -> None:
        """Count one draft-model request at ``ts``, evicted or not."""
        self.changed = False
        ring = self._ring
        b = ring.slot(ts)
        if b is not None:
            s = ring.sums
            b[0] += 1
            s[0] += 1
            if evicted:
                b[1] += 1
                s[1] += 1
        self._decide()

    def update_many(self, events: Sequence[Event]) -> int:
        """Count requests in order until one flips the state; how many were taken.

        Exactly what :meth:`update` on each would do: read ``changed`` (and ``firing``) as
        after :meth:`update`, then call again with the rest. A run of draft-model requests in
        one bucket takes one :meth:`BucketRing.slot` (nothing moves the window meanwhile, so
        it is the same bucket); a request without a draft model moves the window only when it
        opens a newer bucket, and only then is there a decision to make, as in :meth:`update`.
        """
        ring = self._ring
        s = ring.sums
        width = ring.bucket
        # bounds of the bucket of the run (ts / width in [lo, hi)), NaN: no run; end: the
        # newest bucket's upper bound (ts / width below it moves nothing)
        lo = hi = math.nan
        end = math.nan if ring.head is None else float(ring.head + 1)
        b: list[float] | None = None
        min_requests, min_evicted = self.min_requests, self.min_evicted
        threshold, resolve_below = self.threshold, self.threshold - self.hysteresis
        firing = self._firing
        taken = len(events)
        for i, e in enumerate(events):
            q = e.ts / width
            if e.draft_model is None:
                if q < end:
                    continue  # advance() would return at once, and so no decision
                ring.advance(e.ts)
                assert ring.head is not None
                end = float(ring.head + 1)
                lo = hi = math.nan  # the run's bucket may have left the window
            else:
                if not lo <= q < hi:
                    b = ring.slot(e.ts)
                    assert ring.head is not None
                    end = float(ring.head + 1)
                    if b is None:
                        lo = hi = math.nan  # too old: each one counts as dropped
                    else:
                        lo = float(math.floor(q))
                        hi = lo + 1.0
                if b is not None:
                    s[0] += 1
                    b[0] += 1
                    if e.draft_evicted:
                        b[1] += 1
                        s[1] += 1
            # _decide, inlined
            n = s[0]
            if n < min_requests:
                continue
            evicted = s[1]
            if not firing:
                if evicted >= min_evicted and evicted / n > threshold:
                    firing = True
                    taken = i + 1
                    break
            elif evicted / n < resolve_below or evicted == 0:
                firing = False
                taken = i + 1
                break
        self.changed = firing != self._firing
        self._firing = firing
        return taken

    def _decide(self) -> None:
        t = self._ring.sums
        n = t[0]
        if n < self.min_requests:
            return
        evicted = t[1]
        if not self._firing:
            if evicted >= self.min_evicted and evicted / n > self.threshold:
                self._firing = self.changed = True
        elif evicted / n < self.threshold - self.hysteresis or evicted == 0:
            self._firing = False
            self.changed = True

    @property
    def share(self) -> float | None:
        """Share of the window's draft-model requests with ``draft_evicted``."""
        n, evicted = self._ring.sums
        return evicted / n if n else None

    def evidence(self) -> dict[str, Any]:
        n, evicted = self._ring.sums
        return {
            "share": self.share,
            "evicted_requests": int(evicted),
            "requests": int(n),
            "threshold": self.threshold,
            "resolve_below": self.threshold - self.hysteresis,
            "window_s": self.window,
        }



class StalenessMonitor(ConditionDetector):
    """A route that was reporting has sent nothing for ``silence`` seconds.

    Parameters
    ----------
    silence : float
        Seconds without an event after which the route is stale (10 minutes).

    Notes
    -----
    ``update`` takes each event of the route (or its ``ts``); ``tick(now)`` evaluates at
    ``now``: the newest event time of the whole stream in replay, the wall clock when live.
    The monitor keeps no clock of its own. ``now`` never goes back: a smaller value is
    ignored. A late event, whose ``ts`` is older than the newest one already seen, does not
    make a stale route fresh; a new one resolves the condition.

    Examples
    --------
    >>> m = StalenessMonitor(silence=600)
    >>> m.update(1000.0)
    >>> m.tick(1500.0); m.firing
    False
    >>> m.tick(1601.0); m.firing, m.changed, m.evidence()["silent_for_s"]
    (True, True, 601.0)
    >>> m.tick(1700.0); m.changed
    False
    >>> m.update(1650.0); m.firing, m.changed
    (False, True)
    """

    rule = "telemetry_stale"
    KIND = "staleness"
    PARAMS = {"silence": float}
    STATE = (field("last_ts"), field("now"), FIRING, CHANGED)

    def __init__(self, silence: float = 600.0) -> None:
        if not (silence > 0 and math.isfinite(silence)):
            raise ValueError("silence must be a finite number > 0")
        self._set_params(locals())
        self._last_ts: float | None = None
        self._now: float | None = None

    def update(self, event: Event | float) -> None:
        """The route reported an event (an :class:`Event` or its event time)."""
        ts = event.ts if isinstance(event, Event) else float(event)
        self.changed = False
        # _decide inlined: this runs on every event of the route
        last = self._last_ts
        if last is None or ts > last:
            self._last_ts = last = ts
        now = self._now
        if now is None or ts > now:
            self._now = now = ts
        stale = now - last > self.silence
        if stale != self._firing:
            self._firing = stale
            self.changed = True

    def update_many(self, ts: Sequence[float]) -> int:
        """Take event times in order until one flips the state; how many were taken.

        Exactly what :meth:`update` on each would do: read ``changed`` (and ``firing``) as
        after :meth:`update`, then call again with the rest.
        """
        self.changed = False
        last, now = self._last_ts, self._now
        if (last is not None and now is not None and not self._firing
                and now - last <= self.silence):
            # Fresh, and the run cannot make it stale: with M the newest time so far,
            # max(now, M) - max(last, M) never exceeds max(now - last, 0) (rounding is
            # monotone), so no event flips and only the newest time of the run is kept.
            m = max(ts, default=None)
            if m is not None:
                if m > last:
                    self._last_ts = m
                if m > now:
                    self._now = m
            return len(ts)
        for i, t in enumerate(ts):
            # update() on each, but times kept as given, as update() keeps an Event's
            if last is None or t > last:
                self._last_ts = last = t
            if now is None or t > now:
                self._now = now = t
            stale = now - last > self.silence
            if stale != self._firing:
                self._firing = stale
                self.changed = True
                return i + 1
        return len(ts)

    def tick(self, now: float) -> None:
        """Evaluate at time ``now`` (event time in replay, wall clock when live)."""
        self.changed = False
        self._now = now if self._now is None else max(self._now, now)
        self._decide()

    def _decide(self) -> None:
        if self._last_ts is None or self._now is None:
            return
        stale = self._now - self._last_ts > self.silence
        if stale != self._firing:
            self._firing = stale
            self.changed = True

    @property
    def last_ts(self) -> float | None:
        """Newest event time seen on the route."""
        return self._last_ts

    def evidence(self) -> dict[str, Any]:
        silent = None
        if self._last_ts is not None and self._now is not None:
            silent = self._now - self._last_ts
        return {
            "last_event_ts": self._last_ts,
            "now": self._now,
            "silent_for_s": silent,
            "silence_s": self.silence,
        }



_REQ, _NODRAFT, _WITH_DRAFT = range(3)


class InactivityMonitor(ConditionDetector):
    """A route that drafted before, or reports a draft model, drafts nothing over a window.

    Real engines do not fail when the draft model cannot load: they keep serving without
    speculation, every request with nothing drafted and no error (real-engines-on-cpu.md).

    Parameters
    ----------
    window : float
        Event-time seconds the route must go without drafting (10 minutes).
    min_requests : int
        Requests the window needs: a quiet route proves nothing.
    share : float
        Share of the window's requests that must have drafted nothing. 1.0 (all of them) by
        default: n-gram drafting legitimately proposes nothing on many requests (a third of
        them or more), so anything short of "none drafted" is normal there.
    bucket : float
        Bucket width of the window, seconds.

    Notes
    -----
    A route is *eligible* once any of its requests drafted something (remembered for good)
    or while requests in the window report a draft model. It fires when it is eligible, has
    been observed since before the window began (the window is the last ``window / bucket``
    buckets: between ``window - bucket`` and ``window`` seconds), and the window holds at least
    ``min_requests`` requests of which at least ``share`` drafted nothing. It resolves as
    soon as drafting resumes, i.e. the window's no-draft share falls under ``share`` (with
    the default, the first request that drafts anything). Without requests nothing flips.

    Examples
    --------
    >>> m = InactivityMonitor(window=600, min_requests=20)
    >>> def event(i, drafted):
    ...     return Event(f"r{i}", 10.0 * i, "chat", "ok", "t", "1", "tok", 10, 50.0,
    ...                  draft_model="d", has_spec=True, num_speculative_tokens=4,
    ...                  drafted_tokens=drafted)
    >>> for i in range(30):
    ...     m.update(event(i, drafted=8))
    >>> for i in range(30, 200):
    ...     m.update(event(i, drafted=0))
    ...     if m.changed:
    ...         print("fired at", i)
    fired at 84
    >>> m.update(event(200, drafted=8)); m.firing, m.changed
    (False, True)
    """

    rule = "speculation_inactive"
    KIND = "inactivity"
    PARAMS = {"window": float, "min_requests": int, "share": float, "bucket": float}
    STATE = (nested("ring", BucketRing), field("ever_drafted", load=bool), field("first_ts"),
             field("last_drafted_ts"), FIRING, CHANGED)

    def __init__(
        self,
        window: float = 600.0,
        min_requests: int = 20,
        share: float = 1.0,
        bucket: float = 60.0,
    ) -> None:
        if not 0.0 < share <= 1.0:
            raise ValueError("share must be in (0, 1]")
        if min_requests < 1:
            raise ValueError("min_requests must be >= 1")
        self._set_params(locals())
        self._ring = BucketRing(window, bucket, 3)
        self._ever_drafted = False
        self._first_ts: float | None = None
        self._last_drafted_ts: float | None = None

    def update(self, event: Event) -> None:
        """Count one request (a failed one says nothing about drafting: it is skipped)."""
        if event.status != "ok":
            self.changed = False
            return
        self.observe(event.drafted_tokens, event.draft_model is not None, event.ts)

    def observe(self, drafted: int, has_draft_model: bool, ts: float) -> None:
        """Count one request that drafted ``drafted`` tokens at ``ts``."""
        self.changed = False
        if self._first_ts is None:
            self._first_ts = ts
        if drafted > 0:
            self._ever_drafted = True
            if self._last_drafted_ts is None or ts > self._last_drafted_ts:
                self._last_drafted_ts = ts
        ring = self._ring
        s = ring.sums
        b = ring.slot(ts)
        if b is not None:
            b[_REQ] += 1
            s[_REQ] += 1
            if drafted == 0:
                b[_NODRAFT] += 1
                s[_NODRAFT] += 1
            if has_draft_model:
                b[_WITH_DRAFT] += 1
                s[_WITH_DRAFT] += 1

        # the decision, on the window's sums
        n = s[_REQ]
        if n == 0:
            return
        quiet = s[_NODRAFT] >= self.share * n
        if not self._firing:
            # cheapest tests first: a drafting route is not quiet
            if quiet and n >= self.min_requests and (self._ever_drafted or s[_WITH_DRAFT] > 0):
                assert self._first_ts is not None and ring.head is not None
                # observed over the whole window: the route reported before the window began
                if self._first_ts <= (ring.head - ring.size + 1) * self.bucket:
                    self._firing = self.changed = True
        elif not quiet:
            self._firing = False
            self.changed = True

    def update_many(self, events: Sequence[Event]) -> int:
        """Count requests in order until one flips the state; how many were taken.

        Exactly what :meth:`update` on each would do: read ``changed`` (and ``firing``) as
        after :meth:`update`, then call again with the rest. A run of requests in one bucket
        takes one :meth:`BucketRing.slot`: nothing else moves the window meanwhile, so it is
        the same bucket.
        """
        ring = self._ring
        s = ring.sums
        width = ring.bucket
        share, min_requests = self.share, self.min_requests
        # the state in locals, written back once: this runs for every request of a message
        first, ever, last_drafted = self._first_ts, self._ever_drafted, self._last_drafted_ts
        firing = self._firing
        lo = hi = math.nan  # bounds of the run's bucket (ts / width in [lo, hi)); NaN: none
        b: list[float] | None = None
        taken = len(events)
        for i, e in enumerate(events):
            if e.status != "ok":
                continue
            ts = e.ts
            drafted = e.drafted_tokens
            if first is None:
                first = ts
            if drafted > 0:
                ever = True
                if last_drafted is None or ts > last_drafted:
                    last_drafted = ts
            q = ts / width
            if not lo <= q < hi:
                b = ring.slot(ts)
                if b is None:
                    lo = hi = math.nan  # too old: each one counts as dropped
                else:
                    lo = float(math.floor(q))
                    hi = lo + 1.0
            if b is not None:  # the fields _REQ, _NODRAFT, _WITH_DRAFT: no global lookups
                b[0] += 1
                s[0] += 1
                if drafted == 0:
                    b[1] += 1
                    s[1] += 1
                if e.draft_model is not None:
                    b[2] += 1
                    s[2] += 1
            # the decision of observe(), inlined
            n = s[0]
            if n == 0:
                continue
            quiet = s[1] >= share * n
            if firing:
                if not quiet:
                    firing = False
                    taken = i + 1
                    break
            elif quiet and n >= min_requests and (ever or s[2] > 0):
                assert first is not None and ring.head is not None
                if first <= (ring.head - ring.size + 1) * self.bucket:
                    firing = True
                    taken = i + 1
                    break
        self._first_ts, self._ever_drafted, self._last_drafted_ts = first, ever, last_drafted
        self.changed = firing != self._firing
        self._firing = firing
        return taken

    @property
    def no_draft_share(self) -> float | None:
        """Share of the window's requests that drafted nothing (None without requests)."""
        n, nodraft, _ = self._ring.sums
        return nodraft / n if n else None

    def evidence(self) -> dict[str, Any]:
        n, nodraft, with_draft = self._ring.sums
        return {
            "requests": int(n),
            "no_draft_requests": int(nodraft),
            "no_draft_share": self.no_draft_share,
            "share_threshold": self.share,
            "draft_model_requests": int(with_draft),
            "drafted_before": self._ever_drafted,
            "last_drafted_ts": self._last_drafted_ts,
            "window_s": self.window,
        }
