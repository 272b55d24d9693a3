"""What an ingesting process does with its memory: the cyclic garbage collector's settings,
and giving a large checkpoint's freed memory back to the operating system.

**The collector.** Start-up leaves some hundred thousand objects that live as long as the
process (SQLAlchemy, pydantic, numpy, the detectors' state), and every collection of the
oldest generation walks them all; the hot path allocates containers (events, tuples,
lists) by the million, so with CPython's defaults (a collection every 700 allocations)
a replay spent 31% of its CPU in the collector (``bench/replay_cli.py``'s trace: 7.4 of
23.7 s). :func:`settle`, once start-up is done, moves what exists into the permanent
generation (``gc.freeze``) and lets the youngest generation grow larger before it is
collected: cycles are still collected, only less often. Reference counting frees
everything else as before.

**The heap.** A checkpoint over thousands of series builds, for a moment, every touched row,
snapshot and JSON text at once; freed, those blocks stay in the C allocator's heap (glibc
keeps the top of it and every free page inside it), so resident memory settles at the
highest peak and not at the live heap (``bench/soak.py``'s memory per series).
``malloc_trim`` returns the free pages; elsewhere than glibc this does nothing.

**A checkpoint, a large read.** They build rows, snapshots, statements and decoded
sketches by the hundred thousand that all die together at their end, by reference
counting; a collection in between walks them for nothing (at 10,000 series, 2.7 of 41 CPU s
of a replay went to collections inside checkpoints; a route's 30-day table spent a third of
its CPU so). :func:`collector_paused` holds the collector off for that stretch.

**Keys held by the ten thousand.** A key built from an event (a pending rollup's, a
segment's) holds that event's strings: the same route and model names, one copy per key.
:func:`interned` makes keys share one copy, so the strings cost per distinct value, not per
series and minute. :func:`shared` goes one step further for a mapping that many holders
share unchanged (a model pair's setup, the same on every route that serves it): one dict
per distinct contents.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import sys
import threading
import weakref
from array import array
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["INT32_MAX", "TRIM_AFTER_ROWS", "YOUNG_OBJECTS", "collector_paused", "int_array",
           "interned", "release", "settle", "shared", "widened"]

# Allocations (net) between two collections of the youngest generation. Larger costs one
# longer pause per collection and at most this many objects' worth of uncollected cycles.
YOUNG_OBJECTS = 50_000

# A checkpoint that wrote at least this many rollup deltas and snapshots is large enough for
# its peak to matter (a few MB); smaller ones leave too little behind to be worth the call
# (a trim walks the heap's free lists: about a millisecond per hundred MB).
TRIM_AFTER_ROWS = 1000


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # musl, macOS: no malloc_trim
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_TRIM = _malloc_trim()


def release() -> bool:
    """Return the allocator's free pages to the system; ``False`` where it cannot.

    >>> isinstance(release(), bool)
    True
    """
    if _TRIM is None:
        return False
    _TRIM(0)
    return True


def settle(young: int = YOUNG_OBJECTS) -> None:
    """Start-up is over: collect once, freeze what is left, collect the young less often.

    Call it once per process, from a command's entry (``specwatch run``, ``replay``), never
    from library code: freezing is global to the process.

    >>> import gc
    >>> before = gc.get_threshold()
    >>> settle(young=60_000)
    >>> gc.get_threshold()[0], gc.get_freeze_count() > 0
    (60000, True)
    >>> gc.unfreeze(); gc.set_threshold(*before)
    """
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(young, middle, old)


# Pauses nest and several threads may hold one at once (a checkpoint on the poll thread, a
# store read on the scrape thread): the collector comes back when the last one leaves, and
# only if it was on when the first began (a process that turned it off keeps it off).
_pause_lock = threading.Lock()
_pause_depth = 0
_was_enabled = False


@contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic collection inside the block (reference counting still frees); the
    collector as it was once the last pause of any thread ends.

    >>> import gc
    >>> with collector_paused():
    ...     with collector_paused():
    ...         pass
    ...     gc.isenabled()
    False
    >>> gc.isenabled()
    True
    """
    global _pause_depth, _was_enabled
    with _pause_lock:
        if _pause_depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _pause_depth += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pause_depth -= 1
            if _pause_depth == 0 and _was_enabled:
                gc.enable()


def interned(key: tuple[Any, ...]) -> tuple[Any, ...]:
    """``key`` with its strings interned (one copy per distinct value; other items as is).

    >>> a = interned(("".join(["co", "de"]), 4))
    >>> a == ("code", 4), a[0] is interned(("".join(["c", "ode"]), 0))[0]
    (True, True)
    """
    return tuple(sys.intern(v) if type(v) is str else v for v in key)


class _Shared(dict):  # type: ignore[type-arg]
    """A dict that can be held weakly (a plain dict cannot) and refuses changes:
    :func:`shared`'s entries, held by many at once, where one holder's change would be
    every holder's."""

    __slots__ = ("__weakref__",)

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("a heap.shared mapping is shared by all its holders: change a copy "
                        "(dict(...)) instead")

    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __reduce__(self) -> tuple[type, tuple[dict[Any, Any]]]:
        # copy, deepcopy and pickle make a plain dict, as dict(...) does (and the refusing
        # __setitem__ would stop their rebuilding)
        return dict, (dict(self),)


_SHARED: weakref.WeakValueDictionary[tuple[Any, ...], dict[Any, Any]] = \
    weakref.WeakValueDictionary()
_SHARED_LOCK = threading.Lock()


def shared(items: dict[str, Any]) -> dict[str, Any]:
    """One dict for all equal ``items`` (strings interned), held while anything holds it.

    For mappings that are built often, kept by the thousand and never changed afterwards:
    ten thousand segments of a hundred model pairs keep a hundred setups, not ten thousand
    (some 270 bytes each). The result refuses changes; a copy (``dict(...)``) is a plain dict
    again, which is also what a snapshot should write.

    >>> a = shared({"model": "".join(["qw", "en"]), "k": "4"})
    >>> b = shared({"model": "qwen", "k": "4"})
    >>> a is b, a == {"model": "qwen", "k": "4"}, shared({"model": "qwen", "k": "5"}) is a
    (True, True, False)
    >>> a["k"] = "5"
    Traceback (most recent call last):
    TypeError: a heap.shared mapping is shared by all its holders: change a copy (dict(...)) instead
    """
    key = interned((*items, *items.values()))
    with _SHARED_LOCK:  # get-or-set in one step: two threads must not make two copies
        found = _SHARED.get(key)
        if found is None:
            n = len(items)
            found = _SHARED[key] = _Shared(zip(key[:n], key[n:], strict=True))
        return found


# C ints are 32 bits on every platform CPython supports; the check costs nothing.
_INT32 = "i" if array("i").itemsize == 4 else "q"
INT32_MAX = 2**31 - 1  # the largest int an int_array holds before it needs widened()


def int_array(values: Any = ()) -> array:
    """An array of the ints ``values``: int32 if they all fit, else int64.

    Detectors keep per-request counts by the thousand per series (a warm-up's requests, a
    throughput sample's batch sizes); the parser caps counts at 10**9, so int32 holds them in
    half of int64's bytes, but a detector takes any int: :func:`widened` for one that does
    not fit.

    >>> int_array([1, 2]).typecode, int_array(iter([1, 2**40])), widened(int_array([1]))
    ('i', array('q', [1, 1099511627776]), array('q', [1]))
    """
    if iter(values) is values:  # an iterator: the second try needs the values again
        values = list(values)
    try:
        return array(_INT32, values)
    except OverflowError:
        return array("q", values)


def widened(values: array) -> array:
    """``values`` as int64 (itself if it is already)."""
    return values if values.typecode == "q" else array("q", values)
