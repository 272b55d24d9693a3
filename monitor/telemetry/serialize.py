"""Events back to telemetry v1 dicts (for dead letters, adapters and tests)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from monitor.telemetry.event import Event


def format_ts(ts: float) -> str:
    """RFC 3339 UTC with milliseconds.

    >>> format_ts(0.5)
    '1970-01-01T00:00:00.500Z'
    """
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z"
    )


def spec_block(
    num_speculative_tokens: int,
    drafted: int,
    accepted: int,
    verify_steps: int | None = None,
    per_position: Sequence[int] | None = None,
    method: str | None = None,
) -> dict[str, Any]:
    """The ``spec`` object of a telemetry v1 event (optional fields only when known); every
    producer of events (serializer, adapters, scraper) builds it here.

    >>> spec_block(4, 40, 30, verify_steps=10, method="eagle")
    {'num_speculative_tokens': 4, 'drafted_tokens': 40, 'accepted_tokens': 30, \
'verify_steps': 10, 'method': 'eagle'}
    """
    spec: dict[str, Any] = {
        "num_speculative_tokens": num_speculative_tokens,
        "drafted_tokens": drafted,
        "accepted_tokens": accepted,
    }
    if verify_steps is not None:
        spec["verify_steps"] = verify_steps
    if per_position is not None:
        spec["accepted_per_position"] = list(per_position)
    if method is not None:
        spec["method"] = method
    return spec


def request_tail(
    event: dict[str, Any],
    *,
    output_tokens: int,
    e2e_ms: float,
    prompt_tokens: int | None = None,
    ttft_ms: float | None = None,
    temperature: float | None = None,
    instance: str | None = None,
    engine: str | None = None,
) -> dict[str, Any]:
    """Add the request's token counts, latencies and origin to ``event`` (every builder of
    telemetry v1 ends the same way); returns ``event``.

    >>> request_tail({}, output_tokens=3, e2e_ms=0.1 + 0.2, engine="x")
    {'output_tokens': 3, 'e2e_ms': 0.3, 'engine': 'x'}
    """
    if prompt_tokens is not None:
        event["prompt_tokens"] = prompt_tokens
    event["output_tokens"] = output_tokens
    # Rounded to the microsecond: float sums like 0.1 + 0.2 would print 17 digits otherwise.
    # Rounding is monotonic, so ttft <= e2e still holds.
    if ttft_ms is not None:
        event["ttft_ms"] = round(ttft_ms, 3)
    event["e2e_ms"] = round(e2e_ms, 3)
    if temperature is not None:
        event["temperature"] = temperature
    if instance is not None:
        event["instance"] = instance
    if engine is not None:
        event["engine"] = engine
    return event


def _ts_value(ts: float) -> str | float:
    """RFC 3339 when milliseconds say it exactly, else Unix seconds: a time read with more
    digits (``07.4121Z``, ``1793628187.4121``) must parse back to the same float.

    >>> _ts_value(1793628187.5), _ts_value(1793628187.4121)
    ('2026-11-02T14:03:07.500Z', 1793628187.4121)
    """
    text = format_ts(ts)
    return text if datetime.fromisoformat(text).timestamp() == ts else ts


def event_to_dict(e: Event) -> dict[str, Any]:
    """The telemetry v1 object that parses back to ``e``."""
    d: dict[str, Any] = {
        "request_id": e.request_id,
        "ts": _ts_value(e.ts),
        "route": e.route,
        "status": e.status,
        "target": {"model": e.target_model, "revision": e.target_revision,
                   "tokenizer": e.target_tokenizer},
    }
    if e.draft_model is not None:
        draft = {"model": e.draft_model, "revision": e.draft_revision,
                 "tokenizer": e.draft_tokenizer}
        if e.pinned_target_revision is not None:
            draft["pinned_target_revision"] = e.pinned_target_revision
        d["draft"] = draft
    if e.has_spec:
        d["spec"] = spec_block(e.num_speculative_tokens, e.drafted_tokens, e.accepted_tokens,
                               e.verify_steps, e.accepted_per_position, e.method)
    d["output_tokens"] = e.output_tokens
    d["e2e_ms"] = e.e2e_ms
    for name in ("prompt_tokens", "ttft_ms", "batch_size", "instance", "engine", "temperature"):
        value = getattr(e, name)
        if value is not None:
            d[name] = value
    if e.draft_evicted:
        d["draft_evicted"] = True
    return d
