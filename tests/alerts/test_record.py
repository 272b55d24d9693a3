"""The alerts v1 record: validation, stable fingerprints, JSON shape."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from alerts.exceptions import InvalidAlert
from alerts.outfile import AlertsFile
from monitor.alert_record import AlertRecord, fingerprint

AT = datetime(2026, 11, 2, 14, 20, tzinfo=UTC)


def rec(**kw: object) -> AlertRecord:
    base: dict = dict(rule="acceptance_drop", state="firing", at=AT, severity="warning",
                      labels={"route": "creative", "target_model": "m70b"},
                      summary="creative: acceptance 0.61 -> 0.49", details={"baseline": 0.61})
    base.update(kw)
    return AlertRecord(**base)


def test_json_shape_matches_the_spec() -> None:
    out = rec().to_json()
    assert list(out) == ["rule", "state", "at", "severity", "labels", "summary", "details",
                         "fingerprint"]
    assert out["at"] == "2026-11-02T14:20:00Z"
    assert json.loads(rec().to_line()) == out


def test_fingerprint_is_stable_for_rule_and_labels_only() -> None:
    a = rec()
    b = rec(state="resolved", at=AT + timedelta(hours=1), summary="x", details={})
    assert a.fingerprint == b.fingerprint
    assert rec(rule="acceptance_rise", severity="info").fingerprint != a.fingerprint
    assert fingerprint("r", {"route": "a", "x": "1"}) == fingerprint("r", {"x": "1", "route": "a"})


def test_at_is_normalised_to_utc() -> None:
    plus2 = AT.astimezone(timezone(timedelta(hours=2)))
    assert rec(at=plus2).to_json()["at"] == "2026-11-02T14:20:00Z"


@pytest.mark.parametrize("bad", [
    {"rule": "made_up"}, {"state": "pending"}, {"severity": "page"},
    {"labels": {"target_model": "m"}}, {"at": datetime(2026, 11, 2)},
])
def test_invalid_records_are_refused(bad: dict) -> None:
    with pytest.raises(InvalidAlert):
        rec(**bad)


def test_alerts_file_appends_json_lines(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    out = AlertsFile(str(path))
    out.write([rec(), rec(state="resolved")])
    out.close()
    again = AlertsFile(str(path))
    again.write([rec()])
    again.close()
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [x["state"] for x in lines] == ["firing", "resolved", "firing"]
