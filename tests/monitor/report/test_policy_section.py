"""The report's "Where to speculate" section: on a store with slice rollups, the route's
slices and settings, the held-out comparison, the gains sentence (plainly "prefill- or
retrieval-bound" on a route waiting on retrieval) and the chart of predicted speedup by batch
bucket and draft length; on a store without, one line saying so, and the page still renders."""

from __future__ import annotations

import dataclasses
import html
import re
from datetime import timedelta

import pytest

from monitor.config import Config
from monitor.policy.exceptions import PolicyError
from monitor.policy.learn import compute_policy
from monitor.report.data import gather_report
from monitor.report.html import render_html
from monitor.report.policy import PolicySection, gather_policy
from monitor.report.policy_html import render_policy_section
from monitor.store import Checkpoint, Store
from tests.monitor.policy.records import HOUR, T0, Slice, records
from tests.monitor.store.helpers import at, checkpoint, event

HOURS = 9
RETRIEVAL_MS = 9000.0  # per request, before the first token: rag waits on its retrieval
SLICES = (
    Slice(tags="lang=py", batch="1-1", survival=(0.9, 0.8, 0.7), requests=60, plain=20),
    Slice(tags="lang=py", batch="64-127", survival=(0.9, 0.8, 0.7), m=0.5, requests=60,
          plain=20),
    Slice(tags="lang=xx", batch="1-1", survival=(0.3, 0.1, 0.05), requests=60),
    Slice(route="rag", batch="1-1", survival=(0.8, 0.6, 0.4), requests=60),
)
SINCE, UNTIL = at(T0), at(T0 + HOURS * HOUR)


def _telemetry(store: Store) -> None:
    """The ordinary rollups: without them a route has no report at all."""
    events = [event(f"{route}-{i}", T0 + 600 * i, route)
              for route in ("code", "rag") for i in range(HOURS * 6)]
    store.commit(checkpoint(events))


def _slices(store: Store) -> None:
    recs = records(SLICES, HOURS)
    for r in recs:
        if r.series.route == "rag":
            r.stats.ttft_ms += RETRIEVAL_MS * r.stats.timed_requests
            r.stats.e2e_ms += RETRIEVAL_MS * r.stats.timed_requests
    store.commit(Checkpoint("telemetry", slices={(r.key, r.series, r.hour): r.stats
                                                 for r in recs}))


def _page(store: Store, route: str, config: Config | None = None) -> str:
    report = gather_report(store, route, since=SINCE, until=UNTIL, now=UNTIL,
                           policy=config or Config())
    return render_html(report)


def _section(page: str) -> str:
    start = page.index("<h2>Where to speculate</h2>")
    ends = [i for i in (page.find("<h2>", start + 1), page.find('<section class="pair"', start))
            if i > 0]
    return page[start:min(ends, default=len(page))]


@pytest.fixture
def filled(store: Store) -> Store:
    _telemetry(store)
    _slices(store)
    return store


def test_the_section_on_a_decode_bound_route(filled: Store) -> None:
    page = _page(filled, "code")
    section = _section(page)
    expected = compute_policy(filled, Config(), route="code", train_since=SINCE,
                              holdout_until=UNTIL)
    [gain] = expected.gains
    assert gain.decode_bound
    text = html.unescape(section)
    assert gain.note in text
    assert "will not be felt" not in text
    # every slice with its setting and who decided it
    for d in expected.slices:
        assert dict(d.features)["tags"] in text
    assert text.count("<td>slice</td>") == len(expected.slices) == 3
    assert "ON, k=3" in text
    # the held-out comparison against the three alternatives, with intervals
    assert expected.holdout is not None
    for name in ("all on (as the traffic ran)", "all off",
                 "per-route on/off (today's switch)"):
        assert f"this policy − {name}" in text
    # ONE chart: a line per draft length over the pair's batch buckets, the chosen ring
    assert section.count('<figure class="chart-policy">') == 1
    svg = section[section.index("<svg"):section.index("</svg>")]
    for label in ("j=0 (no speculation)", "j=1", "j=2", "j=3", "chosen", "1-1", "64-127",
                  "batch-size bucket", "predicted decode speedup T(j)"):
        assert label in svg, label
    [schedule] = expected.schedules
    chosen = ", ".join(f"{b.batch}: k={b.num_speculative_tokens}" for b in schedule.buckets)
    assert f"chosen per bucket: <bdi>{chosen}</bdi>" in text
    # the chart's ids are its own: no clash with the pair charts on the same page
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert len(ids) == len(set(ids))


def test_a_retrieval_bound_route_is_told_plainly(filled: Store) -> None:
    text = html.unescape(_section(_page(filled, "rag")))
    assert "Prefill- or retrieval-bound: a faster decode will not be felt." in text
    assert "Decoding is only 10% of this route's end-to-end time" in text
    assert '<div class="change gain worse">' in text


def test_no_slice_rollups_is_one_line_and_the_page_renders(store: Store) -> None:
    _telemetry(store)
    page = _page(store, "code")
    section = _section(page)
    assert section.count("<p") == 1
    assert "No policy: <bdi>no slice rollups in the window" in section
    assert "<svg" not in section
    # the rest of the page is all there
    assert "<h2>Alert episodes</h2>" in page and page.rstrip().endswith("</html>")
    assert page.count('<section class="pair"') == 1


def test_without_a_configuration_there_is_no_section(filled: Store) -> None:
    report = gather_report(filled, "code", since=SINCE, until=UNTIL, now=UNTIL)
    assert report.policy is None
    assert "Where to speculate" not in render_html(report)


def test_a_policy_that_cannot_be_learnt_is_named_not_raised(filled: Store) -> None:
    # a window after the data: the same refusal specwatch policy exits 2 with
    later = gather_policy(filled, Config(), "code", since=UNTIL,
                          until=UNTIL + timedelta(hours=3))
    assert not later.computed
    with pytest.raises(PolicyError) as e:
        compute_policy(filled, Config(), route="code", train_since=UNTIL,
                       holdout_until=UNTIL + timedelta(hours=3))
    assert later.message == str(e.value)


def test_a_fault_in_the_policy_code_costs_the_section_not_the_page(
        filled: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr("monitor.report.policy.compute_policy", broken)
    page = _page(filled, "code")
    assert "the policy could not be computed (ZeroDivisionError: float division by zero)" \
        in html.unescape(_section(page))
    assert "<h2>Alert episodes</h2>" in page


def test_comparisons_without_an_interval_say_so(filled: Store) -> None:
    # too few held-out hours to resample: the difference is shown, no verdict is claimed
    result = compute_policy(filled, Config(), route="code")
    assert result.holdout is not None
    bare = dataclasses.replace(result.holdout, comparisons=tuple(
        dataclasses.replace(c, interval=None) for c in result.holdout.comparisons))
    page = render_policy_section(PolicySection("code", dataclasses.replace(result,
                                                                           holdout=bare)))
    assert page.count("no interval: too few held-out hours to resample") == 3
    assert "better" not in page.split("<h3>On held-out traffic</h3>")[1].split("<figure")[0]


def test_one_chart_for_the_pair_in_force_and_the_others_as_text(store: Store) -> None:
    # code's target moves to revision r2 at hour 4: two pairs in the training window, and
    # the telemetry's last speculative series is r2's
    new_from = T0 + 4 * HOUR
    recs = [dataclasses.replace(r, series=r.series._replace(target_revision="r2"))
            if r.hour >= new_from else r
            for r in records(SLICES[:3], HOURS)]
    store.commit(Checkpoint("telemetry", slices={(r.key, r.series, r.hour): r.stats
                                                 for r in recs}))
    events = [event(f"c-{i}", T0 + 600 * i, "code", target_model="big", draft_model="small",
                    target_revision="r1" if T0 + 600 * i < new_from else "r2")
              for i in range(HOURS * 6)]
    store.commit(checkpoint(events))
    section = html.unescape(_section(_page(store, "code")))
    assert section.count("<svg") == 1
    caption = section[section.index("<figcaption>"):section.index("</figcaption>")]
    assert "big@r2 <- small@d1" in caption
    listed = section[section.index("Other model pairs of the route"):]
    assert "big@r1 <- small@d1" in listed


def test_a_fault_drawing_the_section_costs_the_section_not_the_page(
        filled: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> str:
        raise ValueError("no such bucket")

    monkeypatch.setattr("monitor.report.charts.policy_chart", broken)
    page = _page(filled, "code")
    assert "No policy: the section could not be drawn (<bdi>ValueError: no such bucket</bdi>)" \
        in html.unescape(_section(page))
    assert "<h2>Alert episodes</h2>" in page and page.count('<section class="pair"') == 1
