"""Per-position acceptance: the survival curve of draft positions and the draft length that pays.

A verification step with ``K`` drafts accepts a prefix of them. ``accepted_per_position[i]``
counts the steps that accepted position ``i`` (0-based), so over ``S`` steps the survival
``p_i = per_pos[i] / S`` is the share of steps that kept at least ``i + 1`` drafts and
``sum_i p_i = A / S = tau - 1`` (engine-telemetry.md 5.1).

Because acceptance is a prefix, the survival of the first ``j`` positions does not depend on
how many more drafts follow, so one curve measured at draft length ``K`` predicts the decode
speed at every shorter length ``j`` under the cost model of ``docs/breakeven.md``:

    T(j) = (1 + p_0 + ... + p_{j-1}) / (1 + j (c + v))        (T(0) = 1: no speculation)

The recommended ``num_speculative_tokens`` (the knee) is the ``j`` that maximises ``T``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from monitor.detect.base import Detector, field, nested
from monitor.detect.breakeven import CostModel, cutoff
from monitor.detect.windows import BucketRing
from monitor.telemetry.event import Event

__all__ = ["PositionCurve", "speedup_curve"]

_STEPS, _REQ, _D, _A = range(4)
_FIXED = 4  # fields before the per-position counts
_FOLD_EVERY = 512  # pending requests summed at once: bounds the memory they hold


def speedup_curve(survival: list[float] | tuple[float, ...], marginal_cost: float) -> list[float]:
    """``T(j)`` for ``j = 0..K``: decode speed at draft length ``j`` relative to no speculation.

    >>> [round(t, 3) for t in speedup_curve([0.8, 0.6, 0.4, 0.2], 0.3)]
    [1.0, 1.385, 1.5, 1.474, 1.364]
    """
    out = [1.0]
    tokens = 1.0
    for j, p in enumerate(survival, start=1):
        tokens += p
        out.append(tokens / (1.0 + j * marginal_cost))
    return out


class PositionCurve(Detector):
    """Survival curve of draft positions over a sliding window, and the knee it implies.

    Parameters
    ----------
    cost_model : CostModel or None
        Cost of a drafted token ``m = c + v``; None uses the default cutoff 0.40 as ``m``.
    window : float
        Sliding event-time window in seconds, so the curve follows the present: an hour by
        default, which at typical traffic holds tens of thousands of steps (the curve is a set
        of proportions, so a long window costs nothing in memory: one row of K + 4 sums per
        ``bucket``). Acceptance drifts over hours (vLLM #11188, #41838), not seconds.
    bucket : float
        Bucket width of the window, seconds.
    min_steps : float
        Verification steps the window needs before a knee is recommended.

    Notes
    -----
    The draft length ``K`` is taken from the first event with ``accepted_per_position``;
    segments are keyed by ``num_speculative_tokens``, so an event with another length means
    the caller mixed segments: it is not counted (``mismatched`` rises). Events without the
    per-position list (``missing``) or that drafted nothing are skipped too.

    When an event has no ``verify_steps``, its steps are ``drafted_tokens / K``: with a fixed
    draft length every step proposes ``K`` tokens, ``D = K S`` (engine-telemetry.md 5.1). A
    drafter that proposes fewer than ``K`` tokens on some steps (n-gram lookup with a short
    match) then undercounts steps and overstates survival; the conditional rates
    ``p_i / p_(i-1)`` (``conditional``) need no step count at all and are reported alongside.

    The knee is ``argmax_j T(j)`` (smallest ``j`` on ties, values within 1e-12 of each other
    being ties: rounding is no speed-up). Adding position ``j`` pays only if its survival
    exceeds ``m * T(j - 1)``, the tokens that the same ``m`` target-steps would produce at the
    current speed, not merely ``m`` (which is what a draft position costs relative to *no*
    speculation): the simpler rule ``p_(j-1) > m`` is reported as ``last_paying`` and is never
    shorter than the knee. Since survival is non-increasing,
    ``T`` rises to its maximum and then falls. A knee equal to ``K`` (``at_limit``) means
    longer drafts might pay too: the curve cannot tell beyond ``K``. A knee of 0 means
    speculation does not pay at any length (the route's rate is under break-even).

    Examples
    --------
    >>> curve = PositionCurve(cost_model=CostModel(c=0.3), min_steps=10)
    >>> for t in range(5):
    ...     curve.observe([16, 12, 8, 4], steps=20, ts=float(t))
    >>> curve.survival
    [0.8, 0.6, 0.4, 0.2]
    >>> curve.knee, curve.last_paying, round(curve.tau, 2)
    (2, 3, 3.0)
    >>> curve.conditional
    [0.8, 0.75, 0.6666666666666666, 0.5]
    """

    KIND = "position_curve"
    VERSION = 2  # compact: see monitor.detect.base
    COMPACT = True
    READS = (1,)
    PARAMS = {"cost_model": lambda cm: cm, "window": float, "bucket": float,
              "min_steps": lambda n: n}
    STATE = (field("num_speculative_tokens", "num_speculative_tokens"),
             field("missing", "missing", load=int), field("mismatched", "mismatched", load=int),
             nested("ring", BucketRing, optional=True))

    def __init__(
        self,
        cost_model: CostModel | None = None,
        window: float = 3600.0,
        bucket: float = 60.0,
        min_steps: float = 200,
    ) -> None:
        self._set_params(locals())
        BucketRing(window, bucket, 1)  # validates window and bucket now rather than later
        self.num_speculative_tokens: int | None = None
        self.missing = 0
        self.mismatched = 0
        self._ring: BucketRing | None = None
        self._start_pending(None)

    def _start_pending(self, bucket: list[float] | None) -> None:
        # Per-position counts of the newest bucket's requests, not yet summed: adding K counts
        # to two lists per request is most of the cost of a request, and nothing reads the
        # curve per request. The tuples are summed column-wise (in C) when the newest bucket
        # changes, when there are _FOLD_EVERY of them, and before anything reads the window.
        # They are integers, so when they are summed changes no total.
        self._pending: list[tuple[int, ...]] = []
        self._pending_bucket = bucket
        head = None if bucket is None or self._ring is None else self._ring.head
        self._pending_lo = math.nan if head is None else float(head)
        self._pending_hi = math.nan if head is None else float(head + 1)

    def _fold(self) -> list[float]:
        """Sum the pending counts into their bucket and the window; the window's sums."""
        assert self._ring is not None
        sums = self._ring.sums
        pending = self._pending
        if pending:
            b = self._pending_bucket
            assert b is not None
            n = len(pending)
            b[_REQ] += n
            sums[_REQ] += n
            accepted = 0
            for j, column in enumerate(zip(*pending, strict=True), _FIXED):
                c = sum(column)
                accepted += c
                b[j] += c
                sums[j] += c
            b[_A] += accepted
            sums[_A] += accepted
            pending.clear()
        return sums

    @property
    def marginal_cost(self) -> float:
        """Cost of one drafted position in target-step units: c + v, or the default 0.40."""
        return cutoff(self.cost_model)

    # -- feeding ------------------------------------------------------------------------------

    def update(self, event: Event) -> None:
        """Count one request's per-position acceptance (skipped when it has none)."""
        per_pos = event.accepted_per_position
        drafted = event.drafted_tokens
        if per_pos is None or not drafted:
            self.missing += per_pos is None
            return
        steps: float | None = event.verify_steps
        ts = event.ts
        q = ts / self.bucket
        if (
            self._pending_lo <= q < self._pending_hi
            and steps is not None
            and steps > 0
            and len(per_pos) == self.num_speculative_tokens
        ):
            # the common case, in the newest bucket: observe() without its checks (the ring
            # and the pending bucket exist: the bounds are NaN until they do)
            b = self._pending_bucket
            sums = self._ring.sums  # type: ignore[union-attr]
            b[_STEPS] += steps  # type: ignore[index]
            sums[_STEPS] += steps
            b[_D] += drafted  # type: ignore[index]
            sums[_D] += drafted
            self._pending.append(per_pos)
            if len(self._pending) >= _FOLD_EVERY:
                self._fold()
            return
        k = len(per_pos)
        if steps is None:
            steps = drafted / k if k else 0
        self.observe(per_pos, steps, ts, drafted=drafted)

    def update_many(self, events: Sequence[Event]) -> None:
        """:meth:`update` on each of ``events`` in order, for less: the same state after.

        Nothing here flips: the curve is read (``knee``, :meth:`evidence`) when the caller
        wants it, and reads as after the same :meth:`update` calls.
        """
        width = self.bucket
        n = len(events)
        i = 0
        while i < n:
            lo, hi = self._pending_lo, self._pending_hi
            if lo == lo:  # a newest bucket to count in (NaN bounds until there is one)
                # update()'s common case, request after request without the call: the steps
                # and drafted tokens are added one at a time, in order, to the bucket and the
                # window (in locals): the same additions, so the same floats, as update()
                k = self.num_speculative_tokens
                b = self._pending_bucket
                assert b is not None and self._ring is not None
                sums = self._ring.sums
                append = self._pending.append
                b_steps, s_steps, b_d, s_d = b[_STEPS], sums[_STEPS], b[_D], sums[_D]
                j = i
                for e in events[i:] if i else events:
                    per_pos = e.accepted_per_position
                    steps = e.verify_steps
                    drafted = e.drafted_tokens
                    if (
                        per_pos is None
                        or not drafted
                        or steps is None
                        or not steps > 0
                        or len(per_pos) != k
                        or not lo <= e.ts / width < hi
                    ):
                        break  # anything else: update() itself
                    b_steps += steps
                    s_steps += steps
                    b_d += drafted
                    s_d += drafted
                    append(per_pos)
                    j += 1
                if j > i:
                    b[_STEPS], sums[_STEPS], b[_D], sums[_D] = b_steps, s_steps, b_d, s_d
                    if len(self._pending) >= _FOLD_EVERY:
                        self._fold()  # when the integer counts are summed changes no total
                    i = j
                    if i == n:
                        break
            self.update(events[i])
            i += 1

    def observe(
        self,
        per_position: list[int] | tuple[int, ...],
        steps: float,
        ts: float,
        drafted: int | None = None,
    ) -> None:
        """Count ``per_position`` accepted counts over ``steps`` verification steps at ``ts``."""
        k = len(per_position)
        if k == 0 or steps <= 0:
            return
        if self.num_speculative_tokens is None:
            self.num_speculative_tokens = k
            self._ring = BucketRing(self.window, self.bucket, _FIXED + k)
        if k != self.num_speculative_tokens:
            self.mismatched += 1
            return
        ring = self._ring
        assert ring is not None
        d = k * steps if drafted is None else drafted
        q = ts / self.bucket
        if not self._pending_lo <= q < self._pending_hi:
            # the pending counts belong to the newest bucket: in before the window moves
            self._fold()
            b = ring.slot(ts)
            if b is None:
                return
            if ring.head != math.floor(q):
                # a late request, in an older bucket of the window: counted there at once
                sums = ring.sums
                for j, v in enumerate((steps, 1, d, sum(per_position), *per_position)):
                    b[j] += v
                    sums[j] += v
                return
            self._start_pending(b)
        b = self._pending_bucket
        assert b is not None
        sums = ring.sums
        b[_STEPS] += steps
        sums[_STEPS] += steps
        b[_D] += d
        sums[_D] += d
        # a tuple: a list the caller changes later must not change what was counted
        self._pending.append(tuple(per_position))
        if len(self._pending) >= _FOLD_EVERY:
            self._fold()

    # -- results ------------------------------------------------------------------------------

    @property
    def steps(self) -> float:
        """Verification steps in the window."""
        return self._fold()[_STEPS] if self._ring else 0

    @property
    def requests(self) -> int:
        return int(self._fold()[_REQ]) if self._ring else 0

    @property
    def survival(self) -> list[float] | None:
        """``p_i``: share of steps that accepted at least ``i + 1`` drafts (None if no steps)."""
        if self._ring is None or self._fold()[_STEPS] <= 0:
            return None
        t = self._fold()
        s = t[_STEPS]
        return [n / s for n in t[_FIXED:]]

    @property
    def conditional(self) -> list[float | None] | None:
        """``p_i / p_(i-1)``: acceptance of position ``i`` given that ``i - 1`` was accepted."""
        if self._ring is None or self._fold()[_STEPS] <= 0:
            return None
        t = self._fold()
        out: list[float | None] = []
        prev = t[_STEPS]
        for n in t[_FIXED:]:
            out.append(n / prev if prev > 0 else None)
            prev = n
        return out

    @property
    def tau(self) -> float | None:
        """Mean tokens per verification step, bonus included: 1 + sum p_i."""
        p = self.survival
        return None if p is None else 1.0 + math.fsum(p)

    @property
    def speedup(self) -> list[float] | None:
        """``T(j)`` for ``j = 0..K`` under the cost model (see :func:`speedup_curve`)."""
        p = self.survival
        return None if p is None else speedup_curve(p, self.marginal_cost)

    @property
    def sufficient(self) -> bool:
        return self.steps >= self.min_steps

    @property
    def knee(self) -> int | None:
        """Recommended ``num_speculative_tokens`` (0 = off); None with too few steps."""
        curve = self.speedup
        if curve is None or not self.sufficient:
            return None
        # Ties go to the shorter draft, and values that differ by rounding alone are ties: a
        # position that survives exactly as often as it costs neither gains nor loses, yet the
        # running sum in T can make the longer draft look better in the last bit.
        floor = max(curve) * (1.0 - 1e-12)
        return next(j for j, t in enumerate(curve) if t >= floor)

    @property
    def last_paying(self) -> int | None:
        """The largest ``j`` whose position survives more than it costs: ``p_(j-1) > c + v``."""
        p = self.survival
        if p is None or not self.sufficient:
            return None
        m = self.marginal_cost
        return max((j for j in range(1, len(p) + 1) if p[j - 1] > m), default=0)

    def evidence(self) -> dict[str, Any]:
        """The curve and the recommendation, JSON-able."""
        knee = self.knee
        return {
            "num_speculative_tokens": self.num_speculative_tokens,
            "recommended_num_speculative_tokens": knee,
            "at_limit": knee is not None and knee == self.num_speculative_tokens,
            "last_paying": self.last_paying,
            "marginal_cost": self.marginal_cost,
            "survival": self.survival,
            "conditional": self.conditional,
            "speedup": self.speedup,
            "tau": self.tau,
            "steps": self.steps,
            "requests": self.requests,
            "window_s": self.window,
            "sufficient": self.sufficient,
        }

    # -- state --------------------------------------------------------------------------------

    def params(self) -> dict[str, Any]:
        cm = self.cost_model
        return {**super().params(), "cost_model": None if cm is None else {"c": cm.c, "v": cm.v}}

    @classmethod
    def _from_params(cls, params: dict[str, Any]) -> PositionCurve:
        cm = params.pop("cost_model")
        return cls(cost_model=None if cm is None else CostModel(**cm), **params)

    def _state(self) -> dict[str, Any]:
        if self._ring is not None:
            self._fold()  # the snapshot holds every count; when they are summed changes none
        return super()._state()
