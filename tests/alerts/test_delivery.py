"""The outbox worker against local receivers and both databases: order, pacing, retries,
Retry-After, permanent and broken sinks, partial progress, leases, secrets.

The worker's clock is injected, so backoff and Retry-After are checked by moving the clock,
never by waiting.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import CollectorRegistry

from alerts.delivery import BROKEN_RECHECK_S, DeliveryWorker
from alerts.metrics import AlertMetrics
from alerts.notification import AlertItem, Notification, episode_id
from alerts.sinks.base import Outcome
from alerts.sinks.pagerduty import PagerDutySink
from alerts.sinks.slack import SlackSink
from alerts.sinks.webhook import WebhookSink
from monitor.alert_record import AlertRecord
from monitor.config import AlertingConfig, Config, PagerDutyConfig, SlackConfig
from monitor.store.checkpoint import Checkpoint
from monitor.store.store import Store
from tests.alerts.receivers import PagerDutyReceiver, SlackReceiver, WebhookReceiver

T0 = datetime(2026, 11, 2, 14, 0, tzinfo=UTC)
PD_KEY = "R0UT1NGKEYR0UT1NGKEYR0UT1NGKEY42"  # 32 characters, as PagerDuty requires


class Clock:
    """Starts a second after the wall clock: rows are stamped with the wall clock when the
    checkpoint writes them, and must be due at once."""

    def __init__(self) -> None:
        self.t = time.time() + 1.0

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


def item(rule: str, route: str, state: str = "firing", minute: int = 0,
         severity: str = "warning") -> AlertItem:
    at = T0 + timedelta(minutes=minute)
    rec = AlertRecord(rule, state, at, severity, {"route": route}, f"{route}: {rule} {state}")
    return AlertItem(rec, state, episode_id(rec.fingerprint, T0), T0)  # type: ignore[arg-type]


def note(key: str, *items: AlertItem) -> Notification:
    return Notification(key, {"route": items[0].labels["route"]}, items[0].record.at, items)


def enqueue(store: Store, sink: str, *notes: Notification) -> None:
    store.commit(Checkpoint("test", outbox=[(sink, n.key, n.to_json()) for n in notes]))


def worker(store: Store, sinks: dict, clock: Clock, *, config: AlertingConfig | None = None,
           paced: list[float] | None = None, holder: str = "test:1") -> DeliveryWorker:
    config = config or Config().alerting
    return DeliveryWorker(store.alerting, sinks, config, AlertMetrics(CollectorRegistry()),
                          holder=holder, clock=clock, rng=random.Random(7),
                          pace=(paced.append if paced is not None else None))


def count(w: DeliveryWorker, sink: str, outcome: str) -> float:
    value = w.metrics.registry.get_sample_value(
        "specwatch_notifications_total", {"sink": sink, "outcome": outcome})
    return value or 0.0


def test_slack_in_order_paced_one_per_second(store: Store) -> None:
    clock, paced = Clock(), []
    with SlackReceiver() as slack:
        sink = SlackSink(slack.webhook_url, SlackConfig())
        w = worker(store, {"slack": sink}, clock, paced=paced)
        notes = [note(f"g-{i}", item("acceptance_drop", f"route-{i}")) for i in range(4)]
        enqueue(store, "slack", *notes)
        assert w.pump("slack") is None
        assert slack.violations == []
        texts = [m["text"] for m in slack.messages]
        assert [next(r for r in (f"route-{i}" for i in range(4)) if r in t) for t in texts] == [
            "route-0", "route-1", "route-2", "route-3"]
        # The clock stands still, so each gap after the first is waited out in full.
        assert paced == [1.0, 1.0, 1.0]
    assert count(w, "slack", "delivered") == 4


def test_slack_429_waits_for_retry_after_then_delivers(store: Store) -> None:
    clock = Clock()
    with SlackReceiver() as slack:
        slack.respond(429, headers={"Retry-After": "7"}, body=b"rate_limited")
        w = worker(store, {"slack": SlackSink(slack.webhook_url, SlackConfig())}, clock,
                   paced=[])
        enqueue(store, "slack", note("g-1", item("below_breakeven", "code")),
                note("g-2", item("below_breakeven", "chat")))
        wait = w.pump("slack")
        assert wait == pytest.approx(7.0, abs=1e-3)
        assert len(slack.requests) == 1 and slack.messages == []
        (row, _) = store.alerting.head("slack")
        assert row.attempts == 1 and "429" in (row.last_error or "")
        clock.advance(6.9)
        rest = w.pump("slack")
        assert rest == pytest.approx(0.1, abs=1e-3)  # not yet: nothing sent
        assert len(slack.requests) == 1
        clock.advance(rest)
        assert w.pump("slack") is None
        assert len(slack.messages) == 2 and "code" in slack.messages[0]["text"]
    assert (count(w, "slack", "retried"), count(w, "slack", "delivered")) == (1, 2)


def test_500_and_network_errors_back_off_exponentially_with_jitter(store: Store) -> None:
    clock = Clock()
    config = Config.model_validate({"alerting": {"delivery": {
        "backoff_initial": "2s", "backoff_max": "30s"}}}).alerting
    with SlackReceiver() as slack:
        slack.respond(500, body=b"rollup_error", times=3)
        slack.respond(0)  # the connection drops: no HTTP answer at all
        slack.respond(500, body=b"rollup_error", times=2)
        w = worker(store, {"slack": SlackSink(slack.webhook_url, SlackConfig())}, clock,
                   config=config, paced=[])
        enqueue(store, "slack", note("g-1", item("throughput_drop", "code")))
        waits = []
        while (wait := w.pump("slack")) is not None:
            waits.append(wait)
            clock.advance(wait)
        steps = [2, 4, 8, 16, 30, 30]
        assert len(waits) == len(steps)
        for wait, step in zip(waits, steps, strict=True):
            assert step / 2 <= wait <= step
        assert len(set(waits)) == len(waits)  # jittered, not in lockstep
        assert len(slack.messages) == 1
    assert count(w, "slack", "retried") == 6


def test_400_fails_the_row_and_the_queue_moves_on(store: Store, caplog) -> None:
    clock = Clock()
    with SlackReceiver() as slack:
        slack.respond(400, body=b"invalid_payload")
        w = worker(store, {"slack": SlackSink(slack.webhook_url, SlackConfig())}, clock,
                   paced=[])
        enqueue(store, "slack", note("g-1", item("acceptance_drop", "a")),
                note("g-2", item("acceptance_drop", "b")))
        with caplog.at_level(logging.ERROR):
            assert w.pump("slack") is None
        assert len(slack.messages) == 1 and "b" in slack.messages[0]["text"]
    states = {r.key: (r.state, r.last_error) for r in store.alerting.outbox()}
    assert states["g-1"][0] == "failed" and "invalid_payload" in states["g-1"][1]
    assert states["g-2"] == ("delivered", None)
    assert count(w, "slack", "failed") == 1
    assert "refused for good" in caplog.text


def test_broken_webhook_keeps_the_queue_and_recovers(store: Store, caplog) -> None:
    clock = Clock()
    with SlackReceiver() as slack:
        slack.respond(404, body=b"no_service")
        w = worker(store, {"slack": SlackSink(slack.webhook_url, SlackConfig())}, clock,
                   paced=[])
        enqueue(store, "slack", note("g-1", item("acceptance_drop", "a")),
                note("g-2", item("acceptance_drop", "b")))
        with caplog.at_level(logging.ERROR):
            wait = w.pump("slack")
        assert wait == pytest.approx(BROKEN_RECHECK_S, abs=1e-3)
        gauge = w.metrics.registry.get_sample_value("specwatch_sink_broken", {"sink": "slack"})
        assert gauge == 1.0
        assert "sink slack is broken" in caplog.text and "no_service" in caplog.text
        assert [r.state for r in store.alerting.outbox()] == ["pending", "pending"]
        clock.advance(BROKEN_RECHECK_S)
        assert w.pump("slack") is None  # fixed (the receiver answers ok again)
        assert len(slack.messages) == 2
        gauge = w.metrics.registry.get_sample_value("specwatch_sink_broken", {"sink": "slack"})
        assert gauge == 0.0


def test_partial_progress_is_kept_so_a_retry_sends_only_the_rest(store: Store) -> None:
    clock = Clock()
    with PagerDutyReceiver() as pd:
        sink = PagerDutySink(PD_KEY, PagerDutyConfig(min_interval=0), base_url=pd.url)
        w = worker(store, {"pagerduty": sink}, clock)
        n = note("g-1", item("acceptance_drop", "code"), item("throughput_drop", "code"),
                 item("below_breakeven", "code"))
        enqueue(store, "pagerduty", n)
        pd.respond(202, body={"status": "success"})  # the first goes through (cued: not kept)
        pd.respond(503)
        wait = w.pump("pagerduty")
        assert wait is not None
        (row,) = store.alerting.head("pagerduty")
        assert row.progress == 1
        clock.advance(wait)
        assert w.pump("pagerduty") is None
        # The cued 202 did not open an incident, so only the two resent triggers did.
        assert [i.summary.split(": ")[1] for i in pd.incidents] == [
            "throughput_drop firing", "below_breakeven firing"]
        assert len(pd.requests) == 4 and pd.violations == []


def test_one_holder_delivers_a_sink_at_a_time(store: Store) -> None:
    clock = Clock()
    with SlackReceiver() as slack:
        sink = SlackSink(slack.webhook_url, SlackConfig(min_interval=0))
        a = worker(store, {"slack": sink}, clock, holder="host-a:1")
        b = worker(store, {"slack": sink}, clock, holder="host-b:2")
        enqueue(store, "slack", note("g-1", item("acceptance_drop", "a")))
        assert a.pump("slack") is None
        enqueue(store, "slack", note("g-2", item("acceptance_drop", "b")))
        assert b.pump("slack") == pytest.approx(15.0, abs=1e-3)  # half the lease: try again then
        assert len(slack.messages) == 1
        clock.advance(31)  # a's lease lapsed (a died)
        assert b.pump("slack") is None
        assert len(slack.messages) == 2


def test_given_up_after_the_limit(store: Store) -> None:
    clock = Clock()
    config = Config.model_validate({"alerting": {"delivery": {"give_up_after": "1h"}}}).alerting
    with SlackReceiver() as slack:
        slack.respond(500, times=1000)
        w = worker(store, {"slack": SlackSink(slack.webhook_url, SlackConfig())}, clock,
                   config=config, paced=[])
        enqueue(store, "slack", note("g-1", item("acceptance_drop", "a")))
        start = clock()
        while (wait := w.pump("slack")) is not None:
            clock.advance(wait)
    (row,) = store.alerting.outbox()
    assert row.state == "failed" and clock() - start >= 3600 - 1
    assert count(w, "slack", "given_up") == 1


def test_secrets_stay_out_of_logs_and_the_outbox(store: Store, caplog) -> None:
    clock = Clock()
    with SlackReceiver() as slack, PagerDutyReceiver() as pd:
        slack.respond(500, body=slack.webhook_url.encode())  # a body that echoes the URL
        pd.respond(400, body={"status": "invalid event", "errors": [f"bad key {PD_KEY}"]})
        sinks = {"slack": SlackSink(slack.webhook_url, SlackConfig()),
                 "pagerduty": PagerDutySink(PD_KEY, PagerDutyConfig(), base_url=pd.url)}
        w = worker(store, sinks, clock, paced=[])
        n = note("g-1", item("acceptance_drop", "a"))
        enqueue(store, "slack", n)
        enqueue(store, "pagerduty", n)
        with caplog.at_level(logging.DEBUG):
            w.pump("slack")
            w.pump("pagerduty")
        token = slack.token_path.rsplit("/", 1)[1]
    errors = " ".join(r.last_error or "" for r in store.alerting.outbox())
    assert errors and caplog.text
    for secret in (token, PD_KEY, slack.token_path):
        assert secret not in caplog.text
        assert secret not in errors


def test_a_pass_that_lost_the_lease_leaves_the_rest_of_the_row_to_the_new_holder(
    store: Store,
) -> None:
    clock = Clock()

    class Stalled(WebhookSink):
        """After its first request, the pass stalls past the lease and b takes it."""

        def classify(self, status: int, headers: Mapping[str, str], body: bytes) -> Outcome:
            if len(hook.requests) == 1:
                clock.advance(31)
                assert store.alerting.acquire_lease(  # b, wanting to deliver, takes it
                    "webhook", "host-b:2", datetime.fromtimestamp(clock(), UTC), 30)
            return super().classify(status, headers, body)

    with WebhookReceiver() as hook:
        a = worker(store, {"webhook": Stalled(hook.url)}, clock, holder="host-a:1")
        b = worker(store, {"webhook": WebhookSink(hook.url)}, clock, holder="host-b:2")
        enqueue(store, "webhook", note("g-1", item("acceptance_drop", "a"),
                                       item("below_breakeven", "a")))
        a.pump("webhook")
        assert len(hook.requests) == 1
        (row,) = store.alerting.outbox()
        assert row.state == "pending" and row.progress == 1
        assert b.pump("webhook") is None
    assert [key for key, *_ in hook.deliveries] == ["g-1/0", "g-1/1"]
    assert {r.state for r in store.alerting.outbox()} == {"delivered"}
