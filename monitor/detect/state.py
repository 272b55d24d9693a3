"""Versioned JSON snapshots of detector state (never pickle: it couples state to versions)."""

from __future__ import annotations

from typing import Any, Protocol, Self

from monitor.detect.exceptions import StateVersionError


class Snapshotable(Protocol):
    """A detector whose whole state round-trips through JSON.

    ``restore(snapshot())`` must give a detector whose later outputs are identical to the
    original's for any later input: that is what makes a replay cut in two, with a restart in
    between, raise the same alerts as one uninterrupted replay.
    """

    def snapshot(self) -> dict[str, Any]: ...

    @classmethod
    def restore(cls, data: dict[str, Any]) -> Self: ...


def require_version(data: dict[str, Any], kind: str, version: int) -> None:
    """Refuse a snapshot of another kind or version with an actionable message.

    >>> require_version({"kind": "cusum", "version": 1}, "cusum", 1)
    >>> require_version({"kind": "cusum", "version": 9}, "cusum", 1)
    Traceback (most recent call last):
    ...
    monitor.detect.exceptions.StateVersionError: cusum state version 9 is not readable by this build (expects 1); run `specwatch baseline accept` for the route or delete its state to start a fresh baseline
    """
    if data.get("kind") != kind:
        raise StateVersionError(f"expected {kind} state, got {data.get('kind')!r}")
    if data.get("version") != version:
        raise StateVersionError(
            f"{kind} state version {data.get('version')} is not readable by this build "
            f"(expects {version}); run `specwatch baseline accept` for the route or delete its "
            f"state to start a fresh baseline"
        )
