"""Request and response bodies: they are the OpenAPI document's schemas, so every field says
what it is."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
)

from monitor.config import RULE_NAMES
from monitor.store.coltypes import escape_nul

# Literal of the rule names, so the schema lists them and a typo is refused by validation.
RuleName = Literal[RULE_NAMES]  # type: ignore[valid-type]
Granularity = Literal["minute", "hour", "day"]


class ErrorOut(BaseModel):
    """Every 4xx and 5xx answer."""

    error: str = Field(description="what went wrong, naming the parameter when one is at fault")
    detail: Any = Field(None, description="machine-readable particulars, e.g. "
                        "[{in, parameter, message}] for bad parameters")


class _Series(BaseModel):
    route: str
    target_model: str
    target_revision: str
    target_tokenizer: str
    draft_model: str | None = Field(description="null when speculation was off")
    draft_revision: str | None
    draft_tokenizer: str | None
    method: str | None = Field(description="drafting method; null when speculation was off")
    num_speculative_tokens: int


class RatioOut(_Series):
    """One series over one bucket: the row of ``specwatch ratios --format json``."""

    bucket_start: datetime
    granularity: Granularity
    requests: int
    errors: int
    spec_requests: int = Field(description="requests with speculation on")
    drafting_requests: int = Field(description="requests that drafted anything")
    drafted_tokens: int
    accepted_tokens: int
    verify_steps: int
    output_tokens: int
    acceptance_rate: float | None = Field(
        description="accepted / drafted tokens; null when nothing was drafted (never 0)")
    mean_accepted_length: float | None = Field(
        description="1 + accepted / verify_steps; null without verification steps")
    # Task outcome and cost (telemetry v1.1, docs/outcome-and-cost.md)
    successes: int = Field(description="successful tasks: outcome.ok where the request "
                           "reports it, else status ok")
    outcome_ok_reported: int = Field(description="requests reporting outcome.ok")
    outcome_ok_true: int = Field(description="of those, outcome.ok true")
    schema_valid_reported: int = Field(description="requests reporting outcome.schema_valid")
    schema_valid_true: int
    tool_calls_valid_reported: int = Field(
        description="requests reporting outcome.tool_calls_valid")
    tool_calls_valid_true: int
    gpu_reported_requests: int = Field(
        description="requests whose GPU time was reported (the rest are estimated from "
        "e2e_ms, batch_size and cost.gpus_per_replica)")
    gpu_seconds: float = Field(description="GPU-seconds, reported or estimated")
    gpu_seconds_sq: float = Field(description="sum of squared per-request GPU-seconds "
                                  "(for variances)")
    success_gpu_seconds: float = Field(description="GPU-seconds of the successful requests")
    success_rate: float | None = Field(description="successes / requests")
    ok_rate: float | None = Field(
        description="outcome.ok true / reported; null when no request reports it (never 0)")
    schema_valid_rate: float | None = Field(
        description="schema_valid true / reported; null when no request reports it")
    tool_calls_valid_rate: float | None = Field(
        description="tool_calls_valid true / reported; null when no request reports it")
    gpu_seconds_estimated_share: float | None = Field(
        description="share of requests whose GPU time is an estimate")
    gpu_seconds_per_success: float | None = Field(
        description="all GPU-seconds (failed requests included) / successes; null without a "
        "success")
    successes_per_gpu_second: float | None = Field(
        description="successes / GPU-seconds; null without GPU time")
    cost_per_success: float | None = Field(
        description="gpu_seconds_per_success x cost.price_per_gpu_hour / 3600, in the "
        "price's currency; null without a configured price or a success")
    itl_p50_ms: float | None = Field(
        description="median over the requests of their own median inter-token gap, "
        "milliseconds; null when no request reports itl_ms")
    itl_p99_ms: float | None = Field(
        description="p99 over the requests of their own p99 inter-token gap, milliseconds")


class QuantilesOut(BaseModel):
    """Quantiles read from a mergeable log-bucket sketch (1% relative error)."""

    count: int = Field(description="observations in the sketch")
    p50: float | None = Field(description="null when there is no observation")
    p99: float | None
    mean: float | None


class LatencyOut(_Series):
    """Latency and throughput of one series over one bucket (or the whole range)."""

    bucket_start: datetime | None = Field(
        description="null when per_bucket=false: the row covers the whole range")
    granularity: Granularity
    requests: int
    errors: int
    ttft_ms: QuantilesOut = Field(description="time to first token, milliseconds")
    e2e_ms: QuantilesOut = Field(description="end-to-end latency, milliseconds")
    decode_tps: QuantilesOut = Field(description="decode throughput, output tokens per second "
                                     "after the first token")
    itl_p50_ms: QuantilesOut = Field(
        description="the requests' own median inter-token gap (itl_ms.p50), milliseconds: "
        "its p50 over requests is the typical gap")
    itl_p99_ms: QuantilesOut = Field(
        description="the requests' own p99 inter-token gap (itl_ms.p99), milliseconds: its "
        "p99 over requests is the tail")


class BaselineOut(BaseModel):
    """What the segment's detectors compare against."""

    detector: str | None = Field(description="acceptance change-point detector (cusum, ...)")
    phase: str | None = Field(description="warmup, watch or changed")
    acceptance: float | None = Field(description="baseline acceptance rate; null in warm-up")
    current: float | None = Field(description="recent acceptance rate")
    throughput: dict[str, float] | None = Field(
        description="baseline quantiles of batch-normalised decode throughput, keyed by q")


class RecommendationOut(BaseModel):
    """Whether speculation pays on this segment, with the evidence."""

    recommendation: Literal["on", "off", "insufficient_data"]
    cutoff: float | None = Field(description="break-even acceptance rate")
    rate: float | None = Field(description="acceptance rate over the break-even window")
    low: float | None = Field(description="lower end of its 95% interval")
    high: float | None = Field(description="upper end of its 95% interval")
    requests: int | None
    recommended_num_speculative_tokens: int | None = Field(
        description="the draft length that maximises predicted speed (0: off); null with too "
        "little data")


class SegmentOut(BaseModel):
    """A series plus a temperature bucket: the unit within which acceptance is comparable."""

    id: str
    labels: dict[str, str]
    last_event_at: datetime | None
    firing: list[str] = Field(description="rules firing on this segment")
    baseline: BaselineOut | None
    recommendation: RecommendationOut | None = Field(
        description="null when speculation is off on this segment")
    error: str | None = Field(None, description="set when the stored snapshot was unreadable")


class RouteOut(BaseModel):
    route: str
    source: str | None = Field(description="the ingest source whose detector state this is")
    partition: int | None
    firing: list[str] = Field(description="route-level rules firing")
    segments: list[SegmentOut]


class AlertOut(BaseModel):
    """One alert state change (alerts v1)."""

    rule: RuleName
    state: Literal["firing", "resolved"]
    at: datetime
    severity: Literal["critical", "error", "warning", "info"]
    labels: dict[str, str]
    summary: str
    details: dict[str, Any]
    fingerprint: str


class EpisodeOut(BaseModel):
    """One episode of one alert, as the alert lifecycle tracks it."""

    episode: str
    fingerprint: str
    rule: str
    severity: str
    route: str
    labels: dict[str, Any]
    summary: str
    details: dict[str, Any]
    state: Literal["pending", "firing", "resolving", "resolved", "dropped"]
    started_at: datetime
    updated_at: datetime
    resolved_at: datetime | None
    notified: bool
    silenced_by: int | None


class SilenceOut(BaseModel):
    id: int
    route: str = Field(description="route name or glob")
    rule: str | None = Field(description="null: every rule of the route")
    starts_at: datetime
    ends_at: datetime
    reason: str
    created_by: str
    state: Literal["active", "future", "ended"]


class SilenceIn(BaseModel):
    """``specwatch silence add``: give ``duration`` or ``ends_at``."""

    model_config = ConfigDict(extra="forbid")

    route: str = Field(min_length=1, max_length=4096, description="route name or glob (batch-*)")
    rule: RuleName | None = Field(None, description="only this rule (default: every rule)")
    # Any here, read by parse_duration in the endpoint: a union type would report a bad value
    # once per member ('duration.str', 'duration.int', ...) instead of naming the field.
    duration: Any = Field(
        None, description="how long from now (or from starts_at): '2h', '90m', or seconds",
        examples=["2h"],
        json_schema_extra={"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "null"}]})
    ends_at: AwareDatetime | None = Field(None, description="when it ends (RFC 3339)")
    starts_at: AwareDatetime | None = Field(None, description="when it starts (default: now)")
    reason: str = Field(min_length=1, max_length=4096)
    created_by: str | None = Field(None, min_length=1, max_length=255,
                                   description="who (default: api)")

    @field_validator("route", "reason", "created_by")
    @classmethod
    def _encodable(cls, value: str | None) -> str | None:
        # JSON may carry lone surrogates ("\ud800"); no database driver can store them.
        if value is not None:
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("must be valid Unicode (no lone surrogates)") from None
        return value

    @field_validator("created_by")
    @classmethod
    def _fits(cls, value: str | None) -> str | None:
        # The column holds 255 characters as stored: on PostgreSQL NUL takes two.
        if value is not None and len(escape_nul(value)) > 255:
            raise ValueError("too long (at most 255 characters)")
        return value


Verdict = Literal["better", "worse", "same", "insufficient_data"]


class ChangeMetricOut(BaseModel):
    """One metric before and after a change (``monitor/changes``). Acceptance adds
    ``basis`` (``rate``, or ``shared_positions`` when the draft length changed, with
    ``positions``), token counts and ``live``; quantiles their bounds; an undecidable metric
    its ``reason``."""

    model_config = ConfigDict(extra="allow")

    verdict: Verdict
    before: float | None
    after: float | None
    change: float | None = Field(description="after / before - 1 (scale relative), or after "
                                 "- before (scale absolute: the error rate)")
    interval: list[float | None] | None = Field(
        description="95% interval [low, high] of the change; an end is null when unbounded")
    scale: Literal["relative", "absolute"]
    requests_before: int = Field(description="requests that count for this metric, before")
    requests_after: int
    direction_bad: Literal["higher", "lower"]
    critical: bool = Field(description="a critical metric that is worse makes the change worse")
    min_effect: float = Field(description="the smallest change called better or worse")


class ChangeSideOut(BaseModel):
    """The range and series one side of a change was read from."""

    since: datetime
    until: datetime
    series: dict[str, Any]
    buckets: int = Field(description="buckets with traffic of the side's series")
    granularity: Literal["minute", "hour"]


class ChangeOut(BaseModel):
    """A setup change on a route judged against the setup it replaced (``specwatch
    changes --format json``)."""

    change_id: str
    route: str
    temperature: str = Field(description="temperature bucket the change was first seen in")
    at: datetime = Field(description="the new setup's first event on the route")
    kind: str = Field(description="draft_drift, new_draft, draft_length, tokenizer, "
                      "speculation_on, speculation_off, engine or other")
    summary: str
    previous: dict[str, str]
    current: dict[str, str]
    changed: dict[str, list[str]] = Field(description="field -> [old, new]")
    live: dict[str, Any] = Field(description="the live acceptance comparison (state, rates, "
                                 "interval, counts) as detection last recorded it")
    metrics: dict[str, ChangeMetricOut]
    verdict: Verdict
    reason: str
    before: ChangeSideOut
    after: ChangeSideOut


class HealthOut(BaseModel):
    status: Literal["ok"]


class ReadyOut(BaseModel):
    """Readiness; the daemon adds its own status (partitions, caught_up, ...)."""

    model_config = ConfigDict(extra="allow")

    ready: bool
    database: str = Field(description="ok, not_migrated or unreachable")
    reason: str | None = Field(None, description="why not ready")
