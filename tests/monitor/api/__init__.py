"""Tests of the HTTP API (``monitor/api``)."""

import warnings

from monitor.store.store import Store

# Starlette prefers httpx2 for its test client and warns on httpx, which is what the
# project has; the client works the same. Imported here, once, with that warning muted.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient


def bare_store() -> Store:
    """A store on an in-memory SQLite database that was never migrated: an app on it answers
    whatever needs no query, and a request that did reach the database would fail. Tests of
    refusals (bad parameters, auth, unknown paths) use it to show they happen before any
    query; everything that reads or writes data runs on both real databases."""
    return Store("sqlite://", require_migrated=False)


__all__ = ["TestClient", "bare_store"]
