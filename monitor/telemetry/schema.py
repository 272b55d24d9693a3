"""msgspec mirror of the telemetry v1 contract, for the parser's fast path.

These Structs decode and type-check the common valid event in C. They are not the contract:
``event_from_obj`` in ``parse.py`` is. Whatever these accept is post-checked in Python
(``parse._fast_event``) and anything they or the post-checks refuse is re-parsed by the
hand-written validator, which names the reason. So the Structs may be stricter than the
validator (that only costs speed) but never looser.

Unknown fields are forbidden here on purpose (the contract allows them): msgspec skips an
unknown field's value without checking its UTF-8 or number overflow (``"x": "\\xff"`` and
``"x": 1e999`` pass), which orjson rejects. An event with extra fields takes the slow path.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

__all__ = ["Draft", "Experiment", "Itl", "Outcome", "RawEvent", "Spec", "Target", "decode_message"]

# Keep in step with the limits in parse.py (test_fast_parse.py checks they agree).
MAX_ID_CHARS = 128
MAX_NAME_CHARS = 256
MAX_SPEC_TOKENS = 64
MAX_COUNT = 10**9
MAX_MS = 1e10
MAX_TAGS = 16
MAX_HASH_CHARS = 128

Id = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_ID_CHARS)]
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_NAME_CHARS)]
OptName = Annotated[str, msgspec.Meta(max_length=MAX_NAME_CHARS)] | None
Count = Annotated[int, msgspec.Meta(ge=0, le=MAX_COUNT)]
Ms = Annotated[float, msgspec.Meta(ge=0.0, le=MAX_MS)]
Hash = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_HASH_CHARS)]
Tags = Annotated[
    dict[Name, Annotated[str, msgspec.Meta(max_length=MAX_NAME_CHARS)]],
    msgspec.Meta(max_length=MAX_TAGS),
]


class Target(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    model: Name
    revision: Name
    tokenizer: Name


class Draft(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    model: Name
    revision: Name
    tokenizer: Name
    pinned_target_revision: OptName = None


class Spec(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    num_speculative_tokens: Annotated[int, msgspec.Meta(ge=1, le=MAX_SPEC_TOKENS)]
    drafted_tokens: Count
    accepted_tokens: Count
    verify_steps: Count | None = None
    accepted_per_position: (
        Annotated[list[Count], msgspec.Meta(max_length=MAX_SPEC_TOKENS)] | None
    ) = None
    method: OptName = None
    params: dict[str, Any] | None = None


class Outcome(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    ok: bool | None = None
    schema_valid: bool | None = None
    tool_calls_valid: bool | None = None


class Experiment(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    name: Name
    arm: Name


class Itl(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    p50: Ms
    p99: Ms
    max: Ms


class RawEvent(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    request_id: Id
    ts: str | int | float
    route: Id
    target: Target
    output_tokens: Count
    e2e_ms: Ms
    status: str | None = None
    draft: Draft | None = None
    spec: Spec | None = None
    prompt_tokens: Count | None = None
    ttft_ms: Ms | None = None
    batch_size: Annotated[int, msgspec.Meta(ge=1, le=MAX_COUNT)] | None = None
    instance: OptName = None
    engine: OptName = None
    draft_evicted: bool | None = None
    temperature: Ms | None = None
    # v1.1; absent in most traffic, where they cost msgspec next to nothing
    tags: Tags | None = None
    outcome: Outcome | None = None
    experiment: Experiment | None = None
    itl_ms: Itl | None = None
    gpu_seconds: Ms | None = None
    prompt_hash: Hash | None = None
    output_hash: Hash | None = None


decode_message = msgspec.json.Decoder(list[RawEvent] | RawEvent).decode
"""One message (an event or a batch) to ``RawEvent``s; raises ``msgspec.DecodeError``."""
