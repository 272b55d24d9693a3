"""``GET /api/v1/gate``: the same document as ``specwatch gate --format json``; unknown names
are 404, a bad choice of parameters 400."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi import Depends, FastAPI
from fastapi.testclient import TestClient

from monitor.api.errors import install_error_handlers
from monitor.api.params import reject_unknown_query
from monitor.api.routes_gate import router
from monitor.gate import GateSettings, experiment_sides, judge_gate
from monitor.store.store import Store
from tests.monitor.gate.conftest import CHANGE_ID


@pytest.fixture(scope="module")
def client(gate_db: str) -> Iterator[tuple[TestClient, Store]]:
    store = Store(gate_db)
    app = FastAPI()
    install_error_handlers(app)
    app.include_router(router(store, GateSettings()),
                       dependencies=[Depends(reject_unknown_query)])
    try:
        yield TestClient(app), store
    finally:
        store.close()


def test_the_document_is_the_commands(client: tuple[TestClient, Store]) -> None:
    http, store = client
    r = http.get("/api/v1/gate", params={"experiment": "broken-tools"})
    assert r.status_code == 200
    doc = r.json()
    assert doc == judge_gate(experiment_sides(store, "broken-tools")).to_json()
    assert doc["verdict"] == "fail"
    assert doc["failures"] == [{"route": "json-tools", "metric": "tool_calls_valid_rate"}]


def test_a_change(client: tuple[TestClient, Store]) -> None:
    http, _ = client
    r = http.get("/api/v1/gate", params={"change": CHANGE_ID})
    assert r.status_code == 200 and r.json()["gate"]["kind"] == "change"


@pytest.mark.parametrize(("params", "status"), [
    ({"experiment": "nope"}, 404),
    ({"change": "nope"}, 404),
    ({}, 400),
    ({"experiment": "small", "change": CHANGE_ID}, 400),
    ({"experiment": "small", "since": "yesterday"}, 400),
    ({"experiment": "small", "route": "x"}, 400),
])
def test_errors(client: tuple[TestClient, Store], params: dict[str, str], status: int) -> None:
    http, _ = client
    r = http.get("/api/v1/gate", params=params)
    assert r.status_code == status
    assert set(r.json()) == {"error", "detail"}


def test_every_experiment_of_a_route_for_the_report(client: tuple[TestClient, Store]) -> None:
    from monitor.gate.listing import judge_experiments

    _, store = client
    every = judge_experiments(store)
    assert [(j.sides.name, j.verdict) for j in every] == [
        ("broken-tools", "fail"), ("faster-draft", "pass"), ("small", "insufficient_data")]
    assert judge_experiments(store, route="chat") == []
    assert len(judge_experiments(store, route="json-tools")) == 3
