"""Break-even: does speculation still pay on a route? (rule ``below_breakeven``)

The cost model and its derivation are in ``docs/breakeven.md``. In short: if one verification
step with ``k`` drafts costs ``1 + k (c + v)`` plain target steps (``c`` per draft-model step,
``v`` per extra token the target verifies) and emits ``1 + k r`` tokens, where ``r`` is the
engine acceptance rate accepted / drafted, then speculation is faster than plain decoding
exactly when ``r > c + v``, whatever ``k``. That is Leviathan et al.'s break-even restated on
the engine's ``r`` instead of the per-token ``alpha``, with the batch verification cost added.

:class:`BreakevenMonitor` decides it with confidence on a sliding window of per-request
(accepted, drafted) counts: it fires when the whole confidence interval of the route's rate is
under the cutoff and resolves when the rate is back above the cutoff plus a hysteresis margin.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from operator import le, mul
from statistics import NormalDist
from typing import Any

from monitor.detect.base import CHANGED, FIRING, ConditionDetector, field, nested
from monitor.detect.windows import BucketRing
from monitor.telemetry.event import Event

__all__ = [
    "DEFAULT_CUTOFF",
    "BreakevenMonitor",
    "CostModel",
    "chain_alpha",
    "cutoff",
    "engine_rate",
    "leviathan_breakeven",
    "leviathan_speedup",
    "ratio_interval",
]

DEFAULT_CUTOFF = 0.40
"""Cutoff on accepted / drafted when no cost model is configured (``alerts-v1.md``)."""


@dataclass(frozen=True)
class CostModel:
    """What speculation costs on one model pair, in units of one plain target decode step.

    Parameters
    ----------
    c : float
        Cost of one draft-model step (producing one draft token), the draft/target cost ratio
        (Leviathan's cost coefficient). About 0.01 for n-gram lookup, 0.02-0.1 for EAGLE/MTP
        heads, 0.05-0.4 for a small draft model.
    v : float
        Extra cost of verifying one more token in the target forward pass. About 0 at small
        batch (decode is memory bound, a few more positions are free) and growing with batch
        size as the target pass becomes compute bound.

    Examples
    --------
    >>> m = CostModel(c=0.2, v=0.05)
    >>> m.breakeven_rate
    0.25
    >>> round(m.speedup(rate=0.5, k=4), 3)    # (1 + 4*0.5) / (1 + 4*0.25)
    1.5
    >>> m.speedup(rate=0.25, k=7)             # at the break-even rate any k gives 1.0
    1.0
    """

    c: float
    v: float = 0.0

    def __post_init__(self) -> None:
        for name in ("c", "v"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise ValueError(f"CostModel.{name} must be a finite number >= 0, got {value!r}")

    @property
    def breakeven_rate(self) -> float:
        """The engine acceptance rate at which speculation neither gains nor loses: c + v."""
        return self.c + self.v

    def speedup(self, rate: float, k: int) -> float:
        """Decode speed with speculation over without: (1 + k r) / (1 + k (c + v))."""
        if k < 1:
            raise ValueError("k must be >= 1")
        return (1.0 + k * rate) / (1.0 + k * (self.c + self.v))


def cutoff(cost_model: CostModel | None) -> float:
    """The break-even cutoff on accepted / drafted: c + v, or 0.40 without a cost model.

    A cost of ``c + v >= 1`` means speculation can never pay (the rate is at most 1); the
    cutoff is returned as is and the monitor then recommends ``off`` whenever it has data.

    >>> cutoff(None)
    0.4
    >>> cutoff(CostModel(c=0.08))
    0.08
    >>> round(cutoff(CostModel(c=0.35, v=0.1)), 2)
    0.45
    """
    return DEFAULT_CUTOFF if cost_model is None else cost_model.breakeven_rate


# -- Leviathan's formulas, for the documentation and for converting r <-> alpha ------------------


def engine_rate(alpha: float, k: int) -> float:
    """Expected accepted / drafted of a chain drafter with per-token acceptance ``alpha``.

    ``r = (alpha + alpha^2 + ... + alpha^k) / k`` (engine-telemetry.md 5.3).

    >>> round(engine_rate(0.8, 5), 3), engine_rate(1.0, 3)
    (0.538, 1.0)
    """
    if k < 1:
        raise ValueError("k must be >= 1")
    return sum(alpha**i for i in range(1, k + 1)) / k


def chain_alpha(rate: float, k: int) -> float:
    """The per-token acceptance alpha_L whose engine rate at draft length ``k`` is ``rate``.

    >>> round(chain_alpha(12208 / 33712, 7), 3)   # vLLM #26191: r = 0.362 is alpha_L = 0.744
    0.744
    """
    if not 0.0 <= rate <= 1.0:
        raise ValueError("rate must be in [0, 1]")
    lo, hi = 0.0, 1.0
    for _ in range(60):  # engine_rate rises monotonically in alpha: bisection converges
        mid = (lo + hi) / 2
        if engine_rate(mid, k) < rate:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def leviathan_speedup(alpha: float, gamma: int, c: float) -> float:
    """Leviathan et al. (2023) expected walltime improvement S(alpha, gamma, c).

    ``(1 - alpha^(gamma+1)) / ((1 - alpha) (gamma c + 1))``; the numerator over ``1 - alpha``
    is ``1 + gamma r`` with ``r = engine_rate(alpha, gamma)``.

    >>> round(leviathan_speedup(0.5, 5, 0.2), 2), round(leviathan_speedup(0.8, 5, 0.2), 2)
    (0.98, 1.84)
    """
    return (1.0 + gamma * engine_rate(alpha, gamma)) / (gamma * c + 1.0)


def leviathan_breakeven(gamma: int, c: float) -> float:
    """The alpha_L at which S(alpha, gamma, c) = 1 (the reference's break-even table).

    >>> [round(leviathan_breakeven(g, 0.2), 3) for g in (1, 2, 3, 5, 7)]
    [0.2, 0.306, 0.389, 0.509, 0.589]
    >>> round(engine_rate(leviathan_breakeven(5, 0.2), 5), 6)   # the same point is r = c
    0.2
    """
    if not 0.0 <= c < 1.0:
        raise ValueError("a break-even alpha exists only for 0 <= c < 1")
    return chain_alpha(c, gamma)


@lru_cache(maxsize=64)
def _z(confidence: float) -> float:
    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


# -- the interval ---------------------------------------------------------------------------------


def ratio_interval(
    requests: int,
    accepted: int,
    drafted: int,
    sum_aa: int,
    sum_dd: int,
    sum_ad: int,
    confidence: float = 0.95,
) -> tuple[float, float, float, float]:
    """(low, high, design effect, effective tokens) for the rate ``accepted / drafted``.

    The rate is a ratio estimator over requests (clusters of tokens). Its variance is the
    cluster-robust (linearisation, "sandwich") one,
    ``n / (n - 1) * sum_i (a_i - R d_i)^2 / D^2``, which needs only the running sums of
    ``a``, ``d``, ``a^2``, ``d^2`` and ``a d``. Its ratio to the binomial variance
    ``R (1 - R) / D`` is the design effect (floored at 1: never claim more precision than
    independent tokens), and the interval is Wilson's at ``D / deff`` effective tokens, which
    stays inside [0, 1] and behaves at rates near 0 or 1. When R is exactly 0 or 1 the design
    effect is undefined and each request counts as one effective token (the cautious limit).

    Four requests of 10 drafted tokens: 5 accepted on each, then 10, 0, 10, 0. Same rate, but
    the second window is four coin flips of ten tokens each, not forty independent tokens:

    >>> low, high, deff, n_eff = ratio_interval(4, 20, 40, 4 * 25, 4 * 100, 4 * 50)
    >>> round(low, 3), round(high, 3), deff, n_eff
    (0.352, 0.648, 1.0, 40.0)
    >>> low, high, deff, n_eff = ratio_interval(4, 20, 40, 2 * 100, 4 * 100, 2 * 100)
    >>> round(low, 3), round(high, 3), round(deff, 1), round(n_eff, 1)
    (0.125, 0.875, 13.3, 3.0)
    """
    if requests < 2 or drafted <= 0:
        return 0.0, 1.0, 1.0, 0.0
    r = accepted / drafted
    # sum (a - R d)^2 * D^2, exactly, in integers: no cancellation error, never negative
    q_num = sum_aa * drafted * drafted - 2 * accepted * drafted * sum_ad + accepted**2 * sum_dd
    var_robust = requests / (requests - 1) * q_num / drafted**4
    var_binomial = r * (1.0 - r) / drafted
    if var_binomial > 0.0:
        deff = max(1.0, var_robust / var_binomial)
        n_eff = drafted / deff
    else:
        n_eff = float(requests)
        deff = drafted / n_eff
    z = _z(confidence)
    z2 = z * z
    denom = 1.0 + z2 / n_eff
    center = (r + z2 / (2.0 * n_eff)) / denom
    half = z * math.sqrt(r * (1.0 - r) / n_eff + z2 / (4.0 * n_eff * n_eff)) / denom
    # at R = 0 (or 1) the bound is exactly 0 (or 1): do not let rounding say otherwise
    low = 0.0 if accepted == 0 else max(0.0, center - half)
    high = 1.0 if accepted == drafted else min(1.0, center + half)
    return low, high, deff, n_eff


# -- the monitor ----------------------------------------------------------------------------------

_REQ, _NODRAFT, _A, _D, _AA, _DD, _AD = range(7)
_BLOCK_MIN = 16  # events of a bucket's run decided at once, at least (see update_many)
# Room for rounding between the interval's bound on a block (worked out in other operations
# than ratio_interval's, on other values) and the bounds ratio_interval gives: a few ulps at most.
_ROUNDING = 1e-9


def _leading_in(ts: list[float], lo: float, hi: float, width: float) -> int:
    """How many of ``ts`` lead with ``lo <= t / width < hi``."""
    # t / width is monotone in t (a correctly rounded division by a positive number), so the
    # extremes decide for all, unless a NaN hides from min() and max(): a sum shows it
    total = sum(ts)
    if total == total and lo <= min(ts) / width and max(ts) / width < hi:
        return len(ts)
    return next((k for k, t in enumerate(ts) if not lo <= t / width < hi), len(ts))


def _wilson_high(rate: float, n: float, z: float) -> float:
    """Wilson's upper bound at ``n`` effective tokens, as in :func:`ratio_interval`."""
    z2 = z * z
    denom = 1.0 + z2 / n
    center = (rate + z2 / (2.0 * n)) / denom
    return center + z * math.sqrt(rate * (1.0 - rate) / n + z2 / (4.0 * n * n)) / denom


class BreakevenMonitor(ConditionDetector):
    """Whether a route's recent acceptance rate is, with confidence, below break-even.

    Parameters
    ----------
    cutoff : float
        Break-even rate on accepted / drafted (see :func:`cutoff`); 0.40 by default.
    window : float
        Sliding event-time window in seconds (per-``bucket`` resolution).
    confidence : float
        Two-sided confidence of the interval; the firing decision (upper bound < cutoff) is
        one-sided at ``(1 + confidence) / 2``.
    hysteresis : float
        Resolution needs the point estimate above ``cutoff + hysteresis``.
    min_requests, min_tokens : int
        Drafting requests and drafted tokens the window needs before anything is decided.
    bucket : float
        Bucket width of the window, seconds.

    Notes
    -----
    *Fires* when the interval's upper bound is under the cutoff: the route is confidently
    losing time to speculation. *Resolves* when the point estimate exceeds
    ``cutoff + hysteresis``, not the lower bound: the band between the two thresholds is
    ``hysteresis + z * SE`` wide, enough to stop flapping, while requiring confidence in both
    directions would leave a recovered low-volume route "off" for long; and the costs are
    asymmetric (speculation left on at or above break-even loses almost nothing). Without enough
    data nothing flips: the state stays as last decided.

    Requests that drafted nothing have no acceptance rate: they are not in the ratio or the
    interval, their share is reported as ``no_draft_share``.

    ``recommendation`` is ``"off"`` while firing, else ``"insufficient_data"`` when the window
    lacks data, else ``"on"`` (no confident evidence that speculation costs more than it saves).

    Examples
    --------
    >>> m = BreakevenMonitor(cutoff=0.40, min_requests=5, min_tokens=100)
    >>> for i in range(40):                       # rate 0.25: well under the cutoff
    ...     m.observe(accepted=10 + i % 3 - 1, drafted=40, ts=60.0 * i)
    >>> m.firing, m.recommendation, round(m.rate, 3)
    (True, 'off', 0.25)
    >>> for i in range(40, 80):                   # rate 0.60: recovered
    ...     m.observe(accepted=24, drafted=40, ts=60.0 * i)
    ...     if m.changed:
    ...         print("resolved at", i, "rate", round(m.rate, 3))
    resolved at 55 rate 0.437
    >>> m.recommendation, m.evidence()["cutoff"]
    ('on', 0.4)
    """

    rule = "below_breakeven"
    KIND = "breakeven"
    VERSION = 2  # compact: see monitor.detect.base
    COMPACT = True
    READS = (1,)
    PARAMS = {"cutoff": float, "window": float, "confidence": float, "hysteresis": float,
              "min_requests": int, "min_tokens": int, "bucket": float}
    STATE = (nested("ring", BucketRing), FIRING, CHANGED, field("last_ts"))

    def __init__(
        self,
        cutoff: float = DEFAULT_CUTOFF,
        window: float = 1800.0,
        confidence: float = 0.95,
        hysteresis: float = 0.03,
        min_requests: int = 30,
        min_tokens: int = 500,
        bucket: float = 60.0,
    ) -> None:
        if not (math.isfinite(cutoff) and cutoff >= 0):
            raise ValueError("cutoff must be a finite number >= 0")
        if not 0.0 < confidence < 1.0:
            raise ValueError("confidence must be in (0, 1)")
        if hysteresis < 0:
            raise ValueError("hysteresis must be >= 0")
        if min_requests < 2 or min_tokens < 1:
            raise ValueError("min_requests must be >= 2 and min_tokens >= 1")
        self._set_params(locals())
        self._ring = BucketRing(window, bucket, 7)
        self._last_ts: float | None = None

    # -- feeding ------------------------------------------------------------------------------

    def update(self, event: Event) -> None:
        """Count one finished request (any status: its counters are still what was drafted)."""
        self.observe(event.accepted_tokens, event.drafted_tokens, event.ts)

    def observe(self, accepted: int, drafted: int, ts: float) -> None:
        """Count one request's accepted and drafted tokens at event time ``ts``."""
        if not 0 <= accepted <= drafted:
            raise ValueError("need 0 <= accepted <= drafted")
        self.changed = False
        ring = self._ring
        s = ring.sums
        b = ring.slot(ts)
        if b is not None:
            if drafted == 0:
                # no acceptance rate at all: counted apart, never as a rate of 0
                b[_NODRAFT] += 1
                s[_NODRAFT] += 1
            else:
                # field by field rather than a tuple through BucketRing.add: this runs per event
                aa, dd, ad = accepted * accepted, drafted * drafted, accepted * drafted
                b[_REQ] += 1
                s[_REQ] += 1
                b[_A] += accepted
                s[_A] += accepted
                b[_D] += drafted
                s[_D] += drafted
                b[_AA] += aa
                s[_AA] += aa
                b[_DD] += dd
                s[_DD] += dd
                b[_AD] += ad
                s[_AD] += ad
        if self._last_ts is None or ts > self._last_ts:
            self._last_ts = ts

        # the decision, on the window's sums
        window_drafted = s[_D]
        if s[_REQ] < self.min_requests or window_drafted < self.min_tokens:
            return  # not sufficient: the state stays as last decided
        rate = s[_A] / window_drafted
        if not self._firing:
            # The interval always holds the point estimate, so its upper bound cannot be under
            # the cutoff while the rate is not: the interval, the costly part, is worked out
            # only for a rate under the cutoff. The decision is the one the interval would
            # give on every event.
            if rate < self.cutoff and self.interval[1] < self.cutoff:
                self._firing = self.changed = True
        elif rate > self.cutoff + self.hysteresis:
            self._firing = False
            self.changed = True

    def update_many(self, events: Sequence[Event]) -> int:
        """:meth:`update` on ``events`` in order until one flips ``firing``; how many it took.

        Everything reads as after that many :meth:`update` calls (``changed``, ``firing``,
        :meth:`evidence`, the snapshot); the caller acts on a flip and calls again with the
        rest. A bad event raises as :meth:`update` does, the events before it counted.
        """
        ring = self._ring
        sums = ring.sums
        width = ring.bucket
        n = len(events)
        i = 0
        while i < n:
            head, oldest = ring.head, ring.oldest
            if head is not None and oldest is not None:
                # A run: events up to the newest bucket and inside the window, which slot()
                # counts without moving the window or dropping them (floor(ts / width) is in
                # [oldest, head] exactly when ts / width is in [oldest, head + 1): integers are
                # exact floats). Along a run the window's sums only grow.
                lo, newest, hi = float(oldest), float(head), float(head + 1)
                while i < n:
                    start = i
                    # the window's requests / 16 at once: few enough for the bounds of
                    # _may_flip to clear nearly every block, so that few go the per-event path
                    stop = min(n, i + max(_BLOCK_MIN, int(sums[_REQ]) >> 4))
                    block = events[start:stop]
                    ts = [e.ts for e in block]
                    acc = [e.accepted_tokens for e in block]
                    dra = [e.drafted_tokens for e in block]
                    m = _leading_in(ts, lo, hi, width)
                    if not (min(acc) >= 0 and all(map(le, acc, dra))):
                        # a bad event ends the run; the per-event path refuses it, as update()
                        m = min(m, next(k for k, (a, d) in enumerate(zip(acc, dra, strict=True))
                                        if not 0 <= a <= d))
                    if m < len(ts):
                        ts, acc, dra = ts[:m], acc[:m], dra[:m]
                    if m:
                        i = start + m
                        no_draft = dra.count(0)
                        accepted, drafted = sum(acc), sum(dra)
                        if self._may_flip(m - no_draft, accepted, drafted):
                            # one by one, as update() would: the block holds a flip, or may
                            for j in range(start, i):
                                e = events[j]
                                self.observe(e.accepted_tokens, e.drafted_tokens, e.ts)
                                if self.changed:
                                    return j + 1
                        else:
                            self._count_block(ts, acc, dra, no_draft, accepted, drafted, newest)
                    if i < stop:
                        break
                if i == n:
                    break
            # What ends a run takes the per-event path: a newer bucket (the window moves and
            # the decision reads the sums it leaves), one too old, a bad event (refused as by
            # update()), or the first event of all.
            e = events[i]
            self.observe(e.accepted_tokens, e.drafted_tokens, e.ts)
            i += 1
            if self.changed:
                return i
        return n

    def _count_block(self, ts: list[float], acc: list[int], dra: list[int], no_draft: int,
                     accepted: int, drafted: int, newest: float) -> None:
        """Count a block of a run, as its requests one by one would (no flip among them)."""
        self.changed = False
        ring = self._ring
        sums = ring.sums
        width = ring.bucket
        # Integers (a request that drafted nothing adds zeros): summed in any order, the
        # totals are those of one request at a time.
        totals = (len(ts) - no_draft, no_draft, accepted, drafted, sum(map(mul, acc, acc)),
                  sum(map(mul, dra, dra)), sum(map(mul, acc, dra)))
        for f, v in enumerate(totals):
            sums[f] += v
        if min(ts) / width >= newest:
            b = ring.slot(ts[0])  # all in the newest bucket: slot() hands it over, no more
            assert b is not None
            for f, v in enumerate(totals):
                b[f] += v
        else:
            # Late requests among them: each to its bucket, the rest to the newest. slot() is
            # asked in the requests' order, so that a bucket the block creates comes where
            # update() would put it (for the snapshot's order).
            late = [k for k, t in enumerate(ts) if t / width < newest]
            newest_totals = list(totals)
            first = next((k for k, t in enumerate(ts) if t / width >= newest), None)
            for k in sorted([*late, first] if first is not None else late):
                b = ring.slot(ts[k])
                assert b is not None
                if k == first:
                    newest_bucket = b
                    continue
                a, d = acc[k], dra[k]
                row = (1, 0, a, d, a * a, d * d, a * d) if d else (0, 1, 0, 0, 0, 0, 0)
                for f, v in enumerate(row):
                    b[f] += v
                    newest_totals[f] -= v
            if first is not None:
                for f, v in enumerate(newest_totals):
                    newest_bucket[f] += v
        latest = max(ts)  # no NaN in a run: max() keeps what update() keeps
        if latest > self._last_ts:  # type: ignore[operator]  # the run's first event set it
            self._last_ts = latest

    def _may_flip(self, requests: int, accepted: int, drafted: int) -> bool:
        """Whether adding a block of requests (these totals) to the window, one by one, could
        flip ``firing`` on one of them; False only when no decision along the way can.

        Along the block the window's counts only grow (no bucket expires inside a run): the
        bounds below hold at every request of it, so the decision need not run on each.
        """
        s = self._ring.sums
        a0, d0 = s[_A], s[_D]
        d_end = d0 + drafted
        # a request count or token count short at the end is short all along
        if s[_REQ] + requests < self.min_requests or d_end < self.min_tokens:
            return False
        if self._firing:
            # resolving needs rate > cutoff + hysteresis at a sufficient point; there the rate
            # is at most (a0 + accepted) / max(d0, min_tokens), and a correctly rounded
            # division is monotone: under the threshold here, under it at every point
            return (a0 + accepted) / max(d0, self.min_tokens) > self.cutoff + self.hysteresis
        # Firing needs rate < cutoff and the interval's upper bound < cutoff at some point.
        # The rate there is at least a0 / d_end (same monotone rounding argument).
        r_low = a0 / d_end
        if r_low >= self.cutoff:
            return False
        # Wilson's upper bound rises with the rate and falls with the effective tokens (it is
        # the upper root p of (p - r)^2 = (z^2 / n) p (1 - p), whose left over right side rises
        # in p on (r, 1)), and ratio_interval's effective tokens are at most the drafted ones
        # (drafted over a design effect >= 1, or the requests, each drafting >= 1 token). So
        # every upper bound along the block is at least Wilson's at (r_low, d_end): with room
        # for rounding, if that is not under the cutoff no decision along the block fires.
        return _wilson_high(r_low, d_end, _z(self.confidence)) < self.cutoff + _ROUNDING

    # -- results ------------------------------------------------------------------------------

    @property
    def requests(self) -> int:
        """Requests in the window that drafted something."""
        return int(self._ring.sums[_REQ])

    @property
    def no_draft_requests(self) -> int:
        return int(self._ring.sums[_NODRAFT])

    @property
    def no_draft_share(self) -> float | None:
        """Share of the window's requests that drafted nothing (None without requests)."""
        t = self._ring.sums
        total = t[_REQ] + t[_NODRAFT]
        return t[_NODRAFT] / total if total else None

    @property
    def accepted_tokens(self) -> int:
        return int(self._ring.sums[_A])

    @property
    def drafted_tokens(self) -> int:
        return int(self._ring.sums[_D])

    @property
    def rate(self) -> float | None:
        """Token-weighted acceptance rate over the window, None when nothing was drafted."""
        t = self._ring.sums
        return t[_A] / t[_D] if t[_D] else None

    @property
    def sufficient(self) -> bool:
        """Whether the window has enough drafting requests and tokens to decide."""
        t = self._ring.sums
        return t[_REQ] >= self.min_requests and t[_D] >= self.min_tokens

    def _interval_full(self) -> tuple[float, float, float, float]:
        t = self._ring.sums
        return ratio_interval(
            int(t[_REQ]), int(t[_A]), int(t[_D]), int(t[_AA]), int(t[_DD]), int(t[_AD]),
            self.confidence,
        )  # fmt: skip

    @property
    def interval(self) -> tuple[float, float]:
        """Confidence interval (low, high) of the rate; (0, 1) with too little data."""
        low, high, _, _ = self._interval_full()
        return low, high

    @property
    def recommendation(self) -> str:
        """``"on"``, ``"off"`` or ``"insufficient_data"`` (see the class notes)."""
        if self._firing:
            return "off"
        return "on" if self.sufficient else "insufficient_data"

    def evidence(self) -> dict[str, Any]:
        """The numbers behind the decision, JSON-able (an alert's ``details``)."""
        low, high, deff, n_eff = self._interval_full()
        return {
            "recommendation": self.recommendation,
            "rate": self.rate,
            "low": low,
            "high": high,
            "confidence": self.confidence,
            "cutoff": self.cutoff,
            "resolve_above": self.cutoff + self.hysteresis,
            "requests": self.requests,
            "no_draft_requests": self.no_draft_requests,
            "no_draft_share": self.no_draft_share,
            "drafted_tokens": self.drafted_tokens,
            "accepted_tokens": self.accepted_tokens,
            "design_effect": deff,
            "effective_tokens": n_eff,
            "window_s": self.window,
            "sufficient": self.sufficient,
        }
