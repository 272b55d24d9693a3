"""Versioned JSON snapshots of detector state (never pickle: it couples state to versions).

The version check every reader makes is :func:`monitor.versioned.require_version`; the
declared-fields base most detectors build on is :mod:`monitor.detect.base`.
"""

from __future__ import annotations

from typing import Any, Protocol, Self


class Snapshotable(Protocol):
    """A detector whose whole state round-trips through JSON.

    ``restore(snapshot())`` must give a detector whose later outputs are identical to the
    original's for any later input: that is what makes a replay cut in two, with a restart in
    between, raise the same alerts as one uninterrupted replay.
    """

    def snapshot(self) -> dict[str, Any]: ...

    @classmethod
    def restore(cls, data: dict[str, Any]) -> Self: ...
