"""A fake inference engine for the proxy tests: a raw ASGI app served by uvicorn on a loopback
port, answering in the shapes of llama.cpp, vLLM and SGLang (see the reference notes).

What it answers is chosen by the request's ``x-fake`` header (the proxy passes it on like
any header); ``seed`` in the JSON body makes the ids, so responses are deterministic and a
direct call and a proxied one can be compared byte for byte. ``x-gate: NAME`` makes a stream
wait after its first event until the test calls ``engine.open_gate(NAME)``.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

from monitor.proxy.server import ProxyServer

Scope = dict[str, Any]

LLAMACPP_TIMINGS = {"cache_n": 0, "prompt_n": 7, "prompt_ms": 12.5, "predicted_n": 20,
                    "predicted_ms": 40.0, "draft_n": 12, "draft_n_accepted": 9}
VLLM_SPEC = {"mean_acceptance_length": 2.925, "draft_acceptance_rate": 0.6417,
             "acceptance_histogram": [5, 10, 8, 17], "num_spec_steps": 40,
             "num_accepted_draft_tokens": 77, "num_draft_tokens": 120, "num_spec_tokens": 3}
SGLANG_META = {"finish_reason": {"type": "stop", "matched": 2}, "prompt_tokens": 64,
               "completion_tokens": 29, "cached_tokens": 0, "e2e_latency": 1.2,
               "spec_verify_ct": 10, "spec_num_correct_drafts": 16,
               "spec_num_proposed_drafts": 30, "spec_correct_drafts_histogram": [2, 3, 2, 3]}
BLOB = bytes(range(256)) * 64 + b"\r\n\r\n0\r\n"  # every byte value, and framing look-alikes


def _json(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def chat(seed: str, *, timings: dict[str, Any] | None = None,
         metrics: dict[str, Any] | None = None, finish: str = "stop") -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": f"chatcmpl-{seed}", "object": "chat.completion", "created": 1793628180,
        "model": "served-model",
        "choices": [{"index": 0, "finish_reason": finish,
                     "message": {"role": "assistant", "content": "def f(): pass"}}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 20, "total_tokens": 27},
    }
    if timings is not None:
        body["timings"] = timings
    if metrics is not None:
        body["metrics"] = metrics
    return body


def sse(objs: list[dict[str, Any]]) -> list[bytes]:
    return [b"data: " + _json(o) + b"\n\n" for o in objs] + [b"data: [DONE]\n\n"]


def chat_stream(seed: str, final: dict[str, Any], usage_chunk: dict[str, Any] | None = None
                ) -> list[bytes]:
    base = {"id": f"chatcmpl-{seed}", "object": "chat.completion.chunk", "model": "served-model"}
    chunks = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant"},
                                    "finish_reason": None}]}]
    for word in ("def", " f", "():", " pass"):
        chunks.append({**base, "choices": [{"index": 0, "delta": {"content": word},
                                            "finish_reason": None}]})
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                   **final})
    if usage_chunk is not None:
        chunks.append({**base, "choices": [], **usage_chunk})
    return sse(chunks)


class FakeEngine:
    """The ASGI app; ``requests`` records what arrived, ``disconnects`` which streams saw
    their client (the proxy) go away."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.disconnects: set[str] = set()
        self._gates: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def gate(self, name: str) -> threading.Event:
        with self._lock:
            return self._gates.setdefault(name, threading.Event())

    def open_gate(self, name: str) -> None:
        self.gate(name).set()

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        self.requests.append({"method": scope["method"], "path": scope["path"],
                              "raw_path": scope["raw_path"], "query": scope["query_string"],
                              "headers": scope["headers"], "body": body})
        request = json.loads(body) if body.startswith(b"{") else {}
        seed = str(request.get("seed", "0"))
        fake = headers.get("x-fake", "")
        path = scope["path"]
        if path.startswith("/echo"):
            await self._answer(send, 200, _json({
                "method": scope["method"], "raw_path": scope["raw_path"].decode("latin-1"),
                "query": scope["query_string"].decode("latin-1"),
                "headers": [[k.decode("latin-1"), v.decode("latin-1")]
                            for k, v in scope["headers"]],
                "body": body.decode("latin-1")}))
        elif path == "/blob":
            await self._answer(send, 200, BLOB, content_type=b"application/octet-stream",
                               extra=[(b"set-cookie", b"a=1"), (b"set-cookie", b"b=2"),
                                      (b"x-engine", b"fake")])
        elif fake.startswith("status-"):
            status = int(fake.removeprefix("status-"))
            await self._answer(send, status, _json({"error": {"message": f"fake {status}",
                                                              "code": status}}),
                               extra=[(b"retry-after", b"7")] if status == 429 else [])
        elif fake == "broken":
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", b"1000")]})
            await send({"type": "http.response.body", "body": b'{"id": "cut', "more_body": True})
            raise RuntimeError("fake engine breaks off on purpose")
        elif request.get("stream"):
            await self._stream(scope, receive, send, fake, seed, headers.get("x-gate"))
        else:
            await self._answer(send, 200, _json(self._body(path, fake, seed)))

    def _body(self, path: str, fake: str, seed: str) -> dict[str, Any]:
        if path == "/generate":
            meta = dict(SGLANG_META, id=f"sg-{seed}")
            if fake == "sglang-nodraft":
                meta = {k: v for k, v in meta.items() if not k.startswith("spec_")}
            return {"text": "def f(): pass", "meta_info": meta}
        if path == "/completion":
            return {"content": "def f(): pass", "stop": True, "stop_type": "eos",
                    "tokens_predicted": 20, "tokens_evaluated": 7,
                    "timings": LLAMACPP_TIMINGS}
        if fake == "llamacpp-nodraft":
            return chat(seed, timings={k: v for k, v in LLAMACPP_TIMINGS.items()
                                       if not k.startswith("draft")})
        if fake == "vllm":
            return chat(seed, metrics={"time_to_first_token_ms": 30.0,
                                       "generation_time_ms": 60.0, "queue_time_ms": 1.0,
                                       "speculative_decoding": VLLM_SPEC})
        if fake == "vllm-null":
            return chat(seed, metrics={"speculative_decoding": None})
        if fake == "plain":
            return chat(seed)
        return chat(seed, timings=LLAMACPP_TIMINGS)

    def stream_chunks(self, fake: str, seed: str) -> list[bytes]:
        if fake == "vllm":
            return chat_stream(seed, {}, usage_chunk={
                "usage": {"prompt_tokens": 7, "completion_tokens": 20},
                "metrics": {"speculative_decoding": VLLM_SPEC}})
        if fake == "llamacpp-nodraft":
            return chat_stream(seed, {"usage": {"prompt_tokens": 7, "completion_tokens": 20},
                                      "timings": {"predicted_n": 20, "predicted_ms": 40.0}})
        return chat_stream(seed, {"usage": {"prompt_tokens": 7, "completion_tokens": 20},
                                  "timings": LLAMACPP_TIMINGS})

    async def _stream(self, scope: Scope, receive: Any, send: Any, fake: str, seed: str,
                      gate_name: str | None) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream"),
                                (b"cache-control", b"no-cache")]})
        chunks = self.stream_chunks(fake, seed)
        gone = asyncio.ensure_future(receive())  # http.disconnect when the client goes
        try:
            for i, chunk in enumerate(chunks):
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                if i == 0 and gate_name:
                    gate = self.gate(gate_name)
                    while not gate.is_set():
                        if gone.done():
                            self.disconnects.add(seed)
                            return
                        await asyncio.sleep(0.01)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            if not gone.done():
                gone.cancel()

    async def _answer(self, send: Any, status: int, body: bytes, *,
                      content_type: bytes = b"application/json",
                      extra: list[tuple[bytes, bytes]] | None = None) -> None:
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", content_type),
                                (b"content-length", str(len(body)).encode()), *(extra or [])]})
        await send({"type": "http.response.body", "body": body})


def serve(engine: FakeEngine) -> ProxyServer:
    """``engine`` on a free loopback port (started; stop it when done)."""
    server = ProxyServer(engine, "127.0.0.1", 0)
    server.start()
    return server
