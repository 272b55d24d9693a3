"""``specwatch serve --http HOST:PORT``: the API alone, e.g. on a read replica."""

from __future__ import annotations

import argparse
import queue
import threading

import httpx
import pytest

from monitor.api.cli import cmd_serve, register
from monitor.api.exceptions import ApiConfigError
from monitor.cli import _config


def _parser() -> argparse.ArgumentParser:
    """The ``specwatch`` parser's shape, with only ``serve`` registered."""
    parser = argparse.ArgumentParser(prog="specwatch")
    sub = parser.add_subparsers(dest="command", required=True)

    def with_config(p: argparse.ArgumentParser) -> None:
        p.add_argument("--config")
        p.add_argument("--db")

    register(sub, with_config, _config)
    return parser


def test_serve_needs_a_host_it_can_read(capsys: pytest.CaptureFixture[str]) -> None:
    for value in (":", "127.0.0.1", "::1:80"):
        with pytest.raises(SystemExit) as e:
            _parser().parse_args(["serve", "--http", value])
        assert e.value.code == 2
        assert "--http" in capsys.readouterr().err
    # No address (or a bare port) is loopback: tests/security/test_listen.py
    assert _parser().parse_args(["serve"]).http == ("127.0.0.1", 8080)


def test_serve_refuses_every_interface_without_a_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPECWATCH_API_TOKEN", raising=False)
    args = _parser().parse_args(["serve", "--http", "0.0.0.0:0", "--db", "sqlite://"])
    with pytest.raises(ApiConfigError, match="SPECWATCH_API_TOKEN"):
        args.func(args)  # before opening the database or a socket


def test_serve_answers_until_stopped(migrated_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECWATCH_API_TOKEN", "t0k3n-for-the-replica")
    args = _parser().parse_args(["serve", "--http", "127.0.0.1:0", "--db", migrated_url])
    stop, urls = threading.Event(), queue.Queue[str]()
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(
        cmd_serve(args, _config(args), stop=stop, started=urls.put)))
    thread.start()
    try:
        url = urls.get(timeout=30)
        auth = {"Authorization": "Bearer t0k3n-for-the-replica"}
        with httpx.Client(base_url=url, timeout=10) as client:
            assert client.get("/readyz").json()["ready"] is True
            assert client.get("/api/v1/ratios").status_code == 401
            r = client.post("/api/v1/silences", headers=auth,
                            json={"route": "code", "duration": "1h", "reason": "replica"})
            assert r.status_code == 201
            assert [s["reason"] for s in client.get("/api/v1/silences", headers=auth).json()
                    ] == ["replica"]
            # Its own registry: the API's request metrics.
            metrics = client.get("/metrics", headers=auth).text
            assert 'endpoint="/api/v1/silences"' in metrics
    finally:
        stop.set()
        thread.join(30)
    assert result == [0]
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/healthz", timeout=5)


def test_serve_starts_on_an_unmigrated_replica_and_says_not_ready(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SPECWATCH_API_TOKEN", raising=False)
    args = _parser().parse_args(["serve", "--http", "127.0.0.1:0", "--db", db_url])
    stop, urls = threading.Event(), queue.Queue[str]()
    thread = threading.Thread(target=cmd_serve, args=(args, _config(args)),
                              kwargs={"stop": stop, "started": urls.put})
    thread.start()
    try:
        url = urls.get(timeout=30)
        r = httpx.get(f"{url}/readyz", timeout=10)
        assert r.status_code == 503 and r.json()["database"] == "not_migrated"
        assert httpx.get(f"{url}/healthz", timeout=10).status_code == 200
    finally:
        stop.set()
        thread.join(30)
