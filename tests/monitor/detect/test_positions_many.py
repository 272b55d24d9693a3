"""The position curve fed a segment's requests at once (issue 18): as one request at a time.

``PositionCurve.update_many`` has no flips to stop at; after it the curve, its knee and the
snapshot bytes must be those of :meth:`update` on each request.
"""

from __future__ import annotations

import random
from dataclasses import replace
from functools import cache
from typing import Any

import numpy as np
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.detect.breakeven import BreakevenMonitor, CostModel
from monitor.detect.positions import PositionCurve
from monitor.simulate import DEFAULT_ROUTES, Simulator, scenario_config
from monitor.telemetry.event import Event
from monitor.telemetry.parse import Parser

EVENT = Event("r", 0.0, "chat", "ok", "t", "1", "tok", 10, 50.0, draft_model="d", has_spec=True,
              num_speculative_tokens=3)  # fmt: skip


def traffic(seed: int, n: int, late: float, gap: float) -> list[Event]:
    """K = 3 requests whose survival drifts, some late (inside the window or past it), some
    without ``verify_steps`` (steps drafted / K: not integers), some of another K or without
    the per-position list."""
    rng = np.random.default_rng(seed)
    t, alpha, out = 1.8e9, 0.7, []
    for _ in range(n):
        if rng.random() < 1 / 300:
            alpha = float(rng.uniform(0.2, 0.95))
        t += float(rng.exponential(gap))
        ts, u = t, rng.random()
        if u < late:
            ts = t - float(rng.uniform(0.0, 400.0))
        elif u < late * 1.3:
            ts = t - float(rng.uniform(1000.0, 5000.0))
        steps = int(rng.integers(1, 40))
        k = 3 if rng.random() > 0.01 else 4
        survive = rng.random((steps, k)) < alpha
        per_pos = tuple(int(c) for c in np.cumprod(survive, axis=1).sum(axis=0))
        drafted = steps * k - int(rng.integers(0, 3))  # a short draft now and then
        u = rng.random()
        out.append(replace(
            EVENT, ts=ts, drafted_tokens=drafted, accepted_tokens=sum(per_pos),
            verify_steps=None if u < 0.1 else steps,
            accepted_per_position=None if u > 0.99 else per_pos,
        ))  # fmt: skip
    return out


def reads(curve: PositionCurve) -> tuple[Any, ...]:
    return curve.knee, orjson.dumps(curve.evidence())


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31), sizes=st.lists(st.integers(1, 700), min_size=1, max_size=5),
       late=st.sampled_from([0.0, 0.05, 0.3]), gap=st.sampled_from([0.05, 2.0, 30.0]),
       window=st.sampled_from([(3600.0, 60.0), (300.0, 60.0), (120.0, 1.0)]))
def test_update_many_in_random_groups_equals_update(seed: int, sizes: list[int], late: float,
                                                    gap: float,
                                                    window: tuple[float, float]) -> None:
    events = traffic(seed, 3000, late, gap)
    params = {"cost_model": CostModel(0.1, 0.05), "window": window[0], "bucket": window[1],
              "min_steps": 100}
    one, many = PositionCurve(**params), PositionCurve(**params)
    rnd = random.Random(seed)
    i = call = 0
    while i < len(events):
        end = min(len(events), i + sizes[call % len(sizes)])
        call += 1
        many.update_many(events[i:end])
        for e in events[i:end]:
            one.update(e)
        i = end
        # reads, at random: reading sums the waiting counts, which must change nothing
        if rnd.random() < 0.3:
            assert reads(many) == reads(one)
        if rnd.random() < 0.05:  # a checkpoint and a restore
            many = PositionCurve.restore(orjson.loads(orjson.dumps(many.snapshot())))
    assert reads(many) == reads(one)
    assert orjson.dumps(many.snapshot()) == orjson.dumps(one.snapshot())
    assert many.missing == one.missing and many.mismatched == one.mismatched


def test_the_traffic_has_what_update_many_must_hand_on() -> None:
    events = traffic(3, 3000, 0.05, 2.0)
    curve = PositionCurve(window=300.0, min_steps=100)
    curve.update_many(events)
    assert curve.missing and curve.mismatched and curve.knee is not None
    assert curve._ring is not None and curve._ring.dropped  # some past the window
    assert any(e.verify_steps is None for e in events)
    assert curve.steps != int(curve.steps)  # steps as drafted / K: order matters for floats


@cache
def _simulated_raw() -> tuple[bytes, ...]:
    routes = tuple(r for r in DEFAULT_ROUTES if r.name in ("chat", "summarize"))
    cfg = scenario_config("quiet", duration_s=3 * 3600, seed=3, rate=6.0, late=0.03)
    cfg = cfg.with_(routes=routes).add_incidents(
        ("acceptance_shift:route=chat,at=60m,factor=0.5,for=60m",))
    return tuple(orjson.dumps(e) for e in Simulator(cfg).events())


@cache
def simulated() -> dict[str, list[Event]]:
    """The simulator's traffic per route, parsed as the daemon does: requests that drafted
    something (what the caller gives the curve)."""
    parser = Parser()
    out: dict[str, list[Event]] = {}
    for raw in _simulated_raw():
        events, rejections = parser.parse(raw)
        assert not rejections
        for e in events:
            if e.has_spec and e.drafted_tokens > 0:
                out.setdefault(e.route, []).append(e)
    return out


@settings(max_examples=6, deadline=None)
@given(sizes=st.lists(st.integers(1, 2000), min_size=1, max_size=4))
def test_the_knee_reads_the_same_at_every_flip_of_break_even(sizes: list[int]) -> None:
    """As the caller reads it: after the requests up to each break-even flip."""
    for events in simulated().values():
        be_one, be_many = BreakevenMonitor(), BreakevenMonitor()
        one, many = PositionCurve(), PositionCurve()
        knees_one, knees_many = [], []
        for i, e in enumerate(events):
            one.update(e)
            be_one.update(e)
            if be_one.changed:
                knees_one.append((i, be_one.firing, one.knee))
        i = call = 0
        while i < len(events):
            end = min(len(events), i + sizes[call % len(sizes)])
            call += 1
            while i < end:
                taken = be_many.update_many(events[i:end])
                many.update_many(events[i:i + taken])
                i += taken
                if be_many.changed:
                    knees_many.append((i - 1, be_many.firing, many.knee))
        assert knees_many == knees_one
        assert orjson.dumps(many.snapshot()) == orjson.dumps(one.snapshot())
    flips = [k for k in knees_one if k[2] is not None]
    assert flips, "break-even flipped with a knee to read"


def test_an_empty_call_changes_nothing() -> None:
    curve = PositionCurve()
    curve.update_many([])
    assert curve.snapshot() == PositionCurve().snapshot()
