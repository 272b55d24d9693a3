"""Hostile names as Prometheus label values: ``/metrics`` stays one well-formed exposition
(prometheus_client's parser and ``promtool check metrics`` agree) and gives back each label
value exactly; the cardinality guard keeps the number of label sets bounded."""

from __future__ import annotations

import itertools
import subprocess

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from monitor.aggregate.guard import OVERFLOW
from monitor.api.app import create_app
from monitor.config import DetectionConfig, IngestConfig
from monitor.detect.engine import Detection
from monitor.exposition import DetectionCollector, RollupCounters, snapshot_view
from monitor.store.store import Store
from tests.fixtures.process import binary
from tests.hostile import FRAGMENTS, NASTY, count_into, event, hostile_text, names
from tests.monitor.api import TestClient

_sources = itertools.count()
PAIR = ("route", "target_model", "draft_model")


def scrape(store: Store, batch: list[dict[str, str]], config: IngestConfig | None = None
           ) -> tuple[str, set]:
    """Count ``batch`` through a pipeline feeding the rollup counters and the detectors,
    publish the detectors' view, and GET /metrics; the exposition and the pairs sent."""
    registry = CollectorRegistry()
    counters = RollupCounters(registry)
    detection = Detection(DetectionConfig())
    view = []
    registry.register(DetectionCollector(lambda: view[-1] if view else None))
    docs = [event(fields, i) for i, fields in enumerate(batch)]
    count_into(store, f"metrics-{next(_sources)}", docs, registry=registry, config=config,
               observer=detection, on_commit=[counters.observe])
    view.append(snapshot_view(detection))
    answer = TestClient(create_app(store, registry=registry)).get("/metrics")
    assert answer.status_code == 200
    pairs = {(f["route"], f["target.model"], f["draft.model"]) for f in batch}
    return answer.content.decode("utf-8"), pairs


def labels_of(text: str, name: str, keys: tuple[str, ...]) -> set[tuple[str, ...]]:
    return {tuple(s.labels[k] for k in keys)
            for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == name}


def promtool(text: str) -> None:
    lint = subprocess.run([binary("promtool"), "check", "metrics"], input=text.encode("utf-8"),
                          capture_output=True, timeout=60)
    assert (lint.returncode, lint.stderr) == (0, b""), lint.stderr.decode()[:2000]


@settings(max_examples=15, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(names(), min_size=1, max_size=6))
def test_label_values_come_back_exactly(store: Store, batch: list[dict[str, str]]) -> None:
    text, pairs = scrape(store, batch)
    assert labels_of(text, "specwatch_requests_total", PAIR) == pairs
    assert labels_of(text, "specwatch_drafted_tokens_total", PAIR) == pairs
    # the detectors' segment gauges carry the same names
    segments = labels_of(text, "specwatch_breakeven_cutoff_ratio", PAIR)
    assert segments == pairs
    routes = labels_of(text, "specwatch_e2e_latency_seconds_count", ("route",))
    assert routes == {(r,) for r, _, _ in pairs}
    promtool(text)


def test_the_whole_corpus_in_one_scrape(store: Store) -> None:
    """Every fragment as a route, target and draft model at once: one scrape promtool
    accepts, each value back exactly."""
    batch = [{"route": s, "target.model": s, "draft.model": s[::-1]}
             for s in dict.fromkeys(NASTY + [f + "\\" for f in FRAGMENTS])]
    text, pairs = scrape(store, batch)
    assert labels_of(text, "specwatch_requests_total", PAIR) == pairs
    promtool(text)


@settings(max_examples=5, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(hostile_text(1, 128), min_size=30, max_size=30, unique=True))
def test_label_sets_are_bounded_by_the_guard(store: Store, routes: list[str]) -> None:
    """A flood of new routes: past the guard's total cap they are one overflow label set,
    not one per name sent."""
    batch = [{"route": r, "target.model": r[::-1], "draft.model": str(i)}
             for i, r in enumerate(routes)]
    config = IngestConfig(max_series=10, max_series_per_route=2)
    text, _ = scrape(store, batch, config)
    pairs = labels_of(text, "specwatch_requests_total", PAIR)
    assert len(pairs) <= 2 * config.max_series + 1
    assert (OVERFLOW, OVERFLOW, OVERFLOW) in pairs
    segments = labels_of(text, "specwatch_breakeven_cutoff_ratio", PAIR)
    assert len(segments) <= 2 * config.max_series + 1
    promtool(text)
