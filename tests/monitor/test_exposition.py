"""The exposition against the real thing: a pipeline replaying simulated traffic into SQLite,
a real Detection, and ``promtool`` on what a scrape returns."""

from __future__ import annotations

import dataclasses
import subprocess
import tracemalloc
from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from alerts.metrics import AlertMetrics
from monitor.aggregate.bucket import BucketStats
from monitor.aggregate.sketch import LogHistogram, PackedHistogram
from monitor.config import DetectionConfig, IngestConfig
from monitor.deadletter import CountingDeadLetter
from monitor.detect.engine import Detection, Segment
from monitor.exposition import (
    RECOMMENDATIONS,
    SEGMENT_LABELS,
    DetectionCollector,
    DetectionView,
    PairCounters,
    RollupCounters,
    snapshot_view,
)
from monitor.metrics import IngestMetrics
from monitor.pipeline import Pipeline
from monitor.simulate import Simulator, scenario_config
from monitor.sources.replay import replay
from monitor.store.checkpoint import Checkpoint
from monitor.store.db import upgrade
from monitor.store.store import Store
from monitor.telemetry.event import Event
from tests.monitor.store.helpers import rollups_of


class Stack:
    """What the daemon wires for /metrics, on a replay: one registry with the ingest and
    alert metrics, the rollup counters on ``on_commit``, and a view published after each
    checkpoint for the detection collector."""

    def __init__(self, url: str, detection_config: DetectionConfig | None = None) -> None:
        self.store = Store(url)
        self.registry = CollectorRegistry()
        self.ingest = IngestMetrics(self.registry)
        self.alert_metrics = AlertMetrics(self.registry, ["slack"])
        self.counters = RollupCounters(self.registry)
        self.detection = Detection(detection_config or DetectionConfig(), clock="event")
        self.view: DetectionView | None = None
        self.registry.register(DetectionCollector(lambda: self.view))
        self.pipeline = Pipeline(
            self.store, "replay", IngestConfig(), self.ingest, CountingDeadLetter(),
            observer=self.detection, on_commit=[self.counters.observe, self.publish],
        )

    def publish(self, cp: Checkpoint) -> None:
        self.view = snapshot_view(self.detection)

    def replay(self, events: Iterable[dict], path: Path) -> None:
        path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
        replay(str(path), self.pipeline, progress=False)

    def close(self) -> None:
        self.store.close()


def sqlite_url(directory: Path) -> str:
    url = f"sqlite:///{directory / 'specwatch.db'}"
    upgrade(url)
    return url


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> Iterable[Stack]:
    """Two hours of five routes: long enough for every change-point detector to arm."""
    tmp = tmp_path_factory.mktemp("exposition")
    stack = Stack(sqlite_url(tmp))
    cfg = scenario_config("quiet", duration_s=2 * 3600, rate=6, seed=7,
                          start="2026-11-02T00:00:00Z")
    stack.replay(Simulator(cfg).events(), tmp / "traffic.jsonl")
    yield stack
    stack.close()


def segments(detection: Detection) -> list[Segment]:
    return list(detection._segments.values())


def labels_of(seg: Segment) -> dict[str, str]:
    return {name: seg.labels.get(name, "") for name in SEGMENT_LABELS}


def samples(registry: CollectorRegistry, name: str) -> list[dict[str, str]]:
    return [s.labels for family in registry.collect() for s in family.samples if s.name == name]


def exported(registry: CollectorRegistry) -> list[tuple[str, str]]:
    """(route, target_revision) of each exported segment (every one has a cutoff)."""
    return [(lab["route"], lab["target_revision"])
            for lab in samples(registry, "specwatch_breakeven_cutoff_ratio")]


# -- values ------------------------------------------------------------------------------------


def test_segment_gauges_equal_what_the_detectors_hold(replayed: Stack) -> None:
    get = replayed.registry.get_sample_value
    armed = 0
    for seg in segments(replayed.detection):
        lab = labels_of(seg)
        det, be, pos = seg.acceptance, seg.breakeven, seg.positions
        assert get("specwatch_acceptance_ratio", lab) == be.rate
        assert get("specwatch_mean_accepted_length", lab) == pos.tau
        survival = pos.survival
        assert survival, "the simulator reports accepted_per_position"
        for i, p in enumerate(survival, start=1):
            assert get("specwatch_position_acceptance_ratio", {**lab, "position": str(i)}) == p
        assert get("specwatch_position_acceptance_ratio",
                   {**lab, "position": str(len(survival) + 1)}) is None
        assert get("specwatch_acceptance_baseline_ratio", lab) == det.baseline
        assert get("specwatch_breakeven_cutoff_ratio", lab) == be.cutoff
        for rec in RECOMMENDATIONS:
            assert get("specwatch_recommendation", {**lab, "recommendation": rec}) == (
                1.0 if rec == be.recommendation else 0.0)
        if det.phase == "watch":
            armed += 1
            drop = get("specwatch_acceptance_detector_statistic", {**lab, "direction": "drop"})
            rise = get("specwatch_acceptance_detector_statistic", {**lab, "direction": "rise"})
            # the detector's own statistic is the larger of the two directions
            assert max(drop, rise) == det.statistic
            assert (drop, rise) == by_direction(det.snapshot()["state"])
            for direction in ("drop", "rise"):
                assert get("specwatch_acceptance_detector_threshold",
                           {**lab, "direction": direction}) == det.threshold == 1.0
    assert armed >= 3, "too little traffic to arm the change-point detectors"


def by_direction(state: dict) -> tuple[float, float]:
    """Largest CUSUM over its threshold per side, straight from the detector's state."""
    drop = max(s / h for side, s, h in zip(state["side"], state["s"], state["h"], strict=True)
               if side < 0)
    rise = max(s / h for side, s, h in zip(state["side"], state["s"], state["h"], strict=True)
               if side > 0)
    return drop, rise


def test_alerts_firing_counts_episodes(replayed: Stack) -> None:
    # translation runs at 0.35 against the 0.40 break-even: the only condition of quiet traffic
    assert samples(replayed.registry, "specwatch_alerts_firing") == [
        {"rule": "below_breakeven", "route": "translation", "severity": "warning"}]
    # the lifecycle's episodes, when given, replace the detectors' conditions
    view = snapshot_view(replayed.detection, [
        ("acceptance_drop", "chat", "warning"), ("acceptance_drop", "chat", "warning"),
        ("telemetry_stale", "code-assistant", "warning")])
    registry = CollectorRegistry()
    registry.register(DetectionCollector(lambda: view))
    get = registry.get_sample_value
    assert get("specwatch_alerts_firing",
               {"rule": "acceptance_drop", "route": "chat", "severity": "warning"}) == 2.0
    assert get("specwatch_alerts_firing",
               {"rule": "telemetry_stale", "route": "code-assistant",
                "severity": "warning"}) == 1.0
    assert len(samples(registry, "specwatch_alerts_firing")) == 2


def test_counters_equal_the_exact_rollup_sums(replayed: Stack) -> None:
    expected: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for key, stats in replayed.store.stats(granularity="minute").items():
        row = expected[(key.route, key.target_model, key.draft_model)]
        row[0] += stats.drafted_tokens
        row[1] += stats.accepted_tokens
        row[2] += stats.requests - stats.errors
        row[3] += stats.errors
    assert len(expected) == 5
    get = replayed.registry.get_sample_value
    for (route, target, draft), (drafted, accepted, ok, errors) in expected.items():
        pair = {"route": route, "target_model": target, "draft_model": draft}
        assert get("specwatch_drafted_tokens_total", pair) == drafted
        assert get("specwatch_accepted_tokens_total", pair) == accepted
        assert get("specwatch_requests_total", {**pair, "status": "ok"}) == ok
        assert get("specwatch_requests_total", {**pair, "status": "error"}) == errors
    assert sum(r[2] + r[3] for r in expected.values()) == replayed.pipeline.summary.events


def test_latency_quantiles_cover_the_last_five_minutes_in_base_units(replayed: Stack) -> None:
    store, get = replayed.store, replayed.registry.get_sample_value
    newest = max(r.bucket_start for r in store.ratios(granularity="minute"))
    since = datetime.fromtimestamp(newest.timestamp() - 4 * 60, UTC)
    for route in ("chat", "code-assistant", "creative-writing", "summarize", "translation"):
        recent, everything = BucketStats(), BucketStats()
        for stats in store.stats(granularity="minute", route=route, since=since).values():
            recent.merge(stats)
        for stats in store.stats(granularity="minute", route=route).values():
            everything.merge(stats)
        for name, sketch, total, factor in (
            ("specwatch_ttft_seconds", recent.ttft_ms, everything.ttft_ms, 1e-3),
            ("specwatch_e2e_latency_seconds", recent.e2e_ms, everything.e2e_ms, 1e-3),
            ("specwatch_decode_throughput_tokens_per_second", recent.decode_tps,
             everything.decode_tps, 1.0),
        ):
            for q in ("0.5", "0.99"):
                assert get(name, {"route": route, "quantile": q}) == pytest.approx(
                    sketch.quantile(float(q)) * factor, rel=1e-12)
            assert get(f"{name}_count", {"route": route}) == total.count
            assert get(f"{name}_sum", {"route": route}) == pytest.approx(
                total.total * factor, rel=1e-9)
    # a plausible size in seconds, not milliseconds
    assert 0.01 < get("specwatch_ttft_seconds", {"route": "chat", "quantile": "0.5"}) < 5


def test_promtool_check_metrics_is_clean(replayed: Stack) -> None:
    text = generate_latest(replayed.registry)
    for name in ("specwatch_acceptance_ratio", "specwatch_events_total",
                 "specwatch_notifications_total", "specwatch_ttft_seconds",
                 "specwatch_acceptance_detector_statistic", "specwatch_alerts_firing"):
        assert f"\n{name}".encode() in text
    done = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                          timeout=30, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")


# -- bounds --------------------------------------------------------------------------------------


def event(n: int, ts: float, route: str = "r", revision: str = "v1", k: int = 4,
          method: str | None = None, draft: str | None = "d") -> Event:
    """One request: 40 drafted, 24 accepted over 10 steps (k = 0: speculation off)."""
    spec = k > 0
    return Event(
        f"e{n}", ts, route, "ok", "t", revision, "tok", output_tokens=64, e2e_ms=900.0,
        ttft_ms=100.0, draft_model=draft, draft_revision="d1" if draft else None,
        draft_tokenizer="tok" if draft else None, has_spec=spec, num_speculative_tokens=k,
        drafted_tokens=40 if spec else 0, accepted_tokens=24 if spec else 0,
        verify_steps=10 if spec else None,
        accepted_per_position=(8, 7, 5, 4) if spec else None, method=method,
    )


def fresh_detection(**config: float) -> Detection:
    detection = Detection(DetectionConfig(**config), clock="event")
    detection.load({})
    return detection


def test_only_the_most_recently_active_segments_are_exported() -> None:
    detection = fresh_detection()
    n = 0
    for minute in range(3):
        for i in (3, 0, 7, 5, 1, 6, 2, 4):  # route r<i> last seen at minute 2, second i
            detection.observe(0, [event(n, minute * 60.0 + i, route=f"r{i}")])
            n += 1
    view = snapshot_view(detection, max_series=3)
    assert [row.labels[0] for row in view.segments] == ["r7", "r6", "r5"]
    # the collector caps too, newest first, whatever the view holds
    registry = CollectorRegistry()
    registry.register(DetectionCollector(lambda: snapshot_view(detection), max_series=2))
    assert exported(registry) == [("r7", "v1"), ("r6", "v1")]
    for family in registry.collect():
        routes = {s.labels["route"] for s in family.samples if "route" in s.labels}
        if family.name != "specwatch_alerts_firing":
            assert routes <= {"r7", "r6"}, family.name


def test_retired_segments_vanish_from_the_next_scrape() -> None:
    detection = fresh_detection(idle_pair_resolve=600.0)
    published: list[DetectionView] = []
    registry = CollectorRegistry()
    registry.register(DetectionCollector(lambda: published[-1] if published else None))
    assert exported(registry) == []
    # v1 serves until t=300, then a new target revision takes over: a new segment
    detection.observe(0, [event(i, 10.0 * i) for i in range(31)])
    detection.observe(0, [event(100 + i, 310.0 + 10 * i, revision="v2") for i in range(30)])
    published.append(snapshot_view(detection))
    assert sorted(exported(registry)) == [("r", "v1"), ("r", "v2")]
    # v1 idle for 600 s of event time: retired, gone from the next scrape
    detection.observe(0, [event(200 + i, 610.0 + 10 * i, revision="v2") for i in range(30)])
    published.append(snapshot_view(detection))
    assert exported(registry) == [("r", "v2")]
    assert all(s["target_revision"] == "v2"
               for s in samples(registry, "specwatch_position_acceptance_ratio"))


def test_speculation_off_is_not_exported_and_colliding_labels_keep_the_newest() -> None:
    detection = fresh_detection()
    detection.observe(0, [
        event(0, 0.0, route="off", k=0, draft=None),
        # the same labels but for the drafting method: the newer one is shown
        event(1, 10.0, route="x", method="ngram", draft=None),
        event(2, 20.0, route="x", method="eagle", draft=None),
        event(3, 20.0, route="x", method="eagle", draft=None),
    ])
    view = snapshot_view(detection)
    assert [(row.labels[0], row.labels[3], row.last_ts) for row in view.segments] == [
        ("x", "", 20.0)]


def test_a_view_is_a_frozen_copy() -> None:
    detection = fresh_detection()
    detection.observe(0, [event(i, float(i)) for i in range(50)])
    view = snapshot_view(detection)
    before = view.segments[0]
    detection.observe(0, [dataclasses.replace(event(100 + i, 60.0 + i), accepted_tokens=4)
                          for i in range(50)])
    assert view.segments[0] is before and before.acceptance_ratio == 24 / 40
    assert snapshot_view(detection).segments[0].acceptance_ratio == pytest.approx(28 / 80)
    with pytest.raises(dataclasses.FrozenInstanceError):
        before.acceptance_ratio = 0.0  # type: ignore[misc]


def test_nothing_published_yet_is_an_empty_but_valid_scrape() -> None:
    registry = CollectorRegistry()
    RollupCounters(registry)
    registry.register(DetectionCollector(lambda: None))
    text = generate_latest(registry)
    assert b"# TYPE specwatch_acceptance_ratio gauge" in text
    assert b"# TYPE specwatch_ttft_seconds summary" in text
    assert not [s for family in registry.collect() for s in family.samples]
    done = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                          timeout=30, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")


# -- per-scrape and per-checkpoint work ------------------------------------------------------


def _full_sort_rows(detection: Detection, max_series: int) -> list[tuple[tuple[str, ...], float]]:
    """What the view held when every live segment was sorted: the reference order."""
    live = [seg for seg in segments(detection) if seg.labels["num_speculative_tokens"] != "0"]
    live.sort(key=lambda seg: (-seg.last_ts, tuple(labels_of(seg).values())))
    rows: list[tuple[tuple[str, ...], float]] = []
    for seg in live:
        labels = tuple(labels_of(seg).values())
        if len(rows) < max_series and labels not in {r[0] for r in rows}:
            rows.append((labels, seg.last_ts))
    return rows


@pytest.mark.parametrize("max_series", [0, 7, 50, 200, 1000])
def test_the_newest_segments_are_those_of_a_full_sort(max_series: int) -> None:
    # 300 routes, each with three drafting methods that the labels leave out (colliding
    # labels), last seen at 60 distinct times (ties at every cut)
    detection = fresh_detection()
    n = 0
    for i in range(300):
        for method in ("ngram", "eagle", "medusa"):
            detection.observe(0, [event(n, float((i * 7 + len(method)) % 60), route=f"r{i}",
                                        method=method, draft=None)])
            n += 1
    assert len(segments(detection)) == 900
    view = snapshot_view(detection, max_series=max_series)
    assert [(row.labels, row.last_ts) for row in view.segments] == _full_sort_rows(
        detection, max_series)


def _latency_checkpoint(routes: range, minute: int, n0: int) -> Checkpoint:
    events = [event(n0 + 10 * r + j, minute * 60.0 + j, route=f"r{r}") for r in routes
              for j in range(3)]
    for i, e in enumerate(events):  # spread the sketches' values
        events[i] = dataclasses.replace(e, ttft_ms=50.0 + 7 * i, e2e_ms=800.0 + 13 * i)
    return Checkpoint("replay", rollups=rollups_of(events))


def _timeless(text: bytes) -> list[bytes]:
    """The exposition but for the counters' creation times (two registries, two times)."""
    return [ln for ln in text.splitlines() if b"_created{" not in ln]


def test_pair_counters_sum_checkpoints_and_hold_a_few_hundred_bytes_a_pair() -> None:
    clock = iter(range(1000, 2000))
    pairs = PairCounters(clock=lambda: float(next(clock)))
    registry = CollectorRegistry()
    registry.register(pairs)
    first = _latency_checkpoint(range(3), 0, 0)
    pairs.observe(first.rollups)
    pairs.observe(_latency_checkpoint(range(2, 4), 1, 100).rollups)
    get = registry.get_sample_value
    for r, (requests, created) in {0: (3, 1000.0), 2: (6, 1000.0), 3: (3, 1001.0)}.items():
        pair = {"route": f"r{r}", "target_model": "t", "draft_model": "d"}
        assert get("specwatch_requests_total", {**pair, "status": "ok"}) == requests
        assert get("specwatch_requests_total", {**pair, "status": "error"}) == 0
        assert get("specwatch_drafted_tokens_total", pair) == 40 * requests
        assert get("specwatch_accepted_tokens_total", pair) == 24 * requests
        assert get("specwatch_requests_created", {**pair, "status": "error"}) == created
        assert get("specwatch_drafted_tokens_created", pair) == created
    # memory: a Counter child per pair and counter held about 2.4 KB a pair
    many = PairCounters()
    key = next(iter(first.rollups))[0]
    deltas = {(key._replace(route=f"route-{i}"), 0): BucketStats() for i in range(2000)}
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        many.observe(deltas)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held / 2000 < 600


def test_closed_minutes_are_packed_and_late_deltas_still_count_in_them() -> None:
    # Every minute before the newest is held packed; a late delta for one is merged into
    # it: the quantiles are those of one window fed everything at once.
    checkpoints = [_latency_checkpoint(range(4), minute, 1000 * minute) for minute in range(4)]
    late = [_latency_checkpoint(range(1, 3), minute, 9000 + 100 * minute)
            for minute in (1, 2)]
    registry = CollectorRegistry()
    counters = RollupCounters(registry)
    for cp in [*checkpoints, *late]:
        counters.observe(cp)
    window = counters.latency._window
    for route in (f"r{r}" for r in range(4)):
        assert sorted(window[route]) == [0, 60, 120, 180]
        assert {type(s) for m in (0, 60, 120) for s in window[route][m]} == {PackedHistogram}
        assert {type(s) for s in window[route][180]} == {LogHistogram}
    at_once = CollectorRegistry()
    everything = Checkpoint("replay", rollups={})
    for cp in [*checkpoints, *late]:
        for key, stats in cp.rollups.items():
            if key in everything.rollups:
                everything.rollups[key].merge(stats)
            else:
                everything.rollups[key] = stats
    RollupCounters(at_once).observe(everything)
    def quantiles(text: bytes) -> list[bytes]:
        return [ln for ln in text.splitlines() if b'quantile="' in ln]

    assert quantiles(generate_latest(registry)) == quantiles(generate_latest(at_once))
    assert len(quantiles(generate_latest(at_once))) == 4 * 3 * 2
    for route in ("r0", "r1"):
        expected = LogHistogram()
        for (key, _), stats in everything.rollups.items():
            if key.route == route:
                expected.merge(stats.ttft_ms)
        for q in (0.5, 0.99):
            assert registry.get_sample_value(
                "specwatch_ttft_seconds", {"route": route, "quantile": f"{q:g}"}
            ) == expected.quantile(q) * 1e-3


def test_a_scrape_merges_the_latency_window_of_changed_routes_only(
        monkeypatch: pytest.MonkeyPatch) -> None:
    checkpoints = [_latency_checkpoint(range(20), minute, 1000 * minute)
                   for minute in range(4)]
    registry = CollectorRegistry()
    counters = RollupCounters(registry)
    for cp in checkpoints:
        counters.observe(cp)
    merges: list[int] = []
    real_merge, real_add = LogHistogram.merge, PackedHistogram.add_to

    def counted(self: LogHistogram, other: LogHistogram) -> None:
        merges.append(1)
        real_merge(self, other)

    def counted_packed(self: PackedHistogram, other: LogHistogram) -> None:
        merges.append(1)  # a closed minute, packed: merged into the window's sketch
        real_add(self, other)

    monkeypatch.setattr(LogHistogram, "merge", counted)
    monkeypatch.setattr(PackedHistogram, "add_to", counted_packed)
    first = generate_latest(registry)
    assert len(merges) == 20 * 3 * 4  # every route's three sketches over four minutes
    merges.clear()
    assert generate_latest(registry) == first and merges == []
    # one route gets a minute more, the window (five minutes) keeps every route's four
    late = _latency_checkpoint(range(3, 4), 4, 9000)
    counters.observe(late)
    merges.clear()
    text = generate_latest(registry)
    assert len(merges) == 3 * 5
    fresh = CollectorRegistry()
    fresh_counters = RollupCounters(fresh)
    for cp in [*checkpoints, late]:
        fresh_counters.observe(cp)
    assert _timeless(text) == _timeless(generate_latest(fresh))
    # a minute that moves the window end expires every route's oldest: all are merged anew
    counters.observe(_latency_checkpoint(range(0, 1), 5, 9500))
    merges.clear()
    generate_latest(registry)
    assert len(merges) == 3 * 5 + 19 * 3 * 3
