"""Shadow requests for the losslessness check: a share of greedy requests served with
speculation is sent once more, unchanged, to an upstream serving the same target model
without speculation, and both answers are published with their hashes.

The caller never waits for, nor hears of, a shadow request: it starts once the caller's
response is complete, runs as a background task on the proxy's event loop (its own
connection pool), and at most ``shadow_max_in_flight`` run at once; one more is dropped
and counted (``specwatch_proxy_shadow_requests_total{outcome="dropped"}``). Whatever goes
wrong with it (unreachable, timeout, an error status, an unreadable answer, an answer that
shows drafting) is counted as ``failed`` and logged at most once a minute per reason.

Its event is that of a request without speculation: the same route, target model and
revision, temperature and prompt hash as the request it shadows, no ``draft`` and no
``spec``, the tag ``shadow: "true"``, and a request id ``<prefix>shadow/<engine id>``.

Which requests: those with temperature 0 whose prompt hash falls under the rate
(:meth:`Shadow.sampled`), so the choice is deterministic: a prompt that is sampled is
shadowed on each repeat (its pairs keep coming), rate 1.0 shadows every greedy request and
0 none.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from time import perf_counter
from typing import Any

from monitor.adapters.common import AdapterError
from monitor.proxy.config import ModelMeta, ProxyConfig
from monitor.proxy.counters import read_response
from monitor.proxy.event import itl_block, request_event
from monitor.proxy.hashes import output_hash, output_text
from monitor.proxy.metrics import ProxyMetrics
from monitor.proxy.stream import body_reader
from monitor.proxy.upstream import UpstreamError, UpstreamPool
from monitor.publish import WarnLimiter
from monitor.telemetry.event import SHADOW_TAG

__all__ = ["SHADOW_OUTCOMES", "SHADOW_TAGS", "Shadow", "sampled"]

log = logging.getLogger(__name__)

SHADOW_OUTCOMES = ("published", "dropped", "failed")
SHADOW_TAGS = {SHADOW_TAG: "true"}


def sampled(prompt_hash: str, rate: float) -> bool:
    """Whether a request with this prompt hash is shadowed at ``rate``.

    >>> sampled("00000000ffff", 0.01), sampled("ffffffff0000", 0.99), sampled("ffffffff", 1.0)
    (True, False, True)
    """
    return int(prompt_hash[:8], 16) < rate * 4294967296.0


class Shadow:
    """Sends shadow requests and publishes their events; ``counts`` per outcome (also on
    ``metrics`` when given). Use from the proxy's event loop only."""

    def __init__(
        self,
        config: ProxyConfig,
        publish: Callable[[Mapping[str, Any]], object],
        *,
        metrics: ProxyMetrics | None = None,
        clock: Callable[[], float] = time.time,
        warn_interval_s: float = 60.0,
    ) -> None:
        if config.shadow_upstream is None:
            raise ValueError("no shadow_upstream configured")
        self.config = config
        self.url = config.shadow_upstream
        self.rate = config.shadow_rate
        self.max_in_flight = config.shadow_max_in_flight
        self._publish = publish
        self.metrics = metrics
        self.clock = clock
        self.counts = dict.fromkeys(SHADOW_OUTCOMES, 0)
        self._tasks: set[asyncio.Task[None]] = set()
        self._pool: UpstreamPool | None = None
        self._warnings = WarnLimiter(warn_interval_s)

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    def sampled(self, prompt_hash: str) -> bool:
        return sampled(prompt_hash, self.rate)

    def submit(
        self,
        method: str,
        target: bytes,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        *,
        route: str,
        meta: ModelMeta,
        prompt_hash: str,
        temperature: float,
    ) -> bool:
        """Start one shadow request in the background; False when too many are running (it
        is dropped and counted)."""
        if len(self._tasks) >= self.max_in_flight:
            self._count("dropped")
            return False
        task = asyncio.get_running_loop().create_task(self._run(
            method, target, headers, body, route=route, meta=meta, prompt_hash=prompt_hash,
            temperature=temperature))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def aclose(self) -> None:
        """Cancel what is still running and close the connections."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    async def join(self) -> None:
        """Wait for the shadow requests running now (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # --- one shadow request -----------------------------------------------------------------

    def _count(self, outcome: str) -> None:
        self.counts[outcome] += 1
        if self.metrics is not None:
            self.metrics.shadow.labels(outcome=outcome).inc()

    def _fail(self, reason: str, detail: str) -> None:
        self._count("failed")
        n = self._warnings.due(reason)
        if n:
            log.warning("proxy: shadow request to %s failed (%s): %s (%d failure(s) since the "
                        "last warning)", self.url, reason, detail, n)

    async def _run(self, method: str, target: bytes, headers: list[tuple[bytes, bytes]],
                   body: bytes, *, route: str, meta: ModelMeta, prompt_hash: str,
                   temperature: float) -> None:
        try:
            event = await self._exchange(method, target, headers, body, route=route,
                                         meta=meta, prompt_hash=prompt_hash,
                                         temperature=temperature)
            if event is not None:
                self._publish(event)
                self._count("published")
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - a shadow request must never surface
            self._fail("internal", repr(e))

    async def _exchange(self, method: str, target: bytes, headers: list[tuple[bytes, bytes]],
                        body: bytes, *, route: str, meta: ModelMeta, prompt_hash: str,
                        temperature: float) -> dict[str, Any] | None:
        cfg = self.config
        if self._pool is None:
            self._pool = UpstreamPool(self.url, connect_timeout=cfg.connect_timeout,
                                      read_timeout=cfg.read_timeout)
        start = perf_counter()
        first: float | None = None
        try:
            response = await self._pool.request(method, target, headers, body)
        except UpstreamError as e:
            self._fail(e.kind, str(e))
            return None
        try:
            if not 200 <= response.status < 300:
                self._fail("status", f"HTTP {response.status}")
                return None
            reader = body_reader(response.header(b"content-type").decode("latin-1"),
                                 response.header(b"content-encoding").decode("latin-1"),
                                 cfg.max_response_bytes)
            async for chunk in response.body():
                if first is None:
                    first = perf_counter()
                if reader is not None:
                    reader.feed(chunk)
            end = perf_counter()
        except UpstreamError as e:
            self._fail(e.kind, str(e))
            return None
        finally:
            response.close()
        if reader is None:
            self._fail("unreadable", "content-encoding")
            return None
        e2e_ms = (end - start) * 1000.0
        request_id = cfg.request_id_prefix + "shadow/"
        try:
            answer = reader.result()
            if isinstance(answer, dict) and answer.get("error") is not None:
                self._fail("error", "the response carries an error")
                return None
            # no spec metadata: counters in the answer mean the shadow upstream speculates
            reading = read_response(answer, "auto", None)
        except AdapterError as e:
            self._fail("unreadable", e.reason)
            return None
        text = output_text(answer)
        ttft_ms = (first - start) * 1000.0 if reader.token_times and first else None
        return request_event(
            reading, meta, route=route,
            request_id=request_id + (reading.request_id or uuid.uuid4().hex), ts=self.clock(),
            e2e_ms=e2e_ms, ttft_ms=ttft_ms, temperature=temperature,
            itl=itl_block(reader.token_times), prompt_hash=prompt_hash,
            output_hash=None if text is None else output_hash(text), speculative=False,
            tags=SHADOW_TAGS)
