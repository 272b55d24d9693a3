"""The ingest pipeline's counting rules, on a store kept in memory."""

from __future__ import annotations

from collections.abc import Iterable

import orjson
import pytest
from prometheus_client import CollectorRegistry

from monitor.aggregate.bucket import BucketStats
from monitor.config import IngestConfig
from monitor.deadletter import CountingDeadLetter
from monitor.metrics import IngestMetrics
from monitor.pipeline import Pipeline
from monitor.store.checkpoint import Checkpoint, PartitionState
from monitor.store.exceptions import FencedError
from tests.monitor.telemetry.bad_inputs import valid_event


class MemoryStore:
    """Just enough of the store contract to watch what a pipeline commits."""

    def __init__(self) -> None:
        self.rollups: dict = {}
        self.offsets: dict[int, int] = {}
        self.max_ts: dict[int, float | None] = {}
        self.ids: dict[int, dict[str, float]] = {}
        self.state: dict = {}
        self.alerts: list = []
        self.commits = 0

    def commit(self, cp: Checkpoint) -> None:
        for pc in cp.partitions:
            if self.offsets.get(pc.partition) != pc.expected_offset:
                raise FencedError(f"partition {pc.partition}")
        for pc in cp.partitions:
            self.offsets[pc.partition] = pc.next_offset
            self.max_ts[pc.partition] = pc.max_event_ts
            ids = self.ids.setdefault(pc.partition, {})
            ids.update(pc.new_ids)
            if pc.prune_before is not None:
                for rid in [r for r, ts in ids.items() if ts < pc.prune_before]:
                    del ids[rid]
        for key, delta in cp.rollups.items():
            self.rollups.setdefault(key, BucketStats()).merge(delta)
        self.state.update(cp.state)
        self.alerts.extend(cp.alerts)
        self.commits += 1

    def load_partitions(self, source: str, partitions: Iterable[int]) -> dict[int, PartitionState]:
        return {
            p: PartitionState(self.offsets[p], self.max_ts[p], dict(self.ids.get(p, {})))
            for p in partitions
            if p in self.offsets
        }

    def load_state(self, source: str, prefix: str = "") -> dict:
        return {k: v for k, v in self.state.items() if k.startswith(prefix)}

    def totals(self) -> tuple[int, int, int]:
        b = BucketStats()
        for v in self.rollups.values():
            b.merge(v)
        return b.requests, b.drafted_tokens, b.accepted_tokens


def make(store: MemoryStore, **cfg: float) -> tuple[Pipeline, CountingDeadLetter, IngestMetrics]:
    dl = CountingDeadLetter()
    metrics = IngestMetrics(CollectorRegistry())
    pipeline = Pipeline(store, "test", IngestConfig(**cfg), metrics, dl)
    pipeline.assign([0])
    return pipeline, dl, metrics


def msg(*events: dict) -> bytes:
    return orjson.dumps(list(events) if len(events) != 1 else events[0])


T0 = 1_792_999_980.0  # 2026-10-26, on a minute boundary: times before 2000 are rejected


def ev(rid: str, ts: float, drafted: int = 10, accepted: int = 7, route: str = "code") -> dict:
    return valid_event(
        request_id=rid, ts=T0 + ts, route=route,
        spec={"num_speculative_tokens": 5, "drafted_tokens": drafted,
              "accepted_tokens": accepted},
    )


def test_counts_each_request_once_across_messages_and_checkpoints() -> None:
    store = MemoryStore()
    p, _, metrics = make(store)
    p.process(0, 0, msg(ev("a", 1000.0), ev("b", 1001.0)))
    p.checkpoint()
    p.process(0, 1, msg(ev("a", 1000.0)))  # a producer retry, after a checkpoint
    p.process(0, 2, msg(ev("b", 1001.0), ev("c", 1002.0)))
    p.checkpoint()
    assert store.totals() == (3, 30, 21)
    assert metrics.registry.get_sample_value("specwatch_duplicate_events_total") == 2.0
    assert store.offsets[0] == 3


def test_dedup_survives_a_restart_from_the_store() -> None:
    store = MemoryStore()
    p, _, _ = make(store)
    p.process(0, 0, msg(ev("a", 1000.0)))
    p.checkpoint()
    restarted, _, _ = make(store)
    restarted.process(0, 1, msg(ev("a", 1000.0), ev("b", 1000.5)))
    restarted.checkpoint()
    assert store.totals()[0] == 2


def test_late_events_beyond_the_allowance_go_to_the_dead_letter() -> None:
    store = MemoryStore()
    p, dl, metrics = make(store, allowed_lateness=60.0, dedup_horizon=60.0)
    p.process(0, 0, msg(ev("a", 10_000.0)))
    p.process(0, 1, msg(ev("in-allowance", 10_000.0 - 59.0)))
    p.process(0, 2, msg(ev("too-late", 10_000.0 - 61.0)))
    p.checkpoint()
    assert store.totals()[0] == 2
    assert dl.count == 1
    assert metrics.registry.get_sample_value("specwatch_late_events_total") == 1.0
    assert metrics.registry.get_sample_value("specwatch_invalid_events_total") == 0.0


class RecordingObserver:
    """Records what the detectors are fed (an EventObserver with nothing to decide)."""

    loaded = True
    pending = False
    now = 0.0

    def __init__(self) -> None:
        self.fed: list[str] = []
        self.owned: set[int] = set()

    def observe(self, partition: int, events: list) -> None:
        self.fed.extend(e.request_id for e in events)

    def drain(self) -> list:
        return []

    def drain_changes(self) -> list:
        return []

    def snapshot(self) -> dict:
        return {}

    def drop_all(self) -> None:
        pass

    def load(self, states: object) -> None:
        pass


def test_late_events_within_the_horizon_count_in_the_tables_not_in_the_detectors() -> None:
    store = MemoryStore()
    dl = CountingDeadLetter()
    metrics = IngestMetrics(CollectorRegistry())
    seen = RecordingObserver()
    p = Pipeline(store, "test", IngestConfig(allowed_lateness=60.0, dedup_horizon=600.0),
                 metrics, dl, observer=seen)
    p.assign([0])
    p.process(0, 0, msg(ev("a", 10_000.0)))
    p.process(0, 1, msg(ev("on-time", 10_000.0 - 59.0), ev("late", 10_000.0 - 599.0)))
    p.process(0, 2, msg(ev("late", 10_000.0 - 599.0)))  # its duplicate: still remembered
    p.process(0, 3, msg(ev("beyond", 10_000.0 - 601.0)))
    p.checkpoint()
    assert store.totals()[0] == 3  # a, on-time, late
    assert seen.fed == ["a", "on-time"]  # the detectors decide in event-time order
    assert dl.count == 1  # beyond the horizon: a duplicate could not be told apart
    sample = metrics.registry.get_sample_value
    assert sample("specwatch_late_counted_events_total") == 1.0
    assert sample("specwatch_late_events_total") == 1.0
    assert sample("specwatch_duplicate_events_total") == 1.0
    assert p.summary.late_counted == 1 and p.summary.late == 1
    assert "1 late but counted, 1 late" in p.summary.line()


def test_invalid_events_are_counted_and_valid_neighbours_kept() -> None:
    store = MemoryStore()
    p, dl, metrics = make(store)
    bad = ev("bad", 1000.0, drafted=3, accepted=4)
    p.process(0, 0, msg(ev("ok1", 1000.0), bad, ev("ok2", 1000.0)))
    p.process(0, 1, b"{not json")
    p.checkpoint()
    assert store.totals()[0] == 2
    assert dl.count == 2
    assert metrics.registry.get_sample_value("specwatch_invalid_events_total") == 2.0


def test_fenced_checkpoint_drops_state_and_resumes_from_the_store() -> None:
    store = MemoryStore()
    p, _, metrics = make(store)
    p.process(0, 0, msg(ev("a", 1000.0)))
    assert p.checkpoint()
    p.process(0, 1, msg(ev("b", 1000.0)))
    store.offsets[0] = 5  # another consumer moved on
    assert not p.checkpoint()
    assert p.partitions == []
    assert metrics.registry.get_sample_value("specwatch_checkpoint_fenced_total") == 1.0
    assert p.assign([0]) == {0: 5}
    assert store.totals()[0] == 1


def test_events_land_in_minute_buckets_of_their_event_time() -> None:
    store = MemoryStore()
    p, _, _ = make(store)
    p.process(0, 0, msg(ev("a", 120.0), ev("b", 179.9), ev("c", 180.0)))
    p.checkpoint()
    starts = sorted(minute - int(T0) for (_, minute) in store.rollups)
    assert starts == [120, 180]


def test_no_draft_requests_are_not_zero_acceptance() -> None:
    store = MemoryStore()
    p, _, _ = make(store)
    p.process(0, 0, msg(ev("a", 100.0, drafted=10, accepted=8), ev("b", 100.0, 0, 0)))
    p.checkpoint()
    (bucket,) = store.rollups.values()
    assert bucket.acceptance_rate == pytest.approx(0.8)
    assert (bucket.spec_requests, bucket.drafting_requests) == (2, 1)


def test_checkpoint_is_due_by_events_or_time() -> None:
    now = [0.0]
    store = MemoryStore()
    p = Pipeline(store, "t", IngestConfig(checkpoint_interval=5.0, checkpoint_max_events=3),
                 IngestMetrics(CollectorRegistry()), CountingDeadLetter(), clock=lambda: now[0])
    p.assign([0])
    p.process(0, 0, msg(ev("a", 1.0), ev("b", 1.0)))
    assert not p.due()
    p.process(0, 1, msg(ev("c", 1.0)))
    assert p.due()
    p.checkpoint()
    assert not p.due()
    now[0] = 5.0
    assert p.due()


def test_a_failed_checkpoint_forgets_everything_uncommitted() -> None:
    store = MemoryStore()
    p, _, _ = make(store)
    p.process(0, 0, msg(ev("a", 1.0)))
    assert p.checkpoint()

    def broken(cp: Checkpoint) -> None:
        raise RuntimeError("database went away")

    p.process(0, 1, msg(ev("b", 2.0)))
    store.commit, real = broken, store.commit  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        p.checkpoint()
    assert p.partitions == []
    store.commit = real  # type: ignore[method-assign]
    assert p.assign([0]) == {0: 1}  # resume after the last committed message
    p.process(0, 1, msg(ev("b", 2.0)))
    assert p.checkpoint()
    assert store.totals()[0] == 2


def test_revoke_hands_detector_state_over_through_the_store() -> None:
    from monitor.config import DetectionConfig
    from monitor.detect.engine import Detection

    store = MemoryStore()
    detection = Detection(DetectionConfig())
    p = Pipeline(store, "t", IngestConfig(), IngestMetrics(CollectorRegistry()),
                 CountingDeadLetter(), observer=detection)
    p.assign([0])
    p.process(0, 0, msg(ev("a", 1.0), ev("b", 2.0)))
    p.revoke([0])
    assert not detection.loaded and any(k.startswith("detect/route/") for k in store.state)
    p.assign([0])  # e.g. the partition came back after a rebalance
    assert detection.loaded and detection.owned == {0}
    assert [s["labels"]["route"] for s in detection.recommendations()] == ["code"]


def test_a_large_checkpoint_hands_its_freed_peak_back_to_the_system(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from monitor import heap

    released: list[str] = []
    monkeypatch.setattr(heap, "release", lambda: released.append("release") or True)
    monkeypatch.setattr(heap, "TRIM_AFTER_ROWS", 50)
    store = MemoryStore()
    real = store.commit
    monkeypatch.setattr(store, "commit", lambda cp: released.append("commit") or real(cp))
    p, _, _ = make(store)
    p.process(0, 0, msg(*(ev(f"s{i}", 1000.0 + i) for i in range(10))))  # 10 minute rows
    p.checkpoint()
    assert released == ["commit"]  # a small checkpoint leaves too little behind to trim
    p.process(0, 1, msg(*(ev(f"l{i}", 2000.0 + 60 * i) for i in range(60))))  # 60 minutes
    p.checkpoint()
    # the pending columns' buffers before the commit (its peak would stack on them), then
    # what the commit freed
    assert released == ["commit", "release", "commit", "release"]
    assert store.totals()[0] == 70


def test_a_checkpoint_runs_without_the_cyclic_collector_and_restores_it() -> None:
    import gc

    store = MemoryStore()
    p, _, _ = make(store)
    seen: list[bool] = []
    real = store.commit

    def commit(cp: Checkpoint) -> None:
        seen.append(gc.isenabled())
        real(cp)

    def broken(cp: Checkpoint) -> None:
        raise RuntimeError("database went away")

    store.commit = commit  # type: ignore[method-assign]
    p.process(0, 0, msg(ev("a", 1.0)))
    assert p.checkpoint() and seen == [False] and gc.isenabled()
    p.process(0, 1, msg(ev("b", 2.0)))
    store.commit = broken  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        p.checkpoint()
    assert gc.isenabled()  # a failed checkpoint leaves the collector on too


def test_release_trims_the_c_heap_where_glibc_runs_it() -> None:
    import platform

    from monitor import heap

    # glibc on every machine of this project: a silent no-op there would hide a broken call
    assert heap.release() is (platform.libc_ver()[0] == "glibc")


def test_a_slow_checkpoint_pauses_the_next_in_proportion() -> None:
    now = [0.0]
    store = MemoryStore()
    real_commit = store.commit
    cost = [0.0]

    def slow_commit(cp: Checkpoint) -> None:  # many series or a slow database
        now[0] += cost[0]
        real_commit(cp)

    store.commit = slow_commit  # type: ignore[method-assign]
    config = IngestConfig(checkpoint_interval=2.0, checkpoint_max_events=1,
                          checkpoint_pause_factor=4.0, checkpoint_max_pause=30.0)
    p = Pipeline(store, "t", config, IngestMetrics(CollectorRegistry()), CountingDeadLetter(),
                 clock=lambda: now[0])
    p.assign([0])
    p.process(0, 0, msg(ev("a", 1.0)))
    cost[0] = 3.0
    p.checkpoint()  # from t=0 to t=3: the next waits 4 x 3 s, until t=15
    p.process(0, 1, msg(ev("b", 1.0)))
    now[0] = 14.9
    assert not p.due() and p.pending  # over the count and the interval, inside the pause
    now[0] = 15.0
    assert p.due()
    cost[0] = 20.0
    p.checkpoint()  # t=15 to t=35: 4 x 20 s is capped at 30 s, until t=65
    assert not p.pending
    p.process(0, 2, msg(ev("c", 1.0)))
    now[0] = 64.9
    assert not p.due()
    now[0] = 65.0
    assert p.due()
    cost[0] = 0.0
    p.checkpoint()  # a quick one: no pause, only the interval and the event count again
    p.process(0, 3, msg(ev("d", 1.0)))
    assert p.due()
    assert store.commits == 3 and store.totals()[0] == 3


def test_a_checkpoint_that_fails_slowly_does_not_pause_the_next() -> None:
    now = [0.0]
    store = MemoryStore()
    real_commit = store.commit

    def stalled_then_gone(cp: Checkpoint) -> None:
        now[0] += 30.0  # the store's deadline
        raise RuntimeError("database went away")

    p = Pipeline(store, "t", IngestConfig(checkpoint_interval=2.0, checkpoint_max_events=1),
                 IngestMetrics(CollectorRegistry()), CountingDeadLetter(), clock=lambda: now[0])
    p.assign([0])
    p.process(0, 0, msg(ev("a", 1.0)))
    store.commit = stalled_then_gone  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        p.checkpoint()
    store.commit = real_commit  # type: ignore[method-assign]
    p.assign([0])  # what the daemon does once the store answers again
    p.process(0, 0, msg(ev("a", 1.0)))
    assert p.due()


def test_a_checkpoint_hands_over_one_key_object_per_series_and_per_slice() -> None:
    """What the pending deltas are keyed by is what the store writes: one SeriesKey per
    series and one SliceKey per slice, shared by all their deltas (not a copy per delta),
    and the next interval starts with keys of its own."""
    from monitor.aggregate.series import SeriesKey
    from monitor.config import PolicyConfig
    from monitor.policy.slicer import Slicer
    from monitor.policy.slices import SliceKey

    store = MemoryStore()
    committed: list[Checkpoint] = []
    p = Pipeline(store, "test", IngestConfig(), IngestMetrics(CollectorRegistry()),
                 CountingDeadLetter(), on_commit=[committed.append],
                 slicer=Slicer(PolicyConfig()))
    p.assign([0])
    exp = {"experiment": {"name": "x", "arm": "b"}}
    p.process(0, 0, msg(ev("a", 0.0) | exp, ev("b", 60.0) | exp, ev("c", 3600.0) | exp,
                        ev("d", 3601.0, route="chat")))
    assert p.checkpoint()
    (cp,) = committed
    series = [key for key, _minute in cp.rollups]
    assert all(type(k) is SeriesKey for k in series)
    by_route = {k.route: k for k in series}
    assert sorted(by_route) == ["chat", "code"] and len(series) == 4
    assert all(k is by_route[k.route] for k in series)
    assert sorted(minute - int(T0) for _, minute in cp.rollups) == [0, 60, 3600, 3600]
    slices = list(cp.slices)
    assert len(slices) == 3
    assert all(type(s) is SliceKey and k is by_route[k.route] for s, k, _ in slices)
    assert len({id(s) for s, _, _ in slices}) == 1  # the four events share one slice
    assert [(arm, k) for _, arm, k, _ in cp.experiments] == [("b", by_route["code"])] * 2
    assert all(k is by_route["code"] for _, _, k, _ in cp.experiments)
    assert store.totals()[0] == 4

    p.process(0, 1, msg(ev("e", 3602.0)))
    assert p.checkpoint()
    (key, _), = committed[1].rollups
    assert key == by_route["code"] and key is not by_route["code"]
