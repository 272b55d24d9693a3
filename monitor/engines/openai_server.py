"""A minimal OpenAI-compatible HTTP server around a Hugging Face transformers model, for
tests: ``POST /v1/chat/completions``, greedy decoding only, one generation at a time.

It exists to put a real model behind ``specwatch proxy`` (and ``--shadow-upstream``):

- ``Speculation("prompt_lookup")``: transformers' prompt-lookup assisted generation, counted
  per request by :class:`monitor.engines.transformers_spec.SpecCounter`;
- ``Speculation("off")``: plain greedy decoding, the non-speculative reference;
- ``Speculation("unchecked")``: prompt lookup with a deliberately broken verifier: during
  each verification pass the target's logits are overwritten so that every drafted token
  is its argmax, i.e. drafts are accepted unchecked. Its outputs differ from greedy
  decoding wherever a draft was wrong, which is what the losslessness check must catch.

Several servers may share one :class:`GreedyModel` (it holds a lock), so a test loads the
model once and serves it with and without speculation on two ports.

The answer has the shape of llama.cpp's OpenAI-compatible server, which the proxy reads:
``choices[0].message.content``, ``usage``, and ``timings`` (``prompt_n``, ``predicted_n``,
``predicted_ms``; ``draft_n`` and ``draft_n_accepted`` when speculating). With
``"stream": true`` it answers server-sent events as the tokens come (one event per decoded
text piece, the last one with ``usage`` and ``timings``, then ``data: [DONE]``), closing the
connection at the end (HTTP/1.0). ``temperature`` other than 0 is refused (400): this
server only decodes greedily. torch and transformers are imported by the caller; nothing
here imports them at module level.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

from monitor.engines.transformers_spec import RequestCounts, SpecCounter

log = logging.getLogger(__name__)

__all__ = ["Completion", "GreedyModel", "OpenAIServer", "Speculation"]

Mode = Literal["off", "prompt_lookup", "unchecked"]


@dataclass(frozen=True, slots=True)
class Speculation:
    """How a server decodes: ``mode``, and prompt lookup's draft length and n-gram size."""

    mode: Mode = "prompt_lookup"
    num_tokens: int = 10
    max_ngram: int = 2

    @property
    def speculative(self) -> bool:
        return self.mode != "off"


@dataclass(frozen=True, slots=True)
class Completion:
    text: str
    prompt_tokens: int
    new_tokens: int
    finish_reason: str
    counts: RequestCounts
    decode_ms: float


class GreedyModel:
    """A causal LM and its tokenizer, generating greedily for one request at a time."""

    def __init__(self, model: Any, tokenizer: Any) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.counter = SpecCounter(model)
        self._lock = threading.Lock()

    def close(self) -> None:
        self.counter.close()

    def generate(self, messages: list[dict[str, Any]], max_new_tokens: int,
                 speculation: Speculation,
                 on_text: Callable[[str], None] | None = None) -> Completion:
        """Greedy completion of a chat; ``on_text`` gets each new piece of text as decoded."""
        import torch

        tok = self.tokenizer
        enc = tok.apply_chat_template(messages, add_generation_prompt=True,
                                      return_tensors="pt", return_dict=True)
        prompt_len = int(enc["input_ids"].shape[1])
        extra: dict[str, Any] = {}
        if speculation.speculative:
            extra = {"prompt_lookup_num_tokens": speculation.num_tokens,
                     "max_matching_ngram_size": speculation.max_ngram}
        streamer = _TextPieces(tok, on_text) if on_text is not None else None
        with self._lock:
            broken = (_accept_drafts_unchecked(self.model) if speculation.mode == "unchecked"
                      else _nothing())
            t0 = time.perf_counter()
            with self.counter.request() as counts, broken, torch.no_grad():
                ids = self.model.generate(**enc, max_new_tokens=max_new_tokens,
                                          do_sample=False, streamer=streamer, **extra)
            decode_ms = (time.perf_counter() - t0) * 1000.0
        new_ids = ids[0, prompt_len:].tolist()
        counts.check(len(new_ids))  # new tokens == accepted drafts + target passes
        text = tok.decode(new_ids, skip_special_tokens=True)
        if streamer is not None:
            streamer.finish(text)
        eos = tok.eos_token_id
        finish = "stop" if new_ids and new_ids[-1] == eos or len(new_ids) < max_new_tokens \
            else "length"
        return Completion(text, prompt_len, len(new_ids), finish, counts, decode_ms)


@contextmanager
def _nothing() -> Iterator[None]:
    yield


@contextmanager
def _accept_drafts_unchecked(model: Any) -> Iterator[None]:
    """The broken verifier: in every forward pass, each kept logit row is made to prefer
    the input token that follows its position, so a verification pass "agrees" with every
    drafted token; the last row (the target's own next token) is left alone."""

    def hook(module: Any, args: Any, kwargs: dict[str, Any], output: Any) -> Any:
        input_ids = kwargs.get("input_ids")
        if input_ids is None and args:
            input_ids = args[0]
        logits = getattr(output, "logits", None)
        if input_ids is None or logits is None:
            return output
        length, keep = int(input_ids.shape[1]), int(logits.shape[1])
        for i in range(keep - 1):
            following = length - keep + i + 1
            if 0 < following < length:
                row = logits[0, i]
                row[int(input_ids[0, following])] = row.max() + 1.0
        return output

    handle = model.register_forward_hook(hook, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()


class _TextPieces:
    """A transformers streamer handing on the text each generation step adds (the prompt,
    put first, is skipped; a piece ending in an incomplete character waits)."""

    def __init__(self, tokenizer: Any, on_text: Callable[[str], None]) -> None:
        self.tokenizer = tokenizer
        self.on_text = on_text
        self.ids: list[int] = []
        self.sent = ""
        self.prompt_seen = False

    def put(self, value: Any) -> None:
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        self.ids.extend(int(t) for t in value.reshape(-1).tolist())
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if text.endswith("\ufffd") or not text.startswith(self.sent):
            return
        piece, self.sent = text[len(self.sent):], text
        if piece:
            self.on_text(piece)

    def end(self) -> None:
        """The streamer protocol's end of generation: nothing left to send here, since
        :meth:`finish` gets the final text and sends what the steps left out."""

    def finish(self, text: str) -> None:
        """Send what the steps left out, so the pieces add up to ``text``."""
        if text.startswith(self.sent) and len(text) > len(self.sent):
            self.on_text(text[len(self.sent):])
            self.sent = text


class OpenAIServer(ThreadingHTTPServer):
    """``model`` served on ``host:port`` (0: a free port) as ``name``; ``start()`` serves from
    a daemon thread, ``stop()`` ends it. ``requests`` counts the completions served."""

    daemon_threads = True

    def __init__(self, model: GreedyModel, speculation: Speculation, *, name: str = "model",
                 host: str = "127.0.0.1", port: int = 0, max_tokens_limit: int = 256) -> None:
        super().__init__((host, port), _Handler)
        self.model = model
        self.speculation = speculation
        self.name = name
        self.max_tokens_limit = max_tokens_limit
        self.requests = 0
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> OpenAIServer:
        self._thread = threading.Thread(target=self.serve_forever, name="openai-server",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> OpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def answer(self, completion: Completion, request_id: str, *, stream_final: bool = False
               ) -> dict[str, Any]:
        timings: dict[str, Any] = {"prompt_n": completion.prompt_tokens,
                                   "predicted_n": completion.new_tokens,
                                   "predicted_ms": round(completion.decode_ms, 3)}
        if self.speculation.speculative:
            timings["draft_n"] = completion.counts.drafted
            timings["draft_n_accepted"] = completion.counts.accepted
        usage = {"prompt_tokens": completion.prompt_tokens,
                 "completion_tokens": completion.new_tokens,
                 "total_tokens": completion.prompt_tokens + completion.new_tokens}
        choice: dict[str, Any] = {"index": 0, "finish_reason": completion.finish_reason}
        if stream_final:
            choice["delta"] = {}
        else:
            choice["message"] = {"role": "assistant", "content": completion.text}
        return {"id": request_id,
                "object": "chat.completion.chunk" if stream_final else "chat.completion",
                "created": int(time.time()), "model": self.name, "choices": [choice],
                "usage": usage, "timings": timings}


class _Handler(BaseHTTPRequestHandler):
    server: OpenAIServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        # The base writes every access line to stderr; here it is a debug log line.
        log.debug("%s %s", self.address_string(), format % args)

    def _json(self, status: int, obj: Any) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, message: str) -> None:
        self._json(status, {"error": {"message": message, "type": "invalid_request_error",
                                      "code": status}})

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": self.server.name,
                                                         "object": "model"}]})
        else:
            self._error(404, f"no route {self.path}")

    def do_POST(self) -> None:
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._error(404, f"no route {self.path}")
            return
        try:
            request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        except (ValueError, json.JSONDecodeError) as e:
            self._error(400, f"body is not JSON: {e}")
            return
        server = self.server
        messages = request.get("messages") if isinstance(request, dict) else None
        if not isinstance(messages, list) or not messages:
            self._error(400, "messages: a non-empty list is required")
            return
        temperature = request.get("temperature", 0)
        if temperature != 0:
            self._error(400, "only greedy decoding (temperature 0) is served")
            return
        max_tokens = request.get("max_tokens", request.get("max_completion_tokens", 16))
        if not isinstance(max_tokens, int) or not 1 <= max_tokens <= server.max_tokens_limit:
            self._error(400, f"max_tokens: 1..{server.max_tokens_limit}")
            return
        request_id = f"chatcmpl-{uuid.uuid4().hex}"
        if request.get("stream"):
            self._stream(messages, max_tokens, request_id)
            return
        completion = server.model.generate(messages, max_tokens, server.speculation)
        server.requests += 1
        self._json(200, server.answer(completion, request_id))

    def _stream(self, messages: list[dict[str, Any]], max_tokens: int, request_id: str) -> None:
        server = self.server
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()  # HTTP/1.0: the body ends when the connection closes

        def event(obj: dict[str, Any]) -> None:
            self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
            self.wfile.flush()

        def piece(text: str) -> None:
            event({"id": request_id, "object": "chat.completion.chunk", "model": server.name,
                   "choices": [{"index": 0, "delta": {"content": text},
                                "finish_reason": None}]})

        event({"id": request_id, "object": "chat.completion.chunk", "model": server.name,
               "choices": [{"index": 0, "delta": {"role": "assistant"},
                            "finish_reason": None}]})
        completion = server.model.generate(messages, max_tokens, server.speculation,
                                           on_text=piece)
        server.requests += 1
        event(server.answer(completion, request_id, stream_final=True))
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
