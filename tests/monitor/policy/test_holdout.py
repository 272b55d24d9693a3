"""The held-out judgement: acceptance predicted against realized (unstable slices), and the
policy's goodput against all-on, all-off and per-route on/off with bootstrap intervals."""

from __future__ import annotations

import pytest

from monitor.policy.learn import learn
from tests.monitor.policy.records import Slice, make_config, records

COST = {"c": 0.05, "v_by_batch": {1: 0.0, 64: 0.95}}
GOOD = (0.9, 0.8, 0.7)
POOR = (0.04, 0.0, 0.0)


def _structured(hours: int = 9) -> list:
    """Inside one route: lang=py accepts well, lang=rare poorly; at batch 64+ verification
    costs so much that speculation loses for both."""
    return records([Slice(tags="lang=py", batch="1-1", survival=GOOD, requests=60),
                    Slice(tags="lang=rare", batch="1-1", survival=POOR, requests=40),
                    Slice(tags="lang=py", batch="64-127", survival=GOOD, requests=60),
                    Slice(tags="lang=rare", batch="64-127", survival=POOR, requests=40)],
                   hours=hours)


def test_the_policy_beats_every_alternative_on_structured_traffic() -> None:
    res = learn(_structured(), make_config(cost=COST), features="tags.lang,batch_size")
    on = {tuple(v for _, v in d.features): d.num_speculative_tokens for d in res.slices}
    assert on == {("py", "1-1"): 3, ("rare", "1-1"): 0, ("py", "64-127"): 0,
                  ("rare", "64-127"): 0}
    g = {s.name: s.goodput for s in res.holdout.strategies}
    assert g["policy"] > g["per_route"] and g["policy"] > g["all_on"] > 0
    assert g["policy"] > g["all_off"] == pytest.approx(1.0)
    for s in res.holdout.strategies:
        assert s.interval[0] <= s.goodput <= s.interval[1]
    for c in res.holdout.comparisons:
        assert c.difference > 0 and c.interval[0] > 0 and c.better, c


def test_the_bootstrap_is_deterministic() -> None:
    a = learn(_structured(6), make_config(cost=COST))
    b = learn(_structured(6), make_config(cost=COST))
    assert a.holdout.to_json() == b.holdout.to_json()


def test_a_slice_whose_acceptance_moved_is_unstable_and_a_steady_one_is_not() -> None:
    before = [Slice(tags="lang=py", survival=GOOD), Slice(tags="lang=go", survival=GOOD)]
    after = [Slice(tags="lang=py", survival=GOOD), Slice(tags="lang=go", survival=(0.5, 0.3, 0.1))]
    recs = records(before, hours=9, survival_from={6: after})
    res = learn(recs, make_config(cost=COST), features="tags.lang")
    checks = {c.id.rsplit("=", 1)[1]: c for c in res.holdout.slices}
    assert checks["go"].unstable is True and checks["go"].difference < -0.2
    assert checks["py"].unstable is False
    assert abs(checks["py"].difference) <= checks["py"].allowed
    assert res.holdout.to_json()["unstable"] == [checks["go"].id]


def test_a_slice_unseen_in_training_runs_at_its_parent_setting() -> None:
    recs = records([Slice(tags="lang=py", survival=GOOD)], hours=6) + records(
        [Slice(tags="lang=new", survival=GOOD)], hours=2, start_hour=4)
    res = learn(recs, make_config(cost=COST), features="tags.lang")
    g = {s.name: s.goodput for s in res.holdout.strategies}
    assert g["policy"] == pytest.approx(g["all_on"])  # the new slice ran at the route's K=3
    assert [c.id.rsplit("=", 1)[1] for c in res.holdout.slices] == ["py"]
