"""The bearer token on every route of the app, enumerated from the app itself: a route added
tomorrow is covered by these tests without anyone listing it, and one that answers without
the token fails them unless it is added to ``OPEN_PATHS`` (and ``docs/security.md``)."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from monitor.api.app import create_app
from monitor.api.auth import OPEN_PATHS
from monitor.api.server import ApiServer, redact_query
from monitor.store.store import Store
from tests.monitor.api import bare_store
from tests.security import API_TOKEN, TestClient, all_logs, assert_no_secret

# What answers without the token, and nothing else: the probes (a kubelet or a load
# balancer can't always send headers) and the API's self-description (same for everyone).
DOCUMENTED_OPEN = {"/healthz", "/readyz", "/openapi.json", "/docs", "/docs/oauth2-redirect",
                   "/redoc"}
SAME_LENGTH = API_TOKEN[:-1] + ("0" if API_TOKEN[-1] != "0" else "1")
WRONG: dict[str, dict[str, str]] = {
    "missing": {},
    "wrong, same length": {"Authorization": f"Bearer {SAME_LENGTH}"},
    "prefix": {"Authorization": f"Bearer {API_TOKEN[:-1]}"},
    "longer": {"Authorization": f"Bearer {API_TOKEN}x"},
    "empty": {"Authorization": "Bearer "},
    "basic scheme": {"Authorization": f"Basic {API_TOKEN}"},
    "no scheme": {"Authorization": API_TOKEN},
    "another header": {"X-Api-Token": API_TOKEN},
    "cookie": {"Cookie": f"token={API_TOKEN}"},
}
QUERY_NAMES = ("token", "access_token", "api_key", "bearer")


def app_routes(app: FastAPI) -> list[tuple[str, str]]:
    """Every (method, path template) the app answers, included routers flattened. Fails on
    a kind of route it can't see into, rather than skipping it."""
    out: list[tuple[str, str]] = []
    for route in app.routes:
        if hasattr(route, "effective_route_contexts"):  # FastAPI's included routers
            pairs = [(ctx.path, ctx.original_route) for ctx in route.effective_route_contexts()]
        else:
            pairs = [(getattr(route, "path", None), route)]
        for path, inner in pairs:
            methods = getattr(inner, "methods", None)
            assert path and methods, f"cannot see into route {inner!r}"
            out += [(m, path) for m in sorted(methods) if m != "HEAD"]
    return sorted(set(out))


def _app(store: Store, token: str | None = API_TOKEN) -> FastAPI:
    return create_app(store, registry=CollectorRegistry(), token=token,
                      status=lambda: {"ready": True})


_bare = bare_store()
ROUTES = app_routes(_app(_bare))
_bare.close()
PROTECTED = [(m, p) for m, p in ROUTES if p not in OPEN_PATHS]


def _concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "1", path)


def _body(method: str) -> dict[str, Any] | None:
    # A valid body, so that with the token the answer is the route's own, not a 400.
    return {"route": "code", "duration": "1h", "reason": "security test"} \
        if method == "POST" else None


def test_the_route_table_is_what_the_document_and_the_docs_say(bare: Store) -> None:
    app = _app(bare)
    documented = {(m.upper(), p) for p, ops in app.openapi()["paths"].items() for m in ops}
    assert documented <= set(ROUTES), "the enumeration missed routes; fix app_routes()"
    assert len(PROTECTED) >= 8  # /api/v1/* and /metrics at least
    assert OPEN_PATHS == DOCUMENTED_OPEN
    assert {p for _, p in ROUTES} - {p for _, p in PROTECTED} == DOCUMENTED_OPEN


def test_a_route_added_later_is_protected_without_being_listed(bare: Store) -> None:
    app = _app(bare)
    for path in ("/status", "/debug/vars", "/internal/config", "/apix"):
        app.add_api_route(path, lambda: {"secret": "state"})
    client = TestClient(app)
    for path in ("/status", "/debug/vars", "/internal/config", "/apix", "/no-such-path"):
        assert client.get(path).status_code == 401, path
    assert client.get("/status", headers={"Authorization": f"Bearer {API_TOKEN}"}).json() == {
        "secret": "state"}


@pytest.mark.parametrize("headers", list(WRONG.values()), ids=list(WRONG))
@pytest.mark.parametrize(("method", "path"), PROTECTED, ids=[f"{m} {p}" for m, p in PROTECTED])
def test_every_protected_route_refuses_without_the_right_token(
    bare: Store, method: str, path: str, headers: dict[str, str]
) -> None:
    # On a database never migrated: a refusal that had touched it would be a 5xx, not a 401.
    client = TestClient(_app(bare))
    r = client.request(method, _concrete(path), headers=headers, json=_body(method))
    assert r.status_code == 401, r.text
    assert r.headers["www-authenticate"] == 'Bearer realm="specwatch"'
    assert r.json()["error"] in ("missing bearer token", "wrong bearer token")
    assert_no_secret([r.text, str(r.headers)], [API_TOKEN], "the 401")


@pytest.mark.parametrize(("method", "path"), PROTECTED, ids=[f"{m} {p}" for m, p in PROTECTED])
@pytest.mark.parametrize("name", QUERY_NAMES)
def test_a_token_in_the_query_string_opens_nothing(
    bare: Store, method: str, path: str, name: str
) -> None:
    client = TestClient(_app(bare))
    r = client.request(method, _concrete(path), params={name: API_TOKEN}, json=_body(method))
    assert r.status_code == 401, r.text


def test_with_the_token_every_route_answers_for_itself(store: Store) -> None:
    client = TestClient(_app(store))
    for scheme in ("Bearer", "bearer", "BEARER", "bEaReR"):
        for method, path in ROUTES:
            r = client.request(method, _concrete(path), json=_body(method),
                               headers={"Authorization": f"{scheme} {API_TOKEN}"})
            assert r.status_code != 401 and r.status_code < 500, (scheme, method, path, r.text)
    # With the header, a query-string copy is just an unknown parameter: refused, not echoed.
    r = client.get("/api/v1/ratios", params={"access_token": API_TOKEN},
                   headers={"Authorization": f"Bearer {API_TOKEN}"})
    assert r.status_code == 400 and "access_token" in r.json()["error"]
    assert_no_secret([r.text], [API_TOKEN], "a 400")


@pytest.mark.parametrize("path", sorted(DOCUMENTED_OPEN))
def test_open_paths_answer_without_a_token_and_never_show_it(bare: Store, path: str) -> None:
    r = TestClient(_app(bare)).get(path)
    assert r.status_code in (200, 503), r.text  # /readyz: 503 on this unmigrated database
    assert_no_secret([r.text, str(r.headers)], [API_TOKEN], path)


def test_without_a_configured_token_nothing_is_refused(bare: Store) -> None:
    # Loopback only (tests/security/test_listen.py): the same routes, no 401 anywhere.
    client = TestClient(_app(bare, token=None))
    for method, path in ROUTES:
        r = client.request(method, _concrete(path), json=_body(method))
        assert r.status_code != 401, (method, path)


def test_access_log_redacts_credentials_in_the_query() -> None:
    assert redact_query("/x?route=a&token=T&Api-Key=K&password=P&auth=A") == (
        "/x?route=a&token=***&Api-Key=***&password=***&auth=***")
    assert redact_query("/api/v1/ratios?route=code") == "/api/v1/ratios?route=code"


def test_the_token_never_reaches_a_log_even_with_the_access_log_on(store: Store) -> None:
    server = ApiServer(_app(store), "127.0.0.1", 0, access_log=True)
    with all_logs() as logs:
        server.start()
        try:
            with httpx.Client(base_url=server.url, timeout=10) as client:
                answers = [
                    client.get("/api/v1/ratios", headers={"Authorization": f"Bearer {API_TOKEN}"}),
                    client.get("/metrics", headers={"Authorization": f"Bearer {API_TOKEN}"}),
                    client.post("/api/v1/silences", json=_body("POST"),
                                headers={"Authorization": f"Bearer {API_TOKEN}"}),
                    client.get("/api/v1/ratios", headers={"Authorization": f"Bearer {API_TOKEN}x"}),
                    client.get("/api/v1/ratios", headers={"Authorization": f"Basic {API_TOKEN}"}),
                    client.get("/api/v1/ratios", params={"access_token": API_TOKEN}),
                    client.get("/metrics", params={"token": API_TOKEN},
                               headers={"Authorization": f"Bearer {API_TOKEN}"}),
                    client.get("/healthz", params={"api_key": API_TOKEN}),
                ]
        finally:
            server.stop()
    assert [a.status_code for a in answers] == [200, 200, 201, 401, 401, 401, 200, 200]
    access = [line for line in logs.lines if " uvicorn.access:" in line]
    assert len(access) == len(answers), "the access log was not on: this test proves nothing"
    assert any("access_token=***" in line for line in access)
    assert any(" uvicorn.asgi:" in line for line in logs.lines)  # its TRACE was on too
    server_side = [r for r in logs.records if not r.name.startswith(("httpx", "httpcore"))]
    assert_no_secret([logs.format(r) for r in server_side], [API_TOKEN], "the server's logs")
    assert_no_secret([a.text + str(a.headers) for a in answers], [API_TOKEN], "an answer")
    assert all("server" not in a.headers for a in answers)  # no "server: uvicorn"
