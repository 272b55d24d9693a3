"""Reading a response body for its counters while it is being passed on, chunk by chunk.

Nothing here holds up the client: the proxy forwards each chunk as it arrives and hands a
copy to a reader. :class:`JsonBody` keeps a non-streamed body (up to a limit) to parse at
the end; :class:`SseBody` parses a server-sent-event stream as it goes, keeping only the
current line and the few fields that matter, merged over the chunks (the final chunk of
llama.cpp carries ``timings``, vLLM's usage chunk ``usage`` and ``metrics``, SGLang's last
chunk the complete ``meta_info``, TensorRT-LLM's terminal choice ``speculative_decoding``).
A gzip- or deflate-encoded body is decoded for reading; the client still gets the bytes the
upstream sent.
"""

from __future__ import annotations

import zlib
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
    def feed(self, chunk: bytes) -> None: ...

    def result(self) -> Any:
        """The decoded response (or merged stream); raises ``AdapterError`` when unreadable."""
        ...


class JsonBody:
    """A non-streamed body, kept up to ``limit`` bytes and decoded at the end."""

    __slots__ = ("limit", "_parts", "_size")

    def __init__(self, limit: int) -> None:
        self.limit = limit
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
    >>> out["id"], out["timings"], out["choices"]
    ('c1', {'draft_n': 6, 'draft_n_accepted': 4}, [{'finish_reason': 'stop'}])
    """

    __slots__ = ("limit", "_line", "_data", "_merged", "_choice", "_multi", "_error", "_broken")

    def __init__(self, limit: int = 4 << 20) -> None:
        self.limit = limit  # one event's data, at most
        self._line = b""
        self._data: list[bytes] = []
        self._merged: dict[str, Any] = {}
        self._choice: dict[str, Any] = {}
        self._multi = False
        self._error: Any = None
        self._broken: str | None = None

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
                for key in ("finish_reason", "speculative_decoding"):
                    value = choice.get(key)
                    if value is not None:
                        self._choice[key] = value
        elif obj.get("index", 0) != 0:  # SGLang /generate with n > 1
            self._multi = True

    def result(self) -> Any:
        if self._broken is not None:
            raise AdapterError(self._broken)
        if self._line:  # a last event without its blank line
            self.feed(b"\n\n")
        self._dispatch()
        out = dict(self._merged)
        if self._choice or self._multi:
            out["choices"] = [self._choice, {"index": 1}] if self._multi else [self._choice]
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
