"""The request ids one partition has counted within the dedup horizon."""

from __future__ import annotations

from collections.abc import Iterable

_NONE: frozenset[str] = frozenset()


class SeenIds:
    """Request ids seen within ``horizon`` seconds of event time behind the newest event.

    Ids are kept in slices of ``width`` seconds of event time and leave a whole slice at a
    time. One dict with steady inserts and deletes would hold the same ids, but CPython sizes
    its table in powers of two and rebuilds it whenever deletions have used up its free
    slots; at a horizon of a million ids that showed in the soak benchmark as a lasting
    44 MB step and a transient second table at every rebuild. A slice's set only grows, and
    is freed whole, so memory follows the traffic of the last horizon and nothing else.

    An id is kept for between ``horizon`` and ``horizon + width`` seconds: longer than the
    horizon asks, never shorter. A lookup asks every slice, so a long horizon gets wider
    slices (:meth:`width_for`: at most ``MAX_SLICES`` of them, each at least a minute): at
    an hour's horizon, one-minute slices cost 60 set lookups per event; 16 slices keep ids
    at most a sixteenth of the horizon longer than it asks.

    >>> ids = SeenIds(horizon=600.0, width=60.0)
    >>> ids.add("a", 1000.0)
    >>> ids.add("b", 1650.0)
    >>> "a" in ids, len(ids)
    (True, 2)
    >>> ids.prune(newest=1700.0)  # cutoff 1100: a's slice [960, 1020) is wholly before it
    >>> "a" in ids, "b" in ids, len(ids)
    (False, True, 1)
    >>> ids.slices
    1
    """

    __slots__ = ("horizon", "width", "_by_slice", "_newest_first")

    WIDTH = 60.0  # seconds of event time per slice, at least (by default)
    MAX_SLICES = 16  # slices a horizon is cut into, at most (by default)

    def __init__(self, horizon: float, width: float | None = None) -> None:
        width = self.width_for(horizon) if width is None else width
        if width <= 0:
            raise ValueError(f"width must be positive, got {width}")
        self.horizon = horizon
        self.width = width
        self._by_slice: dict[int, set[str]] = {}
        # Looked up newest first: a redelivered id is nearly always a recent one.
        self._newest_first: list[set[str]] = []

    @classmethod
    def width_for(cls, horizon: float) -> float:
        """The default slice width for ``horizon``: a minute, or a sixteenth of it.

        >>> SeenIds.width_for(900.0), SeenIds.width_for(3600.0)
        (60.0, 225.0)
        """
        return max(cls.WIDTH, horizon / cls.MAX_SLICES)

    @property
    def max_slices(self) -> int:
        """How many slices the ids of one horizon span, at most: more means a prune is due."""
        return int(self.horizon // self.width) + 2

    @classmethod
    def from_items(
        cls, items: Iterable[tuple[str, float]], horizon: float, newest: float,
        width: float | None = None,
    ) -> SeenIds:
        """The ids of ``items`` (id, event time) still within the horizon of ``newest``."""
        ids = cls(horizon, width)
        cutoff = newest - horizon
        for rid, ts in items:
            if ts >= cutoff:
                ids.add(rid, ts)
        return ids

    def __contains__(self, rid: object) -> bool:
        for ids in self._newest_first:
            if rid in ids:
                return True
        return False

    def __len__(self) -> int:
        return sum(len(ids) for ids in self._newest_first)

    @property
    def slices(self) -> int:
        return len(self._by_slice)

    def among(self, rids: list[str]) -> set[str] | frozenset[str]:
        """The ids of ``rids`` (one message's) already seen.

        One id, the common message: a lookup per slice, newest first, and nothing built.
        Several: one C-level disjointness test per slice, which builds nothing either unless
        the slice holds one of them (a redelivery), cheaper than asking every slice for
        every id of the message.

        >>> ids = SeenIds(horizon=600.0)
        >>> ids.add("a", 1000.0)
        >>> ids.among(["a"]), ids.among(["b"]), sorted(ids.among(["a", "b", "c"]))
        ({'a'}, frozenset(), ['a'])
        """
        if len(rids) == 1:
            rid = rids[0]
            for ids in self._newest_first:
                if rid in ids:
                    return {rid}
            return _NONE
        batch = set(rids)
        found: set[str] | frozenset[str] = _NONE
        for ids in self._newest_first:
            if not ids.isdisjoint(batch):
                found = found | (ids & batch)
        return found

    def add_many(self, items: Iterable[tuple[float, str]]) -> None:
        """Add (event time, id) pairs; the order of the pipeline's ``new_ids``."""
        width, by_slice = self.width, self._by_slice
        last_key, ids = None, None
        for ts, rid in items:
            key = int(ts // width)
            if key != last_key:
                ids = by_slice.get(key)
                if ids is None:
                    ids = by_slice[key] = set()
                    self._reorder()
                last_key = key
            ids.add(rid)  # type: ignore[union-attr]

    def add(self, rid: str, ts: float) -> None:
        self.add_many(((ts, rid),))

    def prune(self, newest: float) -> None:
        """Forget the slices that end at or before ``newest - horizon``."""
        last_gone = (newest - self.horizon) // self.width  # slices up to key last_gone - 1
        gone = [key for key in self._by_slice if key < last_gone]
        if gone:
            for key in gone:
                del self._by_slice[key]
            self._reorder()

    def _reorder(self) -> None:
        by_slice = self._by_slice
        self._newest_first = [by_slice[key] for key in sorted(by_slice, reverse=True)]
