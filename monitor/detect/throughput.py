"""Throughput drop with a flat error rate (rule ``throughput_drop``).

The signature of a stale draft or of memory contention is decode getting slower while requests
keep succeeding. An outage also slows decode, but it raises the error rate: that is not this
rule's business, so the rule is gated on the error rate not having risen significantly.

Model
-----
Per-request decode throughput ``x = output_tokens / ((e2e_ms - ttft_ms) / 1000)`` of the
requests that finished ``ok`` (a failed request's length and time say nothing about decode
speed). A decode step slows as the running batch fills, so per-token time is modelled as
linear in the batch size ``b`` reported by the event:

    time_per_token(b) = t1 * (1 + beta * (b - 1))

``beta`` is fitted on the warm-up (a weighted least-squares line through the medians of
per-token time in groups of nearby batch sizes: medians for robustness, groups so that any
mix of batch sizes works; see :func:`fit_batch_factor`), and every throughput is normalised
to batch 1 before anything else: ``x * (1 + beta * (b - 1))``. Memory-bound decode is close
to linear in ``b``; beyond the baseline's range of batch sizes the line is extrapolated.
Events without ``batch_size`` are normalised at the baseline's median batch size; with fewer
than three distinct batch sizes in the warm-up, ``beta = 0`` (no normalisation). Normalised,
a batch surge (more load, slower steps, same draft) raises no alert, as it should: load is
not a stale draft.

Test
----
The baseline is the warm-up's quantiles ``B_q`` (median and lower quartile by default) of the
normalised throughput. For each quantile, the window's count ``k_q`` of requests under
``(1 - min_effect) B_q`` is compared with ``Binomial(n, q)``: if the window's q-quantile were
still at or above that threshold, at most a share ``q`` of requests would fall under it. A
one-sided exact binomial (sign) test at ``alpha / len(quantiles)`` (Bonferroni) rejects that,
so a firing means "a drop of at least ``min_effect``, with confidence", with no bootstrap and
no distributional assumption. The lower quartile is there because a slowdown that hits only
part of the requests (draft evictions on 30 % of them) moves the median little but the lower
quantiles a lot.

The gate is a one-sided pooled two-proportion z-test of the window's error rate against the
warm-up's at ``error_alpha``. The rule resolves when every tested quantile of the window is
back above ``(1 - min_effect + hysteresis) B_q``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from statistics import NormalDist
from typing import Any

from monitor.detect.base import CHANGED, FIRING, ConditionDetector, field, nested
from monitor.detect.windows import (
    BucketRing,
    EmptyRing,
    EmptySlidingHistogram,
    PairSample,
    SlidingHistogram,
    empty_ring,
    empty_sliding_histogram,
)
from monitor.telemetry.event import Event

__all__ = ["ThroughputMonitor", "binom_sf", "fit_batch_factor", "proportion_rise_z"]


def binom_sf(k: int, n: int, p: float) -> float:
    """``P(X >= k)`` for ``X ~ Binomial(n, p)``, summed exactly from the side that is short.

    >>> round(binom_sf(8, 10, 0.5), 6)          # (45 + 10 + 1) / 1024
    0.054688
    >>> binom_sf(0, 10, 0.3), binom_sf(11, 10, 0.3)
    (1.0, 0.0)
    >>> f"{binom_sf(2700, 10000, 0.25):.3g}"   # far in the tail, no underflow to 0
    '2.44e-06'
    """
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    if p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    if k > n * p:
        return _tail_sum(k, n, p, up=True)
    return max(0.0, 1.0 - _tail_sum(k - 1, n, p, up=False))


def _tail_sum(k: int, n: int, p: float, up: bool) -> float:
    """Sum of the pmf from ``k`` away from the mean (upward or downward) until negligible."""
    log_pmf = (
        math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
        + k * math.log(p) + (n - k) * math.log1p(-p)
    )  # fmt: skip
    term = math.exp(log_pmf)
    total = term
    odds = p / (1.0 - p)
    j = k
    while True:
        if up:
            if j >= n:
                break
            term *= (n - j) / (j + 1) * odds
            j += 1
        else:
            if j <= 0:
                break
            term *= j / (n - j + 1) / odds
            j -= 1
        total += term
        # away from the mean the terms only shrink: stop once they no longer count
        if term <= total * 1e-17:
            break
    return min(1.0, total)


@lru_cache(maxsize=64)
def _z_upper(alpha: float) -> float:
    return NormalDist().inv_cdf(1.0 - alpha)


@lru_cache(maxsize=64)
def _skips(level: float, quantiles: tuple[float, ...]) -> tuple[tuple[float, float], ...]:
    """Per quantile ``q``, ``(q, bound)``: the bound on (k - n q)^2 / n under which a count
    is surely not significant at ``level``. Cached: one tuple for every monitor of a
    configuration, not one each (a fleet's segments, by the ten thousand)."""
    z2 = _skip_z2(level)
    return tuple((q, z2 * q * (1.0 - q) / 2.0) for q in quantiles)


@lru_cache(maxsize=64)
def _skip_z2(level: float) -> float:
    """``z^2`` for ``P(Z >= z) = 2 level`` (-1 when that ``z`` is not positive).

    Twice the level: a lower bound on a tail that clears it leaves binom_sf's rounding far
    from deciding anything.
    """
    if level >= 0.25:
        return -1.0
    z = NormalDist().inv_cdf(1.0 - 2.0 * level)
    return z * z


def _surely_not_below(k: int, n: int, p: float, level: float) -> bool:
    """Whether ``binom_sf(k, n, p) >= level`` is certain without summing (a cheap pre-test).

    Zubkov and Serov's bound (2013): for ``n p < k <= n``,
    ``P(X >= k) >= P(Z >= sqrt(2 n H(k / n, p)))``, ``Z`` standard normal and ``H`` the
    Kullback-Leibler divergence between Bernoulli(k / n) and Bernoulli(p). While that normal
    tail is at least ``2 level`` the exact tail cannot be under ``level``. False means "not
    known": the caller sums. With no change in the window the sum is then needed on a few
    percent of the events, instead of on every count above its expectation (half of them).

    >>> _surely_not_below(325, 600, 0.5, 0.005), binom_sf(325, 600, 0.5) >= 0.005
    (True, True)
    >>> _surely_not_below(340, 600, 0.5, 0.005), binom_sf(340, 600, 0.5) < 0.005
    (False, True)
    """
    if not n * p < k <= n:
        return False
    x = k / n
    divergence = x * math.log(x / p)
    if k < n:
        divergence += (1.0 - x) * math.log((1.0 - x) / (1.0 - p))
    return 2.0 * n * divergence <= _skip_z2(level)


def proportion_rise_z(errors: int, n: int, base_errors: int, base_n: int) -> float:
    """One-sided pooled two-proportion z statistic for ``errors / n`` above ``base``.

    0 when either sample is empty or the pooled rate is 0 or 1 (no variance to test against).

    >>> round(proportion_rise_z(30, 100, 5, 1000), 2)
    16.03
    >>> proportion_rise_z(0, 100, 0, 1000)
    0.0
    """
    if n == 0 or base_n == 0:
        return 0.0
    pooled = (errors + base_errors) / (n + base_n)
    if pooled <= 0.0 or pooled >= 1.0:
        return 0.0
    se = math.sqrt(pooled * (1.0 - pooled) * (1.0 / n + 1.0 / base_n))
    return (errors / n - base_errors / base_n) / se


def _median(values: Sequence[float]) -> float:
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2.0


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    # linear interpolation between order statistics (the default of numpy and R type 7)
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def fit_batch_factor(pairs: Sequence[tuple[float, float]], groups: int = 32) -> float:
    """``beta`` of ``time_per_token(b) = t1 (1 + beta (b - 1))`` from (batch, throughput) pairs.

    Pairs are sorted by batch size and cut into at most ``groups`` groups of about equal
    count, never splitting requests of one batch size between groups; a line is fitted by
    weighted least squares through each group's (mean batch, median per-token time). The mean
    batch, not the median, is the group's abscissa: with integer batch sizes, a group holding
    sizes 5 and 6 has a median per-token time between theirs, which the mean batch matches and
    a median batch (5 or 6) does not; that mismatch would flatten the slope.
    Returns 0 when the batch sizes do not vary enough (fewer than three distinct values) or
    the fitted slope is not positive.

    >>> pairs = [(b, 100.0 / (1 + (b - 1) / 32)) for b in range(1, 41) for _ in range(5)]
    >>> round(fit_batch_factor(pairs), 6)     # 1 / 32
    0.03125
    >>> fit_batch_factor([(8, 50.0)] * 100)
    0.0
    """
    usable = sorted((b, x) for b, x in pairs if b >= 1 and x > 0)
    if len({b for b, _ in usable}) < 3:
        return 0.0
    n = len(usable)
    target = max(5, n // max(2, groups))
    points: list[tuple[float, float, int]] = []
    chunk: list[tuple[float, float]] = []
    for i, pair in enumerate(usable):
        chunk.append(pair)
        last_of_size = i + 1 == n or usable[i + 1][0] != pair[0]
        if last_of_size and (len(chunk) >= target or i + 1 == n):
            b_mean = math.fsum(b for b, _ in chunk) / len(chunk)
            t_med = _median([1.0 / x for _, x in chunk])  # per-token time: the line is in it
            points.append((b_mean, t_med, len(chunk)))
            chunk = []
    if len(points) < 2:
        return 0.0
    w_sum = sum(w for _, _, w in points)
    b_bar = sum(b * w for b, _, w in points) / w_sum
    t_bar = sum(t * w for _, t, w in points) / w_sum
    sxx = sum(w * (b - b_bar) ** 2 for b, _, w in points)
    if sxx <= 0.0:
        return 0.0
    slope = sum(w * (b - b_bar) * (t - t_bar) for b, t, w in points) / sxx
    t1 = t_bar + slope * (1.0 - b_bar)  # fitted per-token time at batch 1
    if slope <= 0.0 or t1 <= 0.0:
        return 0.0
    return slope / t1


_EVENTS, _ERRORS, _TPUT = range(3)
_FIXED = 3

# batch factor, reference batch, the highest threshold, the thresholds (one per quantile)
_Norm = tuple[float, float, float, tuple[float, ...]]


def _norm(baseline: dict[str, Any]) -> _Norm:
    thresholds = tuple(baseline["thresholds"])
    return baseline["beta"], baseline["ref_batch"], max(thresholds), thresholds


def _opt_dict(data: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if data is None else dict(data)


class ThroughputMonitor(ConditionDetector):
    """Decode throughput fell from the segment's baseline while errors stayed flat.

    Parameters
    ----------
    min_effect : float
        Smallest relative drop worth an alert (0.15: a quantile 15 % below baseline).
    quantiles : sequence of float
        Quantiles of normalised throughput that are tested (each at ``alpha / len``).
    alpha : float
        Significance of the drop test.
    error_alpha : float
        Significance of the error-rise gate (one-sided two-proportion test).
    hysteresis : float
        Resolution needs every quantile back above ``(1 - min_effect + hysteresis)`` times
        its baseline.
    warmup : float
        Event-time seconds of traffic that make the baseline (from the first event).
    min_baseline : int
        ``ok`` requests with a throughput the warm-up needs; it goes on until it has them.
    window : float
        Sliding event-time window of the test, seconds.
    min_requests : int
        ``ok`` requests with a throughput the window needs for a decision.
    bucket : float
        Bucket width of the window, seconds.
    reservoir : int
        Most warm-up requests kept for the baseline (a deterministic even thinning).
    relative_accuracy : float
        Bin width of the window's quantile histogram.

    Notes
    -----
    The baseline is frozen at the end of the warm-up (an incident during the warm-up becomes
    the baseline: :meth:`reset_baseline` starts a new one). Detection needs a large part of
    the window to be slow (half of it for a shift of the median), so the delay is of the order
    of ``window / 2``; a shorter window detects sooner and resolves sooner, with more noise.

    Examples
    --------
    >>> m = ThroughputMonitor(warmup=600, min_baseline=50, window=300, min_requests=20)
    >>> def event(i, slow=1.0, status="ok"):
    ...     tokens_per_s = (100.0 + i % 7) / slow
    ...     return Event(f"r{i}", float(i), "chat", status, "t", "1", "tok",
    ...                  output_tokens=200, e2e_ms=100.0 + 200_000.0 / tokens_per_s,
    ...                  ttft_ms=100.0)
    >>> for i in range(0, 1200):                     # warm-up, then more of the same
    ...     m.update(event(i))
    >>> m.baseline["0.5"], m.firing
    (103.0, False)
    >>> for i in range(1200, 1500):                  # 30 % slower, errors flat
    ...     m.update(event(i, slow=1.3))
    ...     if m.changed:
    ...         print("fired at", i)
    fired at 1285
    >>> round(m.evidence()["current"]["0.5"], 1), m.evidence()["errors_rose"]
    (79.1, False)
    """

    rule = "throughput_drop"
    KIND = "throughput"
    VERSION = 2  # compact: see monitor.detect.base
    COMPACT = True
    READS = (1,)
    PARAMS = {"min_effect": float, "quantiles": lambda qs: tuple(float(q) for q in qs),
              "alpha": float, "error_alpha": float, "hysteresis": float, "warmup": float,
              "min_baseline": int, "window": float, "min_requests": int, "bucket": float,
              "reservoir": int, "relative_accuracy": float}
    STATE = (FIRING, CHANGED, field("warm_start"), field("warm_events", load=int),
             field("warm_errors", load=int), field("warm_tput", load=int),
             nested("sample", PairSample), field("baseline", load=_opt_dict),
             nested("ring", BucketRing), nested("hist", SlidingHistogram))

    def __init__(
        self,
        min_effect: float = 0.15,
        quantiles: Sequence[float] = (0.5, 0.25),
        alpha: float = 0.01,
        error_alpha: float = 0.01,
        hysteresis: float = 0.05,
        warmup: float = 1800.0,
        min_baseline: int = 200,
        window: float = 600.0,
        min_requests: int = 30,
        bucket: float = 60.0,
        reservoir: int = 2048,
        relative_accuracy: float = 0.01,
    ) -> None:
        if not 0.0 < min_effect < 1.0:
            raise ValueError("min_effect must be in (0, 1)")
        if not 0.0 <= hysteresis < min_effect:
            raise ValueError("hysteresis must be in [0, min_effect)")
        if not quantiles or not all(0.0 < q < 1.0 for q in quantiles):
            raise ValueError("quantiles must be a non-empty sequence of values in (0, 1)")
        if not (0.0 < alpha < 0.5 and 0.0 < error_alpha < 0.5):
            raise ValueError("alpha and error_alpha must be in (0, 0.5)")
        if min_baseline < 10 or min_requests < 1 or warmup < 0:
            raise ValueError("min_baseline >= 10, min_requests >= 1, warmup >= 0 required")
        self._set_params(locals())
        # derived from the parameters, for _decide: the per-quantile level, and per quantile
        # the bound on (k - n q)^2 / n under which a count is surely not significant
        self._level = self.alpha / len(self.quantiles)
        self._skips = _skips(self._level, self.quantiles)
        self._start_warmup()

    def _start_warmup(self) -> None:
        self._warm_start: float | None = None
        self._sample = PairSample(self.reservoir)
        self._warm_events = 0
        self._warm_errors = 0
        self._warm_tput = 0
        self._baseline: dict[str, Any] | None = None
        self._norm: _Norm | None = None  # the baseline's numbers update() needs, unpacked
        self._resolve_keys: list[int] | None = None  # derived from the baseline, when needed
        # The window counts nothing until the baseline: shared empty placeholders until
        # then (a segment warming up holds no window of its own), own ones from _fit.
        self._ring: BucketRing = empty_ring(self.window, self.bucket,
                                            _FIXED + len(self.quantiles))
        self._hist: SlidingHistogram = empty_sliding_histogram(self.window, self.bucket,
                                                               self.relative_accuracy)

    def _own_window(self) -> None:
        """A window of its own, once there is a baseline to judge it against (or restored
        with one: a window equal to an empty one is left out of the snapshot)."""
        if type(self._ring) is EmptyRing:
            self._ring = BucketRing(self.window, self.bucket, _FIXED + len(self.quantiles))
        if type(self._hist) is EmptySlidingHistogram:
            self._hist = SlidingHistogram(self.window, self.bucket, self.relative_accuracy)

    # -- feeding ------------------------------------------------------------------------------

    def update(self, event: Event) -> None:
        """Count one finished request."""
        self.changed = False
        ok = event.status == "ok"
        tput = event.decode_throughput if ok else None
        if tput is not None and tput <= 0.0:
            tput = None
        ts = event.ts
        norm = self._norm
        if norm is None:
            # the warm-up, inline as the rest: it is every event of a segment's first half hour
            if self._warm_start is None:
                self._warm_start = ts
            self._warm_events += 1
            if not ok:
                self._warm_errors += 1
            if tput is not None:
                self._warm_tput += 1
                batch = event.batch_size
                self._sample.add((0 if batch is None else int(batch), tput))
            if ts - self._warm_start >= self.warmup and self._warm_tput >= self.min_baseline:
                self._fit(ts)
            return
        ring = self._ring
        slot = ring.slot(ts)
        if tput is None:
            self._hist.advance(ts)
            if slot is not None:
                s = ring.sums
                slot[_EVENTS] += 1
                s[_EVENTS] += 1
                if not ok:
                    slot[_ERRORS] += 1
                    s[_ERRORS] += 1
        else:
            beta, ref_batch, top, thresholds = norm
            batch = event.batch_size
            x = tput * (1.0 + beta * ((ref_batch if batch is None else batch) - 1))
            self._hist.add(ts, x)
            if slot is not None:
                # field by field rather than a vector through BucketRing.add: this runs per event
                s = ring.sums
                slot[_EVENTS] += 1
                s[_EVENTS] += 1
                slot[_TPUT] += 1
                s[_TPUT] += 1
                if x < top:  # most requests are above every threshold: no loop for them
                    i = _FIXED
                    for threshold in thresholds:
                        if x < threshold:
                            slot[i] += 1
                            s[i] += 1
                        i += 1
        self._decide()

    def update_many(self, events: Sequence[Event]) -> int:
        """Feed events in order until one flips the state; returns how many were taken.

        Exactly what calling :meth:`update` on each would do (a property test holds the two
        equal, snapshot bytes included): the caller reads ``changed``/``firing``/``evidence``
        after each call, as after :meth:`update`, and calls again with the rest. The warm-up
        goes as one loop; after it, each run of events in the window's newest bucket is
        counted in locals and added to the window once, and :meth:`_decide` is called only
        where it could flip the state (see :meth:`_watch_many` and :meth:`_firing_many`).
        """
        n = len(events)
        i = 0
        while i < n:
            if self._norm is None:
                i = self._warm_many(events, i)
            elif self._firing:
                i = self._firing_many(events, i)
            else:
                i = self._watch_many(events, i)
            if self.changed:
                break
        return i

    def _warm_many(self, events: Sequence[Event], i: int) -> int:
        """:meth:`update`'s warm-up for ``events`` from ``i`` up to the fit; the next index."""
        self.changed = False
        start = self._warm_start
        count, errors, requests = self._warm_events, self._warm_errors, self._warm_tput
        add = self._sample.add
        warmup, min_baseline = self.warmup, self.min_baseline
        n = len(events)
        try:
            while i < n:
                e = events[i]
                ts = e.ts
                if start is None:
                    start = self._warm_start = ts
                count += 1
                if e.status != "ok":
                    errors += 1
                else:
                    tput = e.decode_throughput
                    if tput is not None and tput <= 0.0:
                        tput = None
                    if tput is not None:
                        requests += 1
                        batch = e.batch_size
                        add((0 if batch is None else int(batch), tput))
                i += 1
                if ts - start >= warmup and requests >= min_baseline:
                    break
            else:
                return i
        finally:  # also when an event raises: the ones before it count, as with update()
            self._warm_events, self._warm_errors, self._warm_tput = count, errors, requests
        self._fit(events[i - 1].ts)
        return i

    def _in_newest(self, event: Event) -> bool:
        """Whether ``event`` falls in the window's newest bucket (as BucketRing.slot tells)."""
        head = self._ring.head
        return head is not None and float(head) <= event.ts / self._ring.bucket < float(head + 1)

    def _room(self, k: float, n: float, q: float, quick: float) -> int:
        """How many more requests under the threshold of quantile ``q`` the window's count
        ``k`` of ``n`` can take and stay surely not significant (-1: not even now).

        ``d = k - n q`` moves up by ``1 - q`` with a request under the threshold and down by
        ``q`` with one above, and ``n`` only grows (no bucket expires within a run): after
        ``j`` more requests under it, ``d`` is at most ``d + j (1 - q)``. While that is at most
        ``sqrt(quick n)`` with this ``n``, ``d <= 0 or d^2 <= quick n`` holds at every request
        in between, :meth:`_decide`'s own first pre-tests: then ``binom_sf`` is at least twice
        the level (``d <= 0``: ``k`` is at most the median, the tail at least 1/2; else
        KL <= chi-square and the bound of :func:`_surely_not_below` at :func:`_skip_z2`).
        ``quick <= 0`` (a level of 1/4 or more) leaves only ``d <= 0``, whose tail of 1/2 is
        above any level. The room is shorter by 1e-9 than the exact one: far more than this
        arithmetic's rounding, so that the bound holds in exact arithmetic too.
        """
        d = k - n * q
        bound = math.sqrt(quick * n) if quick > 0.0 else 0.0
        if d > bound:
            return -1
        return max(0, int((bound - d) / (1.0 - q) - 1e-9))

    def _significant(self, k: float, n: float, q: float, quick: float) -> bool:
        """Whether :meth:`_decide` finds ``k`` of ``n`` significant for quantile ``q`` (its
        own tests, in its order: the same answer by construction)."""
        d = k - n * q
        if d <= 0.0 or d * d <= quick * n or _surely_not_below(k, n, q, self._level):
            return False
        return binom_sf(k, n, q) < self._level

    def _watch_many(self, events: Sequence[Event], i: int) -> int:
        """:meth:`update` for ``events`` from ``i``, not firing, after the warm-up: the run of
        those in the window's newest bucket at once, or one event alone (one that opens a
        bucket or is late, or any while the error gate decides); stops after a flip. Returns
        the next index.

        :meth:`_decide` flips the state only when ``n >= min_requests`` and some quantile's
        count is significant (the error gate can only hold a firing back). Within the run no
        bucket expires, so ``n`` and the counts only grow. A quantile with room
        (:meth:`_room`) is surely not significant until its count has risen by more than that;
        one without is asked :meth:`_decide`'s own questions at each request
        (:meth:`_significant`). An event without a throughput moves neither ``n`` nor a count:
        the answer stays that of the request before. The run ends with the request at which a
        count is significant; with it counted, :meth:`_decide` runs as after ``update`` (and
        the gate, which moves with every event, has the following events one by one).
        """
        ring = self._ring
        if not self._in_newest(events[i]):
            self.update(events[i])  # a new bucket (expiry moves counts both ways), or late
            return i + 1
        head = ring.head
        assert head is not None
        sums = ring.sums
        n = sums[_TPUT]
        quantiles, skips = self.quantiles, self._skips
        min_requests = self.min_requests
        rooms = []
        for j, (q, quick) in enumerate(skips):
            room = self._room(sums[_FIXED + j], n, q, quick)
            if room < 0 and n >= min_requests and self._significant(sums[_FIXED + j], n, q, quick):
                self.update(events[i])  # the error gate decides event by event
                return i + 1
            rooms.append(room)
        self.changed = False
        n_events = len(events)
        tight = min(rooms) < 0
        counts = [0] * len(quantiles)
        assert self._norm is not None
        beta, ref_batch, top, thresholds = self._norm
        width = ring.bucket
        lo, hi = float(head), float(head + 1)
        first = i
        errors = 0
        n_now = n  # the window's n after each request of the run
        values: list[float] = []
        append = values.append
        decide = False
        try:
            while i < n_events:
                e = events[i]
                if not lo <= e.ts / width < hi:
                    break  # another bucket: the next call's first event
                if e.status != "ok":
                    errors += 1
                    i += 1
                    continue
                tput = e.decode_throughput
                if tput is None or tput <= 0.0:
                    i += 1
                    continue
                batch = e.batch_size
                x = tput * (1.0 + beta * ((ref_batch if batch is None else batch) - 1))
                i += 1  # counted from here on (update() raises before counting, too)
                append(x)
                n_now += 1
                if x < top:
                    j = 0
                    for threshold in thresholds:
                        if x < threshold:
                            counts[j] += 1
                            rooms[j] -= 1
                            if rooms[j] < 0:
                                tight = True
                        j += 1
                if tight and n_now >= min_requests:
                    tight = False
                    for j, (q, quick) in enumerate(skips):
                        if rooms[j] >= 0:
                            continue
                        k = sums[_FIXED + j] + counts[j]
                        room = self._room(k, n_now, q, quick)
                        if room < 0:
                            tight = True
                            if self._significant(k, n_now, q, quick):
                                decide = True
                                return i
                        rooms[j] = room
            return i
        finally:  # also when an event raises: the ones before it count, as with update()
            self._add_run(events, first, i, errors, counts, values)
            if decide:
                self._decide()

    def _firing_many(self, events: Sequence[Event], i: int) -> int:
        """:meth:`update` for ``events`` from ``i`` while firing, as :meth:`_watch_many`: the
        run in the newest bucket at once, or one event that is not in it. Returns the next
        index.

        :meth:`_decide` resolves when ``n >= min_requests`` and every quantile's count of
        window values in bins under its resolve bin is at most ``q (count - 1)``. Those counts
        are kept here per request, with the same comparisons, so the run stops exactly at the
        request that resolves; an event without a throughput changes none of them.
        """
        ring, h = self._ring, self._hist
        if not self._in_newest(events[i]):
            self.update(events[i])  # a new bucket (expiry moves counts both ways), or late
            return i + 1
        head = ring.head
        assert head is not None
        self.changed = False
        n_events = len(events)
        keys = self._resolve_keys
        if keys is None:
            keys = self._resolve_keys = self._first_resolving_keys()
        sums = ring.sums
        n_now = sums[_TPUT]
        count = h.count
        below = [h.count_below(key) for key in keys]  # tracked from here, as _decide does
        checks = list(zip(self.quantiles, keys, strict=True))
        min_requests = self.min_requests
        assert self._norm is not None
        beta, ref_batch, top, thresholds = self._norm
        width = ring.bucket
        lo, hi = float(head), float(head + 1)
        key_of = h.key
        counts = [0] * len(thresholds)
        first = i
        errors = 0
        values: list[float] = []
        append = values.append
        decide = False
        try:
            while i < n_events:
                e = events[i]
                if not lo <= e.ts / width < hi:
                    break  # another bucket: the next call's first event
                if e.status != "ok":
                    errors += 1
                    i += 1
                    continue
                tput = e.decode_throughput
                if tput is None or tput <= 0.0:
                    i += 1
                    continue
                batch = e.batch_size
                x = tput * (1.0 + beta * ((ref_batch if batch is None else batch) - 1))
                i += 1  # counted from here on (update() raises before counting, too)
                append(x)
                n_now += 1
                if x < top:
                    j = 0
                    for threshold in thresholds:
                        if x < threshold:
                            counts[j] += 1
                        j += 1
                count += 1
                key = key_of(x)
                resolved = n_now >= min_requests
                j = 0
                for q, resolve_key in checks:
                    if key < resolve_key:
                        below[j] += 1
                    if below[j] > q * (count - 1):
                        resolved = False
                    j += 1
                if resolved:
                    decide = True
                    return i
            return i
        finally:  # also when an event raises: the ones before it count, as with update()
            self._add_run(events, first, i, errors, counts, values)
            if decide:
                self._decide()

    def _add_run(self, events: Sequence[Event], first: int, end: int, errors: int,
                 counts: list[int], values: list[float]) -> None:
        """Add the run ``events[first:end]`` of the window's newest bucket to the window: its
        errors, its counts under each threshold, its normalised throughputs in order."""
        if end == first:
            return
        ring = self._ring
        sums = ring.sums
        slot = ring.slot(events[first].ts)
        assert slot is not None  # the newest bucket
        # integer counts: one addition of the run's total is the same as one per event
        taken = end - first
        slot[_EVENTS] += taken
        sums[_EVENTS] += taken
        if errors:
            slot[_ERRORS] += errors
            sums[_ERRORS] += errors
        if values:
            requests = len(values)
            slot[_TPUT] += requests
            sums[_TPUT] += requests
            for j, c in enumerate(counts):
                if c:
                    slot[_FIXED + j] += c
                    sums[_FIXED + j] += c
            self._hist.add_many(events[first].ts, values)

    def _fit(self, ts: float) -> None:
        pairs = self._sample.items
        with_batch = [(float(b), x) for b, x in pairs if b > 0]
        beta = fit_batch_factor(with_batch)
        ref_batch = _median([b for b, _ in with_batch]) if with_batch else 1.0
        normalised = sorted(x * (1.0 + beta * ((b if b > 0 else ref_batch) - 1)) for b, x in pairs)
        base_q = [_quantile(normalised, q) for q in self.quantiles]
        self._baseline = {
            "at": ts,
            "beta": beta,
            "ref_batch": ref_batch,
            "quantiles": base_q,
            "thresholds": [(1.0 - self.min_effect) * v for v in base_q],
            "events": self._warm_events,
            "errors": self._warm_errors,
            "requests": self._warm_tput,
        }
        self._norm = _norm(self._baseline)
        self._sample = PairSample(self.reservoir)  # the raw sample is no longer needed
        self._own_window()

    def carried(self) -> ThroughputMonitor | None:
        """A monitor for the setup that replaced this one: this baseline (quantiles, batch
        factor, error rate), an empty window. ``None`` while this one is still warming up."""
        if self._baseline is None:
            return None
        twin = type(self)(**self.params())
        twin._baseline = dict(self._baseline)
        twin._norm = _norm(twin._baseline)
        twin._warm_start = self._warm_start
        twin._own_window()
        return twin

    def reset_baseline(self) -> None:
        """Forget the baseline and the window: the next events make a new warm-up.

        An open condition resolves (``changed`` is True until the next update): its baseline
        was just declared obsolete.
        """
        self.changed = self._firing
        self._firing = False
        self._start_warmup()

    # -- the decision -------------------------------------------------------------------------

    def _p_values(self) -> list[float]:
        t = self._ring.totals
        n = int(t[_TPUT])
        return [binom_sf(int(t[_FIXED + i]), n, q) for i, q in enumerate(self.quantiles)]

    def _error_z(self) -> float:
        assert self._baseline is not None
        t = self._ring.totals
        b = self._baseline
        return proportion_rise_z(int(t[_ERRORS]), int(t[_EVENTS]), b["errors"], b["events"])

    def _decide(self) -> None:
        t = self._ring.sums
        n = t[_TPUT]
        if n < self.min_requests:
            return  # no evidence either way: the state stays as last decided
        if not self._firing:
            level = self._level
            i = _FIXED
            for q, quick in self._skips:
                k = t[i]
                i += 1
                # Most counts cannot be significant, and cheap tests say so: a count at or
                # under its expectation; one within the chi-square form of the bound of
                # _surely_not_below (KL <= chi-square, so it implies that bound: no logs);
                # one within that bound. Only the rest pay for the exact binomial sum.
                d = k - n * q
                if d <= 0.0 or d * d <= quick * n or _surely_not_below(k, n, q, level):
                    continue
                if binom_sf(k, n, q) < level:
                    break
            else:
                return
            if self._error_z() > _z_upper(self.error_alpha):
                return  # errors rose too: an outage, not a slow draft
            self._firing = self.changed = True
        else:
            # "every quantile back above (1 - min_effect + hysteresis) x its baseline", asked as
            # "at most rank values in lower bins" with counts the histogram keeps up to date:
            # the same answer as quantile() without sorting the bins on every event
            h = self._hist
            count = h.count
            if count == 0:
                return
            keys = self._resolve_keys
            if keys is None:
                keys = self._resolve_keys = self._first_resolving_keys()
            for q, key in zip(self.quantiles, keys, strict=True):
                if h.count_below(key) > q * (count - 1):
                    return
            self._firing = False
            self.changed = True
            h.untrack()

    def _first_resolving_keys(self) -> list[int]:
        """Per quantile, the lowest histogram bin that reads back at or above its resolve level.

        ``SlidingHistogram.value`` increases with the bin, so a quantile reads back at or above
        the level exactly when its bin is at least this one.
        """
        assert self._baseline is not None
        h = self._hist
        ratio = 1.0 - self.min_effect + self.hysteresis
        keys = []
        for base in self._baseline["quantiles"]:
            level = ratio * base
            if level <= 0.0:
                keys.append(h.key(0.0))  # any value reads back at or above it, even 0
                continue
            key = h.key(level)  # within one bin of the answer: settle it on value() itself
            while h.value(key - 1) >= level:
                key -= 1
            while h.value(key) < level:
                key += 1
            keys.append(key)
        return keys

    # -- results ------------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Whether the warm-up is over and a baseline exists."""
        return self._baseline is not None

    @property
    def baseline(self) -> dict[str, float] | None:
        """Baseline quantiles of batch-normalised throughput, keyed ``str(q)``."""
        if self._baseline is None:
            return None
        return dict(zip(map(str, self.quantiles), self._baseline["quantiles"], strict=True))

    @property
    def current(self) -> dict[str, float | None]:
        """The window's quantiles of batch-normalised throughput, keyed ``str(q)``."""
        return {str(q): self._hist.quantile(q) for q in self.quantiles}

    @property
    def batch_beta(self) -> float | None:
        """Fitted per-token time growth per extra batch slot, relative to batch 1."""
        return None if self._baseline is None else self._baseline["beta"]

    def evidence(self) -> dict[str, Any]:
        """The numbers behind the decision, JSON-able."""
        t = self._ring.totals
        b = self._baseline
        out: dict[str, Any] = {
            "ready": b is not None,
            "baseline": self.baseline,
            "current": self.current,
            "min_effect": self.min_effect,
            "requests": int(t[_TPUT]),
            "events": int(t[_EVENTS]),
            "errors": int(t[_ERRORS]),
            "error_rate": t[_ERRORS] / t[_EVENTS] if t[_EVENTS] else None,
            "window_s": self.window,
        }
        if b is None:
            out["warmup_requests"] = self._warm_tput
            return out
        current = out["current"]
        out["relative_change"] = {
            str(q): None if current[str(q)] is None else current[str(q)] / base - 1.0
            for q, base in zip(self.quantiles, b["quantiles"], strict=True)
        }
        out["below_threshold"] = {str(q): int(t[_FIXED + i]) for i, q in enumerate(self.quantiles)}
        out["p_values"] = dict(zip(map(str, self.quantiles), self._p_values(), strict=True))
        z = self._error_z()
        out.update(
            baseline_error_rate=b["errors"] / b["events"],
            baseline_events=b["events"],
            baseline_requests=b["requests"],
            baseline_at=b["at"],
            error_z=z,
            errors_rose=z > _z_upper(self.error_alpha),
            batch_beta=b["beta"],
            reference_batch=b["ref_batch"],
        )
        return out

    # -- state --------------------------------------------------------------------------------

    def _set_state(self, data: dict[str, Any]) -> None:
        super()._set_state(data)
        self._norm = None if self._baseline is None else _norm(self._baseline)
        if self._norm is not None:
            self._own_window()
