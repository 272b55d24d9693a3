"""Break-even: the cost model, the overdispersed interval, firing, hysteresis and state."""

from __future__ import annotations

import json
import math
from functools import cache

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from monitor.detect.breakeven import (
    DEFAULT_CUTOFF,
    BreakevenMonitor,
    CostModel,
    chain_alpha,
    cutoff,
    engine_rate,
    leviathan_breakeven,
    leviathan_speedup,
    ratio_interval,
)
from monitor.detect.exceptions import StateVersionError
from monitor.simulate import DEFAULT_ROUTES, Simulator, scenario_config
from monitor.telemetry.event import Event
from monitor.telemetry.parse import event_from_obj

CREATIVE = DEFAULT_ROUTES[3]
assert CREATIVE.name == "creative-writing"


@cache
def simulate(route, incidents: tuple[str, ...] = (), hours: float = 4.0, seed: int = 1):
    cfg = scenario_config("quiet", duration_s=hours * 3600, seed=seed, rate=6.0)
    cfg = cfg.with_(routes=(route,)).add_incidents(incidents)
    return tuple(event_from_obj(d) for d in Simulator(cfg).events())


def request(ts: float, accepted: int, drafted: int) -> Event:
    return Event(f"r{ts}", ts, "chat", "ok", "t", "1", "tok", accepted + 10, 100.0,
                 draft_model="d", has_spec=True, num_speculative_tokens=4,
                 drafted_tokens=drafted, accepted_tokens=accepted)  # fmt: skip


# -- the cost model and its derivation ---------------------------------------------------------


def test_default_cutoff_and_cost_model() -> None:
    assert cutoff(None) == DEFAULT_CUTOFF == 0.40
    assert cutoff(CostModel(c=0.2, v=0.05)) == pytest.approx(0.25)
    with pytest.raises(ValueError):
        CostModel(c=-0.1)
    with pytest.raises(ValueError):
        CostModel(c=0.1, v=math.nan)


@given(
    st.floats(0.01, 0.99),
    st.integers(1, 10),
    st.floats(0.0, 0.95),
)
def test_leviathan_pays_exactly_when_engine_rate_exceeds_c(alpha: float, gamma: int, c: float):
    # Leviathan's S(alpha, gamma, c) > 1  <=>  r(alpha, gamma) > c, for every gamma: the
    # reference's break-even table is the single line r = c in engine-rate terms.
    r = engine_rate(alpha, gamma)
    assume(abs(r - c) > 1e-9)
    assert (leviathan_speedup(alpha, gamma, c) > 1.0) == (r > c)


@given(st.floats(0.0, 1.0), st.integers(1, 16), st.floats(0.0, 0.5), st.floats(0.0, 0.4))
def test_cost_model_pays_exactly_above_c_plus_v(rate: float, k: int, c: float, v: float) -> None:
    m = CostModel(c, v)
    assume(abs(rate - (c + v)) > 1e-9)
    assert (m.speedup(rate, k) > 1.0) == (rate > cutoff(m))


def test_breakeven_table_of_the_reference() -> None:
    # engine-telemetry.md 5.2, rows gamma = 2, 4, 7
    table = {
        2: [0.039, 0.092, 0.171, 0.306, 0.422, 0.618],
        4: [0.074, 0.167, 0.287, 0.455, 0.574, 0.741],
        7: [0.123, 0.259, 0.412, 0.589, 0.695, 0.826],
    }
    for gamma, row in table.items():
        got = [round(leviathan_breakeven(gamma, c), 3) for c in (0.02, 0.05, 0.1, 0.2, 0.3, 0.5)]
        assert got == pytest.approx(row, abs=0.0011)


def test_engine_rate_is_not_alpha() -> None:
    # vLLM #26191: r = 0.362 at k = 7 is alpha_L = 0.744, not 0.362 (5.3)
    assert chain_alpha(12208 / 33712, 7) == pytest.approx(0.744, abs=0.001)
    for k in (1, 3, 5):
        assert engine_rate(chain_alpha(0.4, k), k) == pytest.approx(0.4)


# -- the interval ------------------------------------------------------------------------------


def _coverage(robust: bool, reps: int = 300) -> float:
    rng = np.random.default_rng(7)
    true_rate, hits = 0.45, 0
    for _ in range(reps):
        n = 60
        drafted = 4 * np.maximum(1, rng.lognormal(3.5, 0.8, n).astype(int))
        alpha = rng.beta(true_rate * 4, (1 - true_rate) * 4, n)  # strong prompt heterogeneity
        accepted = rng.binomial(drafted, alpha)
        a, d = int(accepted.sum()), int(drafted.sum())
        sums = (int((accepted * accepted).sum()), int((drafted * drafted).sum()),
                int((accepted * drafted).sum()))  # fmt: skip
        if robust:
            low, high, _, _ = ratio_interval(n, a, d, *sums)
        else:  # tokens as independent trials: the binomial interval
            r, z = a / d, 1.959964
            half = z * math.sqrt(r * (1 - r) / d)
            low, high = r - half, r + half
        hits += low <= true_rate <= high
    return hits / reps


def test_robust_interval_covers_under_overdispersion_where_binomial_does_not() -> None:
    assert _coverage(robust=True) >= 0.90
    assert _coverage(robust=False) < 0.5


def test_interval_stays_in_unit_range_at_extremes() -> None:
    low, high, _, n_eff = ratio_interval(40, 0, 400, 0, 40 * 100, 0)
    assert low == 0.0 and 0.0 < high < 0.15 and n_eff == 40
    low, high, _, _ = ratio_interval(40, 400, 400, 40 * 100, 40 * 100, 40 * 100)
    assert high == 1.0 and 0.85 < low < 1.0


@given(st.lists(st.tuples(st.integers(0, 400), st.integers(1, 400)), min_size=2, max_size=60),
       st.sampled_from([0.8, 0.95, 0.99]))  # fmt: skip
def test_interval_holds_the_rate(pairs, confidence) -> None:
    # the monitor skips the interval while the rate is at or above the cutoff: sound only
    # because the upper bound is never under the point estimate
    pairs = [(min(a, d), d) for a, d in pairs]
    a, d = sum(p[0] for p in pairs), sum(p[1] for p in pairs)
    low, high, _, _ = ratio_interval(
        len(pairs), a, d, sum(x * x for x, _ in pairs), sum(y * y for _, y in pairs),
        sum(x * y for x, y in pairs), confidence,
    )  # fmt: skip
    assert low <= a / d <= high


# -- firing on simulated routes ----------------------------------------------------------------


def run(monitor: BreakevenMonitor, events) -> list[tuple[float, bool]]:
    flips = []
    for e in events:
        monitor.update(e)
        if monitor.changed:
            flips.append((e.ts, monitor.firing))
    return flips


def test_fires_when_acceptance_drops_below_cutoff() -> None:
    # creative-writing runs at r = 0.42; x0.8 puts it at 0.336, under the 0.40 default
    events = simulate(CREATIVE, ("acceptance_shift:route=creative-writing,at=1h,factor=0.8",))
    start = events[0].ts
    m = BreakevenMonitor()
    flips = run(m, events)
    assert [state for _, state in flips] == [True]
    assert 3600 < flips[0][0] - start < 3600 + 1800  # within half an hour of the drop
    ev = m.evidence()
    assert m.recommendation == "off" and ev["recommendation"] == "off"
    assert ev["high"] < ev["cutoff"] == 0.40 and ev["rate"] == pytest.approx(0.336, abs=0.01)
    assert ev["requests"] >= 30 and ev["drafted_tokens"] > ev["accepted_tokens"] > 0
    json.dumps(ev, allow_nan=False)


def test_silent_on_a_stable_route_at_045() -> None:
    events = simulate(CREATIVE.with_(acceptance=0.45))
    m = BreakevenMonitor()
    assert run(m, events) == []
    assert m.recommendation == "on"
    assert m.rate == pytest.approx(0.45, abs=0.01)


def test_a_cost_model_moves_the_cutoff() -> None:
    # the same drop, but with the route's own c = 0.35: 0.336 is still under 0.35 + 0.05
    events = simulate(CREATIVE, ("acceptance_shift:route=creative-writing,at=1h,factor=0.8",))
    cheap = BreakevenMonitor(cutoff=cutoff(CostModel(c=0.2)))
    dear = BreakevenMonitor(cutoff=cutoff(CostModel(c=0.35, v=0.05)))
    assert run(cheap, events) == []
    assert [s for _, s in run(dear, events)] == [True]


def _hovering(hysteresis: float, seed: int = 3) -> int:
    """Flips over 12 h of a rate that drifts +-0.02 around the cutoff with a 2 h period."""
    rng = np.random.default_rng(seed)
    m = BreakevenMonitor(hysteresis=hysteresis)
    flips = 0
    ts = np.cumsum(rng.exponential(3.0, 15_000))  # one request every 3 s
    rate = 0.40 + 0.02 * np.sin(2 * np.pi * ts / 7200.0)
    drafted = 4 * np.maximum(1, rng.lognormal(3.5, 0.6, len(ts)).astype(int))
    alpha = rng.beta(rate * 20, (1 - rate) * 20)
    accepted = rng.binomial(drafted, alpha)
    for t, a, d in zip(ts.tolist(), accepted.tolist(), drafted.tolist(), strict=True):
        m.observe(a, d, t)
        flips += m.changed
    return flips


def test_hysteresis_prevents_flapping_at_the_cutoff() -> None:
    without = _hovering(hysteresis=0.0)
    with_ = _hovering(hysteresis=0.03)
    assert without >= 6  # fires and resolves about once per cycle
    assert with_ <= 2  # fires once at the first trough; the peaks stay inside the band


def test_flat_at_the_cutoff_rarely_flips() -> None:
    rng = np.random.default_rng(11)
    m = BreakevenMonitor()
    flips = 0
    for i in range(20_000):
        d = 4 * int(rng.integers(10, 80))
        m.observe(int(rng.binomial(d, rng.beta(8, 12))), d, 2.0 * i)  # rate 0.40
        flips += m.changed
    assert flips <= 1


@pytest.mark.parametrize("spread", [400.0, 1.0])  # tight: flips a hair under the cutoff
def test_decisions_are_those_of_the_interval_on_every_request(spread: float) -> None:
    # the reference: the interval worked out on every request, as the rule reads
    rng = np.random.default_rng(5)
    m = BreakevenMonitor(window=600, hysteresis=0.0)
    firing, flips = False, 0
    for i in range(12_000):
        d = 4 * int(rng.integers(40, 100))
        rate = 0.40 + 0.012 * math.sin(i / 700)  # in and out of the cutoff
        m.observe(int(rng.binomial(d, rng.beta(rate * spread, (1 - rate) * spread))), d, i)
        if m.sufficient:
            ev = m.evidence()
            if not firing and ev["high"] < m.cutoff:
                firing = True
            elif firing and ev["rate"] > m.cutoff + m.hysteresis:
                firing = False
        assert m.firing == firing
        flips += m.changed
    assert flips >= 4


# -- no-draft requests, insufficient data ------------------------------------------------------


def test_no_draft_requests_are_not_zero_acceptance() -> None:
    m = BreakevenMonitor(min_requests=10)
    for i in range(200):
        if i % 2:
            m.update(request(float(i), accepted=0, drafted=0))
        else:
            m.update(request(float(i), accepted=24, drafted=40))
    assert m.rate == pytest.approx(0.6)
    assert m.no_draft_share == pytest.approx(0.5) and m.requests == 100
    assert not m.firing and m.recommendation == "on"
    assert m.evidence()["no_draft_share"] == pytest.approx(0.5)


def test_insufficient_data_decides_nothing() -> None:
    m = BreakevenMonitor(min_requests=30, min_tokens=500)
    assert m.recommendation == "insufficient_data" and m.rate is None
    for i in range(29):
        m.observe(0, 40, float(i))  # rate 0, but only 29 requests
    assert not m.firing and m.recommendation == "insufficient_data"
    m.observe(0, 40, 29.0)
    assert m.firing and m.changed and m.recommendation == "off"
    # the window empties out (route stopped drafting): the decision stays
    for i in range(100):
        m.observe(0, 0, 4000.0 + i)
    assert m.firing and not m.changed and m.recommendation == "off"
    assert not m.sufficient


def test_window_forgets_old_requests() -> None:
    m = BreakevenMonitor(window=600, min_requests=5, min_tokens=10)
    for i in range(10):
        m.observe(0, 10, float(i))
    for i in range(10):
        m.observe(10, 10, 1000.0 + i)
    assert m.rate == 1.0 and m.requests == 10


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        BreakevenMonitor(confidence=1.0)
    with pytest.raises(ValueError):
        BreakevenMonitor(min_requests=1)
    with pytest.raises(ValueError):
        BreakevenMonitor().observe(5, 4, 0.0)


# -- state -------------------------------------------------------------------------------------


def outputs(m: BreakevenMonitor) -> tuple:
    return (m.firing, m.changed, m.recommendation, m.interval, json.dumps(m.evidence()))


def test_snapshot_restore_mid_stream_gives_identical_outputs() -> None:
    events = simulate(CREATIVE, ("acceptance_shift:route=creative-writing,at=1h,for=1h,"
                                 "factor=0.8",))  # fmt: skip
    cut = len(events) // 5  # before the drop at 1 h
    a = BreakevenMonitor(hysteresis=0.0)
    for e in events[:cut]:
        a.update(e)
    snap = json.loads(json.dumps(a.snapshot()))
    b = BreakevenMonitor.restore(snap)
    assert b.snapshot() == a.snapshot()
    flips = 0
    for e in events[cut:]:
        a.update(e)
        b.update(e)
        assert outputs(a) == outputs(b)
        flips += a.changed
    assert flips >= 2  # the comparison went through a firing and a resolution
    assert a.snapshot() == b.snapshot()


def test_bad_versions_raise() -> None:
    snap = BreakevenMonitor().snapshot()
    assert snap["kind"] == "breakeven" and snap["version"] == 2
    with pytest.raises(StateVersionError):
        BreakevenMonitor.restore({**snap, "version": 3})
    with pytest.raises(StateVersionError):
        BreakevenMonitor.restore({**snap, "kind": "cusum"})
