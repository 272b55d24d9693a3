"""TensorRT-LLM outputs -> telemetry v1, counts by hand from engine-telemetry.md 3.1, 3.4, 5.1."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from monitor.adapters.common import NOTE_KEY, AdapterError
from monitor.adapters.trtllm import to_event
from tests.monitor.adapters import PINNED_TS, defaults, event_ts, outputs, parses_cleanly

L33 = "llama-3.3-70b-instruct"
T0 = 1793628420.0  # 2026-11-02T14:07:00Z, the first response's `created`


def _by_id() -> dict[str, dict[str, Any]]:
    d = defaults(target_model=L33)  # the RequestOutput lines name no model
    return {e["request_id"]: e for e in (to_event(raw, d) for raw in outputs("trtllm"))}


def test_every_request_by_hand() -> None:
    events = _by_id()
    # (drafted, accepted, steps, per_position or None, status, ts, e2e, ttft)
    want = {
        # choice extension, k = num_spec_tokens 4. [3, 2, 2, 1, 4]: S = 12,
        # A = 2 + 4 + 3 + 16 = 25 (= total_accepted_draft_tokens), p = (9, 7, 5, 4).
        # steady clock: e2e = last 1001.58 - arrival 1000.0, TTFT = first 1000.08 - arrival;
        # ts = created + e2e
        "chatcmpl-t1": (48, 25, 12, [9, 7, 5, 4], "ok", T0 + 1.58, 1580.0, 80.0),
        # num_spec_tokens null (draft_len_schedule): k = 4 from the mapping.
        # [1, 2, 2, 0, 0]: S = 5, A = 2 + 4 = 6, p = (4, 2, 0, 0)
        "chatcmpl-t2": (20, 6, 5, [4, 2, 0, 0], "ok", T0 + 4 + 0.45, 450.0, 50.0),
        # no speculative_decoding anywhere: TensorRT-LLM leaves it out when nothing drafted
        "chatcmpl-t3": (0, 0, 0, None, "ok", T0 + 6 + 0.04, 40.0, 40.0),
        # LLM API RequestOutput: executor totals only (no steps, no histogram); steady-clock
        # times give latencies but no ts: the pinned clock, with a note
        "7": (20, 10, None, None, "ok", PINNED_TS, 900.0, 100.0),
        # finish_reason "timeout": status timeout; A = 3 of D = 16 (acceptance_rate 0.1875)
        "8": (16, 3, None, None, "timeout", PINNED_TS, 30000.0, 200.0),
    }
    assert set(events) == set(want)
    for request_id, (drafted, accepted, steps, per_pos, status, ts, e2e, ttft) in want.items():
        e = events[request_id]
        parses_cleanly(e)
        spec = e["spec"]
        assert spec["num_speculative_tokens"] == 4
        assert (spec["drafted_tokens"], spec["accepted_tokens"], spec.get("verify_steps"),
                spec.get("accepted_per_position")) == (drafted, accepted, steps, per_pos)
        assert e["status"] == status, request_id
        assert event_ts(e) == pytest.approx(ts, abs=1e-3), request_id
        assert (e["e2e_ms"], e["ttft_ms"]) == (pytest.approx(e2e), pytest.approx(ttft))
        assert e["route"] == "summarize" and e["target"]["model"] == L33
        assert (NOTE_KEY in e) == (request_id in ("7", "8"))
    assert (events["7"]["output_tokens"], events["7"]["prompt_tokens"]) == (17, 20)
    assert (events["chatcmpl-t1"]["output_tokens"], events["chatcmpl-t1"]["prompt_tokens"]) == (
        38, 700)


def _line(index: int) -> dict[str, Any]:
    return copy.deepcopy(outputs("trtllm")[index])


def _reason(raw: dict[str, Any], **flags: Any) -> str:
    with pytest.raises(AdapterError) as err:
        to_event(raw, defaults(target_model=L33, **flags))
    return err.value.reason


@pytest.mark.parametrize(("index", "mutate", "reason"), [
    (0, lambda r: r.pop("perf_metrics"), "perf_metrics: missing; an OpenAI response has no "
     "timing"),
    (0, lambda r: r["perf_metrics"]["timing_metrics"].pop("last_token_time"),
     "perf_metrics.timing_metrics.last_token_time: missing"),
    (0, lambda r: r["choices"][0]["speculative_decoding"].update(total_draft_tokens=True),
     "choices[0].speculative_decoding.total_draft_tokens: must be an integer (got boolean true)"),
    (0, lambda r: r["choices"][0]["speculative_decoding"].update(num_spec_steps=13),
     "choices[0].speculative_decoding.acceptance_histogram: sums to 12 steps, the totals say 13"),
    (0, lambda r: r["choices"][0]["speculative_decoding"].update(num_spec_tokens=0),
     "choices[0].speculative_decoding.num_spec_tokens: must be >= 1 (got 0)"),
    (0, lambda r: r["usage"].update(completion_tokens="38"),
     "usage.completion_tokens: must be an integer (got string '38')"),
    (3, lambda r: r["outputs"][0].pop("request_perf_metrics"),
     "outputs[0].request_perf_metrics: missing"),
    (3, lambda r: r["outputs"][0]["request_perf_metrics"]["timing_metrics"].update(
        first_token_time=3999.0),
     "outputs[0].request_perf_metrics.timing_metrics.arrival_time..first_token_time: ends"),
    (3, lambda r: r["outputs"][0].pop("token_ids"), "outputs[0].token_ids: missing"),
    (3, lambda r: r.update(request_id=True), "request_id: must be a non-empty string or integer"),
    (3, lambda r: r["outputs"][0]["request_perf_metrics"]["speculative_decoding"].update(
        total_accepted_draft_tokens=21),
     "outputs[0].request_perf_metrics.speculative_decoding: 21 accepted drafts > 20 drafted"),
])  # fmt: skip
def test_bad_fields_are_named(index: int, mutate: Any, reason: str) -> None:
    raw = _line(index)
    mutate(raw)
    assert _reason(raw).startswith(reason)


def test_a_perf_metrics_entry_alone_is_not_a_request() -> None:
    entry = {"request_id": 7, "perf_metrics": _line(0)["perf_metrics"]}
    assert _reason(entry).startswith("output_tokens: a /perf_metrics entry alone")


def test_stats_in_the_joined_perf_metrics_when_the_choice_has_none() -> None:
    raw = _line(0)
    del raw["choices"][0]["speculative_decoding"]
    event = to_event(raw, defaults())
    parses_cleanly(event)
    # /perf_metrics' speculative_decoding has the totals only: k from the mapping
    assert event["spec"] == {"num_speculative_tokens": 4, "drafted_tokens": 48,
                             "accepted_tokens": 25, "method": "draft_model"}


def test_unknown_draft_length_is_named() -> None:
    raw = _line(1)  # num_spec_tokens null
    raw["model"] = "unmapped"
    reason = _reason(raw, route="r", target_revision="1", target_tokenizer="t")
    assert reason.startswith("choices[0].speculative_decoding.num_spec_tokens: missing or null")


def test_request_id_prefix_keeps_per_process_ids_apart() -> None:
    event = to_event(_line(3), defaults(target_model=L33, request_id_prefix="pod-3/"))
    assert event["request_id"] == "pod-3/7"
