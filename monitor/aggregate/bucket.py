"""Sufficient statistics of one series over one event-time bucket."""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Sequence
from operator import attrgetter, itemgetter
from typing import Any

import numpy as np

from monitor.aggregate.outcome import OutcomeRates, cost_per_success
from monitor.aggregate.rows import RowAdder, add_lists
from monitor.aggregate.sketch import LogHistogram, extended_json, merge_extended
from monitor.telemetry.event import Event

# Telemetry v1.1: task outcome (each rate counts only the requests that report it).
OUTCOME_COUNTERS = (
    "successes",
    "outcome_ok_reported",
    "outcome_ok_true",
    "schema_valid_reported",
    "schema_valid_true",
    "tool_calls_valid_reported",
    "tool_calls_valid_true",
    "gpu_reported_requests",
)
COUNTERS = (
    "requests",
    "errors",
    "spec_requests",
    "drafting_requests",
    "evicted_requests",
    "drafted_tokens",
    "accepted_tokens",
    "verify_steps",
    "output_tokens",
    "prompt_tokens",
    "batch_size_sum",
    "batch_size_count",
    *OUTCOME_COUNTERS,
)
# Sums of floats: stored as doubles, never truncated to an int on the way back.
FLOATS = ("gpu_seconds", "gpu_seconds_sq", "success_gpu_seconds")
SKETCHES = ("ttft_ms", "e2e_ms", "decode_tps", "itl_p50_ms", "itl_p99_ms")


_WIDTH = len(SKETCHES)
_ABSENT = math.nan
# From this many buffered requests on, the columns are cut with numpy.
_NUMPY_FROM = 16
# rows_of folds the latencies of this many unread buckets or more in one pass
_ROWS_AT_ONCE = 8


def buffered_columns(values: array) -> list[list[float]]:
    """Rows of ``len(SKETCHES)`` values (NaN: absent) as one list per sketch, in order.

    >>> nan = float("nan")
    >>> buffered_columns(array("d", [1.0, 2.0, nan, nan, 5.0, nan, 7.0, 8.0, nan, nan]))
    [[1.0], [2.0, 7.0], [8.0], [], [5.0]]
    """
    n = len(values) // _WIDTH
    if n < _NUMPY_FROM:
        return [[v for v in values[j::_WIDTH] if v == v] for j in range(_WIDTH)]
    rows = np.frombuffer(values, dtype=np.float64).reshape(n, _WIDTH)
    out = []
    for j in range(_WIDTH):
        column = rows[:, j]
        out.append(column[~np.isnan(column)].tolist())
    return out


_N_COUNTERS = len(COUNTERS)
_N_FLOATS = len(FLOATS)


def bucket_values(e: Event) -> tuple[Any, ...]:
    """What one request adds to its bucket: a value per name of COUNTERS, then of FLOATS,
    then its latencies in SKETCHES' order (NaN: not reported). Its per-position counts
    (``e.accepted_per_position`` when ``e.has_spec``) are added apart.

    A request with speculation on that drafted nothing adds to ``spec_requests`` only: it
    has no acceptance rate and never counts as zero acceptance. An absent outcome means
    unknown: it adds to no ``_reported`` count, and success falls back to the status.
    """
    status_ok = e.status == "ok"
    if e.has_spec:
        spec = 1
        drafted = e.drafted_tokens or 0
        if drafted:
            drafting, accepted = 1, e.accepted_tokens
        else:
            drafting = accepted = 0
        steps = e.verify_steps or 0
    else:
        spec = drafting = drafted = accepted = steps = 0
    batch = e.batch_size
    ok = e.outcome_ok
    if ok is None:
        success, ok_reported, ok_true = status_ok, 0, 0
    else:
        success, ok_reported, ok_true = ok, 1, ok
    valid = e.outcome_schema_valid
    schema_reported, schema_true = (0, 0) if valid is None else (1, valid)
    valid = e.outcome_tool_calls_valid
    tools_reported, tools_true = (0, 0) if valid is None else (1, valid)
    gpu = e.gpu_seconds
    if gpu is None:
        gpu_reported, gpu, gpu_sq, success_gpu = 0, 0.0, 0.0, 0.0
    else:
        gpu_reported = 0 if e.gpu_estimated else 1
        gpu_sq = gpu * gpu
        success_gpu = gpu if success else 0.0
    e2e = e.e2e_ms
    ttft = e.ttft_ms
    if ttft is None:
        ttft = tps = _ABSENT
    else:
        tps = e.output_tokens * 1000.0 / (e2e - ttft) if e2e > ttft else _ABSENT
    itl50 = e.itl_p50_ms
    itl99 = e.itl_p99_ms
    prompt = e.prompt_tokens
    return (
        1, 0 if status_ok else 1, spec, drafting, 1 if e.draft_evicted else 0, drafted,
        accepted, steps, e.output_tokens, 0 if prompt is None else prompt,
        0 if batch is None else batch, 0 if batch is None else 1, success, ok_reported,
        ok_true, schema_reported, schema_true, tools_reported, tools_true, gpu_reported,
        gpu, gpu_sq, success_gpu,
        ttft, e2e, tps, _ABSENT if itl50 is None else itl50, _ABSENT if itl99 is None else itl99,
    )


# Adds rows of this class without building it (the store's checkpoint path).
BUCKET_ROWS = RowAdder(COUNTERS, FLOATS, ("per_position",), SKETCHES)

_BY_KEY = (itemgetter(*COUNTERS), itemgetter(*FLOATS), itemgetter("per_position"),
           itemgetter(*SKETCHES))
_BY_ATTR = (attrgetter(*COUNTERS), attrgetter(*FLOATS), attrgetter("per_position"),
            attrgetter(*SKETCHES))


class BucketStats(OutcomeRates):
    """Additive counts plus mergeable latency sketches.

    Everything here merges by addition, so minute buckets roll up into hours and days, and a
    late event merges into a bucket already written, without re-reading raw events.
    ``spec_requests - drafting_requests`` is the number of requests that ran with
    speculation on but drafted nothing: they have no acceptance rate and are never counted
    as zero acceptance.

    Task outcome and cost (telemetry v1.1): ``successes`` counts successful tasks
    (``Event.success``); each outcome rate is over the requests that report that outcome
    only, since an absent outcome means unknown, never false. ``gpu_seconds`` sums what the
    events carry (reported, or the pipeline's estimate; ``gpu_reported_requests`` says how
    many were reported).

    >>> from monitor.telemetry.event import Event
    >>> b = BucketStats()
    >>> b.update(Event("r1", 0.0, "code", "ok", "t", "r", "tok", output_tokens=10, e2e_ms=500.0,
    ...          has_spec=True, num_speculative_tokens=2, drafted_tokens=8, accepted_tokens=6,
    ...          accepted_per_position=(4, 2), ttft_ms=100.0, gpu_seconds=0.5))
    >>> b.acceptance_rate
    0.75
    >>> abs(b.decode_tps.quantile(0.5) - 25.0) <= 0.01 * 25.0   # 40 tokens in 400 ms, within 1%
    True
    >>> b.update(Event("r2", 1.0, "code", "ok", "t", "r", "tok", output_tokens=10, e2e_ms=500.0,
    ...          outcome_ok=False, gpu_seconds=1.5))
    >>> b.success_rate, b.ok_rate, b.schema_valid_rate
    (0.5, 0.0, None)
    >>> b.gpu_seconds_per_success, b.cost_per_success(3.6)
    (2.0, 0.002)
    """

    __slots__ = (*COUNTERS, *FLOATS, "per_position", "_sketches", "_values")

    def __init__(self) -> None:
        self.requests = 0
        self.errors = 0
        self.spec_requests = 0
        self.drafting_requests = 0
        self.evicted_requests = 0
        self.drafted_tokens = 0
        self.accepted_tokens = 0
        self.verify_steps = 0
        self.output_tokens = 0
        self.prompt_tokens = 0
        self.batch_size_sum = 0
        self.batch_size_count = 0
        self.successes = 0
        self.outcome_ok_reported = 0
        self.outcome_ok_true = 0
        self.schema_valid_reported = 0
        self.schema_valid_true = 0
        self.tool_calls_valid_reported = 0
        self.tool_calls_valid_true = 0
        self.gpu_reported_requests = 0
        self.gpu_seconds = 0.0
        self.gpu_seconds_sq = 0.0
        self.success_gpu_seconds = 0.0
        self.per_position: list[int] = []
        # Built when first read (None until then): a checkpoint's pending deltas are one
        # object per series and minute, by the ten thousand, and most are only ever written.
        self._sketches: tuple[LogHistogram, ...] | None = None
        # Latencies wait here until read or written, one row of SKETCHES per request (NaN
        # where it reported none), and are folded into the sketches once per checkpoint.
        # One array of doubles rather than five lists of float objects: a checkpoint holds
        # one of these per series and minute, by the ten thousand, most with a request or
        # two (a third of this object's memory at one request).
        self._values = array("d")

    def _fold_into(self, sketches: tuple[LogHistogram, ...]) -> None:
        """Add the buffered values to ``sketches``, each sketch its column in arrival order."""
        if self._values:
            for sketch, values in zip(sketches, buffered_columns(self._values), strict=True):
                if values:
                    sketch.extend(values)

    def _flush(self) -> tuple[LogHistogram, ...]:
        sketches = self._sketches
        if sketches is None:
            sketches = self._sketches = tuple(LogHistogram() for _ in SKETCHES)
        if self._values:
            self._fold_into(sketches)
            self._values = array("d")
        return sketches

    def _written(self) -> tuple[LogHistogram, ...]:
        """The sketches with the buffered values in, for :meth:`to_row`; when none was read
        yet, built for the row and not kept (the checkpoint writes a delta and drops it)."""
        if self._sketches is not None:
            return self._flush()
        out = tuple(LogHistogram() for _ in SKETCHES)
        self._fold_into(out)
        return out

    def merge_sketches(self, indices: Sequence[int],
                       targets: Sequence[LogHistogram | None]) -> list[tuple[int, float]]:
        """Merge sketch ``indices[i]`` (of ``SKETCHES``) into ``targets[i]`` (None: none),
        and return each one's count and sum. A bucket whose sketches were never read is
        left so: its buffered values go into the targets directly (:func:`merge_extended`),
        with the same result as merging the sketches it would build. ``/metrics`` merges
        every delta of a checkpoint into a route's or pair's minute, and building five
        sketches a delta to merge two or three was most of that.

        >>> from monitor.telemetry.event import Event
        >>> a, b = BucketStats(), BucketStats()
        >>> for x in (a, b):
        ...     x.update(Event("r", 0.0, "c", "ok", "t", "r", "tok", output_tokens=9, e2e_ms=80.0,
        ...                    ttft_ms=20.0))
        >>> h, g = LogHistogram(), LogHistogram()
        >>> a.merge_sketches((0, 1), (h, None))
        [(1, 20.0), (1, 80.0)]
        >>> g.merge(b.ttft_ms)
        >>> h.to_json() == g.to_json(), a._sketches is None
        (True, True)
        """
        if self._sketches is not None:
            sketches = self._flush()
            out = []
            for j, target in zip(indices, targets, strict=True):
                sketch = sketches[j]
                if target is not None:
                    target.merge(sketch)
                out.append((sketch.count, sketch.total))
            return out
        columns = buffered_columns(self._values) if self._values else [[]] * _WIDTH
        return [merge_extended(target, columns[j])
                for j, target in zip(indices, targets, strict=True)]

    @property
    def ttft_ms(self) -> LogHistogram:
        return self._flush()[0]

    @property
    def e2e_ms(self) -> LogHistogram:
        return self._flush()[1]

    @property
    def decode_tps(self) -> LogHistogram:
        return self._flush()[2]

    @property
    def itl_p50_ms(self) -> LogHistogram:
        """Distribution of the requests' own median inter-token gap."""
        return self._flush()[3]

    @property
    def itl_p99_ms(self) -> LogHistogram:
        """Distribution of the requests' own p99 inter-token gap."""
        return self._flush()[4]

    def update(self, e: Event) -> None:
        """Add one request (as the pipeline's :func:`bucket_values` row)."""
        values = bucket_values(e)
        for name, v in zip(COUNTERS, values, strict=False):
            setattr(self, name, getattr(self, name) + v)
        for name, v in zip(FLOATS, values[_N_COUNTERS:], strict=False):
            setattr(self, name, getattr(self, name) + v)
        app = e.accepted_per_position if e.has_spec else None
        if app:
            self.per_position = add_lists(self.per_position, app)
        self._values.extend(values[_N_COUNTERS + _N_FLOATS:])

    @classmethod
    def from_sums(cls, counters: list[int], floats: list[float], per_position: list[int],
                  values: array) -> BucketStats:
        """From :class:`~monitor.aggregate.columns.ColumnSums` of :func:`bucket_values`
        rows: the counters, the sums, per-position counts and the buffered latencies."""
        b = cls.__new__(cls)
        # Spelled out: one checkpoint builds one per series and minute, by the ten thousand
        # (tests/monitor/aggregate/test_columns.py checks the order against COUNTERS).
        (b.requests, b.errors, b.spec_requests, b.drafting_requests, b.evicted_requests,
         b.drafted_tokens, b.accepted_tokens, b.verify_steps, b.output_tokens, b.prompt_tokens,
         b.batch_size_sum, b.batch_size_count, b.successes, b.outcome_ok_reported,
         b.outcome_ok_true, b.schema_valid_reported, b.schema_valid_true,
         b.tool_calls_valid_reported, b.tool_calls_valid_true, b.gpu_reported_requests) = counters
        b.gpu_seconds, b.gpu_seconds_sq, b.success_gpu_seconds = floats
        b.per_position = per_position
        b._sketches = None
        b._values = values
        return b

    def merge(self, other: BucketStats) -> None:
        for name in COUNTERS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name in FLOATS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        pp = self.per_position
        if len(pp) < len(other.per_position):
            pp.extend([0] * (len(other.per_position) - len(pp)))
        for i, n in enumerate(other.per_position):
            pp[i] += n
        for mine, theirs in zip(self._flush(), other._flush(), strict=True):
            mine.merge(theirs)

    @property
    def acceptance_rate(self) -> float | None:
        """accepted / drafted over the bucket, token-weighted; ``None`` when nothing drafted."""
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else None

    def cost_per_success(self, price_per_gpu_hour: float | None) -> float | None:
        """Cost per successful task at ``price_per_gpu_hour`` (``None``: no price, or no
        success)."""
        return cost_per_success(self.gpu_seconds_per_success, price_per_gpu_hour)

    def to_row(self) -> dict[str, Any]:
        """Column values for the store (sketches and per-position counts as JSON)."""
        return self._row(map(LogHistogram.to_json, self._written()))

    def _row(self, sketches: Iterable[dict[str, Any]]) -> dict[str, Any]:
        """:meth:`to_row` with the sketches' JSON given (``rows_of`` folds them at once)."""
        counters, floats, _, _ = _BY_ATTR  # one C-level getter per group
        row: dict[str, Any] = dict(zip(COUNTERS, counters(self), strict=True))
        row.update(zip(FLOATS, floats(self), strict=True))
        row["per_position"] = list(self.per_position)
        row.update(zip(SKETCHES, sketches, strict=True))
        return row

    @classmethod
    def from_row(cls, row: Any) -> BucketStats:
        """Inverse of :meth:`to_row`; accepts a mapping or a SQLAlchemy row."""
        # one C-level getter per group: checkpoints read back every touched row
        counters, floats, position, sketches = _BY_KEY if isinstance(row, dict) else _BY_ATTR
        # Every slot is set below: not through __init__, whose five empty sketches would be
        # built only to be replaced.
        b = cls.__new__(cls)
        b._values = array("d")
        for name, value in zip(COUNTERS, counters(row), strict=True):
            setattr(b, name, int(value or 0))
        for name, value in zip(FLOATS, floats(row), strict=True):
            setattr(b, name, float(value or 0.0))
        b.per_position = list(position(row) or [])
        b._sketches = tuple(map(LogHistogram.from_json, sketches(row)))
        return b

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BucketStats):
            return NotImplemented
        return (
            all(getattr(self, n) == getattr(other, n) for n in COUNTERS)
            and all(getattr(self, n) == getattr(other, n) for n in FLOATS)
            and self.per_position == other.per_position
            and self._flush() == other._flush()
        )

    def __repr__(self) -> str:
        return (
            f"BucketStats(requests={self.requests}, drafted={self.drafted_tokens}, "
            f"accepted={self.accepted_tokens})"
        )


def rows_of(stats: Sequence[BucketStats]) -> list[dict[str, Any]]:
    """``[s.to_row() for s in stats]``, with the latencies buffered in every bucket whose
    sketches were never read folded all at once (:func:`extended_json`, a column at a time):
    a checkpoint writes thousands of minute rows of a few requests each, where five
    sketches built and filled per row cost more than the values in them.

    >>> buckets = [BucketStats() for _ in range(10)]
    >>> for i, b in enumerate(buckets):
    ...     for j in range(i):
    ...         b.update(Event(f"r{i}-{j}", 0.0, "c", "ok", "t", "r", "tok", output_tokens=9,
    ...                        e2e_ms=80.0 + 7 * j, ttft_ms=None if j % 3 else 20.0))
    >>> rows_of(buckets) == [b.to_row() for b in buckets]
    True
    """
    unread = [s for s in stats if s._sketches is None]
    if len(unread) < _ROWS_AT_ONCE:
        return [s.to_row() for s in stats]
    per_stats = np.array([len(s._values) // _WIDTH for s in unread])
    matrix = np.concatenate([np.frombuffer(s._values, dtype=np.float64) for s in unread]
                            + [np.empty(0)]).reshape(-1, _WIDTH)
    owner = np.repeat(np.arange(len(unread)), per_stats)
    columns = []
    for j in range(_WIDTH):
        column = matrix[:, j]
        present = ~np.isnan(column)
        columns.append(extended_json(column[present],
                                     np.bincount(owner[present], minlength=len(unread))))
    sketches = iter(zip(*columns, strict=True))
    return [s.to_row() if s._sketches is not None else s._row(next(sketches)) for s in stats]
