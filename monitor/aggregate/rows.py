"""Additive statistics in their row form (``to_row()``), added without the objects.

A checkpoint over thousands of series folds minute deltas into hours and days and merges
each touched row with what is stored. Done on :class:`~monitor.aggregate.bucket.BucketStats`
objects, most of the time goes into building them from rows and back (five sketches each);
:class:`RowAdder` adds the rows themselves and gives exactly what
``from_row(a).merge(from_row(b)); to_row()`` gives.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import add, itemgetter
from typing import Any

from monitor.aggregate.sketch import merge_json, merge_json_all

__all__ = ["RowAdder", "add_lists"]


def add_lists(a: Sequence[int] | None, b: Sequence[int] | None) -> list[int]:
    """Element-wise sum; the shorter list counts as zero-padded.

    >>> add_lists([1, 2], [10, 20, 30]), add_lists(None, [1]), add_lists([4], [])
    ([11, 22, 30], [1], [4])
    """
    a = a or []
    b = b or []
    if len(a) < len(b):
        a, b = b, a
    if len(a) == len(b):
        return list(map(add, a, b))
    return [*map(add, a, b), *a[len(b):]]


def _getter(names: Sequence[str]) -> Any:
    """A getter of ``names`` that always returns a tuple (itemgetter of one name does not)."""
    if len(names) == 1:
        one = itemgetter(names[0])
        return lambda row: (one(row),)
    return itemgetter(*names) if names else lambda row: ()


class RowAdder:
    """Adds rows of one statistics class: counters (ints), sums (floats), element-wise
    summed int lists and sketches (``LogHistogram.to_json`` form).

    Rows are mappings of those names; the result has them in that order, as ``to_row()``
    writes them. Inputs are never mutated, but the result may share lists with them.
    """

    def __init__(self, ints: Sequence[str], floats: Sequence[str], lists: Sequence[str],
                 sketches: Sequence[str]) -> None:
        self.ints, self.floats = tuple(ints), tuple(floats)
        self.lists, self.sketches = tuple(lists), tuple(sketches)
        self.names = (*self.ints, *self.floats, *self.lists, *self.sketches)
        self._ints, self._floats = _getter(self.ints), _getter(self.floats)

    def add(self, a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
        """``a + b``, as ``from_row(a)`` merged with ``from_row(b)`` and back ``to_row()``:
        a NULL (``None``) counter or sum counts as zero, a NULL list or sketch as empty."""
        # map(add) runs the sums in C: no Python call per scalar column.
        out = dict(zip(self.ints, map(add, _zeroed(self._ints(a), 0),
                                      _zeroed(self._ints(b), 0)), strict=True))
        out.update(zip(self.floats, map(add, _zeroed(self._floats(a), 0.0),
                                        _zeroed(self._floats(b), 0.0)), strict=True))
        for name in self.lists:
            out[name] = add_lists(a[name], b[name])
        for name in self.sketches:
            out[name] = merge_json(a[name], b[name])
        return out

    def add_all(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """``add(add(rows[0], rows[1]), rows[2])`` and so on, in one pass: the same values
        (float sums added in the rows' order) without an intermediate row per step. Needs
        at least two rows."""
        if len(rows) < 2:
            raise ValueError("add_all needs at least two rows")
        if len(rows) == 2:
            return self.add(rows[0], rows[1])  # its shortcuts for one empty sketch
        ints, floats = self._ints, self._floats
        int_columns = zip(*(_zeroed(ints(r), 0) for r in rows), strict=True)
        # sum() adds floats left to right, from its start: the order add() keeps
        float_columns = zip(*(_zeroed(floats(r), 0.0) for r in rows), strict=True)
        out = dict(zip(self.ints, map(sum, int_columns), strict=True))
        out.update((name, sum(column[1:], column[0]))
                   for name, column in zip(self.floats, float_columns, strict=True))
        for name in self.lists:
            acc: list[int] = []
            for r in rows:
                acc = add_lists(acc, r[name])
            out[name] = acc
        for name in self.sketches:
            out[name] = merge_json_all([r[name] for r in rows])
        return out


def _zeroed(values: tuple[Any, ...], zero: float) -> Sequence[Any]:
    """``values`` with ``None`` (a NULL column) as ``zero``, converted as ``from_row`` does."""
    if None not in values:
        return values
    convert = type(zero)
    return [convert(v or zero) for v in values]
