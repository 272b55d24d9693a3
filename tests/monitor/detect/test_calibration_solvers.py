"""The array solvers of :mod:`monitor.detect.calibration` against the scalar reference.

``calibration_reference`` is the calibration as it was before issue 18: one bisection per
threshold, one Newton iteration per CUSUM and baseline hypothesis. The array solvers must
find the same roots (to 1e-9 relative: both stop within 1e-12 of the root) on any
parameters, so that the detector's thresholds -- and hence its decisions -- do not move.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from monitor.detect import calibration as fast
from tests.monitor.detect import calibration_reference as ref

REL = 1e-9


def _close(got: float, want: float) -> bool:
    return got == pytest.approx(want, rel=REL, abs=1e-300)


def _root_slack(x: np.ndarray, w: np.ndarray | None, theta: float) -> float:
    """How far from the root the reference may stop: once ``|log mean exp(theta x)| <
    1e-13``, which on tiny increments or a mean near 0 (a flat log-mgf) leaves theta
    uncertain by ``1e-13 / slope``; the log-mgf itself is known to about 1e-16 of
    ``theta max|x|``."""
    wts = np.ones_like(x) if w is None else w
    z = theta * x
    e = wts * np.exp(z - z.max())
    slope = abs(float((e * x).sum() / e.sum()))
    return 2.0 * (1e-13 + 1e-15 * abs(theta) * float(np.abs(x).max())) / slope


def _root_close(got: float, want: float, x: np.ndarray, w: np.ndarray | None) -> bool:
    """Equal to 1e-9 relative, or as close as the reference's own stopping rule reaches."""
    return abs(got - want) <= REL * abs(want) + _root_slack(x, w, want)


# -- thresholds --------------------------------------------------------------------------------


def _same_threshold(got: float, want: float, arl: float, drifts: list[float],
                    thetas: list[float], weights: list[float]) -> bool:
    """Equal to 1e-9 relative; or both ends of a stretch of h where the false-alarm rate
    sits on the target to rounding (at an ARL of a few requests a hypothesis' rate can
    saturate, so "the smallest h" is any h of the stretch; seen at arl=2)."""
    if _close(got, want):
        return True

    def off_target(h: float) -> float:
        rate = sum(w / fast.siegmund_arl(h, d, t)
                   for d, t, w in zip(drifts, thetas, weights, strict=True) if w > 0.0)
        return abs(rate * arl - 1.0)

    lo, hi = sorted((got, want))
    return all(off_target(h) <= 1e-12 for h in np.linspace(lo, hi, 17))


_hypothesis = st.tuples(st.floats(1e-5, 5.0), st.floats(0.02, 8.0), st.floats(0.0, 1.0))


@settings(max_examples=300, deadline=None)
@given(arl=st.floats(1.5, 1e10), hyps=st.lists(_hypothesis, min_size=1, max_size=6),
       upward=st.booleans())
def test_threshold_for_rate_matches(arl: float, hyps: list[tuple[float, float, float]],
                                    upward: bool) -> None:
    drifts = [d for d, _, _ in hyps]
    thetas = [t for _, t, _ in hyps]
    weights = [w + 1e-3 for _, _, w in hyps]
    if upward:  # a hypothesis drifting upwards, as a young baseline's outer node may
        drifts[-1], thetas[-1] = -drifts[-1] / 10.0, -thetas[-1]
    total = sum(weights)
    weights = [w / total for w in weights]
    want = ref.threshold_for_rate(arl, drifts, thetas, weights)
    got = fast.threshold_for_rate(arl, drifts, thetas, weights)
    assert _same_threshold(got, want, arl, drifts, thetas, weights)


@settings(max_examples=100, deadline=None)
@given(arl=st.floats(2.0, 1e9), rows=st.lists(st.lists(_hypothesis, min_size=3, max_size=3),
                                               min_size=1, max_size=8))
def test_thresholds_for_rate_rows_are_the_scalar_ones(
        arl: float, rows: list[list[tuple[float, float, float]]]) -> None:
    drifts = np.array([[d for d, _, _ in r] for r in rows])
    thetas = np.array([[t for _, t, _ in r] for r in rows])
    weights = np.array([0.2, 0.5, 0.3])
    got = fast.thresholds_for_rate(arl, drifts, thetas, weights)
    for k in range(len(rows)):
        args = (arl, drifts[k].tolist(), thetas[k].tolist(), weights.tolist())
        assert _same_threshold(float(got[k]), ref.threshold_for_rate(*args), *args)


def test_threshold_edges() -> None:
    # never alarms: a heavy upward drift
    args = (1e9, [0.01, -0.5], [1.0, -0.01], [0.5, 0.5])
    assert fast.threshold_for_rate(*args) == ref.threshold_for_rate(*args) == 1e7
    # tiny theta h: the series branch of exp(x) - x - 1
    assert _close(fast.threshold_for_rate(1.5, [1e-4], [1e-6], [1.0]),
                  ref.threshold_for_rate(1.5, [1e-4], [1e-6], [1.0]))
    for bad in ((1.0, [0.1], [1.0], [1.0]), (10.0, [0.1], [-1.0], [1.0]),
                (10.0, [0.0], [1.0], [1.0])):
        with pytest.raises(ValueError):
            ref.threshold_for_rate(*bad)
        with pytest.raises(ValueError):
            fast.threshold_for_rate(*bad)


# -- adjustment coefficients -------------------------------------------------------------------


def _sample(kind: str, seed: int, size: int) -> tuple[np.ndarray, np.ndarray | None]:
    rng = np.random.default_rng(seed)
    if kind == "normal":
        return rng.normal(rng.uniform(-1.0, 1.0), rng.uniform(0.1, 3.0), size), None
    if kind == "llr":
        p0 = rng.uniform(0.2, 0.9)
        p1 = p0 * rng.uniform(0.5, 1.4)
        p1 = min(p1, 0.99)
        x = rng.random(size) < p0 * rng.uniform(0.95, 1.05)
        return np.where(x, math.log(p1 / p0), math.log((1 - p1) / (1 - p0))), None
    if kind == "skewed":  # rare large excursions, as extreme requests make
        return rng.exponential(1.0, size) * rng.uniform(0.5, 5.0) - rng.uniform(0.8, 3.0), None
    x = rng.normal(-0.3, 1.0, size)  # a histogram: values with counts
    return x, rng.integers(0, 50, size).astype(np.float64)


@settings(max_examples=300, deadline=None)
@given(kind=st.sampled_from(["normal", "llr", "skewed", "weighted"]),
       seed=st.integers(0, 2**32 - 1), size=st.integers(2, 3000))
def test_adjustment_coefficient_matches(kind: str, seed: int, size: int) -> None:
    x, w = _sample(kind, seed, size)
    try:
        want = ref.adjustment_coefficient(x, w)
    except ValueError:
        with pytest.raises(ValueError):
            fast.adjustment_coefficient(x, w)
        assert math.isnan(float(fast.adjustment_coefficients(x[None, :], w)[0]))
        return
    assert _root_close(fast.adjustment_coefficient(x, w), want, x, w)


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), rows=st.integers(1, 30))
def test_adjustment_coefficients_rows_are_the_scalar_ones(seed: int, rows: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.normal(rng.uniform(-1, 1, (rows, 1)), rng.uniform(0.2, 2, (rows, 1)), (rows, 400))
    x[0] = np.abs(x[0])  # one row without a root
    w = rng.integers(1, 20, 400).astype(np.float64)
    got = fast.adjustment_coefficients(x, w)
    for k in range(rows):
        try:
            want = ref.adjustment_coefficient(x[k], w)
        except ValueError:
            assert math.isnan(float(got[k]))
        else:
            assert _root_close(float(got[k]), want, x[k], w)


# -- a bank's thresholds from a request histogram ----------------------------------------------


def _bank(seed: int, requests: int, rho: float, p0: float,
          accept_all: bool = False) -> dict[str, np.ndarray]:
    """Bins of beta-binomial requests and a bank's increments over them, as the detector
    builds them (``OverdispersedCusum._thresholds``); ``accept_all``: every drafted token
    kept (a draft identical to its target)."""
    rng = np.random.default_rng(seed)
    d = rng.integers(1, 400, requests).astype(np.float64)
    c = 1.0 / rho - 1.0
    a = rng.binomial(d.astype(np.int64), rng.beta(p0 * c, (1.0 - p0) * c)).astype(np.float64)
    if accept_all:
        a = d.copy()
    w = 1.0 / (1.0 + (d - 1.0) * rho)
    key = np.floor(np.log(w * d) / math.log(1.08)) * 128 + np.floor(a * 100 // d)
    _, bin_of = np.unique(key, return_inverse=True)
    n = np.bincount(bin_of).astype(np.float64)
    wa = np.bincount(bin_of, w * a)
    wd = np.bincount(bin_of, w * d)
    # clamped as ``OverdispersedCusum._calibrate`` does: a beta with a tiny second shape
    # draws 1.0, every request is fully accepted and log(1 - p) would be log 0
    p = min(max(float(wa.sum() / wd.sum()), 1e-6), 1.0 - 1e-6)
    effects = np.array([0.05, 0.1, 0.2, 0.4, 0.8])
    p1 = np.concatenate([p * (1 - effects), np.minimum(p * (1 + effects), p + 0.8 * (1 - p))])
    ca, cb = np.log(p1 / p), np.log((1 - p1) / (1 - p))
    inc = (wa * ca[:, None] + (wd - wa) * cb[:, None]) / n
    shift = p * (ca - cb)[:, None] * wd / n
    return {"inc": inc, "shift": shift, "n": n}


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), requests=st.integers(60, 6000),
       rho=st.floats(0.005, 0.3), p0=st.floats(0.2, 0.9), se=st.floats(0.0, 0.05),
       capped=st.booleans(), min_requests=st.sampled_from([None, 1, 2, 5]),
       arl=st.floats(1e3, 1e9))
# a beta draw of 1.0: every request fully accepted (see ``_bank``)
@example(seed=105, requests=825, rho=0.28125, p0=0.890625, se=0.0, capped=False,
         min_requests=None, arl=1000.0)
def test_quasi_cusum_thresholds_match(seed: int, requests: int, rho: float, p0: float,
                                      se: float, capped: bool, min_requests: int | None,
                                      arl: float) -> None:
    bank = _bank(seed, requests, rho, p0)
    theta_max = 1.0 if capped else math.inf
    hs, thetas = fast.quasi_cusum_thresholds(
        bank["inc"], bank["n"], arl, shift=bank["shift"], se=se, theta_max=theta_max,
        min_requests=min_requests)
    for k in range(len(bank["inc"])):
        want_h, want_theta = ref.quasi_cusum_threshold(
            bank["inc"][k], bank["n"], arl, shift=bank["shift"][k], se=se,
            theta_max=theta_max, min_requests=min_requests)
        rel = REL + _hypotheses_slack(bank["inc"][k], bank["shift"][k], bank["n"], se)
        assert float(hs[k]) == pytest.approx(want_h, rel=rel)
        assert float(thetas[k]) == pytest.approx(want_theta, rel=rel)


@pytest.mark.parametrize("se", [0.0, 0.01])
@pytest.mark.parametrize("min_requests", [None, 2])
def test_quasi_cusum_thresholds_when_every_token_is_accepted(se: float,
                                                             min_requests: int | None) -> None:
    """A draft that never misses (p clamped under 1): each CUSUM's increments all sit on
    one side of 0, no root exists and both solvers take the Gaussian one (seed 105 of the
    property test drew such a baseline before ``_bank`` clamped p)."""
    bank = _bank(105, 825, 0.28125, 0.890625, accept_all=True)
    hs, thetas = fast.quasi_cusum_thresholds(bank["inc"], bank["n"], 1000.0,
                                             shift=bank["shift"], se=se,
                                             min_requests=min_requests)
    assert np.isfinite(hs).all() and np.isfinite(thetas).all()
    for k in range(len(bank["inc"])):
        want_h, want_theta = ref.quasi_cusum_threshold(
            bank["inc"][k], bank["n"], 1000.0, shift=bank["shift"][k], se=se,
            min_requests=min_requests)
        assert float(hs[k]) == pytest.approx(want_h, rel=REL)
        assert float(thetas[k]) == pytest.approx(want_theta, rel=REL)


def _hypotheses_slack(inc: np.ndarray, shift: np.ndarray, n: np.ndarray, se: float) -> float:
    """The largest relative :func:`_root_slack` of a CUSUM's thetas over the baseline
    hypotheses: an outer node can put the mean next to 0, where the reference's theta is
    only good to its stopping rule, and h moves with it."""
    worst = 0.0
    for zm in ref.normal_nodes(5)[0] if se > 0.0 else [0.0]:
        x = inc + zm * se * shift
        try:
            theta = ref.adjustment_coefficient(x, n)
        except ValueError:
            continue  # the Gaussian root: closed form, no slack
        worst = max(worst, _root_slack(x, n, theta) / abs(theta))
    return worst


def test_quasi_cusum_threshold_edges() -> None:
    one = np.ones(3)
    # every increment below 0 (the Gaussian root), and a flat sample (mean 0)
    for inc in (np.array([-1.0, -0.5, -0.2]), np.zeros(3)):
        got = fast.quasi_cusum_threshold(inc, one, 1e4, min_requests=2)
        want = ref.quasi_cusum_threshold(inc, one, 1e4, min_requests=2)
        assert _close(got[0], want[0]) and _close(got[1], want[1])
    # an even node count has no central node: theta reads 1
    x = np.random.default_rng(0).normal(-0.5, 1.0, 500)
    got = fast.quasi_cusum_threshold(x, np.ones(500), 1e4, shift=np.ones(500), se=0.1, nodes=4)
    want = ref.quasi_cusum_threshold(x, np.ones(500), 1e4, shift=np.ones(500), se=0.1, nodes=4)
    assert _close(got[0], want[0]) and got[1] == want[1] == 1.0


@pytest.mark.parametrize("n", [1, 3, 5, 8])
def test_normal_nodes_are_the_reference_ones(n: int) -> None:
    z, w = fast.normal_nodes(n)
    z_ref, w_ref = ref.normal_nodes(n)
    assert np.array_equal(z, z_ref) and np.array_equal(w, w_ref)
    assert not z.flags.writeable and fast.normal_nodes(n)[0] is z  # computed once
