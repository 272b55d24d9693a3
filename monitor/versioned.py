"""Versioned JSON snapshots: the check every reader of stored state makes first.

Below both ``monitor/detect/`` (detector snapshots) and ``alerts/`` (the lifecycle's
snapshots), so neither reaches into the other for it.
"""

from __future__ import annotations

from typing import Any

from monitor.exceptions import StateVersionError

__all__ = ["require_version"]


def require_version(data: dict[str, Any], kind: str, version: int) -> None:
    """Refuse a snapshot of another kind or version with an actionable message.

    >>> require_version({"kind": "cusum", "version": 1}, "cusum", 1)
    >>> require_version({"kind": "cusum", "version": 9}, "cusum", 1)
    Traceback (most recent call last):
    ...
    monitor.exceptions.StateVersionError: cusum state version 9 is not readable by this build (expects 1); run `specwatch baseline accept` for the route or delete its state to start a fresh baseline
    """
    if data.get("kind") != kind:
        raise StateVersionError(f"expected {kind} state, got {data.get('kind')!r}")
    if data.get("version") != version:
        raise StateVersionError(
            f"{kind} state version {data.get('version')} is not readable by this build "
            f"(expects {version}); run `specwatch baseline accept` for the route or delete its "
            f"state to start a fresh baseline"
        )
