"""/healthz, /readyz and /metrics; and the error shape when things go wrong."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter

from monitor.api.app import create_app
from monitor.store.db import head_revision, upgrade
from monitor.store.store import Store
from tests.monitor.api import TestClient

# Nothing listens on port 1: connecting is refused at once.
UNREACHABLE = "postgresql+psycopg://specwatch:hunter2@127.0.0.1:1/nowhere"


@pytest.fixture
def unreachable() -> Iterator[Store]:
    store = Store(UNREACHABLE, require_migrated=False)
    try:
        yield store
    finally:
        store.close()


def test_ready_on_a_migrated_database(store: Store) -> None:
    client = TestClient(create_app(store))
    assert client.get("/healthz").json() == {"status": "ok"}
    r = client.get("/readyz")
    assert r.status_code == 200
    assert r.json() == {"ready": True, "database": "ok", "reason": None}


def test_not_ready_on_an_unmigrated_database(db_url: str) -> None:
    with Store(db_url, require_migrated=False) as store:
        client = TestClient(create_app(store))
        assert client.get("/healthz").status_code == 200  # alive all the same
        r = client.get("/readyz")
        assert r.status_code == 503
        body = r.json()
        assert (body["ready"], body["database"]) == (False, "not_migrated")
        assert "specwatch db upgrade" in body["reason"]
        # Half way: says where it is and what this build needs.
        upgrade(db_url, "0001")
        body = client.get("/readyz").json()
        assert "0001" in body["reason"] and head_revision() in body["reason"]
        upgrade(db_url)
        assert client.get("/readyz").status_code == 200


def test_not_ready_and_503_when_the_database_is_unreachable(unreachable: Store) -> None:
    client = TestClient(create_app(unreachable))
    r = client.get("/readyz")
    assert r.status_code == 503
    body = r.json()
    assert body["database"] == "unreachable" and body["reason"].startswith("database unreachable")
    assert "hunter2" not in r.text and "127.0.0.1" not in r.text
    for path in ("/api/v1/ratios", "/api/v1/silences", "/api/v1/routes"):
        r = client.get(path)
        assert r.status_code == 503, (path, r.text)
        assert r.json()["error"] == "database unavailable"
        assert "hunter2" not in r.text and "nowhere" not in r.text


def test_daemon_status_is_merged_into_readiness(store: Store) -> None:
    status: dict[str, Any] = {"partitions": [0, 2], "caught_up": False, "lag": math.nan}
    client = TestClient(create_app(store, status=lambda: status))
    r = client.get("/readyz")
    assert r.status_code == 200
    assert r.json() == {"partitions": [0, 2], "caught_up": False, "lag": None, "ready": True,
                        "database": "ok", "reason": None}
    status.update(ready=False, reason="no partitions assigned yet")
    r = client.get("/readyz")
    assert r.status_code == 503
    assert (r.json()["ready"], r.json()["reason"]) == (False, "no partitions assigned yet")

    def broken() -> dict[str, Any]:
        raise RuntimeError("consumer gone")

    r = TestClient(create_app(store, status=broken)).get("/readyz")
    assert r.status_code == 503
    assert r.json()["reason"] == "status check failed" and "consumer gone" not in r.text


def test_metrics_of_the_given_registry(store: Store) -> None:
    registry = CollectorRegistry()
    Counter("specwatch_test_things", "things", registry=registry).inc(3)
    client = TestClient(create_app(store, registry=registry))
    client.get("/api/v1/silences")
    client.get("/api/v1/silences/7", params={})
    client.delete("/api/v1/silences/7")
    r = client.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"] == CONTENT_TYPE_LATEST
    assert "specwatch_test_things_total 3.0" in r.text
    # The API's own request metrics, labelled by path template (bounded), not raw path.
    sample = registry.get_sample_value
    assert sample("specwatch_api_requests_total", {
        "method": "GET", "endpoint": "/api/v1/silences", "code": "200"}) == 1.0
    assert sample("specwatch_api_requests_total", {
        "method": "DELETE", "endpoint": "/api/v1/silences/{silence_id}", "code": "404"}) == 1.0
    assert sample("specwatch_api_requests_total", {
        "method": "GET", "endpoint": "unmatched", "code": "405"}) is None  # 405 is matched
    # A second app on the same registry (a restart in tests) shares the metrics.
    TestClient(create_app(store, registry=registry)).get("/healthz")
    assert sample("specwatch_api_requests_total", {
        "method": "GET", "endpoint": "/healthz", "code": "200"}) == 1.0


def test_no_metrics_without_a_registry(bare: Store) -> None:
    r = TestClient(create_app(bare)).get("/metrics")
    assert r.status_code == 404
    assert r.json() == {"error": "no such endpoint: /metrics", "detail": None}
    assert "/metrics" not in create_app(bare).openapi()["paths"]


def test_unexpected_errors_are_a_bare_json_500(bare: Store) -> None:
    def view() -> list[dict[str, Any]]:
        raise RuntimeError("internal detail that must not leak")

    client = TestClient(create_app(bare, routes_view=view), raise_server_exceptions=False)
    r = client.get("/api/v1/routes")
    assert r.status_code == 500
    assert r.json() == {"error": "internal error", "detail": None}
    assert "leak" not in r.text and "Traceback" not in r.text


def test_unknown_paths_and_methods_answer_in_the_error_shape(bare: Store) -> None:
    client = TestClient(create_app(bare))
    r = client.get("/api/v2/ratios")
    assert (r.status_code, r.json()["error"]) == (404, "no such endpoint: /api/v2/ratios")
    r = client.put("/api/v1/silences", json={})
    assert r.status_code == 405
    assert r.json()["error"] == "method PUT not allowed on /api/v1/silences"
    assert "GET" in r.headers["allow"]  # Starlette names the first matching route's methods
