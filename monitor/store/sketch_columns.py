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

import math
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
    if len(found) != len(texts) or any(k.count(",") != c.count(",") for _, k, c, _, _ in found):
        return None
    return found


class SketchColumn:
    """The sketches of one column (``None`` where a row has none), parsed once for any
    number of quantiles."""

    def __init__(self, raw: Sequence[Any], fallback: Sequence[_Sketch | None]) -> None:
        """``raw``: each row's stored text (or anything else); ``fallback``: each row's
        sketch object, read where ``raw`` is not text in the store's layout."""
        self._fallback = fallback
        texts = [i for i, t in enumerate(raw) if isinstance(t, str)]
        found = _parse([raw[i] for i in texts])
        self._parsed: list[tuple[float, str, int, int] | None] = [None] * len(raw)
        if found is None:
            return
        floats: dict[str, float] = {}
        for i, (a, keys, _counts, zeros, n) in zip(texts, found, strict=True):
            accuracy = floats.get(a)
            if accuracy is None:
                accuracy = floats[a] = float(a)
            self._parsed[i] = (accuracy, keys, int(zeros), int(n))
        # Only sketches with keys go into the arrays (an empty one answers without them).
        with_keys = [(i, f[1], f[2]) for i, f in zip(texts, found, strict=True) if f[1]]
        self._slot = {i: j for j, (i, _, _) in enumerate(with_keys)}
        if with_keys:
            self._keys = np.fromstring(",".join([k for _, k, _ in with_keys]), dtype=np.int64,
                                       sep=",")
            self._running = np.cumsum(np.fromstring(
                ",".join([c for _, _, c in with_keys]), dtype=np.int64, sep=","))
            sizes = np.array([k.count(",") + 1 for _, k, _ in with_keys], dtype=np.int64)
            self._ends = np.cumsum(sizes)
            starts = self._ends - sizes
            # the running counts before each sketch: its own running counts plus these
            self._before = np.concatenate(([0], self._running))[starts]
            self._top = np.maximum.reduceat(self._keys, starts)

    def quantiles(self, q: float) -> list[float | None]:
        """Each row's ``quantile(q)``."""
        if not 0.0 <= q <= 1.0:
            raise ValueError("q must be in [0, 1]")
        out: list[float | None] = [None] * len(self._parsed)
        floors: list[int] = []
        searched: list[int] = []
        for i, f in enumerate(self._parsed):
            if f is None:
                sketch = self._fallback[i]
                out[i] = None if sketch is None else sketch.quantile(q)
                continue
            _a, keys, zeros, n = f
            if not n:
                continue
            rank = q * (n - 1) - zeros
            if rank < 0:
                out[i] = 0.0
                continue
            if not keys:  # counts beyond the zeros yet no key: not the store's own sketch
                sketch = self._fallback[i]
                out[i] = None if sketch is None else sketch.quantile(q)
                continue
            floors.append(math.floor(rank))
            searched.append(i)
        if searched:
            self._fill(out, q, searched, floors)
        return out

    def _fill(self, out: list[float | None], q: float, searched: list[int],
              floors: list[int]) -> None:
        slots = np.array([self._slot[i] for i in searched], dtype=np.int64)
        # bisect_right(running, rank) of the sketch's own running counts: the first whose
        # running count exceeds floor(rank), found among all sketches' at once.
        at = np.searchsorted(self._running, self._before[slots] + np.array(floors),
                             side="right")
        inside = at < self._ends[slots]
        keys = np.where(inside, self._keys[np.minimum(at, len(self._keys) - 1)],
                        self._top[slots]).tolist()
        for i, key in zip(searched, keys, strict=True):
            a = self._parsed[i][0]  # type: ignore[index]
            gamma = (1.0 + a) / (1.0 - a)
            out[i] = 2.0 * gamma ** key / (gamma + 1.0)
