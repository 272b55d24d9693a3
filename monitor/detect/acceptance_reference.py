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


class RequestHistogram:
    """Sparse histogram of requests by (information weight, acceptance ratio).

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
        self._bins: dict[int, list[float]] = {}
        self.n = 0

    def add(self, accepted: int, drafted: int) -> None:
        w = 1.0 / (1.0 + (drafted - 1) * self.rho)
        wd = w * drafted
        key = int(math.log(wd) / _U_STEP) * _KEY + int(accepted * _R_BINS // drafted)
        b = self._bins.get(key)
        if b is None:
            self._bins[key] = [1.0, w * accepted, wd]
        else:
            b[0] += 1.0
            b[1] += w * accepted
            b[2] += wd
        self.n += 1

    def merge(self, other: RequestHistogram) -> None:
        """Add another histogram's requests (same rho)."""
        for key, (n, wa, wd) in other._bins.items():
            b = self._bins.get(key)
            if b is None:
                self._bins[key] = [n, wa, wd]
            else:
                b[0] += n
                b[1] += wa
                b[2] += wd
        self.n += other.n

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per bin, in key order: count, sum of w a, sum of w d."""
        keys = sorted(self._bins)
        data = np.array([self._bins[k] for k in keys], dtype=np.float64).reshape(-1, 3)
        return data[:, 0], data[:, 1], data[:, 2]

    def to_json(self) -> dict[str, Any]:
        keys = sorted(self._bins)
        return {"rho": self.rho, "n": self.n, "bins": [[k, *self._bins[k]] for k in keys]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RequestHistogram:
        hist = cls(float(data["rho"]))
        hist.n = int(data["n"])
        hist._bins = {int(k): [float(n), float(wa), float(wd)] for k, n, wa, wd in data["bins"]}
        return hist

    def __len__(self) -> int:
        return len(self._bins)
