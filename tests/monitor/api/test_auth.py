"""Bearer token on /api/... and /metrics; health open; the token never shown."""

from __future__ import annotations

import hashlib
import logging

import pytest
from prometheus_client import CollectorRegistry

from monitor.api.app import create_app
from monitor.api.auth import bearer_ok, token_from_env
from monitor.api.exceptions import ApiConfigError
from monitor.store.store import Store
from tests.monitor.api import TestClient

TOKEN = "s3cret-Token_0123456789abcdef"


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_the_token_opens_the_api_and_metrics(store: Store) -> None:
    client = TestClient(create_app(store, registry=CollectorRegistry(), token=TOKEN))
    for path in ("/api/v1/ratios", "/api/v1/silences", "/metrics"):
        assert client.get(path, headers=_auth(TOKEN)).status_code == 200, path
    assert client.get("/api/v1/ratios", headers={"authorization": f"bearer {TOKEN}"}
                      ).status_code == 200  # the scheme is case-insensitive
    r = client.post("/api/v1/silences", headers=_auth(TOKEN),
                    json={"route": "code", "duration": "1h", "reason": "deploy"})
    assert r.status_code == 201
    assert client.delete(f"/api/v1/silences/{r.json()['id']}",
                         headers=_auth(TOKEN)).status_code == 204


UNAUTHORIZED = [
    ("no header", {}),
    ("wrong token", _auth("s3cret-Token_0123456789abcdeX")),
    ("prefix of it", _auth(TOKEN[:-1])),
    ("longer", _auth(TOKEN + "0")),
    ("empty", {"Authorization": "Bearer "}),
    ("basic", {"Authorization": f"Basic {TOKEN}"}),
    ("bare token", {"Authorization": TOKEN}),
]


@pytest.mark.parametrize("headers", [h for _, h in UNAUTHORIZED],
                         ids=[name for name, _ in UNAUTHORIZED])
def test_everything_protected_is_refused_without_it(
    bare: Store, headers: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    client = TestClient(create_app(bare, registry=CollectorRegistry(), token=TOKEN))
    requests = [
        ("GET", "/api/v1/ratios?token=" + TOKEN, None),
        ("GET", "/api/v1/routes", None),
        ("GET", "/api/v1/alerts", None),
        ("GET", "/api/v1/episodes", None),
        ("GET", "/api/v1/latency?granularity=bogus", None),  # 401 before the 400
        ("GET", "/api/v1/no-such-thing", None),  # and before the 404
        ("POST", "/api/v1/silences", "{not json"),
        ("DELETE", "/api/v1/silences/1", None),
        ("GET", "/metrics", None),
        ("GET", "/api", None),
    ]
    for method, path, body in requests:
        r = client.request(method, path, headers=headers, content=body)
        assert r.status_code == 401, (method, path, r.text)
        assert r.headers["www-authenticate"].startswith("Bearer")
        assert r.json()["error"] in ("missing bearer token", "wrong bearer token")
        assert TOKEN not in r.text and TOKEN not in str(r.headers)
    # The test client logs the URL it asked for (with ?token=); the server logs nothing of it.
    server_logs = [r.getMessage() for r in caplog.records if not r.name.startswith("httpx")]
    assert not any(TOKEN in line for line in server_logs)


def test_probes_and_the_document_stay_open(bare: Store) -> None:
    client = TestClient(create_app(bare, registry=CollectorRegistry(), token=TOKEN))
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 503  # open, and honest: never migrated
    doc = client.get("/openapi.json")
    assert doc.status_code == 200 and TOKEN not in doc.text
    spec = doc.json()
    assert spec["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    assert spec["paths"]["/api/v1/ratios"]["get"]["security"] == [{"bearer": []}]
    assert spec["paths"]["/metrics"]["get"]["security"] == [{"bearer": []}]
    assert "security" not in spec["paths"]["/healthz"]["get"]
    assert "401" not in spec["paths"]["/healthz"]["get"]["responses"]
    assert client.get("/docs").status_code == 200


def test_without_a_token_nothing_asks_for_one(bare: Store) -> None:
    spec = TestClient(create_app(bare)).get("/openapi.json").json()
    assert "securitySchemes" not in spec.get("components", {})
    assert all("401" not in op["responses"] for ops in spec["paths"].values()
               for op in ops.values())
    r = TestClient(create_app(bare)).get("/api/v1/ratios", params={"granularity": "week"})
    assert r.status_code == 400  # straight to the parameters


def test_bearer_ok() -> None:
    digest = hashlib.sha256(b"abc").digest()
    assert bearer_ok(b"Bearer abc", digest)
    assert bearer_ok(b"BEARER   abc ", digest)
    for header in (None, b"", b"Bearer", b"Bearer abd", b"Bearer abcd", b"Token abc", b"abc"):
        assert not bearer_ok(header, digest), header


def test_token_from_env() -> None:
    assert token_from_env({}) is None
    assert token_from_env({"SPECWATCH_API_TOKEN": "   "}) is None
    assert token_from_env({"SPECWATCH_API_TOKEN": " t0k3n\n"}) == "t0k3n"
    for bad in ("two words", "caf\u00e9", "tab\there"):
        with pytest.raises(ApiConfigError, match="SPECWATCH_API_TOKEN") as e:
            token_from_env({"SPECWATCH_API_TOKEN": bad})
        assert bad not in str(e.value)  # not even a wrong token is echoed
