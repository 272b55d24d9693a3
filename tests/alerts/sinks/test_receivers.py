"""The local receivers themselves: they must catch what the real services reject, and
model PagerDuty's dedup, or the end-to-end sink tests prove nothing."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from alerts.http import HttpAnswer, HttpClient
from alerts.sinks.base import HttpRequest
from monitor.alert_record import fingerprint
from tests.alerts.receivers import (
    PagerDutyReceiver,
    Receiver,
    SlackReceiver,
    WebhookReceiver,
    spec_fingerprint,
)
from tests.alerts.sinks import ROUTING_KEY, item

HEADER = {"type": "header", "text": {"type": "plain_text", "text": "FIRING · route <x>"}}


_client: HttpClient | None = None


def post(url: str, body: Any, headers: dict[str, str] | None = None) -> HttpAnswer:
    global _client
    if _client is None:  # one client for the module: building one costs ~50 ms (TLS setup)
        _client = HttpClient(timeout=5)
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return _client.send(HttpRequest("POST", url, raw, "test",
                                    headers or {"Content-Type": "application/json"}))


def teardown_module() -> None:
    if _client is not None:
        _client.close()


def section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


# -- base receiver and script -----------------------------------------------------------------

def test_script_then_default_and_dropped_connection() -> None:
    with Receiver() as r:
        r.respond(503, headers={"Retry-After": "3"}, body={"error": "busy"}, times=2)
        r.respond(0)
        answers = [post(r.url + "/p", {"n": i}) for i in range(4)]
        assert r.pending == 0
    assert [a.status for a in answers] == [503, 503, 0, 200]
    assert answers[0].headers["retry-after"] == "3" and json.loads(answers[0].body) == {
        "error": "busy"}
    assert [(p, b) for p, _, b in r.requests] == [("/p", {"n": i}) for i in range(4)]
    assert r.raw[0] == b'{"n": 0}' and r.methods == ["POST"] * 4


def test_non_json_bodies_are_kept_raw() -> None:
    with Receiver() as r:
        post(r.url, b"plain words", {"Content-Type": "text/plain"})
    assert r.requests[0].body == b"plain words"


# -- Slack ----------------------------------------------------------------------------------------

def test_slack_accepts_a_valid_message() -> None:
    msg = {"text": "a &amp; b", "blocks": [
        HEADER,
        section("*x* <https://grafana.test/d?a=1&amp;b=2|dash &amp; board> "
                "<!date^1793629200^{date_short_pretty} {time}|14:20 UTC>"),
        {"type": "section", "fields": [{"type": "mrkdwn", "text": "f"}] * 10},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": "also"}]},
        {"type": "divider", "block_id": "d1"},
    ]}
    with SlackReceiver() as slack:
        a = post(slack.webhook_url, msg)
    assert (a.status, a.body) == (200, b"ok")
    assert slack.violations == [] and slack.messages == [msg]


BAD_MESSAGES: list[tuple[Any, str]] = [
    (b"not json", "not a JSON object"),
    ({"blocks": [HEADER]}, "no text"),
    ({"text": "x", "blocks": [HEADER] + [section("s")] * 50}, "51 blocks"),
    ({"text": "x", "blocks": [{"type": "header", "text": {"type": "mrkdwn", "text": "h"}}]},
     "plain_text"),
    ({"text": "x", "blocks": [{"type": "header", "text": {"type": "plain_text",
                                                          "text": "h" * 151}}]}, "limit 150"),
    ({"text": "x", "blocks": [section("s" * 3001)]}, "limit 3000"),
    ({"text": "x", "blocks": [section("route <!channel>")]}, "outside a link"),
    ({"text": "x", "blocks": [section("a & b")]}, "bare '&'"),
    ({"text": "x", "blocks": [section("a > b")]}, "stray '>'"),
    ({"text": "<@U123> hi"}, "outside a link"),
    ({"text": "x", "blocks": [section("<https://x.test|a & b>")]}, "in a label"),
    ({"text": "x" * 40_001}, "40000"),
    ({"text": "x", "blocks": [{"type": "section", "fields": [
        {"type": "mrkdwn", "text": "f"}] * 11}]}, "1 to 10"),
    ({"text": "x", "blocks": [{"type": "section", "fields": [
        {"type": "mrkdwn", "text": "f" * 2001}]}]}, "limit 2000"),
    ({"text": "x", "blocks": [{"type": "divider", "block_id": "b" * 256}]}, "block_id"),
    ({"text": "x", "blocks": [{"type": "divider", "block_id": "b"},
                              {"type": "divider", "block_id": "b"}]}, "repeated"),
    ({"text": "x", "blocks": [{"type": "table"}]}, "unknown block type"),
]


def test_slack_rejects_what_slack_rejects() -> None:
    with SlackReceiver() as slack:
        for body, _ in BAD_MESSAGES:
            a = post(slack.webhook_url, body)
            assert (a.status, a.body) == (400, b"invalid_payload"), body
    assert slack.messages == []
    for i, (_, why) in enumerate(BAD_MESSAGES):
        mine = [v for v in slack.violations if v.startswith(f"request {i} ")]
        assert any(why in v for v in mine), (why, mine)


def test_slack_unknown_path_is_no_service() -> None:
    with SlackReceiver() as slack:
        a = post(slack.url + "/services/T/B/revoked", {"text": "x"})
    assert (a.status, a.body) == (404, b"no_service") and slack.violations == []


# -- PagerDuty ------------------------------------------------------------------------------------

def event(action: str, key: str | None = "k1", **payload: Any) -> dict[str, Any]:
    ev: dict[str, Any] = {"routing_key": ROUTING_KEY, "event_action": action}
    if key is not None:
        ev["dedup_key"] = key
    if action == "trigger":
        ev["payload"] = {"summary": "s", "source": "specwatch", "severity": "warning",
                         "timestamp": "2026-11-02T14:20:00Z", **payload}
    return ev


def test_pagerduty_dedup_model() -> None:
    with PagerDutyReceiver() as pd:
        url = pd.url + "/v2/enqueue"
        answers = [post(url, e) for e in [
            event("trigger"), event("trigger"), event("acknowledge"), event("resolve"),
            event("resolve"),                       # closed key: dropped
            event("trigger"),                       # closed key: a new incident
            event("resolve", key="never-seen"),     # unknown key: dropped
            event("trigger", key=None),             # no key: PD makes one up
        ]]
    assert {a.status for a in answers} == {202}
    assert json.loads(answers[0].body) == {"status": "success", "message": "Event processed",
                                           "dedup_key": "k1"}
    assert pd.violations == []
    first, second, third = pd.incidents
    assert (first.number, first.triggers, first.acknowledged, first.resolved) == (1, 2, True, True)
    assert first.resolved_at is not None and first.opened_at.isoformat().startswith("2026-11-02")
    assert (second.dedup_key, second.number, second.resolved) == ("k1", 2, False)
    assert third.dedup_key == json.loads(answers[-1].body)["dedup_key"] != "k1"
    assert [e["dedup_key"] for e in pd.dropped] == ["k1", "never-seen"]
    assert pd.open_incidents() == [second, third] and len(pd.incidents_for("k1")) == 2


def test_pagerduty_keys_are_per_routing_key() -> None:
    other = dict(event("resolve"), routing_key="X" * 32)
    with PagerDutyReceiver() as pd:
        post(pd.url + "/v2/enqueue", event("trigger"))
        post(pd.url + "/v2/enqueue", other)
    assert not pd.incidents[0].resolved and pd.dropped == [other]


BAD_EVENTS: list[tuple[dict[str, Any], str]] = [
    (dict(event("trigger"), routing_key="short"), "routing_key"),
    (event("escalate"), "event_action"),
    (event("trigger", key="k" * 256), "dedup_key"),
    (event("resolve", key=None), "dedup_key is required"),
    (event("trigger", summary="s" * 1025), "limit 1024"),
    (event("trigger", summary=""), "summary is required"),
    (event("trigger", severity="page"), "severity"),
    (event("trigger", source=""), "source"),
    (event("trigger", timestamp="yesterday"), "ISO 8601"),
    (event("trigger", custom_details="text"), "custom_details"),
    (event("trigger", custom_details={"b": "x" * 512_000}), "512000"),
]


def test_pagerduty_rejects_invalid_events_like_pagerduty() -> None:
    with PagerDutyReceiver() as pd:
        answers = [post(pd.url + "/v2/enqueue", e) for e, _ in BAD_EVENTS]
    for a, (_, why) in zip(answers, BAD_EVENTS, strict=True):
        body = json.loads(a.body)
        assert a.status == 400 and body["status"] == "invalid event"
        assert any(why in e for e in body["errors"]), (why, body)
    assert pd.incidents == [] and len(pd.violations) >= len(BAD_EVENTS)


def test_pagerduty_change_events_and_unknown_paths() -> None:
    good = {"routing_key": ROUTING_KEY, "payload": {"summary": "rev r2 -> r3",
                                                    "timestamp": "2026-11-02T14:20:00Z"}}
    with PagerDutyReceiver() as pd:
        ok = post(pd.url + "/v2/change/enqueue", good)
        bad = post(pd.url + "/v2/change/enqueue", dict(good, event_action="trigger"))
        lost = post(pd.url + "/v1/enqueue", good)
    assert ok.status == 202 and pd.change_events == [good]
    assert bad.status == 400 and lost.status == 404
    assert len(pd.violations) == 2


# -- webhook --------------------------------------------------------------------------------------

def hook_headers(kind: str = "trigger") -> dict[str, str]:
    return {"Content-Type": "application/json", "X-Specwatch-Notification": kind,
            "X-Specwatch-Episode": "e-1", "X-Specwatch-Key": "k/0"}


def test_webhook_checks_the_record() -> None:
    good = item().record.to_json()
    bad_fp = dict(good, fingerprint="0" * 16)
    no_route = dict(good, labels={"target_model": "m"})
    extra = dict(good, note="x")
    with WebhookReceiver() as hook:
        answers = [post(hook.url, b, hook_headers()) for b in (good, bad_fp, no_route, extra)]
        mismatch = post(hook.url, good, hook_headers("resolve"))
        bare = post(hook.url, good)
    assert [a.status for a in answers] == [200, 400, 400, 400]
    assert mismatch.status == 400 and bare.status == 400
    assert hook.records == [good]
    assert any("fingerprint" in v for v in hook.violations)
    assert any("labels.route" in v for v in hook.violations)
    assert any("x-specwatch-key missing" in v for v in hook.violations)


def test_webhook_headers_can_be_optional() -> None:
    with WebhookReceiver(require_headers=False) as hook:
        assert post(hook.url, item().record.to_json()).status == 200


@given(st.dictionaries(st.text(min_size=1), st.text(), max_size=5), st.text(min_size=1))
def test_spec_fingerprint_matches_the_implementation(labels: dict[str, str], route: str) -> None:
    labels = {**labels, "route": route}
    assert spec_fingerprint("acceptance_drop", labels) == fingerprint("acceptance_drop", labels)
