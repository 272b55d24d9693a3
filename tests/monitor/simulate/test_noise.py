from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from monitor.simulate import Simulator, scenario_config
from tests.monitor.simulate.shape import check_event, ts_of

Events = list[dict[str, Any]]


def simulate(**noise: float) -> Events:
    config = scenario_config("quiet", duration_s=3600, rate=20, seed=9, **noise)
    return list(Simulator(config).events())


def test_no_noise_means_ordered_and_unique() -> None:
    events = simulate()
    assert [e["ts"] for e in events] == sorted(e["ts"] for e in events)
    assert len({e["request_id"] for e in events}) == len(events)


def test_duplicates_are_exact_copies_a_few_events_later() -> None:
    events = simulate(duplicates=0.05)
    positions: dict[str, list[int]] = defaultdict(list)
    for i, e in enumerate(events):
        positions[e["request_id"]].append(i)
    twice = {rid: p for rid, p in positions.items() if len(p) > 1}
    assert all(len(p) == 2 for p in twice.values())
    assert len(twice) / len(positions) == pytest.approx(0.05, abs=0.005)
    for first, second in twice.values():
        assert events[first] == events[second]
        assert events[first] is not events[second]
        assert events[first]["spec"] is not events[second]["spec"]  # a deep copy
        assert 1 <= second - first <= 12
    # apart from the copies, the traffic is the noise-free traffic
    unique = [events[p[0]] for p in positions.values()]
    assert unique == simulate()


def test_late_events_arrive_after_later_ones_within_late_max() -> None:
    events = simulate(late=0.1, late_max=120.0)
    assert len({e["request_id"] for e in events}) == len(events)
    newest = float("-inf")
    lateness = []
    for e in events:
        t = ts_of(e)
        if t < newest:
            lateness.append(newest - t)
        newest = max(newest, t)
    # a late event with a tiny delay can still be in order, so slightly under 10 %
    assert len(lateness) / len(events) == pytest.approx(0.1, abs=0.01)
    assert max(lateness) <= 120.0
    assert max(lateness) > 100.0  # delays spread up to late_max
    assert sorted(events, key=lambda e: e["request_id"]) == simulate()


def test_noise_keeps_every_event_valid() -> None:
    for e in simulate(duplicates=0.02, late=0.05, late_max=30.0):
        check_event(e)
