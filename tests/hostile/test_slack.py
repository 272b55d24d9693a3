"""Hostile names in Slack messages: the Block Kit payload never pings (``<!channel>``,
``<@U…>``), never forges a link, stays within Slack's limits and still shows the name."""

from __future__ import annotations

import html
from datetime import UTC, datetime
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from alerts.notification import AlertItem, Notification, episode_id
from alerts.sinks.slack import HEADER_MAX, SECTION_MAX, TEXT_MAX, SlackSink, render
from alerts.sinks.text import one_line
from monitor.alert_record import AlertRecord
from monitor.config import DetectionConfig, SlackConfig
from monitor.detect.engine import Detection
from tests.alerts.receivers import mrkdwn_problems
from tests.alerts.sinks import item, notification
from tests.alerts.sinks.test_slack import mrkdwn_texts
from tests.hostile import count_into, event, hostile_text, names
from tests.monitor.aggregate.test_guard import SeriesMemoryStore

URL = "https://hooks.slack.com/services/T0000TEST/B0000TEST/s3cr3tT0kenV4lue42xyz"
T0 = datetime(2026, 11, 2, 14, 20, tzinfo=UTC)
MENTIONS = ("<!channel", "<!here", "<!everyone", "<!subteam", "<@", "<#", "<http", "<mailto")


def check(msg: dict[str, Any], route: str) -> None:
    """No unescaped control character of mrkdwn, no mention or link, the limits held, and the
    route still readable in the notification text."""
    body = orjson.loads(orjson.dumps(msg))  # what is posted is plain JSON
    for text in mrkdwn_texts(body):
        assert mrkdwn_problems(text) == [], text
        assert not any(m in text for m in MENTIONS), text
        assert len(text) <= TEXT_MAX
    header = body["blocks"][0]["text"]
    assert header["type"] == "plain_text" and len(header["text"]) <= HEADER_MAX
    assert header["text"] == one_line(header["text"])  # no line breaks or controls
    for block in body["blocks"][1:]:
        if block["type"] == "section":
            assert len(block["text"]["text"]) <= SECTION_MAX
    shown = html.unescape(body["text"])
    assert one_line(route)[:20] in shown


@settings(max_examples=200)
@given(route=hostile_text(1, 128), labels=names(), summary=hostile_text(0, 2000),
       detail=st.tuples(hostile_text(1, 50), hostile_text(0, 300)))
def test_any_names_render_escaped(route: str, labels: dict[str, str], summary: str,
                                  detail: tuple[str, str]) -> None:
    pair = {"target_model": labels["target.model"], "target_revision": labels["target.revision"],
            "draft_model": labels["draft.model"], "draft_revision": labels["draft.revision"]}
    firing = item(route=route, summary=summary, labels=pair, details={detail[0]: detail[1]})
    other = item("telemetry_stale", route=route, summary=route, labels={"x": labels["spec.method"]})
    msg = render(notification(firing, item("revision_mismatch", "resolved", route=route,
                                           summary=summary[::-1]), active=(other,)))
    check(msg, route)
    [request] = SlackSink(URL, SlackConfig()).requests(notification(firing))
    assert "\n" not in request.describe and "s3cr3t" not in request.describe
    assert orjson.loads(request.body) == render(notification(firing))


@settings(max_examples=25)
@given(st.lists(names(), min_size=1, max_size=4))
def test_alerts_the_detectors_raise_on_hostile_routes_render_escaped(
        batch: list[dict[str, str]]) -> None:
    """Real alert records: the metadata rule fires on a draft pinned to another target
    revision, with the route and pair names in its labels and summary."""
    records: list[AlertRecord] = []
    docs = [event({**f, "draft.pinned_target_revision": "p" if f["target.revision"] != "p"
                   else "q"}, i) for i, f in enumerate(batch)]
    count_into(SeriesMemoryStore(), "slack", docs, observer=Detection(DetectionConfig()),
               on_alerts=[records.extend])  # type: ignore[arg-type]
    assert {r.labels["route"] for r in records} == {f["route"] for f in batch}
    for rec in records:
        started = rec.at
        it = AlertItem(rec, "firing", episode_id(rec.fingerprint, started), started)
        check(render(Notification("k", {"route": rec.labels["route"]}, T0, (it,))),
              rec.labels["route"])
