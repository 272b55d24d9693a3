"""specwatch's alerts through a real Alertmanager (Debian's package, loopback, clustering
off) to a webhook receiver: firing, then resolved; several Alertmanagers; the re-post."""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from alerts.delivery import DeliveryWorker
from alerts.metrics import AlertMetrics
from alerts.notification import AlertItem, Notification, episode_id
from alerts.sinks.alertmanager import AlertmanagerSink
from monitor.alert_record import AlertRecord
from monitor.config import Config
from monitor.store.checkpoint import Checkpoint
from monitor.store.store import Store
from tests.fixtures.alertmanager import RunningAlertmanager, start_alertmanager
from tests.helpers import wait_for

ROUTE = "code <&> 🚀 مسار"
LABELS = {"route": ROUTE, "target_model": "llama-3.1-70b", "target_revision": "r2",
          "draft_model": "llama-3.2-1b", "draft_revision": "d1", "num_speculative_tokens": "5"}


def _items(state: str, started: datetime, at: datetime) -> tuple[AlertItem, ...]:
    rec = AlertRecord("acceptance_drop", state, at, "warning", dict(LABELS),
                      f"{ROUTE}: acceptance 0.71 -> 0.52", {"baseline": 0.71, "current": 0.52})
    return (AlertItem(rec, state, episode_id(rec.fingerprint, started), started),)  # type: ignore[arg-type]


def _worker(store: Store, urls: list[str], clock: Any = time.time) -> DeliveryWorker:
    config = Config.model_validate({"alerting": {"alertmanager": {"resend_interval": "60s"}}})
    sink = AlertmanagerSink(urls, config.alerting.alertmanager, clock=clock)
    return DeliveryWorker(store.alerting, {"alertmanager": sink}, config.alerting,
                          AlertMetrics(CollectorRegistry()), holder="test:1", clock=clock,
                          rng=random.Random(1))


def _sent(am: RunningAlertmanager, status: str) -> list[dict]:
    return [a for n in am.notifications() for a in n["alerts"]
            if a["status"] == status and a["labels"].get("alertname") == "acceptance_drop"]


def _deliver(store: Store, w: DeliveryWorker, key: str, items: tuple[AlertItem, ...]) -> None:
    n = Notification(key, {"route": ROUTE}, items[0].record.at, items)
    store.commit(Checkpoint("test", outbox=[("alertmanager", key, n.to_json())]))
    assert w.pump("alertmanager") is None
    assert {r.key: r.state for r in store.alerting.outbox()}[key] == "delivered"


def test_firing_then_resolved_through_a_real_alertmanager(
    store: Store, alertmanager: RunningAlertmanager
) -> None:
    started = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=3)
    w = _worker(store, [alertmanager.url])
    _deliver(store, w, "g-1", _items("firing", started, started))
    (firing,) = wait_for(lambda: _sent(alertmanager, "firing"), timeout=30,
                         what="the firing webhook from Alertmanager")
    assert firing["labels"] == {"alertname": "acceptance_drop", "severity": "warning", **LABELS}
    assert firing["annotations"]["summary"] == f"{ROUTE}: acceptance 0.71 -> 0.52"
    assert firing["startsAt"].startswith(started.strftime("%Y-%m-%dT%H:%M:%S"))
    assert firing["generatorURL"]
    (held,) = alertmanager.alerts()
    assert held["status"]["state"] == "active"

    cleared = datetime.now(UTC) - timedelta(seconds=5)
    _deliver(store, w, "g-2", _items("resolved", started, cleared))
    (resolved,) = wait_for(lambda: _sent(alertmanager, "resolved"), timeout=30,
                           what="the resolved webhook from Alertmanager")
    assert resolved["labels"] == firing["labels"]
    assert resolved["endsAt"].startswith(cleared.strftime("%Y-%m-%dT%H:%M:%S"))
    assert alertmanager.log.read_text().count("level=error") == 0


def test_every_configured_alertmanager_gets_the_alert(store: Store, tmp_path: Path) -> None:
    with start_alertmanager(tmp_path / "a") as a, start_alertmanager(tmp_path / "b") as b:
        now = datetime.now(UTC).replace(microsecond=0)
        w = _worker(store, [a.url, b.url + "/"])
        _deliver(store, w, "g-1", _items("firing", now, now))
        for am in (a, b):
            (sent,) = wait_for(lambda am=am: _sent(am, "firing"), timeout=30,
                               what=f"the firing webhook from {am.url}")
            assert sent["labels"]["route"] == ROUTE


def test_repost_keeps_a_firing_alert_alive_and_reposts_the_resolve(
    store: Store, alertmanager: RunningAlertmanager
) -> None:
    """Alertmanager forgets an alert whose endsAt passes: the worker re-posts every open
    episode with a fresh endsAt (and recent resolves, for an Alertmanager that restarted)."""
    clock = [time.time()]
    w = _worker(store, [alertmanager.url], clock=lambda: clock[0])
    started = datetime.now(UTC).replace(microsecond=0)
    (item,) = _items("firing", started, started)
    episode = {
        "episode": item.episode, "fingerprint": item.fingerprint, "rule": item.rule,
        "severity": "warning", "route": ROUTE, "labels": dict(LABELS),
        "summary": item.record.summary, "details": {}, "state": "firing",
        "started_at": started, "updated_at": started, "resolved_at": None, "notified": True,
        "silenced_by": None,
    }
    store.commit(Checkpoint("test", episodes=[episode]))
    w.pump("alertmanager")
    (first,) = alertmanager.alerts()
    clock[0] += 61  # one resend interval later
    w.pump("alertmanager")
    (second,) = alertmanager.alerts()
    assert second["endsAt"] > first["endsAt"]  # RFC 3339 UTC strings order as times
    assert second["fingerprint"] == first["fingerprint"]

    # Alertmanager announces no resolve for an alert it never announced firing.
    wait_for(lambda: _sent(alertmanager, "firing"), timeout=30, what="the firing webhook")
    resolved_at = datetime.now(UTC) - timedelta(seconds=1)
    store.commit(Checkpoint("test", episodes=[{**episode, "state": "resolved",
                                               "resolved_at": resolved_at}]))
    clock[0] += 61
    w.pump("alertmanager")
    wait_for(lambda: _sent(alertmanager, "resolved"), timeout=30,
             what="the resolve re-posted from the episodes table")
