"""Events back to telemetry v1 dicts (for dead letters, adapters and tests)."""

from __future__ import annotations

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


def event_to_dict(e: Event) -> dict[str, Any]:
    """The telemetry v1 object that parses back to ``e``."""
    d: dict[str, Any] = {
        "request_id": e.request_id,
        "ts": format_ts(e.ts),
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
        spec: dict[str, Any] = {
            "num_speculative_tokens": e.num_speculative_tokens,
            "drafted_tokens": e.drafted_tokens,
            "accepted_tokens": e.accepted_tokens,
        }
        if e.verify_steps is not None:
            spec["verify_steps"] = e.verify_steps
        if e.accepted_per_position is not None:
            spec["accepted_per_position"] = list(e.accepted_per_position)
        if e.method is not None:
            spec["method"] = e.method
        d["spec"] = spec
    d["output_tokens"] = e.output_tokens
    d["e2e_ms"] = e.e2e_ms
    for name in ("prompt_tokens", "ttft_ms", "batch_size", "instance", "engine", "temperature"):
        value = getattr(e, name)
        if value is not None:
            d[name] = value
    if e.draft_evicted:
        d["draft_evicted"] = True
    return d
