"""``Pipeline.process_many`` counts a run of messages exactly as ``process`` on each would.

Sources hand the pipeline a Kafka poll's records of a partition, or a chunk of replayed
lines, at once. Whatever the grouping, the tables, the dead letters (and their order), the
events the detectors see (and their order), the counters and the partition's progress must
be the ones message-by-message processing gives: random messages with duplicates, late and
future events, invalid lines and batches, compared both ways.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from monitor import pipeline as pipeline_module
from monitor.aggregate.bucket import BucketStats
from monitor.aggregate.columns import as_stats
from monitor.config import IngestConfig
from monitor.eventtime import PlausibleTime, WallClock
from monitor.metrics import IngestMetrics
from monitor.pipeline import Pipeline, _all_count
from monitor.telemetry.event import Rejection
from monitor.telemetry.parse import Parser
from tests.monitor.test_pipeline import T0, MemoryStore, RecordingObserver, ev

COUNTERS = ("messages", "events", "invalid", "duplicates", "late", "late_counted", "future")


class ListDeadLetter:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def send(self, rejection: Rejection, origin: dict[str, Any]) -> None:
        self.sent.append((rejection.reason, origin))

    def flush(self) -> None:
        return

    def close(self) -> None:
        return


def _event(draw: Any, i: int) -> Any:
    kind = draw(st.sampled_from(["ok", "ok", "ok", "dup", "late", "old", "future", "bad"]))
    ts = 5000.0 + i * draw(st.floats(0.0, 3.0))
    rid = f"r{i}"
    if kind == "dup":
        rid = f"r{draw(st.integers(0, max(i - 1, 0)))}"
    elif kind == "late":
        ts -= draw(st.floats(61.0, 300.0))  # behind the allowance, within the horizon
    elif kind == "old":
        ts -= draw(st.floats(601.0, 2000.0))  # beyond the horizon
    elif kind == "future":
        ts += draw(st.floats(400.0, 5000.0))  # beyond the future skew
    e = ev(rid, ts, route=draw(st.sampled_from(["code", "chat"])))
    if kind == "bad":
        e["e2e_ms"] = -1
    return e


@st.composite
def traffic(draw: Any) -> tuple[list[bytes], list[int]]:
    n = draw(st.integers(1, 60))
    messages, i = [], 0
    for _ in range(n):
        shape = draw(st.sampled_from(["one", "one", "batch", "garbage", "empty"]))
        if shape == "garbage":
            messages.append(b"{not json")
        elif shape == "empty":
            messages.append(b"[]")
        else:
            size = 1 if shape == "one" else draw(st.integers(2, 5))
            evs = [_event(draw, i + k) for k in range(size)]
            i += size
            messages.append(orjson.dumps(evs if shape == "batch" else evs[0]))
    groups = draw(st.lists(st.integers(1, 8), min_size=1, max_size=20))
    return messages, groups


def _run(messages: list[bytes], groups: list[int] | None, rule: str) -> dict[str, Any]:
    store, dl, observer = MemoryStore(), ListDeadLetter(), RecordingObserver()
    metrics = IngestMetrics(CollectorRegistry())
    config = IngestConfig(allowed_lateness=60.0, dedup_horizon=600.0, max_future_skew=300.0)
    p = Pipeline(store, "t", config, metrics, dl, observer=observer)
    p.future = (PlausibleTime(300.0, 60.0) if rule == "plausible"
                else WallClock(300.0, wall=lambda: T0 + 5000.0 + 60.0))
    p.assign([0])
    offsets = list(range(100, 100 + len(messages)))
    if groups is None:
        for offset, raw in zip(offsets, messages, strict=True):
            p.process(0, offset, raw, b"k%d" % offset)
    else:
        at, g = 0, 0
        while at < len(messages):
            size = groups[g % len(groups)]
            g += 1
            part = slice(at, at + size)
            p.process_many(0, offsets[part], messages[part],
                           [b"k%d" % o for o in offsets[part]])
            at += size
    tracker = p.tracker(0)
    rollups = {k: v.to_row() for k, v in as_stats(p._pending, BucketStats.from_sums).items()}
    progress = (tracker.next_offset, tracker.max_ts, list(tracker.new_ids),
                sorted(rid for ids in tracker.seen._by_slice.values() for rid in ids))
    p.checkpoint()
    registry = metrics.registry
    return {
        "summary": [getattr(p.summary, c) for c in COUNTERS],
        "rollups": rollups,
        "dead_letters": dl.sent,
        "observed": observer.fed,
        "progress": progress,
        "metrics": [registry.get_sample_value(f"specwatch_{name}_total") for name in (
            "messages", "events", "invalid_events", "duplicate_events", "late_events",
            "late_counted_events", "future_events", "dead_letters")],
        "stored": (store.offsets, store.max_ts, store.ids, store.totals()),
    }


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traffic(), st.sampled_from(["plausible", "wall"]))
def test_any_grouping_counts_as_message_by_message(case: Any, rule: str) -> None:
    messages, groups = case
    one_by_one = _run(messages, None, rule)
    grouped = _run(messages, groups, rule)
    assert grouped == one_by_one


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traffic(), st.sampled_from(["plausible", "wall"]))
def test_the_everything_counts_shortcut_is_the_event_loop(case: Any, rule: str) -> None:
    """``_all_count`` (a chunk whose every event counts, judged on the chunk's newest and
    oldest time) against the event-by-event loop it skips, on every grouping."""
    messages, groups = case
    with_shortcut = _run(messages, groups, rule), _run(messages, None, rule)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pipeline_module, "_all_count", lambda *args: None)
        without = _run(messages, groups, rule), _run(messages, None, rule)
    assert with_shortcut == without


def test_the_shortcut_takes_a_clean_chunk_and_leaves_the_rest() -> None:
    """It answers for a chunk of fresh, on-time events, and for nothing else."""
    clean = [ev(f"r{i}", 5000.0 + i) for i in range(4)]
    late = [*clean[:2], ev("old", 5000.0 - 61.0), *clean[2:]]
    twice = [*clean, clean[0]]
    ahead = [*clean, ev("far", 5003.0 + 301.0)]
    def call(evs: list[dict[str, Any]], max_ts: float = T0 + 5000.0) -> Any:
        events = Parser().parse(orjson.dumps(evs))[0]
        return _all_count([events[:2], events[2:]], [e.request_id for e in events], max_ts,
                          60.0, max_ts + 300.0)

    counted, times, ids = call(clean)
    assert [e.request_id for e in counted] == ["r0", "r1", "r2", "r3"]
    assert [t - T0 for t in times] == [5000.0, 5001.0, 5002.0, 5003.0]
    assert ids == {"r0", "r1", "r2", "r3"}
    assert call(late) is None and call(twice) is None and call(ahead) is None
    assert call(clean, max_ts=T0 + 5003.0 + 61.0) is None  # late against the partition's newest


def test_a_batch_keeps_each_messages_dead_letters_in_order() -> None:
    """Within one call: message 0's invalid event, then its late one, then message 1's."""
    late = ev("late", 4000.0)
    messages = [
        orjson.dumps([ev("a", 5000.0), {**ev("bad", 5000.0), "e2e_ms": -1}, late]),
        orjson.dumps({**ev("bad2", 5001.0), "e2e_ms": -1}),
    ]
    out = _run(messages, [2], "plausible")
    reasons = [(reason.split(":")[0], origin["offset"]) for reason, origin in out["dead_letters"]]
    assert reasons == [("e2e_ms must be >= 0 (got -1)", 100), ("late", 100),
                       ("e2e_ms must be >= 0 (got -1)", 101)]
    assert out == _run(messages, None, "plausible")
