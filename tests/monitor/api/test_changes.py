"""/api/v1/changes: the same judgements as ``specwatch changes --format json``."""

from __future__ import annotations

import json

import pytest

from monitor.api.app import create_app
from monitor.changes import JudgeSettings
from monitor.cli import main
from monitor.store.store import Store
from tests.monitor.api import TestClient, bare_store
from tests.monitor.changes.traffic import AT, THREE, three_changes
from tests.monitor.store.helpers import at


def test_changes_are_what_the_cli_prints(store: Store, migrated_url: str,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    three_changes(store)
    client = TestClient(create_app(store))
    r = client.get("/api/v1/changes")
    assert r.status_code == 200, r.text
    body = r.json()
    assert [(c["route"], c["verdict"]) for c in body] == list(THREE.items())
    assert main(["changes", "--db", migrated_url, "--format", "json"]) == 0
    assert body == json.loads(capsys.readouterr().out)
    acc = body[0]["metrics"]["acceptance"]
    assert acc["verdict"] == "worse" and acc["basis"] == "rate" and acc["live"] == "worse"
    assert len(acc["interval"]) == 2 and acc["interval"][1] < 0

    def routes(**params: str) -> list[str]:
        r = client.get("/api/v1/changes", params=params)
        assert r.status_code == 200, r.text
        return [c["route"] for c in r.json()]

    assert routes(route="code") == ["code"]
    assert routes(route="") == list(THREE)
    assert routes(since=at(AT + 30).isoformat()) == ["code", "docs"]
    assert routes(since="100000d", route="nope") == []


def test_the_window_comes_from_the_settings(store: Store) -> None:
    three_changes(store)
    short = TestClient(create_app(store, changes=JudgeSettings(window=300)))
    chat = short.get("/api/v1/changes", params={"route": "chat"}).json()[0]
    # five minutes a side: 100 requests, fewer than the 200 needed
    assert chat["metrics"]["acceptance"]["requests_before"] == 100
    assert chat["verdict"] == "insufficient_data"
    assert chat["before"]["since"] == "2026-11-02T23:55:00Z"


def test_bad_change_queries_are_400s() -> None:
    store = bare_store()
    try:
        client = TestClient(create_app(store))
        for params, name in (({"since": "tomorrow"}, "since"), ({"until": "1h"}, "until"),
                             ({"kind": "draft_drift"}, "kind")):
            r = client.get("/api/v1/changes", params=params)
            assert r.status_code == 400, r.text
            assert f"'{name}'" in r.json()["error"]
    finally:
        store.close()
