"""Future-dated events: the rules (wall clock, --now, the newest plausible time of a file) and
what the pipeline does with what they refuse."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from monitor.config import IngestConfig
from monitor.eventtime import LOOKAHEAD, MIN_SUPPORT, FixedNow, Lookahead, PlausibleTime, WallClock
from monitor.metrics import IngestMetrics
from monitor.pipeline import Pipeline
from monitor.telemetry.event import Rejection
from monitor.telemetry.parse import Parser
from tests.monitor.test_pipeline import T0, MemoryStore, ev, msg

SKEW, LATENESS = 300.0, 120.0
DAY, YEAR = 86400.0, 365 * 86400.0


class Recording:
    """A dead-letter sink that keeps every rejection."""

    def __init__(self) -> None:
        self.sent: list[tuple[Rejection, dict[str, Any]]] = []

    def send(self, rejection: Rejection, origin: dict[str, Any]) -> None:
        self.sent.append((rejection, origin))

    def flush(self) -> None:
        return

    def close(self) -> None:
        return

    def reasons(self) -> list[str]:
        return [r.reason for r, _ in self.sent]


def replayed(times: list[float], **cfg: Any) -> tuple[Pipeline, MemoryStore, Recording]:
    """One event per message at each of ``times`` (offsets from T0), through the replay's
    look ahead and rule, as ``specwatch replay`` feeds them."""
    store, dead = MemoryStore(), Recording()
    config = IngestConfig(allowed_lateness=LATENESS, max_future_skew=SKEW, **cfg)
    rule = PlausibleTime(config.max_future_skew, config.allowed_lateness)
    p = Pipeline(store, "replay", config, IngestMetrics(CollectorRegistry()), dead, future=rule)
    p.assign([0])
    ahead = Lookahead(rule, p.parser.parse, p.process, 0, newest=lambda: p.newest(0))
    for i, t in enumerate(times):
        ahead.feed(i, msg(ev(f"e{i}", t)))
    ahead.drain()
    p.checkpoint()
    return p, store, dead


def steady(start: float, n: int, step: float) -> list[float]:
    return [start + i * step for i in range(n)]


def test_outliers_far_ahead_are_refused_and_move_nothing() -> None:
    times = steady(0, 300, 10.0)
    times[100] = times[99] + 2 * DAY
    times[101] = times[99] + 70 * YEAR
    p, store, dead = replayed(times)
    assert p.summary.future == 2 and p.summary.late == 0
    assert p.summary.events == 298
    assert store.max_ts[0] == T0 + times[-1]  # the watermark never saw them
    assert all(r.startswith("future: ") for r in dead.reasons())
    assert "only 0 of the next" in dead.reasons()[1]


def test_a_few_outliers_together_are_refused_too() -> None:
    times = steady(0, 200, 5.0)
    for i in range(50, 50 + LOOKAHEAD // 2):  # half the look ahead, all at one far time
        times[i] = 2 * DAY
    p, _, _ = replayed(times)
    assert p.summary.future == LOOKAHEAD // 2 and p.summary.late == 0


def test_an_outlier_first_or_last_in_the_file_is_refused() -> None:
    times = [70 * YEAR, *steady(0, 50, 1.0), 2 * DAY]
    p, _, dead = replayed(times)
    assert p.summary.future == 2 and p.summary.events == 50
    assert "ahead of the newest event" not in dead.reasons()[0]  # nothing counted before it


def test_a_multi_day_trace_with_quiet_nights_counts_in_full() -> None:
    # Three days: busy 14 h a day, then 10 h with no event at all.
    times = [d * DAY + i * 60.0 for d in range(3) for i in range(14 * 60)]
    p, _, dead = replayed(times)
    assert dead.sent == [] and p.summary.events == len(times)


def test_a_sparse_trace_advancing_past_the_skew_at_every_event_counts() -> None:
    # One request every 20 minutes: each is ahead, and the ones after it support it. The
    # last MIN_SUPPORT have too few messages after them: the documented cost of the rule.
    p, _, dead = replayed(steady(0, 100, 20 * 60.0))
    assert p.summary.events == 100 - MIN_SUPPORT and p.summary.future == MIN_SUPPORT
    assert [o["offset"] for _, o in dead.sent] == list(range(100 - MIN_SUPPORT, 100))


def test_a_file_from_a_year_ago_counts_in_full() -> None:
    p, _, dead = replayed(steady(-YEAR, 500, 30.0))
    assert dead.sent == [] and p.summary.events == 500


def test_reordering_within_the_lateness_allowance_is_not_future() -> None:
    # After a gap, the first message is the newest of its stretch by the whole allowance.
    times = [*steady(0, 30, 1.0), 3600 + LATENESS, *steady(3600, 40, 1.0)]
    p, _, dead = replayed(times)
    assert dead.sent == [] and p.summary.events == len(times)


def test_the_rule_counts_support_only_in_messages_after_the_one_judged() -> None:
    rule = PlausibleTime(SKEW, LATENESS)
    rule.ahead.extend([T0, T0 + 1, T0 + 2 * DAY, T0 + 2 * DAY, T0 + 2 * DAY])
    assert rule.refuses(T0 + 2 * DAY, T0) is None  # 3 of 5 messages reach it
    rule.ahead.extend([T0 + 3, T0 + 4])
    assert rule.refuses(T0 + 2 * DAY, T0) is not None  # 3 of 7: not more than half
    assert rule.limit(T0) == T0 + SKEW


def test_wall_clock_and_fixed_now_rules() -> None:
    wall = WallClock(SKEW, wall=lambda: T0)
    assert wall.limit(float("-inf")) == T0 + SKEW
    reason = wall.refuses(T0 + DAY, T0)
    assert reason is not None and reason.startswith("future: ") and "wall clock" in reason
    fixed = FixedNow(T0 - YEAR, SKEW)
    assert fixed.limit(T0) == T0 - YEAR + SKEW
    assert "--now" in (fixed.refuses(T0, T0) or "")


def test_the_pipeline_judges_against_the_wall_clock_by_default() -> None:
    store, dead = MemoryStore(), Recording()
    registry = CollectorRegistry()
    config = IngestConfig(max_future_skew=SKEW)
    p = Pipeline(store, "t", config, IngestMetrics(registry), dead,
                 future=WallClock(SKEW, wall=lambda: T0 + 1000.0))
    p.assign([0])
    p.process(0, 0, msg(ev("a", 0.0), ev("soon", 1000.0 + SKEW), ev("b", 1000.0 + SKEW + 1)))
    # Within the lateness allowance of "soon", but it would be late behind "b".
    p.process(0, 1, msg(ev("c", 1000.0 + SKEW - LATENESS + 0.5)))
    p.checkpoint()
    assert store.totals()[0] == 3
    assert store.max_ts[0] == T0 + 1000.0 + SKEW
    assert registry.get_sample_value("specwatch_future_events_total") == 1.0
    assert registry.get_sample_value("specwatch_dead_letters_total") == 1.0
    (reason,) = dead.reasons()
    assert reason.startswith("future: event time") and "301s ahead of the wall clock" in reason
    assert "b" not in store.ids[0]  # not remembered as counted either
    assert "future" in p.summary.line() and p.summary.future == 1


def test_a_stored_newest_time_in_the_future_is_dropped_at_load(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryStore()
    store.offsets[0], store.max_ts[0] = 5, 4_000_000_000.0  # 2096: an older version's poison
    p = Pipeline(store, "t", IngestConfig(), IngestMetrics(CollectorRegistry()), Recording())
    with caplog.at_level(logging.WARNING, logger="monitor.pipeline"):
        assert p.assign([0]) == {0: 5}
    assert "in the future" in caplog.text
    p.process(0, 5, msg(ev("a", 0.0)))  # would have been late behind 2096
    p.checkpoint()
    assert store.totals()[0] == 1 and store.max_ts[0] == T0


def test_a_believable_stored_newest_time_is_kept() -> None:
    store = MemoryStore()
    store.offsets[0], store.max_ts[0] = 5, T0 + 1000.0
    p = Pipeline(store, "t", IngestConfig(), IngestMetrics(CollectorRegistry()), Recording())
    p.assign([0])
    p.process(0, 5, msg(ev("a", 0.0)))
    p.checkpoint()
    assert p.summary.late == 1 and store.max_ts[0] == T0 + 1000.0


def test_lookahead_hands_every_message_over_in_order_parsed_once() -> None:
    rule = PlausibleTime(SKEW, LATENESS)
    got: list[tuple[int, int, int]] = []  # partition, offset, valid messages after it
    parser, calls = Parser(), []

    def parse(raw: bytes) -> Any:
        calls.append(raw)
        return parser.parse(raw)

    def process(partition: int, offset: int, raw: bytes, key: bytes | None = None, *,
                parsed: Any = None) -> None:
        assert parsed is not None
        got.append((partition, offset, len(rule.ahead)))

    # Nothing counted yet (the default ``newest``): every valid message is beyond the limit.
    ahead = Lookahead(rule, parse, process, 3)
    n = 4 * LOOKAHEAD
    for i in range(n):  # every fourth line invalid: held, but no support either way
        ahead.feed(i, msg(ev(f"x{i}", float(i))) if i % 4 != 3 else b"not json")
    assert [g[2] for g in got] == [LOOKAHEAD] * len(got)
    # held until LOOKAHEAD valid messages follow
    assert len(got) == sum(sum(1 for j in range(k + 1, n) if j % 4 != 3) >= LOOKAHEAD
                           for k in range(n))
    ahead.drain()
    assert [g[:2] for g in got] == [(3, i) for i in range(n)] and len(calls) == n
    assert not rule.ahead


def test_lookahead_holds_only_what_the_rule_may_judge() -> None:
    """Within the limit of the newest counted time, messages go straight through; one
    beyond it is held until LOOKAHEAD valid messages follow, then the rest flows again."""
    rule = PlausibleTime(SKEW, LATENESS)
    counted = [T0 + 100.0]
    got: list[tuple[int, int]] = []  # offset, valid messages after it when processed

    def process(partition: int, offset: int, raw: bytes, key: bytes | None = None, *,
                parsed: Any = None) -> None:
        got.append((offset, len(rule.ahead)))
        counted[0] = max([counted[0], *(e.ts for e in parsed[0])])

    ahead = Lookahead(rule, Parser().parse, process, 0, newest=lambda: counted[0])
    ahead.feed(0, msg(ev("a", 101.0)))
    ahead.feed(1, b"not json")
    assert got == [(0, 0), (1, 0)]  # nothing to judge: straight through
    jump = 100.0 + SKEW + 3600  # beyond the limit (offsets from T0): a quiet hour
    for i in range(2, 2 + LOOKAHEAD + 3):
        ahead.feed(i, msg(ev(f"b{i}", jump + i)))
    # the first after the jump waited for LOOKAHEAD followers; once it counted, everything
    # held was within the new limit and went through at once
    assert got[2] == (2, LOOKAHEAD)
    assert [o for o, _ in got] == list(range(2 + LOOKAHEAD + 3))
    assert not rule.ahead


def test_an_input_too_short_for_support_counts_unless_contradicted() -> None:
    p, _, _ = replayed([0.0])
    assert p.summary.events == 1
    p, _, _ = replayed([0.0, 1.0])
    assert p.summary.events == 2
    p, _, dead = replayed([2 * DAY, 0.0, 1.0])  # 2 of 2 after it go back: contradicted
    assert p.summary.events == 2 and p.summary.future == 1
    assert "only 0 of the next 2" in dead.reasons()[0]


def test_a_few_valid_lines_among_many_invalid_ones_count() -> None:
    store, dead = MemoryStore(), Recording()
    config = IngestConfig(allowed_lateness=LATENESS, max_future_skew=SKEW)
    rule = PlausibleTime(SKEW, LATENESS)
    p = Pipeline(store, "replay", config, IngestMetrics(CollectorRegistry()), dead, future=rule)
    p.assign([0])
    ahead = Lookahead(rule, p.parser.parse, p.process, 0, newest=lambda: p.newest(0))
    for i in range(200):
        ahead.feed(i, msg(ev(f"v{i}", float(i))) if i % 40 == 7 else b"{bad")
    ahead.drain()
    assert p.summary.events == 5 and p.summary.future == 0


def test_max_future_skew_is_a_positive_duration() -> None:
    from pydantic import ValidationError

    assert IngestConfig().max_future_skew == 300.0
    assert IngestConfig(max_future_skew="10m").max_future_skew == 600.0
    for bad in (0, "0s", "-1m", "soon"):
        with pytest.raises(ValidationError, match="max_future_skew"):
            IngestConfig(max_future_skew=bad)
