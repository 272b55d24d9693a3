"""The change gauges in /metrics: the newest change per route and kind, its verdicts and
acceptance ratio, refreshed at most once a minute off the scrape thread, and a clean
exposition."""

from __future__ import annotations

import math
import subprocess
import threading

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from monitor.changes import JudgeSettings
from monitor.exposition_changes import ChangeCollector, newest_per_kind
from monitor.store.store import Store
from tests.monitor.changes.traffic import AT, OLD, change, commit, setup, three_changes


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _registry(store: Store, clock: Clock, **kw: object) -> CollectorRegistry:
    registry = CollectorRegistry()
    # wait=None: each due scrape shows the refresh it started, whatever the machine's load
    kw.setdefault("wait", None)
    registry.register(ChangeCollector.for_store(store, JudgeSettings(), clock=clock, **kw))
    return registry


def test_gauges_show_each_routes_newest_change(store: Store) -> None:
    three_changes(store)
    clock = Clock()
    registry = _registry(store, clock)

    def verdict(route: str, kind: str, metric: str) -> float | None:
        return registry.get_sample_value("specwatch_change_verdict",
                                         {"route": route, "kind": kind, "metric": metric})

    assert verdict("chat", "draft_drift", "overall") == 1.0
    assert verdict("chat", "draft_drift", "acceptance") == 1.0
    assert verdict("chat", "draft_drift", "ttft_p50") == 0.0
    assert verdict("code", "new_draft", "overall") == -1.0
    assert verdict("docs", "draft_drift", "overall") == 0.0
    ratio = registry.get_sample_value("specwatch_change_acceptance_ratio",
                                      {"route": "chat", "kind": "draft_drift"})
    assert ratio == pytest.approx(0.33 / 0.449, abs=0.03)
    assert registry.get_sample_value("specwatch_change_timestamp_seconds",
                                     {"route": "chat", "kind": "draft_drift"}) == AT

    # A newer change of chat's kind replaces the old one, once the cache is a minute old;
    # with five minutes of traffic it is insufficient: its verdicts are absent.
    newer = setup(target_revision="t3")
    commit(store, [], [change("chat-2", AT + 3 * 3600, setup(target_revision="t2"), newer)])
    assert verdict("chat", "draft_drift", "overall") == 1.0  # cached
    clock.t = 60.0
    assert verdict("chat", "draft_drift", "overall") is None
    assert registry.get_sample_value("specwatch_change_acceptance_ratio",
                                     {"route": "chat", "kind": "draft_drift"}) is None
    assert registry.get_sample_value("specwatch_change_timestamp_seconds",
                                     {"route": "chat", "kind": "draft_drift"}) == AT + 3 * 3600


def test_a_failing_store_keeps_the_last_gauges(store: Store, caplog: pytest.LogCaptureFixture
                                               ) -> None:
    three_changes(store)
    clock = Clock()
    collector = ChangeCollector.for_store(store, JudgeSettings(), clock=clock, wait=None)
    assert len(collector.judgements()) == 3
    calls = []

    def broken() -> list:
        calls.append(1)
        raise RuntimeError("database gone")

    collector.judge = broken
    clock.t = 61.0
    assert len(collector.judgements()) == 3 and "database gone" in caplog.text
    assert len(collector.judgements()) == 3 and len(calls) == 1  # retried after a minute
    clock.t = 122.0
    collector.judgements()
    assert len(calls) == 2


def test_a_scrape_does_not_wait_for_a_slow_refresh(store: Store) -> None:
    three_changes(store)
    clock = Clock()
    collector = ChangeCollector.for_store(store, JudgeSettings(), clock=clock, wait=None)
    first = collector.judgements()
    assert len(first) == 3
    store_judge, gate, calls = collector.judge, threading.Event(), []

    def slow() -> list:
        calls.append(1)
        gate.wait()  # the store read of a large store, held until the test lets it finish
        return list(store_judge())[:1]

    collector.judge, collector.wait = slow, 0.0
    clock.t = 60.0
    assert collector.judgements() == first  # the due refresh started; the scrape did not wait
    assert collector.judgements() == first and len(calls) == 1  # one refresh at a time
    registry = CollectorRegistry()
    registry.register(collector)
    assert registry.get_sample_value("specwatch_change_verdict", {
        "route": "chat", "kind": "draft_drift", "metric": "overall"}) == 1.0
    gate.set()
    assert collector.join()
    assert len(collector.judgements()) == 1 and len(calls) == 1  # fresh until the next minute
    assert collector.last_refresh_s is not None


def test_newest_per_kind_is_bounded() -> None:
    recs = [change(f"c{i}", 1000.0 + i, OLD, setup(target_revision=f"t{i + 2}"),
                  route=f"r{i % 3}")
            for i in range(9)]
    recs.append(change("k", 5000.0, OLD, setup(num_speculative_tokens="5"), route="r0"))
    newest = newest_per_kind(recs, 10)
    assert [(r.route, r.kind, r.change_id) for r in newest] == [
        ("r0", "draft_length", "k"), ("r2", "draft_drift", "c8"), ("r1", "draft_drift", "c7"),
        ("r0", "draft_drift", "c6")]
    assert [r.change_id for r in newest_per_kind(recs, 2)] == ["k", "c8"]


def test_promtool_check_metrics_is_clean(store: Store) -> None:
    three_changes(store)
    text = generate_latest(_registry(store, Clock()))
    for name in ("specwatch_change_verdict", "specwatch_change_acceptance_ratio",
                 "specwatch_change_timestamp_seconds"):
        assert f"\n# TYPE {name} gauge".encode() in text
    assert not any(math.isnan(float(line.rsplit(b" ", 1)[1]))
                   for line in text.splitlines() if not line.startswith(b"#"))
    done = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                          timeout=30, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")
