"""A mergeable latency distribution with bounded relative error.

Buckets are powers of ``gamma = (1 + a) / (1 - a)``, as in DDSketch: any quantile read back
is within relative error ``a`` of a true sample value, and two sketches merge exactly by
adding bucket counts. That is what lets p50/p99 be read for any range of minute buckets,
hours or days after the fact, from rows that were written independently.
"""

from __future__ import annotations

import bisect
import itertools
import math
from array import array
from collections.abc import Iterable, Iterator
from operator import add
from typing import Any

import numpy as np

DEFAULT_RELATIVE_ACCURACY = 0.01
# LogHistogram.extend cuts this many values or more with numpy (its float sum pairwise),
# fewer in Python (the sum left to right)
EXTEND_NUMPY_FROM = 16
# merge_json puts the shorter side's buckets into the longer one by bisection when it has at
# most 1/_FEW as many
_FEW = 4
# relative accuracy -> (gamma, 1 / log gamma), for from_json
_CONSTANTS: dict[float, tuple[float, float]] = {}


class LogHistogram:
    """Counts of non-negative values in logarithmic buckets.

    >>> h = LogHistogram()
    >>> for v in range(1, 101):
    ...     h.update(float(v))
    >>> round(h.quantile(0.5))
    50
    >>> round(h.quantile(0.99))
    99
    >>> g = LogHistogram.from_json(h.to_json())
    >>> g.merge(h)
    >>> g.count
    200
    """

    __slots__ = ("relative_accuracy", "_gamma", "_inv_log_gamma", "bins", "zeros", "count", "total")

    def __init__(self, relative_accuracy: float = DEFAULT_RELATIVE_ACCURACY) -> None:
        # Every bucket of every series builds five of these: an accuracy's constants are
        # computed once (the same expressions, so the same floats).
        consts = _CONSTANTS.get(relative_accuracy)
        if consts is None:
            if not 0.0 < relative_accuracy < 1.0:
                raise ValueError("relative_accuracy must be in (0, 1)")
            gamma = (1.0 + relative_accuracy) / (1.0 - relative_accuracy)
            consts = _CONSTANTS[relative_accuracy] = (gamma, 1.0 / math.log(gamma))
        self.relative_accuracy = relative_accuracy
        self._gamma, self._inv_log_gamma = consts
        self.bins: dict[int, int] = {}
        self.zeros = 0
        self.count = 0
        self.total = 0.0

    def update(self, value: float) -> None:
        """Add one observation (``value >= 0``)."""
        self.count += 1
        self.total += value
        if value <= 0.0:
            self.zeros += 1
            return
        key = math.ceil(math.log(value) * self._inv_log_gamma)
        bins = self.bins
        bins[key] = bins.get(key, 0) + 1

    def extend(self, values: list[float]) -> None:
        """Add many observations at once (vectorised: the ingest hot path buffers values
        per bucket and folds them in here at checkpoint time)."""
        n = len(values)
        if n < EXTEND_NUMPY_FROM:
            # update() inlined: the same sums in the same order, without a call per value.
            zeros, self.total = _bin_few(self.bins, self._inv_log_gamma, values, self.total)
            self.zeros += zeros
            self.count += n
            return
        arr = np.asarray(values, dtype=np.float64)
        self.count += n
        self.total += float(arr.sum())
        positive = arr[arr > 0.0]
        self.zeros += n - len(positive)
        if len(positive):
            keys = bucket_keys(positive, self._inv_log_gamma)
            # counted by offset from the lowest key, not np.unique's sort: the keys of a
            # row's values span a few hundred buckets at most
            low = int(keys.min())
            counts = np.bincount(keys - low)
            present = np.flatnonzero(counts)
            bins = self.bins
            for key, c in zip((present + low).tolist(), counts[present].tolist(), strict=True):
                bins[key] = bins.get(key, 0) + c

    def merge(self, other: LogHistogram) -> None:
        """Add ``other``'s counts into this histogram (same accuracy required)."""
        if other.relative_accuracy != self.relative_accuracy:
            raise ValueError("cannot merge histograms of different relative accuracy")
        bins = self.bins
        for key, n in other.bins.items():
            bins[key] = bins.get(key, 0) + n
        self.zeros += other.zeros
        self.count += other.count
        self.total += other.total

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.count else None

    def quantile(self, q: float) -> float | None:
        """The value at quantile ``q`` in [0, 1], or ``None`` when empty."""
        if not 0.0 <= q <= 1.0:
            raise ValueError("q must be in [0, 1]")
        if self.count == 0:
            return None
        rank = q * (self.count - 1)
        if rank < self.zeros:
            return 0.0
        seen = self.zeros
        for key in sorted(self.bins):
            seen += self.bins[key]
            if seen > rank:
                return 2.0 * self._gamma**key / (self._gamma + 1.0)
        return 2.0 * self._gamma ** max(self.bins) / (self._gamma + 1.0)

    def to_json(self) -> dict[str, Any]:
        """A compact JSON-able form: sorted bucket keys and their counts."""
        keys = sorted(self.bins)
        return {
            "a": self.relative_accuracy,
            "k": keys,
            "c": [self.bins[k] for k in keys],
            "z": self.zeros,
            "n": self.count,
            "s": self.total,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> LogHistogram:
        if not data:
            return cls()
        # Checkpoints and tables decode hundreds of thousands of these: the constants of an
        # accuracy are computed once, not per sketch.
        a = data["a"]
        consts = _CONSTANTS.get(a)
        if consts is None:
            proto = cls(a)
            consts = (proto._gamma, proto._inv_log_gamma)
        h = cls.__new__(cls)
        h.relative_accuracy = a
        h._gamma, h._inv_log_gamma = consts
        h.bins = dict(zip(data["k"], data["c"], strict=True))
        h.zeros = int(data["z"])
        h.count = int(data["n"])
        h.total = float(data["s"])
        return h

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, LogHistogram)
            and self.relative_accuracy == other.relative_accuracy
            and self.bins == other.bins
            and self.zeros == other.zeros
            and self.count == other.count
        )

    def __repr__(self) -> str:
        return f"LogHistogram(count={self.count}, buckets={len(self.bins)})"


class PackedHistogram:
    """A :class:`LogHistogram` that no longer changes, its buckets in one array (keys, then
    counts): a third of the memory or less (16 bytes a bucket, against a dict entry and
    often an int object), for sketches held long and read rarely, like the closed minutes
    of ``/metrics``' windows (per route or pair, metric and minute). Empty ones share one
    array.

    >>> h = LogHistogram()
    >>> for v in (0.0, 3.0, 3.0, 250.0):
    ...     h.update(v)
    >>> p = PackedHistogram.of(h)
    >>> p.count, p.unpacked() == h
    (4, True)
    >>> g = LogHistogram()
    >>> p.add_to(g)
    >>> p.add_to(g)
    >>> g.count, g.bins == {k: 2 * n for k, n in h.bins.items()}
    (8, True)
    """

    __slots__ = ("relative_accuracy", "buckets", "zeros", "count", "total")

    def __init__(self, relative_accuracy: float, buckets: array, zeros: int, count: int,
                 total: float) -> None:
        self.relative_accuracy = relative_accuracy
        self.buckets = buckets
        self.zeros = zeros
        self.count = count
        self.total = total

    @classmethod
    def of(cls, h: LogHistogram) -> PackedHistogram:
        bins = h.bins
        if not bins:
            return cls(h.relative_accuracy, _NO_BUCKETS, h.zeros, h.count, h.total)
        keys = sorted(bins)
        # from one list: an array grown by extend keeps room to grow
        buckets = array("q", [*keys, *map(bins.__getitem__, keys)])
        return cls(h.relative_accuracy, buckets, h.zeros, h.count, h.total)

    def add_to(self, h: LogHistogram) -> None:
        """``h.merge(self.unpacked())`` without building the dict."""
        if h.relative_accuracy != self.relative_accuracy:
            raise ValueError("cannot merge histograms of different relative accuracy")
        buckets = self.buckets
        n = len(buckets) // 2
        bins = h.bins
        get = bins.get
        for key, c in zip(itertools.islice(buckets, n), itertools.islice(buckets, n, None),
                          strict=True):
            bins[key] = get(key, 0) + c
        h.zeros += self.zeros
        h.count += self.count
        h.total += self.total

    def unpacked(self) -> LogHistogram:
        h = LogHistogram(self.relative_accuracy)
        self.add_to(h)
        return h


_NO_BUCKETS = array("q")  # shared by every empty PackedHistogram: never changed


def _bin_few(bins: dict[int, int], inv_log_gamma: float, values: list[float],
             total: float) -> tuple[int, float]:
    """Count ``values`` into ``bins`` as ``update`` buckets each, a few at a time (no
    numpy); returns how many were zero (or below), and ``total`` plus the values added
    left to right."""
    zeros = 0
    for v in values:
        total += v
        if v <= 0.0:
            zeros += 1
            continue
        key = math.ceil(math.log(v) * inv_log_gamma)
        bins[key] = bins.get(key, 0) + 1
    return zeros, total


def merge_extended(target: LogHistogram | None, values: list[float]) -> tuple[int, float]:
    """What ``target.merge(h)`` adds, ``h`` a new sketch of ``target``'s accuracy given
    ``values`` by ``extend``: the same bins, zeros, count and sum, to the bit, without
    building ``h`` (a checkpoint's deltas, by the ten thousand, each hold a request or two,
    and ``/metrics`` merges them into a route's minute). Returns ``h``'s count and sum;
    ``target`` None: only those.

    >>> h, into, direct = LogHistogram(), LogHistogram(), LogHistogram()
    >>> h.extend([3.0, 0.0, 41.5])
    >>> into.merge(h)
    >>> merge_extended(direct, [3.0, 0.0, 41.5]), direct.to_json() == into.to_json()
    ((3, 44.5), True)
    """
    n = len(values)
    if n >= EXTEND_NUMPY_FROM:  # rare at many series; one sketch, as before
        h = LogHistogram(target.relative_accuracy if target is not None
                         else DEFAULT_RELATIVE_ACCURACY)
        h.extend(values)
        if target is not None:
            target.merge(h)
        return h.count, h.total
    if target is None or not n:
        total = 0.0
        for v in values:
            total += v
        return n, total
    # summed as extend sums into a new sketch (from 0.0, left to right), then added
    zeros, total = _bin_few(target.bins, target._inv_log_gamma, values, 0.0)
    target.zeros += zeros
    target.count += n
    target.total += total
    return n, total


def merge_into(target: LogHistogram, other: LogHistogram | PackedHistogram) -> None:
    """``target.merge(other)``, ``other`` packed or not."""
    if type(other) is PackedHistogram:
        other.add_to(target)
    else:
        target.merge(other)  # type: ignore[arg-type]


class MinuteSketches:
    """A few sketches of one minute, held long: merged into while the minute is open,
    packed (:class:`PackedHistogram`) once it is closed, unpacked again only for a late
    delta. Iterates and indexes as its sketches.

    >>> m = MinuteSketches((0.01, 0.01))
    >>> h = LogHistogram()
    >>> h.update(5.0)
    >>> m.merge((h, h))
    >>> m.pack()
    >>> m.packed, [s.count for s in m]
    (True, [1, 1])
    >>> m.merge((h, LogHistogram()))  # late: unpacked, merged
    >>> m.packed, m[0].count
    (False, 2)
    """

    __slots__ = ("_sketches",)

    def __init__(self, accuracies: Iterable[float]) -> None:
        self._sketches: tuple[LogHistogram, ...] | tuple[PackedHistogram, ...] = tuple(
            LogHistogram(a) for a in accuracies)

    @property
    def packed(self) -> bool:
        return type(self._sketches[0]) is PackedHistogram

    def merge(self, others: Iterable[LogHistogram | PackedHistogram]) -> None:
        if self.packed:
            self._sketches = tuple(p.unpacked() for p in self._sketches)  # type: ignore[union-attr]
        for mine, theirs in zip(self._sketches, others, strict=True):
            merge_into(mine, theirs)  # type: ignore[arg-type]

    def opened(self) -> tuple[LogHistogram, ...]:
        """The sketches to merge into in place (unpacked first if packed)."""
        if self.packed:
            self._sketches = tuple(p.unpacked() for p in self._sketches)  # type: ignore[union-attr]
        return self._sketches  # type: ignore[return-value]

    def pack(self) -> None:
        if not self.packed:
            self._sketches = tuple(PackedHistogram.of(h) for h in self._sketches)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[LogHistogram | PackedHistogram]:
        return iter(self._sketches)

    def __getitem__(self, i: int) -> LogHistogram | PackedHistogram:
        return self._sketches[i]

    def __len__(self) -> int:
        return len(self._sketches)


def quantile_of(data: dict[str, Any] | None, q: float) -> float | None:
    """``LogHistogram.from_json(data).quantile(q)``, read off the JSON form directly (its
    keys are sorted): a table of many rows needs one quantile per sketch, not the sketch.

    >>> h = LogHistogram()
    >>> for v in (0.0, 1.0, 5.0, 9.0, 400.0):
    ...     h.update(v)
    >>> [quantile_of(h.to_json(), q) == h.quantile(q) for q in (0.0, 0.3, 0.5, 0.99, 1.0)]
    [True, True, True, True, True]
    >>> quantile_of(None, 0.5) is None
    True
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError("q must be in [0, 1]")
    if not data or not data["n"]:
        return None
    rank = q * (int(data["n"]) - 1)
    seen = int(data["z"])
    if rank < seen:
        return 0.0
    keys = data["k"]
    a = data["a"]
    gamma = (1.0 + a) / (1.0 - a)
    # the first bucket whose running count passes the rank (accumulate and bisect run in C)
    i = bisect.bisect_right(list(itertools.accumulate(data["c"])), rank - seen)
    return 2.0 * gamma ** (keys[i] if i < len(keys) else max(keys)) / (gamma + 1.0)


def bucket_keys(values: np.ndarray, inv_log_gamma: float) -> np.ndarray:
    """``math.ceil(math.log(v) * inv_log_gamma)`` of each (positive) value, as ``update``
    buckets one: numpy's log may differ from ``math.log`` in the last bit, which matters
    only within rounding of a bucket's edge, so those few are bucketed by ``math.log``.

    >>> bucket_keys(np.array([1.0, 2.5, 1e6]), 50.0).tolist()
    [0, 46, 691]
    """
    q = np.log(values) * inv_log_gamma
    for i in np.flatnonzero(np.abs(q - np.rint(q)) < 1e-9).tolist():
        q[i] = math.log(float(values[i])) * inv_log_gamma
    return np.ceil(q).astype(np.int64)


def extended_json(values: np.ndarray, sizes: np.ndarray,
                  relative_accuracy: float = DEFAULT_RELATIVE_ACCURACY) -> list[dict[str, Any]]:
    """Per group, ``LogHistogram(relative_accuracy)`` given the group's values by ``extend``,
    in ``to_json`` form: the groups are consecutive runs of ``values`` (a contiguous float64
    array, no NaN) of ``sizes`` values each. All groups are cut and counted in one pass:
    a checkpoint folds the buffered latencies of thousands of rows, a handful each, where a
    numpy call per row and sketch cost more than the values.

    The same buckets, counts and sum as ``extend``, to the bit: a group of fewer than
    ``EXTEND_NUMPY_FROM`` values is summed left to right, a larger one by numpy, as
    ``extend`` does; both bucket by :func:`bucket_keys`.

    >>> h = LogHistogram()
    >>> h.extend([3.0, 0.0, 41.5])
    >>> extended_json(np.array([3.0, 0.0, 41.5, 7.0]), np.array([3, 1]))[0] == h.to_json()
    True
    """
    inv = LogHistogram(relative_accuracy)._inv_log_gamma
    m = len(sizes)
    sizes_list = sizes.tolist()
    group = np.repeat(np.arange(m), sizes)
    positive = values > 0.0
    zeros = np.bincount(group[~positive], minlength=m).tolist()
    pos_group = group[positive]
    keys = bucket_keys(values[positive], inv)
    out_keys: list[list[int]] = [[] for _ in range(m)]
    out_counts: list[list[int]] = [[] for _ in range(m)]
    if len(keys):
        low = int(keys.min())
        span = int(keys.max()) - low + 1
        codes, counts = np.unique(pos_group * span + (keys - low), return_counts=True)
        at = np.searchsorted(codes // span, np.arange(m + 1)).tolist()
        found_keys = (codes % span + low).tolist()
        found_counts = counts.tolist()
        for g in range(m):
            lo, hi = at[g], at[g + 1]
            if lo < hi:
                out_keys[g] = found_keys[lo:hi]
                out_counts[g] = found_counts[lo:hi]
    # Python floats only for the small groups' sums (the large ones are summed by numpy)
    flat = values.tolist() if (sizes < EXTEND_NUMPY_FROM).any() else []
    out = []
    start = 0
    for g, n in enumerate(sizes_list):
        end = start + n
        if n < EXTEND_NUMPY_FROM:
            total = sum(flat[start:end], 0.0)
        else:
            total = 0.0 + float(values[start:end].sum())
        out.append({"a": relative_accuracy, "k": out_keys[g], "c": out_counts[g],
                    "z": zeros[g], "n": n, "s": total})
        start = end
    return out


def merge_json_all(sketches: list[dict[str, Any] | None]) -> dict[str, Any]:
    """``merge_json`` of the first two, then of that and the third, and so on: the same
    buckets, counts and float sum (added in that order), with the union sorted once, not
    at every step (a minute's sketch into its hour, sixty times).

    >>> parts = [LogHistogram() for _ in range(3)]
    >>> for i, v in enumerate((0.0, 1.0, 5.0, 9.0, 400.0, 5.0)):
    ...     parts[i % 3].update(v)
    >>> js = [p.to_json() for p in parts]
    >>> merge_json_all(js) == merge_json(merge_json(js[0], js[1]), js[2])
    True
    """
    first = sketches[0] or _empty_json()
    accuracy = first["a"]
    zeros, count, total = int(first["z"]), int(first["n"]), float(first["s"])
    filled = []  # (keys, counts) of the sketches with buckets
    for i, sketch in enumerate(sketches):
        if not sketch:
            sketch = _empty_json()
        if i:
            if sketch["a"] != accuracy:
                raise ValueError("cannot merge histograms of different relative accuracy")
            zeros += int(sketch["z"])
            count += int(sketch["n"])
            total += float(sketch["s"])
        keys, counts = sketch["k"], sketch["c"]
        if len(keys) != len(counts):
            raise ValueError("a sketch's keys and counts differ in length")
        if keys:
            filled.append((keys, counts))
    if len(filled) < 2:  # shared, as merge_json shares the one side with buckets
        keys, counts = filled[0] if filled else ([], [])
    else:
        bins: dict[int, int] = {}
        get = bins.get
        for keys, counts in filled:
            for k, n in zip(keys, counts, strict=True):
                bins[k] = get(k, 0) + n
        keys = sorted(bins)
        counts = list(map(bins.__getitem__, keys))
    return {"a": accuracy, "k": keys, "c": counts, "z": zeros, "n": count, "s": total}


def _empty_json() -> dict[str, Any]:
    return {"a": DEFAULT_RELATIVE_ACCURACY, "k": [], "c": [], "z": 0, "n": 0, "s": 0.0}


def merge_json(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any]:
    """``from_json(a)`` merged with ``from_json(b)``, as ``to_json()`` gives it, without
    building either sketch: a checkpoint merges hundreds of thousands of stored sketches
    with their deltas, and most of a sketch object's cost is in building it.

    Both are in the form ``to_json`` writes (keys sorted). The result may share lists with
    the arguments: treat all three as read-only.

    >>> h, g = LogHistogram(), LogHistogram()
    >>> for v in (0.0, 1.0, 5.0):
    ...     h.update(v)
    >>> for v in (5.0, 400.0):
    ...     g.update(v)
    >>> both = LogHistogram.from_json(h.to_json())
    >>> both.merge(g)
    >>> merge_json(h.to_json(), g.to_json()) == both.to_json()
    True
    >>> merge_json(None, None) == LogHistogram().to_json()
    True
    """
    if not a:
        a = _empty_json()
    if not b:
        b = _empty_json()
    accuracy = a["a"]
    if b["a"] != accuracy:
        raise ValueError("cannot merge histograms of different relative accuracy")
    # Inlined rather than a helper: this runs for every sketch of every row written.
    ka, ca, kb, cb = a["k"], a["c"], b["k"], b["c"]
    if len(ka) != len(ca) or len(kb) != len(cb):
        raise ValueError("a sketch's keys and counts differ in length")
    # The common shapes first: one side empty, or both over the same buckets.
    if not kb:
        keys, counts = ka, ca
    elif not ka:
        keys, counts = kb, cb
    elif ka == kb:
        keys, counts = ka, list(map(add, ca, cb))
    elif min(len(ka), len(kb)) * _FEW <= max(len(ka), len(kb)):
        # A few buckets into many (a minute's delta into a stored hour or day): each put in
        # place in a copy of the longer list, by bisection, not the union rebuilt and sorted.
        if len(ka) < len(kb):
            ka, ca, kb, cb = kb, cb, ka, ca
        keys, counts = list(ka), list(ca)
        for k, n in zip(kb, cb, strict=True):
            i = bisect.bisect_left(keys, k)
            if i < len(keys) and keys[i] == k:
                counts[i] += n
            else:
                keys.insert(i, k)
                counts.insert(i, n)
    else:
        bins = dict(zip(ka, ca, strict=True))
        get = bins.get
        for k, n in zip(kb, cb, strict=True):
            bins[k] = get(k, 0) + n
        keys = sorted(bins)
        counts = list(map(bins.__getitem__, keys))
    return {"a": accuracy, "k": keys, "c": counts, "z": int(a["z"]) + int(b["z"]),
            "n": int(a["n"]) + int(b["n"]), "s": float(a["s"]) + float(b["s"])}
