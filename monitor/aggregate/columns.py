"""Deltas summed per key in a few large columns: what a checkpoint writes, between two.

Between two checkpoints the pipeline adds each counted event to the delta of its (series,
minute), of its (slice, series, hour) and, in an experiment, of its arm. Held as one object
per delta (counters, sums, a list, a buffer of latencies), a delta costs some fifteen small
allocations, by the ten thousand at many series. They all die at the checkpoint, but
detector state allocated meanwhile sits in the same memory pools, which the allocator can
then never hand back: resident memory ended 2.5 times above the live heap at 10,000 series
(docs/benchmarks.md, issue 18). Here an event is a row of doubles packed into one buffer,
and every :data:`FOLD_EVERY` events the buffer is summed into per-key accumulators (numpy
arrays): a few large buffers, dropped whole at the checkpoint, and the sums made in C.

Sums are the same to the bit as adding the rows one at a time in arrival order: integer
columns are packed and summed as int64 (the parser caps each count at 10**9, so sums stay
far below 2**63); float columns accumulate with ``np.add.at``, which adds in index order,
as a running ``+=`` would. An integer column takes ints (and bools) only: a float there
raises ``struct.error`` rather than being truncated.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Hashable, Iterator, Sequence
from itertools import chain
from struct import Struct
from typing import Any

import numpy as np

__all__ = ["FOLD_EVERY", "ColumnSums", "as_stats"]

# Events per fold: the log stays a few hundred kB, and a fold's fixed cost (a sort, a few
# numpy calls) is spread over enough events to be a small share of theirs.
FOLD_EVERY = 4096
_BLOCK = 1024  # keys whose sums :meth:`ColumnSums.sums` turns into Python lists at once


class ColumnSums:
    """Per key, the sums of value rows of ``n_ints`` integers then ``n_floats`` floats, the
    element-wise sum of an optional int list per row (per-position counts; the shorter
    list counts as zero-padded), and the last ``n_kept`` values of each row kept as they
    came (latencies, for sketches).

    >>> s = ColumnSums(n_ints=2, n_floats=1, n_kept=1)
    >>> s.add("a", (1, 2, 0.5, 10.0), (3, 1))
    >>> s.add("b", (1, 0, 0.25, 20.0), None)
    >>> s.add("a", (1, 5, 0.5, 30.0), (1,))
    >>> len(s), "a" in s
    (2, True)
    >>> [(k, ints, floats, pp, kept.tolist()) for k, ints, floats, pp, kept in s.sums()]
    [('a', [2, 7], [1.0], [4, 1], [10.0, 30.0]), ('b', [1, 0], [0.25], [], [20.0])]
    """

    __slots__ = ("_end", "_floats", "_fold_every", "_intern", "_ints", "_kept", "_kept_rows",
                 "_keys", "_log", "_n_floats", "_n_ints", "_n_kept", "_off", "_pack_into",
                 "_pp_acc", "_pp_len", "_pp_lists", "_pp_rows", "_rows", "_stride", "_width")

    def __init__(self, n_ints: int, n_floats: int, n_kept: int = 0,
                 fold_every: int = FOLD_EVERY,
                 intern: Callable[[Any], Hashable] | None = None) -> None:
        # ``intern``: the key to keep for a new key (an equal one whose parts other keys
        # share), so that a key found again costs no more than a lookup.
        self._intern = intern
        self._n_ints, self._n_floats, self._n_kept = n_ints, n_floats, n_kept
        self._width = 1 + n_ints + n_floats + n_kept  # the row index, then the values
        # Packed in C, eight bytes per value: the row index and the integers as int64, the
        # rest as doubles (array.extend converts each value through the argument parser,
        # several times the cost of the sums; an int packed as a double goes through a
        # float object, which doubled the cost of a row).
        self._pack_into = Struct(f"{1 + n_ints}q{n_floats + n_kept}d").pack_into
        self._stride = 8 * self._width
        self._fold_every = fold_every
        self._rows: dict[Hashable, int] = {}
        self._keys: list[Hashable] = []
        # Not yet folded: rows in ``_log`` up to the byte ``_off`` (grown up to
        # ``fold_every`` rows, then reused; ``_end`` is its length), and the row and the
        # per-position counts (a tuple, as the event holds it) of each event that has them.
        self._log = bytearray()
        self._off = self._end = 0
        self._pp_rows: list[int] = []
        self._pp_lists: list[Sequence[int]] = []
        # Folded: one accumulator row per key (capacity grows by doubling).
        self._ints = np.zeros((0, n_ints), dtype=np.int64)
        self._floats = np.zeros((n_floats, 0))  # a contiguous column per float value
        self._pp_acc = np.zeros((0, 0), dtype=np.int64)
        self._pp_len = np.zeros(0, dtype=np.int64)
        self._kept: list[np.ndarray] = []
        self._kept_rows: list[np.ndarray] = []

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._rows

    def add(self, key: Hashable, values: Sequence[float],
            positions: Sequence[int] | None = None) -> None:
        """Add one row of ``n_ints + n_floats + n_kept`` values (and per-position counts)
        to ``key``'s sums."""
        row = self._rows.get(key)
        if row is None:
            if self._intern is not None:
                key = self._intern(key)
            row = self._rows[key] = len(self._keys)
            self._keys.append(key)
        off = self._off
        if off == self._end:
            off = self._make_room()
        self._pack_into(self._log, off, row, *values)
        self._off = off + self._stride
        if positions:
            # kept as they are until the fold (a few thousand rows): two appends, where
            # packing them cost a struct, a dict lookup and two buffer copies per event
            self._pp_rows.append(row)
            self._pp_lists.append(positions if type(positions) is tuple else tuple(positions))

    def _make_room(self) -> int:
        """Room for one more row in the log: a fold when it holds ``fold_every`` rows, else
        a larger log. Returns the row's byte offset."""
        n = self._off // self._stride
        if n >= self._fold_every:
            self._fold()
            return 0
        log = bytearray(self._stride * min(self._fold_every, max(64, 2 * n)))
        log[:len(self._log)] = self._log
        self._log = log
        self._end = len(log)
        return self._off

    def sums(self) -> Iterator[tuple[Hashable, list[int], list[float], list[int], array]]:
        """Per key in the order first added: its int sums, float sums, per-position sums
        and kept values (``n_kept`` per row, rows in arrival order)."""
        self._fold()
        n = len(self._keys)
        kept, starts = self._kept_by_row(n)
        keys, pp = self._keys, self._pp_acc
        # A block of keys at a time: the Python lists of every key at once would be a
        # checkpoint-sized peak of small objects, freed while detector state stays.
        for first in range(0, n, _BLOCK):
            last = min(n, first + _BLOCK)
            ints = self._ints[first:last].tolist()
            floats = self._floats[:, first:last].T.tolist()
            lengths = self._pp_len[first:last].tolist()
            for i, r in enumerate(range(first, last)):
                out = array("d")
                if kept is not None:
                    out.frombytes(kept[starts[r]:starts[r + 1]].tobytes())
                length = lengths[i]
                yield keys[r], ints[i], floats[i], pp[r, :length].tolist() if length else [], out

    def _kept_by_row(self, n: int) -> tuple[np.ndarray | None, list[int]]:
        if not self._kept:
            return None, []
        rows = np.concatenate(self._kept_rows)
        order = np.argsort(rows, kind="stable")  # stable: each key's rows in arrival order
        values = np.concatenate(self._kept)[order]
        starts = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=n), out=starts[1:])
        return values, starts.tolist()

    def _grow(self, n: int) -> None:
        have = self._ints.shape[0]
        if n <= have:
            return
        size = max(n, 2 * have, 64)
        ints = np.zeros((size, self._n_ints), dtype=np.int64)
        ints[:have] = self._ints
        floats = np.zeros((self._n_floats, size))
        floats[:, :have] = self._floats
        pp = np.zeros((size, self._pp_acc.shape[1]), dtype=np.int64)
        pp[:have] = self._pp_acc
        lengths = np.zeros(size, dtype=np.int64)
        lengths[:have] = self._pp_len
        self._ints, self._floats, self._pp_acc, self._pp_len = ints, floats, pp, lengths

    def _widen(self, k: int) -> None:
        pp = np.zeros((self._pp_acc.shape[0], k), dtype=np.int64)
        pp[:, :self._pp_acc.shape[1]] = self._pp_acc
        self._pp_acc = pp

    def _fold(self) -> None:
        n = self._off // self._stride
        if not n:
            return
        self._grow(len(self._keys))
        # one buffer, two views: the leading int64 columns, and the doubles after them
        count = n * self._width
        ints = np.frombuffer(self._log, dtype=np.int64, count=count).reshape(n, self._width)
        block = np.frombuffer(self._log, dtype=np.float64, count=count).reshape(n, self._width)
        rows = ints[:, 0].astype(np.intp)
        ni, nf = self._n_ints, self._n_floats
        if ni:
            # Integers in any order: sort once, sum each key's run in one call.
            order = np.argsort(rows, kind="stable")
            sorted_rows = rows[order]
            starts = np.flatnonzero(np.concatenate(([True], sorted_rows[1:] != sorted_rows[:-1])))
            self._ints[sorted_rows[starts]] += np.add.reduceat(ints[order, 1:1 + ni], starts,
                                                               axis=0)
        for j in range(nf):
            np.add.at(self._floats[j], rows, block[:, 1 + ni + j])  # in arrival order
        if self._n_kept:
            self._kept.append(block[:, self._width - self._n_kept:].copy())
            self._kept_rows.append(rows)
        if self._pp_rows:
            self._fold_positions()
        self._off = 0

    def _fold_positions(self) -> None:
        lists = self._pp_lists
        rows = np.array(self._pp_rows, dtype=np.int64)
        lengths = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
        counts = np.fromiter(chain.from_iterable(lists), dtype=np.int64,
                             count=int(lengths.sum()))
        longest = int(lengths.max())
        if longest > self._pp_acc.shape[1]:
            self._widen(longest)
        width = self._pp_acc.shape[1]
        # the flat index of (row, position) for every count, position = its place in its list
        firsts = np.cumsum(lengths) - lengths
        positions = np.arange(len(counts)) - np.repeat(firsts, lengths)
        np.add.at(self._pp_acc.reshape(-1), np.repeat(rows, lengths) * width + positions, counts)
        np.maximum.at(self._pp_len, rows, lengths)
        self._pp_rows, self._pp_lists = [], []


def as_stats(sums: ColumnSums, build: Any) -> dict[Hashable, Any]:
    """``{key: build(ints, floats, per_position, kept)}`` over ``sums``, in its key order."""
    return {key: build(ints, floats, pp, kept) for key, ints, floats, pp, kept in sums.sums()}
