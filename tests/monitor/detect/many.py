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
