"""The caller's side of ``update_many``, for the detectors' equivalence tests."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


def take(m: Any, events: Sequence[Any], i: int, end: int, flips: list[Any],
         read: Callable[[Any], tuple[Any, ...]]) -> int:
    """Feed ``events[i:end]`` to ``m.update_many`` as a caller does: after each call a flip
    is read (``(index, *read(m))`` into ``flips``) and the rest passed again. Returns ``end``.
    """
    while i < end:
        taken = m.update_many(events[i:end])
        assert 1 <= taken <= end - i
        i += taken
        if m.changed:
            flips.append((i - 1, *read(m)))
        else:
            assert i == end  # only a flip stops a call early
    return i


def observe_in_groups(detection: Any, events: Sequence[Any], groups: list[int] | None,
                      drain_every: int, drain: Callable[[], None]) -> None:
    """Feed ``detection`` one event per call (``groups`` None) or in calls of the given
    sizes (cycled); ``drain()`` after the first call past every ``drain_every`` events, as
    checkpoints do."""
    sizes = [1] if groups is None else groups
    i = calls = drained = 0
    while i < len(events):
        size = sizes[calls % len(sizes)]
        detection.observe(0, events[i:i + size])
        i += size
        calls += 1
        if i - drained >= drain_every:
            drained = i
            drain()
