"""The PagerDuty sink: Events v2 triggers and resolves keyed by episode, change events,
limits, classification, secrets, and delivery to a receiver that models PD's dedup."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import orjson
import pytest

from alerts.http import HttpClient
from alerts.sinks.base import HttpRequest, Outcome
from alerts.sinks.pagerduty import BODY_MAX, PagerDutySink, dedup_key
from monitor.config import PagerDutyConfig
from tests.alerts.receivers import PagerDutyReceiver
from tests.alerts.sinks import ROUTING_KEY, T0, item, notification

BASE = "https://events.pagerduty.com"


def sink(config: PagerDutyConfig | None = None, base: str = BASE) -> PagerDutySink:
    return PagerDutySink(ROUTING_KEY, config or PagerDutyConfig(), base)


def bodies(reqs: list[HttpRequest]) -> list[dict[str, Any]]:
    return [orjson.loads(r.body) for r in reqs]


# -- rendering ------------------------------------------------------------------------------------

def test_trigger_event_fields() -> None:
    it = item(labels={"method": "eagle"})
    [req] = sink().requests(notification(it))
    assert (req.method, req.url) == ("POST", f"{BASE}/v2/enqueue")
    ev = orjson.loads(req.body)
    assert ev["routing_key"] == ROUTING_KEY
    assert ev["event_action"] == "trigger"
    assert ev["dedup_key"] == "specwatch/" + it.episode
    p = ev["payload"]
    assert p["summary"] == it.record.summary
    assert (p["source"], p["severity"], p["timestamp"]) == ("specwatch", "warning",
                                                             "2026-11-02T14:20:00Z")
    assert (p["component"], p["group"], p["class"]) == ("m1b", "code", "acceptance_drop")
    assert p["custom_details"] == {
        "labels": it.labels, "details": it.record.details, "episode": it.episode,
        "started_at": "2026-11-02T14:20:00Z"}


def test_no_component_without_a_draft_model() -> None:
    for it in (item(pair=False), item(labels={"draft_model": ""})):
        [ev] = bodies(sink().requests(notification(it)))
        assert "component" not in ev["payload"]


def test_one_event_per_item_in_order_and_resolve_uses_the_same_key() -> None:
    a = item()
    b = item("telemetry_stale", status="resolved", started=T0 - timedelta(hours=1))
    c = item("throughput_drop", repeat=True)
    reqs = sink().requests(notification(a, b, c))
    evs = bodies(reqs)
    assert [e["event_action"] for e in evs] == ["trigger", "resolve", "trigger"]
    assert evs[1] == {"routing_key": ROUTING_KEY, "event_action": "resolve",
                      "dedup_key": "specwatch/" + b.episode}
    assert [r.describe.split()[1] for r in reqs] == ["trigger", "resolve", "reminder"]
    [resolve] = bodies(sink().requests(notification(item(status="resolved"))))
    assert resolve["dedup_key"] == evs[0]["dedup_key"]  # same episode, same key


def test_dedup_keys_are_stable_per_episode_and_bounded() -> None:
    first, again = item(), item(repeat=True, at=T0 + timedelta(hours=4))
    later = item(started=T0 + timedelta(days=1))
    keys = [e["dedup_key"] for e in bodies(sink().requests(notification(first, again, later)))]
    assert keys[0] == keys[1] != keys[2]
    assert len(dedup_key("e" * 1000)) <= 255
    assert dedup_key("e" * 1000) != dedup_key("e" * 999 + "f")


@pytest.mark.parametrize("severity", ["critical", "error", "warning", "info"])
def test_severity_identity_by_default(severity: str) -> None:
    [ev] = bodies(sink().requests(notification(item(severity=severity))))
    assert ev["payload"]["severity"] == severity


def test_severity_map() -> None:
    cfg = PagerDutyConfig(severity_map={"warning": "error", "info": "warning"})
    evs = bodies(sink(cfg).requests(notification(
        item(severity="warning"), item("acceptance_rise", severity="info"),
        item("below_breakeven", severity="critical"))))
    assert [e["payload"]["severity"] for e in evs] == ["error", "warning", "critical"]


def test_change_event_for_revision_mismatch() -> None:
    rm = item("revision_mismatch", summary="code: target r2 -> r3, draft d1 pinned to r2",
              details={"old_revision": "r2", "new_revision": "r3"})
    reqs = sink().requests(notification(item(), rm, item("telemetry_stale")))
    assert [r.url for r in reqs] == [f"{BASE}/v2/enqueue", f"{BASE}/v2/change/enqueue",
                                     f"{BASE}/v2/enqueue"]
    ch = orjson.loads(reqs[1].body)
    assert ch == {"routing_key": ROUTING_KEY, "payload": {
        "summary": rm.record.summary, "source": "specwatch", "timestamp": "2026-11-02T14:20:00Z",
        "custom_details": {"labels": rm.labels, "details": rm.record.details}}}
    assert reqs[1].describe == "pagerduty change revision_mismatch route code"


def test_change_rules_send_nothing_on_resolve_or_repeat() -> None:
    n = notification(item("revision_mismatch", status="resolved"),
                     item("revision_mismatch", repeat=True))
    assert sink().requests(n) == []


def test_change_event_rules_are_configurable() -> None:
    cfg = PagerDutyConfig(change_event_rules=())
    [ev] = bodies(sink(cfg).requests(notification(item("revision_mismatch"))))
    assert ev["event_action"] == "trigger"


def test_summary_is_truncated_to_1024() -> None:
    for it in (item(summary="s" * 5000), item("revision_mismatch", summary="s" * 5000)):
        [ev] = bodies(sink().requests(notification(it)))
        assert len(ev["payload"]["summary"]) == 1024 and ev["payload"]["summary"][-1] == "…"


@pytest.mark.parametrize("rule", ["acceptance_drop", "revision_mismatch"])
def test_oversized_custom_details_are_replaced(rule: str) -> None:
    [req] = sink().requests(notification(item(rule, details={"blob": "b" * 600_000})))
    assert len(req.body) <= BODY_MAX
    ev = orjson.loads(req.body)
    assert ev["payload"]["custom_details"] == {"error": "custom_details too large, see specwatch"}


def test_base_url_trailing_slash() -> None:
    [req] = sink(base="https://events.eu.pagerduty.com/").requests(notification())
    assert req.url == "https://events.eu.pagerduty.com/v2/enqueue"


# -- classify -------------------------------------------------------------------------------------

INVALID_KEY = (b'{"status":"invalid event","message":"Event object is invalid","errors":'
               b'["Length of \'routing_key\' is incorrect (should be 32 characters)"]}')


@pytest.mark.parametrize(("status", "body", "kind", "broken"), [
    (202, b'{"status":"success","message":"Event processed","dedup_key":"x"}', "ok", False),
    (500, b"", "retry", False),
    (502, b"bad gateway", "retry", False),
    (0, b"", "retry", False),
    (400, INVALID_KEY, "permanent", True),
    (400, b'{"status":"invalid event","errors":["payload.summary too long"]}', "permanent",
     False),
    (401, b"", "permanent", True),
    (403, b"", "permanent", True),
    (404, b"", "permanent", True),
    (413, b"", "permanent", False),
])
def test_classify(status: int, body: bytes, kind: str, broken: bool) -> None:
    out = sink().classify(status, {}, body)
    assert (out.kind, out.broken) == (kind, broken)
    assert out.reason.startswith(f"HTTP {status}") or status == 0


def test_classify_429_honours_retry_after_else_60() -> None:
    assert sink().classify(429, {"Retry-After": "5"}, b"") == Outcome("retry", "HTTP 429", 5.0)
    assert sink().classify(429, {}, b"").retry_after == 60.0
    date = format_datetime(datetime.now(UTC) + timedelta(seconds=300), usegmt=True)
    after = sink().classify(429, {"retry-after": date}, b"").retry_after
    assert after is not None and 290 <= after <= 300


def test_reason_names_the_invalid_event() -> None:
    out = sink().classify(400, {}, INVALID_KEY)
    assert out.reason.startswith("HTTP 400 invalid event: Event object is invalid")
    assert len(out.reason) <= len("HTTP 400 ") + 100


# -- secrets --------------------------------------------------------------------------------------

def test_routing_key_never_in_describe_reasons_or_repr() -> None:
    s = sink()
    n = notification(item(route=ROUTING_KEY), item("revision_mismatch"),
                     item("telemetry_stale", status="resolved"))
    reqs = s.requests(n)
    assert all(ROUTING_KEY.encode() in r.body for r in reqs)
    assert not any(ROUTING_KEY in r.describe for r in reqs)
    assert ROUTING_KEY not in repr(s)
    echo = f'{{"status":"invalid event","errors":["bad routing_key {ROUTING_KEY}"]}}'.encode()
    for status in (400, 403, 500):
        assert ROUTING_KEY not in s.classify(status, {}, echo).reason


# -- end to end -----------------------------------------------------------------------------------

def deliver(s: PagerDutySink, client: HttpClient, reqs: list[HttpRequest]) -> list[Outcome]:
    out = []
    for r in reqs:
        a = client.send(r)
        out.append(s.classify(a.status, a.headers, a.body))
    return out


def test_end_to_end_incident_lifecycle(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.WARNING, logger="httpx")  # it logs URLs at INFO; see notes
    first = item()
    second_episode = item(started=T0 + timedelta(hours=2))
    notes = [
        notification(first, item("revision_mismatch")),
        notification(item(repeat=True, at=T0 + timedelta(minutes=30))),
        notification(item(status="resolved")),
        notification(second_episode),
        notification(item("telemetry_stale", status="resolved")),  # never triggered: dropped
        notification(item(status="resolved", started=T0 + timedelta(hours=2))),
    ]
    with PagerDutyReceiver() as pd, HttpClient(timeout=5) as client:
        s = sink(base=pd.url)
        outcomes = [o for n in notes for o in deliver(s, client, s.requests(n))]
    assert pd.violations == []
    assert {o.kind for o in outcomes} == {"ok"}
    assert [(i.dedup_key, i.number, i.triggers, i.resolved) for i in pd.incidents] == [
        ("specwatch/" + first.episode, 1, 2, True),
        ("specwatch/" + second_episode.episode, 2, 1, True),
    ]
    assert pd.incidents[0].opened_at == T0
    assert pd.incidents[0].severity == "warning"
    assert len(pd.change_events) == 1
    assert pd.change_events[0]["payload"]["custom_details"]["labels"]["route"] == "code"
    assert [e["dedup_key"] for e in pd.dropped] == [
        dedup_key(item("telemetry_stale", status="resolved").episode)]
    assert ROUTING_KEY not in caplog.text


def test_end_to_end_limits_are_accepted() -> None:
    n = notification(item(summary="s" * 3000, details={"blob": "b" * 600_000}),
                     item("revision_mismatch", summary="r" * 3000, details={"b": "x" * 600_000}),
                     item("acceptance_rise", severity="info", route="مسار 🚀 <!channel>"))
    with PagerDutyReceiver() as pd, HttpClient(timeout=5) as client:
        s = sink(base=pd.url)
        assert {o.kind for o in deliver(s, client, s.requests(n))} == {"ok"}
    assert pd.violations == []
    assert len(pd.incidents) == 2 and len(pd.change_events) == 1
    assert pd.incidents[1].summary.startswith("مسار 🚀 <!channel>")


def test_receiver_cues_map_to_outcomes() -> None:
    with PagerDutyReceiver() as pd, HttpClient(timeout=5) as client:
        s = sink(base=pd.url)
        reqs = s.requests(notification())
        pd.respond(429, headers={"Retry-After": "2"}, body={"status": "throttle"})
        pd.respond(429)
        pd.respond(500)
        pd.respond(400, body=INVALID_KEY)
        outcomes = deliver(s, client, reqs * 5)
    assert [(o.kind, o.retry_after, o.broken) for o in outcomes] == [
        ("retry", 2.0, False), ("retry", 60.0, False), ("retry", None, False),
        ("permanent", None, True), ("ok", None, False)]
    assert len(pd.incidents) == 1 and pd.incidents[0].triggers == 1  # cued answers took nothing


def test_receiver_rejects_a_bad_key_like_pagerduty() -> None:
    with PagerDutyReceiver() as pd, HttpClient(timeout=5) as client:
        s = PagerDutySink("too-short", PagerDutyConfig(), pd.url)
        [out] = deliver(s, client, s.requests(notification()))
    assert out.kind == "permanent" and out.broken
    assert "routing_key" in out.reason and "too-short" not in out.reason
    assert len(pd.violations) == 1 and pd.incidents == []
