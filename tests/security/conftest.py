"""Fixtures the security tests share with tests/monitor/api/."""

from tests.monitor.api.conftest import bare  # noqa: F401 - a fixture, found by name

__all__ = ["bare"]
