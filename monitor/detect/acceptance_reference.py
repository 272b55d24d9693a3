"""The baseline's requests, kept as a sparse histogram for calibrating CUSUM thresholds.

A CUSUM's false-alarm rate is set by the upper tail of its per-request increments, and on
real traffic that tail is made of rare requests (prompts the draft cannot follow). A sample
of a few thousand requests misses them and overstates the adjustment coefficient theta;
keeping every baseline request is unbounded. This histogram keeps all of them, binned by
what an increment depends on: the information weight ``u = w d`` (``w = 1 / (1 + (d - 1)
rho)``) on a geometric grid, and the ratio ``r = a / d`` on a grid of 0.01. Each bin stores
its count and the sums of ``w a`` and ``w d``; every CUSUM increment is linear in those two,
so each bin's *mean* increment is exact, and only the spread inside a bin is lost (under
2 % of the moment generating function's tail terms for the widest bins).

Size: at most ``n_u x 101`` bins; a day of a simulated route fills 500-1,500 of them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

_U_STEP = math.log(1.08)  # information-weight bins: 8 % wide
_R_BINS = 100  # ratio bins: 0.01 wide, r = 1 in a bin of its own
_KEY = 128  # key = u-bin * _KEY + r-bin


_NO_KEYS = np.empty(0, dtype=np.int64)
_NO_VALUES = np.empty(0)


class RequestHistogram:
    """Sparse histogram of requests by (information weight, acceptance ratio).

    Requests are queued as they come (two list appends) and binned a batch at a time when
    the histogram is read: the bins are kept as arrays sorted by key, and each batch is
    added with ``np.add.at``, which adds a bin's requests one after the other in arrival
    order -- the same float sums, bit for bit, as adding each request as it came, however
    the requests were batched.

    Parameters
    ----------
    rho
        Intra-request correlation: fixes ``w = 1 / (1 + (d - 1) rho)``, hence the bins.

    Examples
    --------
    >>> hist = RequestHistogram(rho=0.05)
    >>> for a, d in [(30, 40), (30, 40), (10, 40), (400, 500)]:
    ...     hist.add(a, d)
    >>> n, wa, wd = hist.arrays()
    >>> hist.n, len(n), round(float(wa.sum() / wd.sum()), 4)
    (4, 3, 0.653)
    """

    def __init__(self, rho: float) -> None:
        self.rho = rho
        self.n = 0
        # Shared empty arrays until the first bin (a size-0 array takes no write): every
        # segment warming up holds two histograms that stay empty until its baseline.
        self._keys = _NO_KEYS
        self._count = self._wa = self._wd = _NO_VALUES
        self._queue_a: list[int] = []
        self._queue_d: list[int] = []

    def add(self, accepted: int, drafted: int) -> None:
        self._queue_a.append(accepted)
        self._queue_d.append(drafted)
        self.n += 1

    def add_many(self, accepted: list[int], drafted: list[int]) -> None:
        """:meth:`add` of each request, in order."""
        self._queue_a += accepted
        self._queue_d += drafted
        self.n += len(drafted)

    def _flush(self) -> None:
        """Bin the queued requests."""
        if not self._queue_d:
            return
        a = np.array(self._queue_a, dtype=np.int64)
        d = np.array(self._queue_d, dtype=np.int64)
        self._queue_a, self._queue_d = [], []
        w = 1.0 / (1.0 + (d - 1).astype(np.float64) * self.rho)
        wd = w * d
        keys = _u_bins(wd) * _KEY + a * _R_BINS // d
        at = self._place(keys)
        np.add.at(self._count, at, 1.0)
        np.add.at(self._wa, at, w * a)
        np.add.at(self._wd, at, wd)

    def _place(self, keys: np.ndarray) -> np.ndarray:
        """Where each key's bin is, after making room for new ones (empty, in key order)."""
        union = np.union1d(self._keys, keys)
        if len(union) > len(self._keys):
            old = np.searchsorted(union, self._keys)
            for name in ("_count", "_wa", "_wd"):
                grown = np.zeros(len(union))
                grown[old] = getattr(self, name)
                setattr(self, name, grown)
            self._keys = union
        return np.searchsorted(self._keys, keys)

    def merge(self, other: RequestHistogram) -> None:
        """Add another histogram's requests (same rho)."""
        other._flush()
        self._flush()
        at = self._place(other._keys)  # each key once: one addition per bin, as before
        self._count[at] += other._count
        self._wa[at] += other._wa
        self._wd[at] += other._wd
        self.n += other.n

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per bin, in key order: count, sum of w a, sum of w d (copies)."""
        self._flush()
        return self._count.copy(), self._wa.copy(), self._wd.copy()

    def to_json(self) -> dict[str, Any]:
        self._flush()
        bins = zip(self._keys.tolist(), self._count.tolist(), self._wa.tolist(),
                   self._wd.tolist(), strict=True)
        return {"rho": self.rho, "n": self.n, "bins": [list(b) for b in bins]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RequestHistogram:
        hist = cls(float(data["rho"]))
        hist.n = int(data["n"])
        bins = sorted((int(k), float(n), float(wa), float(wd)) for k, n, wa, wd in data["bins"])
        if bins:
            keys, count, wa, wd = zip(*bins, strict=True)
            hist._keys = np.array(keys, dtype=np.int64)
            hist._count, hist._wa, hist._wd = np.array(count), np.array(wa), np.array(wd)
        return hist

    def __len__(self) -> int:
        self._flush()
        return len(self._keys)


class EmptyHistogram(RequestHistogram):
    """An empty histogram (rho 0) that takes no requests: one placeholder shared by every
    detector still warming up, which a request added by mistake would change for all.

    >>> h = EmptyHistogram()
    >>> h.to_json() == RequestHistogram(0.0).to_json(), len(h)
    (True, 0)
    >>> h.add(1, 2)
    Traceback (most recent call last):
    ...
    TypeError: a shared empty histogram takes no requests: give the detector its own
    """

    def __init__(self) -> None:
        super().__init__(0.0)

    def add(self, accepted: int, drafted: int) -> None:
        self._refuse()

    def add_many(self, accepted: list[int], drafted: list[int]) -> None:
        self._refuse()

    def merge(self, other: RequestHistogram) -> None:
        self._refuse()

    @staticmethod
    def _refuse() -> None:
        raise TypeError("a shared empty histogram takes no requests: give the detector its own")


def _u_bins(wd: np.ndarray) -> np.ndarray:
    """``int(math.log(wd) / _U_STEP)`` of each entry, as the scalar code computed it.

    numpy's log may differ from ``math.log`` in the last bit on some CPUs; that matters
    only where the quotient is within rounding of a bin edge, so those few are recomputed
    with ``math.log`` and the bins stay exactly what they always were.
    """
    q = np.log(wd) / _U_STEP
    edge = np.flatnonzero(np.abs(q - np.round(q)) < 1e-9)
    for i in edge.tolist():
        q[i] = math.log(float(wd[i])) / _U_STEP
    return np.trunc(q).astype(np.int64)
