"""Per-slice statistics a policy is learnt from: one hour of one series in one slice of
pre-request signals (batch-size bucket, prompt-length bucket, temperature bucket, tags).

Only sums, so that hours add up and a late event merges into its hour. What a policy needs:

- the survival curve of draft positions (``per_position / steps``), which predicts decode
  speed at every draft length up to the one measured (``monitor/detect/positions.py``);
- the time of one speculative verification step and of one plain decode step, per request,
  with their squares: where requests with and without speculation share a batch-size bucket
  on the same target, their ratio measures the marginal cost per drafted position
  (``c + v``) with an interval;
- decode and end-to-end time, to say how much of a route's latency a faster decode can save.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import Any, NamedTuple

from monitor.aggregate.rows import add_lists
from monitor.aggregate.series import SeriesKey
from monitor.telemetry.event import Event

__all__ = ["SLICE_COUNTERS", "SLICE_FLOATS", "SliceKey", "SliceRecord", "SliceStats",
           "slice_positions", "slice_values"]

SLICE_COUNTERS = (
    "requests",
    "drafting_requests",
    "drafted_tokens",
    "accepted_tokens",
    "verify_steps",
    "output_tokens",
    "timed_requests",
    "timed_output_tokens",
    "spec_timed",
    "plain_timed",
)
SLICE_FLOATS = (
    "decode_ms",
    "e2e_ms",
    "ttft_ms",
    "spec_step_ms",
    "spec_step_ms_sq",
    "plain_token_ms",
    "plain_token_ms_sq",
)


def slice_values(e: Event) -> tuple[Any, ...]:
    """What one request adds to its slice: a value per name of SLICE_COUNTERS, then of
    SLICE_FLOATS (its per-position counts: :func:`slice_positions`).

    Verification steps are never inferred as drafted / k: n-gram and early-exit drafters
    propose fewer than k tokens on many steps, and the guess would inflate every prediction.
    Only an ok request with a first token and a positive decode time is timed.
    """
    drafted = e.drafted_tokens
    out = e.output_tokens
    if e.has_spec and drafted:
        drafting, accepted, steps = 1, e.accepted_tokens, e.verify_steps or 0
    else:
        drafting = drafted = accepted = steps = 0
    ttft = e.ttft_ms
    if ttft is None or e.status != "ok" or e.e2e_ms - ttft <= 0:
        return (1, drafting, drafted, accepted, steps, out, 0, 0, 0, 0,
                0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    e2e = e.e2e_ms
    decode = e2e - ttft
    if steps:
        per = decode / steps
        return (1, drafting, drafted, accepted, steps, out, 1, out, 1, 0,
                decode, e2e, ttft, per, per * per, 0.0, 0.0)
    if not e.has_spec and out > 0:
        per = decode / out
        return (1, drafting, drafted, accepted, steps, out, 1, out, 0, 1,
                decode, e2e, ttft, 0.0, 0.0, per, per * per)
    return (1, drafting, drafted, accepted, steps, out, 1, out, 0, 0,
            decode, e2e, ttft, 0.0, 0.0, 0.0, 0.0)


def slice_positions(e: Event) -> tuple[int, ...] | None:
    """The per-position counts a request adds to its slice (only one that drafted)."""
    return e.accepted_per_position if e.has_spec and e.drafted_tokens else None


class SliceKey(NamedTuple):
    """The pre-request signals of a slice, as bucket labels (``monitor/policy/features.py``);
    ``tags`` is the canonical ``k=v&k=v`` text (``"*"``: over the route's slice cap)."""

    batch: str
    prompt: str
    temperature: str
    tags: str


class SliceStats:
    """Additive statistics of the requests of one slice.

    >>> s = SliceStats()
    >>> s.update(Event("r1", 0.0, "code", "ok", "t", "r", "tok", output_tokens=13, e2e_ms=500.0,
    ...          has_spec=True, num_speculative_tokens=2, drafted_tokens=8, accepted_tokens=6,
    ...          verify_steps=4, accepted_per_position=(4, 2), ttft_ms=100.0, batch_size=4))
    >>> s.steps, s.survival, s.spec_step_ms
    (4, [1.0, 0.5], 100.0)
    >>> s.update(Event("r2", 1.0, "code", "ok", "t", "r", "tok", output_tokens=10, e2e_ms=300.0,
    ...          ttft_ms=100.0))
    >>> s.requests, s.plain_token_ms, round(s.decode_share, 3)
    (2, 20.0, 0.75)
    """

    __slots__ = (*SLICE_COUNTERS, *SLICE_FLOATS, "per_position")

    def __init__(self) -> None:
        # Spelled out rather than a setattr loop: the pipeline builds one per slice, series
        # and hour (tests/monitor/aggregate/test_rows.py checks the names stay in step).
        self.requests = 0
        self.drafting_requests = 0
        self.drafted_tokens = 0
        self.accepted_tokens = 0
        self.verify_steps = 0
        self.output_tokens = 0
        self.timed_requests = 0
        self.timed_output_tokens = 0
        self.spec_timed = 0
        self.plain_timed = 0
        self.decode_ms = 0.0
        self.e2e_ms = 0.0
        self.ttft_ms = 0.0
        self.spec_step_ms = 0.0
        self.spec_step_ms_sq = 0.0
        self.plain_token_ms = 0.0
        self.plain_token_ms_sq = 0.0
        self.per_position: list[int] = []

    def update(self, e: Event) -> None:
        """Add one request (as the pipeline's :func:`slice_values` row)."""
        values = slice_values(e)
        for name, v in zip(_NAMES, values, strict=True):
            setattr(self, name, getattr(self, name) + v)
        app = slice_positions(e)
        if app:
            self.per_position = add_lists(self.per_position, app)

    @classmethod
    def from_sums(cls, counters: list[int], floats: list[float], per_position: list[int],
                  _kept: Any = None) -> SliceStats:
        """From :class:`~monitor.aggregate.columns.ColumnSums` of :func:`slice_values` rows."""
        s = cls.__new__(cls)
        # Spelled out, as in __init__: one per slice, series and hour at every checkpoint.
        (s.requests, s.drafting_requests, s.drafted_tokens, s.accepted_tokens, s.verify_steps,
         s.output_tokens, s.timed_requests, s.timed_output_tokens, s.spec_timed,
         s.plain_timed) = counters
        (s.decode_ms, s.e2e_ms, s.ttft_ms, s.spec_step_ms, s.spec_step_ms_sq, s.plain_token_ms,
         s.plain_token_ms_sq) = floats
        s.per_position = per_position
        return s

    def merge(self, other: SliceStats) -> None:
        for name in SLICE_COUNTERS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name in SLICE_FLOATS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        pp = self.per_position
        if len(pp) < len(other.per_position):
            pp.extend([0] * (len(other.per_position) - len(pp)))
        for i, n in enumerate(other.per_position):
            pp[i] += n

    def copy(self) -> SliceStats:
        out = SliceStats()
        out.merge(self)
        return out

    @property
    def steps(self) -> int:
        return self.verify_steps

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else None

    @property
    def survival(self) -> list[float] | None:
        """Share of verification steps that kept at least ``i + 1`` drafts, per position."""
        if not self.verify_steps or not self.per_position:
            return None
        return [n / self.verify_steps for n in self.per_position]

    @property
    def decode_tps(self) -> float | None:
        """Decode throughput: output tokens per second of decoding, over timed requests."""
        return self.timed_output_tokens / self.decode_ms * 1000.0 if self.decode_ms > 0 else None

    @property
    def decode_share(self) -> float | None:
        """Share of end-to-end time spent decoding (``e2e - ttft``), over timed requests."""
        return self.decode_ms / self.e2e_ms if self.e2e_ms > 0 else None

    def to_row(self) -> dict[str, Any]:
        row: dict[str, Any] = dict(zip(_NAMES, _VALUES(self), strict=True))  # one C call
        row["per_position"] = list(self.per_position)
        return row

    @classmethod
    def from_row(cls, row: Any) -> SliceStats:
        get = row.__getitem__ if isinstance(row, dict) else lambda k: getattr(row, k)
        s = cls()
        for name in SLICE_COUNTERS:
            setattr(s, name, int(get(name) or 0))
        for name in SLICE_FLOATS:
            setattr(s, name, float(get(name) or 0.0))
        s.per_position = list(get("per_position") or [])
        return s

    @classmethod
    def from_values(cls, values: Any) -> SliceStats:
        """From the counters, the floats and the per-position list, in that order (the
        column order of ``slice_rollups``: a store read of many rows)."""
        s = cls.__new__(cls)
        for name, v in zip(_NAMES, values, strict=False):
            setattr(s, name, v or 0)
        s.per_position = list(values[_N_NAMES] or [])
        return s

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SliceStats):
            return NotImplemented
        return self.to_row() == other.to_row()

    def __repr__(self) -> str:
        return (f"SliceStats(requests={self.requests}, drafted={self.drafted_tokens}, "
                f"accepted={self.accepted_tokens}, steps={self.verify_steps})")


_NAMES = (*SLICE_COUNTERS, *SLICE_FLOATS)
_N_NAMES = len(_NAMES)
_VALUES = attrgetter(*_NAMES)


@dataclass(frozen=True, slots=True)
class SliceRecord:
    """One stored row: a series (route, model pair, draft length) in one slice over one hour
    (``hour``: the bucket start, Unix seconds)."""

    hour: int
    series: SeriesKey
    key: SliceKey
    stats: SliceStats
