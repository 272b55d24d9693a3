"""Prompt and output hashes, and the output text of streams in every engine's shape."""

from __future__ import annotations

import json
from typing import Any

import pytest

from monitor.proxy.event import itl_block
from monitor.proxy.hashes import IGNORED_KEYS, output_hash, output_text, prompt_hash
from monitor.proxy.stream import SseBody, body_reader

CHAT = "/v1/chat/completions"
BASE = {"messages": [{"role": "user", "content": "hi"}], "temperature": 0}


def sse(*objs: dict[str, Any]) -> list[bytes]:
    return [b"data: " + json.dumps(o).encode() + b"\n\n" for o in objs] + [b"data: [DONE]\n\n"]


def merged(chunks: list[bytes]) -> tuple[Any, SseBody]:
    reader = SseBody()
    for c in chunks:
        reader.feed(c)
    return reader.result(), reader


@pytest.mark.parametrize("change", [
    {"temperature": 0.5}, {"max_tokens": 3}, {"stop": ["\n"]}, {"seed": 1}, {"top_p": 0.9},
    {"tools": [{"type": "function", "function": {"name": "f"}}]}, {"unknown_knob": 1},
    {"messages": [{"role": "user", "content": "hi!"}]},
    {"sampling_params": {"temperature": 0}},
])
def test_what_can_change_the_output_changes_the_prompt_hash(change: dict[str, Any]) -> None:
    assert prompt_hash(CHAT, {**BASE, **change}) != prompt_hash(CHAT, BASE)


def test_what_cannot_change_the_output_is_left_out() -> None:
    noise = {k: 1 for k in IGNORED_KEYS}
    assert prompt_hash(CHAT, {**BASE, **noise}) == prompt_hash(CHAT, BASE)
    assert prompt_hash(CHAT, BASE) != prompt_hash("/v1/completions", BASE)
    assert prompt_hash(CHAT, {**BASE, "temperature": 0.0}) == prompt_hash(CHAT, BASE)


@pytest.mark.parametrize(("chunks", "full"), [
    # OpenAI chat, with a tool call streamed in pieces
    (sse({"choices": [{"index": 0, "delta": {"role": "assistant"}}]},
         {"choices": [{"index": 0, "delta": {"content": "He"}}]},
         {"choices": [{"index": 0, "delta": {"content": "llo"}}]},
         {"choices": [{"index": 0, "delta": {"tool_calls": [
             {"index": 0, "function": {"name": "get", "arguments": "{\"a\""}}]}}]},
         {"choices": [{"index": 0, "delta": {"tool_calls": [
             {"index": 0, "function": {"arguments": ": 1}"}}]}}]},
         {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
     {"choices": [{"message": {"content": "Hello", "tool_calls": [
         {"function": {"name": "get", "arguments": "{\"a\": 1}"}}]}}]}),
    # OpenAI completions
    (sse({"choices": [{"index": 0, "text": "He"}]}, {"choices": [{"index": 0, "text": "llo"}]}),
     {"choices": [{"text": "Hello"}]}),
    # llama.cpp /completion: content pieces
    (sse({"content": "He", "stop": False}, {"content": "llo", "stop": False},
         {"content": "", "stop": True, "timings": {}}),
     {"content": "Hello"}),
    # SGLang /generate: the text so far in every chunk
    (sse({"text": "He", "meta_info": {}}, {"text": "Hello", "meta_info": {}}),
     {"text": "Hello", "meta_info": {}}),
])
def test_a_stream_hashes_as_its_full_answer(chunks: list[bytes], full: dict[str, Any]) -> None:
    body, reader = merged(chunks)
    assert output_text(body) == output_text(full) is not None
    assert output_hash(output_text(body) or "") == output_hash(output_text(full) or "")
    assert len(reader.token_times) >= 2
    assert itl_block(reader.token_times) is not None


def test_a_gzip_stream_has_token_times_too() -> None:
    import zlib

    z = zlib.compressobj(wbits=31)
    data = z.compress(b"".join(sse({"choices": [{"index": 0, "delta": {"content": "a"}}]},
                                   {"choices": [{"index": 0, "delta": {"content": "b"}}]})))
    data += z.flush()
    reader = body_reader("text/event-stream", "gzip", 1 << 20)
    assert reader is not None
    reader.feed(data)
    assert output_text(reader.result()) == "ab" and len(reader.token_times) == 2


def test_no_text_is_no_hash() -> None:
    body, reader = merged(sse({"choices": [{"index": 0, "finish_reason": "stop"}]}))
    assert output_text(body) is None and reader.token_times == []
    assert itl_block(reader.token_times) is None
