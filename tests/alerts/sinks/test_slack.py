"""The Slack sink: Block Kit rendering within limits, escaping, classification, secrets, and
delivery to a local receiver that checks the format like Slack does."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import orjson
import pytest

from alerts.http import HttpClient
from alerts.sinks.base import Outcome
from alerts.sinks.slack import SlackSink, render
from monitor.config import SlackConfig
from tests.alerts.receivers import SlackReceiver, mrkdwn_problems
from tests.alerts.sinks import item, notification

URL = "https://hooks.slack.com/services/T0000TEST/B0000TEST/s3cr3tT0kenV4lue42xyz"
TOKEN = "s3cr3tT0kenV4lue42xyz"
NASTY_ROUTES = ["<!channel>", "a&b<c>", "x > y", "<https://evil.test|docs>", "&amp;",
                "🚀 fast", "مسار", "mixed مسار 🚀 <!here> & co"]


def sink(url: str = URL) -> SlackSink:
    return SlackSink(url, SlackConfig())


def payload(n: Any) -> dict[str, Any]:
    [req] = sink().requests(n)
    return orjson.loads(req.body)


def mrkdwn_texts(msg: dict[str, Any]) -> list[str]:
    out = [msg["text"]]
    for b in msg["blocks"]:
        if b["type"] == "section":
            out.append(b["text"]["text"])
        elif b["type"] == "context":
            out += [e["text"] for e in b["elements"]]
    return out


# -- rendering ------------------------------------------------------------------------------------

def test_one_post_with_fallback_header_and_section() -> None:
    n = notification(item(), item("below_breakeven", severity="error"))
    [req] = sink().requests(n)
    assert req.method == "POST" and req.url == URL
    assert dict(req.headers)["Content-Type"] == "application/json"
    msg = orjson.loads(req.body)
    header, s1, s2 = msg["blocks"]
    assert header == {"type": "header", "text": {
        "type": "plain_text", "text": "FIRING · route code · 2 alerts", "emoji": True}}
    text = s1["text"]["text"]
    assert s1["text"]["type"] == "mrkdwn"
    for piece in ("*FIRING*", "`acceptance_drop`", "*warning*", "code: acceptance 0.61 -&gt; 0.49",
                  "target m70b @ r2", "draft m1b @ d1", "baseline: 0.61", "drafted_tokens: 48120",
                  "<!date^1793629200^"):
        assert piece in text
    assert "`below_breakeven`" in s2["text"]["text"] and "*error*" in s2["text"]["text"]
    assert msg["text"].startswith("FIRING · route code · 2 alerts: FIRING acceptance_drop")


def test_resolved_and_reminder_markers() -> None:
    msg = payload(notification(item(status="resolved")))
    assert msg["blocks"][0]["text"]["text"] == "RESOLVED · route code · 1 alert"
    assert "*RESOLVED*" in msg["blocks"][1]["text"]["text"]
    assert "resolved <!date^" in msg["blocks"][1]["text"]["text"]
    msg = payload(notification(item(repeat=True)))
    assert msg["blocks"][0]["text"]["text"].startswith("REMINDER · route code")
    assert "*REMINDER*" in msg["blocks"][1]["text"]["text"]


def test_active_alerts_go_in_a_context_block() -> None:
    n = notification(item(), active=(item("telemetry_stale", labels={"x": "1"}),
                                     item("throughput_drop", severity="error")))
    ctx = payload(n)["blocks"][-1]
    assert ctx["type"] == "context"
    assert ctx["elements"][0]["text"] == (
        "also firing: telemetry_stale (warning), throughput_drop (error)")


def test_long_summary_is_truncated_within_section_limit() -> None:
    msg = payload(notification(item(summary="x" * 10_000)))
    section = msg["blocks"][1]["text"]["text"]
    assert len(section) <= 3000 and "x…" in section
    assert len(msg["text"]) <= 40_000


def test_fallback_text_is_capped() -> None:
    items = [item(summary="y" * 5000, started=datetime(2026, 11, 2, tzinfo=UTC)
                  + timedelta(minutes=i)) for i in range(60)]
    msg = payload(notification(*items))
    assert len(msg["text"]) <= 40_000 and msg["text"].endswith("…")


@pytest.mark.parametrize("with_active", [False, True])
def test_sixty_items_fit_in_fifty_blocks(with_active: bool) -> None:
    items = [item(route="code", started=datetime(2026, 11, 2, tzinfo=UTC) + timedelta(minutes=i))
             for i in range(60)]
    active = (item("telemetry_stale"),) if with_active else ()
    msg = payload(notification(*items, active=active))
    blocks = msg["blocks"]
    assert len(blocks) == 50
    assert blocks[0]["text"]["text"] == "FIRING · route code · 60 alerts"
    sections = [b for b in blocks if b["type"] == "section"]
    assert sections[-1]["text"]["text"].startswith(f"… and {60 - len(sections) + 1} more: ")
    assert (blocks[-1]["type"] == "context") == with_active
    total = sum(len(t) for t in mrkdwn_texts(msg)[1:])
    assert total <= 12_000 + 3000  # the shared section budget plus the "more" and context


def test_header_stays_within_150_and_keeps_the_count() -> None:
    msg = payload(notification(item(route="r" * 400), item("telemetry_stale", route="r" * 400)))
    head = msg["blocks"][0]["text"]["text"]
    assert len(head) <= 150 and head.endswith("· 2 alerts") and "…" in head


def test_block_ids_fields_unused_or_within_limits() -> None:
    msg = payload(notification(*[item(started=datetime(2026, 1, 1, tzinfo=UTC)
                                      + timedelta(hours=i)) for i in range(3)]))
    for b in msg["blocks"]:
        assert len(b.get("block_id", "")) <= 255
        assert len(b.get("fields", [])) <= 10


# -- escaping -------------------------------------------------------------------------------------

@pytest.mark.parametrize("route", NASTY_ROUTES)
def test_routes_and_labels_are_escaped_in_mrkdwn(route: str) -> None:
    it = item(route=route, summary=f"{route}: acceptance fell <!channel> & more",
              labels={"draft_model": "m|b<x>", "target_model": "t&t"},
              details={"note": "<@U123> ping", "k&<": 1})
    msg = payload(notification(it, active=(item("telemetry_stale", route=route),)))
    for text in mrkdwn_texts(msg):
        assert mrkdwn_problems(text) == [], text
        assert "<!channel>" not in text and "<!here>" not in text and "<@U123>" not in text
    section = msg["blocks"][1]["text"]["text"]
    assert "draft m|b&lt;x&gt;" in section and "target t&amp;t" in section
    # the header is plain_text: Slack never parses it, so it shows the route as it is
    assert route in msg["blocks"][0]["text"]["text"]


def test_emoji_and_right_to_left_text_pass_unchanged() -> None:
    msg = payload(notification(item(route="مسار", summary="🚀 مسار سريع")))
    section = msg["blocks"][1]["text"]["text"]
    assert "🚀 مسار سريع" in section
    assert "🚀 مسار سريع" in msg["text"]
    assert "route مسار" in msg["blocks"][0]["text"]["text"]


def test_render_is_json_serialisable_for_odd_details() -> None:
    it = item(details={"nested": {"a": [1, 2]}, "none": None, "flag": True, "ratio": 1 / 3})
    text = render(notification(it))["blocks"][1]["text"]["text"]
    assert "ratio: 0.3333" in text and "flag: True" in text and "nested" not in text


# -- classify -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("status", "body", "kind", "broken", "why"), [
    (200, b"ok", "ok", False, "HTTP 200 ok"),
    (500, b"rollup_error", "retry", False, "HTTP 500 rollup_error"),
    (503, b"", "retry", False, "HTTP 503"),
    (0, b"", "retry", False, "no answer (network error or timeout)"),
    (400, b"invalid_payload", "permanent", False, "HTTP 400 invalid_payload"),
    (400, b"no_text", "permanent", False, "HTTP 400 no_text"),
    (403, b"action_prohibited", "permanent", True, "HTTP 403 action_prohibited"),
    (404, b"no_service", "permanent", True, "HTTP 404 no_service"),
    (404, b"channel_not_found", "permanent", True, "HTTP 404 channel_not_found"),
    (410, b"channel_is_archived", "permanent", True, "HTTP 410 channel_is_archived"),
    (410, b"", "permanent", True, "HTTP 410"),
    (418, b"teapot", "permanent", False, "HTTP 418 teapot"),
    (301, b"", "permanent", True, "HTTP 301 (redirect not followed)"),
])
def test_classify(status: int, body: bytes, kind: str, broken: bool, why: str) -> None:
    out = sink().classify(status, {}, body)
    assert (out.kind, out.broken, out.reason) == (kind, broken, why)


def test_classify_429_retry_after_seconds_and_date() -> None:
    out = sink().classify(429, {"retry-after": "30"}, b'{"ok":false,"error":"rate_limited"}')
    assert out == Outcome("retry", "HTTP 429 rate_limited", 30.0)
    date = format_datetime(datetime.now(UTC) + timedelta(seconds=600), usegmt=True)
    out = sink().classify(429, {"Retry-After": date}, b"")
    assert out.kind == "retry" and out.retry_after is not None and 590 <= out.retry_after <= 600
    assert sink().classify(429, {}, b"").retry_after is None


def test_classify_caps_the_body_code() -> None:
    out = sink().classify(400, {}, b"e" * 1000)
    assert len(out.reason) <= len("HTTP 400 ") + 100


def test_workflow_style_json_error_with_200_is_not_ok() -> None:
    out = sink().classify(200, {}, b'{"ok": false, "error": "invalid_token"}')
    assert out.kind == "permanent" and out.broken


# -- secrets --------------------------------------------------------------------------------------

def test_url_never_in_describe_reasons_or_repr() -> None:
    s = sink()
    [req] = s.requests(notification(item(route=URL)))  # even a route that quotes it
    assert TOKEN in req.url
    assert TOKEN not in req.describe and "hooks.slack.com" not in req.describe
    assert TOKEN not in repr(s)
    for status in (400, 404, 500):
        echoed = f"no_service for {URL} ({TOKEN})".encode()
        assert TOKEN not in s.classify(status, {}, echoed).reason
        assert "/services/" not in s.classify(status, {}, echoed).reason


# -- end to end -----------------------------------------------------------------------------------

def test_end_to_end_delivery_passes_the_receivers_checks(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    # httpx logs every request URL at INFO: the daemon must keep it at WARNING (see the
    # integration notes); with that, nothing else may log the webhook token.
    caplog.set_level(logging.WARNING, logger="httpx")
    caplog.set_level(logging.WARNING, logger="httpcore")
    notes = [
        notification(item(route=r, summary=f"{r} <!channel> & 🚀",
                          labels={"draft_model": "d|1"}))
        for r in NASTY_ROUTES
    ]
    notes.append(notification(*[item(started=datetime(2026, 1, 1, tzinfo=UTC)
                                     + timedelta(minutes=i), summary="z" * 4000)
                                for i in range(60)], active=(item("telemetry_stale"),)))
    notes.append(notification(item(status="resolved"), item("throughput_drop", repeat=True)))
    with SlackReceiver() as slack, HttpClient(timeout=5) as client:
        s = sink(slack.webhook_url)
        for n in notes:
            [req] = s.requests(n)
            answer = client.send(req)
            assert s.classify(answer.status, answer.headers, answer.body).kind == "ok"
    assert slack.violations == []
    assert len(slack.messages) == len(notes)
    assert slack.messages[0]["blocks"][0]["text"]["text"] == "FIRING · route <!channel> · 1 alert"
    assert "s3cr3t" not in caplog.text


def test_receiver_cues_map_to_outcomes() -> None:
    with SlackReceiver() as slack, HttpClient(timeout=5) as client:
        s = sink(slack.webhook_url)
        [req] = s.requests(notification())
        slack.respond(429, headers={"Retry-After": "1"}, body=b"rate_limited")
        slack.respond(500, body=b"rollup_error")
        slack.respond(400, body=b"invalid_payload")
        slack.respond(0)  # connection dropped without an answer
        outcomes = []
        for _ in range(5):
            a = client.send(req)
            outcomes.append(s.classify(a.status, a.headers, a.body))
    assert outcomes == [
        Outcome("retry", "HTTP 429 rate_limited", 1.0),
        Outcome("retry", "HTTP 500 rollup_error"),
        Outcome("permanent", "HTTP 400 invalid_payload"),
        Outcome("retry", "no answer (network error or timeout)"),
        Outcome("ok", "HTTP 200 ok"),
    ]
    assert slack.violations == [] and len(slack.messages) == 1  # cued answers took nothing


def test_revoked_webhook_and_network_error_end_to_end() -> None:
    with SlackReceiver() as slack, HttpClient(timeout=5) as client:
        s = sink(slack.url + "/services/T0000TEST/B0000TEST/revoked000000000000000")
        [req] = s.requests(notification())
        a = client.send(req)
        assert s.classify(a.status, a.headers, a.body) == Outcome(
            "permanent", "HTTP 404 no_service", broken=True)
        url = slack.webhook_url
    with HttpClient(timeout=5) as client:  # the receiver is closed: connection refused
        s = sink(url)
        [req] = s.requests(notification())
        a = client.send(req)
        assert a.status == 0 and s.classify(a.status, a.headers, a.body).kind == "retry"
