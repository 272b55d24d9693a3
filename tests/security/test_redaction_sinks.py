"""Sink credentials never leave the request that carries them: a Slack webhook path, a
PagerDuty routing key (and an egress proxy's password in its base URL), Alertmanager basic
auth in the URL, a webhook's ``?token=``. The sinks are built from the environment as the
daemon builds them and deliver through the real worker to local receivers that answer with
errors quoting the secrets back; then every log record (httpx and httpcore turned up to
DEBUG by name), every row of every table, the metrics exposition and every repr is searched.
"""

from __future__ import annotations

import base64
import logging
import random
import traceback

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from sqlalchemy import select

from alerts.delivery import DeliveryWorker
from alerts.http import QUIET_LOGGERS
from alerts.metrics import AlertMetrics
from alerts.sinks import build_sinks
from monitor.config import Config
from monitor.store.store import Store
from monitor.store.tables import metadata
from tests.alerts.receivers import PagerDutyReceiver, Receiver, SlackReceiver, WebhookReceiver
from tests.alerts.test_delivery import Clock, enqueue, item, note
from tests.security import all_logs, assert_no_secret

SLACK_TOKEN = "slackHOOK-sentinel-1b2c3d4e"
PD_KEY = "pdKEYsentinel0123456789abcdefABC"  # 32 characters, as PagerDuty requires
PD_PROXY_PASSWORD = "pdPROXY-sentinel-0c9d8e7f"
AM_PASSWORD = "amPASS-sentinel-7e6f5a4b"
WEBHOOK_TOKEN = "hookTOKEN-sentinel-9a8b7c6d"
SECRETS = [SLACK_TOKEN, PD_KEY, PD_PROXY_PASSWORD, AM_PASSWORD, WEBHOOK_TOKEN]
AM_BASIC = base64.b64encode(f"specwatch:{AM_PASSWORD}".encode()).decode()


def _dump(store: Store) -> list[str]:
    """Every row of every table, as text."""
    out = []
    with store.engine.connect() as conn:
        for table in metadata.sorted_tables:
            out += [f"{table.name}: {tuple(row)}" for row in conn.execute(select(table))]
    return out


def _drain(w: DeliveryWorker, name: str, clock: Clock, rounds: int = 40) -> None:
    for _ in range(rounds):
        wait = w.pump(name)
        if wait is None:
            return
        clock.advance(max(wait, 0.0) + 0.01)
    raise AssertionError(f"{name}: still pending after {rounds} rounds")


def _cue_echoes(slack: SlackReceiver, pd: PagerDutyReceiver, am: Receiver,
                hook: WebhookReceiver) -> None:
    """Errors that quote the credential back, as a misbehaving proxy or service might."""
    slack.respond(500, body=f"upstream failed for {slack.webhook_url}")
    slack.respond(429, headers={"Retry-After": "1"}, body=f"rate_limited {SLACK_TOKEN}")
    pd.respond(500, body={"status": "error", "message": f"key {PD_KEY} via {PD_PROXY_PASSWORD}"})
    pd.respond(400, body={"status": "invalid event", "errors": [f"bad routing_key {PD_KEY}"]})
    am.respond(503, body=f"proxy: upstream down (user specwatch:{AM_PASSWORD})")
    am.respond(401, body=f"unauthorized: Basic {AM_BASIC}")
    hook.respond(502, body=f"bad gateway for /hook?token={WEBHOOK_TOKEN}")
    hook.respond(400, body={"error": f"invalid token {WEBHOOK_TOKEN}"})


def test_sink_secrets_stay_in_the_request(store: Store) -> None:
    clock = Clock()
    with SlackReceiver(token_path=f"/services/T0SEC/B0SEC/{SLACK_TOKEN}") as slack, \
            PagerDutyReceiver() as pd, Receiver() as am, WebhookReceiver() as hook:
        host = lambda r: r.url.removeprefix("http://")  # noqa: E731
        env = {
            "SPECWATCH_SLACK_WEBHOOK_URL": slack.webhook_url,
            "SPECWATCH_PAGERDUTY_ROUTING_KEY": PD_KEY,
            "SPECWATCH_PAGERDUTY_URL": f"http://egress:{PD_PROXY_PASSWORD}@{host(pd)}",
            "SPECWATCH_ALERTMANAGER_URL": f"http://specwatch:{AM_PASSWORD}@{host(am)}",
            "SPECWATCH_WEBHOOK_URL": f"{hook.url}/hook?token={WEBHOOK_TOKEN}",
        }
        config = Config().alerting
        with all_logs() as logs:
            # Turned up by name, after the sinks module pinned them: the filter must hold.
            for name in QUIET_LOGGERS:
                logging.getLogger(name).setLevel(logging.DEBUG)
            sinks = build_sinks(config, env)
            registry = CollectorRegistry()
            metrics = AlertMetrics(registry, sinks)
            w = DeliveryWorker(store.alerting, sinks, config, metrics, holder="security:1",
                               clock=clock, rng=random.Random(3), pace=lambda s: None)
            _cue_echoes(slack, pd, am, hook)
            notes = [note(f"sec-{i}", item("acceptance_drop", f"route-{i}")) for i in range(3)]
            for name in ("slack", "pagerduty", "alertmanager", "webhook"):
                enqueue(store, name, *notes)
                _drain(w, name, clock)
            requests = [req for n in notes for s in ("slack", "pagerduty", "alertmanager",
                                                     "webhook")
                        for req in sinks[s].requests(n)]  # type: ignore[union-attr]
            shown = [repr(sinks), str(sinks), *(r.describe for r in requests)]
            w.stop()
        exposition = generate_latest(registry).decode()
        rows = _dump(store)
        seen_by_am = [r.headers.get("authorization") for r in am.requests]

    # The secrets were really in use...
    assert len(slack.messages) == 3 and len(hook.records) == 2
    assert any(r.body["routing_key"] == PD_KEY for r in pd.requests)
    assert seen_by_am and all(h == f"Basic {AM_BASIC}" for h in seen_by_am)
    assert all(f"token={WEBHOOK_TOKEN}" in r.path for r in hook.requests)
    # ...the failures were logged and stored, the outcomes counted...
    outbox = store.alerting.outbox()
    assert {r.state for r in outbox} >= {"delivered", "failed"}
    assert any(r.last_error for r in outbox)
    assert any("sink alertmanager is broken" in line for line in logs.lines)
    assert 'specwatch_notifications_total{outcome="retried",sink="webhook"}' in exposition
    # ...and no secret anywhere but the requests.
    assert_no_secret(logs.lines, SECRETS, "the logs")
    assert_no_secret(rows, SECRETS, "the database")
    assert_no_secret([exposition], SECRETS, "the metrics")
    assert_no_secret(shown, SECRETS, "a repr or describe")
    # httpx/httpcore log URLs and response headers below WARNING: none of that got through.
    assert not [r for r in logs.records if r.name in QUIET_LOGGERS and r.levelno < logging.WARNING]


def test_a_network_error_never_quotes_the_url(store: Store) -> None:
    clock = Clock()
    closed = SlackReceiver(token_path=f"/services/T0SEC/B0SEC/{SLACK_TOKEN}")
    closed.start().close()  # its URL now refuses connections
    env = {"SPECWATCH_SLACK_WEBHOOK_URL": closed.webhook_url,
           "SPECWATCH_WEBHOOK_URL": f"http://u:{WEBHOOK_TOKEN}@{closed.url[7:]}/h?token="
                                    f"{WEBHOOK_TOKEN}"}
    config = Config().alerting
    with all_logs() as logs:
        sinks = build_sinks(config, env)
        w = DeliveryWorker(store.alerting, sinks, config, AlertMetrics(CollectorRegistry(), sinks),
                           holder="security:2", clock=clock, rng=random.Random(5),
                           pace=lambda s: None)
        enqueue(store, "slack", note("net-1", item("acceptance_drop", "code")))
        enqueue(store, "webhook", note("net-1", item("acceptance_drop", "code")))
        for name in ("slack", "webhook"):
            assert w.pump(name) is not None  # retried later
        w.stop()
    errors = [r.last_error or "" for r in store.alerting.outbox()]
    assert len(errors) == 2 and all("no answer" in e for e in errors), errors
    assert_no_secret(logs.lines + errors + _dump(store), SECRETS, "a network error")


@pytest.mark.parametrize(("var", "value"), [
    ("SPECWATCH_SLACK_WEBHOOK_URL", f"ftp://hooks.slack.com/services/T/B/{SLACK_TOKEN}"),
    ("SPECWATCH_WEBHOOK_URL", f"https://h:port{WEBHOOK_TOKEN}/x"),
    ("SPECWATCH_ALERTMANAGER_URL", f"http://u:{AM_PASSWORD}@ bad host"),
    ("SPECWATCH_PAGERDUTY_ROUTING_KEY", f"{PD_KEY} two words"),
])
def test_a_bad_setting_is_refused_without_quoting_it(var: str, value: str) -> None:
    from alerts.sinks import SinkConfigError

    with pytest.raises(SinkConfigError) as e:
        build_sinks(Config().alerting, {var: value})
    # What a log's exc_info or an uncaught traceback would print (causes included).
    text = "".join(traceback.format_exception(e.value)) + repr(e.value)
    assert var in str(e.value)
    assert_no_secret([text], SECRETS, "a config error")

