"""Counter readings to increases, the way Prometheus ``increase()`` sees them, unextrapolated.

Rules, in the order they are checked (reference 1.5 and 5.4):

- The first reading is a baseline only: nothing is known about what came before it.
- ``process_start_time_seconds`` changed: the process restarted, every counter began again
  at zero, so each series' increase is its current value (even one that ended up higher
  than before the restart, which no per-series rule could tell).
- A series lower than before was reset (a restart without ``process_*`` metrics, as in
  prometheus multiprocess mode): its increase is its current value. Likewise when its
  ``_created`` time changed. Resets are judged per series, like ``rate()`` does: one child
  re-created by its exporter must not make every other series count its whole history.
- A series absent from the previous reading was born after it (counters start at zero):
  its whole value is this interval's. The exception is a series that was there but NaN or
  ±Inf: its first finite value is only a baseline, as its history is unknown.
- A series that disappears keeps its last value as baseline, so a series that comes back
  continues where it left off (or counts as reset when lower).
- NaN and ±Inf values are skipped; the last finite value stays the baseline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from monitor.scrape.engines import Reading, SeriesKey

__all__ = ["CounterTracker", "Increase"]


@dataclass(slots=True)
class Increase:
    """Increase of every series in the reading since the previous reading, and why any
    series was taken as reset (empty: none was)."""

    values: dict[SeriesKey, float]
    resets: list[str] = field(default_factory=list)
    restarted: bool = False


class CounterTracker:
    """The previous reading of one target's counters.

    >>> from monitor.scrape.engines import Reading
    >>> t = CounterTracker()
    >>> k = ("vllm:spec_decode_num_drafts", ())
    >>> t.update(Reading({k: 10.0}, start_time=100.0)) is None     # baseline only
    True
    >>> t.update(Reading({k: 25.0}, start_time=100.0)).values[k]
    15.0
    >>> inc = t.update(Reading({k: 4.0}, start_time=100.0))      # lower: reset
    >>> inc.values[k], inc.resets
    (4.0, ['vllm:spec_decode_num_drafts decreased 25 -> 4'])
    >>> inc = t.update(Reading({k: 90.0}, start_time=200.0))     # restarted, now higher
    >>> inc.values[k], inc.restarted
    (90.0, True)
    """

    __slots__ = ("_values", "_created", "_unknown", "_start", "_primed")

    def __init__(self) -> None:
        self._values: dict[SeriesKey, float] = {}
        self._created: dict[SeriesKey, float] = {}
        self._unknown: set[SeriesKey] = set()
        self._start: float | None = None
        self._primed = False

    @property
    def primed(self) -> bool:
        """Whether a baseline exists (a reading was taken)."""
        return self._primed

    def update(self, reading: Reading) -> Increase | None:
        """Increases since the previous reading; ``None`` for the first one."""
        if not self._primed:
            self._primed = True
            self._values = dict(reading.values)
            self._created = dict(reading.created)
            self._unknown = set(reading.nonfinite)
            self._start = reading.start_time
            return None
        restarted = (reading.start_time is not None and self._start is not None
                     and reading.start_time != self._start)
        resets: list[str] = []
        if restarted:
            resets.append(f"process restarted (process_start_time_seconds "
                          f"{self._start:.0f} -> {reading.start_time:.0f})")
        values: dict[SeriesKey, float] = {}
        for key, now in reading.values.items():
            before = None if restarted else self._values.get(key)
            if before is None:
                # Born since the previous reading (or since the restart); but a series that
                # was there as NaN has an unknown history.
                values[key] = 0.0 if (not restarted and key in self._unknown) else now
            elif now < before:
                values[key] = now
                resets.append(f"{key[0]} decreased {before:g} -> {now:g}")
            elif key in reading.created and key in self._created \
                    and reading.created[key] != self._created[key]:
                values[key] = now
                resets.append(f"{key[0]} re-created (_created changed)")
            else:
                values[key] = now - before
        if restarted:
            self._values = dict(reading.values)
            self._created = dict(reading.created)
            self._unknown = set(reading.nonfinite)
        else:
            self._values.update(reading.values)
            self._created.update(reading.created)
            self._unknown = (self._unknown | reading.nonfinite) - self._values.keys()
        if reading.start_time is not None:
            self._start = reading.start_time
        return Increase(values, resets, restarted)

    # -- saved state ------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "primed": self._primed,
            "start": self._start,
            "values": [[n, [list(p) for p in ls], v] for (n, ls), v in self._values.items()],
            "created": [[n, [list(p) for p in ls], v] for (n, ls), v in self._created.items()],
            "unknown": [[n, [list(p) for p in ls]] for n, ls in sorted(self._unknown)],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CounterTracker:
        """Inverse of :meth:`to_json`.

        >>> from monitor.scrape.engines import Reading
        >>> t = CounterTracker()
        >>> _ = t.update(Reading({("x", (("a", "1"),)): 3.0}, start_time=1.0))
        >>> u = CounterTracker.from_json(t.to_json())
        >>> u.update(Reading({("x", (("a", "1"),)): 5.0}, start_time=1.0)).values
        {('x', (('a', '1'),)): 2.0}
        """
        t = cls()
        t._primed = bool(data["primed"])
        t._start = data["start"]
        t._values = {(n, _pairs(ls)): float(v) for n, ls, v in data["values"]}
        t._created = {(n, _pairs(ls)): float(v) for n, ls, v in data["created"]}
        t._unknown = {(n, _pairs(ls)) for n, ls in data["unknown"]}
        return t


def _pairs(labels: list[list[str]]) -> tuple[tuple[str, str], ...]:
    return tuple((k, v) for k, v in labels)
