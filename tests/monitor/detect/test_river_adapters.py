"""River's ADWIN and PageHinkley behind the acceptance-detector interface."""

from __future__ import annotations

import json

import pytest

from monitor.detect.river_adapters import AdwinDetector, PageHinkleyDetector
from tests.monitor.detect.test_acceptance import chain_stream, feed


def test_adwin_detects_a_drop_with_direction_and_levels() -> None:
    stream = chain_stream(12_000, 0.65, seed=21, change_at=8_000, factor=0.8)
    det = AdwinDetector()
    events = feed(det, stream)
    assert events[0][1] == "drop" and 8_000 <= events[0][0] < 8_400
    assert det.current / det.baseline == pytest.approx(0.8, abs=0.05)
    assert abs(det.evidence()["change_index"] - 8_001) < 200


def test_page_hinkley_detects_a_rise() -> None:
    stream = chain_stream(12_000, 0.5, seed=22, change_at=8_000, factor=1.2)
    det = PageHinkleyDetector(threshold=10.0, mode="up")
    events = feed(det, stream)
    assert events[0][1] == "rise" and 8_000 <= events[0][0] < 8_400
    assert det.statistic >= 0.0 and det.threshold == 10.0


def test_recovery_when_a_later_detection_finds_the_old_level() -> None:
    stream = chain_stream(20_000, 0.65, seed=23, change_at=6_000, factor=0.7, back_at=9_000)
    det = AdwinDetector()
    kinds = [e for _, e in feed(det, stream)]
    assert kinds[0] == "drop" and "recovered" in kinds
    assert det.direction is None


def test_ignores_requests_that_drafted_nothing() -> None:
    det = AdwinDetector()
    det.update(0, 0)
    assert det.snapshot()["state"]["n"] == 0 and det.baseline is None
    with pytest.raises(ValueError):
        det.update(4, 2)


@pytest.mark.parametrize("cls", [AdwinDetector, PageHinkleyDetector])
def test_rebuilds_are_replayed_identically(cls: type) -> None:
    """The bounded log rebuilds the river detector at the same input live and restored."""
    stream = chain_stream(6_000, 0.6, seed=24, change_at=4_000, factor=0.75)
    params = {"max_replay": 300} if cls is AdwinDetector else {"max_replay": 300, "threshold": 2}
    whole, first = cls(**params), cls(**params)
    for cut in (299, 300, 301, 1_234):
        whole, first = cls(**params), cls(**params)
        feed(whole, stream, 0, cut)
        feed(first, stream, 0, cut)
        data = json.loads(json.dumps(first.snapshot()))
        assert len(data["state"]["log"]) <= 2 * 300
        second = cls.restore(data)
        assert feed(second, stream, cut) == feed(whole, stream, cut)
        assert json.dumps(second.snapshot()) == json.dumps(whole.snapshot())


def test_unbounded_mode_keeps_everything() -> None:
    stream = chain_stream(3_000, 0.6, seed=25)
    det = AdwinDetector(max_replay=None)
    feed(det, stream)
    assert len(det.snapshot()["state"]["log"]) == 2 * 3_000
    with pytest.raises(ValueError):
        AdwinDetector(max_replay=10)
