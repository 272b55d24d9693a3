"""Telemetry v1 events of proxied requests: the upstream's counters, the configured model
metadata, and the latency the proxy measured; the v1.1 fields ``temperature``, ``itl_ms``,
``prompt_hash`` and ``output_hash`` where known (``monitor.proxy.hashes`` says what is
hashed)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from monitor.proxy.config import ModelMeta
from monitor.proxy.counters import Reading
from monitor.telemetry.serialize import format_ts, request_tail, spec_block

__all__ = ["failed_event", "itl_block", "request_event"]

MAX_ID_CHARS = 128


def _base(
    *, request_id: str, ts: float, route: str, status: str, meta: ModelMeta
) -> dict[str, Any]:
    t = meta.target
    event: dict[str, Any] = {
        "request_id": request_id[:MAX_ID_CHARS],
        "ts": format_ts(ts),
        "route": route,
        "status": status,
        "target": {"model": t.model, "revision": t.revision, "tokenizer": t.tokenizer},
    }
    d = meta.draft
    if d is not None:
        draft = {"model": d.model, "revision": d.revision, "tokenizer": d.tokenizer}
        if d.pinned_target_revision is not None:
            draft["pinned_target_revision"] = d.pinned_target_revision
        event["draft"] = draft
    return event


def itl_block(token_times: Sequence[float]) -> dict[str, float] | None:
    """``itl_ms`` of a stream whose text-bearing events arrived at these ``perf_counter()``
    times: p50, p99 (nearest rank) and max of the gaps; None with fewer than two events.

    >>> itl_block([0.0, 0.010, 0.030, 0.031])
    {'p50': 10.0, 'p99': 20.0, 'max': 20.0}
    >>> itl_block([1.0]) is None
    True
    """
    if len(token_times) < 2:
        return None
    # in seconds, sorted; only the three answers are scaled and rounded (per request, on
    # the proxy's event loop)
    gaps = sorted([b - a for a, b in zip(token_times, token_times[1:], strict=False)])
    n = len(gaps)

    def rank(q: float) -> float:
        # round() first: 0.99 * 100 is 99.00000000000001 in floats, whose ceiling is 100
        return round(max(0.0, gaps[max(0, math.ceil(round(q * n, 9)) - 1)]) * 1000.0, 3)

    return {"p50": rank(0.50), "p99": rank(0.99), "max": round(max(0.0, gaps[-1]) * 1000.0, 3)}


def _v11(event: dict[str, Any], *, temperature: float | None, itl: dict[str, float] | None,
         prompt_hash: str | None, output_hash: str | None,
         tags: dict[str, str] | None = None) -> dict[str, Any]:
    if temperature is not None:
        event["temperature"] = temperature
    if tags:
        event["tags"] = dict(tags)
    if itl is not None:
        event["itl_ms"] = itl
    if prompt_hash is not None:
        event["prompt_hash"] = prompt_hash
    if output_hash is not None:
        event["output_hash"] = output_hash
    return event


def request_event(
    reading: Reading,
    meta: ModelMeta,
    *,
    route: str,
    request_id: str,
    ts: float,
    e2e_ms: float,
    ttft_ms: float | None,
    instance: str | None = None,
    temperature: float | None = None,
    itl: dict[str, float] | None = None,
    prompt_hash: str | None = None,
    output_hash: str | None = None,
    speculative: bool = True,
    tags: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The event of a request the upstream answered with 2xx.

    ``ttft_ms`` None (a non-streamed response, whose first byte comes after the last token)
    is derived from the engine's decode time where it reports one: e2e - decode.
    ``speculative`` False: served without speculation (a shadow request), so the event names
    the target only, no ``draft`` and no ``spec``.
    """
    event = _base(request_id=request_id, ts=ts, route=route, status=reading.status, meta=meta)
    if not speculative:
        event.pop("draft", None)
    counts = reading.spec if speculative else None
    if counts is not None:
        spec_meta = meta.spec
        spec = spec_block(counts.num_speculative_tokens, counts.drafted, counts.accepted,
                          counts.verify_steps, counts.per_position,
                          spec_meta.method if spec_meta is not None else None)
        if spec_meta is not None and spec_meta.params:
            spec["params"] = dict(spec_meta.params)
        event["spec"] = spec
    if ttft_ms is None and reading.decode_ms is not None:
        ttft_ms = max(0.0, e2e_ms - reading.decode_ms)
    request_tail(event, output_tokens=reading.output_tokens, e2e_ms=e2e_ms,
                 prompt_tokens=reading.prompt_tokens,
                 ttft_ms=ttft_ms if ttft_ms is None else min(ttft_ms, e2e_ms),
                 instance=instance, engine=reading.engine)
    return _v11(event, temperature=temperature, itl=itl, prompt_hash=prompt_hash,
                output_hash=output_hash, tags=tags)


def failed_event(
    meta: ModelMeta,
    *,
    status: str,
    route: str,
    request_id: str,
    ts: float,
    e2e_ms: float,
    instance: str | None = None,
    engine: str | None = None,
    temperature: float | None = None,
    prompt_hash: str | None = None,
    speculative: bool = True,
    tags: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The event of a request that failed (upstream error or unreachable, client gone).

    It has no ``spec``: nobody can say what it drafted, and a made-up zero would read as
    "nothing drafted" (that share is watched on its own). It still names the draft model,
    so it counts in the same series as the route's other requests.
    """
    event = _base(request_id=request_id, ts=ts, route=route, status=status, meta=meta)
    if not speculative:
        event.pop("draft", None)
    request_tail(event, output_tokens=0, e2e_ms=e2e_ms, instance=instance, engine=engine)
    return _v11(event, temperature=temperature, itl=None, prompt_hash=prompt_hash,
                output_hash=None, tags=tags)
