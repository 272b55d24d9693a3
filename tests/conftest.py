"""Shared fixtures live in tests/fixtures/, one module per real component."""

from hypothesis import HealthCheck, settings

pytest_plugins = [
    "tests.fixtures.db", "tests.fixtures.broker", "tests.fixtures.alertmanager",
    "tests.fixtures.prometheus",
]

# Property tests assert behaviour, not speed: on a loaded two-core CI box the timing checks
# (per-example deadline, "data generation too slow") would fail runs that are correct.
settings.register_profile(
    "specwatch", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("specwatch")
