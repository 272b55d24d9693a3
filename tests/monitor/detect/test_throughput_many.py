"""``ThroughputMonitor.update_many`` equals ``update`` one event at a time (issue 18).

Random traffic (warm-up, slowdowns that fire and recoveries that resolve, error bursts the
gate holds back, requests without a throughput, late and too-late events, events with and
without a batch size) is fed one event per call and in random groupings; both ways must flip
at the same events with the same evidence and end with byte-identical snapshots.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.detect.throughput import ThroughputMonitor
from monitor.telemetry.event import Event

from .many import take
from .test_throughput import simulate

# small windows so that a few thousand events cross many buckets, fits and decisions
PARAMS: dict[str, Any] = {"warmup": 120.0, "min_baseline": 40, "window": 120.0, "bucket": 20.0,
                          "min_requests": 15, "quantiles": (0.5, 0.25)}
VARIANTS = [
    PARAMS,
    # a level of 1/4 or more: _decide's chi-square pre-test never skips
    {**PARAMS, "alpha": 0.3, "quantiles": (0.5,), "min_requests": 1},
    {**PARAMS, "quantiles": (0.5, 0.25, 0.1), "alpha": 0.001, "hysteresis": 0.0,
     "bucket": 7.0, "window": 100.0},
]


def traffic(seed: int, n: int, late: float, errors: float, rate: float) -> list[Event]:
    """Phases of normal and slow decode, with error bursts; some events arrive late."""
    rng = np.random.default_rng(seed)
    events: list[Event] = []
    ts = 1.8e9 + float(rng.uniform(0, 100))
    slow, error_rate, phase_end = 1.0, errors, 0
    for i in range(n):
        if i >= phase_end:  # a new phase: normal, slower (a drop), or an outage
            phase_end = i + int(rng.integers(50, 1500))
            kind = rng.choice(["normal", "normal", "slow", "slow", "outage"])
            slow = {"normal": 1.0, "slow": float(rng.uniform(1.1, 2.5)),
                    "outage": 2.0}[kind]
            error_rate = 0.4 if kind == "outage" else errors
        ts += float(rng.exponential(1.0 / rate))
        if rng.random() < 0.01:
            ts += float(rng.uniform(20, 400))  # a gap: buckets expire
        at = ts
        u = rng.random()
        if u < late:
            at = ts - float(rng.uniform(0, 150))  # late, inside the window or just out
        elif u < late * 1.2:
            at = ts - 1000.0  # far too late: dropped
        batch = None if rng.random() < 0.3 else int(rng.integers(0, 40))
        tokens_per_s = 120.0 / (1 + 0.03 * ((batch or 8) - 1)) / slow * rng.lognormal(0, 0.15)
        status = "ok"
        if rng.random() < error_rate:
            status = str(rng.choice(["error", "timeout", "cancelled"]))
        ttft: float | None = 100.0
        e2e = 100.0 + 200_000.0 / tokens_per_s
        v = rng.random()
        if v < 0.05:
            ttft = None  # no throughput
        elif v < 0.08:
            e2e = ttft  # no decode time: no throughput
        events.append(Event(f"r{i}", at, "chat", status, "t", "1", "tok", output_tokens=200,
                            e2e_ms=e2e, ttft_ms=ttft, batch_size=batch))
    return events


def one_by_one(events: list[Event], params: dict[str, Any], resets: set[int]
               ) -> tuple[list[tuple[int, bool, bytes]], bytes]:
    m = ThroughputMonitor(**params)
    flips = []
    for i, e in enumerate(events):
        if i in resets:
            m.reset_baseline()
        m.update(e)
        if m.changed:
            flips.append((i, m.firing, orjson.dumps(m.evidence())))
    return flips, orjson.dumps(m.snapshot())


def _read(m: ThroughputMonitor) -> tuple[bool, bytes]:
    return m.firing, orjson.dumps(m.evidence())


def in_groups(events: list[Event], params: dict[str, Any], resets: set[int], sizes: list[int],
              seed: int) -> tuple[list[tuple[int, bool, bytes]], bytes]:
    """Calls of the given sizes (cycled), cut at the resets; restarts from a snapshot now and
    then, as a checkpoint does."""
    m = ThroughputMonitor(**params)
    rnd = random.Random(seed)
    flips = []
    i = call = 0
    while i < len(events):
        if i in resets:
            m.reset_baseline()
        end = min(len(events), i + sizes[call % len(sizes)])
        end = min([end, *(r for r in resets if i < r < end)])
        call += 1
        i = take(m, events, i, end, flips, _read)
        if rnd.random() < 0.05:
            m = ThroughputMonitor.restore(orjson.loads(orjson.dumps(m.snapshot())))
    return flips, orjson.dumps(m.snapshot())


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31), sizes=st.lists(st.integers(1, 600), min_size=1, max_size=4),
       late=st.sampled_from([0.0, 0.02, 0.1]), errors=st.sampled_from([0.0, 0.02, 0.1]),
       rate=st.sampled_from([0.5, 3.0, 20.0]),
       resets=st.lists(st.integers(0, 6000), max_size=2), params=st.sampled_from(VARIANTS))
def test_update_many_equals_update(seed: int, sizes: list[int], late: float, errors: float,
                                   rate: float, resets: list[int],
                                   params: dict[str, Any]) -> None:
    events = traffic(seed, 6000, late, errors, rate)
    flips, snapshot = one_by_one(events, params, set(resets))
    assert in_groups(events, params, set(resets), sizes, seed) == (flips, snapshot)


def test_the_random_traffic_fires_resolves_and_gates() -> None:
    """The comparison above means something: alerts fire and resolve, and the gate holds."""
    states, gated = [], 0
    for seed in range(5):
        m = ThroughputMonitor(**PARAMS)
        for e in traffic(seed, 6000, 0.02, 0.02, 3.0):
            m.update(e)
            states += [m.firing] if m.changed else []
            gated += m.ready and not m.firing and m.evidence()["errors_rose"]
    assert True in states and False in states
    assert gated > 0


@settings(max_examples=4, deadline=None)
@given(sizes=st.lists(st.integers(1, 2000), min_size=1, max_size=4))
def test_simulated_evictions_in_random_groupings(sizes: list[int]) -> None:
    events = list(simulate("code-assistant", ("eviction:route=code-assistant,at=1h,for=45m",)))
    params = {"warmup": 900.0, "window": 300.0, "min_baseline": 100,
              "quantiles": (0.5, 0.25, 0.1)}
    flips, snapshot = one_by_one(events, params, set())
    assert [f[1] for f in flips][:2] == [True, False]
    assert in_groups(events, params, set(), sizes, 0) == (flips, snapshot)


def test_an_empty_call_takes_nothing() -> None:
    m = ThroughputMonitor(**PARAMS)
    m.reset_baseline()
    assert m.update_many([]) == 0
    assert orjson.dumps(m.snapshot()) == orjson.dumps(ThroughputMonitor(**PARAMS).snapshot())
