from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from monitor.simulate.durations import (
    format_duration,
    format_time,
    format_ts,
    parse_duration,
    parse_time,
)
from monitor.simulate.exceptions import SimulationError


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("30m", 1800), ("2h", 7200), ("1d", 86400), ("1h30m", 5400), ("1.5h", 5400),
     ("250ms", 0.25), ("45", 45), (" 2H ", 7200), (12, 12)],
)
def test_parse_duration(text: str | int, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "5x", "-5m", "5m3", "nan", "inf", "m5"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(SimulationError):
        parse_duration(text)


@given(st.integers(min_value=0, max_value=10**8))
def test_duration_round_trip(seconds: int) -> None:
    assert parse_duration(format_duration(seconds)) == seconds


def test_parse_time_forms() -> None:
    expected = datetime(2026, 11, 2, tzinfo=UTC).timestamp()
    assert parse_time("2026-11-02T00:00:00Z") == expected
    assert parse_time("2026-11-02T01:00:00+01:00") == expected
    assert parse_time("2026-11-02T00:00:00") == expected  # no zone: UTC
    assert parse_time(datetime(2026, 11, 2)) == expected
    assert parse_time(str(expected)) == expected
    with pytest.raises(SimulationError):
        parse_time("yesterday")


@given(st.floats(min_value=0, max_value=4e9))
def test_format_ts_matches_datetime(seconds: float) -> None:
    ms = round(seconds * 1000)
    text = format_ts(np.array([seconds]))[0]
    assert text.endswith("Z") and len(text) == 24
    assert abs(parse_time(text) * 1000 - ms) <= 1
    assert format_time(seconds) == text
