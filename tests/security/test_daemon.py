"""The daemon with every secret set at once (database password, API token, every sink's
credential) and talked to over HTTP: nothing of them in what it prints, logs or serves.

Once as ``specwatch run`` (the real command and its logging setup, ``log_level: DEBUG``)
and once in-process with every logger, Kafka's, httpx's and SQLAlchemy's included, at its
most verbose. PostgreSQL-specific: the database password needs a server that takes one.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry

from monitor.app import Application
from monitor.broker import EmbeddedBroker
from monitor.config import load_config
from monitor.store.db import upgrade
from tests.alerts.receivers import PagerDutyReceiver, Receiver, SlackReceiver, WebhookReceiver
from tests.helpers import wait_for
from tests.monitor.test_daemon import daemon_config
from tests.security import (
    API_TOKEN,
    DB_PASSWORD,
    ROOT,
    all_logs,
    assert_no_secret,
    listening_addresses,
)
from tests.security.test_redaction_db import pg_url  # noqa: F401 - the fixture
from tests.security.test_redaction_sinks import (
    AM_PASSWORD,
    PD_KEY,
    PD_PROXY_PASSWORD,
    SLACK_TOKEN,
    WEBHOOK_TOKEN,
)

pytestmark = pytest.mark.postgres

SECRETS = [DB_PASSWORD, API_TOKEN, SLACK_TOKEN, PD_KEY, PD_PROXY_PASSWORD, AM_PASSWORD,
           WEBHOOK_TOKEN]
AUTH = {"Authorization": f"Bearer {API_TOKEN}"}


@pytest.fixture
def secret_env(pg_url: str) -> Iterator[dict[str, str]]:  # noqa: F811
    """The daemon's environment: the migrated database and every sink, all with secrets,
    the sinks at local receivers."""
    upgrade(pg_url)
    with SlackReceiver(token_path=f"/services/T0SEC/B0SEC/{SLACK_TOKEN}") as slack, \
            PagerDutyReceiver() as pd, Receiver() as am, WebhookReceiver() as hook:
        yield {
            "SPECWATCH_DB_URL": pg_url,
            "SPECWATCH_API_TOKEN": API_TOKEN,
            "SPECWATCH_SLACK_WEBHOOK_URL": slack.webhook_url,
            "SPECWATCH_PAGERDUTY_ROUTING_KEY": PD_KEY,
            "SPECWATCH_PAGERDUTY_URL": f"http://egress:{PD_PROXY_PASSWORD}@{pd.url[7:]}",
            "SPECWATCH_ALERTMANAGER_URL": f"http://specwatch:{AM_PASSWORD}@{am.url[7:]}",
            "SPECWATCH_WEBHOOK_URL": f"{hook.url}/hook?token={WEBHOOK_TOKEN}",
        }


def _talk_to(base: str) -> list[httpx.Response]:
    """What an operator and an attacker would send: the token right, wrong, in the URL."""
    with httpx.Client(base_url=base, timeout=10) as client:
        wait_for(lambda: client.get("/readyz").status_code == 200, timeout=120,
                 what="/readyz")
        return [
            client.get("/readyz"),
            client.get("/api/v1/ratios", headers=AUTH),
            client.get("/api/v1/routes", headers=AUTH),
            client.get("/metrics", headers=AUTH),
            client.get("/api/v1/episodes", headers={"Authorization": f"Bearer {API_TOKEN}0"}),
            client.get("/api/v1/ratios", params={"access_token": API_TOKEN}),
            client.post("/api/v1/silences", headers=AUTH,
                        json={"route": "code", "duration": "1h", "reason": "sec"}),
        ]


def _check(answers: list[httpx.Response]) -> None:
    assert [a.status_code for a in answers] == [200, 200, 200, 200, 401, 401, 201]
    assert_no_secret([a.text + str(a.headers) for a in answers], SECRETS, "an answer")


def test_specwatch_run_prints_no_secret(broker: EmbeddedBroker, tmp_path: Path,
                                        secret_env: dict[str, str]) -> None:
    config = daemon_config(tmp_path, broker, "sqlite:///not-this-one.db")  # the env's wins
    config.write_text(config.read_text() + "log_level: DEBUG\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECWATCH_")}
    log = tmp_path / "daemon.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "monitor", "run", "--config", str(config), "--http", "0"],
            env={**env, **secret_env, "PYTHONUNBUFFERED": "1"}, cwd=ROOT,
            stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        found = wait_for(
            lambda: re.search(r"HTTP API and /metrics on (http://127\.0\.0\.1:(\d+))",
                              log.read_text()) or proc.poll() is not None,
            timeout=120, what="the daemon's HTTP API")
        assert proc.poll() is None, log.read_text()[-3000:]
        base, port = found.group(1), int(found.group(2))
        assert listening_addresses(port) == {"127.0.0.1"}  # "--http 0": a port, so loopback
        answers = _talk_to(base)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    output = log.read_text()
    assert proc.returncode == 0, output[-3000:]
    _check(answers)
    startup = next(line for line in output.splitlines() if "specwatch consuming" in line)
    assert "into postgresql+psycopg://postgres:***@127.0.0.1" in startup
    assert "alerts to slack, pagerduty, alertmanager, webhook, log" in startup
    assert " DEBUG " in output  # it did say all it had to say
    assert_no_secret([output], SECRETS, "the daemon's output")


def test_the_daemon_at_full_verbosity_logs_no_secret(broker: EmbeddedBroker, tmp_path: Path,
                                                     secret_env: dict[str, str]) -> None:
    config = load_config(daemon_config(tmp_path, broker, "sqlite:///x.db"), env=secret_env)
    with all_logs() as logs:
        app = Application(config, registry=CollectorRegistry(), env=secret_env,
                          http=("127.0.0.1", 0))
        runner = threading.Thread(target=app.run)
        runner.start()
        try:
            wait_for(lambda: app.api is not None and app.api.port, timeout=120,
                     what="the API")
            assert app.api is not None
            answers = _talk_to(app.api.url)
            shown = [repr(app.store), repr(app.sinks), repr(app.config), str(app.config)]
        finally:
            app.stop()
            runner.join(60)
    assert not runner.is_alive()
    _check(answers)
    names = {r.name.split(".")[0] for r in logs.records}
    assert {"kafka", "sqlalchemy", "monitor"} <= names, names  # all of them were talking
    assert_no_secret(shown, SECRETS, "a repr")
    assert_no_secret(logs.lines, SECRETS, "the logs")
