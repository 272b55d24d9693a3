"""Quantiles of a column of stored sketches at once: what a ratios table's ttft_p50/ttft_p99
columns show for each of a route's 28,800 hour rows.

Decoding each sketch's JSON (a dict, two lists of Python ints) and walking its running
counts cost more than reading the rows. Here the key and count arrays of every sketch of
the column are cut from the stored text and parsed by numpy in one call each; the running
counts of all sketches are one cumulative sum, and each sketch's rank is found by one
vectorized search. The result is :func:`~monitor.aggregate.sketch.quantile_of`'s, value for
value: the search is on integers (``bisect_right`` of a float rank among integer running
counts is the search for its floor), and the value is computed by the same float
operations. A sketch in any other form (decoded already, or text of another layout) is
read by :class:`~monitor.store.query.StoredSketch` instead.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

# The layout the store writes (LogHistogram.to_json through orjson): compact, in this
# order, one line (orjson writes no raw newline).
_LAYOUT = re.compile(
    r'^\{"a":([0-9.eE+-]+),"k":\[(-?[0-9,-]*)\],"c":\[([0-9,]*)\],"z":([0-9]+),"n":([0-9]+),'
    r'"s":[^}\n]*\}$', re.MULTILINE)


class _Sketch(Protocol):
    def quantile(self, q: float) -> float | None: ...


def _parse(texts: list[str]) -> list[tuple[str, str, str, str, str]] | None:
    """``(a, keys, counts, zeros, n)`` of each text, all in the store's layout, by one
    search over them joined; None when any is not."""
    found = _LAYOUT.findall("\n".join(texts))
    return found if len(found) == len(texts) else None


def _integers(texts: Sequence[str], count: int) -> np.ndarray | None:
    """Comma-separated lists of integers (none empty) as one array; None unless it reads as
    ``count`` integers."""
    if not count:
        return np.zeros(0, dtype=np.int64)
    try:
        values = np.fromstring(",".join(texts), dtype=np.int64, sep=",")
    except ValueError:  # "1,,2", an integer out of range...
        return None
    return values if len(values) == count else None


def _sizes(lists: Sequence[str]) -> np.ndarray:
    """The item count of each comma-separated list ("" has none)."""
    commas = np.fromiter(map(str.count, lists, itertools.repeat(",")), dtype=np.int64,
                         count=len(lists))
    filled = np.fromiter(map(bool, lists), dtype=bool, count=len(lists))
    return np.where(filled, commas + 1, 0)


class SketchColumn:
    """The sketches of one column (``None`` where a row has none), parsed once for any
    number of quantiles."""

    def __init__(self, raw: Sequence[Any], fallback: Sequence[_Sketch | None]) -> None:
        """``raw``: each row's stored text (or anything else); ``fallback``: each row's
        sketch object, read where ``raw`` is not text in the store's layout."""
        self._fallback = fallback
        self._size = len(raw)
        texts = [i for i, t in enumerate(raw) if isinstance(t, str)]
        found = _parse([raw[i] for i in texts]) if texts else None
        # Each row's parsed sketch's position in the arrays below, or -1 (read the fallback).
        self._at = np.full(self._size, -1, dtype=np.int64)
        if found is None:
            return
        columns = _arrays(found)
        if columns is None:
            return
        self._at[np.array(texts, dtype=np.int64)] = np.arange(len(texts), dtype=np.int64)
        (self._accuracies, self._accuracy, self._zeros, self._n, self._sizes,
         self._keys, self._running, self._ends) = columns
        self._before = self._running_before(self._ends - self._sizes)
        self._top = self._tops(self._ends - self._sizes)

    @property
    def parsed(self) -> list[bool]:
        """Whether each row's text was read in the store's layout (else its fallback)."""
        return (self._at >= 0).tolist()

    def _running_before(self, starts: np.ndarray) -> np.ndarray:
        # the running counts before each sketch: its own running counts plus these
        return np.concatenate(([0], self._running))[starts]

    def _tops(self, starts: np.ndarray) -> np.ndarray:
        # each sketch's largest key (0 for a sketch without keys: never read)
        top = np.zeros(len(starts), dtype=np.int64)
        with_keys = self._sizes > 0
        if with_keys.any():
            top[with_keys] = np.maximum.reduceat(self._keys, starts[with_keys])
        return top

    def quantiles(self, q: float) -> list[float | None]:
        """Each row's ``quantile(q)``."""
        if not 0.0 <= q <= 1.0:
            raise ValueError("q must be in [0, 1]")
        at = self._at
        parsed = at >= 0
        if not parsed.any():
            return [None if s is None else s.quantile(q) for s in self._fallback]
        # Per parsed sketch, as quantile_of computes it: rank = q * (n - 1) - zeros in
        # floats (exact conversions of the integers, the same product and difference).
        n = self._n
        rank = q * (n - 1).astype(np.float64) - self._zeros.astype(np.float64)
        empty = n == 0
        below = ~empty & (rank < 0)  # 0.0
        search = ~empty & ~below & (self._sizes > 0)
        # counts beyond the zeros yet no key: not the store's own sketch; its fallback reads it
        odd = ~empty & ~below & (self._sizes == 0)
        values = np.zeros(len(n), dtype=np.float64)
        found = np.flatnonzero(search)
        if len(found):
            values[found] = self._values(found, np.floor(rank[found]).astype(np.int64))
        out: list[float | None]
        if parsed.all():  # every row's text read: the rows are the parsed sketches in order
            out = values.tolist()  # type: ignore[assignment]
            nones = np.flatnonzero(empty).tolist()
            fallbacks = np.flatnonzero(odd).tolist()
        else:
            out = [None] * self._size
            rows = np.flatnonzero(parsed)
            for row, v in zip(rows.tolist(), values[at[rows]].tolist(), strict=True):
                out[row] = v
            nones = rows[empty[at[rows]]].tolist()
            fallbacks = np.flatnonzero(~parsed).tolist() + rows[odd[at[rows]]].tolist()
        for row in nones:
            out[row] = None
        for row in fallbacks:
            sketch = self._fallback[row]
            out[row] = None if sketch is None else sketch.quantile(q)
        return out

    def _values(self, found: np.ndarray, floors: np.ndarray) -> np.ndarray:
        # bisect_right(running, rank) of each sketch's own running counts: the first whose
        # running count exceeds floor(rank), found among all sketches' at once.
        at = np.searchsorted(self._running, self._before[found] + floors, side="right")
        inside = at < self._ends[found]
        keys = np.where(inside, self._keys[np.minimum(at, len(self._keys) - 1)],
                        self._top[found])
        # 2 * gamma ** key / (gamma + 1) in Python floats, once per distinct accuracy and key
        # (a column's keys are a few hundred buckets): numpy's power may round differently.
        out = np.empty(len(found), dtype=np.float64)
        accuracy = self._accuracy[found]
        for j, a in enumerate(self._accuracies):
            mine = np.flatnonzero(accuracy == j) if len(self._accuracies) > 1 else None
            chosen = keys if mine is None else keys[mine]
            distinct, inverse = np.unique(chosen, return_inverse=True)
            gamma = (1.0 + a) / (1.0 - a)
            table = np.array([2.0 * gamma ** k / (gamma + 1.0) for k in distinct.tolist()],
                             dtype=np.float64)
            if mine is None:
                out[:] = table[inverse]
            else:
                out[mine] = table[inverse]
        return out


def _arrays(found: list[tuple[str, str, str, str, str]]) -> tuple[Any, ...] | None:
    """The parsed sketches as arrays: their distinct accuracies (floats), each one's
    accuracy (index), zeros, n, key count; all keys, all running counts, each sketch's
    end in them. None when a sketch's keys and counts differ in number, or a number does
    not read (the column's fallback reads them then)."""
    a_texts, keys, counts, zeros, ns = (list(c) for c in zip(*found, strict=True))
    distinct = list(dict.fromkeys(a_texts))
    try:
        accuracies = [float(a) for a in distinct]
    except ValueError:
        return None
    index = {a: j for j, a in enumerate(distinct)}
    accuracy = (np.array([index[a] for a in a_texts], dtype=np.int64) if len(distinct) > 1
                else np.zeros(len(a_texts), dtype=np.int64))
    sizes = _sizes(keys)
    if not np.array_equal(sizes, _sizes(counts)):
        return None
    total = int(sizes.sum())
    zeros_a = _integers(zeros, len(zeros))
    n_a = _integers(ns, len(ns))
    key_a = _integers([k for k in keys if k], total)
    count_a = _integers([c for c in counts if c], total)
    if zeros_a is None or n_a is None or key_a is None or count_a is None:
        return None
    return (accuracies, accuracy, zeros_a, n_a, sizes, key_a, np.cumsum(count_a),
            np.cumsum(sizes))
