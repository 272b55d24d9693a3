"""Task outcome and cost in /metrics: counters equal to sums over the events, ratios over the
last minutes of event time, cost only with a price, bounded pairs, a clean exposition."""

from __future__ import annotations

import json
import math
import random
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from monitor.aggregate.sketch import LogHistogram
from monitor.config import IngestConfig
from monitor.deadletter import CountingDeadLetter
from monitor.exposition_outcome import Minute, OutcomeCollector
from monitor.metrics import IngestMetrics
from monitor.pipeline import Pipeline
from monitor.sources.replay import replay
from monitor.store.checkpoint import Checkpoint
from monitor.store.db import upgrade
from monitor.store.store import Store
from monitor.telemetry.event import Event
from tests.deploy import documented_metrics
from tests.monitor.store.helpers import T0, rollups_of

PAIR = {"route": "code", "target_model": "llama-70b", "draft_model": "llama-1b"}


def _event(i: int, ts: float, rng: random.Random, route: str = "code",
           draft: str = "llama-1b") -> Event:
    ok = rng.choice((True, False, None))
    return Event(
        f"r{route}{draft}{i}", ts, route, "ok" if rng.random() < 0.9 else "error",
        "llama-70b", "r1", "llama3", output_tokens=20, e2e_ms=rng.uniform(100, 900),
        ttft_ms=50.0, has_spec=True, num_speculative_tokens=4, drafted_tokens=8,
        accepted_tokens=5, draft_model=draft, draft_revision="d1", draft_tokenizer="llama3",
        method="draft_model", outcome_ok=ok,
        outcome_schema_valid=rng.choice((True, False, None)),
        outcome_tool_calls_valid=rng.choice((True, None)),
        gpu_seconds=rng.uniform(0.1, 2.0), gpu_estimated=rng.random() < 0.3,
        itl_p50_ms=rng.uniform(10, 20), itl_p99_ms=rng.uniform(40, 80),
    )


def _registry(**kw: object) -> tuple[CollectorRegistry, OutcomeCollector]:
    registry = CollectorRegistry()
    collector = OutcomeCollector(**kw)  # type: ignore[arg-type]
    registry.register(collector)
    return registry, collector


def _feed(collector: OutcomeCollector, events: list[Event], per_checkpoint: int = 37) -> None:
    for i in range(0, len(events), per_checkpoint):
        collector.observe(Checkpoint("replay", rollups=rollups_of(events[i:i + per_checkpoint])))


def test_counters_and_window_ratios_equal_sums_over_the_events() -> None:
    rng = random.Random(7)
    # 20 minutes, 10 events a minute: the 5-minute window holds the last 50
    events = [_event(i, T0 + i * 6.0, rng) for i in range(200)]
    registry, collector = _registry(price_per_gpu_hour=2.5)
    _feed(collector, events)

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, {**PAIR, **labels})

    assert value("specwatch_task_successes_total") == sum(e.success for e in events)
    assert value("specwatch_gpu_seconds_total") == pytest.approx(
        sum(e.gpu_seconds for e in events))  # type: ignore[misc]
    assert value("specwatch_gpu_seconds_requests_total", source="estimated") == sum(
        e.gpu_estimated for e in events)
    assert value("specwatch_gpu_seconds_requests_total", source="reported") == sum(
        not e.gpu_estimated for e in events)
    for outcome, attr in (("ok", "outcome_ok"), ("schema_valid", "outcome_schema_valid"),
                          ("tool_calls_valid", "outcome_tool_calls_valid")):
        for result in (True, False):
            got = value("specwatch_task_outcomes_total", outcome=outcome,
                        result=str(result).lower())
            assert got == sum(getattr(e, attr) is result for e in events), (outcome, result)

    window = [e for e in events if e.ts >= T0 + 15 * 60]
    assert len(window) == 50
    successes = sum(e.success for e in window)
    gpu = sum(e.gpu_seconds for e in window)  # type: ignore[misc]
    assert value("specwatch_task_success_ratio") == pytest.approx(successes / len(window))
    assert value("specwatch_successes_per_gpu_second") == pytest.approx(successes / gpu)
    assert value("specwatch_cost_per_successful_task") == pytest.approx(
        gpu / successes * 2.5 / 3600)
    reported = [e for e in window if e.outcome_schema_valid is not None]
    assert value("specwatch_task_outcome_ratio", outcome="schema_valid") == pytest.approx(
        sum(e.outcome_schema_valid for e in reported) / len(reported))  # type: ignore[misc]
    assert value("specwatch_task_outcome_ratio", outcome="tool_calls_valid") == 1.0
    # quantiles of the sketches: within their 1% relative accuracy
    p50s = sorted(e.itl_p50_ms for e in window)  # type: ignore[type-var]
    assert value("specwatch_itl_p50_seconds") == pytest.approx(
        p50s[len(p50s) // 2 - 1] / 1000, rel=0.03)  # type: ignore[operator]
    p99s = sorted(e.itl_p99_ms for e in window)  # type: ignore[type-var]
    assert value("specwatch_itl_p99_seconds") == pytest.approx(max(p99s) / 1000, rel=0.03)  # type: ignore[type-var]


def test_no_price_no_cost_and_unreported_outcomes_absent() -> None:
    e = Event("a", float(T0), "code", "ok", "llama-70b", "r1", "llama3", output_tokens=1,
              e2e_ms=100.0, gpu_seconds=0.5, draft_model="llama-1b")
    registry, collector = _registry()
    collector.observe(Checkpoint("replay", rollups=rollups_of([e])))
    assert registry.get_sample_value("specwatch_cost_per_successful_task", PAIR) is None
    assert registry.get_sample_value("specwatch_successes_per_gpu_second", PAIR) == 2.0
    for outcome in ("ok", "schema_valid", "tool_calls_valid"):
        assert registry.get_sample_value("specwatch_task_outcome_ratio",
                                         {**PAIR, "outcome": outcome}) is None
        assert registry.get_sample_value("specwatch_task_outcomes_total",
                                         {**PAIR, "outcome": outcome, "result": "true"}) is None
    assert registry.get_sample_value("specwatch_itl_p50_seconds", PAIR) is None
    # a status-error request without outcome.ok is a failed task
    bad = Event("b", float(T0), "code", "timeout", "llama-70b", "r1", "llama3",
                output_tokens=0, e2e_ms=100.0, gpu_seconds=0.5, draft_model="llama-1b")
    collector.observe(Checkpoint("replay", rollups=rollups_of([bad])))
    assert registry.get_sample_value("specwatch_task_success_ratio", PAIR) == 0.5
    assert registry.get_sample_value("specwatch_task_successes_total", PAIR) == 1.0


def test_a_silent_pair_keeps_its_counters_but_loses_its_ratios() -> None:
    rng = random.Random(3)
    registry, collector = _registry(window_minutes=5)
    old = [_event(i, T0 + i, rng, draft="old") for i in range(10)]
    new = [_event(i, T0 + 600 + i, rng, draft="new") for i in range(10)]
    _feed(collector, old + new)
    old_pair = {**PAIR, "draft_model": "old"}
    assert registry.get_sample_value("specwatch_task_successes_total", old_pair) == sum(
        e.success for e in old)
    assert registry.get_sample_value("specwatch_task_success_ratio", old_pair) is None
    assert registry.get_sample_value("specwatch_task_success_ratio",
                                     {**PAIR, "draft_model": "new"}) == pytest.approx(
        sum(e.success for e in new) / 10)


def test_a_pair_keeps_counts_since_start_and_only_the_packed_gap_sketches_of_its_window() -> None:
    # The gauges read counts since start and, over the window, the inter-token gaps: a pair's
    # whole latency distribution since start, or its minutes' other sketches, would only be
    # memory (at thousands of pairs, most of the exposition's).
    rng = random.Random(9)
    registry, collector = _registry(window_minutes=5)
    events = [_event(i, T0 + 30.0 * i, rng) for i in range(40)]  # 20 minutes
    _feed(collector, events, per_checkpoint=3)
    generate_latest(registry)  # a scrape merges the window
    ((_, held),) = collector.exported()
    assert held.total.requests == len(events)
    assert not hasattr(held.total, "ttft_ms") and not hasattr(held.total, "itl_p50_ms")
    assert sorted(held.window) == [T0 + 60 * m for m in range(15, 20)]
    # closed minutes packed, the newest open
    assert [held.window[T0 + 60 * m].packed for m in range(15, 20)] == [True] * 4 + [False]
    # late requests for a closed (packed) minute count in it
    late = [_event(100 + i, T0 + 16 * 60 + i, rng) for i in range(3)]
    _feed(collector, late)
    assert held.window[T0 + 16 * 60].packed  # packed again once merged
    recent = [e for e in events + late if e.ts >= T0 + 15 * 60]
    merged = held.window_stats()
    assert merged.counts.requests == len(recent)
    for gaps, name, q in zip(merged.gaps, ("itl_p50_ms", "itl_p99_ms"), (0.5, 0.99),
                             strict=True):
        expected = LogHistogram()
        for e in recent:
            expected.update(getattr(e, name))
        assert gaps.count == len(recent)
        assert gaps.quantile(q) == expected.quantile(q)
    assert registry.get_sample_value("specwatch_itl_p99_seconds", PAIR) == (
        merged.gaps[1].quantile(0.99) / 1000.0)
    assert registry.get_sample_value("specwatch_task_success_ratio", PAIR) == pytest.approx(
        sum(e.success for e in recent) / len(recent))


def test_pairs_are_bounded_by_max_series_most_recent_first() -> None:
    rng = random.Random(5)
    registry, collector = _registry(max_series=2)
    events = [_event(i, T0 + 60 * i, rng, draft=f"d{i}") for i in range(4)]
    _feed(collector, events, per_checkpoint=1)
    drafts = {s.labels["draft_model"] for m in registry.collect() for s in m.samples}
    assert drafts == {"d2", "d3"}


def test_promtool_check_metrics_is_clean() -> None:
    rng = random.Random(11)
    registry, collector = _registry(price_per_gpu_hour=1.0)
    _feed(collector, [_event(i, T0 + i * 6.0, rng, route=r) for r in ("code", "chat")
                      for i in range(50)])
    text = generate_latest(registry)
    for name, kind in (("specwatch_task_successes_total", "counter"),
                       ("specwatch_task_outcomes_total", "counter"),
                       ("specwatch_gpu_seconds_total", "counter"),
                       ("specwatch_task_success_ratio", "gauge"),
                       ("specwatch_cost_per_successful_task", "gauge")):
        assert f"\n# TYPE {name} {kind}".encode() in b"\n" + text
    assert not any(math.isnan(float(line.rsplit(b" ", 1)[1]))
                   for line in text.splitlines() if not line.startswith(b"#"))
    if shutil.which("promtool") is None:
        pytest.skip("promtool not installed")
    done = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                          timeout=30, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")


def test_wired_on_commit_the_counters_equal_the_store(tmp_path: Path) -> None:
    """As the daemon wires it: ``observe`` on the pipeline's ``on_commit``, counters equal
    the committed rollups (GPU time estimated by the pipeline where a request has none)."""
    url = f"sqlite:///{tmp_path / 'specwatch.db'}"
    upgrade(url)
    store = Store(url)
    registry, collector = _registry(price_per_gpu_hour=1.0)
    pipeline = Pipeline(store, "replay", IngestConfig(), IngestMetrics(CollectorRegistry()),
                        CountingDeadLetter(), on_commit=[collector.observe])
    rng = random.Random(2)
    lines = []
    for i in range(400):
        e = {"request_id": f"w{i}", "ts": T0 + i * 3.0, "route": "code", "status": "ok",
             "target": {"model": "llama-70b", "revision": "r1", "tokenizer": "llama3"},
             "output_tokens": 20, "e2e_ms": rng.uniform(100, 900), "batch_size": 4}
        if i % 3:
            e["outcome"] = {"ok": rng.random() < 0.7, "tool_calls_valid": rng.random() < 0.9}
        if i % 2:
            e["gpu_seconds"] = rng.uniform(0.1, 1.0)
        lines.append(json.dumps(e) + "\n")
    path = tmp_path / "t.jsonl"
    path.write_text("".join(lines), encoding="utf-8")
    try:
        replay(str(path), pipeline, progress=False)
        [stats] = store.stats(granularity="day").values()
    finally:
        store.close()
    pair = {"route": "code", "target_model": "llama-70b", "draft_model": ""}
    assert stats.requests == 400
    assert registry.get_sample_value("specwatch_task_successes_total", pair) == stats.successes
    assert registry.get_sample_value("specwatch_gpu_seconds_total", pair) == pytest.approx(
        stats.gpu_seconds)
    assert registry.get_sample_value("specwatch_gpu_seconds_requests_total",
                                     {**pair, "source": "reported"}) == 200
    assert registry.get_sample_value(
        "specwatch_task_outcomes_total", {**pair, "outcome": "tool_calls_valid",
                                          "result": "true"}) == stats.tool_calls_valid_true


def test_every_family_is_documented_with_its_labels() -> None:
    rng = random.Random(13)
    registry, collector = _registry(price_per_gpu_hour=1.0)
    _feed(collector, [_event(i, T0 + i * 6.0, rng) for i in range(30)])
    documented = documented_metrics()
    for family in registry.collect():
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            assert sample.name in documented, sample.name
            assert set(sample.labels) <= documented[sample.name], sample.name


def test_a_scrape_merges_the_window_of_changed_pairs_only(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(5)
    drafts = [f"d{i}" for i in range(12)]
    checkpoints = [Checkpoint("replay", rollups=rollups_of(
        [_event(m * 100 + i, T0 + m * 60.0 + i, rng, draft=d) for i, d in enumerate(drafts)]))
        for m in range(3)]
    registry, collector = _registry(price_per_gpu_hour=2.0)
    for cp in checkpoints:
        collector.observe(cp)
    merges: list[int] = []
    real_merge = Minute.merge

    def counted(self: Minute, other: Minute) -> None:
        merges.append(1)
        real_merge(self, other)

    monkeypatch.setattr(Minute, "merge", counted)
    first = generate_latest(registry)
    assert len(merges) == 12 * 3  # every pair's three minutes
    merges.clear()
    assert generate_latest(registry) == first and merges == []
    late = Checkpoint("replay", rollups=rollups_of([_event(999, T0 + 90.0, rng, draft="d4")]))
    collector.observe(late)
    merges.clear()
    text = generate_latest(registry)
    assert len(merges) == 3  # d4's minutes, one of them with the late request in it
    fresh, fresh_collector = _registry(price_per_gpu_hour=2.0)
    for cp in [*checkpoints, late]:
        fresh_collector.observe(cp)
    assert text == generate_latest(fresh)
