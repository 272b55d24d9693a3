"""The Alertmanager sink: the v2 alert JSON, the endsAt rules and resync selection (the
format against a real Alertmanager is checked by the integration tests)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from alerts.http import HttpClient
from alerts.sinks.alertmanager import AlertmanagerSink
from alerts.sinks.base import Episode, Outcome
from monitor.config import AlertmanagerConfig
from tests.alerts.receivers import Receiver
from tests.alerts.sinks import PAIR, T0, item, notification

LATER = T0 + timedelta(minutes=7)


def sink(urls: list[str] | None = None, now: datetime = LATER,
         config: AlertmanagerConfig | None = None) -> AlertmanagerSink:
    return AlertmanagerSink(urls or ["http://am1:9093/", "http://am2:9093"],
                            config or AlertmanagerConfig(), clock=lambda: now.timestamp())


def alerts(n: Any, **kw: Any) -> list[dict[str, Any]]:
    reqs = sink(**kw).requests(n)
    return orjson.loads(reqs[0].body)


def at(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


def test_one_post_per_url_with_all_items() -> None:
    n = notification(item(), item("telemetry_stale", pair=False))
    reqs = sink().requests(n)
    assert [r.url for r in reqs] == ["http://am1:9093/api/v2/alerts",
                                     "http://am2:9093/api/v2/alerts"]
    assert reqs[0].body == reqs[1].body and reqs[0].method == "POST"
    assert dict(reqs[0].headers)["Content-Type"] == "application/json"
    body = orjson.loads(reqs[0].body)
    assert isinstance(body, list) and len(body) == 2
    assert reqs[0].describe == "alertmanager am1:9093 firing (2 alerts)"


def test_labels_are_the_identity_and_nothing_empty() -> None:
    it = item(labels={"num_speculative_tokens": "4", "method": "eagle", "temperature": "0-0.5",
                      "draft_revision": "", "position": "3"})
    [a] = alerts(notification(it))
    assert a["labels"] == {
        "alertname": "acceptance_drop", "route": "code", "severity": "warning",
        "target_model": PAIR["target_model"], "target_revision": PAIR["target_revision"],
        "draft_model": PAIR["draft_model"], "num_speculative_tokens": "4", "method": "eagle",
        "temperature": "0-0.5"}


def test_annotations() -> None:
    it = item(details={"b": 2, "a": 0.5})
    [a] = alerts(notification(it))
    assert a["annotations"] == {"summary": it.record.summary, "episode": it.episode,
                                "details": '{"a":0.5,"b":2}'}
    assert a["generatorURL"] == "http://specwatch/"
    [big] = alerts(notification(item(details={"blob": "x" * 10_000})))
    assert len(big["annotations"]["details"]) == 4000


def test_firing_ends_ttl_after_now() -> None:
    [a] = alerts(notification(item()))
    assert a["startsAt"] == "2026-11-02T14:20:00Z"
    assert at(a["endsAt"]) == LATER + timedelta(seconds=240)
    assert a["endsAt"].endswith("Z")


def test_firing_uses_the_record_time_when_the_clock_lags() -> None:
    it = item(repeat=True, at=T0 + timedelta(hours=1))
    [a] = alerts(notification(it), now=T0)
    assert at(a["endsAt"]) == T0 + timedelta(hours=1, seconds=240)


def test_firing_ttl_is_configurable() -> None:
    [a] = alerts(notification(item()), config=AlertmanagerConfig(firing_ttl=60))
    assert at(a["endsAt"]) == LATER + timedelta(seconds=60)


def test_resolved_ends_at_the_record_time() -> None:
    [a] = alerts(notification(item(status="resolved")))
    assert at(a["endsAt"]) == T0 + timedelta(minutes=10)
    assert at(a["startsAt"]) == T0


def test_resolved_never_ends_before_it_starts() -> None:
    for when in (T0, T0 - timedelta(seconds=5)):
        [a] = alerts(notification(item(status="resolved", at=when)))
        assert at(a["endsAt"]) == T0 + timedelta(seconds=1)


def test_timestamps_keep_sub_second_precision_in_utc() -> None:
    [a] = alerts(notification(item()), now=datetime(2026, 11, 2, 15, 0, 0, 250000, tzinfo=UTC))
    assert a["endsAt"] == "2026-11-02T15:04:00.250000Z"


def test_describe_hides_userinfo_and_path() -> None:
    s = sink(["http://user:pa55word@am.internal:9093/t0ken/"])
    [req] = s.requests(notification())
    assert req.url == "http://user:pa55word@am.internal:9093/t0ken/api/v2/alerts"
    assert "pa55word" not in req.describe and "t0ken" not in req.describe
    assert "pa55word" not in repr(s)


# -- resync ---------------------------------------------------------------------------------------

def episode(name: str, started: datetime, resolved: datetime | None,
            rule: str = "acceptance_drop") -> Episode:
    return Episode(name, "f" * 16, rule, "warning", {"route": "code", **PAIR}, f"{name} summary",
                   {"current": 0.49}, started, resolved)


def test_resync_selects_firing_and_recently_resolved() -> None:
    now = T0 + timedelta(hours=1)
    eps = [
        episode("open", T0, None),
        episode("recent", T0, now - timedelta(seconds=60)),
        episode("edge", T0, now - timedelta(seconds=300)),
        episode("old", T0, now - timedelta(seconds=301)),
        episode("long-ago", T0 - timedelta(days=1), T0 - timedelta(hours=20)),
    ]
    reqs = sink().resync(eps, now)
    assert len(reqs) == 2 and reqs[0].body == reqs[1].body
    assert reqs[0].describe == "alertmanager am1:9093 resync (3 alerts)"
    body = orjson.loads(reqs[0].body)
    assert [a["annotations"]["episode"] for a in body] == ["open", "recent", "edge"]
    ends = [at(a["endsAt"]) for a in body]
    assert ends == [now + timedelta(seconds=240), now - timedelta(seconds=60),
                    now - timedelta(seconds=300)]
    assert body[0]["labels"]["alertname"] == "acceptance_drop"
    assert body[0]["annotations"]["summary"] == "open summary"


def test_resync_window_is_configurable_and_empty_means_no_request() -> None:
    now = T0 + timedelta(hours=1)
    eps = [episode("recent", T0, now - timedelta(seconds=60))]
    assert sink(config=AlertmanagerConfig(resolved_resend_for=30)).resync(eps, now) == []
    assert sink().resync([], now) == []


def test_resync_resolved_at_start_still_ends_after_start() -> None:
    [req, _] = sink().resync([episode("blip", T0, T0)], T0 + timedelta(seconds=10))
    [a] = orjson.loads(req.body)
    assert at(a["endsAt"]) > at(a["startsAt"])


# -- classify -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("status", "body", "kind", "broken"), [
    (200, b"", "ok", False),
    (400, b'"start time must be before end time"', "permanent", False),
    (422, b'{"code":602,"message":"0.labels in body is required"}', "permanent", False),
    (404, b"404 page not found", "permanent", True),
    (429, b"", "retry", False),
    (500, b"", "retry", False),
    (503, b"", "retry", False),
    (0, b"", "retry", False),
])
def test_classify(status: int, body: bytes, kind: str, broken: bool) -> None:
    out = sink().classify(status, {}, body)
    assert (out.kind, out.broken) == (kind, broken)


def test_classify_reasons_and_retry_after() -> None:
    s = sink()
    assert s.classify(422, {}, b'{"code":602,"message":"0.labels in body is required"}') == \
        Outcome("permanent", "HTTP 422 0.labels in body is required")
    assert s.classify(429, {"Retry-After": "12"}, b"").retry_after == 12.0


def test_end_to_end_against_a_recording_receiver() -> None:
    with Receiver() as am1, Receiver() as am2, HttpClient(timeout=5) as client:
        s = sink([am1.url + "/", am2.url])
        am2.respond(503)
        outcomes = []
        for req in s.requests(notification(item(), item(status="resolved"))):
            a = client.send(req)
            outcomes.append(s.classify(a.status, a.headers, a.body).kind)
    assert outcomes == ["ok", "retry"]
    for r in (am1, am2):
        [(path, headers, body)] = r.requests
        assert path == "/api/v2/alerts" and headers["content-type"] == "application/json"
        assert [a["labels"]["alertname"] for a in body] == ["acceptance_drop"] * 2
