"""The marginal cost per drafted position: measured (with its interval) where requests with
and without speculation share a target and batch bucket, else configured, else the default."""

from __future__ import annotations

import pytest

from monitor.detect.breakeven import DEFAULT_CUTOFF
from monitor.policy.costs import CostTable
from tests.monitor.policy.records import Slice, make_config, records

Z90 = 1.645


def _only(table: CostTable):
    (est,) = table.sorted()
    return est


def test_measured_where_both_sides_are_timed() -> None:
    recs = records([Slice(m=0.15, plain=40, requests=50)], hours=3)
    est = _only(CostTable.learn(recs, make_config(cost={"c": 0.9}), Z90))
    assert est.source == "measured"
    assert est.spec_timed == 150 and est.plain_timed == 120
    assert est.m == pytest.approx(0.15, abs=0.01)
    lo, hi = est.interval
    assert lo < 0.15 < hi and hi - lo < 0.02


def test_too_few_plain_requests_falls_back_to_the_configured_cost() -> None:
    recs = records([Slice(m=0.15, plain=5, batch="64-127")], hours=3)  # 15 < 30 timed
    cfg = make_config(cost={"c": 0.05, "v_by_batch": {1: 0.0, 32: 0.2, 128: 0.5}})
    est = _only(CostTable.learn(recs, cfg, Z90))
    assert (est.source, est.interval, est.plain_timed) == ("configured", None, 15)
    assert est.m == pytest.approx(0.25)  # c + v at the bucket's lower bound 64


def test_no_cost_model_means_the_default_cutoff() -> None:
    est = _only(CostTable.learn(records([Slice()], hours=1), make_config(), Z90))
    assert (est.source, est.m) == ("default", DEFAULT_CUTOFF)


def test_unmatched_cost_model_is_not_used() -> None:
    cfg = make_config(cost={"c": 0.05, "target_model": "other-*"})
    est = _only(CostTable.learn(records([Slice()], hours=1), cfg, Z90))
    assert est.source == "default"


def test_a_verification_step_cheaper_than_a_plain_step_clamps_to_zero() -> None:
    recs = records([Slice(m=-0.05, plain=40)], hours=2)
    est = _only(CostTable.learn(recs, make_config(), Z90))
    assert est.source == "measured" and est.m == 0.0 and est.interval[0] == 0.0


def test_costs_are_per_batch_bucket() -> None:
    recs = records([Slice(batch="1-1", m=0.05, plain=40),
                    Slice(batch="64-127", m=0.6, plain=40)], hours=2)
    table = CostTable.learn(recs, make_config(), Z90)
    assert [(e.batch, round(e.m, 2)) for e in table.sorted()] == [("1-1", 0.05),
                                                                  ("64-127", 0.6)]
    assert table.estimate("big", "r1", "small", "8-15").source == "default"
