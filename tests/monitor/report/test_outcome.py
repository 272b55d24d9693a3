"""Task outcome and cost in the report: per series, the range's success and outcome rates,
GPU-seconds and cost per successful task equal sums over the committed events; the table and
the outcome chart are on the page, and a report without a price gives no cost."""

from __future__ import annotations

import random
import re
from datetime import timedelta

import pytest

from monitor.report.data import gather_report
from monitor.report.html import render_html
from monitor.store.store import Store
from monitor.telemetry.event import Event
from tests.monitor.store.helpers import T0, at, checkpoint, event

PRICE = 2.0  # per GPU-hour


def _events(revision: str, start: float, n: int, seed: int, *, tool_ok: float) -> list[Event]:
    rng = random.Random(seed)
    return [
        event(f"{revision}-{i}", start + 20 * i, "tools", status=rng.choice(("ok",) * 9 + ("x",)),
              target_revision=revision, outcome_ok=rng.choice((True, False, None)),
              outcome_tool_calls_valid=rng.random() < tool_ok,
              gpu_seconds=rng.uniform(0.2, 1.5), gpu_estimated=rng.random() < 0.5,
              itl_p50_ms=rng.uniform(8, 12), itl_p99_ms=rng.uniform(30, 60))
        for i in range(n)
    ]


@pytest.fixture
def filled(store: Store) -> tuple[Store, dict[str, list[Event]]]:
    by_rev = {"r1": _events("r1", T0, 300, 1, tool_ok=0.95),
              "r2": _events("r2", T0 + 6000, 300, 2, tool_ok=0.6)}
    for i, events in enumerate(by_rev.values()):
        store.commit(checkpoint(events, next_offset=i + 1, expected=i or None))
    return store, by_rev


def test_series_outcome_and_cost_equal_the_events(
        filled: tuple[Store, dict[str, list[Event]]]) -> None:
    store, by_rev = filled
    report = gather_report(store, "tools", since=at(T0), until=at(T0 + 4 * 3600),
                           granularity="minute", price_per_gpu_hour=PRICE)
    [view] = report.pairs
    assert view.outcome_reported
    assert [s.key.target_revision for s in view.series] == ["r1", "r2"]
    for s in view.series:
        events = by_rev[s.key.target_revision]
        o = s.outcome
        successes = sum(e.success for e in events)
        gpu = sum(e.gpu_seconds for e in events)  # type: ignore[misc]
        assert (o.requests, o.successes) == (len(events), successes)
        assert o.success_rate == pytest.approx(successes / len(events))
        ok = [e.outcome_ok for e in events if e.outcome_ok is not None]
        assert o.ok_rate == pytest.approx(sum(ok) / len(ok))
        assert o.outcome_ok_reported == len(ok)
        assert o.tool_calls_valid_rate == pytest.approx(
            sum(bool(e.outcome_tool_calls_valid) for e in events) / len(events))
        assert o.schema_valid_rate is None  # never reported: unknown, not 0
        assert o.gpu_seconds == pytest.approx(gpu)
        assert o.gpu_reported_requests == sum(not e.gpu_estimated for e in events)
        assert o.cost_per_success(PRICE) == pytest.approx(gpu / successes * PRICE / 3600)
        # per bucket: the minute rates, one per bucket with data
        assert len(s.success_rate) == len(s.times)
        minute = s.times[0]
        first = [e for e in events if at(e.ts - e.ts % 60) == minute]
        assert s.success_rate[0] == pytest.approx(sum(e.success for e in first) / len(first))
    old, new = view.series
    assert new.outcome.tool_calls_valid_rate < old.outcome.tool_calls_valid_rate - 0.2  # type: ignore[operator]

    page = render_html(report)
    assert page.count("<svg") == 5 and 'class="chart-outcome"' in page
    table = re.search(r'<table class="outcome">.*?</table>', page, re.S)
    assert table is not None
    cost = f"{old.outcome.cost_per_success(PRICE):.6f}"
    assert cost in table.group(0)
    assert f"{old.outcome.tool_calls_valid_rate:.3f} <small>(300)</small>" in table.group(0)
    assert "cost.price_per_gpu_hour</code> configured" not in page


def test_without_a_price_no_cost_and_without_outcomes_no_chart(store: Store) -> None:
    store.commit(checkpoint([event(f"e{i}", T0 + i, "plain", gpu_seconds=0.5)
                             for i in range(10)]))
    report = gather_report(store, "plain", since=at(T0), until=at(T0) + timedelta(hours=1))
    [view] = report.pairs
    [s] = view.series
    assert not view.outcome_reported
    assert s.outcome.cost_per_success(report.price_per_gpu_hour) is None
    assert s.outcome.successes_per_gpu_second == pytest.approx(2.0)
    page = render_html(report)
    assert page.count("<svg") == 4 and "chart-outcome" not in page
    assert "cost.price_per_gpu_hour</code> configured: cost is not given" in page
