"""/api/v1/alerts, /api/v1/episodes and /api/v1/silences: the alerting CLI's views and verbs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from monitor.alert_record import AlertRecord
from monitor.api.app import create_app
from monitor.cli import main
from monitor.store.checkpoint import Checkpoint
from monitor.store.store import Store
from tests.monitor.api import TestClient, bare_store
from tests.monitor.store.helpers import T0, at


@pytest.fixture(scope="module")
def unopened() -> Iterator[TestClient]:
    """No database behind it: the refusals below happen before any query."""
    store = bare_store()
    try:
        yield TestClient(create_app(store))
    finally:
        store.close()


def _record(rule: str, state: str, ts: float, route: str, **labels: str) -> AlertRecord:
    return AlertRecord(rule, state, at(ts), "warning", {"route": route, **labels},
                       f"{route}: {rule} {state}", {"rate": 0.31, "nested": {"k": [1, 2]}})


RECORDS = [
    _record("below_breakeven", "firing", T0 + 60.25, "code", draft_model="d1"),
    _record("telemetry_stale", "firing", T0 + 600, "chat"),
    _record("telemetry_stale", "resolved", T0 + 1200, "chat"),
    _record("below_breakeven", "resolved", T0 + 3600, "code", draft_model="d1"),
]


def test_alerts_are_the_v1_records_with_filters(store: Store) -> None:
    store.commit(Checkpoint(source="replay", alerts=RECORDS))
    client = TestClient(create_app(store))

    def get(**params: str) -> list[dict[str, Any]]:
        r = client.get("/api/v1/alerts", params=params)
        assert r.status_code == 200, r.text
        return r.json()

    assert get() == [r.to_json() for r in RECORDS]  # the --alerts-out lines, in order
    assert get()[0]["at"] == "2026-11-02T22:01:00.250000Z"
    assert get(route="chat") == [r.to_json() for r in RECORDS[1:3]]
    assert get(rule="below_breakeven") == [RECORDS[0].to_json(), RECORDS[3].to_json()]
    assert get(rule="below_breakeven", route="chat") == []
    assert get(since=at(T0 + 600).isoformat(), until=at(T0 + 3600).isoformat()) == [
        r.to_json() for r in RECORDS[1:3]]
    assert get(since="100000d", route="") == get()
    r = client.get("/api/v1/alerts", params={"rule": "acceptance_dropped"})
    assert r.status_code == 400 and "'rule'" in r.json()["error"]
    assert "acceptance_drop" in r.json()["error"]  # the known rules are listed


def _episode(name: str, state: str, route: str, started: float,
             resolved: float | None = None) -> dict[str, Any]:
    return {
        "episode": name, "fingerprint": f"fp-{name}", "rule": "acceptance_drop",
        "severity": "warning", "route": route, "labels": {"route": route},
        "summary": f"{route}: acceptance fell", "details": {"baseline": 0.7},
        "state": state, "started_at": at(started), "updated_at": at(resolved or started),
        "resolved_at": None if resolved is None else at(resolved), "notified": state != "pending",
        "silenced_by": None,
    }


def test_episodes_active_or_ended(store: Store) -> None:
    rows = [
        _episode("e1", "resolved", "code", T0, T0 + 900),
        _episode("e2", "firing", "code", T0 + 60),
        _episode("e3", "pending", "chat", T0 + 120),
        _episode("e4", "resolving", "chat", T0 + 180),
        _episode("e5", "dropped", "chat", T0 + 240, T0 + 250),
    ]
    store.commit(Checkpoint(source="replay", episodes=rows))
    client = TestClient(create_app(store))

    def names(**params: str) -> list[str]:
        r = client.get("/api/v1/episodes", params=params)
        assert r.status_code == 200, r.text
        return [e["episode"] for e in r.json()]

    assert names() == ["e1", "e2", "e3", "e4", "e5"]  # oldest first
    assert names(active="true") == ["e2", "e3", "e4"]
    assert names(active="false") == ["e1", "e5"]
    assert names(active="true", route="chat") == ["e3", "e4"]
    (e1,) = [e for e in client.get("/api/v1/episodes").json() if e["episode"] == "e1"]
    assert e1["resolved_at"] == "2026-11-02T22:15:00Z" and e1["notified"] is True
    assert e1["details"] == {"baseline": 0.7} and e1["silenced_by"] is None
    r = client.get("/api/v1/episodes", params={"active": "sometimes"})
    assert r.status_code == 400 and "'active'" in r.json()["error"]


def test_silences_round_trip_with_the_cli(store: Store, migrated_url: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    client = TestClient(create_app(store))
    r = client.post("/api/v1/silences", json={"route": "batch-*", "duration": "2h",
                                              "reason": "load test"})
    assert r.status_code == 201, r.text
    s = r.json()
    starts = datetime.fromisoformat(s["starts_at"])
    ends = datetime.fromisoformat(s["ends_at"])
    assert ends - starts == timedelta(hours=2)
    assert (s["route"], s["rule"], s["created_by"], s["state"]) == (
        "batch-*", None, "api", "active")

    future = client.post("/api/v1/silences", json={
        "route": "code", "rule": "below_breakeven", "reason": "migration tonight",
        "starts_at": (datetime.now(UTC) + timedelta(hours=1)).isoformat(),
        "ends_at": (datetime.now(UTC) + timedelta(hours=3)).isoformat(), "created_by": "alice",
    })
    assert future.status_code == 201, future.text
    f = future.json()
    assert (f["rule"], f["created_by"], f["state"]) == ("below_breakeven", "alice", "future")
    numeric = client.post("/api/v1/silences", json={"route": "x", "duration": 90, "reason": "r"})
    assert numeric.status_code == 201
    n = numeric.json()
    assert datetime.fromisoformat(n["ends_at"]) - datetime.fromisoformat(
        n["starts_at"]) == timedelta(seconds=90)

    # The CLI sees what the API added, and the API what the CLI adds.
    assert main(["silence", "list", "--db", migrated_url, "--format", "json"]) == 0
    listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [x["id"] for x in listed] == [n["id"], f["id"], s["id"]]
    assert main(["silence", "add", "--db", migrated_url, "--route", "chat", "--for", "1h",
                 "--reason", "from the cli", "--by", "bob"]) == 0
    capsys.readouterr()
    shown = client.get("/api/v1/silences").json()
    assert [x["route"] for x in shown] == ["chat", "x", "code", "batch-*"]  # newest first
    cli_id = shown[0]["id"]
    assert shown[0]["created_by"] == "bob"

    assert client.delete(f"/api/v1/silences/{s['id']}").status_code == 204
    assert client.delete(f"/api/v1/silences/{cli_id}").status_code == 204
    again = client.delete(f"/api/v1/silences/{s['id']}")
    assert again.status_code == 404
    assert again.json()["error"] == f"no silence {s['id']} in force"
    assert client.delete("/api/v1/silences/999999").status_code == 404
    assert {x["id"] for x in client.get("/api/v1/silences").json()} == {f["id"], n["id"]}
    everything = client.get("/api/v1/silences", params={"all": "true"}).json()
    states = {x["id"]: x["state"] for x in everything}
    assert states == {s["id"]: "ended", cli_id: "ended", f["id"]: "future", n["id"]: "active"}
    assert main(["silence", "list", "--db", migrated_url, "--format", "json"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


def _in(minutes: int) -> str:
    return (datetime.now(UTC) + timedelta(minutes=minutes)).isoformat()


OK = {"route": "code", "reason": "deploy"}
BAD_BODIES: list[tuple[str, Any, str | None]] = [
    ("malformed", '{"route": "code", ', None),
    ("not an object", "[1, 2]", None),
    ("empty", "", None),
    ("no reason", {"route": "code", "duration": "2h"}, "reason"),
    ("empty route", {**OK, "route": "", "duration": "2h"}, "route"),
    ("neither", OK, "duration"),
    ("both", {**OK, "duration": "2h", "ends_at": _in(60)}, "duration"),
    ("negative", {**OK, "duration": "-2h"}, "duration"),
    ("negative seconds", {**OK, "duration": -5}, "duration"),
    ("zero", {**OK, "duration": "0s"}, "duration"),
    ("nonsense", {**OK, "duration": "2 parsecs"}, "duration"),
    ("a bool", {**OK, "duration": True}, "duration"),
    ("overflow", {**OK, "duration": "99999999w"}, "duration"),
    ("infinite", '{"route": "c", "reason": "r", "duration": 1e309}', "duration"),
    ("NaN", '{"route": "c", "reason": "r", "duration": NaN}', "duration"),
    ("a list", {**OK, "duration": ["2h"]}, "duration"),
    ("unknown rule", {**OK, "duration": "2h", "rule": "acceptance_dropped"}, "rule"),
    ("typo field", {**OK, "for": "2h"}, "for"),
    ("naive end", {**OK, "ends_at": "2030-01-01T00:00:00"}, "ends_at"),
    ("past end", {**OK, "ends_at": _in(-5)}, "ends_at"),
    ("end before start", {**OK, "starts_at": _in(120), "ends_at": _in(60)}, "ends_at"),
    ("year 1 end", {**OK, "ends_at": "0001-01-01T00:30:00+01:00"}, "ends_at"),
    ("long name", {**OK, "duration": "2h", "created_by": "x" * 256}, "created_by"),
    ("long once stored", {**OK, "duration": "2h", "created_by": "\x00" * 200}, "created_by"),
    ("lone surrogate", '{"route": "\\ud800", "reason": "r", "duration": "2h"}', "route"),
]


@pytest.mark.parametrize(("body", "field"), [(b, f) for _, b, f in BAD_BODIES],
                         ids=[name for name, _, _ in BAD_BODIES])
def test_bad_silence_bodies_are_400s_naming_the_field(unopened: TestClient, body: Any,
                                                      field: str | None) -> None:
    if isinstance(body, str):
        r = unopened.post("/api/v1/silences", content=body,
                          headers={"content-type": "application/json"})
    else:
        r = unopened.post("/api/v1/silences", json=body)
    assert r.status_code == 400, r.text
    err = r.json()
    assert set(err) == {"error", "detail"}
    if field is None:
        assert "body" in err["error"]
    else:
        assert f"'{field}'" in err["error"]
        assert any(d["parameter"] == field for d in err["detail"])


@pytest.mark.parametrize("silence_id", ["abc", "0", "-3", str(2**63), "1.5"])
def test_bad_silence_ids_are_400s(unopened: TestClient, silence_id: str) -> None:
    r = unopened.delete(f"/api/v1/silences/{silence_id}")
    assert r.status_code == 400, r.text
    assert "'silence_id'" in r.json()["error"]


def test_bad_alert_queries_are_400s(unopened: TestClient) -> None:
    for path, params, name in [
        ("/api/v1/alerts", {"since": "tomorrow"}, "since"),
        ("/api/v1/alerts", {"until": "2026-13-01T00:00:00Z"}, "until"),
        ("/api/v1/alerts", {"severity": "warning"}, "severity"),
        ("/api/v1/silences", {"all": "perhaps"}, "all"),
        ("/api/v1/episodes", {"state": "firing"}, "state"),
    ]:
        r = unopened.get(path, params=params)
        assert r.status_code == 400, (path, r.text)
        assert f"'{name}'" in r.json()["error"]
