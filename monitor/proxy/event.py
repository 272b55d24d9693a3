"""Telemetry v1 events of proxied requests: the upstream's counters, the configured model
metadata, and the latency the proxy measured."""

from __future__ import annotations

from typing import Any

from monitor.proxy.config import ModelMeta
from monitor.proxy.counters import Reading
from monitor.telemetry.serialize import format_ts, request_tail, spec_block

__all__ = ["failed_event", "request_event"]

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
) -> dict[str, Any]:
    """The event of a request the upstream answered with 2xx.

    ``ttft_ms`` None (a non-streamed response, whose first byte comes after the last token)
    is derived from the engine's decode time where it reports one: e2e - decode.
    """
    event = _base(request_id=request_id, ts=ts, route=route, status=reading.status, meta=meta)
    counts = reading.spec
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
    return request_tail(event, output_tokens=reading.output_tokens, e2e_ms=e2e_ms,
                        prompt_tokens=reading.prompt_tokens,
                        ttft_ms=ttft_ms if ttft_ms is None else min(ttft_ms, e2e_ms),
                        instance=instance, engine=reading.engine)


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
) -> dict[str, Any]:
    """The event of a request that failed (upstream error or unreachable, client gone).

    It has no ``spec``: nobody can say what it drafted, and a made-up zero would read as
    "nothing drafted" (that share is watched on its own). It still names the draft model,
    so it counts in the same series as the route's other requests.
    """
    event = _base(request_id=request_id, ts=ts, route=route, status=status, meta=meta)
    return request_tail(event, output_tokens=0, e2e_ms=e2e_ms, instance=instance,
                        engine=engine)
