"""Pausing the cyclic garbage collector while the store builds or writes many rows.

A read of a route's 30 days of hours builds some hundred thousand objects (rows, tuples,
dicts of decoded sketches) that all stay alive until the read returns. Each of them counts
towards the collector's thresholds, so the youngest generations are collected over and over
and the oldest walks everything built so far: a third of the read's CPU, for no garbage at
all (none of it forms cycles). Reference counting still frees everything as usual while the
collector is paused; only cycle detection waits until the outermost pause ends.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused"]

_lock = threading.Lock()
_depth = 0
# Whether the collector was enabled when the outermost pause began: a process that turned it
# off itself keeps it off.
_was_enabled = False


@contextmanager
def collector_paused() -> Iterator[None]:
    """Run the block with the collector disabled; nests, and several threads may hold it at
    once (it is enabled again when the last one leaves, if it was enabled before the first).

    >>> with collector_paused():
    ...     gc.isenabled()
    False
    >>> gc.isenabled()
    True
    """
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
