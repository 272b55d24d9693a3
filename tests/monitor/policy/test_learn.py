"""Learning the policy: the best draft length per slice, off where speculation loses, small
slices inheriting their parent's setting, the time split, and the features."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from monitor.policy.exceptions import HindsightFeatureError, PolicyUsageError
from monitor.policy.learn import compute_policy, learn
from tests.monitor.policy.records import HOUR, T0, Slice, make_config, records

COST = {"c": 0.1}


def _by_features(result) -> dict[tuple, object]:
    return {d.features: d for d in result.slices}


def test_speculation_flips_off_where_it_loses() -> None:
    recs = records([Slice(tags="lang=py", survival=(0.9, 0.8, 0.7)),
                    Slice(tags="lang=rare", survival=(0.1, 0.02, 0.0))], hours=6)
    res = learn(recs, make_config(cost=COST), features="tags.lang")
    py, rare = (_by_features(res)[(("tags.lang", v),)] for v in ("py", "rare"))
    assert (py.speculate, py.num_speculative_tokens, py.decided_by) == (True, 3, "slice")
    assert py.speedups[3] == pytest.approx(3.4 / 1.3, abs=0.03)
    assert (rare.speculate, rare.num_speculative_tokens) == (False, 0)
    assert rare.speedups[1] < 1.02 and "off" in rare.reason


def test_the_best_draft_length_is_chosen_not_the_longest() -> None:
    # T(1) = 1.9/1.1 = 1.73, T(2) = 2.2/1.2 = 1.83, T(3) = 2.3/1.3 = 1.77
    res = learn(records([Slice(survival=(0.9, 0.3, 0.1))], hours=6), make_config(cost=COST),
                features="batch_size")
    (d,) = res.slices
    assert (d.best_length, d.num_speculative_tokens, d.measured_length) == (2, 2, 3)


def test_min_gain_keeps_the_shorter_length() -> None:
    # T(1) = 1.73, T(2) = 1.83: 6% better, not 10%
    res = learn(records([Slice(survival=(0.9, 0.3, 0.1))], hours=6),
                make_config(cost=COST, min_gain=0.10), features="batch_size")
    assert res.slices[0].num_speculative_tokens == 1


def test_verification_cost_rising_with_batch_turns_large_batches_off() -> None:
    cost = {"c": 0.05, "v_by_batch": {1: 0.0, 64: 0.6}}
    recs = records([Slice(batch="1-1", survival=(0.6, 0.4, 0.2)),
                    Slice(batch="64-127", survival=(0.6, 0.4, 0.2))], hours=6)
    res = learn(recs, make_config(cost=cost))
    settings = {dict(d.features)["batch_size"]: d.num_speculative_tokens for d in res.slices}
    assert settings == {"1-1": 3, "64-127": 0}
    assert res.features == ("tags", "batch_size")  # the default


def test_a_small_slice_keeps_its_parent_setting_and_says_so() -> None:
    recs = records([Slice(tags="lang=py", survival=(0.9, 0.8, 0.7), requests=50),
                    Slice(tags="lang=xx", survival=(0.1, 0.0, 0.0), requests=3)], hours=6)
    res = learn(recs, make_config(cost=COST), features="tags,batch_size")
    small = _by_features(res)[(("tags", "lang=xx"), ("batch_size", "1-1"))]
    assert small.requests < 100 and small.best_length == 0  # its own evidence says off
    assert small.decided_by == "parent" and small.num_speculative_tokens == 3
    assert "only" in small.reason and "batch 1-1" in small.reason


def test_without_a_batch_parent_the_route_pooled_setting_is_kept() -> None:
    recs = records([Slice(tags="lang=py", survival=(0.9, 0.8, 0.7), requests=50),
                    Slice(tags="lang=xx", survival=(0.1, 0.0, 0.0), requests=3)], hours=6)
    res = learn(recs, make_config(cost=COST), features="tags")
    small = _by_features(res)[(("tags", "lang=xx"),)]
    assert small.decided_by == "parent" and "pooled" in small.reason
    assert small.num_speculative_tokens == res.routes[0].num_speculative_tokens == 3


def test_tag_key_feature_and_unknown_key_values() -> None:
    recs = records([Slice(tags="lang=py&tool=yes"), Slice(tags="tool=no")], hours=6)
    res = learn(recs, make_config(cost=COST), features=["tags.lang"])
    assert sorted(d.features for d in res.slices) == [(("tags.lang", ""),),
                                                      (("tags.lang", "py"),)]


def test_requests_without_speculation_feed_only_the_costs() -> None:
    res = learn(records([Slice(plain=40)], hours=6), make_config(), features="batch_size")
    (d,) = res.slices
    assert d.requests == 4 * 50  # 4 training hours; the plain requests are not in it
    assert res.costs[0].source == "measured"


def test_default_split_holds_out_the_last_third_on_an_hour_boundary() -> None:
    res = learn(records([Slice()], hours=6), make_config(cost=COST))
    assert (res.train.since, res.train.until) == (T0, T0 + 4 * HOUR)
    assert res.holdout is not None
    assert (res.holdout.window.since, res.holdout.window.until) == (T0 + 4 * HOUR,
                                                                   T0 + 6 * HOUR)


def test_given_windows_and_a_holdout_before_training_ends_is_refused() -> None:
    recs = records([Slice()], hours=6)
    at = lambda h: datetime.fromtimestamp(T0 + h * HOUR, UTC)  # noqa: E731
    res = learn(recs, make_config(cost=COST), train=(at(1), at(3)), holdout=(at(3), at(5)))
    assert res.train.hours == 2 and res.holdout.window.hours == 2
    assert res.slices[0].requests == 2 * 50
    with pytest.raises(PolicyUsageError, match="before the training window ends"):
        learn(recs, make_config(cost=COST), train=(at(0), at(4)), holdout=(at(3), at(6)))


def test_no_records_is_a_usage_error_that_says_why() -> None:
    with pytest.raises(PolicyUsageError, match="no slice rollups.*telemetry v1.1"):
        learn([], make_config())


def test_compute_policy_reads_the_store_after_checking_features() -> None:
    class FakeStore:
        calls: list[tuple] = []

        def slice_records(self, since, until, route):
            self.calls.append((since, until, route))
            return records([Slice()], hours=3)

    store = FakeStore()
    with pytest.raises(HindsightFeatureError):
        compute_policy(store, make_config(), features="output_tokens")
    assert store.calls == []
    res = compute_policy(store, make_config(cost=COST), route="code")
    assert store.calls == [(None, None, "code")] and res.route == "code"
