"""Per-engine readings of responses, including what an absent counter means."""

from __future__ import annotations

from typing import Any

import pytest

from monitor.adapters.common import AdapterError
from monitor.proxy.config import SpecMeta
from monitor.proxy.counters import NoCounters, read_response
from tests.monitor.proxy.fake_engine import LLAMACPP_TIMINGS, SGLANG_META, VLLM_SPEC, chat

K3 = SpecMeta(num_speculative_tokens=3, method="ngram")


def test_llamacpp_counts_tokens_and_decode_time() -> None:
    r = read_response(chat("a", timings=LLAMACPP_TIMINGS), "llamacpp", K3)
    assert (r.engine, r.request_id, r.status) == ("llamacpp", "chatcmpl-a", "ok")
    assert (r.spec.drafted, r.spec.accepted, r.spec.num_speculative_tokens) == (12, 9, 3)
    assert (r.output_tokens, r.prompt_tokens, r.decode_ms) == (20, 7, 40.0)


@pytest.mark.parametrize("engine", ["llamacpp", "auto"])
def test_llamacpp_without_draft_n_is_zero_drafted(engine: str) -> None:
    body = chat("a", timings={"predicted_n": 20, "predicted_ms": 40.0})
    r = read_response(body, engine, K3)
    assert (r.spec.drafted, r.spec.accepted) == (0, 0)
    assert read_response(body, engine, None).spec is None  # speculation off: no spec


def test_llamacpp_native_completion() -> None:
    body = {"content": "x", "stop": True, "stop_type": "limit", "tokens_predicted": 5,
            "tokens_evaluated": 3, "timings": {"draft_n": 4, "draft_n_accepted": 1}}
    r = read_response(body, "auto", K3)
    assert (r.engine, r.request_id, r.status) == ("llamacpp", None, "ok")
    assert (r.output_tokens, r.prompt_tokens, r.spec.drafted) == (5, 3, 4)


def test_counters_without_spec_metadata_are_a_configuration_error() -> None:
    with pytest.raises(AdapterError, match="no `spec`"):
        read_response(chat("a", timings=LLAMACPP_TIMINGS), "llamacpp", None)


def test_vllm_histogram_gives_positions_and_its_absence_is_unknown() -> None:
    r = read_response(chat("v", metrics={"speculative_decoding": VLLM_SPEC,
                                         "generation_time_ms": 60.0}), "auto", K3)
    assert (r.engine, r.spec.verify_steps, r.spec.per_position) == ("vllm", 40, (35, 25, 17))
    assert r.decode_ms == 60.0
    with pytest.raises(NoCounters, match="per-request-spec-decode-metrics"):
        read_response(chat("v", metrics={"speculative_decoding": None}), "vllm", K3)
    inconsistent = {**VLLM_SPEC, "num_accepted_draft_tokens": 76}
    with pytest.raises(AdapterError, match="acceptance_histogram"):
        read_response(chat("v", metrics={"speculative_decoding": inconsistent}), "vllm", K3)


def test_sglang_names_old_and_new() -> None:
    r = read_response({"meta_info": dict(SGLANG_META, id="s1")}, "auto", K3)
    assert (r.request_id, r.spec.drafted, r.spec.accepted, r.spec.verify_steps) == (
        "s1", 30, 16, 10)
    old = {"id": "s2", "completion_tokens": 26, "finish_reason": {"type": "length"},
           "spec_verify_ct": 8, "spec_accept_length": 3.25}
    r = read_response({"meta_info": old}, "sglang", K3)
    # 26 tokens in 8 steps: 1 prefill + 17 accepted + 8 bonus; proposed = S x k
    assert (r.spec.drafted, r.spec.accepted) == (24, 17)
    none = {"id": "s3", "completion_tokens": 5, "finish_reason": {"type": "stop"}}
    assert read_response({"meta_info": none}, "sglang", K3).spec.drafted == 0
    aborted = {**none, "finish_reason": {"type": "abort", "status_code": 400}}
    assert read_response({"meta_info": aborted}, "sglang", K3).status == "error"


def test_trtllm_choice_block() -> None:
    body = chat("t")
    body["choices"][0]["speculative_decoding"] = {
        "total_draft_tokens": 30, "total_accepted_draft_tokens": 10, "num_spec_steps": 10,
        "acceptance_histogram": [4, 4, 0, 2], "num_spec_tokens": 3}
    r = read_response(body, "auto", K3)
    assert (r.engine, r.spec.drafted, r.spec.per_position) == ("trtllm", 30, (6, 2, 2))
    assert read_response(chat("t"), "trtllm", K3).spec.drafted == 0


@pytest.mark.parametrize(("body", "error"), [
    ({**chat("n"), "choices": [{"index": 0}, {"index": 1}]}, "n > 1"),
    (chat("p"), "no speculative counters"),
])
def test_unknown_counters(body: dict[str, Any], error: str) -> None:
    with pytest.raises(NoCounters, match=error):
        read_response(body, "auto", K3)


def test_plain_response_of_a_model_that_does_not_speculate() -> None:
    r = read_response(chat("p", finish="length"), "auto", None)
    assert (r.engine, r.spec, r.output_tokens, r.status) == (None, None, 20, "ok")
    with pytest.raises(AdapterError, match="usage.completion_tokens"):
        read_response({"id": "x"}, "auto", None)
    with pytest.raises(AdapterError, match="not a JSON object"):
        read_response([1], "auto", None)


def test_llamacpp_without_timings_says_nothing() -> None:
    with pytest.raises(NoCounters, match="timings: missing"):
        read_response(chat("a"), "llamacpp", K3)
    assert read_response(chat("a"), "llamacpp", None).spec is None
