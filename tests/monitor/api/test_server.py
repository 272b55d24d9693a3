"""--http addresses, the token rule, and uvicorn in a thread on a real socket."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client import CollectorRegistry

from monitor.api.app import create_app
from monitor.api.exceptions import ApiConfigError
from monitor.api.server import ApiServer, is_loopback, parse_listen, require_token
from monitor.exceptions import SpecwatchError
from monitor.store.store import Store
from tests.monitor.api import bare_store


@pytest.mark.parametrize(("value", "expected"), [
    ("127.0.0.1:8080", ("127.0.0.1", 8080)),
    ("0.0.0.0:9100", ("0.0.0.0", 9100)),
    ("localhost:0", ("localhost", 0)),
    ("[::1]:8080", ("::1", 8080)),
    ("[::]:65535", ("::", 65535)),
    (" api.internal:443 ", ("api.internal", 443)),
])
def test_parse_listen(value: str, expected: tuple[str, int]) -> None:
    assert parse_listen(value) == expected


@pytest.mark.parametrize(("value", "says"), [
    (":", "has no host"),
    (":http", "has no host"),
    ("127.0.0.1", "want HOST:PORT"),
    ("127.0.0.1:", "not a number"),
    ("127.0.0.1:http", "not a number"),
    ("127.0.0.1:65536", "not a number"),
    ("127.0.0.1:-1", "not a number"),
    ("::1:8080", "in brackets"),
    ("[::1]8080", "[IPv6]:PORT"),
    ("[::1", "[IPv6]:PORT"),
    ("[not-v6]:80", "not an IPv6 address"),
])
def test_parse_listen_refuses_with_a_reason(value: str, says: str) -> None:
    with pytest.raises(ApiConfigError, match=None) as e:
        parse_listen(value)
    assert says in str(e.value)
    assert isinstance(e.value, SpecwatchError)  # the CLI prints it, exit 2


def test_is_loopback() -> None:
    for host in ("127.0.0.1", "127.5.6.7", "::1", "localhost", "LOCALHOST.", "::ffff:127.0.0.1"):
        assert is_loopback(host), host
    for host in ("0.0.0.0", "::", "10.0.0.5", "192.168.1.2", "fe80::1", "example.com",
                 "localhost.example.com", ""):
        assert not is_loopback(host), host


def test_require_token() -> None:
    require_token("127.0.0.1", None)
    require_token("::1", "")
    require_token("0.0.0.0", "t0k3n")
    for host in ("0.0.0.0", "::", "10.0.0.5", "api.internal"):
        for token in (None, ""):
            with pytest.raises(ApiConfigError, match="SPECWATCH_API_TOKEN"):
                require_token(host, token)


def test_api_server_starts_serves_and_stops(store: Store) -> None:
    server = ApiServer(create_app(store, registry=CollectorRegistry(), token="t0k3n"),
                       "127.0.0.1", 0)
    server.start()
    try:
        assert server.port != 0 and server.url == f"http://127.0.0.1:{server.port}"
        with httpx.Client(base_url=server.url, timeout=10) as client:
            assert client.get("/healthz").json() == {"status": "ok"}
            assert client.get("/readyz").status_code == 200
            assert client.get("/api/v1/silences").status_code == 401
            r = client.get("/api/v1/ratios", params={"format": "csv"},
                           headers={"Authorization": "Bearer t0k3n"})
            assert r.status_code == 200 and r.text.startswith("bucket_start,route,")
            assert "specwatch_api_requests_total" in client.get(
                "/metrics", headers={"Authorization": "Bearer t0k3n"}).text
        # The port is taken while it runs: a second server there is refused, clearly.
        with pytest.raises(ApiConfigError, match=f"cannot listen on 127.0.0.1:{server.port}"):
            ApiServer(create_app(store), "127.0.0.1", server.port).start()
    finally:
        server.stop()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{server.url}/healthz", timeout=5)
    server.stop()  # twice is harmless


def test_urls_bracket_ipv6() -> None:
    store = bare_store()
    try:
        app = create_app(store)
        assert ApiServer(app, "::1", 8080).url == "http://[::1]:8080"
        assert ApiServer(app, "localhost", 80).url == "http://localhost:80"
    finally:
        store.close()
