"""Break-even fed a segment's requests at once (issue 18): exactly as one request at a time.

``BreakevenMonitor.update_many`` takes requests until one flips ``firing``; the flips, their
evidence and recommendation, and the snapshot bytes must be those of :meth:`update` on each.
"""

from __future__ import annotations

import random
from functools import cache
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.detect.breakeven import BreakevenMonitor
from monitor.simulate import DEFAULT_ROUTES, Simulator, scenario_config
from monitor.telemetry.event import Event
from monitor.telemetry.parse import Parser

from .many import take

CHAT = next(r for r in DEFAULT_ROUTES if r.name == "chat")
SMALL = {"window": 600.0, "bucket": 60.0, "min_requests": 10, "min_tokens": 200}


def request(ts: float, accepted: int, drafted: int) -> Event:
    return Event(f"r{ts}", ts, "chat", "ok", "t", "1", "tok", accepted + 10, 100.0,
                 draft_model="d", has_spec=True, num_speculative_tokens=4,
                 drafted_tokens=drafted, accepted_tokens=accepted)  # fmt: skip


def traffic(seed: int, n: int, late: float = 0.05, no_draft: float = 0.03,
            gap: float = 2.0) -> list[Event]:
    """Acceptance in phases well under, around and well over the cutoff 0.40 (so the monitor
    fires and resolves), some requests late (inside the window or past it), some without
    drafts."""
    rng = np.random.default_rng(seed)
    t, rate, out = 1.8e9, 0.6, []
    for _ in range(n):
        if rng.random() < 1 / 300:
            rate = float(rng.choice([0.15, 0.3, 0.37, 0.42, 0.5, 0.65]))
        t += float(rng.exponential(gap))
        ts, u = t, rng.random()
        if u < late:
            ts = t - float(rng.uniform(0.0, 400.0))
        elif u < late * 1.3:
            ts = t - float(rng.uniform(500.0, 3000.0))  # often too old for the window
        drafted = 0 if rng.random() < no_draft else int(rng.integers(1, 120))
        p = min(1.0, float(rng.beta(20 * rate, 20 * (1 - rate))))
        out.append(request(ts, int(rng.binomial(drafted, p)), drafted))
    return out


def outputs(m: BreakevenMonitor) -> tuple[Any, ...]:
    """What the caller reads on a flip."""
    return m.firing, m.recommendation, orjson.dumps(m.evidence())


def one_by_one(events: list[Event], params: dict[str, Any]) -> tuple[list[Any], bytes]:
    m = BreakevenMonitor(**params)
    flips = []
    for i, e in enumerate(events):
        m.update(e)
        if m.changed:
            flips.append((i, *outputs(m)))
    return flips, orjson.dumps(m.snapshot())


def in_groups(events: list[Event], params: dict[str, Any], sizes: list[int],
              seed: int, restarts: bool = True) -> tuple[list[Any], bytes]:
    """``update_many`` on consecutive groups of ``sizes`` (cycled), as the caller: after each
    call a flip is read and the rest of the group passed again; sometimes a checkpoint and a
    restore between groups."""
    m = BreakevenMonitor(**params)
    rnd = random.Random(seed)
    flips = []
    i = call = 0
    while i < len(events):
        end = min(len(events), i + sizes[call % len(sizes)])
        call += 1
        i = take(m, events, i, end, flips, outputs)
        if restarts and rnd.random() < 0.05:
            m = BreakevenMonitor.restore(orjson.loads(orjson.dumps(m.snapshot())))
    return flips, orjson.dumps(m.snapshot())


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31), sizes=st.lists(st.integers(1, 700), min_size=1, max_size=5),
       late=st.sampled_from([0.0, 0.05, 0.3]), gap=st.sampled_from([0.05, 2.0, 30.0]),
       params=st.sampled_from([SMALL, {**SMALL, "hysteresis": 0.0, "confidence": 0.8},
                               {**SMALL, "window": 180.0, "bucket": 1.0, "min_requests": 2,
                                "min_tokens": 1}, {}]))
def test_update_many_in_random_groups_equals_update(seed: int, sizes: list[int], late: float,
                                                    gap: float, params: dict[str, Any]) -> None:
    events = traffic(seed, 3000, late=late, gap=gap)
    assert in_groups(events, params, sizes, seed) == one_by_one(events, params)


def test_the_random_traffic_fires_and_resolves_in_groups() -> None:
    """The comparison above means something: flips both ways, decided mostly by blocks."""
    events = traffic(11, 20_000)
    flips, snapshot = one_by_one(events, SMALL)
    assert {f[1] for f in flips} == {True, False} and len(flips) >= 6
    assert in_groups(events, SMALL, [1, 37, 500, 4000], 11) == (flips, snapshot)


def test_blocks_skip_the_per_event_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Most requests are counted a block at a time (else update_many saves nothing)."""
    calls = 0
    original = BreakevenMonitor.observe

    def counting(self: BreakevenMonitor, *args: Any) -> None:
        nonlocal calls
        calls += 1
        original(self, *args)

    events = traffic(12, 20_000, late=0.02)
    monkeypatch.setattr(BreakevenMonitor, "observe", counting)
    in_groups(events, SMALL, [256], 12, restarts=False)
    assert calls < len(events) / 4


@cache
def _simulated_raw() -> tuple[bytes, ...]:
    cfg = scenario_config("quiet", duration_s=4 * 3600, seed=2, rate=6.0, late=0.03)
    cfg = cfg.with_(routes=(CHAT,)).add_incidents(
        ("acceptance_shift:route=chat,at=80m,factor=0.5,for=70m",))
    return tuple(orjson.dumps(e) for e in Simulator(cfg).events())


def simulated() -> list[Event]:
    """The simulator's chat traffic, parsed as the daemon does; the requests that speculate
    (the caller gives the monitor those only)."""
    parser = Parser()
    out: list[Event] = []
    for raw in _simulated_raw():
        events, rejections = parser.parse(raw)
        assert not rejections
        out.extend(e for e in events if e.has_spec)
    return out


@cache
def _simulated_one_by_one() -> tuple[list[Any], bytes]:
    return one_by_one(simulated(), {})


@settings(max_examples=8, deadline=None)
@given(sizes=st.lists(st.integers(1, 3000), min_size=1, max_size=4), seed=st.integers(0, 99))
def test_simulated_traffic_in_random_groups(sizes: list[int], seed: int) -> None:
    events = simulated()
    expected = _simulated_one_by_one()
    assert {f[1] for f in expected[0]} == {True, False}  # the drop fires, and it resolves
    assert any(b.ts < a.ts for a, b in zip(events, events[1:], strict=False))  # late ones
    assert in_groups(events, {}, sizes, seed) == expected


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31), bad_at=st.integers(0, 1999), size=st.integers(1, 2000),
       bad=st.sampled_from([(5, 4), (-1, 3), (1, 0)]))
def test_a_bad_request_raises_where_update_would(seed: int, bad_at: int, size: int,
                                                 bad: tuple[int, int]) -> None:
    """The requests before it counted, and flips before it read, as one at a time."""
    events = traffic(seed, 2000)
    events[bad_at] = request(events[bad_at].ts, *bad)
    one = BreakevenMonitor(**SMALL)
    flips_one = []
    for i, e in enumerate(events[:bad_at]):
        one.update(e)
        if one.changed:
            flips_one.append((i, *outputs(one)))
    with pytest.raises(ValueError, match="accepted <= drafted"):
        one.update(events[bad_at])

    many = BreakevenMonitor(**SMALL)
    flips_many = []
    i = 0
    with pytest.raises(ValueError, match="accepted <= drafted"):
        while i < len(events):
            end = min(len(events), i + size)
            while i < end:
                i += many.update_many(events[i:end])
                if many.changed:
                    flips_many.append((i - 1, *outputs(many)))
    assert flips_many == flips_one
    assert (many.changed, many.firing) == (one.changed, one.firing)
    assert orjson.dumps(many.snapshot()) == orjson.dumps(one.snapshot())


def test_an_empty_call_takes_nothing() -> None:
    m = BreakevenMonitor()
    assert m.update_many([]) == 0
    assert m.snapshot() == BreakevenMonitor().snapshot()
