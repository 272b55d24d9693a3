"""When requests finish: a daily cycle, random bursts, and per-route Poisson arrivals."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

DAY_S = 86400.0
PEAK_S = 14 * 3600.0  # busiest at 14:00 UTC, quietest at 02:00
BURST_MEDIAN_S = 240.0
BURST_SIGMA = 0.6
BURST_MULT = (1.5, 3.0)
BURST_GLOBAL = 0.5  # share of bursts that hit every route; the rest hit one route


@dataclass(frozen=True)
class Burst:
    start: float
    end: float
    mult: float
    route: int  # -1 = every route


class Load:
    """Request intensity over event time, per route.

    Bursts are drawn lazily (an exponential gap after the previous one), so an unbounded
    simulation never has to plan ahead, and the same seed gives the same bursts however the
    timeline is cut into chunks.
    """

    def __init__(
        self,
        rate: float,
        shares: np.ndarray,
        diurnal: float,
        bursts_per_hour: float,
        start: float,
        rng: np.random.Generator,
    ) -> None:
        self.shares = shares / shares.sum()
        self.diurnal = diurnal
        self._rng = rng
        self._per_s = bursts_per_hour / 3600.0
        self._bursts: list[Burst] = []
        self._next_burst = start + self._gap()
        # Scale the base so the long-run mean, bursts included, is `rate`.
        mean_dur = BURST_MEDIAN_S * math.exp(BURST_SIGMA**2 / 2)
        reach = BURST_GLOBAL + (1 - BURST_GLOBAL) * float((self.shares**2).sum())
        extra = self._per_s * mean_dur * (sum(BURST_MULT) / 2 - 1) * reach
        self.base = rate / (1.0 + extra)
        self.rate = rate

    def _gap(self) -> float:
        return float(self._rng.exponential(1.0 / self._per_s)) if self._per_s > 0 else math.inf

    def _bursts_until(self, t_end: float) -> list[Burst]:
        while self._next_burst < t_end:
            t = self._next_burst
            dur = BURST_MEDIAN_S * float(self._rng.lognormal(0.0, BURST_SIGMA))
            mult = float(self._rng.uniform(*BURST_MULT))
            if self._rng.random() < BURST_GLOBAL:
                route = -1
            else:
                route = int(self._rng.choice(len(self.shares), p=self.shares))
            self._bursts.append(Burst(t, t + dur, mult, route))
            self._next_burst = t + self._gap()
        return self._bursts

    def intensity(self, t: np.ndarray) -> np.ndarray:
        """Events/s per route at times ``t``: an array of shape (len(t), routes)."""
        cycle = 1.0 + self.diurnal * np.cos(2 * np.pi * ((t % DAY_S) - PEAK_S) / DAY_S)
        lam = np.outer(self.base * cycle, self.shares)
        if len(t):
            bursts = self._bursts_until(float(t[-1]) + 1.0)
            for b in bursts:
                if b.end <= t[0]:
                    continue
                inside = (t >= b.start) & (t < b.end)
                if b.route < 0:
                    lam[inside] *= b.mult
                else:
                    lam[inside, b.route] *= b.mult
            # bursts that ended before this chunk are never needed again
            self._bursts = [b for b in bursts if b.end > t[0]]
        return lam

    def arrivals(
        self, t0: float, t1: float, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Finish times in [t0, t1) sorted, their route indices, and the load ratio there.

        One-second bins are fine enough for bursts and smooth enough for the daily cycle; a
        Poisson count per bin and route, then uniform times inside the bin. The load ratio
        (intensity of the event's route / its mean) drives batch sizes.
        """
        edges = np.arange(t0, t1, 1.0)
        widths = np.minimum(edges + 1.0, t1) - edges
        lam = self.intensity(edges + widths / 2)  # (bins, routes)
        counts = rng.poisson(lam * widths[:, None])
        bins, routes = np.nonzero(counts)
        reps = counts[bins, routes]
        bins, routes = np.repeat(bins, reps), np.repeat(routes, reps)
        ts = edges[bins] + rng.random(len(bins)) * widths[bins]
        load = lam[bins, routes] / (self.rate * self.shares[routes])
        order = np.argsort(ts, kind="stable")
        return ts[order], routes[order], load[order]
