"""CUSUM calibration math against the worked numbers of peers-and-style.md 1(d)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from monitor.detect.calibration import (
    adjustment_coefficient,
    design_effect,
    kl_bernoulli,
    lorden_delay,
    normal_nodes,
    quasi_cusum_threshold,
    siegmund_arl,
    siegmund_delay,
    siegmund_threshold,
    threshold_for_rate,
)

# relative drop from 0.70 -> (I1, {ARL: (ln(ARL)/I1, Siegmund delay)}), in tokens
WORKED = {
    0.665: (0.0029, {1e5: (4030, 1632), 1e6: (4836, 2430), 1e7: (5642, 3235)}),
    0.63: (0.0112, {1e5: (1026, 534), 1e6: (1231, 739), 1e7: (1437, 944)}),
    0.56: (0.0436, {1e5: (264, 168), 1e6: (317, 221), 1e7: (370, 274)}),
}


@pytest.mark.parametrize("p1", sorted(WORKED))
def test_worked_table(p1: float) -> None:
    info, cells = WORKED[p1]
    i1, i0 = kl_bernoulli(p1, 0.70), kl_bernoulli(0.70, p1)
    assert round(i1, 4) == info
    for arl, (first_order, sharp) in cells.items():
        assert round(lorden_delay(arl, i1)) == first_order
        assert round(siegmund_delay(siegmund_threshold(arl, i0), i1)) == sharp


def test_simulated_points_and_segment_penalty() -> None:
    i1, i0 = kl_bernoulli(0.63, 0.70), kl_bernoulli(0.70, 0.63)
    assert siegmund_arl(4.0, i0) == pytest.approx(4600, rel=0.01)  # "formula 4.6k"
    assert round(siegmund_delay(4.0, i1)) == 269
    # holding a system-wide rate over K segments costs ln K / I more tokens
    assert [round(math.log(k) / i1) for k in (10, 100, 1000)] == [205, 410, 616]


def test_design_effects() -> None:
    assert design_effect(64, 1 / 51) == pytest.approx(2.24, abs=0.01)
    assert design_effect(64, 1 / 11) == pytest.approx(6.7, abs=0.05)
    assert design_effect(200, 1 / 11) == pytest.approx(19.1, abs=0.05)
    assert design_effect(1, 0.5) == 1.0


def test_kl_edges() -> None:
    assert kl_bernoulli(0.3, 0.3) == 0.0
    assert kl_bernoulli(0.0, 0.5) == pytest.approx(math.log(2))
    with pytest.raises(ValueError):
        kl_bernoulli(0.5, 1.0)


@given(st.floats(1.5, 1e9), st.floats(1e-4, 5.0), st.floats(0.05, 5.0))
def test_threshold_inverts_arl(arl: float, drift: float, theta: float) -> None:
    h = siegmund_threshold(arl, drift, theta)
    assert siegmund_arl(h, drift, theta) == pytest.approx(arl, rel=1e-6)


def test_rate_average_sits_between_the_hypotheses() -> None:
    h_a = siegmund_threshold(1e6, 0.02)
    h_b = siegmund_threshold(1e6, 0.005)
    h_mix = threshold_for_rate(1e6, [0.02, 0.005], [1.0, 1.0], [0.5, 0.5])
    assert min(h_a, h_b) < h_mix < max(h_a, h_b)
    # a hypothesis that drifts upwards needs a huge (but finite) threshold
    assert threshold_for_rate(1e6, [0.01, -0.001], [1.0, -0.2], [0.9, 0.1]) > 100.0


def test_adjustment_coefficient_of_an_exact_llr_is_one() -> None:
    rng = np.random.default_rng(3)
    p0, p1 = 0.6, 0.5
    x = rng.random(400_000) < p0
    llr = np.where(x, math.log(p1 / p0), math.log((1 - p1) / (1 - p0)))
    assert adjustment_coefficient(llr) == pytest.approx(1.0, abs=0.02)
    # after the change the root is -1 (the delay formula's theta)
    y = rng.random(400_000) < p1
    llr1 = np.where(y, math.log(p1 / p0), math.log((1 - p1) / (1 - p0)))
    assert adjustment_coefficient(llr1) == pytest.approx(-1.0, abs=0.02)
    with pytest.raises(ValueError):
        adjustment_coefficient([-1.0, -2.0])


def test_quasi_threshold_guards() -> None:
    rng = np.random.default_rng(4)
    x = rng.normal(-0.5, 1.0, 20_000)
    w = np.ones_like(x)
    h, theta = quasi_cusum_threshold(x, w, 1e5)
    assert theta == pytest.approx(1.0, abs=0.05)
    h_cap, theta_cap = quasi_cusum_threshold(x / 2, w, 1e5, theta_max=1.0)
    assert theta_cap == 1.0 and h_cap > quasi_cusum_threshold(x / 2, w, 1e5)[0]
    # an uncertain baseline raises the threshold
    h_se, _ = quasi_cusum_threshold(x, w, 1e5, shift=np.ones_like(x), se=0.2)
    assert h_se > h
    # clipping each increment at h / 2 can only lower h (theta of clipped increments is larger)
    assert quasi_cusum_threshold(x, w, 1e5, min_requests=2)[0] <= h


def test_normal_nodes() -> None:
    z, w = normal_nodes(5)
    assert float(w.sum()) == pytest.approx(1.0)
    assert float((w * z**2).sum()) == pytest.approx(1.0)
