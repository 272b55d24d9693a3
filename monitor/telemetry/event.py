"""The validated telemetry v1 event (see ``shared/spec/telemetry-v1.md``)."""

from __future__ import annotations

from dataclasses import dataclass

STATUSES = frozenset({"ok", "error", "timeout", "cancelled"})
# tags.shadow "true": a shadow twin (specwatch proxy --shadow-upstream, monitor/proxy/shadow.py)
SHADOW_TAG = "shadow"


@dataclass(slots=True)
class Event:
    """One finished request on one route, after validation.

    Absent optional strings are ``None``; an event without a ``spec`` object has
    ``num_speculative_tokens == 0`` and zero drafted/accepted tokens (speculation off).
    ``ts`` is event time in Unix seconds (float, UTC).
    """

    request_id: str
    ts: float
    route: str
    status: str
    target_model: str
    target_revision: str
    target_tokenizer: str
    output_tokens: int
    e2e_ms: float
    draft_model: str | None = None
    draft_revision: str | None = None
    draft_tokenizer: str | None = None
    pinned_target_revision: str | None = None
    has_spec: bool = False
    num_speculative_tokens: int = 0
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    verify_steps: int | None = None
    accepted_per_position: tuple[int, ...] | None = None
    method: str | None = None
    prompt_tokens: int | None = None
    ttft_ms: float | None = None
    batch_size: int | None = None
    instance: str | None = None
    engine: str | None = None
    draft_evicted: bool = False
    temperature: float | None = None
    # Telemetry v1.1 (all optional; see the spec's "Optional fields added in v1.1").
    tags: dict[str, str] | None = None
    outcome_ok: bool | None = None  # outcome.ok; None: not reported (never "false")
    outcome_schema_valid: bool | None = None
    outcome_tool_calls_valid: bool | None = None
    experiment_name: str | None = None
    experiment_arm: str | None = None
    itl_p50_ms: float | None = None
    itl_p99_ms: float | None = None
    itl_max_ms: float | None = None
    gpu_seconds: float | None = None  # as reported; the pipeline estimates it where absent
    prompt_hash: str | None = None
    output_hash: str | None = None
    gpu_estimated: bool = False  # set by the pipeline, never parsed: gpu_seconds is its estimate

    @property
    def is_error(self) -> bool:
        return self.status != "ok"

    @property
    def is_shadow(self) -> bool:
        """A shadow twin: sent again to a non-speculative upstream only to check
        losslessness; no request of its route's."""
        tags = self.tags
        return tags is not None and tags.get(SHADOW_TAG) == "true"

    @property
    def success(self) -> bool:
        """A successful task (spec v1.1): ``outcome.ok`` where reported, else status ``ok``."""
        ok = self.outcome_ok
        return self.status == "ok" if ok is None else ok

    @property
    def decode_throughput(self) -> float | None:
        """Output tokens per second of decode time, when both latencies are known."""
        if self.ttft_ms is None:
            return None
        decode_ms = self.e2e_ms - self.ttft_ms
        if decode_ms <= 0:
            return None
        return self.output_tokens * 1000.0 / decode_ms


@dataclass(slots=True, frozen=True)
class Rejection:
    """Input that was not counted, with the reason; bound for the dead-letter destination.

    ``raw`` holds the offending bytes: the whole message, one line of it, or one element of
    a batch re-serialised. ``index`` is the element's position inside a batch or the line
    number inside a JSON-lines message (0-based), ``None`` for the whole message.
    """

    reason: str
    raw: bytes
    index: int | None = None
