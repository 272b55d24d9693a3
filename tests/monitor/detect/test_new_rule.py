"""Adding a rule touches the catalogue and one detector: a hypothetical ``draft_slow`` rule,
registered here with a tiny detector, reaches the alert record, the configuration's rule
validation and the exposition's firing gauge without any other module knowing of it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from monitor import rules
from monitor.alert_record import AlertRecord
from monitor.config import DetectionConfig, LifecycleConfig
from monitor.detect.base import CHANGED, FIRING, Detector
from monitor.detect.engine import Detection
from monitor.detect.evaluate import Evaluator
from monitor.exceptions import InvalidAlert
from monitor.exposition import DetectionCollector, snapshot_view
from monitor.telemetry.event import Event


def _summary(state: str, labels: dict[str, str], ev: dict[str, Any]) -> str:
    if state == "firing":
        return f"{labels['route']}: draft time {ev['draft_ms']:.0f} ms"
    return f"{labels['route']}: draft time normal again"


@pytest.fixture
def draft_slow(monkeypatch: pytest.MonkeyPatch) -> type:
    monkeypatch.setitem(rules.CATALOGUE, "draft_slow",
                        rules.Rule("draft_slow", "error", "route", "draft_slow", _summary))

    class DraftSlow(Detector):
        """Fires while a request's time to first token exceeds ``limit_ms``."""

        rule = "draft_slow"
        KIND = "draft_slow"
        PARAMS = {"limit_ms": float}
        STATE = (FIRING, CHANGED)

        def __init__(self, limit_ms: float = 500.0) -> None:
            self._set_params(locals())
            self._firing = self.changed = False
            self._last = 0.0

        def update(self, e: Event) -> None:
            self._last = e.ttft_ms or 0.0
            slow = self._last > self.limit_ms
            self.changed, self._firing = slow != self._firing, slow

        @property
        def firing(self) -> bool:
            return self._firing

        def evidence(self) -> dict[str, Any]:
            return {"draft_ms": self._last, "limit_ms": self.limit_ms}

    return DraftSlow


def _event(ts: float, ttft: float) -> Event:
    return Event(f"r{ts}", ts, "code", "ok", "t", "1", "tok", 10, 50.0, ttft_ms=ttft)


def test_a_new_rule_flows_from_the_catalogue(draft_slow: type) -> None:
    det = draft_slow(limit_ms=300)
    assert det.severity == "error"  # from the catalogue, not the detector
    assert type(det).restore(det.snapshot()).snapshot() == det.snapshot()

    # the engine's evaluation: flips become records with the catalogue's severity and text
    evaluator, firing = Evaluator(), {}
    for ts, ttft in ((1.0, 100.0), (2.0, 900.0), (3.0, 950.0), (4.0, 100.0)):
        det.update(_event(ts, ttft))
        if det.changed:
            evaluator.flip(firing, det.rule, det.firing, {"route": "code"}, ts, det.evidence())
    assert [(r.rule, r.state, r.severity, r.summary) for r in evaluator.alerts] == [
        ("draft_slow", "firing", "error", "code: draft time 900 ms"),
        ("draft_slow", "resolved", "error", "code: draft time normal again"),
    ]
    assert evaluator.alerts[0].to_json()["details"] == {"draft_ms": 900.0, "limit_ms": 300.0}

    # configuration: lifecycle timings and sink filters may name it
    assert "draft_slow" in LifecycleConfig(rules={"draft_slow": {"min_firing": 60}}).rules

    # exposition: a firing condition of the rule is counted with its severity
    detection = Detection(DetectionConfig())
    detection.observe(0, [_event(1.0, 100.0)])
    route = detection.view().routes["code"]
    evaluator.flip(route.firing, "draft_slow", True, {"route": "code"}, 5.0, det.evidence())
    assert (("draft_slow", "code", "error"), 1) in snapshot_view(detection).firing
    registry = CollectorRegistry()
    registry.register(DetectionCollector(lambda: snapshot_view(detection)))
    assert registry.get_sample_value(
        "specwatch_alerts_firing", {"rule": "draft_slow", "route": "code", "severity": "error"}
    ) == 1.0


def test_an_unknown_rule_is_refused_everywhere() -> None:
    with pytest.raises(InvalidAlert):
        AlertRecord("draft_slow", "firing", datetime(2026, 11, 2, tzinfo=UTC), "error",
                    {"route": "code"}, "s")
    with pytest.raises(ValueError, match="unknown rule 'draft_slow'"):
        LifecycleConfig(rules={"draft_slow": {}})
