"""SGLang /generate responses -> telemetry v1, counts by hand from engine-telemetry.md 2.1 and
5.1 (spec_accept_length = completion_tokens / spec_verify_ct, bonus and prefill token in)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from monitor.adapters.common import NOTE_KEY, AdapterError
from monitor.adapters.sglang import accepted_from_accept_length, to_event
from tests.monitor.adapters import defaults, event_ts, outputs, parses_cleanly

L8 = "llama-3.1-8b-instruct"  # /generate names no model: --target-model picks the entry
S0 = 1793628300.0  # 2026-11-02T14:05:00Z
K = 4  # the mapping's num_speculative_tokens: SGLang never reports it


def _by_id() -> dict[str, dict[str, Any]]:
    d = defaults(target_model=L8)
    return {e["request_id"]: e for e in (to_event(raw, d) for raw in outputs("sglang"))}


def test_every_request_by_hand() -> None:
    events = _by_id()
    # (drafted, accepted, steps, per_position or None, status, ts, e2e, ttft)
    want = {
        # newest names: A = spec_num_correct_drafts 18, D = spec_num_proposed_drafts 40.
        # Histogram [2, 3, 2, 1, 2]: S = 10, 1*3 + 2*2 + 3*1 + 4*2 = 18 = A;
        # p = (3+2+1+2, 2+1+2, 1+2, 2) = (8, 5, 3, 2)
        "sg-1": (40, 18, 10, [8, 5, 3, 2], "ok", S0 + 1.2, 1200.0, 150.0),
        # older names: A = 14, D = 24 = 6 x 4. [1, 1, 1, 1, 2]: 1 + 2 + 3 + 8 = 14,
        # p = (5, 4, 3, 2); finish time from decode_finished_ts
        "sg-2": (24, 14, 6, [5, 4, 3, 2], "ok", S0 + 3.9, 900.0, 100.0),
        # only spec_verify_ct S = 8 and spec_accept_length L = 3.25: L x S = 26 tokens =
        # 1 prefill token + A accepted + S bonus tokens, so A = 26 - 8 - 1 = 17; D = S x k = 32.
        # No finish time: ts = request_received_ts + e2e_latency
        "sg-3": (32, 17, 8, None, "ok", S0 + 6 + 1.5, 1500.0, None),
        # no spec fields at all: SGLang writes them only when spec_verify_ct > 0
        "sg-4": (0, 0, 0, None, "ok", S0 + 8.05, 50.0, 40.0),
        # abort with an HTTP status code: error. Only the rate: D = 2 x 4 = 8,
        # A = 0.25 x 8 = 2 (and L x S = 2.5 x 2 = 5 = 1 + 2 + 2 agrees)
        "sg-5": (8, 2, 2, None, "error", S0 + 10.4, 400.0, None),
        # abort without one (the client left): cancelled. Oldest count names: A = 5, D = 12
        "sg-6": (12, 5, 3, None, "cancelled", S0 + 12.6, 600.0, None),
    }
    assert set(events) == set(want)
    for request_id, (drafted, accepted, steps, per_pos, status, ts, e2e, ttft) in want.items():
        e = events[request_id]
        parses_cleanly(e)
        spec = e["spec"]
        assert spec["num_speculative_tokens"] == K
        assert (spec["drafted_tokens"], spec["accepted_tokens"], spec["verify_steps"],
                spec.get("accepted_per_position")) == (drafted, accepted, steps, per_pos)
        assert e["status"] == status, request_id
        assert event_ts(e) == pytest.approx(ts, abs=1e-3), request_id
        assert e["e2e_ms"] == pytest.approx(e2e)
        assert e.get("ttft_ms") == (None if ttft is None else pytest.approx(ttft, abs=1e-3))
        assert e["route"] == "creative-writing" and e["spec"]["method"] == "eagle"
        assert e["target"]["model"] == L8 and e["draft"]["model"] == "sglang-eagle3-llama3.1-8b"
        assert NOTE_KEY not in e
    # SGLang's own accept length is (1 + A + S) / S, one prefill token above vLLM's 1 + A/S
    assert (1 + 18 + 10) / 10 == 2.9 and 1 + 18 / 10 == 2.8


def _meta(request_id: str = "sg-1") -> dict[str, Any]:
    raw = next(r for r in outputs("sglang") if r["meta_info"]["id"] == request_id)
    return copy.deepcopy(raw)


def _reason(raw: dict[str, Any], **flags: Any) -> str:
    with pytest.raises(AdapterError) as err:
        to_event(raw, defaults(target_model=L8, **flags))
    return err.value.reason


@pytest.mark.parametrize(("mutate", "reason"), [
    (lambda m: m.pop("completion_tokens"), "meta_info.completion_tokens: missing"),
    (lambda m: m.update(spec_verify_ct=2.5),
     "meta_info.spec_verify_ct: must be an integer (got number 2.5)"),
    (lambda m: m.update(spec_num_correct_drafts=41, spec_correct_drafts_histogram=None,
                        spec_accept_histogram=None),
     "meta_info: 41 accepted drafts > 40 drafted"),
    (lambda m: m.update(spec_correct_drafts_histogram=[2, 3, 2, 1, 2, 0]),
     "meta_info.spec_correct_drafts_histogram: has 6 buckets"),
    (lambda m: m.update(spec_correct_drafts_histogram=[3, 3, 2, 1, 2]),
     "meta_info.spec_correct_drafts_histogram: sums to 11 steps, the totals say 10"),
    (lambda m: [m.pop(k) for k in ("e2e_latency", "request_finished_ts")],
     "meta_info.e2e_latency: missing"),
    (lambda m: m.update(finish_reason={"type": "boom"}),
     "meta_info.finish_reason.type: unknown finish reason 'boom'"),
    (lambda m: m.update(finish_reason=None), "meta_info.finish_reason: missing"),
    (lambda m: m.update(prefill_finished_ts=m["request_received_ts"] - 1),
     "meta_info.request_received_ts..prefill_finished_ts: ends before it starts"),
])  # fmt: skip
def test_bad_fields_are_named(mutate: Any, reason: str) -> None:
    raw = _meta()
    mutate(raw["meta_info"])
    assert _reason(raw).startswith(reason)


def test_without_meta_info_or_draft_length() -> None:
    assert _reason({"text": "x"}).startswith("meta_info: missing")
    raw = _meta()
    # a model the mapping does not know: no draft length anywhere
    raw_defaults = dict(route="r", target_revision="1", target_tokenizer="t")
    with pytest.raises(AdapterError, match="num_speculative_tokens: the engine output"):
        to_event(raw, defaults(target_model="unknown", **raw_defaults))


def test_no_spec_fields_without_speculation_configured_is_speculation_off() -> None:
    raw = _meta("sg-4")
    event = to_event(raw, defaults(target_model="plain", route="r", target_revision="1",
                                   target_tokenizer="t"))
    parses_cleanly(event)
    assert "spec" not in event


def test_accept_length_must_agree_with_the_token_count() -> None:
    assert accepted_from_accept_length(None, 8, 26) == 17  # L = completion / S when absent
    with pytest.raises(AdapterError, match="3.5 x spec_verify_ct 8 = 28 tokens, but"):
        accepted_from_accept_length(3.5, 8, 26)
    with pytest.raises(AdapterError, match="leave no room"):
        accepted_from_accept_length(None, 8, 8)


def test_no_wall_clock_times_means_pinned_ts_with_a_note() -> None:
    raw = _meta("sg-3")
    del raw["meta_info"]["request_received_ts"]
    event = to_event(raw, defaults(target_model=L8))
    parses_cleanly(event)
    assert event["ts"] == "2026-11-02T14:07:30.000Z" and "older build" in event[NOTE_KEY]
