from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from monitor.simulate.acceptance import calibrated_mean, chain_alpha, engine_rate, pooled_rate


def test_engine_rate_matches_the_closed_form() -> None:
    for a in (0.1, 0.5, 0.8, 0.95):
        for k in (1, 3, 5, 7):
            assert engine_rate(a, k) == pytest.approx(a * (1 - a**k) / (k * (1 - a)))
    assert engine_rate(1.0, 4) == 1.0 and engine_rate(0.0, 4) == 0.0


def test_engine_rate_is_vectorised() -> None:
    out = engine_rate(np.array([0.5, 0.9]), 3)
    assert out.shape == (2,) and out[0] < out[1]


@given(st.floats(0.01, 0.99), st.integers(1, 8))
def test_chain_alpha_inverts_engine_rate(rate: float, k: int) -> None:
    assert float(engine_rate(chain_alpha(rate, k), k)) == pytest.approx(rate, abs=1e-9)


@pytest.mark.parametrize(("rate", "k", "conc"), [(0.8, 5, 40), (0.42, 3, 20), (0.1, 3, 20)])
def test_calibrated_mean_hits_the_pooled_rate(rate: float, k: int, conc: float) -> None:
    mean = calibrated_mean(rate, k, conc)
    assert pooled_rate(mean, k, conc) == pytest.approx(rate, abs=1e-6)
    # spread between requests makes the pooled rate need a higher mean than no spread would
    assert mean > chain_alpha(rate, k)
