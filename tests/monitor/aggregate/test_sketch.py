"""LogHistogram: bounded relative error, exact merges, JSON round trip."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monitor.aggregate.sketch import LogHistogram


def exact_quantile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[int(q * (len(s) - 1))]


@pytest.mark.parametrize("q", [0.01, 0.5, 0.9, 0.99])
def test_quantiles_within_relative_accuracy(q: float) -> None:
    rng = random.Random(q)
    values = [rng.lognormvariate(5, 1.5) for _ in range(20_000)]
    h = LogHistogram()
    for v in values:
        h.update(v)
    assert h.quantile(q) == pytest.approx(exact_quantile(values, q), rel=0.0101)


@given(st.lists(st.floats(min_value=0, max_value=1e9, allow_nan=False), min_size=1),
       st.lists(st.floats(min_value=0, max_value=1e9, allow_nan=False), min_size=1))
def test_merge_equals_one_histogram_of_both(a: list[float], b: list[float]) -> None:
    ha, hb, both = LogHistogram(), LogHistogram(), LogHistogram()
    for v in a:
        ha.update(v)
        both.update(v)
    for v in b:
        hb.update(v)
        both.update(v)
    ha.merge(hb)
    assert ha == both
    assert LogHistogram.from_json(ha.to_json()) == both


def test_zeros_empty_and_bad_arguments() -> None:
    h = LogHistogram()
    assert h.quantile(0.5) is None and h.mean is None
    h.update(0.0)
    h.update(10.0)
    assert h.quantile(0.0) == 0.0
    with pytest.raises(ValueError):
        h.quantile(1.5)
    with pytest.raises(ValueError):
        LogHistogram(0.0)
    with pytest.raises(ValueError):
        h.merge(LogHistogram(0.05))


@given(st.lists(st.floats(min_value=0.0, max_value=1e6, allow_nan=False), max_size=300),
       st.floats(min_value=0.0, max_value=1.0))
def test_quantile_of_the_json_form_equals_the_sketchs(values: list[float], q: float) -> None:
    from monitor.aggregate.sketch import quantile_of

    h = LogHistogram()
    h.extend(values)
    assert quantile_of(h.to_json(), q) == h.quantile(q)
    assert quantile_of(LogHistogram.from_json(h.to_json()).to_json(), q) == h.quantile(q)


@given(st.lists(st.one_of(st.just(0.0), st.floats(min_value=0.0, max_value=1e10,
                                                     allow_nan=False)), max_size=400))
def test_extend_counts_what_update_counts(values: list[float]) -> None:
    # extend() counts 16 values or more by bincount: the same buckets as one update() each
    one_by_one, at_once = LogHistogram(), LogHistogram()
    for v in values:
        one_by_one.update(v)
    at_once.extend(values)
    assert at_once == one_by_one
    assert at_once.total == pytest.approx(one_by_one.total)
