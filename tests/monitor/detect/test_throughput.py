"""Throughput drop with a flat error rate: slowdowns fire, outages and load surges do not."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import replace
from functools import cache

import numpy as np
import pytest

from monitor.detect.exceptions import StateVersionError
from monitor.detect.throughput import (
    _FIXED,
    _TPUT,
    ThroughputMonitor,
    _skip_z2,
    _surely_not_below,
    _z_upper,
    binom_sf,
    fit_batch_factor,
)
from monitor.simulate import DEFAULT_ROUTES, Simulator, scenario_config
from monitor.telemetry.event import Event
from monitor.telemetry.parse import event_from_obj

ROUTES = {r.name: r for r in DEFAULT_ROUTES}


@cache
def simulate(name: str, incidents: tuple[str, ...] = (), hours: float = 3.0, seed: int = 5):
    cfg = scenario_config("quiet", duration_s=hours * 3600, seed=seed, rate=8.0)
    cfg = cfg.with_(routes=(ROUTES[name],)).add_incidents(incidents)
    return tuple(event_from_obj(d) for d in Simulator(cfg).events())


def run(monitor: ThroughputMonitor, events) -> list[tuple[float, bool]]:
    """(offset from the first event, firing) at each flip."""
    start = events[0].ts
    flips = []
    for e in events:
        monitor.update(e)
        if monitor.changed:
            flips.append((e.ts - start, monitor.firing))
    return flips


def test_fires_on_draft_evictions_with_flat_errors() -> None:
    events = simulate("code-assistant", ("eviction:route=code-assistant,at=1h,for=45m",))
    m = ThroughputMonitor()
    flips = run(m, events)
    assert [state for _, state in flips] == [True, False]
    (fired, _), (resolved, _) = flips
    assert 3600 < fired < 3600 + 900
    assert 3600 + 2700 < resolved < 3600 + 2700 + 900


def test_evidence_of_a_firing() -> None:
    events = simulate("code-assistant", ("eviction:route=code-assistant,at=1h,for=45m",))
    m = ThroughputMonitor()
    for e in events:
        m.update(e)
        if m.changed:
            break
    ev = m.evidence()
    json.dumps(ev, allow_nan=False)
    assert ev["errors_rose"] is False and ev["error_rate"] < 0.02
    assert ev["baseline_error_rate"] < 0.02
    # evictions slow 30 % of requests 2.5x: the lower quartile drops, the median barely
    assert ev["relative_change"]["0.25"] < -0.15 < ev["relative_change"]["0.5"]
    assert ev["p_values"]["0.25"] < 0.005
    assert ev["batch_beta"] == pytest.approx(1 / 32, rel=0.3)  # the simulator's batch factor


def test_fires_on_a_drift_like_slowdown() -> None:
    # acceptance x0.7: fewer tokens per verification step, decode slower, errors flat
    events = simulate("chat", ("acceptance_shift:route=chat,at=1h,factor=0.7",))
    assert [s for _, s in run(ThroughputMonitor(), events)] == [True]


def test_silent_on_an_outage() -> None:
    # decode 2x slower AND a quarter of requests failing: an outage, not this signature
    events = simulate("chat", ("error_spike:route=chat,at=1h,for=30m",))
    m = ThroughputMonitor()
    gated = 0
    for e in events:
        m.update(e)
        assert not m.firing
        if m.ready and m.evidence()["errors_rose"] and e.ts - events[0].ts < 5400:
            gated += 1
    assert gated > 0


def test_an_outage_without_the_gate_would_fire() -> None:
    # the null twin of the test above: the same slowdown with errors at baseline fires
    events = simulate("chat", ("error_spike:route=chat,at=1h,for=30m",))
    flat = [replace(e, status="ok") if e.status != "ok" and e.ttft_ms is not None else e
            for e in events]  # fmt: skip
    assert True in [s for _, s in run(ThroughputMonitor(), flat)]


def test_silent_on_a_batch_surge() -> None:
    events = simulate("chat", ("batch_surge:route=chat,at=1h,for=45m",))
    assert run(ThroughputMonitor(), events) == []
    # raw throughput did drop by more than the effect: the batch normalisation kept it quiet
    start = events[0].ts
    raw = [e.decode_throughput for e in events if e.status == "ok" and e.ts - start < 3600]
    surge = [e.decode_throughput for e in events
             if e.status == "ok" and 3900 < e.ts - start < 6000]  # fmt: skip
    assert statistics.median(surge) < 0.85 * statistics.median(raw)


@pytest.mark.parametrize("name", sorted(ROUTES))
def test_silent_on_quiet_traffic(name: str) -> None:
    assert run(ThroughputMonitor(), simulate(name, hours=4.0)) == []


# -- the pieces --------------------------------------------------------------------------------


def test_sign_test_against_exact_binomial_sums() -> None:
    from math import comb

    for n, p, k in [(30, 0.5, 21), (50, 0.25, 20), (200, 0.25, 70), (12, 0.5, 3)]:
        exact = sum(comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(k, n + 1))
        assert binom_sf(k, n, p) == pytest.approx(exact, rel=1e-9)


@pytest.mark.parametrize("p", [0.5, 0.25, 0.1, 0.75, 0.02])
@pytest.mark.parametrize("level", [0.005, 0.01, 0.05])
def test_the_pre_tests_never_skip_a_significant_count(p: float, level: float) -> None:
    # what _decide skips without summing must never be under the level (with room to spare)
    quick = _skip_z2(level) * p * (1 - p) / 2
    for n in [*range(1, 300), *range(300, 20_000, 997)]:
        for k in range(math.floor(n * p) + 1, n + 1):
            d = k - n * p
            if d * d <= quick * n:
                assert _surely_not_below(k, n, p, level)  # chi-square >= KL: implied
            if not _surely_not_below(k, n, p, level):
                break  # the bound only weakens from here as k grows
            assert binom_sf(k, n, p) >= 1.5 * level


class RuleAsWritten(ThroughputMonitor):
    """The decision with no shortcut: every sum and every quantile on every event."""

    def _decide(self) -> None:
        t = self._ring.totals
        n = int(t[_TPUT])
        if n < self.min_requests:
            return
        assert self._baseline is not None
        if not self._firing:
            level = self.alpha / len(self.quantiles)
            if not any(binom_sf(int(t[_FIXED + i]), n, q) < level
                       for i, q in enumerate(self.quantiles)):  # fmt: skip
                return
            if self._error_z() > _z_upper(self.error_alpha):
                return
            self._firing = self.changed = True
        else:
            ratio = 1.0 - self.min_effect + self.hysteresis
            for q, base in zip(self.quantiles, self._baseline["quantiles"], strict=True):
                current = self._hist.quantile(q)
                if current is None or current < ratio * base:
                    return
            self._firing = False
            self.changed = True


@pytest.mark.parametrize(
    "name,incident,min_flips",
    [
        ("code-assistant", "eviction:route=code-assistant,at=1h,for=45m", 2),
        ("chat", "acceptance_shift:route=chat,at=1h,factor=0.8,for=40m", 2),
        ("chat", "error_spike:route=chat,at=1h,for=30m", 0),  # the gate holds it
    ],
)
def test_decisions_are_those_of_the_rule_as_written(name: str, incident: str,
                                                    min_flips: int) -> None:  # fmt: skip
    events = simulate(name, (incident,))
    kwargs = {"warmup": 900, "window": 300, "min_baseline": 100, "quantiles": (0.5, 0.25, 0.1)}
    fast, slow = ThroughputMonitor(**kwargs), RuleAsWritten(**kwargs)
    flips = 0
    for e in events:
        fast.update(e)
        slow.update(e)
        assert (fast.firing, fast.changed) == (slow.firing, slow.changed)
        flips += fast.changed
    assert flips >= min_flips


def test_batch_factor_fit_recovers_a_linear_step_cost() -> None:
    rng = np.random.default_rng(2)
    b = 1 + rng.poisson(12, 3000)
    x = 150.0 / (1 + 0.05 * (b - 1)) * rng.lognormal(0, 0.2, len(b))
    assert fit_batch_factor(list(zip(b.tolist(), x.tolist(), strict=True))) == pytest.approx(
        0.05, rel=0.15
    )
    assert fit_batch_factor([(3, 10.0), (4, 11.0)]) == 0.0  # too few batch sizes


def event(i: float, tokens_per_s: float, status: str = "ok", batch: int | None = None) -> Event:
    return Event(f"r{i}", float(i), "chat", status, "t", "1", "tok", output_tokens=200,
                 e2e_ms=100.0 + 200_000.0 / tokens_per_s, ttft_ms=100.0,
                 batch_size=batch)  # fmt: skip


def test_warmup_waits_for_enough_requests() -> None:
    m = ThroughputMonitor(warmup=60, min_baseline=100)
    for i in range(99):
        m.update(event(i, 100.0))
    assert not m.ready and m.evidence()["warmup_requests"] == 99
    m.update(event(99, 100.0))
    assert m.ready and m.baseline == {"0.5": 100.0, "0.25": 100.0}


def test_events_without_batch_use_the_reference_batch() -> None:
    m = ThroughputMonitor(warmup=60, min_baseline=100, min_requests=20)
    rng = np.random.default_rng(0)
    for i in range(400):
        b = int(rng.integers(1, 30))
        m.update(event(i, 100.0 / (1 + (b - 1) / 20), batch=b))
    assert m.batch_beta == pytest.approx(0.05, rel=0.05)
    ref = m.evidence()["reference_batch"]
    for i in range(400, 1000):  # the same speed at the reference batch, batch not reported
        m.update(event(i, 100.0 / (1 + (ref - 1) / 20)))
    assert not m.firing
    assert m.current["0.5"] == pytest.approx(m.baseline["0.5"], rel=0.03)


def test_reset_baseline_resolves_and_starts_over() -> None:
    m = ThroughputMonitor(warmup=60, min_baseline=50, window=120, min_requests=20)
    for i in range(200):
        m.update(event(i, 100.0 + i % 5))
    for i in range(200, 400):
        m.update(event(i, 50.0 + i % 5))
    assert m.firing
    m.reset_baseline()
    assert not m.firing and m.changed and not m.ready
    for i in range(400, 600):
        m.update(event(i, 50.0 + i % 5))
    assert m.ready and not m.firing and m.baseline["0.5"] == pytest.approx(52.0)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        ThroughputMonitor(min_effect=0.1, hysteresis=0.1)
    with pytest.raises(ValueError):
        ThroughputMonitor(quantiles=())


# -- state -------------------------------------------------------------------------------------


@pytest.mark.parametrize("fraction", [0.1, 0.5])  # during the warm-up, and after it
def test_snapshot_restore_mid_stream_gives_identical_outputs(fraction: float) -> None:
    events = simulate("code-assistant", ("eviction:route=code-assistant,at=1h,for=45m",))
    cut = int(len(events) * fraction)
    a = ThroughputMonitor()
    for e in events[:cut]:
        a.update(e)
    b = ThroughputMonitor.restore(json.loads(json.dumps(a.snapshot())))
    assert b.snapshot() == a.snapshot()
    flips = 0
    for i, e in enumerate(events[cut:]):
        a.update(e)
        b.update(e)
        assert (a.firing, a.changed) == (b.firing, b.changed)
        flips += a.changed
        if a.changed or i % 500 == 0:
            assert json.dumps(a.evidence()) == json.dumps(b.evidence())
    assert flips >= 1
    assert a.snapshot() == b.snapshot()


def test_bad_versions_raise() -> None:
    snap = ThroughputMonitor().snapshot()
    assert snap["kind"] == "throughput"
    with pytest.raises(StateVersionError):
        ThroughputMonitor.restore({**snap, "version": 9})


def test_monitors_of_one_configuration_share_their_derived_bounds() -> None:
    """The per-quantile bounds derived from the parameters are one tuple per configuration
    (a fleet builds one monitor per segment), and what the formula gives."""
    from monitor.detect.throughput import _skip_z2

    a, b = ThroughputMonitor(), ThroughputMonitor()
    other = ThroughputMonitor(quantiles=(0.5,))
    assert a._skips is b._skips and other._skips is not a._skips
    z2 = _skip_z2(a.alpha / 2)
    assert a._skips == ((0.5, z2 * 0.5 * 0.5 / 2.0), (0.25, z2 * 0.25 * 0.75 / 2.0))


def test_warming_monitors_share_an_empty_window_until_their_baseline() -> None:
    """The window counts nothing before the baseline: monitors warming up share one empty
    window (a fleet's long tail is warming up); the baseline gives each its own, as do a
    restore right after it (an empty window is left out of the snapshot) and a carry-over,
    and the shared one refuses events."""
    from monitor.detect.windows import EmptyRing, EmptySlidingHistogram

    warming = [ThroughputMonitor(warmup=60, min_baseline=50) for _ in range(2)]
    for m in warming:
        for i in range(30):
            m.update(event(i, 100.0))
    assert warming[0]._ring is warming[1]._ring and warming[0]._hist is warming[1]._hist
    shared = warming[0]._ring
    for m in warming:
        i = 30
        while not m.ready:  # up to the request that completes the baseline, and no further
            m.update(event(i, 100.0 + i % 7))
            i += 1
    assert warming[0]._ring is not warming[1]._ring
    snap = json.loads(json.dumps(warming[0].snapshot()))
    assert "ring" not in snap and "hist" not in snap  # ready, and nothing in the window yet
    restored = ThroughputMonitor.restore(snap)
    carried = warming[0].carried()
    assert carried is not None
    for m in (*warming, restored, carried):
        assert type(m._ring) is not EmptyRing and type(m._hist) is not EmptySlidingHistogram
    for j in range(i, i + 300):
        warming[0].update(event(j, 60.0 + j % 7))
        restored.update(event(j, 60.0 + j % 7))
        assert (restored.firing, restored.changed) == (warming[0].firing, warming[0].changed)
    assert warming[0].firing and restored.snapshot() == warming[0].snapshot()
    assert shared.totals == (0,) * len(shared.totals) and shared.head is None
    with pytest.raises(TypeError, match="takes no events"):
        shared.slot(0.0)
