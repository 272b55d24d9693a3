"""Delivery noise: duplicates and late events, as emission times for events in ts order."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DUPLICATE_GAP = (1, 8)  # a duplicate follows 1..7 events after its original


@dataclass
class Schedule:
    """Emission order keys: sort by (emit, key). ``dup_of`` indexes the duplicated events."""

    emit: np.ndarray
    key: np.ndarray
    dup_of: np.ndarray
    dup_emit: np.ndarray
    dup_key: np.ndarray


def schedule(
    ts: np.ndarray,
    seq0: int,
    duplicates: float,
    late: float,
    late_max: float,
    rng: np.random.Generator,
) -> Schedule:
    """When each event of a chunk (sorted by ts) and each duplicate goes out.

    A late event goes out up to ``late_max`` of event time after its ts, i.e. after the
    events that finished in between. A duplicate goes out right after the event a few
    positions later (a producer retry whose first send did arrive). ``key`` breaks ties in
    emission time by sequence number, so the order is total and the same on every run.
    """
    n = len(ts)
    u_late, delay = rng.random(n), rng.random(n) * late_max
    u_dup, gap = rng.random(n), rng.integers(*DUPLICATE_GAP, n)
    emit = ts + np.where(u_late < late, delay, 0.0)
    seq = seq0 + np.arange(n, dtype=np.float64)
    dup_of = np.flatnonzero(u_dup < duplicates)
    j = np.minimum(dup_of + gap[dup_of], n - 1)
    after_j = ts[j] >= emit[dup_of]
    dup_emit = np.where(after_j, ts[j], emit[dup_of])
    dup_key = np.where(after_j, seq[j], seq[dup_of]) + 0.5
    return Schedule(emit, seq, dup_of, dup_emit, dup_key)
