"""Task outcome and cost on /api/v1/ratios (priced by the router's ``price_per_gpu_hour``) and
the inter-token gaps on /api/v1/latency, against sums over the committed events."""

from __future__ import annotations

import csv
import io

import pytest
from fastapi import FastAPI

from monitor.api import routes_data
from monitor.api.app import create_app
from monitor.store.store import Store
from monitor.telemetry.event import Event
from tests.monitor.api import TestClient
from tests.monitor.store.helpers import T0, checkpoint, event

PRICE = 4.0


def _events() -> list[Event]:
    """Ten requests in one minute: 8 ok by status, 3 reporting outcome.ok (2 false), tool
    calls checked on 4 (3 valid), GPU time reported on half."""
    out = []
    for i in range(10):
        out.append(event(
            f"e{i}", T0 + i, "tools", status="ok" if i < 8 else "error",
            outcome_ok=(None, True, False, False)[i % 4] if i < 4 else None,
            outcome_tool_calls_valid=(i != 5) if 3 <= i < 7 else None,
            gpu_seconds=0.5 + i / 10, gpu_estimated=i % 2 == 1,
            itl_p50_ms=10.0 + i, itl_p99_ms=50.0 + 5 * i))
    return out


def _client(store: Store, price: float | None) -> TestClient:
    app = FastAPI()
    app.include_router(routes_data.router(store, price_per_gpu_hour=price))
    return TestClient(app)


def test_ratio_rows_carry_outcome_and_cost(store: Store) -> None:
    events = _events()
    store.commit(checkpoint(events))
    successes = sum(e.success for e in events)
    gpu = sum(e.gpu_seconds for e in events)  # type: ignore[misc]
    # by hand: 0 no outcome, ok status; 1 ok; 2, 3 not ok; 4..7 ok status; 8, 9 errors
    assert successes == 6

    [row] = _client(store, PRICE).get("/api/v1/ratios", params={"granularity": "minute"}).json()
    assert (row["requests"], row["successes"], row["success_rate"]) == (10, 6, 0.6)
    assert (row["outcome_ok_reported"], row["outcome_ok_true"]) == (3, 1)
    assert row["ok_rate"] == pytest.approx(1 / 3)
    assert (row["tool_calls_valid_reported"], row["tool_calls_valid_true"]) == (4, 3)
    assert row["tool_calls_valid_rate"] == 0.75
    assert row["schema_valid_reported"] == 0 and row["schema_valid_rate"] is None
    assert row["gpu_seconds"] == pytest.approx(gpu)
    assert row["gpu_reported_requests"] == 5 and row["gpu_seconds_estimated_share"] == 0.5
    assert row["successes_per_gpu_second"] == pytest.approx(6 / gpu)
    assert row["cost_per_success"] == pytest.approx(gpu / 6 * PRICE / 3600)
    assert row["itl_p50_ms"] == pytest.approx(14.0, rel=0.01)  # median of 10..19
    assert row["itl_p99_ms"] == pytest.approx(90.0, rel=0.0101)  # rank floor(.99 * 9) of 50..95

    text = _client(store, PRICE).get("/api/v1/ratios", params={"granularity": "minute",
                                                               "format": "csv"}).text
    [line] = csv.DictReader(io.StringIO(text))
    assert float(line["cost_per_success"]) == pytest.approx(row["cost_per_success"])

    # no price (create_app's default): the same row, cost null
    [unpriced] = TestClient(create_app(store)).get(
        "/api/v1/ratios", params={"granularity": "minute"}).json()
    assert unpriced["cost_per_success"] is None
    assert {k: v for k, v in unpriced.items() if k != "cost_per_success"} == {
        k: v for k, v in row.items() if k != "cost_per_success"}


def test_latency_has_the_inter_token_gaps(store: Store) -> None:
    store.commit(checkpoint(_events()))
    client = _client(store, None)
    [row] = client.get("/api/v1/latency", params={"granularity": "hour"}).json()
    assert row["itl_p50_ms"]["count"] == 10 and row["itl_p99_ms"]["count"] == 10
    assert row["itl_p50_ms"]["p50"] == pytest.approx(14.0, rel=0.01)
    assert row["itl_p99_ms"]["p99"] == pytest.approx(90.0, rel=0.0101)
    assert row["itl_p50_ms"]["mean"] == pytest.approx(14.5, rel=0.01)


def test_schema_documents_the_new_fields(store: Store) -> None:
    doc = TestClient(create_app(store)).get("/openapi.json").json()["components"]["schemas"]
    ratio = doc["RatioOut"]["properties"]
    for name in ("success_rate", "ok_rate", "schema_valid_rate", "tool_calls_valid_rate",
                 "gpu_seconds", "successes_per_gpu_second", "cost_per_success", "itl_p50_ms",
                 "itl_p99_ms"):
        assert ratio[name].get("description"), name
    assert {"itl_p50_ms", "itl_p99_ms"} <= set(doc["LatencyOut"]["properties"])
