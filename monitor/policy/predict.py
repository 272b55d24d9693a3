"""Per slice: the survival curve, the predicted decode speedup of every draft length, the best
length, and the acceptance with an interval from its hour clusters.

Survival at position ``i`` is the share of verification steps that kept at least ``i + 1``
drafts: accepted-at-``i`` counts over the steps of the series whose draft length reaches
``i`` (so traffic that ran at different draft lengths pools without diluting the far
positions). With the marginal cost ``m`` per drafted position (``monitor/policy/costs.py``)
the decode speedup at draft length ``j`` over no speculation is
``T(j) = (1 + p_0 + ... + p_{j-1}) / (1 + j m)`` (docs/breakeven.md).

>>> ev = Evidence()
>>> ev.add_hour(0, requests=10, output_tokens=100, accepted=12, drafted=20, steps=10,
...             positions=[(8, 10), (4, 10)], m_tokens=100 * 0.2, length=2)
>>> s = ev.total()
>>> s.survival, [round(t, 3) for t in s.speedups()]
([0.8, 0.4], [1.0, 1.5, 1.571])
>>> best_length(s.speedups(), 0.02), best_length(s.speedups(), 0.10)
(2, 1)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from operator import add

from monitor.policy.slices import SliceRecord

__all__ = ["Evidence", "Sums", "acceptance_interval", "best_length", "harmonic_speedup"]


@dataclass
class Sums:
    """Additive sums of a slice over some hours."""

    requests: int = 0
    output_tokens: int = 0
    accepted: int = 0
    drafted: int = 0
    steps: int = 0
    pos_num: list[int] = field(default_factory=list)
    pos_den: list[int] = field(default_factory=list)
    m_tokens: float = 0.0  # sum of output tokens x marginal cost of their batch bucket
    length: int = 0  # the longest draft length the traffic ran at

    def add(self, other: Sums) -> None:
        self.requests += other.requests
        self.output_tokens += other.output_tokens
        self.accepted += other.accepted
        self.drafted += other.drafted
        self.steps += other.steps
        self.m_tokens += other.m_tokens
        self.length = max(self.length, other.length)
        _add_list(self.pos_num, other.pos_num)
        _add_list(self.pos_den, other.pos_den)

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def marginal_cost(self) -> float:
        """The output-token-weighted marginal cost of the batch buckets this traffic ran at:
        the decode time at length ``j`` summed over buckets is ``(1 + j m_eff)`` times the
        plain time when survival does not depend on the bucket."""
        return self.m_tokens / self.output_tokens if self.output_tokens else 0.0

    @property
    def survival(self) -> list[float]:
        out = []
        for num, den in zip(self.pos_num, self.pos_den, strict=False):
            if den <= 0:
                break
            out.append(num / den)
        return out

    def speedups(self, m: float | None = None) -> list[float | None]:
        """``T(j)`` for ``j = 0..length``; ``None`` where the per-position counts do not reach
        ``j`` (engines that report no per-position counts: only ``T(length)``, from the mean
        accepted tokens per step)."""
        m = self.marginal_cost if m is None else m
        out: list[float | None] = [1.0]
        surv = self.survival
        tokens = 1.0
        for j in range(1, self.length + 1):
            if j <= len(surv):
                tokens += surv[j - 1]
                out.append(tokens / (1.0 + j * m))
            elif j == self.length and self.steps and not surv:
                out.append((1.0 + self.accepted / self.steps) / (1.0 + j * m))
            else:
                out.append(None)
        return out

    def speedup_at(self, j: int, m: float | None = None) -> float:
        """``T(j)``, with ``j`` cut to the longest length the evidence reaches."""
        curve = self.speedups(m)
        j = min(j, len(curve) - 1)
        while j > 0 and curve[j] is None:
            j -= 1
        value = curve[j]
        return 1.0 if value is None else value


def _add_list(into: list[int], other: Sequence[int]) -> None:
    n = len(other)
    if len(into) < n:
        into.extend([0] * (n - len(into)))
    if len(into) == n:
        into[:] = map(add, into, other)
    else:
        for i, v in enumerate(other):
            into[i] += v


class Evidence:
    """A slice's sums per hour (the clusters of its intervals and of the bootstrap)."""

    __slots__ = ("_total", "hours")

    def __init__(self) -> None:
        self.hours: dict[int, Sums] = {}
        self._total: Sums | None = None  # the sum over all hours, until the next add

    @staticmethod
    def record_sums(rec: SliceRecord, m: float) -> Sums:
        """One record's sums (``m``: the marginal cost of its batch bucket)."""
        st = rec.stats
        k = rec.series.num_speculative_tokens
        num: list[int] = []
        den: list[int] = []
        if st.per_position and st.verify_steps:
            pp = st.per_position
            num = list(pp[:k]) + [0] * (k - len(pp)) if len(pp) < k else list(pp[:k])
            den = [st.verify_steps] * k
        return Sums(st.requests, st.output_tokens, st.accepted_tokens, st.drafted_tokens,
                    st.verify_steps, num, den, st.output_tokens * m, k)

    def add_record(self, rec: SliceRecord, m: float) -> None:
        self.add_sums(rec.hour, self.record_sums(rec, m))

    def add_sums(self, hour: int, sums: Sums) -> None:
        self._total = None
        s = self.hours.get(hour)
        if s is None:
            self.hours[hour] = s = Sums()
        s.add(sums)

    def add_hour(self, hour: int, *, requests: int, output_tokens: int, accepted: int,
                 drafted: int, steps: int, positions: Sequence[tuple[int, int]],
                 m_tokens: float, length: int) -> None:
        self._total = None
        s = self.hours.get(hour)
        if s is None:
            s = self.hours[hour] = Sums()
        s.add(Sums(requests, output_tokens, accepted, drafted, steps,
                   [n for n, _ in positions], [d for _, d in positions], m_tokens, length))

    def merge(self, other: Evidence) -> None:
        self._total = None
        for hour, sums in other.hours.items():
            s = self.hours.get(hour)
            if s is None:
                s = self.hours[hour] = Sums()
            s.add(sums)

    def total(self, hours: Iterable[int] | None = None) -> Sums:
        """The sums over ``hours`` (all when ``None``; that one is kept: do not mutate it)."""
        if hours is None and self._total is not None:
            return self._total
        out = Sums()
        for h in (self.hours if hours is None else hours):
            s = self.hours.get(h)
            if s is not None:
                out.add(s)
        if hours is None:
            self._total = out
        return out

    def acceptance_interval(self, z: float) -> tuple[float | None, float | None]:
        """(acceptance, standard error) from the hour clusters."""
        return acceptance_interval([(s.accepted, s.drafted) for s in self.hours.values()], z)[:2]


def acceptance_interval(clusters: Sequence[tuple[int, int]], z: float
                        ) -> tuple[float | None, float | None, tuple[float, float] | None]:
    """(rate, se, interval) of ``sum A / sum D`` with the ratio-estimator variance over
    clusters, ``n / (n - 1) * sum_h (A_h - r D_h)^2 / D^2``; no se with fewer than 2 clusters.

    >>> r, se, iv = acceptance_interval([(6, 10), (4, 10), (5, 10)], 1.645)
    >>> r, round(se, 4), [round(x, 3) for x in iv]
    (0.5, 0.0577, [0.405, 0.595])
    """
    clusters = [(a, d) for a, d in clusters if d > 0]
    total_d = sum(d for _, d in clusters)
    if not total_d:
        return None, None, None
    r = sum(a for a, _ in clusters) / total_d
    n = len(clusters)
    if n < 2:
        return r, None, None
    q = sum((a - r * d) ** 2 for a, d in clusters)
    se = math.sqrt(n / (n - 1) * q / total_d**2)
    return r, se, (max(0.0, r - z * se), min(1.0, r + z * se))


def best_length(speedups: Sequence[float | None], min_gain: float) -> int:
    """The draft length to run: a longer one only when it beats the best shorter one by
    ``min_gain`` (relative), and speculation only when it beats 1 by as much.

    >>> best_length([1.0, 0.9, 0.8], 0.02), best_length([1.0, 1.01, 1.3, 1.31], 0.02)
    (0, 2)
    """
    best, t_best = 0, 1.0
    for j, t in enumerate(speedups):
        if j and t is not None and t > t_best * (1.0 + min_gain):
            best, t_best = j, t
    return best


def harmonic_speedup(parts: Iterable[tuple[float, float]]) -> float | None:
    """Speedup of traffic made of parts ``(output tokens, speedup)``: ``sum O / sum O/T``.

    >>> harmonic_speedup([(100, 2.0), (100, 1.0)])
    1.3333333333333333
    """
    num = den = 0.0
    for tokens, t in parts:
        if tokens > 0 and t > 0:
            num += tokens
            den += tokens / t
    return num / den if den else None
