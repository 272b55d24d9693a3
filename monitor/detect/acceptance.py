"""Acceptance change points per segment: ``acceptance_drop`` and ``acceptance_rise``.

The unit of evidence is the **request**: ``update(accepted, drafted, ts)``. Tokens of one
request are not independent (acceptance varies from prompt to prompt), so a test that treats
them as coin flips false-alarms on real traffic. The default detector,
:class:`OverdispersedCusum`, is a bank of quasi-likelihood CUSUMs:

1. **Warm-up** learns the segment: the intra-request correlation rho (method of moments),
   the baseline, and the request rate (from event time).
2. **Increments** are per-request binomial log-likelihood ratios divided by the design effect
   ``1 + (d - 1) rho``, so a long request counts as the few independent tokens it is worth.
   The baseline p0 is the matching quasi-likelihood estimate ``sum(w a) / sum(w d)``.
3. **Bank**: one CUSUM per relative effect (default 5, 10, 20, 40, 80 %) and side. The
   smallest is the minimum effect worth reporting; the larger ones catch big changes fast.
4. **Thresholds** come from the false-alarm target: ARL0 = ``false_alarm_days`` x the
   request rate, times the number of CUSUMs (Bonferroni), turned into h by Siegmund's formula
   with each CUSUM's *empirical* adjustment coefficient theta, solved on every baseline
   request (:mod:`monitor.detect.acceptance_reference`). The false-alarm rate is averaged
   over the baseline's remaining uncertainty, so a young baseline gets higher thresholds that
   come down as it refines (:func:`monitor.detect.calibration.quasi_cusum_threshold`).
   Two guards keep rare extreme requests (a prompt the draft cannot follow) from paging:
   no request adds more than ``h / min_requests`` to a CUSUM, and theta is capped at 1 until
   the baseline has seen enough requests (20,000) to know its tail.
5. **Refinement**: while no change is suspected, requests join the baseline in chunks, one
   chunk late, so data after a change never drags the baseline.
6. **After an alarm** the detector holds the changed state (``direction``) and runs a
   recovery test (a reversed CUSUM between the baseline and the baseline moved by the
   minimum effect) until acceptance is back; ``reset_baseline()`` starts a fresh warm-up.

River's ADWIN and PageHinkley sit behind the same interface
(:mod:`monitor.detect.river_adapters`); :func:`make_detector` builds any of them and
:func:`restore_detector` reads any snapshot.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from operator import attrgetter
from typing import Any, Protocol, Self, runtime_checkable

import numpy as np

from monitor import heap
from monitor.detect.acceptance_reference import EmptyHistogram, RequestHistogram
from monitor.detect.base import Detector, same_json
from monitor.detect.calibration import quasi_cusum_thresholds
from monitor.detect.exceptions import StateVersionError

DAY_S = 86400.0

DROP = "drop"
RISE = "rise"

# Rises are capped at this share of the headroom to 1: a 40 % rise of 0.8 does not exist.
_RISE_HEADROOM = 0.8
# A chunk is not merged into the baseline while some CUSUM is past this share of its
# threshold: a change may be under way.
_SUSPECT = 0.5
# Recalibrate when the baseline has grown by this factor or the request rate moved by it.
_RECALIBRATE = 1.25
# Until the baseline holds this many requests, theta is capped at 1 (an exact likelihood
# ratio's value): a few thousand requests rarely include the rare extreme ones that dominate
# E[exp(theta l)] of the large-effect CUSUMs, so a young sample overstates theta (by a third
# at 80 % on the simulator's routes, with false alarms to match), hardly ever understates it.
_MATURE = 20_000
_EMPTY_EX = (0.0, 0.0, 0.0, -1.0, 0.0)  # excursion since S left 0: n, a, d, ts, index

# Every CUSUM increment is clipped to [_X_FLOOR, h / min_requests] and rounded to a multiple
# of 2**-32 (adding and subtracting _GRID, which CPython and numpy do alike). Sums of such
# numbers below 2**21 are exact in float64, so a statistic fed a message of requests at once
# (a cumulative sum, :meth:`OverdispersedCusum.update_many`) equals the one fed request by
# request, bit for bit, whatever the grouping: a replay cut anywhere decides the same. The
# rounding moves an increment by at most 1.2e-10; a request below the floor resets S anyway.
_GRID = 1.5 * 2.0**20
_X_FLOOR = -1024.0
_RUN_MAX = 1024  # requests per vectorised run: |partial sums| <= 2**20
_H_MAX = 2.0**18  # thresholds above this (none in practice) take the per-request path
_VECTOR_MIN = 24  # shorter runs are cheaper request by request


def on_grid(x: float) -> float:
    """``x`` rounded to the increments' grid (|x| < 2**19).

    >>> x = on_grid(0.1)
    >>> x == 0.1, abs(x - 0.1) < 2.0**-33, on_grid(x) == x
    (False, True, True)
    """
    return (x + _GRID) - _GRID

# Sums kept per chunk of requests: count, accepted, drafted, the quasi-likelihood sums w a and
# w d, and their second moments for the baseline's standard error.
_N, _A, _D, _WA, _WD, _WAA, _WAD, _WDD = range(8)
_SUMS = 8
# A warm-up's placeholders (see OverdispersedCusum._reset): shared, and unchangeable.
_ZEROS = (0.0,) * _SUMS
_EMPTY_HIST = EmptyHistogram()


@runtime_checkable
class AcceptanceDetector(Protocol):
    """What the alert engine needs from an acceptance detector (river's DriftDetector style).

    ``drift_detected`` and ``recovered`` are true only on the update where a change was
    detected or the changed state ended; ``direction`` ("drop" | "rise") holds while changed.
    """

    @property
    def drift_detected(self) -> bool: ...

    @property
    def recovered(self) -> bool: ...

    @property
    def direction(self) -> str | None: ...

    @property
    def baseline(self) -> float | None: ...

    @property
    def current(self) -> float | None: ...

    @property
    def statistic(self) -> float: ...

    @property
    def threshold(self) -> float | None: ...

    @property
    def requests(self) -> int:
        """Requests judged so far (evidence's ``requests``, without building it)."""
        ...

    def update(self, accepted: int, drafted: int, ts: float | None = None) -> None: ...

    def update_many(self, accepted: Sequence[int], drafted: Sequence[int],
                    ts: Sequence[float] | None = None) -> int:
        """Requests in order until one flips the state (read the flags as after ``update``);
        how many were taken."""
        ...

    def evidence(self) -> dict[str, Any]: ...

    def snapshot(self) -> dict[str, Any]: ...

    @classmethod
    def restore(cls, data: dict[str, Any]) -> Self: ...

    def reset_baseline(self) -> None: ...


class OverdispersedCusum(Detector):
    """Two-sided bank of quasi-likelihood CUSUMs on per-request acceptance counts.

    Parameters
    ----------
    min_effect
        Smallest relative change worth reporting (0.05 = 5 %): the smallest CUSUM of the bank
        is tuned to it, and the recovery test calls acceptance back within it.
    effects
        Relative effects of the bank; default: ``min_effect`` doubled up to 80 %
        (5, 10, 20, 40, 80 %). Rises are capped at 80 % of the headroom to 1.
    false_alarm_days
        Target mean time between false alarms of the whole detector (both sides, every
        effect), in days of this segment's traffic.
    arl_requests
        The same target in requests; overrides ``false_alarm_days`` and makes ``ts``
        optional.
    two_sided
        Also test for rises (``acceptance_rise``).
    warmup_requests, warmup_tokens
        Warm-up ends once both are reached (or at 4 x ``warmup_requests``); its requests are
        kept raw until then.
    baseline_chunk
        Requests per refinement chunk; a chunk joins the baseline one chunk later.
    min_requests
        No single request adds more than ``threshold / min_requests`` to a CUSUM: a change
        is a property of traffic, and one odd request must not page anyone.
    overdispersion
        False treats tokens as independent coin flips (rho = 0, theta = 1): for comparison
        only, it false-alarms on real traffic.
    refine
        False keeps the baseline as it is (see :meth:`carried`): the test stays one of the
        new requests against that baseline, never against a blend of both.

    Examples
    --------
    A stable stream with prompt-to-prompt spread (Beta, concentration 30) at acceptance 0.6,
    then a 10 % drop at request 5,000:

    >>> import numpy as np
    >>> rng = np.random.default_rng(42)
    >>> det = OverdispersedCusum(arl_requests=1e6)
    >>> for i in range(8000):
    ...     p = rng.beta(18, 12) * (0.9 if i >= 5000 else 1.0)
    ...     drafted = 4 * int(rng.integers(20, 80))
    ...     det.update(int(rng.binomial(drafted, p)), drafted)
    ...     if det.drift_detected:
    ...         ev = det.evidence()
    ...         print(i, det.direction, ev["change_index"], round(det.current / det.baseline, 2))
    5038 drop 4994 0.87
    """

    KIND = "overdispersed_cusum"
    VERSION = 2  # compact: see monitor.detect.base
    COMPACT = True
    READS = (1,)
    # Slots, not an instance dict: some forty attributes, one detector per segment.
    __slots__ = (
        "min_effect", "effects", "false_alarm_days", "arl_requests", "two_sided",
        "warmup_requests", "warmup_tokens", "baseline_chunk", "min_requests", "overdispersion",
        "refine",
        "_phase", "_drift", "_recovered", "_direction", "_n", "_ts_first", "_ts_last",
        "_warm_a", "_warm_d", "_warm_tokens", "_rho", "_base", "_ref", "_p0", "_cal_n",
        "_cal_rate", "_arl", "_side", "_delta", "_p1", "_ca", "_cb", "_h", "_cap", "_bank",
        "_theta", "_s", "_ex", "_older", "_older_hist", "_newer", "_newer_hist", "_alarm",
        "_since", "_rec_ca", "_rec_cb", "_rec_h", "_rec_s", "_rec_ex", "_back",
        "_compact",  # see Detector.snapshot
        "__weakref__",  # monitor/exposition.py keys a cache by detector
    )
    # stored as given (``effects`` as the sorted list the constructor made of it)
    PARAMS = dict.fromkeys((
        "min_effect", "effects", "false_alarm_days", "arl_requests", "two_sided",
        "warmup_requests", "warmup_tokens", "baseline_chunk", "min_requests", "overdispersion",
        "refine",
    ), lambda value: value)

    def __init__(
        self,
        min_effect: float = 0.05,
        effects: tuple[float, ...] | None = None,
        false_alarm_days: float = 30.0,
        arl_requests: float | None = None,
        two_sided: bool = True,
        warmup_requests: int = 2000,
        warmup_tokens: int = 50_000,
        baseline_chunk: int = 500,
        min_requests: int = 2,
        overdispersion: bool = True,
        refine: bool = True,
    ) -> None:
        if not 0.0 < min_effect < 1.0:
            raise ValueError(f"min_effect must be in (0, 1), got {min_effect}")
        if effects is None:
            grid, e = [], min_effect
            while e < 0.8 - 1e-9:
                grid.append(e)
                e *= 2.0
            effects = (*grid, 0.8)
        effects = tuple(sorted(float(e) for e in effects))
        if not effects or not all(0.0 < e < 1.0 for e in effects):
            raise ValueError(f"effects must be relative changes in (0, 1), got {effects}")
        if not false_alarm_days > 0:
            raise ValueError("false_alarm_days must be > 0")
        if arl_requests is not None and not arl_requests > 1:
            raise ValueError("arl_requests must be > 1")
        if warmup_requests < 50 or warmup_tokens < 0 or baseline_chunk < 10:
            raise ValueError("need warmup_requests >= 50, warmup_tokens >= 0, baseline_chunk >= 10")
        if min_requests < 1:
            raise ValueError("min_requests must be >= 1")
        self._set_params(locals())
        self._reset()

    # -- state -------------------------------------------------------------------------------

    def _reset(self) -> None:
        self._phase = "warmup"
        self._drift = False
        self._recovered = False
        self._direction: str | None = None
        self._n = 0  # drafted requests seen, all phases
        self._ts_first: float | None = None
        self._ts_last: float | None = None
        # warm-up: the requests, raw; int32 arrays (4 bytes a count, where a list of
        # Python ints took 8 and, above 256, an object of 28 more: up to 8,000 of each),
        # int64 once a count needs it (_widen)
        self._warm_a = heap.int_array()
        self._warm_d = heap.int_array()
        self._warm_tokens = 0
        # the baseline: rho, its sums, its histogram (the reference for theta)
        self._rho = 0.0
        # Until the baseline, the fields of the watch phase hold shared placeholders that
        # cannot change (tuples, a histogram that refuses requests): a segment warming up
        # holds none of its own, and most segments of a large fleet's long tail are warming
        # up. Arming gives each its own (_arm, carried, _set_state: _own_watch_fields).
        self._base: Sequence[float] = _ZEROS
        self._ref: RequestHistogram = _EMPTY_HIST
        self._p0 = 0.0  # quasi-likelihood baseline the test runs against
        self._cal_n = 0.0  # baseline size and rate at the last calibration
        self._cal_rate = 0.0
        self._arl = 0.0  # requests between false alarms of the whole detector
        # the bank, one entry per CUSUM (parallel lists: the hot loop indexes them)
        # (empty tuples until calibrated, which sets lists)
        self._side: Sequence[int] = ()  # -1 drop, +1 rise
        self._delta: Sequence[float] = ()
        self._p1: Sequence[float] = ()
        self._ca: Sequence[float] = ()  # increment w (a ca + (d - a) cb), at most h / min_requests
        self._cb: Sequence[float] = ()
        self._h: Sequence[float] = ()
        self._cap: Sequence[float] = ()  # see _set_caps
        self._bank: tuple[np.ndarray, ...] = ()  # ca, cb, cap, h as arrays: see _set_caps
        self._theta: Sequence[float] = ()
        self._s: Sequence[float] = ()
        self._ex: Sequence[list[float]] = ()  # see _EMPTY_EX
        # refinement chunks: the newer one fills, the older waits a chunk before joining
        self._older: list[float] | None = None
        self._older_hist: RequestHistogram | None = None
        self._newer: Sequence[float] = _ZEROS
        self._newer_hist: RequestHistogram = _EMPTY_HIST
        # the changed state
        self._alarm: dict[str, Any] | None = None
        self._since = [0.0, 0.0, 0.0]  # n, a, d since the estimated change
        self._rec_ca = 0.0
        self._rec_cb = 0.0
        self._rec_h = 0.0
        self._rec_s = 0.0
        self._rec_ex = [0.0, 0.0, 0.0]  # n, a, d since the recovery test left 0
        # after a recovery, the recovery test's evidence stands for `current` until a chunk
        # of new requests is complete
        self._back: list[float] | None = None

    def reset_baseline(self) -> None:
        """Forget the baseline and start a fresh warm-up (new segment, or change accepted)."""
        self._reset()

    def carried(self) -> OverdispersedCusum | None:
        """A detector for the setup that replaced this one: this baseline (rate, rho,
        histogram, thresholds), armed from the first request, never refined. ``None`` while
        this one is still warming up: there is no baseline to carry.

        >>> import numpy as np
        >>> rng = np.random.default_rng(7)
        >>> old = OverdispersedCusum(arl_requests=1e6)
        >>> for _ in range(3000):
        ...     d = 200; old.update(int(rng.binomial(d, rng.beta(18, 12))), d)
        >>> new = old.carried()
        >>> new.phase, round(new.baseline, 2)
        ('watch', 0.6)
        >>> for i in range(2000):  # the replacement accepts 15 % less, from its first request
        ...     d = 200; new.update(int(rng.binomial(d, rng.beta(18, 12) * 0.85)), d)
        ...     if new.drift_detected:
        ...         break
        >>> new.direction, i < 100
        ('drop', True)
        """
        if self._phase == "warmup":
            return None
        twin = type(self)(**{**self.params(), "refine": False})
        twin._phase = "watch"
        twin._rho = self._rho
        twin._base = list(self._base)
        twin._ref = RequestHistogram.from_json(self._ref.to_json())
        twin._newer, twin._newer_hist = [0.0] * _SUMS, RequestHistogram(self._rho)
        twin._p0, twin._cal_n, twin._cal_rate, twin._arl = (
            self._p0, self._cal_n, self._cal_rate, self._arl)
        for name in ("_side", "_delta", "_p1", "_ca", "_cb", "_h", "_theta"):
            setattr(twin, name, list(getattr(self, name)))
        twin._set_caps()
        twin._s = [0.0] * len(self._s)
        twin._ex = [list(_EMPTY_EX) for _ in self._s]
        return twin

    # -- read-only results -------------------------------------------------------------------

    @property
    def drift_detected(self) -> bool:
        """True only on the update where a change was detected."""
        return self._drift

    @property
    def recovered(self) -> bool:
        """True only on the update where the changed state ended."""
        return self._recovered

    @property
    def direction(self) -> str | None:
        """"drop" or "rise" while in the changed state, else None."""
        return self._direction

    @property
    def phase(self) -> str:
        """"warmup", "watch" or "changed"."""
        return self._phase

    @property
    def baseline(self) -> float | None:
        """The baseline engine rate, sum(accepted) / sum(drafted); None during warm-up."""
        if self._phase == "warmup" or self._base[_D] <= 0:
            return None
        return self._base[_A] / self._base[_D]

    @property
    def current(self) -> float | None:
        """Recent engine rate: since the estimated change when changed; else over the
        excursion of the CUSUM nearest its threshold, or the last chunks if none is up."""
        if self._phase == "warmup":
            return None
        if self._phase == "changed":
            return self._since[1] / self._since[2] if self._since[2] > 0 else None
        k = self._leader()
        if k is not None:
            ex = self._ex[k]
            return ex[1] / ex[2] if ex[2] > 0 else None
        a, d = self._newer[_A], self._newer[_D]
        if self._older is not None:
            a, d = a + self._older[_A], d + self._older[_D]
        elif self._back is not None:
            a, d = a + self._back[1], d + self._back[2]
        return a / d if d > 0 else None

    @property
    def statistic(self) -> float:
        """The largest CUSUM as a fraction of its threshold (alarm at 1); in the changed
        state, the recovery test's, as a fraction of its threshold."""
        if self._phase == "warmup":
            return 0.0
        if self._phase == "changed":
            return self._rec_s / self._rec_h
        return max(s / h for s, h in zip(self._s, self._h, strict=True))

    @property
    def threshold(self) -> float | None:
        """1.0 once armed (``statistic`` is normalised), None during warm-up."""
        return None if self._phase == "warmup" else 1.0

    def _leader(self) -> int | None:
        best, arg = 0.0, None
        for k, (s, h) in enumerate(zip(self._s, self._h, strict=True)):
            if s / h > best:
                best, arg = s / h, k
        return arg

    # -- the stream --------------------------------------------------------------------------

    def update(self, accepted: int, drafted: int, ts: float | None = None) -> None:
        """Feed one request; requests that drafted nothing carry no evidence and are ignored."""
        self._drift = False
        self._recovered = False
        if drafted <= 0:
            return
        if not 0 <= accepted <= drafted:
            raise ValueError(f"need 0 <= accepted <= drafted, got {accepted}, {drafted}")
        if ts is None:
            if self.arl_requests is None:
                raise ValueError("ts is required unless arl_requests is given")
        else:
            ts = float(ts)
            if self._ts_first is None:
                self._ts_first = ts
            # late events may come slightly out of order: the span is first to latest
            if self._ts_last is None or ts > self._ts_last:
                self._ts_last = ts
        self._n += 1
        if self._phase == "watch":
            self._watch(accepted, drafted, ts)
        elif self._phase == "changed":
            self._changed(accepted, drafted)
        else:
            self._warm(accepted, drafted)

    def _warm(self, a: int, d: int) -> None:
        if d > heap.INT32_MAX:
            self._widen()
        self._warm_a.append(a)
        self._warm_d.append(d)
        self._warm_tokens += d
        n = len(self._warm_a)
        if (n >= self.warmup_requests and self._warm_tokens >= self.warmup_tokens) or (
            n >= 4 * self.warmup_requests
        ):
            self._arm()

    def _widen(self) -> None:
        """Make the warm-up arrays int64: a count above int32 comes (never from the parser,
        which caps counts at 10**9, but the detector takes any int)."""
        self._warm_a, self._warm_d = heap.widened(self._warm_a), heap.widened(self._warm_d)

    def _arm(self) -> None:
        """End of warm-up: learn rho, build the baseline and the bank."""
        a = np.asarray(self._warm_a, dtype=np.float64)
        d = np.asarray(self._warm_d, dtype=np.float64)
        if self.overdispersion:
            # Method of moments for the beta-binomial variance p(1-p) d (1 + (d - 1) rho).
            p = float(a.sum() / d.sum())
            pairs = float((d * (d - 1.0)).sum())
            if 0.0 < p < 1.0 and pairs > 0:
                excess = float(((a - p * d) ** 2).sum()) / (p * (1.0 - p)) - float(d.sum())
                self._rho = float(min(max(excess / pairs, 0.0), 1.0))
        self._base, self._newer = [0.0] * _SUMS, [0.0] * _SUMS
        self._ref = RequestHistogram(self._rho)
        self._newer_hist = RequestHistogram(self._rho)
        self._add_many(self._base, self._ref, self._warm_a, self._warm_d)
        self._warm_a, self._warm_d = heap.int_array(), heap.int_array()
        self._phase = "watch"
        self._calibrate()

    def _add(self, sums: list[float], hist: RequestHistogram, a: int, d: int) -> None:
        w = 1.0 / (1.0 + (d - 1) * self._rho)
        wa, wd = w * a, w * d
        sums[_N] += 1.0
        sums[_A] += a
        sums[_D] += d
        sums[_WA] += wa
        sums[_WD] += wd
        sums[_WAA] += wa * wa
        sums[_WAD] += wa * wd
        sums[_WDD] += wd * wd
        hist.add(a, d)

    def _add_many(self, sums: list[float], hist: RequestHistogram, a: Sequence[int],
                  d: Sequence[int]) -> None:
        """:meth:`_add` of each request, in order: each sum accumulated one request after
        the other (``np.add.accumulate``, never a pairwise sum), so the floats are the ones
        :meth:`_add` leaves, bit for bit."""
        if not d:
            return
        df = np.array(d, dtype=np.float64)
        self._sum_in(sums, np.array(a, dtype=np.float64), df,
                     1.0 / (1.0 + (df - 1.0) * self._rho))
        hist.add_many(list(a), list(d))

    @staticmethod
    def _sum_in(sums: list[float], a: np.ndarray, d: np.ndarray, w: np.ndarray) -> None:
        """The sums of :meth:`_add_many` for requests as float arrays (w: their weights)."""
        if not len(d):
            return
        wa, wd = w * a, w * d
        terms = np.empty((_SUMS, len(d) + 1))
        terms[:, 0] = sums
        for i, column in ((_N, 1.0), (_A, a), (_D, d), (_WA, wa), (_WD, wd),
                          (_WAA, wa * wa), (_WAD, wa * wd), (_WDD, wd * wd)):
            terms[i, 1:] = column
        sums[:] = np.add.accumulate(terms, axis=1)[:, -1].tolist()

    def _rate(self) -> float:
        """Drafted requests per second of event time, over everything seen."""
        if self._ts_first is None or self._ts_last is None or self._ts_last <= self._ts_first:
            return 0.0
        return (self._n - 1) / (self._ts_last - self._ts_first)

    def _target_arl(self, rate: float) -> float:
        if self.arl_requests is not None:
            return float(self.arl_requests)
        # all requests at one instant give no rate: assume one a second
        return self.false_alarm_days * DAY_S * (rate if rate > 0.0 else 1.0)

    def _bank_levels(self, p0: float) -> list[tuple[int, float, float]]:
        """(side, effect, p1) of each CUSUM for a baseline p0."""
        levels = [(-1, e, p0 * (1.0 - e)) for e in self.effects]
        if self.two_sided:
            cap = p0 + _RISE_HEADROOM * (1.0 - p0)
            seen: set[float] = set()
            for e in self.effects:
                p1 = min(p0 * (1.0 + e), cap)
                if p1 not in seen:
                    seen.add(p1)
                    levels.append((1, e, p1))
        return levels

    def _calibrate(self) -> None:
        """Set p0, the bank's coefficients and thresholds from the baseline."""
        base = self._base
        p0 = min(max(base[_WA] / base[_WD], 1e-6), 1.0 - 1e-6)
        self._p0 = p0
        rate = self._rate()
        self._cal_n, self._cal_rate = base[_N], rate
        levels = self._bank_levels(p0)
        self._arl = self._target_arl(rate)
        arl_each = self._arl * len(levels)  # Bonferroni over the bank and both sides
        # Relative standard error of p0 (sandwich variance of the ratio estimator).
        resid2 = base[_WAA] - 2.0 * p0 * base[_WAD] + p0 * p0 * base[_WDD]
        se = math.sqrt(max(resid2, 0.0)) / base[_WD] / p0
        n, wa, wd = self._ref.arrays()
        # scalar logs, as the per-request path has always used: the coefficients are state
        ca = [math.log(p1 / p0) for _, _, p1 in levels]
        cb = [math.log((1.0 - p1) / (1.0 - p0)) for _, _, p1 in levels]
        hs, thetas = self._thresholds(n, wa, wd, p0, np.array(ca), np.array(cb), se, arl_each)
        # a recalibration keeps each CUSUM's evidence so far
        old = {(s, e): (s_k, ex) for s, e, s_k, ex in
               zip(self._side, self._delta, self._s, self._ex, strict=True)}
        kept = [old.get((side, e), (0.0, list(_EMPTY_EX))) for side, e, _ in levels]
        self._side = [side for side, _, _ in levels]
        self._delta = [e for _, e, _ in levels]
        self._p1 = [p1 for _, _, p1 in levels]
        self._ca, self._cb = ca, cb
        self._h, self._theta = hs.tolist(), thetas.tolist()
        self._s = [s_k for s_k, _ in kept]
        self._ex = [ex for _, ex in kept]
        self._set_caps()

    def _set_caps(self) -> None:
        """Each CUSUM's largest increment, on the grid (derived from ``_h``, not stored);
        and the bank's coefficients as arrays, for runs of requests (:meth:`_watch_run`)."""
        m = self.min_requests
        self._cap = [on_grid(h / m) for h in self._h]
        self._bank = tuple(np.array(v) for v in (self._ca, self._cb, self._cap, self._h))

    def _thresholds(
        self,
        n: np.ndarray,
        wa: np.ndarray,
        wd: np.ndarray,
        p0: float,
        ca: np.ndarray,
        cb: np.ndarray,
        se: float,
        arl: float,
    ) -> tuple[np.ndarray, np.ndarray]:
        """h and theta of CUSUMs (one per entry of ``ca``, ``cb``) from the baseline histogram,
        all solved together (:func:`quasi_cusum_thresholds`).

        Each bin's mean increment is ``(wa ca + (wd - wa) cb) / n``. If the true baseline is
        ``p0 (1 + eta)``, the expected accepted count moves by ``eta p0 d``, so each increment
        moves by ``eta p0 w d (ca - cb)``: the shift averaged over in the false-alarm rate.
        """
        if not self.overdispersion:
            # the coin-flip model's own claim: an exact LLR, theta 1, drift KL per token
            kl = p0 * -ca + (1.0 - p0) * -cb
            drift = kl * float(wd.sum() / n.sum())
            h, _ = quasi_cusum_thresholds(-drift[:, None], np.ones(1), arl, theta_max=1.0,
                                          nodes=1)
            return h, np.ones_like(h)
        inc = (wa * ca[:, None] + (wd - wa) * cb[:, None]) / n
        shift = p0 * (ca - cb)[:, None] * wd / n
        theta_max = 1.0 if self._ref.n < _MATURE else math.inf
        return quasi_cusum_thresholds(
            inc, n, arl, shift=shift, se=se, theta_max=theta_max,
            min_requests=self.min_requests,
        )

    def _watch(self, a: int, d: int, ts: float | None) -> None:
        w = 1.0 / (1.0 + (d - 1) * self._rho)
        b = d - a
        s_list, h_list, ca, cb, ex_list = self._s, self._h, self._ca, self._cb, self._ex
        cap = self._cap
        alarm, best = -1, 0.0
        for k in range(len(s_list)):
            x = w * (a * ca[k] + b * cb[k])
            # clipping only lowers the statistic: the ARL computed without it still holds
            if x >= cap[k]:
                x = cap[k]
            elif x > _X_FLOOR:
                x = (x + _GRID) - _GRID  # on_grid(), inline: see _GRID
            else:
                x = _X_FLOOR
            s = s_list[k] + x
            if s <= 0.0:
                s_list[k] = 0.0
                if ex_list[k][0]:
                    ex_list[k] = list(_EMPTY_EX)
                continue
            ex = ex_list[k]
            if s_list[k] == 0.0:
                # S leaves 0 here: the CUSUM's estimate of the change point is this request
                ex = ex_list[k] = [0.0, 0.0, 0.0, -1.0 if ts is None else ts, float(self._n)]
            ex[0] += 1.0
            ex[1] += a
            ex[2] += d
            s_list[k] = s
            h = h_list[k]
            if s >= h and s / h > best:
                best, alarm = s / h, k
        if alarm >= 0:
            self._fire(alarm, ts)
        else:
            self._refine(a, d)

    # -- a message of requests at once -------------------------------------------------------

    def update_many(self, accepted: Sequence[int], drafted: Sequence[int],
                    ts: Sequence[float] | None = None) -> int:
        """Feed requests in order until one flips the state; returns how many were taken.

        Exactly what calling :meth:`update` on each would do (a property test holds the two
        equal): the caller reads ``drift_detected``/``recovered`` after each call, as after
        :meth:`update`, and calls again with the rest. While watching, runs of requests go
        through the bank as arrays: a cumulative sum per CUSUM (Lindley's form,
        ``S_n = C_n - min(min_j C_j, -S_0)``), exact by the increments' grid.
        """
        n = len(drafted)
        if len(accepted) != n or (ts is not None and len(ts) != n):
            raise ValueError("accepted, drafted and ts must have one entry per request")
        i = 0
        self._drift = self._recovered = False
        while i < n:
            run = 0
            if self._phase == "watch":
                run = min(n - i, self.baseline_chunk - int(self._newer[_N]), _RUN_MAX)
            if run >= _VECTOR_MIN and max(self._h) < _H_MAX:
                i += self._watch_run(accepted, drafted, ts, i, run)
            elif self._phase == "warmup" and (ts is not None or self.arl_requests is not None):
                i += self._warm_run(accepted, drafted, ts, i)
            else:
                self.update(accepted[i], drafted[i], None if ts is None else ts[i])
                i += 1
            if self._drift or self._recovered:
                break
        return i

    def _watch_run(self, accepted: Sequence[int], drafted: Sequence[int],
                   ts: Sequence[float] | None, i: int, run: int) -> int:
        """:meth:`_watch` for ``run`` requests from ``i``, none completing a chunk before the
        last; returns how many were taken (up to and including an alarm's request)."""
        a_in, d_in = accepted[i:i + run], drafted[i:i + run]
        a = np.array(a_in, dtype=np.float64)
        d = np.array(d_in, dtype=np.float64)
        if not (d.min() > 0 and a.min() >= 0 and (a <= d).all()):
            # update() names the bad request; requests before it count as usual
            self.update(a_in[0], d_in[0], None if ts is None else ts[i])
            return 1
        ca, cb, cap, h = self._bank
        w = 1.0 / (1.0 + (d - 1.0) * self._rho)
        x = w[:, None] * (a[:, None] * ca + (d - a)[:, None] * cb)
        # _watch's clip and grid: the cap and the floor are grid points, so rounding every
        # increment first and clipping after gives the same numbers, in place
        x += _GRID
        x -= _GRID
        np.minimum(x, cap, out=x)
        np.maximum(x, _X_FLOOR, out=x)
        c = np.cumsum(x, axis=0)
        s0 = np.array(self._s)
        s = c - np.minimum(np.minimum.accumulate(c, axis=0), -s0)
        hit = (s >= h).any(axis=1)
        alarm_row = int(hit.argmax()) if hit.any() else -1
        last = alarm_row if alarm_row >= 0 else run - 1
        taken = last + 1
        n_before = self._n
        self._n += taken
        t_in = None if ts is None else [float(t) for t in ts[i:i + taken]]
        if t_in is not None:
            self._stamp(t_in)
        self._excursions(s[:taken], s0, a[:taken], d[:taken], t_in, n_before)
        if alarm_row >= 0:
            ratio = np.where(s[alarm_row] >= h, s[alarm_row] / h, -np.inf)
            self._sum_in(self._newer, a[:alarm_row], d[:alarm_row], w[:alarm_row])
            self._newer_hist.add_many(list(a_in[:alarm_row]), list(d_in[:alarm_row]))
            self._fire(int(ratio.argmax()), None if t_in is None else t_in[-1])
            return taken
        self._sum_in(self._newer, a[:-1], d[:-1], w[:-1])
        self._newer_hist.add_many(list(a_in[:-1]), list(d_in[:-1]))
        self._refine(a_in[-1], d_in[-1])  # the run's last request may complete the chunk
        return taken

    def _warm_run(self, accepted: Sequence[int], drafted: Sequence[int],
                  ts: Sequence[float] | None, i: int) -> int:
        """:meth:`_warm` for the requests from ``i`` up to the one that ends the warm-up
        (which arms the bank) or the last; returns how many were taken."""
        d = np.array(drafted[i:], dtype=np.int64)
        a = np.array(accepted[i:], dtype=np.int64)
        odd = np.flatnonzero((d <= 0) | (a < 0) | (a > d))
        if odd.size and odd[0] == 0:
            # update() skips or names the odd request; requests before it count as usual
            self.update(accepted[i], drafted[i], None if ts is None else ts[i])
            return 1
        if odd.size:
            a, d = a[:odd[0]], d[:odd[0]]
        a_in, d_in = list(accepted[i:i + len(d)]), list(drafted[i:i + len(d)])
        seen = len(self._warm_a) + np.arange(1, len(d) + 1)
        tokens = self._warm_tokens + np.cumsum(d)
        ready = ((seen >= self.warmup_requests) & (tokens >= self.warmup_tokens)) | (
            seen >= 4 * self.warmup_requests)
        taken = int(ready.argmax()) + 1 if ready.any() else len(d)
        if ts is not None:
            self._stamp([float(t) for t in ts[i:i + taken]])
        self._n += taken
        if int(d[:taken].max()) > heap.INT32_MAX:  # accepted <= drafted: d says for both
            self._widen()
        self._warm_a.extend(a_in[:taken])
        self._warm_d.extend(d_in[:taken])
        self._warm_tokens = int(tokens[taken - 1])
        if ready.any():
            self._arm()
        return taken

    def _stamp(self, ts: list[float]) -> None:
        """The event-time span after requests at ``ts`` (in order), as :meth:`update` keeps
        it: first seen, and latest."""
        if self._ts_first is None:
            self._ts_first = ts[0]
        newest = max(ts)
        if self._ts_last is None or newest > self._ts_last:
            self._ts_last = newest

    def _excursions(self, s: np.ndarray, s0: np.ndarray, a: np.ndarray, d: np.ndarray,
                    ts: list[float] | None, n_before: int) -> None:
        """Set each CUSUM's statistic and excursion (see _EMPTY_EX) to what request-by-request
        updates would leave after the rows of ``s``."""
        rows = len(s)
        last_zero = np.where(s == 0.0, np.arange(rows)[:, None], -1).max(axis=0)
        a_cum = np.concatenate(([0.0], np.cumsum(a)))  # integers: exact
        d_cum = np.concatenate(([0.0], np.cumsum(d)))
        final = s[-1].tolist()
        ex_list = self._ex
        for k, s_k in enumerate(final):
            z = int(last_zero[k])
            if s_k == 0.0:
                if ex_list[k][0]:
                    ex_list[k] = list(_EMPTY_EX)
            elif z >= 0 or s0[k] == 0.0:
                start = z + 1  # S left 0 at this row (z = -1: at the first)
                ex_list[k] = [float(rows - start), float(a_cum[rows] - a_cum[start]),
                              float(d_cum[rows] - d_cum[start]),
                              -1.0 if ts is None else ts[start], float(n_before + start + 1)]
            else:
                ex = ex_list[k]
                ex[0] += float(rows)
                ex[1] += float(a_cum[rows])
                ex[2] += float(d_cum[rows])
        self._s = final

    def _refine(self, a: int, d: int) -> None:
        """Add the request to the newer chunk; when it is full, let the older one join."""
        self._add(self._newer, self._newer_hist, a, d)
        if self._newer[_N] < self.baseline_chunk:
            return
        suspect = any(s >= _SUSPECT * h for s, h in zip(self._s, self._h, strict=True))
        if (self.refine and self._older is not None and self._older_hist is not None
                and not suspect):
            for i in range(_SUMS):
                self._base[i] += self._older[i]
            self._ref.merge(self._older_hist)
        self._older, self._older_hist = self._newer, self._newer_hist
        self._newer, self._newer_hist = [0.0] * _SUMS, RequestHistogram(self._rho)
        self._back = None
        rate = self._rate()
        grown = self._base[_N] >= _RECALIBRATE * self._cal_n
        moved = (
            self.arl_requests is None
            and rate > 0.0
            and self._cal_rate > 0.0
            and abs(math.log(rate / self._cal_rate)) > math.log(_RECALIBRATE)
        )
        if grown or moved:
            self._calibrate()

    def _drop_chunks(self) -> None:
        self._older, self._older_hist = None, None
        self._newer, self._newer_hist = [0.0] * _SUMS, RequestHistogram(self._rho)

    def _fire(self, k: int, ts: float | None) -> None:
        ex = self._ex[k]
        direction = DROP if self._side[k] < 0 else RISE
        self._drift = True
        self._direction = direction
        self._phase = "changed"
        self._since = [ex[0], ex[1], ex[2]]
        self._alarm = {
            "effect": self._delta[k],
            "p1": self._p1[k],
            "cusum": self._s[k],
            "cusum_threshold": self._h[k],
            "theta": self._theta[k],
            "change_ts": ex[3] if ex[3] >= 0 else None,
            "change_index": int(ex[4]),
            "detected_ts": ts,
            "detected_index": self._n,
        }
        # Nothing after the last merged chunk may join the baseline: it may be changed data.
        self._drop_chunks()
        self._s = [0.0] * len(self._s)
        self._ex = [list(_EMPTY_EX) for _ in self._ex]
        self._arm_recovery(direction)

    def _arm_recovery(self, direction: str) -> None:
        """Reversed CUSUM: evidence for the baseline p0 against p0 moved by the minimum effect."""
        p0 = self._p0
        if direction == DROP:
            pc = p0 * (1.0 - self.min_effect)
        else:
            pc = min(p0 * (1.0 + self.min_effect), p0 + _RISE_HEADROOM * (1.0 - p0))
        self._rec_ca = math.log(p0 / pc)
        self._rec_cb = math.log((1.0 - p0) / (1.0 - pc))
        # Its null is "still changed, at pc": the baseline's requests moved to that level.
        n, wa, wd = self._ref.arrays()
        wa = wa * (pc / p0)
        # A false recovery only re-opens the episode later, so one test's ARL is enough.
        hs, _ = self._thresholds(n, wa, wd, pc, np.array([self._rec_ca]),
                                 np.array([self._rec_cb]), 0.0, self._arl)
        self._rec_h = float(hs[0])
        self._rec_s, self._rec_ex, self._back = 0.0, [0.0, 0.0, 0.0], None

    def _changed(self, a: int, d: int) -> None:
        since = self._since
        since[0] += 1.0
        since[1] += a
        since[2] += d
        w = 1.0 / (1.0 + (d - 1) * self._rho)
        x = w * (a * self._rec_ca + (d - a) * self._rec_cb)
        # clipped like the bank (its threshold assumes it)
        s = self._rec_s + min(x, self._rec_h / self.min_requests)
        if s <= 0.0:
            self._rec_s, self._rec_ex = 0.0, [0.0, 0.0, 0.0]
            return
        self._rec_s = s
        ex = self._rec_ex
        ex[0] += 1.0
        ex[1] += a
        ex[2] += d
        if s >= self._rec_h:
            self._recovered = True
            self._direction = None
            self._phase = "watch"
            self._drop_chunks()
            self._back = ex
            self._rec_s, self._rec_ex = 0.0, [0.0, 0.0, 0.0]

    # -- reporting ---------------------------------------------------------------------------

    @property
    def requests(self) -> int:
        """Requests judged so far."""
        return self._n

    def evidence(self) -> dict[str, Any]:
        """Numbers for an alert's details (JSON-ready).

        Always: detector, phase, direction, baseline, current, requests, statistic. Once
        armed: the baseline's size, its test value (quasi-likelihood p0), rho, the ARL target
        in requests, the request rate and each CUSUM's threshold. While changed: the alarm
        (effect, the CUSUM and its threshold, theta, the estimated change time and request
        index, detection time and index) and the counts since the change.
        """
        out: dict[str, Any] = {
            "detector": self.KIND,
            "phase": self._phase,
            "direction": self._direction,
            "baseline": self.baseline,
            "current": self.current,
            "requests": self._n,
            "statistic": self.statistic,
        }
        if self._phase == "warmup":
            out["warmup_requests"] = len(self._warm_a)
            out["warmup_tokens"] = self._warm_tokens
            return out
        base = self._base
        out.update(
            baseline_requests=int(base[_N]),
            baseline_tokens=int(base[_D]),
            baseline_test=self._p0,
            rho=self._rho,
            arl_requests=self._arl,
            request_rate=self._rate(),
            thresholds={
                f"{DROP if s < 0 else RISE}_{e:g}": h
                for s, e, h in zip(self._side, self._delta, self._h, strict=True)
            },
        )
        if self._alarm is not None and self._phase == "changed":
            n, a, d = self._since
            out.update(self._alarm)
            out.update(requests_since_change=int(n), accepted_tokens=int(a),
                       drafted_tokens=int(d))
        return out

    # -- persistence -------------------------------------------------------------------------

    _STATE = (
        "_phase", "_direction", "_drift", "_recovered", "_n", "_ts_first", "_ts_last",
        "_warm_a", "_warm_d", "_warm_tokens", "_rho", "_base", "_p0", "_cal_n", "_cal_rate",
        "_arl", "_side", "_delta", "_p1", "_ca", "_cb", "_h", "_theta", "_s", "_ex", "_older",
        "_newer", "_alarm", "_since", "_rec_ca", "_rec_cb", "_rec_h", "_rec_s", "_rec_ex",
        "_back",
    )
    _HISTS = ("_ref", "_older_hist", "_newer_hist")

    def _full_state(self) -> dict[str, Any]:
        """The whole state as JSON-ready data (floats round-trip exactly through JSON).

        Size: about a hundred numbers, the raw warm-up requests while warming up (at most
        4 x ``warmup_requests`` pairs), then the baseline histogram (typically 500-1,500
        bins of 4 numbers, see :mod:`monitor.detect.acceptance_reference`) and the chunk
        histograms (at most 2 x ``baseline_chunk`` bins).
        """
        state = {name[1:]: _copy(getattr(self, name)) for name in self._STATE}
        for name in self._HISTS:
            hist = getattr(self, name)
            state[name[1:]] = None if hist is None else hist.to_json()
        return state

    def _state(self) -> dict[str, Any]:
        # Version 2 leaves out what equals a fresh warm-up's (``_reset`` does not depend on
        # the parameters): in warm-up, the raw requests and a few counters, not thirty
        # empty fields. Nothing is rounded: see :func:`monitor.detect.base.same_json`.
        # ``!=`` first: a warm detector's fields mostly differ from a fresh one's, and are
        # kept without a call; only equal ones need same_json (0 against 0.0, say).
        # A shared placeholder (``is`` a fresh warm-up's own) is left out at once.
        state = {key: _copy(value)  # compared before it is copied
                 for key, value, held, new in zip(_STATE_KEYS, _state_values(self),
                                                  *_fresh_values(), strict=True)
                 if value is not held and (value != new or not same_json(value, new))}
        fresh = _reset_state()
        for name in self._HISTS:
            hist = getattr(self, name)
            if hist is _EMPTY_HIST:
                continue
            value = None if hist is None else hist.to_json()
            if not same_json(value, fresh[name[1:]]):
                state[name[1:]] = value
        return {"state": state}

    def _set_state(self, data: dict[str, Any]) -> None:
        # version 1 stored every key; version 2 leaves out those equal to a fresh warm-up's,
        # which the constructor has just set (_reset)
        state = data.get("state", {})
        if data.get("version") == 1:
            missing = [name for name in (*self._STATE, *self._HISTS) if name[1:] not in state]
            if missing:
                raise StateVersionError(f"{self.KIND} state version 1 lacks {missing}")
        for name in self._STATE:
            if name[1:] in state:
                setattr(self, name, _copy(state[name[1:]]))
        self._warm_a, self._warm_d = heap.int_array(self._warm_a), heap.int_array(self._warm_d)
        for name in self._HISTS:
            if name[1:] in state:
                raw = state[name[1:]]
                setattr(self, name, None if raw is None else RequestHistogram.from_json(raw))
        if self._phase != "warmup":
            self._own_watch_fields()
        if self._h:  # calibrated
            # A statistic stored before the grid existed joins it here (a move under 1.2e-10).
            self._s = [on_grid(v) for v in self._s]
            self._set_caps()

    def _own_watch_fields(self) -> None:
        """Own lists and histograms where a restored detector past its warm-up still holds
        a warm-up's placeholders (a value left out of its snapshot as equal to them):
        these are added to in place from now on."""
        if self._base is _ZEROS:
            self._base = [0.0] * _SUMS
        if self._newer is _ZEROS:
            self._newer = [0.0] * _SUMS
        if self._ref is _EMPTY_HIST:
            self._ref = RequestHistogram(0.0)
        if self._newer_hist is _EMPTY_HIST:
            self._newer_hist = RequestHistogram(0.0)

    def __repr__(self) -> str:
        return (
            f"OverdispersedCusum(min_effect={self.min_effect}, effects={self.effects}, "
            f"false_alarm_days={self.false_alarm_days}, phase={self._phase!r})"
        )


_SCALARS = frozenset({float, int, str, bool, type(None)})
_RESET: list[dict[str, Any]] = []  # a fresh warm-up's full state, computed once


def _reset_state() -> dict[str, Any]:
    if not _RESET:
        _RESET.append(OverdispersedCusum()._full_state())
    return _RESET[0]


_STATE_KEYS = tuple(name[1:] for name in OverdispersedCusum._STATE)
# the state fields of a detector, in _STATE's order (one C-level call)
_state_values = attrgetter(*OverdispersedCusum._STATE)
_FRESH_VALUES: list[tuple[tuple[Any, ...], tuple[Any, ...]]] = []


def _fresh_values() -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """A fresh warm-up's values of ``_STATE``, in that order: as it holds them (a value that
    ``is`` one of these, a shared placeholder say, equals it), and as JSON reads them back
    (lists for the placeholders' tuples)."""
    if not _FRESH_VALUES:
        held = _state_values(OverdispersedCusum())
        _FRESH_VALUES.append((held, tuple(list(v) if type(v) is tuple else v for v in held)))
    return _FRESH_VALUES[0]


def _copy(value: Any) -> Any:
    """A deep copy of JSON-like data, so a snapshot never aliases live state."""
    kind = type(value)
    if kind in _SCALARS:  # most of a detector's state; checkpoints snapshot every segment
        return value
    if kind is array:  # the warm-up's requests: written as the list they were
        return value.tolist()
    if kind is list:
        if all(type(v) in _SCALARS for v in value):
            return value.copy()
        return [_copy(v) for v in value]
    if isinstance(value, list):
        return [_copy(v) for v in value]
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    return value


def make_detector(kind: str = "cusum", **params: Any) -> AcceptanceDetector:
    """Build an acceptance detector by name: "cusum" (default), "adwin" or "page_hinkley".

    >>> make_detector().min_effect
    0.05
    >>> type(make_detector("adwin", delta=1e-3)).__name__
    'AdwinDetector'
    """
    if kind in ("cusum", OverdispersedCusum.KIND):
        return OverdispersedCusum(**params)
    from monitor.detect import river_adapters  # river is imported only when asked for

    if kind in ("adwin", river_adapters.AdwinDetector.KIND):
        return river_adapters.AdwinDetector(**params)
    if kind in ("page_hinkley", river_adapters.PageHinkleyDetector.KIND):
        return river_adapters.PageHinkleyDetector(**params)
    raise ValueError(f"unknown detector kind {kind!r}; known: cusum, adwin, page_hinkley")


def restore_detector(data: dict[str, Any]) -> AcceptanceDetector:
    """Restore any acceptance detector from its snapshot, by the snapshot's ``kind``.

    >>> det = make_detector("page_hinkley", threshold=5.0)
    >>> type(restore_detector(det.snapshot())).__name__
    'PageHinkleyDetector'
    """
    kind = data.get("kind")
    if kind == OverdispersedCusum.KIND:
        return OverdispersedCusum.restore(data)
    from monitor.detect import river_adapters

    for cls in (river_adapters.AdwinDetector, river_adapters.PageHinkleyDetector):
        if kind == cls.KIND:
            return cls.restore(data)
    raise StateVersionError(f"unknown acceptance detector state kind {kind!r}")
