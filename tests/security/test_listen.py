"""Loopback by default: every command that serves HTTP listens on 127.0.0.1 unless told
otherwise, and a public address without ``SPECWATCH_API_TOKEN`` is refused, clearly, before
anything is opened. Where a socket is bound, the kernel's own table says on what."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from monitor.api.app import create_app
from monitor.api.exceptions import ApiConfigError
from monitor.api.server import ApiServer, is_loopback, parse_listen, require_token
from monitor.cli import build_parser
from monitor.store.store import Store
from tests.fixtures.process import free_port
from tests.helpers import wait_for
from tests.security import ROOT, listening_addresses, specwatch

PUBLIC = ["0.0.0.0", "::", "::ffff:0.0.0.0", "10.1.2.3", "192.0.2.7", "2001:db8::1",
          "api.internal", "localhost.example.com"]
LOOPBACK = ["127.0.0.1", "127.8.9.10", "::1", "localhost", "LocalHost.", "::ffff:127.0.0.1"]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECWATCH_")}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


@pytest.mark.parametrize(("value", "expected"), [
    ("8080", ("127.0.0.1", 8080)),
    (":9464", ("127.0.0.1", 9464)),
    (" 0 ", ("127.0.0.1", 0)),
    (":0", ("127.0.0.1", 0)),
    ("localhost:80", ("localhost", 80)),
    ("[::1]:80", ("::1", 80)),
    ("0.0.0.0:80", ("0.0.0.0", 80)),  # public only when spelled out
    ("[::]:80", ("::", 80)),
])
def test_a_bare_port_means_loopback(value: str, expected: tuple[str, int]) -> None:
    assert parse_listen(value) == expected


def test_every_http_command_defaults_to_loopback() -> None:
    parser = build_parser()
    assert parser.parse_args(["serve"]).http == ("127.0.0.1", 8080)  # no address at all
    assert parser.parse_args(["serve", "--http", "8081"]).http == ("127.0.0.1", 8081)
    assert parser.parse_args(["run", "--http", ":9464"]).http == ("127.0.0.1", 9464)
    assert parser.parse_args(["run"]).http is None  # the daemon serves nothing unless asked
    # scrape's own metrics: a port only, and the listener is pinned to loopback (see below).
    assert parser.parse_args(["scrape", "--metrics-port", "9100"]).metrics_port == 9100


@pytest.mark.parametrize("host", PUBLIC)
def test_public_addresses_need_the_token(host: str) -> None:
    assert not is_loopback(host)
    with pytest.raises(ApiConfigError) as e:
        require_token(host, None)
    message = str(e.value)
    assert f"on {host}" in message and "SPECWATCH_API_TOKEN" in message
    assert "127.0.0.1" in message  # and the way out
    require_token(host, "t0k3n-given")


@pytest.mark.parametrize("host", LOOPBACK)
def test_loopback_addresses_do_not(host: str) -> None:
    assert is_loopback(host)
    require_token(host, None)


@pytest.mark.parametrize(("command", "address", "shown"), [
    ("serve", "0.0.0.0:0", "0.0.0.0 (every interface)"),
    ("serve", "[::]:0", ":: (every interface)"),
    ("serve", "192.0.2.7:0", "192.0.2.7"),
    ("run", "0.0.0.0:0", "0.0.0.0 (every interface)"),
    ("run", "[::]:0", ":: (every interface)"),
])
def test_the_cli_refuses_a_public_address_without_a_token(
    command: str, address: str, shown: str, tmp_path: Path
) -> None:
    # No broker, no database: the refusal comes before either is opened.
    db = f"sqlite:///{tmp_path / 'never-created.db'}"
    proc = specwatch([command, "--http", address, "--db", db], env=_env(), timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (
        f"specwatch: refusing to serve the HTTP API on {shown} without a token: set "
        "SPECWATCH_API_TOKEN (clients send 'Authorization: Bearer <token>'), or listen on "
        "127.0.0.1")
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "never-created.db").exists()


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost"])
def test_loopback_servers_bind_loopback_only(bare: Store, host: str) -> None:
    server = ApiServer(create_app(bare, registry=CollectorRegistry()), host, 0)
    server.start()
    try:
        bound = listening_addresses(server.port)
        assert bound and all(is_loopback(a) for a in bound), bound
    finally:
        server.stop()


def test_serve_with_only_a_port_listens_on_loopback(migrated_url: str) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "monitor", "serve", "--http", str(port), "--db", migrated_url],
        env=_env(), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: listening_addresses(port) or proc.poll() is not None, timeout=60,
                 what=f"specwatch serve listening on {port}")
        assert proc.poll() is None
        assert listening_addresses(port) == {"127.0.0.1"}
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert f"specwatch API on http://127.0.0.1:{port}" in err and "; no token" in err


def test_scrape_metrics_listen_on_loopback_only(tmp_path: Path) -> None:
    port, dead = free_port(), free_port()  # nothing listens on `dead`: every scrape fails
    config = tmp_path / "scrape.yaml"
    config.write_text(
        "scrape:\n  targets:\n"
        f"    - url: http://127.0.0.1:{dead}/metrics\n"
        "      engine: vllm\n      route: code\n      target_model: m\n"
        "      target_revision: r1\n      target_tokenizer: t\n"
        "      num_speculative_tokens: 4\n      interval: 1s\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "monitor", "scrape", "--config", str(config), "--out",
         str(tmp_path / "events.jsonl"), "--state", str(tmp_path / "state.json"),
         "--metrics-port", str(port)],
        env=_env(), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: listening_addresses(port) or proc.poll() is not None, timeout=60,
                 what=f"specwatch scrape metrics on {port}")
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert listening_addresses(port) == {"127.0.0.1"}
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
