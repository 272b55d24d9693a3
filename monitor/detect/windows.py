"""Bounded event-time windows shared by the detectors.

Three building blocks, each with a JSON snapshot that restores bit for bit:

- :class:`BucketRing` sums fixed-width vectors of numbers per ``bucket`` seconds of event
  time and keeps the running total of the last ``window`` seconds;
- :class:`SlidingHistogram` does the same for a log-bucket histogram (quantiles of the window);
- :class:`ThinnedSample` keeps a bounded, evenly spaced sample of a stream, deterministically.

Running totals are updated by adding new buckets and subtracting expired ones instead of being
re-summed on each read: that makes every update O(width). Float totals may then differ from a
re-summation in the last bits, which is harmless because the snapshot stores the running totals
themselves, so a restored window continues with exactly the same numbers.

Every detector updates a window on every event, so the common case is kept short: an event in
the newest bucket costs a division and two comparisons to place, and only a new bucket or a late
event takes the path that moves the window (see :meth:`BucketRing.slot`). Work that nothing reads
per event is deferred to the reads, where that cannot change a result (integer counts, summed in
the same order): :class:`SlidingHistogram` bins its newest bucket's values in bulk.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left
from collections.abc import Sequence
from functools import lru_cache
from operator import itemgetter
from typing import Any, NoReturn

from monitor import heap

__all__ = ["BucketRing", "EmptyRing", "EmptySlidingHistogram", "PairSample", "SlidingHistogram",
           "ThinnedSample", "bucket_count", "empty_ring", "empty_sliding_histogram"]

# Values <= 0 share one bin below every positive bin (an int, so bins stay JSON-able and sortable).
_ZERO_KEY = -(2**31)
# Most values a SlidingHistogram keeps unbinned: bounds the memory of a busy bucket.
_BIN_EVERY = 512


def bucket_count(window: float, bucket: float) -> int:
    """How many buckets of ``bucket`` seconds make a window of ``window`` seconds.

    >>> bucket_count(600, 60), bucket_count(90, 60), bucket_count(30, 60)
    (10, 2, 1)
    """
    if not (window > 0 and bucket > 0 and math.isfinite(window) and math.isfinite(bucket)):
        raise ValueError("window and bucket must be finite and > 0")
    # the epsilon keeps 600 / 60 at 10 when floating point makes it 10.000000000000002
    return max(1, math.ceil(window / bucket - 1e-9))


class BucketRing:
    """Sums of per-event vectors over the most recent ``window`` seconds of event time.

    Events land in the bucket ``floor(ts / bucket)``; the window is the ``size`` most recent
    buckets up to the newest one seen (``head``), so it spans between ``window - bucket`` and
    ``window`` seconds. An event older than the window is not counted (``dropped`` rises);
    a late event still inside the window is added to its own bucket.

    Parameters
    ----------
    window : float
        Window length in seconds.
    bucket : float
        Bucket width in seconds.
    width : int
        Number of summed fields per event.

    Notes
    -----
    :meth:`add` takes a vector. Detectors on the per-event hot path call :meth:`slot` instead
    and add each field to the returned bucket and to :attr:`sums` themselves, without
    building a tuple per event. ``slot`` is cheap when ``ts`` falls in the newest bucket (the
    common case: events arrive roughly in time order): one division and two comparisons. Only
    a new bucket or a late event take the slow path, which moves the window and forgets what
    fell out. Both ways add the same numbers in the same order, so totals and snapshots are
    the same whichever is used.

    Examples
    --------
    >>> ring = BucketRing(window=120, bucket=60, width=2)
    >>> ring.add(0.0, (1, 10)), ring.add(61.0, (1, 20)), ring.totals
    (True, True, (2, 30))
    >>> ring.add(125.0, (1, 5)), ring.totals     # the bucket of ts=0 fell out
    (True, (2, 25))
    >>> ring.add(10.0, (1, 1)), ring.dropped     # too late for the window
    (False, 1)
    >>> b = ring.slot(130.0)                     # the hot path: the caller adds the fields
    >>> b[0] += 1; ring.sums[0] += 1; b[1] += 2; ring.sums[1] += 2
    >>> ring.totals
    (3, 27)
    """

    __slots__ = (
        "window",
        "bucket",
        "width",
        "size",
        "head",
        "dropped",
        "sums",
        "_buckets",
        "_closed_keys",
        "_closed",
        "_lo",
        "_hi",
        "_cur",
    )

    def __init__(self, window: float, bucket: float, width: int) -> None:
        if width < 1:
            raise ValueError("width must be >= 1")
        self.window = float(window)
        self.bucket = float(bucket)
        self.width = int(width)
        self.size = bucket_count(window, bucket)
        self.head: int | None = None
        self.dropped = 0
        # running field sums over the window: a live list that slot()'s callers add to
        self.sums: list[float] = [0] * self.width
        # Buckets as lists (added to in place): the newest, those a late event reopened and
        # those that do not pack. The others, closed, are packed one after another into one
        # machine array per ring (_close): a window holds a bucket a minute for each of two
        # rings of every series, and an array and a bucket-number int of their own took
        # about 170 bytes a bucket over the values themselves.
        self._buckets: dict[int, list[float]] = {}
        # the packed buckets' numbers, increasing, and their sums (``width`` values each, in
        # that order, one typecode: a bucket that packs to the other stays a list); None
        # while there are none
        self._closed_keys: array | None = None
        self._closed: array | None = None
        self._set_head(None)

    def _set_head(self, head: int | None) -> None:
        self.head = head
        # ts / bucket in [_lo, _hi) is exactly floor(ts / bucket) == head (integers are exact
        # floats); NaN bounds send everything to the slow path until there is a head
        self._lo = math.nan if head is None else float(head)
        self._hi = math.nan if head is None else float(head + 1)
        # the newest bucket's sums, None until an event lands in it
        self._cur: list[float] | None = None if head is None else self._buckets.get(head)

    def index(self, ts: float) -> int:
        """The bucket number of event time ``ts``."""
        return math.floor(ts / self.bucket)

    def advance(self, ts: float) -> None:
        """Move the window's end up to ``ts`` (never back), forgetting what falls out."""
        i = math.floor(ts / self.bucket)
        if self.head is not None and i <= self.head:
            return
        if self._cur is not None:
            # its last event came: from now on only a late event adds to it (slot() unpacks)
            self._close(self.head)  # type: ignore[arg-type]
        self._set_head(i)
        oldest = i - self.size + 1
        gone = [(k, self._buckets.pop(k)) for k in [k for k in self._buckets if k < oldest]]
        keys = self._closed_keys
        if keys is not None and keys[0] < oldest:
            n, w, packed = bisect_left(keys, oldest), self.width, self._closed
            assert packed is not None
            gone += [(keys[j], packed[j * w:(j + 1) * w]) for j in range(n)]
            self._drop_packed(0, n)
        totals = self.sums
        # sorted: the subtraction order must not depend on where buckets are kept, for float
        # totals
        gone.sort(key=_first)
        for _, values in gone:
            for j, v in enumerate(values):
                totals[j] -= v

    def _close(self, key: int) -> None:
        """Pack the list bucket ``key`` (the newest of all, or any in a restore going up)
        into the closed array, where it packs (:func:`_packed`) to the array's typecode."""
        packed = _packed(self._buckets[key])
        if type(packed) is list:
            return
        store, keys = self._closed, self._closed_keys
        if store is None:
            self._closed_keys, self._closed = array("q", (key,)), packed
        elif store.typecode == packed.typecode:  # type: ignore[union-attr]
            # concatenated, not extended: a new array of just the size needed, where growing
            # one in place reserves room that a ring of few buckets never fills
            self._closed_keys = keys + array("q", (key,))  # type: ignore[operator]
            self._closed = store + packed  # type: ignore[operator]
        else:
            return
        del self._buckets[key]

    def _drop_packed(self, j: int, n: int) -> None:
        """Remove ``n`` packed buckets from the ``j``-th on."""
        keys, store, w = self._closed_keys, self._closed, self.width
        assert keys is not None and store is not None
        del keys[j:j + n]
        del store[j * w:(j + n) * w]
        if not keys:
            self._closed_keys = self._closed = None

    def _unpack(self, i: int) -> list[float] | None:
        """The packed bucket ``i`` taken out as a list (a late event for it), or None."""
        keys = self._closed_keys
        if keys is None:
            return None
        j = bisect_left(keys, i)
        if j == len(keys) or keys[j] != i:
            return None
        w = self.width
        values = self._closed[j * w:(j + 1) * w].tolist()  # type: ignore[index]
        self._drop_packed(j, 1)
        return values

    def slot(self, ts: float) -> list[float] | None:
        """The sums of the bucket ``ts`` counts in; None (``dropped`` rises) if it is too old.

        The caller adds each field of the event to the returned list and to :attr:`sums`.
        """
        q = ts / self.bucket
        if self._lo <= q < self._hi:
            b = self._cur
            if b is not None:
                return b
        # a new bucket, a late event, or the first event of the newest bucket
        self.advance(ts)
        i = math.floor(q)
        assert self.head is not None
        if i <= self.head - self.size:
            self.dropped += 1
            return None
        b = self._buckets.get(i)
        if b is None:
            # a closed bucket, packed (a late event for it), or a new one
            b = self._buckets[i] = self._unpack(i) or [0] * self.width
        if i == self.head:
            self._cur = b
        return b  # type: ignore[return-value]

    def add(self, ts: float, values: tuple[float, ...] | list[float]) -> bool:
        """Count one event's ``values`` at ``ts``; False (and not counted) if it is too old."""
        if len(values) != self.width:
            raise ValueError(f"expected {self.width} values, got {len(values)}")
        b = self.slot(ts)
        if b is None:
            return False
        totals = self.sums
        for j, v in enumerate(values):
            b[j] += v
            totals[j] += v
        return True

    @property
    def totals(self) -> tuple[float, ...]:
        """Field sums over the window."""
        return tuple(self.sums)

    @property
    def oldest(self) -> int | None:
        """The oldest bucket number inside the window (None before the first event)."""
        return None if self.head is None else self.head - self.size + 1

    def snapshot(self) -> dict[str, Any]:
        return {
            "window": self.window,
            "bucket": self.bucket,
            "width": self.width,
            "head": self.head,
            "dropped": self.dropped,
            "totals": list(self.sums),
            # a list of pairs: JSON object keys would turn the bucket numbers into strings
            "buckets": [[k, v] for k, v in self._bucket_items()],
        }

    def _bucket_items(self) -> list[tuple[int, list[float]]]:
        """Every bucket (number, sums), by number: the same wherever each one is kept."""
        items = [(k, list(v)) for k, v in self._buckets.items()]
        keys, store, w = self._closed_keys, self._closed, self.width
        if keys is not None and store is not None:
            items += [(k, store[j * w:(j + 1) * w].tolist()) for j, k in enumerate(keys)]
        items.sort(key=_first)
        return items

    @classmethod
    def restore(cls, data: dict[str, Any]) -> BucketRing:
        ring = cls(data["window"], data["bucket"], data["width"])
        ring.dropped = int(data["dropped"])
        ring.sums = list(data["totals"])
        head = data["head"]
        for k, v in sorted(((int(k), v) for k, v in data["buckets"]), key=_first):
            ring._buckets[k] = list(v)
            if k != head:
                ring._close(k)
        ring._set_head(head)
        return ring


def _packed(values: list[float]) -> list[float] | array:
    """A closed bucket's sums as a machine array where that keeps every value as it is:
    all ints within int64 ('q'), or all floats ('d'); else the list itself.

    A window holds one bucket a minute for each detector of each series, and a list of
    Python ints above 256 costs an object per value: packed, a bucket of 7 counts takes
    136 bytes instead of about 300. Iterating the array gives back the same numbers, so
    expiry, totals and snapshots do not change.

    >>> _packed([3, 400, 2**40]), _packed([0.5, 1.0]), _packed([1, 0.5]), _packed([2**63])
    (array('q', [3, 400, 1099511627776]), array('d', [0.5, 1.0]), [1, 0.5], [9223372036854775808])
    """
    kinds = set(map(type, values))
    if kinds == _INT:
        try:
            return array("q", values)
        except OverflowError:  # break-even's squared counts may pass 2**63
            return values
    return array("d", values) if kinds == _FLOAT else values


_INT, _FLOAT = {int}, {float}
_first = itemgetter(0)


class EmptyRing(BucketRing):
    """A :class:`BucketRing` that stays empty: one placeholder shared by the monitors still
    warming up, which count nothing in their window yet (:func:`empty_ring`). Its sums are a
    tuple and every way in refuses, so a monitor that did not take a ring of its own fails
    rather than counting into every other's.

    >>> ring = empty_ring(600.0, 60.0, 2)
    >>> ring is empty_ring(600.0, 60.0, 2), ring.snapshot() == BucketRing(600, 60, 2).snapshot()
    (True, True)
    >>> ring.slot(0.0)
    Traceback (most recent call last):
    ...
    TypeError: a shared empty window takes no events: give the monitor its own
    """

    __slots__ = ()

    def __init__(self, window: float, bucket: float, width: int) -> None:
        super().__init__(window, bucket, width)
        self.sums = tuple(self.sums)  # type: ignore[assignment]

    def advance(self, ts: float) -> None:
        _refuse()

    def slot(self, ts: float) -> list[float] | None:
        _refuse()

    def add(self, ts: float, values: tuple[float, ...] | list[float]) -> bool:
        _refuse()


def _refuse() -> NoReturn:
    raise TypeError("a shared empty window takes no events: give the monitor its own")


@lru_cache(maxsize=64)
def empty_ring(window: float, bucket: float, width: int) -> EmptyRing:
    """The shared :class:`EmptyRing` of these parameters."""
    return EmptyRing(window, bucket, width)


class SlidingHistogram:
    """Quantiles of the values seen in the most recent ``window`` seconds of event time.

    Values are counted in logarithmic bins of relative width ``relative_accuracy`` (the bins of
    :class:`monitor.aggregate.sketch.LogHistogram`), per ``bucket`` seconds; the window's counts
    are kept as integers, so adding and expiring buckets is exact. A quantile read back is
    within ``relative_accuracy`` of a value of the window.

    Notes
    -----
    Adding is the per-event part and reading is rare, so the work is moved to the reads: the
    newest bucket's values wait in a list and are binned (a logarithm and a dict update each)
    when the bucket closes, every ``_BIN_EVERY`` values, or before anything reads the bins;
    the window's counts per bin are summed from the buckets when read. Counts are integers and
    the values are binned in arrival order, so the bins, and the snapshot, are the same as if
    each value had been binned on arrival.

    :meth:`count_below` answers "is the window's quantile at least this bin?" without the sort
    that :meth:`quantile` needs: a bin asked for once is tracked from then on (its count moves
    with every add and expiry, and values are then binned on arrival) until :meth:`untrack`.
    Tracking is derived state, rebuilt from the bins when asked for again: it is not in the
    snapshot.

    Examples
    --------
    >>> h = SlidingHistogram(window=120, bucket=60)
    >>> for i, v in enumerate([10.0, 20.0, 30.0]):
    ...     _ = h.add(float(i), v)
    >>> h.count, round(h.quantile(0.5)), h.count_below(h.key(25.0))
    (3, 20, 2)
    >>> h.add(200.0, 100.0)    # the first bucket fell out of the window
    True
    >>> h.count, round(h.quantile(0.5)), h.count_below(h.key(25.0))
    (1, 100, 0)
    """

    __slots__ = (
        "window",
        "bucket",
        "relative_accuracy",
        "size",
        "head",
        "count",
        "_gamma",
        "_inv_log_gamma",
        "_buckets",
        "_bins",
        "_below",
        "_pending",
        "_lo",
        "_hi",
        "_cur",
    )

    def __init__(self, window: float, bucket: float, relative_accuracy: float = 0.01) -> None:
        if not 0.0 < relative_accuracy < 1.0:
            raise ValueError("relative_accuracy must be in (0, 1)")
        self.window = float(window)
        self.bucket = float(bucket)
        self.relative_accuracy = float(relative_accuracy)
        self.size = bucket_count(window, bucket)
        self.count = 0  # values in the window, pending ones included
        self._gamma = (1.0 + relative_accuracy) / (1.0 - relative_accuracy)
        self._inv_log_gamma = 1.0 / math.log(self._gamma)
        # bucket number -> {bin key: count}; values <= 0 share the key _ZERO_KEY
        self._buckets: dict[int, dict[int, int]] = {}
        # the window's {bin key: count}, summed from the buckets when read; None when changed
        self._bins: dict[int, int] | None = None
        # tracked bin key -> values of the window in lower bins (see count_below)
        self._below: dict[int, int] = {}
        # values of the newest bucket (_cur) not binned yet; always empty while tracking
        self._pending: list[float] = []
        self._set_head(None)

    def _set_head(self, head: int | None) -> None:
        # the fast path of add(), as in BucketRing.slot
        self.head = head
        self._lo = math.nan if head is None else float(head)
        self._hi = math.nan if head is None else float(head + 1)
        self._cur: dict[int, int] | None = None if head is None else self._buckets.get(head)

    def key(self, value: float) -> int:
        """The bin of ``value``."""
        if value <= 0.0:
            return _ZERO_KEY
        return math.ceil(math.log(value) * self._inv_log_gamma)

    def value(self, key: int) -> float:
        """The value a quantile in bin ``key`` reads back as (increasing in ``key``)."""
        if key == _ZERO_KEY:
            return 0.0
        return 2.0 * self._gamma**key / (self._gamma + 1.0)

    def _bin_pending(self) -> None:
        pending = self._pending
        if pending:
            b = self._cur
            assert b is not None
            inv = self._inv_log_gamma
            log, ceil, get = math.log, math.ceil, b.get  # every value of every bucket: locals
            for value in pending:
                key = _ZERO_KEY if value <= 0.0 else ceil(log(value) * inv)
                b[key] = get(key, 0) + 1
            pending.clear()
            self._bins = None

    def advance(self, ts: float) -> None:
        """Move the window's end up to ``ts`` (never back), forgetting what falls out."""
        i = math.floor(ts / self.bucket)
        if self.head is not None and i <= self.head:
            return
        self._bin_pending()  # into the bucket they belong to, before it stops being the newest
        self._set_head(i)
        oldest = i - self.size + 1
        below = self._below
        for key in sorted(k for k in self._buckets if k < oldest):
            self._bins = None
            gone = self._buckets.pop(key)
            self.count -= sum(gone.values())
            for t in below:
                below[t] -= sum(n for b, n in gone.items() if b < t)

    def add(self, ts: float, value: float) -> bool:
        """Count ``value`` at event time ``ts``; False (not counted) if it is too old."""
        q = ts / self.bucket
        b = self._cur
        if b is None or not self._lo <= q < self._hi:
            # a new bucket, a late event, or the first event of the newest bucket
            self.advance(ts)
            i = math.floor(q)
            assert self.head is not None
            if i <= self.head - self.size:
                return False
            b = self._buckets.get(i)
            if b is None:
                b = self._buckets[i] = {}
            if i == self.head:
                self._cur = b
        self.count += 1
        below = self._below
        if b is self._cur and not below:
            pending = self._pending
            pending.append(value)
            if len(pending) >= _BIN_EVERY:
                self._bin_pending()  # bounds the memory the values hold
            return True
        # binned now: a late value (in an older bucket), or tracked counts to move
        key = _ZERO_KEY if value <= 0.0 else math.ceil(math.log(value) * self._inv_log_gamma)
        b[key] = b.get(key, 0) + 1
        self._bins = None
        for t in below:
            if key < t:
                below[t] += 1
        return True

    def add_many(self, ts: float, values: Sequence[float]) -> bool:
        """:meth:`add` of each of ``values`` at event time ``ts``, in order; False (none
        counted) if ``ts`` is too old.

        Only the bucket of ``ts`` matters to :meth:`add`, so this is also the way to count the
        values of events that all fall in one bucket. Into the newest bucket, untracked, the
        values join the pending list at once: they are binned in the same order either way,
        so the bins and the snapshot are those of one add per value.

        >>> one, many = SlidingHistogram(120, 60), SlidingHistogram(120, 60)
        >>> for v in (3.0, 1.0, 2.0):
        ...     _ = one.add(61.0, v)
        >>> many.add_many(61.5, [3.0, 1.0, 2.0]), many.snapshot() == one.snapshot()
        (True, True)
        """
        if not values:
            return True
        start = 0
        q = ts / self.bucket
        if self._cur is None or not self._lo <= q < self._hi:
            # a new bucket, a late bucket or the newest one's first value: as add() does it
            if not self.add(ts, values[0]):
                return False
            start = 1
        if not self._lo <= q < self._hi:
            for value in values[start:]:  # a late bucket: binned on arrival
                self.add(ts, value)
            return True
        rest = values[start:] if start else values
        if not rest:
            return True
        self.count += len(rest)
        below = self._below
        if below:
            # tracked counts to move: binned on arrival, as add() does
            b = self._cur
            assert b is not None
            inv = self._inv_log_gamma
            log, ceil, get = math.log, math.ceil, b.get
            for value in rest:
                key = _ZERO_KEY if value <= 0.0 else ceil(log(value) * inv)
                b[key] = get(key, 0) + 1
                for t in below:
                    if key < t:
                        below[t] += 1
            self._bins = None
            return True
        pending = self._pending
        pending.extend(rest)
        if len(pending) >= _BIN_EVERY:
            self._bin_pending()  # bounds the memory the values hold, as add() does
        return True

    def count_below(self, key: int) -> int:
        """Values in the window whose bin is lower than ``key``; ``key`` is tracked from now on.

        The window's ``q``-quantile is at least ``value(key)`` exactly when this count is at
        most ``q * (count - 1)`` (the rank :meth:`quantile` looks for).
        """
        n = self._below.get(key)
        if n is None:
            n = self._below[key] = sum(c for b, c in self.bins().items() if b < key)
        return n

    def bins(self) -> dict[int, int]:
        """The window's counts per bin (do not change them)."""
        self._bin_pending()
        bins = self._bins
        if bins is None:
            bins = {}
            for bucket in self._buckets.values():
                for b, n in bucket.items():
                    bins[b] = bins.get(b, 0) + n
            self._bins = bins
        return bins

    def untrack(self) -> None:
        """Stop keeping the counts of :meth:`count_below` (adds are cheaper without)."""
        self._below.clear()

    def quantile(self, q: float) -> float | None:
        """The window's value at quantile ``q`` (LogHistogram's convention), None if empty."""
        if not 0.0 <= q <= 1.0:
            raise ValueError("q must be in [0, 1]")
        if self.count == 0:
            return None
        rank = q * (self.count - 1)
        seen = 0
        bins = self.bins()
        for key in sorted(bins):
            seen += bins[key]
            if seen > rank:
                break
        return self.value(key)

    def snapshot(self) -> dict[str, Any]:
        bins = self.bins()  # first: it bins the pending values into the buckets
        return {
            "window": self.window,
            "bucket": self.bucket,
            "relative_accuracy": self.relative_accuracy,
            "head": self.head,
            "count": self.count,
            "buckets": [[k, [[b, n] for b, n in v.items()]] for k, v in self._buckets.items()],
            # derived from the buckets (restore sums them again), kept for readers of the format
            "bins": [[b, n] for b, n in sorted(bins.items())],
        }

    @classmethod
    def restore(cls, data: dict[str, Any]) -> SlidingHistogram:
        h = cls(data["window"], data["bucket"], data["relative_accuracy"])
        h.count = int(data["count"])
        h._buckets = {int(k): {int(b): int(n) for b, n in v} for k, v in data["buckets"]}
        h._set_head(data["head"])
        return h


class EmptySlidingHistogram(SlidingHistogram):
    """A :class:`SlidingHistogram` that stays empty, shared like :class:`EmptyRing`
    (:func:`empty_sliding_histogram`): it takes no values and tracks no bins.

    >>> h = empty_sliding_histogram(600.0, 60.0, 0.01)
    >>> h.quantile(0.5), h.snapshot() == SlidingHistogram(600.0, 60.0).snapshot()
    (None, True)
    >>> h.add(0.0, 1.0)
    Traceback (most recent call last):
    ...
    TypeError: a shared empty window takes no events: give the monitor its own
    """

    __slots__ = ()

    def advance(self, ts: float) -> None:
        _refuse()

    def add(self, ts: float, value: float) -> bool:
        _refuse()

    def add_many(self, ts: float, values: Sequence[float]) -> bool:
        _refuse()

    def count_below(self, key: int) -> int:
        _refuse()


@lru_cache(maxsize=64)
def empty_sliding_histogram(window: float, bucket: float,
                            relative_accuracy: float) -> EmptySlidingHistogram:
    """The shared :class:`EmptySlidingHistogram` of these parameters."""
    return EmptySlidingHistogram(window, bucket, relative_accuracy)


class ThinnedSample:
    """A bounded sample of a stream, evenly spaced in arrival order, with no randomness.

    Every ``stride``-th item is kept; when ``capacity`` is exceeded, every other kept item is
    dropped and the stride doubles. The sample therefore always holds the items whose arrival
    number is a multiple of the current stride: it covers the whole stream evenly (unlike a
    "first n" sample) and is the same on every run (unlike a random reservoir).

    Examples
    --------
    >>> s = ThinnedSample(capacity=4)
    >>> for i in range(10):
    ...     s.add(i)
    >>> s.items, s.stride, s.seen
    ([0, 4, 8], 4, 10)
    """

    __slots__ = ("capacity", "items", "stride", "seen")

    def __init__(self, capacity: int = 2048) -> None:
        if capacity < 2:
            raise ValueError("capacity must be >= 2")
        self.capacity = int(capacity)
        self.items: list[Any] = []
        self.stride = 1
        self.seen = 0

    def add(self, item: Any) -> None:
        if self.seen % self.stride == 0:
            self.items.append(item)
            if len(self.items) > self.capacity:
                self.items = self.items[::2]
                self.stride *= 2
        self.seen += 1

    def snapshot(self) -> dict[str, Any]:
        return {
            "capacity": self.capacity,
            "items": [list(i) if isinstance(i, tuple) else i for i in self.items],
            "stride": self.stride,
            "seen": self.seen,
        }

    @classmethod
    def restore(cls, data: dict[str, Any]) -> ThinnedSample:
        s = cls(data["capacity"])
        s.items = [tuple(i) if isinstance(i, list) else i for i in data["items"]]
        s.stride = int(data["stride"])
        s.seen = int(data["seen"])
        return s


class PairSample:
    """:class:`ThinnedSample` of ``(int, float)`` pairs, kept in two arrays.

    A segment's throughput warm-up samples every request's (batch size, throughput): as
    tuples of boxed numbers that is some 90 bytes a pair, in two arrays 16. The same items
    and the same thinning as a :class:`ThinnedSample` of those tuples (a float array stores
    the float itself: nothing is rounded). The snapshot holds the two columns (``ints``,
    ``floats``) rather than a list of pairs: two lists, not one per pair, while a checkpoint
    holds it; :meth:`restore` also reads a :class:`ThinnedSample`'s ``items``.

    >>> s, t = PairSample(capacity=4), ThinnedSample(capacity=4)
    >>> for i in range(10):
    ...     s.add((i, i / 4)); t.add((i, i / 4))
    >>> s.items, s.items == t.items, s.snapshot()["floats"]
    ([(0, 0.0), (4, 1.0), (8, 2.0)], True, [0.0, 1.0, 2.0])
    >>> [PairSample.restore(x.snapshot()).snapshot() == s.snapshot() for x in (s, t)]
    [True, True]
    """

    __slots__ = ("capacity", "_ints", "_floats", "stride", "seen")

    def __init__(self, capacity: int = 2048) -> None:
        if capacity < 2:
            raise ValueError("capacity must be >= 2")
        self.capacity = int(capacity)
        self._ints = heap.int_array()  # int32 (batch sizes), int64 once one needs it
        self._floats = array("d")
        self.stride = 1
        self.seen = 0

    def add(self, item: tuple[int, float]) -> None:
        if self.seen % self.stride == 0:
            try:
                self._ints.append(item[0])
            except OverflowError:
                self._ints = heap.widened(self._ints)
                self._ints.append(item[0])
            self._floats.append(item[1])
            if len(self._ints) > self.capacity:
                self._ints = self._ints[::2]
                self._floats = self._floats[::2]
                self.stride *= 2
        self.seen += 1

    @property
    def items(self) -> list[tuple[int, float]]:
        """The kept pairs, in arrival order (a new list)."""
        return list(zip(self._ints, self._floats, strict=True))

    def snapshot(self) -> dict[str, Any]:
        return {"capacity": self.capacity, "ints": self._ints.tolist(),
                "floats": self._floats.tolist(), "stride": self.stride, "seen": self.seen}

    @classmethod
    def restore(cls, data: dict[str, Any]) -> PairSample:
        s = cls(data["capacity"])
        if "items" in data:  # a ThinnedSample's snapshot: throughput version 1
            s._ints = heap.int_array(b for b, _ in data["items"])
            s._floats.extend(x for _, x in data["items"])
        else:
            s._ints = heap.int_array(data["ints"])
            s._floats.extend(data["floats"])
        s.stride = int(data["stride"])
        s.seen = int(data["seen"])
        return s
