"""SQL history: rollup tables, source offsets and state, written in one transaction."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from monitor.store.checkpoint import Checkpoint, PartitionCommit, PartitionState
from monitor.store.exceptions import FencedError, NotMigratedError, StoreError

if TYPE_CHECKING:
    from monitor.store.db import (
        check_migrated,
        current_revision,
        head_revision,
        make_engine,
        redact_url,
        upgrade,
    )
    from monitor.store.query import RatioRow, format_ratios
    from monitor.store.store import Store

# Imported on first use: the aggregator needs Checkpoint without paying for SQLAlchemy and
# Alembic at import time.
_LAZY = {
    "Store": "monitor.store.store",
    "RatioRow": "monitor.store.query",
    "format_ratios": "monitor.store.query",
    "check_migrated": "monitor.store.db",
    "current_revision": "monitor.store.db",
    "head_revision": "monitor.store.db",
    "make_engine": "monitor.store.db",
    "redact_url": "monitor.store.db",
    "upgrade": "monitor.store.db",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "Checkpoint",
    "FencedError",
    "NotMigratedError",
    "PartitionCommit",
    "PartitionState",
    "RatioRow",
    "Store",
    "StoreError",
    "check_migrated",
    "current_revision",
    "format_ratios",
    "head_revision",
    "make_engine",
    "redact_url",
    "upgrade",
]
