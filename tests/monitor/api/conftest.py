"""The ``bare`` store fixture, shared with tests/security/ (its conftest imports it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from monitor.store.store import Store
from tests.monitor.api import bare_store


@pytest.fixture
def bare() -> Iterator[Store]:
    """:func:`tests.monitor.api.bare_store`, closed afterwards."""
    store = bare_store()
    try:
        yield store
    finally:
        store.close()
