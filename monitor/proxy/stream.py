"""Reading a response body for its counters while it is being passed on, chunk by chunk.

Nothing here holds up the client: the proxy forwards each chunk as it arrives and hands a
copy to a reader. :class:`JsonBody` keeps a non-streamed body (up to a limit) to parse at
the end; :class:`SseBody` parses a server-sent-event stream as it goes, keeping only the
current line and the few fields that matter, merged over the chunks (the final chunk of
llama.cpp carries ``timings``, vLLM's usage chunk ``usage`` and ``metrics``, SGLang's last
chunk the complete ``meta_info``, TensorRT-LLM's terminal choice ``speculative_decoding``).
A gzip- or deflate-encoded body is decoded for reading; the client still gets the bytes the
upstream sent.

A stream's output text is added up too (chat ``delta.content`` and tool-call pieces,
completions ``text``, llama.cpp ``content``, SGLang's cumulative ``text``) and put where a
non-streamed response has it, for ``output_hash``; ``token_times`` holds the
``perf_counter()`` of every event that added text, for the inter-token gaps (``itl_ms``).
"""

from __future__ import annotations

import zlib
from time import perf_counter
from typing import Any, Protocol

import orjson

from monitor.adapters.common import AdapterError

__all__ = ["BodyReader", "JsonBody", "SseBody", "body_reader"]

# Kept from the latest chunk that has them.
_LAST_KEYS = ("usage", "timings", "metrics", "meta_info", "tokens_predicted",
              "tokens_evaluated", "stop_type")
# Kept from the first chunk that has them.
_FIRST_KEYS = ("id", "model")


class BodyReader(Protocol):
    # perf_counter() of each streamed event that added output text (empty when not a stream)
    token_times: list[float]

    def feed(self, chunk: bytes) -> None: ...

    def result(self) -> Any:
        """The decoded response (or merged stream); raises ``AdapterError`` when unreadable."""
        ...


class JsonBody:
    """A non-streamed body, kept up to ``limit`` bytes and decoded at the end."""

    __slots__ = ("limit", "_parts", "_size", "token_times")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.token_times: list[float] = []
        self._parts: list[bytes] = []
        self._size = 0

    def feed(self, chunk: bytes) -> None:
        self._size += len(chunk)
        if self._size <= self.limit:
            self._parts.append(chunk)
        elif self._parts:
            self._parts = []  # over the limit: not read, and not kept either

    def result(self) -> Any:
        if self._size > self.limit:
            raise AdapterError(f"response body of {self._size} bytes is over the "
                               f"{self.limit}-byte limit for reading counters")
        try:
            return orjson.loads(b"".join(self._parts))
        except orjson.JSONDecodeError as e:
            raise AdapterError(f"response body is not JSON: {e}") from None


class SseBody:
    """A ``text/event-stream`` body merged into one response-shaped object.

    >>> r = SseBody()
    >>> r.feed(b'data: {"id": "c1", "choices": [{"index": 0, "delta": {"content": "Hi"}}]}\\n')
    >>> r.feed(b'\\ndata: {"choices": [{"index": 0, "finish_reason": "stop"}], "timings": {"dr')
    >>> r.feed(b'aft_n": 6, "draft_n_accepted": 4}}\\n\\ndata: [DONE]\\n\\n')
    >>> out = r.result()
    >>> out["id"], out["timings"], out["choices"], len(r.token_times)
    ('c1', {'draft_n': 6, 'draft_n_accepted': 4}, [{'finish_reason': 'stop', \
'message': {'content': 'Hi'}}], 1)
    """

    __slots__ = ("limit", "_line", "_data", "_merged", "_choice", "_multi", "_error", "_broken",
                 "_content", "_calls", "_text", "_top_content", "_top_text", "token_times")

    def __init__(self, limit: int = 4 << 20) -> None:
        self.limit = limit  # one event's data, at most
        self._line = b""
        self._data: list[bytes] = []
        self._merged: dict[str, Any] = {}
        self._choice: dict[str, Any] = {}
        self._multi = False
        self._error: Any = None
        self._broken: str | None = None
        self._content: list[str] | None = None  # chat: delta.content pieces
        self._calls: dict[int, list[str]] = {}  # chat: tool call index -> name, arguments
        self._text: list[str] | None = None  # completions: choices[0].text pieces
        self._top_content: list[str] | None = None  # llama.cpp /completion: content pieces
        self._top_text: str | None = None  # SGLang /generate: the text so far
        self.token_times: list[float] = []

    def feed(self, chunk: bytes) -> None:
        if self._broken is not None:
            return
        text = self._line + chunk if self._line else chunk
        lines = text.split(b"\n")
        self._line = lines.pop()
        if len(self._line) > self.limit:
            self._broken = f"an event-stream line is over {self.limit} bytes"
            self._line = b""
            return
        for line in lines:
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                self._dispatch()
            elif line.startswith(b"data:"):
                value = line[5:]
                self._data.append(value[1:] if value.startswith(b" ") else value)
            # other fields (event:, id:, retry:) and comments carry no counters

    def _dispatch(self) -> None:
        if not self._data:
            return
        data = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
        self._data = []
        if data == b"[DONE]" or not data.startswith(b"{"):
            return
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            return  # not ours to judge: the client gets it as it is
        if type(obj) is dict:
            self._merge(obj)

    def _merge(self, obj: dict[str, Any]) -> None:
        merged = self._merged
        if obj.get("error") is not None:
            self._error = obj["error"]
        for key in _FIRST_KEYS:
            if key not in merged and obj.get(key) is not None:
                merged[key] = obj[key]
        for key in _LAST_KEYS:
            value = obj.get(key)
            if value is not None:
                merged[key] = value
        choices = obj.get("choices")
        if type(choices) is list:
            for choice in choices:
                if type(choice) is not dict:
                    continue
                if choice.get("index", 0) != 0:
                    self._multi = True
                    continue
                self._choice_text(choice)
                for key in ("finish_reason", "speculative_decoding"):
                    value = choice.get(key)
                    if value is not None:
                        self._choice[key] = value
        elif obj.get("index", 0) != 0:  # SGLang /generate with n > 1
            self._multi = True
        else:
            content = obj.get("content")
            if type(content) is str:
                if self._top_content is None:
                    self._top_content = []
                if content:
                    self._top_content.append(content)
                    self.token_times.append(perf_counter())
            text = obj.get("text")
            if type(text) is str:
                if len(text) > len(self._top_text or ""):
                    self.token_times.append(perf_counter())
                self._top_text = text

    def _choice_text(self, choice: dict[str, Any]) -> None:
        added = False
        delta = choice.get("delta")
        if type(delta) is dict:
            if self._content is None:
                self._content = []
            content = delta.get("content")
            if type(content) is str and content:
                self._content.append(content)
                added = True
            calls = delta.get("tool_calls")
            if type(calls) is list:
                for call in calls:
                    fn = call.get("function") if type(call) is dict else None
                    if type(fn) is not dict:
                        continue
                    index = call.get("index", 0)
                    parts = self._calls.setdefault(index if type(index) is int else 0,
                                                   ["", ""])
                    for i, key in enumerate(("name", "arguments")):
                        piece = fn.get(key)
                        if type(piece) is str and piece:
                            parts[i] += piece
                            added = True
        text = choice.get("text")
        if type(text) is str:
            if self._text is None:
                self._text = []
            if text:
                self._text.append(text)
                added = True
        if added:
            self.token_times.append(perf_counter())

    def result(self) -> Any:
        if self._broken is not None:
            raise AdapterError(self._broken)
        if self._line:  # a last event without its blank line
            self.feed(b"\n\n")
        self._dispatch()
        out = dict(self._merged)
        choice = self._choice
        if self._content is not None:
            message: dict[str, Any] = {"content": "".join(self._content)}
            if self._calls:
                message["tool_calls"] = [
                    {"index": i, "function": {"name": name, "arguments": args}}
                    for i, (name, args) in sorted(self._calls.items())]
            choice = {**choice, "message": message}
        if self._text is not None:
            choice = {**choice, "text": "".join(self._text)}
        if choice or self._multi:
            out["choices"] = [choice, {"index": 1}] if self._multi else [choice]
        if self._top_content is not None:
            out["content"] = "".join(self._top_content)
        if self._top_text is not None:
            out["text"] = self._top_text
        if self._error is not None:
            out["error"] = self._error
        return out


class _Decoded:
    """A reader fed through zlib (gzip or deflate content-encoding)."""

    __slots__ = ("inner", "_z", "_failed")

    def __init__(self, inner: BodyReader, encoding: str) -> None:
        self.inner = inner
        # 47: gzip or zlib header, detected; deflate is sometimes sent raw (-15)
        self._z = zlib.decompressobj(47 if encoding == "gzip" else 15)
        self._failed: str | None = None

    @property
    def token_times(self) -> list[float]:  # type: ignore[override]
        return self.inner.token_times

    def feed(self, chunk: bytes) -> None:
        if self._failed is not None:
            return
        try:
            self.inner.feed(self._z.decompress(chunk))
        except zlib.error as e:
            self._failed = f"cannot decode the response body: {e}"

    def result(self) -> Any:
        if self._failed is not None:
            raise AdapterError(self._failed)
        return self.inner.result()


def body_reader(content_type: str, content_encoding: str, limit: int) -> BodyReader | None:
    """A reader for a response with these headers; None when its encoding cannot be read.

    >>> type(body_reader("text/event-stream; charset=utf-8", "", 1024)).__name__
    'SseBody'
    >>> type(body_reader("application/json", "gzip", 1024)).__name__, body_reader("", "br", 9)
    ('_Decoded', None)
    """
    inner: BodyReader
    if content_type.lower().startswith("text/event-stream"):
        inner = SseBody()
    else:
        inner = JsonBody(limit)
    encoding = content_encoding.strip().lower()
    if encoding in ("", "identity"):
        return inner
    if encoding in ("gzip", "x-gzip", "deflate"):
        return _Decoded(inner, "gzip" if encoding != "deflate" else "deflate")
    return None
