"""Reading bodies in pieces: any split gives the same reading."""

from __future__ import annotations

import gzip
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monitor.adapters.common import AdapterError
from monitor.proxy.stream import JsonBody, SseBody, body_reader
from tests.monitor.proxy.fake_engine import LLAMACPP_TIMINGS, VLLM_SPEC, chat_stream

LLAMA = b"".join(chat_stream("x", {"usage": {"prompt_tokens": 7, "completion_tokens": 20},
                                   "timings": LLAMACPP_TIMINGS}))
VLLM = b"".join(chat_stream("y", {}, usage_chunk={
    "usage": {"completion_tokens": 20}, "metrics": {"speculative_decoding": VLLM_SPEC}}))


def pieces(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


def read_sse(chunks: list[bytes]) -> dict:
    reader = SseBody()
    for chunk in chunks:
        reader.feed(chunk)
    return reader.result()


@given(st.lists(st.integers(min_value=0), max_size=30))
def test_any_split_of_a_stream_reads_the_same(cuts: list[int]) -> None:
    for data in (LLAMA, VLLM, LLAMA.replace(b"\n", b"\r\n")):
        assert read_sse(pieces(data, cuts)) == read_sse([data])


def test_stream_merge_keeps_the_final_counters() -> None:
    merged = read_sse([LLAMA])
    assert merged["id"] == "chatcmpl-x"
    assert merged["timings"] == LLAMACPP_TIMINGS
    # the streamed text is put where a non-streamed answer has it (for output_hash)
    assert merged["choices"] == [{"finish_reason": "stop",
                                  "message": {"content": "def f(): pass"}}]
    merged = read_sse([VLLM])
    assert merged["metrics"]["speculative_decoding"] == VLLM_SPEC
    assert merged["usage"] == {"completion_tokens": 20}


def test_stream_error_event_and_multi_choice() -> None:
    merged = read_sse([b'data: {"error": {"message": "oom"}}\n\n'])
    assert merged["error"] == {"message": "oom"}
    merged = read_sse([b'data: {"choices": [{"index": 1, "finish_reason": "stop"}]}\n\n'])
    assert len(merged["choices"]) == 2  # n > 1: the reader says so, counters refuse it


def test_multiline_data_and_comments() -> None:
    merged = read_sse([b': keep-alive\n\nevent: x\ndata: {"id": "a",\ndata: "usage": {}}\n\n'])
    assert merged == {"id": "a", "usage": {}}


def test_gzip_body_is_decoded_for_reading() -> None:
    body = json.dumps({"id": "z", "usage": {"completion_tokens": 1}}).encode()
    data = gzip.compress(body)
    reader = body_reader("application/json", "gzip", 1 << 20)
    for piece in pieces(data, [3, 10, 17]):
        reader.feed(piece)
    assert reader.result()["id"] == "z"
    sse = body_reader("text/event-stream", "gzip", 1 << 20)
    sse.feed(gzip.compress(LLAMA))
    assert sse.result()["timings"] == LLAMACPP_TIMINGS
    assert body_reader("application/json", "br", 1 << 20) is None


def test_json_body_over_the_limit_is_not_read() -> None:
    reader = JsonBody(limit=10)
    reader.feed(b'{"id": "a", ')
    reader.feed(b'"x": 1}')
    with pytest.raises(AdapterError, match="over the 10-byte limit"):
        reader.result()
    broken = JsonBody(limit=100)
    broken.feed(b'{"id": ')
    with pytest.raises(AdapterError, match="not JSON"):
        broken.result()
