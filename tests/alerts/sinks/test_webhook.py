"""The generic webhook sink: the alerts-v1 record as body, the X-Specwatch headers."""

from __future__ import annotations

from datetime import timedelta

import orjson
import pytest

from alerts.http import HttpClient
from alerts.sinks.base import Outcome
from alerts.sinks.webhook import WebhookSink
from tests.alerts.receivers import WebhookReceiver
from tests.alerts.sinks import T0, item, notification

URL = "https://hooks.example.test/specwatch?token=w3bh00kS3cret"


def test_one_post_per_item_with_the_record_as_body() -> None:
    items = (item(), item("telemetry_stale", status="resolved", pair=False),
             item("throughput_drop", repeat=True))
    reqs = WebhookSink(URL).requests(notification(*items, key="route=code/7"))
    assert len(reqs) == 3
    for i, (req, it) in enumerate(zip(reqs, items, strict=True)):
        assert (req.method, req.url) == ("POST", URL)
        assert orjson.loads(req.body) == it.record.to_json()
        h = dict(req.headers)
        assert h["Content-Type"] == "application/json"
        assert h["X-Specwatch-Episode"] == it.episode
        assert h["X-Specwatch-Key"] == f"route=code/7/{i}"
    kinds = [dict(r.headers)["X-Specwatch-Notification"] for r in reqs]
    assert kinds == ["trigger", "resolve", "reminder"]
    assert "w3bh00k" not in " ".join(r.describe for r in reqs)


@pytest.mark.parametrize(("status", "kind", "broken"), [
    (200, "ok", False), (202, "ok", False), (204, "ok", False),
    (408, "retry", False), (429, "retry", False), (500, "retry", False), (0, "retry", False),
    (400, "permanent", False), (404, "permanent", False), (422, "permanent", False),
    (410, "permanent", True), (307, "permanent", True),
])
def test_classify(status: int, kind: str, broken: bool) -> None:
    out = WebhookSink(URL).classify(status, {}, b"")
    assert (out.kind, out.broken) == (kind, broken)


def test_retry_after_is_honoured_on_any_retry() -> None:
    s = WebhookSink(URL)
    assert s.classify(429, {"Retry-After": "9"}, b"slow down") == Outcome(
        "retry", "HTTP 429 slow down", 9.0)
    assert s.classify(503, {"retry-after": "4"}, b"").retry_after == 4.0


def test_end_to_end_records_pass_the_spec_check() -> None:
    n1 = notification(item(route="مسار 🚀"), item("revision_mismatch", labels={"x": "a|b"}),
                      key="g/1")
    n2 = notification(item(status="resolved", route="مسار 🚀", at=T0 + timedelta(hours=1)),
                      key="g/2")
    with WebhookReceiver() as hook, HttpClient(timeout=5) as client:
        s = WebhookSink(hook.url + "/hook?token=w3bh00kS3cret")
        hook.respond(500)
        outcomes = []
        for n in (n1, n2):
            for req in s.requests(n):
                a = client.send(req)
                outcomes.append(s.classify(a.status, a.headers, a.body).kind)
    assert outcomes == ["retry", "ok", "ok"]
    assert hook.violations == []
    assert [(k, kind) for k, kind, _, _ in hook.deliveries] == [("g/1/1", "trigger"),
                                                                ("g/2/0", "resolve")]
    assert hook.records[1]["state"] == "resolved"
    assert hook.records[1]["labels"]["route"] == "مسار 🚀"
    assert hook.requests[0].path == "/hook?token=w3bh00kS3cret"
