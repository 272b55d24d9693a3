"""The OpenAPI document: useful to read, and true: a property test over it finds no 5xx."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, given, settings
from prometheus_client import CollectorRegistry
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.python import asgi

from monitor.alert_record import AlertRecord
from monitor.api.app import create_app
from monitor.store.db import upgrade
from monitor.store.store import Store
from tests.monitor.api import bare_store
from tests.monitor.store.helpers import T0, at, checkpoint, event

EXAMPLES = 25  # per operation and mode: the whole module stays well under a minute


def _document() -> dict[str, Any]:
    # The document does not depend on the data: an app on an unopened store gives it.
    store = bare_store()
    try:
        return create_app(store, registry=CollectorRegistry()).openapi()
    finally:
        store.close()


DOC = _document()
CASES = [
    pytest.param(method.upper(), path, mode, id=f"{method.upper()} {path} {mode.value}")
    for path, ops in DOC["paths"].items()
    for method, op in ops.items()
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    # Negative cases need something to get wrong: a parameter or a body.
    if mode is GenerationMode.POSITIVE or op.get("parameters") or op.get("requestBody")
]


@pytest.fixture(scope="module")
def sqlite_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FastAPI]:
    """SQLite only: this test checks the HTTP layer; the endpoint tests run on both databases."""
    url = f"sqlite:///{tmp_path_factory.mktemp('schema') / 'api.db'}"
    upgrade(url)
    store = Store(url)
    cp = checkpoint([event(f"r{i}", T0 + 20 * i, "code") for i in range(30)])
    cp.alerts = [AlertRecord("telemetry_stale", "firing", at(T0 + 600), "warning",
                             {"route": "code"}, "code: no telemetry for 600s")]
    store.commit(cp)
    try:
        yield create_app(store, registry=CollectorRegistry())
    finally:
        store.close()


@pytest.fixture(scope="module")
def api_schema(sqlite_app: FastAPI) -> Any:
    return schemathesis.openapi.from_asgi("/openapi.json", sqlite_app)


@pytest.fixture(scope="module")
def client(sqlite_app: FastAPI) -> Iterator[asgi.ASGIClient]:
    with asgi.get_client(sqlite_app) as c:  # one client: a new one per call is slow
        yield c


@pytest.mark.parametrize(("method", "path", "mode"), CASES)
def test_no_input_makes_a_server_error(api_schema: Any, client: asgi.ASGIClient, method: str,
                                       path: str, mode: GenerationMode) -> None:
    strategy = api_schema[path][method].as_strategy(generation_mode=mode)

    @given(case=strategy)
    @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    def run(case: schemathesis.Case) -> None:
        # call_and_validate raises on a 5xx (not_a_server_error); the status is kept to
        # show the operation really answered.
        response = case.call_and_validate(session=client, checks=[not_a_server_error])
        statuses.append(response.status_code)

    statuses: list[int] = []
    run()
    assert statuses and all(code < 500 for code in statuses)
