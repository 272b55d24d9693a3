"""The database password never shows: not in ``repr``/``str`` of the store or the config, not
in logs at any level (SQLAlchemy's engine and pool at DEBUG included), not in the errors of
a connection that fails, not in ``specwatch db``/``serve`` output, not in the API's answers.

PostgreSQL-specific: a SQLite URL has no password. The server here trusts local connections,
so a URL with a password connects and the password travels through every code path.
"""

from __future__ import annotations

import os
import subprocess
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy.engine import make_url

from monitor.api.app import create_app
from monitor.config import load_config
from monitor.store.checkpoint import Checkpoint
from monitor.store.db import redact_url, upgrade
from monitor.store.store import Store
from tests.fixtures.db import _pg_database
from tests.fixtures.process import free_port
from tests.helpers import wait_for
from tests.security import (
    DB_PASSWORD,
    ROOT,
    TestClient,
    all_logs,
    assert_no_secret,
    listening_addresses,
    specwatch,
)

pytestmark = pytest.mark.postgres

UNREACHABLE = f"postgresql+psycopg://specwatch:{DB_PASSWORD}@127.0.0.1:1/nowhere"


def _with_password(url: str) -> str:
    return make_url(url).set(password=DB_PASSWORD).render_as_string(hide_password=False)


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh, un-migrated PostgreSQL database, its URL carrying the sentinel password."""
    for url in _pg_database():
        yield _with_password(url)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECWATCH_")}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


def _failure(url: str, **kwargs: bool) -> str:
    """The full text of what opening ``url`` raises: messages, causes, tracebacks."""
    with pytest.raises(Exception) as e:  # noqa: PT011 - any failure: its text is the point
        Store(url, **kwargs).close()
    return "".join(traceback.format_exception(e.value))


@pytest.mark.parametrize("url", [
    f"postgresql+psycopg://u:{DB_PASSWORD}@h/db",
    f"postgresql://u:{DB_PASSWORD}@h:5432,h2:5433/db?sslmode=require",
    f"postgresql+psycopg://u:{DB_PASSWORD}@[::1]:5432/db",
    f"postgresql://u:{DB_PASSWORD[:6]}@{DB_PASSWORD[6:]}@h/db",  # an unencoded '@'
    f"postgresql://u:{DB_PASSWORD[:6]}%40{DB_PASSWORD[6:]}@h/db",
    f"postgresql://u:{DB_PASSWORD}:more@h/db",
    f"postgresql://u@h/db?password={DB_PASSWORD}&sslmode=require",
    f"postgresql://u@h/db?sslpassword={DB_PASSWORD}",
    f"postgresql://u:{DB_PASSWORD}@h:notaport/db",
    f"u:{DB_PASSWORD}@h/db",
])
def test_redact_url_hides_every_form_of_the_password(url: str) -> None:
    shown = redact_url(url)
    assert "***" in shown
    for part in (DB_PASSWORD, DB_PASSWORD[:6], DB_PASSWORD[6:]):
        assert part not in shown, shown


def test_store_config_and_logs_at_debug_never_show_it(pg_url: str) -> None:
    config = load_config(None, env={"SPECWATCH_DB_URL": pg_url})
    assert config.store.url == pg_url  # the real value is there to be used...
    with all_logs() as logs:
        upgrade(pg_url)
        store = Store(config.store.url)
        try:
            store.commit(Checkpoint("security", outbox=[]))
            store.ratios(granularity="hour")
            shown = [repr(store), str(store), store.url, repr(store.engine),
                     repr(config), str(config), repr(config.store), str(config.store)]
        finally:
            store.close()
    assert any(r.name.startswith("sqlalchemy.engine") for r in logs.records)  # SQL at DEBUG
    assert any(r.name.startswith("sqlalchemy.pool") for r in logs.records)
    assert "postgres:***@127.0.0.1" in repr(store)
    assert_no_secret(shown, [DB_PASSWORD], "a repr")  # ...and shown nowhere
    assert_no_secret(logs.lines, [DB_PASSWORD], "the logs")


@pytest.mark.parametrize("url", [
    UNREACHABLE,
    f"postgresql+psycopg://postgres:{DB_PASSWORD}@127.0.0.1:5432/no_such_database_here",
    f"postgresql+psycopg://no_such_role:{DB_PASSWORD}@127.0.0.1:5432/test",
    f"postgresql+psycopg://u:{DB_PASSWORD}@127.0.0.1:5432/db?sslmode=bogus",
    f"postgresql+psycopg://u:{DB_PASSWORD}@127.0.0.1:notaport/db",
    f"postgresql+nosuchdriver://u:{DB_PASSWORD}@127.0.0.1/db",
    f"u:{DB_PASSWORD}@127.0.0.1/db",
])
def test_failed_connections_never_quote_it(url: str) -> None:
    with all_logs() as logs:
        text = _failure(url)
    assert "Error" in text  # it failed, with a message to search
    assert_no_secret([text], [DB_PASSWORD], "the exception")
    assert_no_secret(logs.lines, [DB_PASSWORD], "the logs")


def test_the_not_migrated_refusal_names_the_fix_without_it(pg_url: str) -> None:
    text = _failure(pg_url)
    assert "specwatch db upgrade --db postgresql+psycopg://postgres:***@" in text
    assert_no_secret([text], [DB_PASSWORD], "the refusal")


def test_specwatch_db_shows_the_url_redacted(pg_url: str) -> None:
    for command in ("upgrade", "current"):
        proc = specwatch(["db", command, "--db", pg_url], env=_env())
        assert proc.returncode == 0, proc.stderr
        assert "postgres:***@127.0.0.1" in proc.stdout
        assert_no_secret([proc.stdout, proc.stderr], [DB_PASSWORD], f"specwatch db {command}")
    # From the environment too, and when the database is not there at all.
    proc = specwatch(["db", "current"], env=_env(SPECWATCH_DB_URL=pg_url))
    assert proc.returncode == 0 and "postgres:***@" in proc.stdout
    for args in (["db", "current", "--db", UNREACHABLE], ["ratios", "--db", UNREACHABLE]):
        proc = specwatch(args, env=_env())
        assert proc.returncode != 0
        assert "Connection refused" in proc.stderr  # the cause is told...
        assert_no_secret([proc.stdout, proc.stderr], [DB_PASSWORD], " ".join(args))


def test_specwatch_serve_shows_the_url_redacted(pg_url: str, tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "specwatch.yaml"
    config.write_text("log_level: DEBUG\n")  # everything it has to say
    proc = subprocess.Popen(
        [sys.executable, "-m", "monitor", "serve", "--http", str(port), "--config", str(config),
         "--db", pg_url], env=_env(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    try:
        wait_for(lambda: listening_addresses(port) or proc.poll() is not None, timeout=60,
                 what="specwatch serve")
        body = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=10).text
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=30)
    assert '"not_migrated"' in body
    assert f"reading {redact_url(pg_url)}" in err and "/readyz answers 503" in err
    assert_no_secret([out, err, body], [DB_PASSWORD], "specwatch serve")


def test_the_api_never_answers_with_it(pg_url: str) -> None:
    upgrade(pg_url)
    for url, ready in ((pg_url, 200), (UNREACHABLE, 503)):
        store = Store(url, require_migrated=False)
        try:
            client = TestClient(create_app(store, registry=CollectorRegistry()))
            with all_logs() as logs:
                answers = [client.get("/readyz"), client.get("/healthz"),
                           client.get("/api/v1/ratios"), client.get("/api/v1/episodes"),
                           client.get("/api/v1/routes"), client.get("/metrics"),
                           client.get("/openapi.json"),
                           client.post("/api/v1/silences", json={
                               "route": "code", "duration": "1h", "reason": "x"})]
        finally:
            store.close()
        assert answers[0].status_code == ready
        if ready == 503:
            assert answers[0].json()["reason"].startswith("database unreachable")
            assert answers[2].status_code == 503
            assert answers[2].json()["error"] == "database unavailable"
        assert_no_secret([a.text + str(a.headers) for a in answers], [DB_PASSWORD],
                         "an answer")
        assert_no_secret(logs.lines, [DB_PASSWORD], "the logs")
