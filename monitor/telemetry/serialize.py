"""Events back to telemetry v1 dicts (for dead letters, adapters and tests).

Optional fields, v1.1 ones included, are written only when set, so output of events that do
not use them stays byte-identical to what v1.0 producers wrote.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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


def v11_fields(
    event: dict[str, Any],
    *,
    tags: Mapping[str, str] | None = None,
    outcome_ok: bool | None = None,
    outcome_schema_valid: bool | None = None,
    outcome_tool_calls_valid: bool | None = None,
    experiment_name: str | None = None,
    experiment_arm: str | None = None,
    itl_p50_ms: float | None = None,
    itl_p99_ms: float | None = None,
    itl_max_ms: float | None = None,
    gpu_seconds: float | None = None,
    prompt_hash: str | None = None,
    output_hash: str | None = None,
) -> dict[str, Any]:
    """Add the telemetry v1.1 fields that are set (not None) to ``event``; returns ``event``.

    Keyword names are the ``Event`` fields. An ``outcome`` object holds only the verdicts
    that are known (absent means unknown, never false). ``experiment`` needs both name and
    arm and ``itl_ms`` all three quantiles: a half-set one is a producer bug, raised here
    rather than dead-lettered later. Values are written as given (no rounding): this is
    also the inverse of the parser, and round trips must be exact.

    >>> v11_fields({}, outcome_ok=True, experiment_name="e1", experiment_arm="candidate")
    {'outcome': {'ok': True}, 'experiment': {'name': 'e1', 'arm': 'candidate'}}
    >>> v11_fields({}, itl_p50_ms=10.0)
    Traceback (most recent call last):
    ...
    ValueError: itl_ms needs p50, p99 and max (got p50=10.0, p99=None, max=None)
    """
    if tags is not None:
        event["tags"] = dict(tags)
    if outcome_ok is not None or outcome_schema_valid is not None or (
        outcome_tool_calls_valid is not None
    ):
        outcome: dict[str, bool] = {}
        if outcome_ok is not None:
            outcome["ok"] = outcome_ok
        if outcome_schema_valid is not None:
            outcome["schema_valid"] = outcome_schema_valid
        if outcome_tool_calls_valid is not None:
            outcome["tool_calls_valid"] = outcome_tool_calls_valid
        event["outcome"] = outcome
    if experiment_name is not None or experiment_arm is not None:
        if experiment_name is None or experiment_arm is None:
            raise ValueError(
                f"experiment needs name and arm (got name={experiment_name!r},"
                f" arm={experiment_arm!r})"
            )
        event["experiment"] = {"name": experiment_name, "arm": experiment_arm}
    if itl_p50_ms is not None or itl_p99_ms is not None or itl_max_ms is not None:
        if itl_p50_ms is None or itl_p99_ms is None or itl_max_ms is None:
            raise ValueError(
                f"itl_ms needs p50, p99 and max (got p50={itl_p50_ms}, p99={itl_p99_ms},"
                f" max={itl_max_ms})"
            )
        event["itl_ms"] = {"p50": itl_p50_ms, "p99": itl_p99_ms, "max": itl_max_ms}
    if gpu_seconds is not None:
        event["gpu_seconds"] = gpu_seconds
    if prompt_hash is not None:
        event["prompt_hash"] = prompt_hash
    if output_hash is not None:
        event["output_hash"] = output_hash
    return event


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
    tags: Mapping[str, str] | None = None,
    outcome_ok: bool | None = None,
    outcome_schema_valid: bool | None = None,
    outcome_tool_calls_valid: bool | None = None,
    experiment_name: str | None = None,
    experiment_arm: str | None = None,
    itl_p50_ms: float | None = None,
    itl_p99_ms: float | None = None,
    itl_max_ms: float | None = None,
    gpu_seconds: float | None = None,
    prompt_hash: str | None = None,
    output_hash: str | None = None,
) -> dict[str, Any]:
    """Add the request's token counts, latencies and origin to ``event`` (every builder of
    telemetry v1 ends the same way); returns ``event``.

    The keywords after ``engine`` are the v1.1 fields, as in ``v11_fields`` (written after
    ``engine``, only when set, so v1.0 output is unchanged). Latencies are rounded, the
    v1.1 values are not (``proxy.event.itl_block`` rounds its quantiles itself).

    >>> request_tail({}, output_tokens=3, e2e_ms=0.1 + 0.2, engine="x")
    {'output_tokens': 3, 'e2e_ms': 0.3, 'engine': 'x'}
    >>> request_tail({}, output_tokens=3, e2e_ms=5.0, gpu_seconds=0.25, prompt_hash="ab")
    {'output_tokens': 3, 'e2e_ms': 5.0, 'gpu_seconds': 0.25, 'prompt_hash': 'ab'}
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
    return v11_fields(
        event, tags=tags, outcome_ok=outcome_ok, outcome_schema_valid=outcome_schema_valid,
        outcome_tool_calls_valid=outcome_tool_calls_valid, experiment_name=experiment_name,
        experiment_arm=experiment_arm, itl_p50_ms=itl_p50_ms, itl_p99_ms=itl_p99_ms,
        itl_max_ms=itl_max_ms, gpu_seconds=gpu_seconds, prompt_hash=prompt_hash,
        output_hash=output_hash,
    )  # fmt: skip


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
    # gpu_seconds the pipeline estimated is not what the producer reported: leave it out
    return v11_fields(
        d, tags=e.tags, outcome_ok=e.outcome_ok, outcome_schema_valid=e.outcome_schema_valid,
        outcome_tool_calls_valid=e.outcome_tool_calls_valid, experiment_name=e.experiment_name,
        experiment_arm=e.experiment_arm, itl_p50_ms=e.itl_p50_ms, itl_p99_ms=e.itl_p99_ms,
        itl_max_ms=e.itl_max_ms, gpu_seconds=None if e.gpu_estimated else e.gpu_seconds,
        prompt_hash=e.prompt_hash, output_hash=e.output_hash,
    )  # fmt: skip
