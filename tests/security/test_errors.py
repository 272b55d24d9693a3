"""What a client learns when things go wrong: a 500 that says nothing of the code, a 503 for
an unreachable database, and a 413 for a body past the cap, read before the app buffers it.
All against the real server (uvicorn on a loopback socket), as ``run``/``serve`` start it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry

from monitor.api.app import create_app
from monitor.api.limits import MAX_BODY_BYTES
from monitor.api.server import ApiServer
from monitor.store.store import Store
from tests.helpers import wait_for
from tests.security import API_TOKEN, all_logs, assert_no_secret

AUTH = {"Authorization": f"Bearer {API_TOKEN}"}
SILENCE = b'{"route": "code", "duration": "1h", "reason": "limits"}'
INTERNAL = "internal-sentinel-3e1f"  # in an exception's message: the client must not see it


@pytest.fixture
def served(store: Store) -> Iterator[tuple[Store, str]]:
    server = ApiServer(create_app(store, registry=CollectorRegistry(), token=API_TOKEN),
                       "127.0.0.1", 0)
    server.start()
    try:
        yield store, server.url
    finally:
        server.stop()


def _no_internals(r: httpx.Response) -> None:
    assert r.headers["content-type"] == "application/json"
    for word in ("Traceback", 'File "', ".py", INTERNAL, "RuntimeError", "sqlalchemy"):
        assert word not in r.text, (word, r.text)


def test_an_unexpected_error_is_a_bare_500(served: tuple[Store, str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    store, url = served

    def broken(**kwargs: object) -> None:
        raise RuntimeError(f"{INTERNAL}: invariant violated in /srv/specwatch/secret.py")

    monkeypatch.setattr(store, "ratios", broken)
    with all_logs() as logs:
        r = httpx.get(f"{url}/api/v1/ratios", headers=AUTH, timeout=10)
        assert r.status_code == 500
        assert r.json() == {"error": "internal error", "detail": None}
        _no_internals(r)
        # The operator still gets the whole story, in the log (written after the answer).
        wait_for(lambda: any(INTERNAL in line and "Traceback" in line for line in logs.lines),
                 timeout=30, what="the traceback in the server's log")
    assert httpx.get(f"{url}/healthz", timeout=10).status_code == 200  # and it keeps serving


def test_an_unreachable_database_is_a_503(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir" / "x.db"
    store = Store(f"sqlite:///{missing}", require_migrated=False)
    server = ApiServer(create_app(store), "127.0.0.1", 0)
    server.start()
    try:
        r = httpx.get(f"{server.url}/api/v1/ratios", timeout=10)
        ready = httpx.get(f"{server.url}/readyz", timeout=10)
    finally:
        server.stop()
        store.close()
    assert r.status_code == 503
    assert r.json()["error"] == "database unavailable"
    assert set(r.json()["detail"] or {}) <= {"type"}  # an exception class name at most
    assert ready.status_code == 503 and ready.json()["database"] == "unreachable"
    for answer in (r, ready):
        _no_internals(answer)
        assert str(tmp_path) not in answer.text  # not even the file's path


def _silences(store: Store) -> int:
    return len(store.alerting.silences())


def test_bodies_past_the_cap_are_refused_before_they_are_read(
    served: tuple[Store, str]
) -> None:
    store, url = served
    big = SILENCE[:-1] + b', "pad": "' + b"x" * (4 * MAX_BODY_BYTES) + b'"}'

    def chunks() -> Iterator[bytes]:
        for i in range(0, len(big), 8192):
            yield big[i:i + 8192]

    with httpx.Client(base_url=url, timeout=30, headers=AUTH) as client:
        declared = client.post("/api/v1/silences", content=big,
                               headers={"Content-Type": "application/json"})
        streamed = client.post("/api/v1/silences", content=chunks(),
                               headers={"Content-Type": "application/json"})
        unauthenticated = httpx.post(f"{url}/api/v1/silences", content=big, timeout=30)
        # The cap itself is allowed: JSON whitespace pads a valid silence to exactly it.
        at_cap = client.post("/api/v1/silences", content=SILENCE + b" " * (
            MAX_BODY_BYTES - len(SILENCE)), headers={"Content-Type": "application/json"})
        still_serving = client.get("/api/v1/silences")
    assert "content-length" in {k.lower() for k in declared.request.headers}
    assert "transfer-encoding" in {k.lower() for k in streamed.request.headers}
    for r in (declared, streamed, unauthenticated):
        assert r.status_code == 413, r.text
        assert r.json() == {"error": "request body too large",
                            "detail": f"at most {MAX_BODY_BYTES} bytes are accepted"}
    assert at_cap.status_code == 201, at_cap.text
    assert still_serving.status_code == 200 and len(still_serving.json()) == 1
    assert _silences(store) == 1  # only the one at the cap


def test_oversized_headers_are_refused_and_the_server_lives_on(
    served: tuple[Store, str]
) -> None:
    _, url = served
    with all_logs() as logs:
        try:
            r = httpx.get(f"{url}/healthz", headers={**AUTH, "X-Big": "y" * 1_000_000},
                          timeout=30)
        except httpx.TransportError:
            pass  # refused mid-upload: h11 stops buffering an incomplete head past 16 KiB
        else:
            assert 400 <= r.status_code < 500 and "Traceback" not in r.text
    assert_no_secret(logs.lines, [API_TOKEN], "the logs")
    assert httpx.get(f"{url}/healthz", timeout=10).status_code == 200


def test_debug_mode_is_off(store: Store) -> None:
    # FastAPI/Starlette's debug mode answers 500s with an HTML traceback.
    assert create_app(store).debug is False
