"""The report's Changes section: each setup change of the route in the range, its verdicts
and intervals, on SQLite and PostgreSQL."""

from __future__ import annotations

import html
from datetime import timedelta

from monitor.changes import JudgeSettings
from monitor.report.data import gather_report
from monitor.report.html import render_html
from monitor.store.store import Store
from tests.monitor.changes.traffic import AT, three_changes
from tests.monitor.store.helpers import T0, at

UNTIL = at(T0 + 6 * 3600)


def test_each_route_shows_its_change_with_verdicts_and_intervals(store: Store) -> None:
    three_changes(store)
    pages = {}
    for route, verdict in (("chat", "worse"), ("code", "better"), ("docs", "same")):
        report = gather_report(store, route, since=at(T0), until=UNTIL, now=UNTIL)
        (j,) = report.changes
        assert (j.record.route, j.verdict) == (route, verdict)
        pages[route] = html.unescape(render_html(report))
    chat = pages["chat"]
    section = chat[chat.index("<h2>Changes</h2>"):chat.index('<section class="pair"')]
    assert '<div class="change worse">' in section and ">WORSE</span>" in section
    assert "draft_drift" in section
    assert "target t1 -> t2, draft d1 unchanged (draft drift)" in section
    assert "<td>acceptance</td>" in section and '<td class="worse">worse</td>' in section
    assert "live comparison: <bdi>worse</bdi>" in section
    assert "2,400 / 2,400" in section and "[-" in section and "%]" in section
    assert "worse: acceptance 0.4" in section
    assert ">BETTER</span>" in pages["code"] and ">SAME</span>" in pages["docs"]


def test_the_range_and_window_apply(store: Store) -> None:
    three_changes(store)
    before = gather_report(store, "chat", since=at(T0), until=at(AT - 60), now=UNTIL)
    assert before.changes == [] and not before.empty
    assert "No setup change on this route in this range." in render_html(before)
    short = gather_report(store, "chat", since=at(T0), until=UNTIL, now=UNTIL,
                          changes=JudgeSettings(window=timedelta(minutes=5).total_seconds()))
    assert short.changes[0].verdict == "insufficient_data"
    assert "NOT ENOUGH DATA" in render_html(short)
