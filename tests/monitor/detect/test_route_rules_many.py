"""Route rules per message equal route rules per event (issue 18).

The route's four detectors take a message's events through ``update_many`` (feed until one
flips, say how many were taken) and ``Evaluator.route_rules_many`` turns their flips into
records; ``Router.observe`` defers a batch's route rules and flushes them before anything
that reads a route. These tests hold each detector's ``update_many`` to its ``update`` on
random streams (late events, gaps, sweeps, restarts in between), and the engine, per message,
to the engine per event on traffic where every route rule fires and resolves inside batched
messages.
"""

from __future__ import annotations

import dataclasses
import functools
import random
from collections.abc import Callable, Sequence
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from monitor.aggregate.guard import OVERFLOW
from monitor.config import DetectionConfig
from monitor.detect.activity import ContentionMonitor, InactivityMonitor, StalenessMonitor
from monitor.detect.engine import Detection
from monitor.detect.evaluate import Evaluator
from monitor.detect.metadata import MetadataRules
from monitor.simulate import Simulator, scenario_config
from monitor.simulate.incidents import Incident
from monitor.telemetry.event import Event
from monitor.telemetry.parse import Parser

from .many import observe_in_groups

# -- random streams ----------------------------------------------------------------------------

TARGET_REVS = ("t1", "t2")
DRAFT_REVS = ("d1", "d2", None)
TOKENIZERS = ("llama3", "qwen2", None)


def _stream(seed: int, n: int, *, metadata: bool = False) -> list[Event]:
    """Requests of one route, mostly in time order, with bursts, gaps, late events and
    phases of evictions, of no drafting and of no draft model, so that every route detector
    flips back and forth under small parameters."""
    rnd = random.Random(seed)
    out: list[Event] = []
    t = 1.8e9
    evict = nodraft = bare = 0.0
    target_rev, draft_rev, draft_tok, pinned = "t1", "d1", "llama3", None
    for i in range(n):
        if rnd.random() < 0.02:  # a new phase
            evict = rnd.choice((0.0, 0.0, 0.3, 0.9))
            nodraft = rnd.choice((0.0, 0.0, 0.5, 1.0))
            bare = rnd.choice((0.0, 0.0, 0.5, 1.0))
        step = rnd.choice((0.0, 0.5, 1.0, 2.0, 5.0))
        roll = rnd.random()
        if roll < 0.01:
            step = rnd.uniform(50, 400)  # a gap: staleness and window turnover
        t += step
        ts = t
        if roll > 0.97:
            ts = t - rnd.uniform(0, 300)  # late, maybe too late for the windows
        if metadata and rnd.random() < 0.08:
            target_rev = rnd.choice(TARGET_REVS)
            draft_rev = rnd.choice(DRAFT_REVS)
            draft_tok = rnd.choice(TOKENIZERS)
            pinned = rnd.choice((None, None, "t1", "t2"))
        has_draft = rnd.random() >= bare
        drafted = 0 if rnd.random() < nodraft else rnd.randint(1, 40)
        out.append(Event(
            f"r{i}", ts, "chat", "ok" if rnd.random() > 0.05 else "error",
            "llama-70b", target_rev, "llama3", 10, 50.0,
            draft_model=rnd.choice(("llama-1b", "llama-1b", "llama-3b")) if has_draft else None,
            draft_revision=draft_rev if has_draft else None,
            draft_tokenizer=draft_tok if has_draft else None,
            pinned_target_revision=pinned if has_draft else None,
            has_spec=has_draft, num_speculative_tokens=4 if has_draft else 0,
            drafted_tokens=drafted if has_draft else 0,
            draft_evicted=has_draft and rnd.random() < evict,
        ))
    return out


def _changes(det: Any) -> list[Any]:
    """What a flip says: the metadata rules' flips, or the condition's state and evidence."""
    if isinstance(det, MetadataRules):
        return [(f.rule, f.state, f.at, orjson.dumps(f.labels), orjson.dumps(f.evidence))
                for f in det.flips]
    return [det.firing, orjson.dumps(det.evidence())]


def _feed(make: Callable[[], Any], events: list[Event], sizes: list[int], seed: int,
          many_input: Callable[[Sequence[Event]], Sequence[Any]],
          sweeps: bool = False) -> tuple[list[Any], list[Any], int]:
    """The same events one by one and in calls of ``sizes`` (cycled); with ``sweeps``, a
    staleness tick between calls, for both at the same place. The flips of each, and how
    many."""
    one, many = make(), make()
    rnd = random.Random(seed)
    flips_one: list[Any] = []
    flips_many: list[Any] = []
    i = call = 0
    while i < len(events):
        end = min(len(events), i + sizes[call % len(sizes)])
        call += 1
        for j in range(i, end):
            one.update(events[j])
            if one.changed:
                flips_one.append((j, _changes(one)))
        group = many_input(events[i:end])
        done = 0
        while done < len(group):
            taken = many.update_many(group[done:])
            assert 1 <= taken <= len(group) - done
            done += taken
            if many.changed:
                flips_many.append((i + done - 1, _changes(many)))
        assert many.changed == one.changed  # the flag as after the last event
        i = end
        if sweeps and rnd.random() < 0.3:
            now = events[end - 1].ts + rnd.uniform(-100, 400)
            for det, out in ((one, flips_one), (many, flips_many)):
                det.tick(now)
                if det.changed:
                    out.append(("tick", end, _changes(det)))
        if rnd.random() < 0.1:  # a checkpoint and a restart in between
            many = type(many).restore(orjson.loads(orjson.dumps(many.snapshot())))
    assert orjson.dumps(many.snapshot()) == orjson.dumps(one.snapshot())
    assert flips_many == flips_one
    return flips_one, flips_many, sum(f[0] != "tick" for f in flips_one)


def _events(e: Sequence[Event]) -> Sequence[Event]:
    return e


def _times(e: Sequence[Event]) -> Sequence[float]:
    return [x.ts for x in e]


DETECTORS: dict[str, tuple[Callable[[], Any], Callable[[Sequence[Event]], Sequence[Any]],
                           bool, bool]] = {
    # name: (make, what update_many takes, staleness sweeps between calls, metadata stream)
    "staleness": (lambda: StalenessMonitor(silence=60.0), _times, True, False),
    "inactivity": (lambda: InactivityMonitor(window=120.0, min_requests=5, bucket=30.0),
                   _events, False, False),
    "inactivity_share": (lambda: InactivityMonitor(window=120.0, min_requests=5, share=0.6,
                                                   bucket=30.0), _events, False, False),
    "contention": (lambda: ContentionMonitor(threshold=0.2, window=120.0, min_requests=5,
                                             min_evicted=2, hysteresis=0.05, bucket=30.0),
                   _events, False, False),
    "metadata": (lambda: MetadataRules(grace=20.0, max_pairs=3), _events, False, True),
}

_sizes = st.lists(st.integers(1, 400), min_size=1, max_size=5)


@pytest.mark.parametrize("name", list(DETECTORS))
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31), sizes=_sizes)
def test_update_many_equals_update(name: str, seed: int, sizes: list[int]) -> None:
    make, many_input, sweeps, metadata = DETECTORS[name]
    flips_one, flips_many, _ = _feed(make, _stream(seed, 1500, metadata=metadata), sizes, seed,
                                     many_input, sweeps)
    # _feed also holds each call's flag and the final snapshots equal
    assert flips_many == flips_one


@pytest.mark.parametrize("name", list(DETECTORS))
def test_the_streams_flip_often_and_inside_calls(name: str) -> None:
    """The property above means something: events flip the detectors inside calls (not
    only the sweeps between them), many times."""
    make, many_input, sweeps, metadata = DETECTORS[name]
    sizes = [40] if sweeps else [500]  # staleness: sweeps between calls make it stale
    flips = sum(_feed(make, _stream(seed, 1500, metadata=metadata), sizes, seed, many_input,
                      sweeps)[2] for seed in range(5))
    assert flips >= 10


def test_staleness_a_first_event_behind_a_sweep_flips_twice_in_one_call() -> None:
    """Before any event the clock may already be ahead (a sweep): the first event is then
    stale, a newer one fresh, both in one call."""
    one, many = StalenessMonitor(silence=60.0), StalenessMonitor(silence=60.0)
    for m in (one, many):
        m.tick(1000.0)
    got = []
    for t in (100.0, 500.0, 990.0):
        one.update(t)
        got.append((one.firing, one.changed))
    assert got == [(True, True), (True, False), (False, True)]
    assert many.update_many([100.0, 500.0, 990.0]) == 1 and many.firing
    assert many.update_many([500.0, 990.0]) == 2 and not many.firing and many.changed
    assert many.snapshot() == one.snapshot()


def test_staleness_keeps_event_times_as_given() -> None:
    """An event's time is kept as the event has it (update() of an Event does not convert
    it), on the fast path and the slow one: the snapshots are the same."""
    one, many = StalenessMonitor(silence=60.0), StalenessMonitor(silence=60.0)
    times = [100, 130, 400]  # stale between 130 and 400 (a sweep says so)
    for t in times[:2]:
        one.update(_request("r", t))  # type: ignore[arg-type]
    assert many.update_many(times[:2]) == 2
    for m in (one, many):
        m.tick(300.0)
        assert m.firing
    for t in times[2:]:
        one.update(_request("r", t))  # type: ignore[arg-type]
    assert many.update_many(times[2:]) == 1 and many.changed and not many.firing
    assert orjson.dumps(many.snapshot()) == orjson.dumps(one.snapshot())
    assert one.snapshot()["last_ts"] == 400 and isinstance(one.snapshot()["last_ts"], int)


# -- the engine: per message against per event -------------------------------------------------

ROUTE_INCIDENTS = (
    "silence:route=summarize,at=20m,for=25m",
    "speculation_off:route=code-assistant,at=30m,for=30m",
    "eviction:route=chat,at=40m,share=0.5,slowdown=2,for=25m",
    "tokenizer_swap:route=translation,at=50m,for=20m",
    "revision_change:route=creative-writing,at=60m,factor=0.9",
)
ROUTE_RULES = {"telemetry_stale", "speculation_inactive", "memory_contention",
               "tokenizer_mismatch", "revision_mismatch"}


@functools.cache
def _raw_traffic() -> tuple[bytes, ...]:
    config = scenario_config("quiet", duration_s=1.75 * 3600, rate=6.0, seed=11,
                             duplicates=0.0)
    config = config.add_incidents([Incident.parse(s) for s in ROUTE_INCIDENTS])
    return tuple(orjson.dumps(e) for e in Simulator(config).events())


def _traffic(overflow: bool) -> list[Event]:
    """Fresh events each time; with ``overflow``, a share of them on pairs over the route's
    cap (route rules only) and some late."""
    parser = Parser()
    out: list[Event] = []
    for raw in _raw_traffic():
        events, rejections = parser.parse(raw)
        assert not rejections
        out.extend(events)
    if overflow:
        rnd = random.Random(3)
        out = [dataclasses.replace(e, target_model=OVERFLOW) if rnd.random() < 0.05 else e
               for e in out]
        for i in range(0, len(out) - 1, 97):
            out[i] = dataclasses.replace(out[i], ts=out[i].ts - 90.0)  # late
    return out


def _run(groups: list[int] | None, overflow: bool, batch_min: int = 32,
         drain_every: int = 1500) -> dict[str, Any]:
    detection = Detection(DetectionConfig())
    detection.loaded = True
    detection._router.batch_min = batch_min
    events = _traffic(overflow)
    records: list[Any] = []
    stored: dict[str, Any] = {}

    def drain() -> None:
        records.extend(detection.drain())
        stored.update(detection.snapshot())

    observe_in_groups(detection, events, groups, drain_every, drain)
    records += detection.drain()
    stored.update(detection.snapshot())
    return {"alerts": [r.to_line() for r in records],
            "snapshot": orjson.dumps(stored, option=orjson.OPT_SORT_KEYS)}


@functools.cache
def _per_event(overflow: bool) -> dict[str, Any]:
    return _run(None, overflow)


def test_every_route_rule_fires_and_resolves_inside_batched_messages(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """In messages of 600, every route rule's flips come from ``route_rules_many`` (the
    per-event ``route_rules`` is never called), and the records equal the per-event run's."""
    flipped: list[tuple[str, str]] = []
    per_event_calls = []
    many = Evaluator.route_rules_many

    def counting_many(self: Evaluator, route: Any, keys: list[int],
                      events: list[Event]) -> None:
        before = len(self.alerts)
        many(self, route, keys, events)
        flipped.extend((a.rule, a.state) for a in self.alerts[before:])

    def counting_one(self: Evaluator, route: Any, e: Event) -> None:
        per_event_calls.append(e)

    with monkeypatch.context() as m:
        m.setattr(Evaluator, "route_rules_many", counting_many)
        m.setattr(Evaluator, "route_rules", counting_one)
        batched = _run([600], overflow=False)
    assert not per_event_calls
    # a route goes stale on a sweep, between events; it comes back on an event
    assert {r for r, s in flipped if s == "firing"} == ROUTE_RULES - {"telemetry_stale"}
    alerts = [orjson.loads(a) for a in batched["alerts"]]
    assert ("telemetry_stale", "firing") in {(a["rule"], a["state"]) for a in alerts}
    # the revision change stays; everything else ends inside the traffic
    assert {r for r, s in flipped if s == "resolved"} == ROUTE_RULES - {"revision_mismatch"}
    assert batched == _per_event(False)


# No shrinking: a failing grouping is already small to read, and each try replays the traffic.
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(groups=st.lists(st.integers(min_value=1, max_value=2500), min_size=1, max_size=4),
       batch_min=st.sampled_from([1, 2, 32]), overflow=st.booleans())
def test_random_groupings_judge_routes_as_one_event_at_a_time(
        groups: list[int], batch_min: int, overflow: bool) -> None:
    assert _run(groups, overflow, batch_min) == _per_event(overflow)


def _request(route: str, ts: float, *, drafted: int = 8, evicted: bool = False,
             draft_tokenizer: str = "tok") -> Event:
    return Event(f"{route}{ts}", ts, route, "ok", "t", "1", "tok", 10, 50.0,
                 draft_model="d", draft_revision="1", draft_tokenizer=draft_tokenizer,
                 has_spec=True, num_speculative_tokens=4, drafted_tokens=drafted,
                 draft_evicted=evicted)


def test_route_rules_flipping_on_one_event_keep_their_order() -> None:
    """Per event, the route's detectors decide in a fixed order; per message each takes the
    run alone, and the keys put their records of one event back in that order: the route
    drafts again on the request that makes its evictions contention, and comes back from
    silence with a tokenizer the draft does not share."""
    t0 = 1.8e9
    events = [_request("clock", t0 + t) for t in range(0, 2500, 10)]  # the clock goes on
    events += [_request("r", t0 + t, drafted=0) for t in range(0, 900, 10)]
    events += [_request("r", t0 + 900, drafted=0, evicted=True),
               _request("r", t0 + 910, drafted=0, evicted=True),
               _request("r", t0 + 920, evicted=True),
               _request("r", t0 + 1800, draft_tokenizer="other")]
    events.sort(key=lambda e: e.ts)

    def alerts(size: int) -> list[tuple[str, str, str]]:
        detection = Detection(DetectionConfig())
        detection.loaded = True
        for i in range(0, len(events), size):
            detection.observe(0, events[i:i + size])
        return [(a.rule, a.state, a.at.isoformat()) for a in detection.drain()]

    expected = alerts(1)
    at = {(rule, state): when for rule, state, when in expected}
    assert at["speculation_inactive", "resolved"] == at["memory_contention", "firing"]
    assert at["telemetry_stale", "resolved"] == at["tokenizer_mismatch", "firing"]
    assert alerts(len(events)) == expected
    assert alerts(300) == expected
