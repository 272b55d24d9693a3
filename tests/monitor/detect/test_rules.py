"""The rule registry: severities, restoring any detector by kind, the condition interface."""

from __future__ import annotations

import json

import pytest

from monitor.detect.activity import ContentionMonitor, InactivityMonitor, StalenessMonitor
from monitor.detect.breakeven import BreakevenMonitor
from monitor.detect.exceptions import StateVersionError
from monitor.detect.metadata import MetadataRules
from monitor.detect.positions import PositionCurve
from monitor.detect.rules import KINDS, RULES, SEVERITY, restore
from monitor.detect.throughput import ThroughputMonitor

SINGLE = [BreakevenMonitor, ThroughputMonitor, ContentionMonitor, StalenessMonitor,
          InactivityMonitor]  # fmt: skip


def test_severities_follow_the_brief() -> None:
    assert SEVERITY == {
        "below_breakeven": "warning",
        "throughput_drop": "warning",
        "revision_mismatch": "warning",
        "tokenizer_mismatch": "critical",
        "memory_contention": "warning",
        "telemetry_stale": "warning",
        "speculation_inactive": "critical",
        "output_mismatch": "critical",
    }
    for rule, cls in RULES.items():
        if cls is not MetadataRules:
            assert cls.rule == rule and cls.severity == SEVERITY[rule]


@pytest.mark.parametrize("cls", [*SINGLE, MetadataRules, PositionCurve])
def test_fresh_detectors_round_trip_through_json(cls) -> None:
    d = cls()
    snap = json.loads(json.dumps(d.snapshot(), allow_nan=False))
    assert snap["version"] == cls.VERSION and KINDS[snap["kind"]] is cls
    again = restore(snap)
    assert type(again) is cls and again.snapshot() == d.snapshot()
    json.dumps(again.evidence(), allow_nan=False)


@pytest.mark.parametrize("cls", SINGLE)
def test_single_conditions_start_quiet(cls) -> None:
    d = cls()
    assert d.firing is False and d.changed is False
    assert isinstance(d.evidence(), dict)


def test_restore_refuses_unknown_kinds_and_versions() -> None:
    with pytest.raises(StateVersionError):
        restore({"kind": "pickle", "version": 1})
    with pytest.raises(StateVersionError):
        restore({**StalenessMonitor().snapshot(), "version": 2})
