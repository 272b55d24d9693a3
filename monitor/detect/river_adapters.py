"""River's ADWIN and PageHinkley behind the acceptance-detector interface.

Both are fed one number per request, its acceptance ratio ``accepted / drafted`` (requests,
not tokens: tokens of a request are correlated). They follow river's semantics:
``drift_detected`` is true on every update where the river detector fires; the adapter adds
what an alert needs: the direction (from the window means before and after the change), the
levels, and a changed state that ends (``recovered``) when a later detection finds the level
back within ``min_effect`` of the pre-change level.

**Snapshots.** River detectors do not serialise to JSON (ADWIN's core is a Rust object), so
an adapter keeps the inputs fed since the river detector last reset itself and restores by
re-feeding them: later detections are then identical. To bound that list, once it holds
``max_replay`` inputs the adapter rebuilds the river detector from the newest half; the live
detector does the same at the same input, so restored and uninterrupted runs agree. The
price is that the detector never looks further back than ``max_replay`` requests (ADWIN's
window is capped there). ``max_replay=None`` keeps river's unbounded behaviour (and an
unbounded snapshot).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from river import drift

from monitor.detect.base import Detector

DROP = "drop"
RISE = "rise"


def _river_params(*names: str) -> dict[str, Any]:
    # the adapter's own parameters first, then river's, all stored as given
    return {name: _as_given for name in ("min_effect", "max_replay", *names)}


def _as_given(value: Any) -> Any:
    return value


class _RiverAdapter(Detector):
    """Shared machinery: input log, re-feeding, direction and the changed state.

    A subclass names its river class (``_RIVER``) and declares its parameters (``PARAMS``:
    the adapter's, then the river detector's, which are passed to it by name); its
    constructor sets them with ``_set_params(locals())`` before calling this one.
    """

    _RIVER: ClassVar[Any]

    def __init__(self, min_effect: float, max_replay: int | None) -> None:
        if not 0.0 < min_effect < 1.0:
            raise ValueError(f"min_effect must be in (0, 1), got {min_effect}")
        if max_replay is not None and max_replay < 100:
            raise ValueError("max_replay must be >= 100 or None")
        self._reset()

    def _new_river(self) -> Any:
        """A fresh river detector with this adapter's parameters."""
        own = ("min_effect", "max_replay")
        return self._RIVER(**{n: getattr(self, n) for n in self.PARAMS if n not in own})

    def _split(self) -> tuple[float, float] | None:
        """(mean before, mean after) the change the river detector just flagged.

        River does not say where the change was (ADWIN's kept window still holds much of the
        old level), so the levels come from the logged inputs: the split that maximises the
        between-means statistic ``k (n - k) / n (m1 - m2)^2`` (the least-squares estimate of
        a single change point in the mean).
        """
        log = self._log
        n = len(log)
        if n < 2:
            return None
        total = sum(log)
        best, arg, acc = -1.0, 0, 0.0
        for k in range(1, n):
            acc += log[k - 1]
            diff = acc / k - (total - acc) / (n - k)
            stat = k * (n - k) / n * diff * diff
            if stat > best:
                best, arg = stat, k
        self._turn = arg
        return sum(log[:arg]) / arg, (total - sum(log[:arg])) / (n - arg)

    def _estimate(self) -> int:
        """Index (1-based, over the whole stream) of the first request after the change."""
        return self._n - (len(self._log) - self._turn) + 1

    # -- state -------------------------------------------------------------------------------

    def _reset(self) -> None:
        self._river = self._new_river()
        self._log: list[float] = []  # inputs since the river detector last reset
        self._raw: list[int] = []  # the same as accepted, drafted pairs
        self._drift = False
        self._recovered = False
        self._direction: str | None = None
        self._n = 0
        self._sum = 0.0  # all ratios since the last reset_baseline, for `baseline` in watch
        self._level_before: float | None = None
        self._level_now: float | None = None
        self._change_index: int | None = None
        self._detected_ts: float | None = None
        self._detections = 0
        self._turn = 0

    def reset_baseline(self) -> None:
        """Forget everything and start over (new segment, or change accepted)."""
        self._reset()

    def _feed(self, accepted: int, drafted: int) -> float:
        """Feed the river detector and keep the log equal to its inputs since its last reset.

        The log keeps the ratios (for the level estimates) and the counts (for snapshots:
        ints are shorter in JSON, and ``accepted / drafted`` gives back the same float).
        """
        if self._river.drift_detected:
            self._log, self._raw = [], []  # river resets itself on this update
        x = accepted / drafted
        self._river.update(x)
        self._log.append(x)
        self._raw += (accepted, drafted)
        return x

    def _rebuild(self, raw: list[int]) -> None:
        """A fresh river detector fed ``raw`` (flat accepted, drafted pairs)."""
        self._river = self._new_river()
        self._log, self._raw = [], []
        for i in range(0, len(raw), 2):
            self._feed(raw[i], raw[i + 1])

    # -- the stream --------------------------------------------------------------------------

    def update(self, accepted: int, drafted: int, ts: float | None = None) -> None:
        """Feed one request's ratio; requests that drafted nothing are ignored."""
        self._drift = False
        self._recovered = False
        if drafted <= 0:
            return
        if not 0 <= accepted <= drafted:
            raise ValueError(f"need 0 <= accepted <= drafted, got {accepted}, {drafted}")
        if self.max_replay is not None and len(self._log) >= self.max_replay:
            self._rebuild(self._raw[len(self._raw) - 2 * (self.max_replay // 2):])
        self._n += 1
        self._sum += self._feed(accepted, drafted)
        if not self._river.drift_detected:
            return
        split = self._split()
        if split is None:
            return
        before, after = split
        self._detections += 1
        if self._direction is None:
            self._drift = True
            self._direction = DROP if after < before else RISE
            self._level_before, self._level_now = before, after
            self._change_index, self._detected_ts = self._estimate(), ts
            return
        # changed: is the level back at the pre-change one?
        before = self._level_before
        self._level_now = after
        if before and abs(after / before - 1.0) < self.min_effect:
            self._recovered = True
            self._direction = None
        else:
            self._drift = True
            self._direction = DROP if after < before else RISE
            self._change_index, self._detected_ts = self._estimate(), ts

    def update_many(self, accepted: Sequence[int], drafted: Sequence[int],
                    ts: Sequence[float] | None = None) -> int:
        """Feed requests in order until one flips the state; returns how many were taken
        (river's detectors take one value at a time: this is :meth:`update` in a loop)."""
        n = len(drafted)
        self._drift = self._recovered = False
        for i in range(n):
            self.update(accepted[i], drafted[i], None if ts is None else ts[i])
            if self._drift or self._recovered:
                return i + 1
        return n

    # -- results -----------------------------------------------------------------------------

    @property
    def drift_detected(self) -> bool:
        """True on the update where the river detector fired (and it was not a recovery)."""
        return self._drift

    @property
    def recovered(self) -> bool:
        """True only on the update where the level was found back at the pre-change level."""
        return self._recovered

    @property
    def direction(self) -> str | None:
        """"drop" or "rise" while in the changed state, else None."""
        return self._direction

    @property
    def baseline(self) -> float | None:
        """The pre-change level while changed, else the mean ratio seen so far."""
        if self._direction is not None:
            return self._level_before
        return self._sum / self._n if self._n else None

    @property
    def current(self) -> float | None:
        """The level after the last detection while changed, else None."""
        return self._level_now if self._direction is not None else None

    @property
    def requests(self) -> int:
        """Requests judged so far."""
        return self._n

    def evidence(self) -> dict[str, Any]:
        """Numbers for an alert's details (JSON-ready)."""
        return {
            "detector": self.KIND,
            "direction": self._direction,
            "baseline": self.baseline,
            "current": self.current,
            "requests": self._n,
            "statistic": self.statistic,
            "detections": self._detections,
            "change_index": self._change_index,
            "detected_ts": self._detected_ts,
        }

    # -- persistence -------------------------------------------------------------------------

    _STATE = (
        "_log", "_drift", "_recovered", "_direction", "_n", "_sum", "_level_before",
        "_level_now", "_change_index", "_detected_ts", "_detections",
    )

    def _state(self) -> dict[str, Any]:
        """The adapter's state and the inputs since the river detector's reset."""
        state = {name[1:]: getattr(self, name) for name in self._STATE}
        state["log"] = list(self._raw)
        return {"state": state}

    def _set_state(self, data: dict[str, Any]) -> None:
        """Rebuild by re-feeding the logged inputs; later outputs are identical."""
        state = data["state"]
        self._rebuild(list(state["log"]))
        for name in self._STATE:
            if name != "_log":
                setattr(self, name, state[name[1:]])


class AdwinDetector(_RiverAdapter):
    """``river.drift.ADWIN`` on per-request acceptance ratios.

    Parameters
    ----------
    delta, clock, max_buckets, min_window_length, grace_period
        Passed to ``river.drift.ADWIN`` (river's defaults).
    min_effect
        A later detection within this relative distance of the pre-change level ends the
        changed state.
    max_replay
        Bound on the logged inputs (and on ADWIN's window), see the module docstring.

    Direction and levels: the means before and after the best single split of the inputs
    since ADWIN's last reset (ADWIN's own cut keeps much of the old level in its window).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(42)
    >>> det = AdwinDetector()
    >>> for i in range(4000):
    ...     p = rng.beta(18, 12) * (0.8 if i >= 2000 else 1.0)
    ...     drafted = 4 * int(rng.integers(20, 80))
    ...     det.update(int(rng.binomial(drafted, p)), drafted)
    ...     if det.drift_detected:
    ...         print(i, det.direction, round(det.current / det.baseline, 2))
    2079 drop 0.8
    """

    KIND = "river_adwin"
    PARAMS = _river_params("delta", "clock", "max_buckets", "min_window_length", "grace_period")
    _RIVER = drift.ADWIN

    def __init__(
        self,
        delta: float = 0.002,
        clock: int = 32,
        max_buckets: int = 5,
        min_window_length: int = 5,
        grace_period: int = 10,
        min_effect: float = 0.05,
        max_replay: int | None = 4096,
    ) -> None:
        self._set_params(locals())
        super().__init__(min_effect, max_replay)

    @property
    def statistic(self) -> float:
        """ADWIN's window length (it has no scalar statistic)."""
        return float(self._river.width)

    @property
    def threshold(self) -> float | None:
        """None: ADWIN's cut threshold depends on the split."""
        return None


class PageHinkleyDetector(_RiverAdapter):
    """``river.drift.PageHinkley`` on per-request acceptance ratios.

    Parameters
    ----------
    min_instances, delta, threshold, alpha, mode
        Passed to ``river.drift.PageHinkley``. Its threshold is in the units of the input
        (ratios in [0, 1]): river's default of 50 is very slow on acceptance ratios.
    min_effect, max_replay
        As for :class:`AdwinDetector`.

    ``statistic`` and ``threshold`` are PageHinkley's own (``threshold`` is the parameter).

    Direction and levels: the means before and after the best single split of the inputs
    since PageHinkley's last reset.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(42)
    >>> det = PageHinkleyDetector(threshold=5.0, mode="down")
    >>> for i in range(4000):
    ...     p = rng.beta(18, 12) * (0.8 if i >= 2000 else 1.0)
    ...     drafted = 4 * int(rng.integers(20, 80))
    ...     det.update(int(rng.binomial(drafted, p)), drafted)
    ...     if det.drift_detected:
    ...         print(i, det.direction, det.evidence()["change_index"])
    2012 drop 2001
    """

    KIND = "river_page_hinkley"
    PARAMS = _river_params("min_instances", "delta", "threshold", "alpha", "mode")
    _RIVER = drift.PageHinkley

    def __init__(
        self,
        min_instances: int = 30,
        delta: float = 0.005,
        threshold: float = 50.0,
        alpha: float = 1 - 0.0001,
        mode: str = "both",
        min_effect: float = 0.05,
        max_replay: int | None = 4096,
    ) -> None:
        self._set_params(locals())
        super().__init__(min_effect, max_replay)

    @property
    def statistic(self) -> float:
        """The larger of PageHinkley's two test statistics (0 before ``min_instances``)."""
        ph = self._river
        up = ph._sum_increase - ph._min_increase if ph._min_increase != float("inf") else 0.0
        down = ph._max_decrease - ph._sum_decrease
        if self.mode == "up":
            return float(up)
        if self.mode == "down":
            return float(max(down, 0.0))
        return float(max(up, down, 0.0))
