"""A SQLite store per test for the judge's unit tests (the store itself, the command, the
API and the report run on both databases in their own tests)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from monitor.store.db import upgrade
from monitor.store.store import Store


@pytest.fixture
def lite(tmp_path: Path) -> Iterator[Store]:
    url = f"sqlite:///{tmp_path / 'changes.db'}"
    upgrade(url)
    store = Store(url)
    try:
        yield store
    finally:
        store.close()
