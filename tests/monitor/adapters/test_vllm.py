"""vLLM outputs -> telemetry v1: counts, per-position values and timing by hand from the
reference (engine-telemetry.md 1.3 and 5.1; vLLM's per-request metrics docs)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from monitor.adapters.common import NOTE_KEY, AdapterError
from monitor.adapters.vllm import to_event
from tests.monitor.adapters import defaults, event_ts, outputs, parses_cleanly

B = 1793628180.0  # 2026-11-02T14:03:00Z, the fixtures' first `created`
L70 = "llama-3.1-70b-instruct"


def _by_id() -> dict[str, dict[str, Any]]:
    d = defaults(target_model=L70)
    return {e["request_id"]: e for e in (to_event(raw, d) for raw in outputs("vllm"))}


def test_every_fixture_event_parses_cleanly() -> None:
    events = _by_id()
    assert len(events) == 6
    for event in events.values():
        parses_cleanly(event)
        assert event["engine"] == "vllm" and NOTE_KEY not in event


def test_documented_example_counts_and_per_position() -> None:
    e = _by_id()["chatcmpl-v1"]
    # vLLM's acceptance_metrics.md example: histogram [39, 1, 0, 3] for k = 3.
    # S = 39 + 1 + 0 + 3 = 43; A = 0*39 + 1*1 + 2*0 + 3*3 = 10; D = 129 (given).
    # Position i was accepted in the steps that accepted >= i+1 drafts:
    # p0 = 1 + 0 + 3 = 4, p1 = 0 + 3 = 3, p2 = 3 (sum 10 = A).
    assert e["spec"] == {"num_speculative_tokens": 3, "drafted_tokens": 129,
                         "accepted_tokens": 10, "verify_steps": 43,
                         "accepted_per_position": [4, 3, 3], "method": "draft_model"}
    # mean accepted length 1 + A/S = 1.2326 is the documented mean_acceptance_length
    assert 1 + 10 / 43 == pytest.approx(1.2325581395348837)
    # e2e = queue 12.5 + TTFT 85.5 + generation 1240 = 1338 ms; our TTFT from arrival at the
    # engine = queue + TTFT = 98 ms; ts = created + e2e.
    assert (e["e2e_ms"], e["ttft_ms"]) == (1338.0, 98.0)
    assert event_ts(e) == pytest.approx(B + 1.338)
    assert (e["output_tokens"], e["prompt_tokens"], e["status"]) == (54, 42, "ok")
    assert e["route"] == "code-assistant"
    assert e["target"] == {"model": L70, "revision": "2026-10-28", "tokenizer": "llama3"}
    # the mapping's unquoted YAML date became the revision text it means
    assert e["draft"] == {"model": "llama-3.2-1b-instruct", "revision": "2026-09-30",
                          "tokenizer": "llama3"}


def test_every_request_by_hand() -> None:
    events = _by_id()
    # (drafted, accepted, steps, per_position, status, e2e, ttft, ts)
    want = {
        # [5, 10, 8, 17]: S = 40, A = 10 + 16 + 51 = 77, p = (10+8+17, 8+17, 17) = (35, 25, 17)
        "chatcmpl-v2": (120, 77, 40, [35, 25, 17], "ok", 3.0 + 120.25 + 2200.75,
                        3.0 + 120.25, B + 5 + 2.324),
        # max_tokens=1: all-zero histogram, nothing drafted (no acceptance rate, not 0)
        "chatcmpl-v3": (0, 0, 0, [0, 0, 0], "ok", 0.5 + 64.0 + 0.0, 64.5, B + 9 + 0.0645),
        # finish_reason "error": status error, its drafts still count. [3, 1, 0, 0]: S = 4, A = 1
        "chatcmpl-v4": (12, 1, 4, [1, 0, 0], "error", 1.0 + 70.0 + 45.0, 71.0, B + 12 + 0.116),
        # offline RequestOutput: [2, 1, 2, 1]: S = 6, A = 1 + 4 + 3 = 8, p = (4, 3, 1).
        # e2e = first_token_latency 0.125 s + (last 5000.9 - first 5000.1) = 0.925 s;
        # ts = arrival_time (B + 20) + e2e
        "offline-5": (18, 8, 6, [4, 3, 1], "ok", 925.0, 125.0, B + 20.925),
        # n-gram: [10, 4, 2, 1]: S = 17, A = 4 + 4 + 3 = 11, p = (7, 3, 1); D = 45 < 3 x 17
        "chatcmpl-v6": (45, 11, 17, [7, 3, 1], "ok", 2.0 + 210.0 + 640.0, 212.0, B + 30.852),
    }
    for request_id, (drafted, accepted, steps, per_pos, status, e2e, ttft, ts) in want.items():
        e = events[request_id]
        spec = e["spec"]
        assert (spec["drafted_tokens"], spec["accepted_tokens"], spec["verify_steps"],
                spec["accepted_per_position"]) == (drafted, accepted, steps, per_pos), request_id
        assert sum(per_pos) == accepted
        assert e["status"] == status, request_id
        assert e["e2e_ms"] == pytest.approx(e2e) and e["ttft_ms"] == pytest.approx(ttft)
        assert event_ts(e) == pytest.approx(ts, abs=1e-3), request_id
    offline = events["offline-5"]
    assert (offline["output_tokens"], offline["prompt_tokens"]) == (15, 12)
    # the offline output names no model: --target-model picks the mapping entry
    assert offline["route"] == "code-assistant"
    ngram = events["chatcmpl-v6"]
    assert ngram["route"] == "chat" and "draft" not in ngram
    assert ngram["target"]["model"] == "qwen2.5-32b-instruct"  # the served name wins
    assert ngram["spec"]["method"] == "ngram"


def _response(request_id: str = "chatcmpl-v2") -> dict[str, Any]:
    raw = next(r for r in outputs("vllm") if r.get("id") == request_id)
    return copy.deepcopy(raw)


def _reason(raw: dict[str, Any], **flags: Any) -> str:
    with pytest.raises(AdapterError) as err:
        to_event(raw, defaults(target_model=L70, **flags))
    return err.value.reason


def test_null_stats_on_a_speculating_model_are_unknown_not_off() -> None:
    raw = _response()
    raw["metrics"]["speculative_decoding"] = None  # n > 1, or the flag is off
    assert _reason(raw).startswith("metrics.speculative_decoding: null")


def test_null_stats_on_a_model_without_speculation_is_speculation_off() -> None:
    raw = _response()
    raw["metrics"]["speculative_decoding"] = None
    raw["model"] = "plain-model"
    event = to_event(raw, defaults(route="r", target_revision="1", target_tokenizer="t"))
    parses_cleanly(event)
    assert "spec" not in event and "draft" not in event


@pytest.mark.parametrize(("mutate", "reason"), [
    (lambda r: r["usage"].pop("completion_tokens"), "usage.completion_tokens: missing"),
    (lambda r: r["metrics"]["speculative_decoding"].update(num_draft_tokens="120"),
     "metrics.speculative_decoding.num_draft_tokens: must be an integer (got string '120')"),
    (lambda r: r["metrics"]["speculative_decoding"].update(num_accepted_draft_tokens=-1),
     "metrics.speculative_decoding.num_accepted_draft_tokens: must be >= 0 (got -1)"),
    (lambda r: r["metrics"]["speculative_decoding"].update(num_accepted_draft_tokens=121),
     "metrics.speculative_decoding: 121 accepted drafts > 120 drafted"),
    (lambda r: r["metrics"]["speculative_decoding"].update(acceptance_histogram=[5, 10, 8, 16]),
     "metrics.speculative_decoding.acceptance_histogram: implies 74 accepted drafts, the "
     "totals say 77"),
    (lambda r: r["metrics"]["speculative_decoding"].update(acceptance_histogram=[0, 0, 0, 0, 1]),
     "metrics.speculative_decoding.acceptance_histogram: has 5 buckets"),
    (lambda r: r["metrics"].update(generation_time_ms=None),
     "metrics.generation_time_ms: missing (null)"),
    (lambda r: r["metrics"].update(queue_time_ms=float("nan")),
     "metrics.queue_time_ms: must be finite"),
    (lambda r: r.pop("metrics"), "metrics: missing"),
    (lambda r: r["choices"].append(r["choices"][0]), "choices: want exactly 1 sequence"),
    (lambda r: r["choices"][0].update(finish_reason=None), "choices[0].finish_reason: missing"),
    (lambda r: r["choices"][0].update(finish_reason="exploded"),
     "choices[0].finish_reason: unknown finish reason 'exploded'"),
    (lambda r: r.update(id=""), "id: must be a non-empty string or integer"),
])  # fmt: skip
def test_bad_fields_are_named(mutate: Any, reason: str) -> None:
    raw = _response()
    mutate(raw)
    assert _reason(raw).startswith(reason)


def test_not_a_vllm_output() -> None:
    assert _reason({"text": "hi", "meta_info": {}}).startswith("neither a vLLM server response")


def test_missing_draft_length_falls_back_to_the_flag() -> None:
    raw = _response()
    del raw["metrics"]["speculative_decoding"]["num_spec_tokens"]
    assert to_event(raw, defaults(target_model=L70, num_speculative_tokens=3))["spec"][
        "num_speculative_tokens"] == 3
    assert _reason(raw).startswith("metrics.speculative_decoding.num_spec_tokens: missing")


def test_detailed_per_step_counts_stand_in_for_a_missing_histogram() -> None:
    raw = _response("chatcmpl-v6")
    del raw["metrics"]["speculative_decoding"]["acceptance_histogram"]
    event = to_event(raw, defaults())
    parses_cleanly(event)
    # per_step_accepted holds 10 zeros, 4 ones, 2 twos and 1 three: the same [10, 4, 2, 1]
    assert event["spec"]["accepted_per_position"] == [7, 3, 1]
    raw["metrics"]["speculative_decoding"]["per_step_accepted"][0] = 1
    with pytest.raises(AdapterError, match="per_step_accepted: has 17 steps accepting 12"):
        to_event(raw, defaults())


def test_no_created_time_means_pinned_ts_with_a_note() -> None:
    raw = _response()
    del raw["created"]
    event = to_event(raw, defaults(target_model=L70))
    parses_cleanly(event)
    assert event["ts"] == "2026-11-02T14:07:30.000Z"
    assert "has no 'created' time" in event[NOTE_KEY]


def test_offline_monotonic_clock_running_backwards_is_refused() -> None:
    raw = copy.deepcopy(next(r for r in outputs("vllm") if "request_id" in r))
    raw["metrics"]["last_token_ts"] = 4999.0
    assert _reason(raw).startswith("metrics.first_token_ts..last_token_ts: ends before")
    raw = copy.deepcopy(next(r for r in outputs("vllm") if "request_id" in r))
    del raw["metrics"]["num_generation_tokens"]  # falls back to the token ids
    assert to_event(raw, defaults(target_model=L70))["output_tokens"] == 15
