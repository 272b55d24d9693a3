"""Shared fixtures live in tests/fixtures/, one module per real component."""

pytest_plugins = ["tests.fixtures.db", "tests.fixtures.broker", "tests.fixtures.alertmanager"]
