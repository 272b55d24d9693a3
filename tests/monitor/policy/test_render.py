"""The outputs: JSON with a stable shape, the table, vLLM settings read back the way vLLM
reads a batch-size schedule, and the gateway routing table."""

from __future__ import annotations

import json

import pytest
import yaml

from monitor.policy.learn import learn
from monitor.policy.render import MAX_BATCH, format_policy, vllm_k_for
from tests.monitor.policy.records import Slice, make_config, records

SURVIVAL = (0.8, 0.5, 0.2)
# m = 0.05 -> K=3, m = 0.3 -> K=2, m = 0.9 -> off (T(1) = 1.8 / 1.9)
COST = {"c": 0.05, "v_by_batch": {1: 0.0, 8: 0.25, 64: 0.85}}
BUCKETS = ("1-1", "2-3", "8-15", "32-63", "64-127")


def _result(buckets=BUCKETS, **kw):
    recs = records([Slice(batch=b, survival=SURVIVAL, tags=t) for b in buckets
                    for t in ("lang=py", "lang=go")], hours=6)
    return learn(recs, make_config(cost=COST, **kw), features="tags,batch_size")


def _conservative(choices: dict[tuple[int, int], int], batch: int) -> int:
    """The most a batch size may get: its bucket's K where covered; the smaller neighbour's in
    a gap; the lowest bucket's below it; 0 above the highest."""
    spans = sorted(choices)
    for (lo, hi) in spans:
        if lo <= batch <= hi:
            return choices[(lo, hi)]
    if batch < spans[0][0]:
        return choices[spans[0]]
    if batch > spans[-1][1]:
        return 0
    below = max(s for s in spans if s[1] < batch)
    above = min(s for s in spans if s[0] > batch)
    return min(choices[below], choices[above])


def test_vllm_schedule_read_as_vllm_reads_it() -> None:
    res = _result()
    (doc,) = json.loads(format_policy(res, "vllm"))
    assert (doc["target"], doc["draft"]) == ("big@r1", "small@d1")
    cfg = doc["speculative_config"]
    assert (cfg["method"], cfg["model"], cfg["num_speculative_tokens"]) == (
        "draft_model", "small", 3)
    schedule, top = cfg["num_speculative_tokens_per_batch_size"], cfg["num_speculative_tokens"]
    assert schedule[0][0] == 1 and schedule[-1][1] == MAX_BATCH
    choices = {(b.lo, b.hi): b.num_speculative_tokens for b in res.schedules[0].buckets}
    assert choices == {(1, 1): 3, (2, 3): 3, (8, 15): 2, (32, 63): 2, (64, 127): 0}
    for (lo, hi), k in choices.items():
        assert [vllm_k_for(schedule, top, b) for b in range(lo, hi + 1)] == [k] * (hi - lo + 1)
    for batch in range(1, MAX_BATCH + 200):
        assert vllm_k_for(schedule, top, batch) <= _conservative(choices, batch), batch
    assert vllm_k_for(schedule, top, 5) == 2 and vllm_k_for(schedule, top, 20) == 2
    assert vllm_k_for(schedule, top, 200) == 0


def test_the_open_last_bucket_ends_at_4096_and_the_lowest_covers_below() -> None:
    (doc,) = json.loads(format_policy(_result(buckets=("4-7", "256+")), "vllm"))
    assert doc["speculative_config"]["num_speculative_tokens_per_batch_size"] == [
        [1, 3, 3], [4, 7, 3], [8, 255, 0], [256, 4096, 0]]


def test_a_pair_that_should_never_speculate_gets_no_speculative_config() -> None:
    (doc,) = json.loads(format_policy(_result(buckets=("64-127",)), "vllm"))
    assert doc["speculative_config"] is None


def test_vllm_k_for_reads_ranges_gaps_and_the_clamp() -> None:
    assert [vllm_k_for({"1-16": 3, "64-128": 2}, 2, b) for b in (1, 40, 64, 500)] == [2, 2, 2, 2]
    assert [vllm_k_for([[1, 16, 3], [64, 128, 1]], 3, b) for b in (16, 17, 64, 500)] == [
        3, 3, 1, 1]
    with pytest.raises(ValueError, match="start at 1"):
        vllm_k_for([[2, 16, 3]], 3, 4)
    with pytest.raises(ValueError, match="non-overlapping"):
        vllm_k_for([[1, 16, 3], [10, 20, 1]], 3, 4)


def test_json_has_a_stable_documented_shape() -> None:
    res = _result()
    text = format_policy(res, "json")
    assert text == format_policy(_result(), "json")  # same data, same bytes
    doc = json.loads(text)
    assert list(doc) == ["version", "route", "features", "train", "holdout_window", "settings",
                         "costs", "routes", "slices", "schedules", "holdout", "holdout_note",
                         "gains"]
    assert list(doc["slices"][0]) == [
        "id", "route", "pair", "features", "requests", "output_tokens", "measured_length",
        "acceptance", "acceptance_interval", "survival", "marginal_cost", "speedups",
        "best_length", "setting", "decided_by", "reason"]
    assert list(doc["costs"][0]) == ["target_model", "target_revision", "draft_model", "batch",
                                     "m", "source", "interval", "spec_timed", "plain_timed"]
    assert list(doc["holdout"]) == ["window", "requests", "output_tokens", "strategies",
                                    "comparisons", "resamples", "unstable", "slices", "note"]
    assert [s["name"] for s in doc["holdout"]["strategies"]] == [
        "policy", "all_on", "all_off", "per_route"]
    assert list(doc["gains"][0]) == [
        "route", "timed_requests", "decode_share", "mean_e2e_ms", "mean_decode_ms",
        "speedup_observed", "speedup_policy", "saving_ms", "decode_bound", "note"]


def test_routing_table_is_yaml_with_tag_matches_and_batch_ranges() -> None:
    doc = yaml.safe_load(format_policy(_result(buckets=("1-1", "256+")), "routing"))
    (route,) = doc["routes"]
    assert route["route"] == "code" and route["pair"].startswith("big@r1 <- small@d1")
    first = route["slices"][0]
    assert first == {"match": {"tags": {"lang": "go"}}, "batch": "1-1", "speculate": True,
                     "num_speculative_tokens": 3, "decided_by": "slice"}
    assert {s["batch"] for s in route["slices"]} == {"1-1", "256-4096"}


def test_table_lists_slices_the_holdout_and_the_gains() -> None:
    text = format_policy(_result(), "table")
    assert "tags=lang=py batch_size=1-1" in text
    assert "policy - all_on" in text and "what each route gains" in text
    with pytest.raises(ValueError):
        format_policy(_result(), "xml")


def test_a_prefill_bound_route_is_said_to_gain_little() -> None:
    from monitor.policy.costs import CostTable
    from monitor.policy.gains import route_gains
    from monitor.policy.learn import _group

    recs = records([Slice()], hours=2)
    for r in recs:
        r.stats.ttft_ms = r.stats.e2e_ms * 3  # prefill three times the decode
        r.stats.e2e_ms = r.stats.decode_ms + r.stats.ttft_ms
    cfg = make_config(cost=COST)
    g = _group(recs, CostTable.learn(recs, cfg, 1.645), ())
    (gain,) = route_gains(recs, g.slices, {})
    assert gain.decode_bound is False and "will not be felt" in gain.note
    assert gain.saving_ms == pytest.approx(0.0)  # no decisions: the policy is off
