"""The ASGI reverse proxy: every request passes to the upstream engine unchanged, every
response comes back unchanged, and completion requests leave a telemetry v1 event behind.

Pass-through: method, path (as the client sent it), query, headers and body go to the
upstream; its status, headers and body bytes come back (a gzip body stays gzip). Only the
hop-by-hop headers of RFC 9110 section 7.6.1 are dropped each way, and ``Host`` and
``Content-Length`` are set for the upstream connection. A response is forwarded chunk by
chunk as the upstream sends it, so a stream (``"stream": true``, server-sent events)
reaches the client token by token.

Telemetry: ``POST`` requests to a completion path (``/v1/chat/completions``,
``/v1/completions``, llama.cpp's ``/completion``, SGLang's ``/generate``, also under a
prefix) are read for their counters (``monitor.proxy.counters``) while being passed on. Once
the response is complete, the proxy finds the route (``Routes``), adds the served model's
metadata and publishes one event: ``e2e_ms`` from request arrival to the upstream's last
byte, ``ttft_ms`` from arrival to the first streamed byte (for a non-streamed response: e2e
minus the engine's reported decode time, if any). Nothing of this runs before the response
is complete, and publishing never blocks or fails (``monitor.publish``). Events also carry
the request's ``temperature`` (where it sets one), ``prompt_hash`` and ``output_hash``
(``monitor.proxy.hashes`` says exactly what is hashed) and, for a stream, ``itl_ms``: p50,
p99 and max of the gaps between the streamed events that added output text.

Shadowing (``shadow_upstream``): a share of the greedy (temperature 0) requests served
with speculation is sent again to a non-speculative upstream once the caller's response is
complete, in the background, and published as a request without speculation
(``monitor.proxy.shadow``); the caller's response and latency do not depend on it.

Failures: an upstream that cannot be reached answers 502 (504 on a timeout) with an
OpenAI-style JSON error; upstream 4xx/5xx pass through unchanged. Both publish an event with
``status`` ``error`` (5xx, 429, unreachable) or ``timeout`` (408, 504), without ``spec``;
other 4xx are the client's mistakes and publish nothing. A client that goes away
mid-response cancels the upstream request (the engine stops generating) and publishes a
``cancelled`` event. An upstream that breaks off mid-response breaks off the client's
response too (the connection is closed, not ended cleanly) and publishes an ``error``.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from time import perf_counter
from typing import Any, Protocol

import orjson
from prometheus_client import CollectorRegistry

from monitor.adapters.common import AdapterError
from monitor.proxy.config import ModelMeta, ProxyConfig
from monitor.proxy.counters import NoCounters, read_response
from monitor.proxy.event import failed_event, itl_block, request_event
from monitor.proxy.hashes import output_hash, output_text, prompt_hash, temperature_of
from monitor.proxy.metrics import ProxyMetrics
from monitor.proxy.shadow import Shadow
from monitor.proxy.stream import BodyReader, SseBody, body_reader
from monitor.proxy.upstream import UpstreamError, UpstreamPool
from monitor.publish import WarnLimiter

__all__ = ["COMPLETION_PATHS", "EventPublisher", "ProxyApp"]

log = logging.getLogger(__name__)

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

COMPLETION_PATHS = ("/v1/chat/completions", "/v1/completions", "/chat/completions",
                    "/completions", "/completion", "/generate")
HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"proxy-authenticate",
                        b"proxy-authorization", b"proxy-connection", b"te", b"trailer",
                        b"transfer-encoding", b"upgrade"})
# Set anew for the upstream connection (the pool writes Host and Content-Length).
_REQUEST_DROP = HOP_BY_HOP | {b"host", b"content-length", b"expect"}


class EventPublisher(Protocol):
    def publish(self, event: Mapping[str, Any]) -> bool: ...


class _UpstreamBroken(Exception):
    """The upstream broke off mid-response; raised to the server so that it closes the
    client's connection instead of ending the response as if it were complete."""


@dataclass(slots=True)
class _Exchange:
    """One request's facts, gathered for its event."""

    scope: Scope
    body: bytes
    start: float
    reader: BodyReader | None = None
    first_byte: float | None = None
    end: float = 0.0
    status: int = 0
    outcome: str = "ok"  # ok, upstream_status, unreachable, timeout, broken, cancelled
    finished: bool = False  # the last byte is on its way: a disconnect now is no cancel
    client_gone: bool = False
    # learnt while building the event; a shadow request needs them
    route: str | None = None
    meta: ModelMeta | None = None
    prompt_hash: str | None = None
    temperature: float | None = None


class ProxyApp:
    """The proxy as an ASGI application (``http`` and ``lifespan`` scopes).

    ``publisher`` gets each event (a :class:`monitor.publish.Publisher`, or None to publish
    nothing); ``registry`` carries :class:`ProxyMetrics`; ``clock`` gives the events' ``ts``.
    """

    def __init__(
        self,
        config: ProxyConfig,
        publisher: EventPublisher | None,
        *,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.time,
        warn_interval_s: float = 60.0,
    ) -> None:
        self.config = config
        self.publisher = publisher
        self.clock = clock
        self.metrics = ProxyMetrics(registry) if registry is not None else None
        self._base = config.upstream
        header = config.routes.header
        self._route_header = header.lower().encode("latin-1") if header else None
        self._pool: UpstreamPool | None = None
        self._warnings = WarnLimiter(warn_interval_s)
        self.shadow = (Shadow(config, self._publish, metrics=self.metrics, clock=clock,
                              warn_interval_s=warn_interval_s)
                       if config.shadow_upstream is not None else None)

    # --- ASGI -------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)
        else:  # websocket: engines serve none, so refuse the handshake
            await receive()
            await send({"type": "websocket.close", "code": 1003})

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def aclose(self) -> None:
        """Close the upstream connections (call in the loop that served)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()
        if self.shadow is not None:
            await self.shadow.aclose()

    def _open(self) -> UpstreamPool:
        # Created in the serving loop, on first use: its connections belong to that loop.
        cfg = self.config
        self._pool = UpstreamPool(cfg.upstream, connect_timeout=cfg.connect_timeout,
                                  read_timeout=cfg.read_timeout)
        return self._pool

    # --- one request ------------------------------------------------------------------------

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        start = perf_counter()
        body = await _read_body(receive)
        method = scope["method"]
        completion = method == "POST" and scope["path"].endswith(COMPLETION_PATHS)
        if self.metrics is not None:
            self.metrics.requests.labels(kind="completion" if completion else "other").inc()
        x = _Exchange(scope, body, start)
        task = asyncio.current_task()
        watcher = asyncio.ensure_future(_watch_disconnect(receive, x, task))
        try:
            await self._exchange(x, method, completion, send)
        except asyncio.CancelledError:
            if not x.client_gone or task is None:
                raise
            task.uncancel()
            x.outcome = "cancelled"
            x.end = perf_counter()
        finally:
            x.finished = True
            if not watcher.done():
                watcher.cancel()
        if completion:
            self._telemetry(x)

    async def _exchange(self, x: _Exchange, method: str, completion: bool, send: Send) -> None:
        scope = x.scope
        target = scope.get("raw_path") or scope["path"].encode("utf-8")
        query = scope.get("query_string")
        if query:
            target += b"?" + query
        pool = self._pool or self._open()
        try:
            response = await pool.request(method, target, _request_headers(scope["headers"]),
                                          x.body)
        except UpstreamError as e:
            await self._refuse(x, send, e)
            return
        x.status = response.status
        try:
            if completion and 200 <= x.status < 300:
                x.reader = body_reader(response.header(b"content-type").decode("latin-1"),
                                       response.header(b"content-encoding").decode("latin-1"),
                                       self.config.max_response_bytes)
            elif x.status >= 300:
                x.outcome = "upstream_status"
            await send({"type": "http.response.start", "status": x.status,
                        "headers": _response_headers(response.headers)})
            reader = x.reader
            try:
                async for chunk in response.body():
                    if x.first_byte is None:
                        x.first_byte = perf_counter()
                    if reader is not None:
                        reader.feed(chunk)
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            except UpstreamError as e:
                x.outcome, x.end = "broken", perf_counter()
                if self.metrics is not None:
                    self.metrics.upstream_failures.labels(kind="broken").inc()
                log.warning("upstream %s broke off the response to %s %s: %s", self._base,
                            method, scope["path"], e)
                if completion:
                    self._telemetry(x)
                raise _UpstreamBroken(f"upstream broke off: {e}") from e
            x.end = perf_counter()
            x.finished = True
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            response.close()

    async def _refuse(self, x: _Exchange, send: Send, error: UpstreamError) -> None:
        """Answer for an upstream that gave no response: 502, or 504 on a timeout."""
        kind = error.kind
        x.outcome, x.end = kind, perf_counter()
        x.status = 504 if kind == "timeout" else 502
        if self.metrics is not None:
            self.metrics.upstream_failures.labels(kind=kind).inc()
        what = {"timeout": "timed out", "unreachable": "unreachable"}.get(kind, "failed")
        message = f"specwatch proxy: upstream {self._base} {what}: {error}"
        n = self._warnings.due(f"upstream {kind}")
        if n:
            log.warning("%s (%d request(s) since the last warning)", message, n)
        body = orjson.dumps({"error": {"message": message, "type": f"upstream_{kind}",
                                       "code": x.status}})
        x.finished = True
        await send({"type": "http.response.start", "status": x.status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body, "more_body": False})

    # --- telemetry (after the response) -----------------------------------------------------

    def _publish(self, event: Mapping[str, Any]) -> None:
        if self.publisher is not None:
            self.publisher.publish(event)

    def _telemetry(self, x: _Exchange) -> None:
        try:
            event = self._event(x)
            if event is None:
                return
            if self.metrics is not None:
                self.metrics.events.labels(status=event["status"]).inc()
            self._publish(event)
            shadow = self.shadow
            if (shadow is not None and x.temperature == 0.0 and "spec" in event
                    and event["status"] == "ok" and x.prompt_hash is not None
                    and x.route is not None and x.meta is not None
                    and shadow.sampled(x.prompt_hash)):
                scope = x.scope
                target = scope.get("raw_path") or scope["path"].encode("utf-8")
                if scope.get("query_string"):
                    target += b"?" + scope["query_string"]
                shadow.submit(scope["method"], target, _request_headers(scope["headers"]),
                              x.body, route=x.route, meta=x.meta, prompt_hash=x.prompt_hash,
                              temperature=x.temperature)
        except Exception:  # noqa: BLE001 - telemetry must never cost the user anything
            log.exception("telemetry event of a proxied request failed")

    def _skip(self, reason: str, detail: str) -> None:
        if self.metrics is not None:
            self.metrics.skipped.labels(reason=reason).inc()
        n = self._warnings.due(reason)
        if n:
            log.warning("proxy: no telemetry event (%s): %s (%d request(s) since the last "
                        "warning)", reason, detail, n)

    def _event(self, x: _Exchange) -> dict[str, Any] | None:
        if x.outcome == "upstream_status" and x.status not in (408, 429) and x.status < 500:
            self._skip("client_error", f"upstream answered {x.status}")
            return None
        try:
            request = orjson.loads(x.body) if x.body else {}
        except orjson.JSONDecodeError:
            request = {}
        if not isinstance(request, dict):
            request = {}
        model = request.get("model")
        model = model if isinstance(model, str) and model else None
        path = x.scope["path"]
        x.temperature = temperature_of(request)
        x.prompt_hash = prompt_hash(_endpoint(path), request) if request else None
        header = self._header_value(x.scope["headers"])
        if header is not None and not 0 < len(header) <= 128:
            self._skip("no_route", f"{self.config.routes.header} header is not 1..128 "
                                   f"characters: {header[:40]!r}")
            return None
        route = self.config.routes.route(header, path, model)
        if route is None:
            self._skip("no_route", f"{path} (model {model!r}): no "
                       f"{self.config.routes.header or 'route'} header, path prefix, model "
                       "mapping or default route")
            return None
        x.route = route
        cfg = self.config
        e2e_ms = (x.end - x.start) * 1000.0
        ts = self.clock()
        if x.outcome != "ok":
            meta = cfg.model_meta(model)
            if meta is None:
                self._skip("no_metadata", f"no `models` entry for {model!r} and no '*'")
                return None
            status = "timeout" if x.outcome == "timeout" or x.status in (408, 504) else (
                "cancelled" if x.outcome == "cancelled" else "error")
            return failed_event(meta, status=status, route=route,
                                request_id=cfg.request_id_prefix + uuid.uuid4().hex,
                                ts=ts, e2e_ms=e2e_ms, instance=cfg.instance,
                                engine=None if cfg.engine == "auto" else cfg.engine,
                                temperature=x.temperature, prompt_hash=x.prompt_hash)
        if x.reader is None:
            self._skip("unreadable", f"{path}: the response's content-encoding cannot be read")
            return None
        try:
            body = x.reader.result()
        except AdapterError as e:
            self._skip("unreadable", f"{path}: {e.reason}")
            return None
        if isinstance(body, dict) and body.get("error") is not None:
            meta = cfg.model_meta(model)
            if meta is None:
                self._skip("no_metadata", f"no `models` entry for {model!r} and no '*'")
                return None
            return failed_event(meta, status="error", route=route,
                                request_id=cfg.request_id_prefix + uuid.uuid4().hex,
                                ts=ts, e2e_ms=e2e_ms, instance=cfg.instance,
                                temperature=x.temperature, prompt_hash=x.prompt_hash)
        served = model or (body.get("model") if isinstance(body, dict) else None)
        meta = cfg.model_meta(served if isinstance(served, str) else None)
        if meta is None:
            self._skip("no_metadata", f"no `models` entry for {served!r} and no '*'")
            return None
        try:
            reading = read_response(body, cfg.engine, meta.spec)
        except NoCounters as e:
            self._skip("no_counters", f"{path}: {e.reason}")
            return None
        except AdapterError as e:
            self._skip("unreadable", f"{path}: {e.reason}")
            return None
        ttft_ms = None
        if isinstance(x.reader, SseBody) and x.first_byte is not None:
            ttft_ms = (x.first_byte - x.start) * 1000.0
        request_id = cfg.request_id_prefix + (reading.request_id or uuid.uuid4().hex)
        x.meta = meta
        text = output_text(body)
        return request_event(reading, meta, route=route, request_id=request_id, ts=ts,
                             e2e_ms=e2e_ms, ttft_ms=ttft_ms, instance=cfg.instance,
                             temperature=x.temperature, itl=itl_block(x.reader.token_times),
                             prompt_hash=x.prompt_hash,
                             output_hash=None if text is None else output_hash(text))

    def _header_value(self, headers: list[tuple[bytes, bytes]]) -> str | None:
        name = self._route_header
        if name is None:
            return None
        for key, value in headers:
            if key == name:
                try:
                    return value.decode("utf-8").strip()
                except UnicodeDecodeError:
                    return value.decode("latin-1").strip()
        return None


def _endpoint(path: str) -> str:
    """The completion path a request went to, without any prefix (part of its prompt hash).

    >>> _endpoint("/tenant/v1/chat/completions"), _endpoint("/completion")
    ('/v1/chat/completions', '/completion')
    """
    for suffix in COMPLETION_PATHS:  # longest first where one ends another
        if path.endswith(suffix):
            return suffix
    return path


async def _read_body(receive: Receive) -> bytes:
    message = await receive()
    body = message.get("body", b"")
    if not message.get("more_body"):
        return body
    parts = [body]
    while message.get("more_body"):
        message = await receive()
        parts.append(message.get("body", b""))
    return b"".join(parts)


async def _watch_disconnect(receive: Receive, x: _Exchange, task: asyncio.Task[Any] | None
                            ) -> None:
    """Cancel the request's task when its client goes away before the response is done,
    which closes the upstream request too (the engine stops generating)."""
    try:
        message = await receive()
    except Exception:  # noqa: BLE001 - a server that cannot say; nothing to watch then
        return
    if message.get("type") == "http.disconnect" and not x.finished and task is not None:
        x.client_gone = True
        task.cancel()


def _connection_tokens(headers: list[tuple[bytes, bytes]]) -> set[bytes]:
    """Header names a ``Connection`` header declares hop-by-hop."""
    names: set[bytes] = set()
    for key, value in headers:
        if key.lower() == b"connection":
            names.update(t.strip().lower() for t in value.split(b",") if t.strip())
    return names


def _request_headers(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    extra = _connection_tokens(headers) if any(k == b"connection" for k, _ in headers) else ()
    return [(k, v) for k, v in headers if k not in _REQUEST_DROP and k not in extra]


def _response_headers(raw: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    extra = _connection_tokens(raw)
    return [(k, v) for k, v in raw if (low := k.lower()) not in HOP_BY_HOP and low not in extra]
