"""Hostile names in the HTML report: the page of a route named ``"><script>…`` has exactly
the elements and attribute names of the page of a plainly named twin with the same data (no
element, attribute or script injected, in the HTML or the inline SVG charts), and shows the
names as text."""

from __future__ import annotations

import html
import itertools
from collections import Counter
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from monitor.config import DetectionConfig
from monitor.detect.engine import Detection
from monitor.report.data import gather_report
from monitor.report.html import plain, render_html
from monitor.store.store import Store
from tests.hostile import T0, count_into, event, hostile_text, names

_runs = itertools.count()
UNTIL = datetime.fromtimestamp(T0, UTC) + timedelta(days=1)


class Shape(HTMLParser):
    """Start tags with their attribute names (outside the inline SVGs, and inside them), and
    the text of the route's name in the page header."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: Counter[tuple[str, tuple[str, ...]]] = Counter()
        self.svg_tags: set[tuple[str, tuple[str, ...]]] = set()
        self.others: list[str] = []  # comments, processing instructions, declarations
        self.route_text: list[str] = []
        self._in_route = False
        self._svg_depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        shape = (tag, tuple(sorted(name for name, _ in attrs)))
        if tag == "svg" or self._svg_depth:
            self._svg_depth += 1
            self.svg_tags.add(shape)
        else:
            self.tags[shape] += 1
        if tag == "span" and ("class", "route") in attrs:
            self._in_route = True

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        if self._svg_depth:
            self._svg_depth -= 1
        if tag == "span":
            self._in_route = False

    def handle_data(self, data: str) -> None:
        if self._in_route:
            self.route_text.append(data)

    def handle_comment(self, data: str) -> None:
        self.others.append("comment")

    def handle_pi(self, data: str) -> None:
        self.others.append("pi")

    def unknown_decl(self, data: str) -> None:
        self.others.append("decl")


def shape(page: str) -> Shape:
    parser = Shape()
    parser.feed(page)
    parser.close()
    return parser


def page_of(store: Store, route: str, pairs: list[dict[str, str]]) -> str:
    """Ten minutes of each pair on ``route``, through the pipeline and the detectors (a
    draft pinned to another revision: a metadata alert with the names in its summary)."""
    docs = [event({**f, "route": route, "draft.pinned_target_revision": "pinned"}, i * 10 + m,
                  ts=T0 + m * 60 + i) for i, f in enumerate(pairs) for m in range(10)]
    for d in docs:
        d["request_id"] = f"{next(_runs)}"
    count_into(store, f"report-{next(_runs)}", docs, observer=Detection(DetectionConfig()))
    report = gather_report(store, route, since=None, until=UNTIL, now=UNTIL)
    assert not report.empty
    return render_html(report)


# Each example renders two pages of up to eight charts (a few seconds on a loaded box): few
# examples, and no shrinking beyond a minute.
@settings(max_examples=6, suppress_health_check=[HealthCheck.function_scoped_fixture],
          phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target])
@given(hostile_text(1, 120), st.lists(names(), min_size=1, max_size=2))
def test_a_hostile_page_has_the_shape_of_a_plain_one(store: Store, route: str,
                                                     pairs: list[dict[str, str]]) -> None:
    n = next(_runs)
    route = f"{route}#{n}"  # one database for every example: each its own route
    twins: dict[str, str] = {}

    def twin(s: str) -> str:  # plain names, equal where the hostile ones are equal
        return twins.setdefault(s, f"n{len(twins)}")

    hostile = shape(page_of(store, route, pairs))
    plain_page = shape(page_of(store, f"plain-{n}",
                               [{k: twin(v) for k, v in f.items()} for f in pairs]))
    # The page around the charts: the very same elements. Inside a chart, how many paths
    # and markers are drawn depends on how long the legend's names are (matplotlib leaves
    # out what falls off the canvas, even a path's "d"), so there: no kind of element, nor
    # attribute of an element, that the plain twin's charts do not have.
    assert hostile.tags == plain_page.tags
    allowed: dict[str, set[str]] = {}
    for tag, attrs in plain_page.svg_tags:
        allowed.setdefault(tag, set()).update(attrs)
    assert {(tag, attrs) for tag, attrs in hostile.svg_tags
            if not set(attrs) <= allowed.get(tag, set())} == set()
    assert hostile.others == plain_page.others
    everything = [*hostile.tags, *hostile.svg_tags]
    assert not [t for t, _ in everything if t in ("script", "iframe", "object", "embed")]
    assert not [a for _, attrs in everything for a in attrs if a.startswith("on")]
    # the name is shown, as text, with control and bidi characters as visible escapes
    assert "".join(hostile.route_text) == html.unescape(plain(route))
