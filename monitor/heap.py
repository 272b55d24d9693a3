"""Giving a large checkpoint's freed memory back to the operating system.

A checkpoint over thousands of series builds, for a moment, every touched row, snapshot and
JSON text at once; freed, those blocks stay in the C allocator's heap (glibc keeps the top
of it and every free page inside it), so resident memory settles at the highest peak and
not at the live heap (``bench/soak.py``'s memory per series). ``malloc_trim`` returns the
free pages; elsewhere than glibc this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable

__all__ = ["TRIM_AFTER_ROWS", "release"]

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
