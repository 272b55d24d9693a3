"""What a request asked and what it answered, as hashes: telemetry v1.1 ``prompt_hash`` and
``output_hash``, for the losslessness check (two greedy requests with the same prompt hash on
the same target model and revision must produce the same output hash, speculation or not).

``prompt_hash``: sha256 (hex, first 32 characters) of the canonical JSON (sorted keys, no
spaces, integral floats written as integers) of ``{"endpoint": E, "request": R}``, where E is
the completion path suffix the request went to (``/v1/chat/completions``, ``/completion``,
...) and R is the request body without the keys that cannot change the output text:
``model`` (the event names the target model and revision), ``stream``, ``stream_options``,
``user``, ``metadata``, ``store``, ``logprobs``, ``top_logprobs``, ``n_probs``,
``return_logprob``, ``rid``, ``request_id``, ``service_tier``, ``cache_prompt``,
``id_slot``. Everything else stays in: the prompt or messages, tools, and every sampling
parameter (``temperature``, ``top_p``, ``max_tokens``, ``stop``, ``seed``, ``sampling_params``,
...), including ones this list does not know, so that two requests share a hash only if
nothing that could change their output differs.

``output_hash``: sha256 (hex, first 32 characters) of the output text, UTF-8: the first
choice's ``message.content`` (chat), ``text`` (completions), llama.cpp's ``content``, or
SGLang's ``text``; tool calls of a chat answer follow as ``\\0name\\0arguments`` each. A
streamed response is hashed on the text its chunks add up to, so a streamed and a
non-streamed answer of the same text hash the same.

>>> a = prompt_hash("/v1/chat/completions", {"model": "m", "stream": True, "temperature": 0,
...     "messages": [{"role": "user", "content": "hi"}]})
>>> b = prompt_hash("/v1/chat/completions", {"messages": [{"content": "hi", "role": "user"}],
...     "temperature": 0.0})
>>> a == b, len(a), a == prompt_hash("/v1/chat/completions", {"temperature": 0.5,
...     "messages": [{"role": "user", "content": "hi"}]})
(True, 32, False)
>>> output_hash("hello") == output_hash("hello"), output_hash("hello") == output_hash("hello!")
(True, False)
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import orjson

__all__ = ["HASH_CHARS", "IGNORED_KEYS", "output_hash", "output_text", "prompt_hash",
           "temperature_of"]

HASH_CHARS = 32
# Request keys that do not change the text of the output (see the module docstring).
IGNORED_KEYS = frozenset({"model", "stream", "stream_options", "user", "metadata", "store",
                          "logprobs", "top_logprobs", "n_probs", "return_logprob", "rid",
                          "request_id", "service_tier", "cache_prompt", "id_slot"})


def _canonical(value: Any) -> Any:
    """0 and 0.0 are the same temperature: integral floats become ints."""
    if isinstance(value, float):
        return int(value) if value.is_integer() and abs(value) < 2 ** 53 else value
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    return value


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:HASH_CHARS]


def prompt_hash(endpoint: str, request: dict[str, Any]) -> str:
    """The prompt hash of a completion request sent to ``endpoint`` (see the module doc)."""
    kept = {k: v for k, v in request.items() if k not in IGNORED_KEYS}
    return _digest(orjson.dumps({"endpoint": endpoint, "request": _canonical(kept)},
                                option=orjson.OPT_SORT_KEYS))


def output_hash(text: str) -> str:
    return _digest(text.encode("utf-8", "surrogatepass"))


def temperature_of(request: dict[str, Any]) -> float | None:
    """The request's sampling temperature (SGLang: ``sampling_params.temperature``); None
    when it sets none (the engine's default applies, which is rarely greedy).

    >>> temperature_of({"temperature": 0}), temperature_of({"sampling_params": {"temperature": 1}})
    (0.0, 1.0)
    >>> temperature_of({}), temperature_of({"temperature": -1}), temperature_of({"temperature": ""})
    (None, None, None)
    """
    value = request.get("temperature")
    if value is None:
        params = request.get("sampling_params")
        if isinstance(params, dict):
            value = params.get("temperature")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) and value >= 0 else None


def output_text(body: Any) -> str | None:
    """The output text of a decoded response (or of a stream merged by
    :class:`monitor.proxy.stream.SseBody`); None when the response has none the proxy knows.

    >>> output_text({"choices": [{"message": {"content": "Hi", "tool_calls": [
    ...     {"function": {"name": "f", "arguments": "{}"}}]}}]})
    'Hi\\x00f\\x00{}'
    >>> output_text({"choices": [{"text": "x"}]}), output_text({"content": "y"}), output_text({})
    ('x', 'y', None)
    """
    if not isinstance(body, dict):
        return None
    choices = body.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        choice = choices[0]
        message = choice.get("message")
        if isinstance(message, dict):
            content = message.get("content")
            text = content if isinstance(content, str) else ""
            calls = message.get("tool_calls")
            if isinstance(calls, list):
                for call in calls:
                    fn = call.get("function") if isinstance(call, dict) else None
                    if isinstance(fn, dict):
                        text += f"\0{fn.get('name') or ''}\0{fn.get('arguments') or ''}"
            if isinstance(content, str) or text:
                return text
        text = choice.get("text")
        if isinstance(text, str):
            return text
    for key in ("content", "text"):  # llama.cpp /completion, SGLang /generate
        value = body.get(key)
        if isinstance(value, str):
            return value
    return None
