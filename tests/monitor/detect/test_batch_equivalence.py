"""Detection per message equals detection per event (issue 18, item 3).

A message's events may be judged a segment at a time, the acceptance bank on arrays
(``Router.observe`` from ``batch_min`` events, ``OverdispersedCusum.update_many``). These
tests feed the same traffic request by request and in random groupings and require the
same alert records in the same order, the same change records, the same recommendations
and byte-identical detector snapshots.
"""

from __future__ import annotations

import functools
import random
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from monitor.config import DetectionConfig
from monitor.detect.acceptance import OverdispersedCusum
from monitor.detect.engine import Detection
from monitor.simulate import Simulator, scenario_config
from monitor.simulate.incidents import Incident
from monitor.telemetry.event import Event
from monitor.telemetry.parse import Parser

from .many import observe_in_groups

INCIDENTS = (
    "acceptance_shift:route=chat,at=40m,factor=0.8,for=40m",
    "revision_change:route=creative-writing,at=50m,factor=0.8",
    "tokenizer_swap:route=translation,at=70m,for=20m",
    "eviction:route=code-assistant,at=90m,share=0.5,slowdown=3,for=20m",
    "silence:route=summarize,at=100m,for=30m",
)


@functools.cache
def _raw_traffic() -> tuple[bytes, ...]:
    config = scenario_config("quiet", duration_s=2.5 * 3600, rate=7.0, seed=5,
                             duplicates=0.0)
    config = config.add_incidents([Incident.parse(s) for s in INCIDENTS])
    return tuple(orjson.dumps(e) for e in Simulator(config).events())


def _events() -> list[Event]:
    """Fresh events each time: nothing one run does to an event may reach the other."""
    parser = Parser()
    out: list[Event] = []
    for raw in _raw_traffic():
        events, rejections = parser.parse(raw)
        assert not rejections
        out.extend(events)
    return out


def _outcome(detection: Detection, records: list[Any], changes: dict[str, Any],
             stored: dict[str, Any]) -> dict[str, Any]:
    stored.update(detection.snapshot())
    return {
        "alerts": [r.to_line() for r in records],
        "changes": orjson.dumps(_upsert(changes, detection.drain_changes()),
                                option=orjson.OPT_SORT_KEYS),
        # what the state table holds: every snapshot so far, upserted by key
        "snapshot": orjson.dumps(stored, option=orjson.OPT_SORT_KEYS),
        "recommendations": orjson.dumps(detection.recommendations(),
                                        option=orjson.OPT_SORT_KEYS),
    }


def _run(groups: list[int] | None, *, batch_min: int = 32,
         drain_every: int = 2000, config: DetectionConfig | None = None) -> dict[str, Any]:
    """Feed the traffic one event per call (``groups`` None) or in calls of the given sizes
    (cycled); drain records and snapshot after the first call past every ``drain_every``
    events, as checkpoints do."""
    detection = Detection(config or DetectionConfig())
    detection.loaded = True
    detection._router.batch_min = batch_min
    events = _events()
    records: list[Any] = []
    changes: dict[str, Any] = {}
    stored: dict[str, Any] = {}

    def drain() -> None:
        records.extend(detection.drain())
        _upsert(changes, detection.drain_changes())
        stored.update(detection.snapshot())

    observe_in_groups(detection, events, groups, drain_every, drain)
    records += detection.drain()
    return _outcome(detection, records, changes, stored)


def _upsert(stored: dict[str, Any], drained: list[Any]) -> dict[str, Any]:
    """Change records as the store keeps them: the state at each drain, by change id (a
    record is a live object: the same change drained twice is one row)."""
    stored.update((c.change_id, c.to_dict()) for c in drained)
    return stored


@functools.cache
def _per_event() -> dict[str, Any]:
    return _run(None)


def test_the_traffic_exercises_every_path() -> None:
    """The comparison below means something: alerts of several rules fire and resolve."""
    rules = {orjson.loads(a)["rule"] for a in _per_event()["alerts"]}
    states = {orjson.loads(a)["state"] for a in _per_event()["alerts"]}
    assert {"acceptance_drop", "tokenizer_mismatch", "memory_contention",
            "telemetry_stale"} <= rules
    assert states == {"firing", "resolved"}
    assert orjson.loads(_per_event()["changes"]), \
        "the revision change is judged against its predecessor"


# No shrinking: a failing grouping is already small to read, and each try replays the traffic.
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(groups=st.lists(st.integers(min_value=1, max_value=3000), min_size=1, max_size=4),
       batch_min=st.sampled_from([1, 2, 32]))
def test_random_groupings_decide_exactly_as_one_event_at_a_time(
        groups: list[int], batch_min: int) -> None:
    batched = _run(groups, batch_min=batch_min)
    expected = _per_event()
    assert batched["alerts"] == expected["alerts"]
    assert batched["changes"] == expected["changes"]
    assert batched["recommendations"] == expected["recommendations"]
    assert batched["snapshot"] == expected["snapshot"]


def test_segments_idle_at_a_sweep_inside_a_message_are_judged_before_it() -> None:
    """A message spans minutes: its segments are judged after its last minute's sweep,
    except those the sweep finds idle (it resolves their alerts), judged first. With pairs
    idle after a few seconds, sweeps inside messages resolve alerts of segments that have
    requests waiting; the records must be those of one request at a time."""
    config = DetectionConfig(idle_pair_resolve=4.0)
    expected = _run(None, config=config)
    assert sum(b"pair idle" in a for a in expected["alerts"]) >= 3, \
        "the traffic resolves alerts of idle pairs"
    for groups in ([700], [2500, 31], [4000]):
        batched = _run(groups, config=config)
        assert batched == expected, groups


def test_large_messages_take_the_vectorised_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Messages of hundreds of events feed the bank as arrays (else this test proves little)."""
    runs = []
    original = OverdispersedCusum._watch_run

    def counting(self: OverdispersedCusum, *args: Any) -> int:
        taken = original(self, *args)
        runs.append(taken)
        return taken

    monkeypatch.setattr(OverdispersedCusum, "_watch_run", counting)
    assert _run([500]) == _per_event()
    assert len(runs) > 100 and sum(runs) > 10_000


# -- the detector alone ------------------------------------------------------------------------


def _stream(seed: int, n: int, shifts: list[tuple[int, float]]) -> tuple[list[int], list[int],
                                                                          list[float]]:
    rng = np.random.default_rng(seed)
    accepted, drafted, ts = [], [], []
    t = 1.8e9
    factor = 1.0
    pending = sorted(shifts)
    for i in range(n):
        while pending and pending[0][0] <= i:
            factor = pending.pop(0)[1]
        p = min(rng.beta(12, 8) * factor, 1.0)
        d = int(rng.integers(1, 400))
        accepted.append(int(rng.binomial(d, p)))
        drafted.append(d)
        t += float(rng.exponential(0.1))
        ts.append(t)
    return accepted, drafted, ts


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31), sizes=st.lists(st.integers(1, 1500), min_size=1, max_size=5),
       shifts=st.lists(st.tuples(st.integers(0, 6000), st.floats(0.5, 1.3)), max_size=4),
       chunk=st.sampled_from([30, 100, 500]), two_sided=st.booleans())
def test_update_many_equals_update(seed: int, sizes: list[int],
                                   shifts: list[tuple[int, float]], chunk: int,
                                   two_sided: bool) -> None:
    accepted, drafted, ts = _stream(seed, 6000, shifts)
    params = {"warmup_requests": 200, "warmup_tokens": 0, "baseline_chunk": chunk,
              "two_sided": two_sided, "arl_requests": 5e4}
    one, many = OverdispersedCusum(**params), OverdispersedCusum(**params)
    flips_one, flips_many = [], []
    for i, (a, d, t) in enumerate(zip(accepted, drafted, ts, strict=True)):
        one.update(a, d, t)
        if one.drift_detected or one.recovered:
            flips_one.append((i, one.drift_detected, orjson.dumps(one.evidence())))
    rnd, i, call = random.Random(seed), 0, 0
    while i < len(drafted):
        end = min(len(drafted), i + sizes[call % len(sizes)])
        call += 1
        while i < end:
            i += many.update_many(accepted[i:end], drafted[i:end], ts[i:end])
            if many.drift_detected or many.recovered:
                flips_many.append((i - 1, many.drift_detected, orjson.dumps(many.evidence())))
        if rnd.random() < 0.1:  # a checkpoint and a restart in between
            many = OverdispersedCusum.restore(orjson.loads(orjson.dumps(many.snapshot())))
    assert flips_many == flips_one
    assert orjson.dumps(many.snapshot()) == orjson.dumps(one.snapshot())


def test_update_many_refuses_a_bad_request_where_update_would() -> None:
    det = OverdispersedCusum(warmup_requests=50, warmup_tokens=0, baseline_chunk=100,
                             arl_requests=1e4)
    accepted, drafted, ts = _stream(3, 400, [])
    det.update_many(accepted, drafted, ts)
    bad = [*accepted[:40], 500, *accepted[41:60]]
    with pytest.raises(ValueError, match="accepted <= drafted"):
        det.update_many(bad, drafted[:60], ts[:60])


def test_a_statistic_stored_before_the_grid_joins_it_on_restore() -> None:
    det = OverdispersedCusum(warmup_requests=50, warmup_tokens=0, arl_requests=1e4)
    accepted, drafted, ts = _stream(4, 300, [])
    for a, d, t in zip(accepted, drafted, ts, strict=True):
        det.update(a, d, t)
    snap = det.snapshot()
    snap["state"]["s"] = [v + 1e-13 for v in snap["state"]["s"]]  # as an older version wrote
    restored = OverdispersedCusum.restore(snap)
    assert restored.snapshot()["state"]["s"] == det.snapshot()["state"]["s"]
