"""The frozen configuration of a specwatch process: one file plus environment overrides.

A file is YAML (``.yaml``/``.yml``) or TOML (``.toml``). Unknown keys and bad values are
rejected at start with the key path in the message, e.g.
``config error at ingest.allowed_lateness: invalid duration '5 parsecs'``. Secrets and URLs
come from the environment so the file can be checked in:

==============================  ===========================
``SPECWATCH_DB_URL``            ``store.url``
``SPECWATCH_KAFKA_BOOTSTRAP``   ``kafka.bootstrap_servers``
==============================  ===========================

>>> cfg = load_config(None, env={})
>>> cfg.ingest.allowed_lateness
120.0
>>> cfg.store.url
'sqlite:///specwatch.db'
"""

from __future__ import annotations

import fnmatch
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from monitor import rules as rules_catalogue
from monitor.config_env import DEFAULT_STORE_URL, ENV_OVERRIDES
from monitor.durations import Duration, parse_duration
from monitor.exceptions import ConfigError
from monitor.schedule import JobsConfig
from monitor.scrape_config import ScrapeConfig

__all__ = [
    "AlertingConfig",
    "Config",
    "CostModelConfig",
    "DetectionConfig",
    "Duration",
    "Frozen",
    "IngestConfig",
    "JobsConfig",
    "KafkaConfig",
    "LifecycleConfig",
    "ScrapeConfig",
    "StoreConfig",
    "format_errors",
    "load_config",
    "parse_duration",
    "read_mapping",
]


class Frozen(BaseModel):
    """A config section: unknown keys are errors, and nothing changes it once read."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class KafkaConfig(Frozen):
    bootstrap_servers: str = "127.0.0.1:9092"
    topic: str = "specwatch.telemetry"
    dead_letter_topic: str = "specwatch.telemetry.dlq"
    group_id: str = "specwatch"
    client_id: str = "specwatch"
    auto_offset_reset: Literal["earliest", "latest"] = "earliest"
    create_topics: bool = True
    partitions: int = Field(4, ge=1, le=1024)
    # Short group timings: the Tansu broker otherwise takes ~23 s to hand out partitions.
    session_timeout_ms: int = Field(10000, ge=1000)
    heartbeat_interval_ms: int = Field(1000, ge=100)
    max_poll_interval_ms: int = Field(60000, ge=1000)
    max_poll_records: int = Field(5000, ge=1)
    fetch_max_bytes: int = Field(52428800, ge=1024)
    dead_letter_max_bytes: int = Field(
        262144, ge=1024, description="raw bytes kept in a dead-letter record; the rest is "
        "referenced by topic/partition/offset and sha256"
    )


class StoreConfig(Frozen):
    url: str = DEFAULT_STORE_URL
    retention_minute: Duration = 7 * 86400.0
    retention_hour: Duration = 90 * 86400.0
    retention_day: Duration = 730 * 86400.0

    def __repr_args__(self) -> Any:
        # repr() and str() of a config end up in logs and tracebacks: never the password.
        from monitor.store.db import redact_url

        for name, value in super().__repr_args__():
            yield name, redact_url(value) if name == "url" else value


class IngestConfig(Frozen):
    max_message_bytes: int = Field(1048576, ge=1024)
    allowed_lateness: Duration = 120.0
    # Late events count in the tables up to this (their ids are remembered that long);
    # the detectors take them only within allowed_lateness.
    dedup_horizon: Duration = 900.0
    checkpoint_interval: Duration = 2.0
    checkpoint_max_events: int = Field(50000, ge=1)
    # After a checkpoint that took d seconds the next waits at least factor x d (at most
    # checkpoint_max_pause), so slow checkpoints (a backlog over thousands of series, a slow
    # database) take at most 1 / (1 + factor) of the time and each series' rows are written
    # once per pause instead of once per interval: Flink's minimum pause between
    # checkpoints, scaled by what the last one cost. A consumer with nothing left to read
    # checkpoints at once.
    checkpoint_pause_factor: float = Field(4.0, ge=0.0)
    checkpoint_max_pause: Duration = 20.0
    # Cardinality guard (monitor/aggregate/guard.py): series beyond these caps are counted in
    # an overflow series of their route (or an overflow route), so memory stays bounded.
    max_series_per_route: int = Field(256, ge=1)
    max_series: int = Field(20000, ge=1)
    # An event dated more than this ahead of the clock (the wall clock; in a replay the
    # newest plausible time of the file, see monitor/eventtime.py) is dead-lettered as future.
    max_future_skew: Duration = Field(300.0, gt=0)

    @model_validator(mode="after")
    def _horizon_covers_lateness(self) -> IngestConfig:
        # A duplicate is only guaranteed to be caught while its request_id is remembered;
        # anything older than the lateness allowance is dropped as late anyway.
        if self.dedup_horizon < self.allowed_lateness:
            raise ValueError("dedup_horizon must be >= allowed_lateness")
        return self


class CostModelConfig(Frozen):
    """Costs of one model pair: ``c`` per drafted token and ``v`` per extra verified token,
    both in target decode steps (see docs/breakeven.md). Matches on model names; ``*`` is
    any."""

    target_model: str = "*"
    draft_model: str = "*"
    c: float = Field(ge=0.0, lt=1.0)
    v: float = Field(0.0, ge=0.0, lt=1.0)
    # Verification cost by running batch size: {lower batch size: v}, piecewise constant
    # upwards (``{1: 0.0, 32: 0.05, 128: 0.2}``); ``v`` where empty. Used by
    # ``specwatch policy`` where no measurement of a batch bucket exists.
    v_by_batch: dict[int, float] = {}

    @field_validator("v_by_batch")
    @classmethod
    def _v_by_batch(cls, v: dict[int, float]) -> dict[int, float]:
        for size, cost in v.items():
            if size < 1 or not 0 <= cost < 1:
                raise ValueError(f"v_by_batch maps batch sizes >= 1 to costs in [0, 1), got "
                                 f"{size}: {cost}")
        return dict(sorted(v.items()))

    def v_at(self, batch_size: int) -> float:
        """The verification cost at ``batch_size`` (``v`` below the first entry)."""
        out = self.v
        for size, cost in self.v_by_batch.items():
            if batch_size >= size:
                out = cost
        return out


class DetectionConfig(Frozen):
    # Off: ingest and rollups only (a backfill of history, or an ingest-only replica).
    enabled: bool = True
    detector: Literal["cusum", "adwin", "page_hinkley"] = "cusum"
    false_alarm_days: float = Field(30.0, gt=0)
    min_effect: float = Field(0.05, gt=0, lt=1)
    # Sampling temperature changes acceptance on its own: requests are split at these edges.
    temperature_edges: tuple[float, ...] = (0.0, 0.5, 1.0)
    breakeven_cutoff: float = Field(0.40, ge=0, lt=1)
    breakeven_window: Duration = 1800.0
    cost_models: tuple[CostModelConfig, ...] = ()
    throughput_min_effect: float = Field(0.15, gt=0, lt=1)
    contention_share: float = Field(0.05, gt=0, le=1)
    stale_after: Duration = 600.0
    inactive_window: Duration = 600.0
    inactive_min_requests: int = Field(20, ge=1)  # a quiet route proves nothing
    idle_pair_resolve: Duration = 1800.0
    # After a change on a route, how long the new setup is compared live with the one it
    # replaced (unless decided sooner), and how far each side reaches in the change report.
    change_window: Duration = 21600.0
    # A setup unseen on its route this long, coming back, is a change (a rollback).
    change_return_after: Duration = 3600.0
    # Losslessness (rule output_mismatch): greedy outputs remembered per prompt hash this
    # long, at most this many prompts per route (stored with the detector state, about 140
    # bytes each, rewritten at each checkpoint that changed them); resolved after this many
    # matched pairs agree. A shadow pair arrives seconds apart: an hour is ample.
    lossless_horizon: Duration = 3600.0
    lossless_max_prompts: int = Field(10_000, ge=1)
    lossless_resolve_pairs: int = Field(20, ge=1)


class CostConfig(Frozen):
    """What a GPU-second costs, and how one is estimated where a request does not report it
    (``e2e_ms / 1000 x gpus_per_replica / batch_size``)."""

    gpus_per_replica: float = Field(1.0, gt=0)
    # Unset: GPU-seconds are still counted, cost per successful task is not given.
    price_per_gpu_hour: float | None = Field(None, ge=0)


class LatencyClassConfig(Frozen):
    """A promised latency class: on these routes the candidate must improve ``metric``."""

    routes: tuple[str, ...] = Field(min_length=1)  # glob patterns
    metric: Literal["ttft_p99", "e2e_p99", "itl_p99", "e2e_p50", "ttft_p50", "itl_p50"] = "e2e_p99"


class GateConfig(Frozen):
    """The release gate (``specwatch gate``, docs/gate.md)."""

    # Always-valid level: the chance that a gate polled any number of times ever fails a
    # candidate that is no worse (and ever passes one that is) stays below this.
    alpha: float = Field(0.05, gt=0, lt=0.5)
    # A route with at least this share of the requests must not regress on a critical metric.
    min_route_share: float = Field(0.05, ge=0, le=1)
    # Falls smaller than these are no regression (relative for rates and latency, absolute
    # for outcome and error rates).
    efficiency_tolerance: float = Field(0.02, ge=0, lt=1)
    p99_tolerance: float = Field(0.10, ge=0)
    rate_tolerance: float = Field(0.01, ge=0, lt=1)
    latency_classes: tuple[LatencyClassConfig, ...] = ()


class PolicyConfig(Frozen):
    """Where to speculate and how far (``specwatch policy``, docs/policy.md): the slices the
    pipeline records, and how a policy is judged."""

    # Off: no slice rollups are written (the policy command then has nothing to learn from).
    enabled: bool = True
    # Bucket lower edges of the pre-request signals a policy may slice by.
    batch_edges: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)
    prompt_edges: tuple[int, ...] = (0, 256, 1024, 4096, 16384)
    temperature_edges: tuple[float, ...] = (0.0, 0.01, 0.5, 1.0)
    # Tag keys recorded as slices (None: every tag but ``shadow``); at most this many distinct
    # tag combinations per route, later ones pooled as ``*``.
    tag_keys: tuple[str, ...] | None = None
    max_tag_slices_per_route: int = Field(64, ge=1)
    # A slice with fewer requests (training window) keeps its route's setting.
    min_requests: int = Field(200, ge=1)
    # A draft length is chosen over a shorter one (or over no speculation) only when its
    # predicted speedup is higher by at least this much (relative): below, the cheaper one.
    min_gain: float = Field(0.02, ge=0, lt=1)
    # Confidence of the intervals (acceptance moved, goodput against the alternatives).
    confidence: float = Field(0.90, gt=0.5, lt=1)
    # Held-out share of the window when --holdout-until/--train-until are not given.
    holdout_share: float = Field(1 / 3, gt=0, lt=1)

    @field_validator("batch_edges", "prompt_edges", "temperature_edges")
    @classmethod
    def _ascending(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        if not v or list(v) != sorted(set(v)):
            raise ValueError("bucket edges must be ascending and distinct")
        return v

    @field_validator("batch_edges")
    @classmethod
    def _batch_from_one(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if v[0] != 1:
            raise ValueError("batch_edges must start at 1 (the smallest batch)")
        return v


SinkName = Literal["slack", "pagerduty", "alertmanager", "webhook", "log"]
SINK_NAMES: tuple[str, ...] = ("slack", "pagerduty", "alertmanager", "webhook", "log")
RULE_NAMES: tuple[str, ...] = rules_catalogue.names()
Severity = Literal["critical", "error", "warning", "info"]


def _known_rules(rules: Any) -> Any:
    known = rules_catalogue.names()  # at call time: the catalogue is the one list of rules
    for rule in rules:
        if rule not in known:
            raise ValueError(f"unknown rule {rule!r} (known: {', '.join(known)})")
    return rules


class RuleTimingConfig(Frozen):
    """Per-rule overrides of the lifecycle timings (unset: the lifecycle default)."""

    min_firing: Duration | None = None
    keep_firing_for: Duration | None = None
    repeat_interval: Duration | None = None


class LifecycleConfig(Frozen):
    """How condition changes become notifications (see ``alerts/lifecycle.py``).

    ``min_firing``: a condition must hold this long (event time) before anyone is told;
    one that clears sooner is never sent. ``keep_firing_for``: a cleared condition is only
    announced resolved after staying clear this long; firing again within it continues the
    same episode (the anti-flap hysteresis). ``group_wait``/``group_interval``: a group's
    first notification waits for companions this long; later changes of a group with
    alerts out are batched this often. ``repeat_interval``: reminders while still firing.
    """

    group_by: tuple[str, ...] = ("route",)
    group_wait: Duration = 30.0
    group_interval: Duration = 300.0
    repeat_interval: Duration = 4 * 3600.0
    min_firing: Duration = 0.0
    keep_firing_for: Duration = 600.0
    rules: dict[str, RuleTimingConfig] = Field(default_factory=dict)

    @field_validator("rules")
    @classmethod
    def _rules_known(cls, v: dict[str, RuleTimingConfig]) -> dict[str, RuleTimingConfig]:
        return _known_rules(v)  # type: ignore[no-any-return]

    @field_validator("group_by")
    @classmethod
    def _route_in_group(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if "route" not in v:
            raise ValueError("group_by must include 'route'")
        return v

    def timing(self, rule: str) -> tuple[float, float, float]:
        """(min_firing, keep_firing_for, repeat_interval) in force for ``rule``.

        >>> LifecycleConfig(rules={"telemetry_stale": {"min_firing": 60}}).timing("telemetry_stale")
        (60.0, 600.0, 14400.0)
        >>> LifecycleConfig().timing("telemetry_stale")
        (0.0, 600.0, 14400.0)
        """
        o = self.rules.get(rule)
        if o is None:
            # Asked for every open alert whenever the lifecycle looks for a due timer (once
            # per condition change): no model built per call.
            return self.min_firing, self.keep_firing_for, self.repeat_interval
        return (
            self.min_firing if o.min_firing is None else o.min_firing,
            self.keep_firing_for if o.keep_firing_for is None else o.keep_firing_for,
            self.repeat_interval if o.repeat_interval is None else o.repeat_interval,
        )


class SinkFilter(Frozen):
    """Which alerts one sink receives: empty ``rules``/``severities`` mean all."""

    enabled: bool = True
    rules: tuple[str, ...] = ()
    severities: tuple[Severity, ...] = ()

    @field_validator("rules")
    @classmethod
    def _rules_known(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return _known_rules(v)  # type: ignore[no-any-return]

    def admits(self, rule: str, severity: str) -> bool:
        return (self.enabled and (not self.rules or rule in self.rules)
                and (not self.severities or severity in self.severities))


class RouteOverride(Frozen):
    """Filters that replace the defaults for routes matching ``routes`` (globs)."""

    routes: tuple[str, ...] = Field(min_length=1)
    routing: dict[SinkName, SinkFilter]


class SlackConfig(Frozen):
    min_interval: Duration = 1.0


class PagerDutyConfig(Frozen):
    source: str = "specwatch"
    # Rules announced as change events (no page), e.g. a model revision that moved.
    change_event_rules: tuple[str, ...] = ("revision_mismatch",)
    severity_map: dict[Severity, Severity] = Field(default_factory=dict)
    min_interval: Duration = 0.5  # PagerDuty allows ~120 events/min per integration key

    @field_validator("change_event_rules")
    @classmethod
    def _rules_known(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return _known_rules(v)  # type: ignore[no-any-return]


class AlertmanagerConfig(Frozen):
    resend_interval: Duration = 60.0
    firing_ttl: Duration = 240.0  # endsAt = now + this on every post of a firing alert
    resolved_resend_for: Duration = 300.0
    generator_url: str = "http://specwatch/"


class DeliveryConfig(Frozen):
    timeout: Duration = 10.0
    backoff_initial: Duration = 1.0
    backoff_max: Duration = 60.0
    give_up_after: Duration = 7 * 86400.0
    poll_interval: Duration = 1.0
    lease: Duration = 30.0  # one daemon delivers a sink's queue at a time


class AlertingConfig(Frozen):
    """The alert lifecycle, sink routing and delivery. Sink URLs and keys come only from the
    environment (``SPECWATCH_SLACK_WEBHOOK_URL`` etc.); each set one enables its sink."""

    lifecycle: LifecycleConfig = LifecycleConfig()
    routing: dict[SinkName, SinkFilter] = Field(default_factory=dict)
    route_overrides: tuple[RouteOverride, ...] = ()
    slack: SlackConfig = SlackConfig()
    pagerduty: PagerDutyConfig = PagerDutyConfig()
    alertmanager: AlertmanagerConfig = AlertmanagerConfig()
    delivery: DeliveryConfig = DeliveryConfig()

    def filter_for(self, sink: str, route: str) -> SinkFilter:
        """The filter of ``sink`` for ``route``: the first matching override, else the
        default (a sink named nowhere receives everything)."""
        for o in self.route_overrides:
            if sink in o.routing and any(fnmatch.fnmatchcase(route, g) for g in o.routes):
                return o.routing[sink]  # type: ignore[index]
        return self.routing.get(sink, _ALL)  # type: ignore[call-overload]


_ALL = SinkFilter()


class ExpositionConfig(Frozen):
    # Segments exported at most, the most recently active: a scrape stays bounded.
    max_series: int = Field(1000, ge=0)


class Config(Frozen):
    kafka: KafkaConfig = KafkaConfig()
    store: StoreConfig = StoreConfig()
    ingest: IngestConfig = IngestConfig()
    detection: DetectionConfig = DetectionConfig()
    cost: CostConfig = CostConfig()
    gate: GateConfig = GateConfig()
    policy: PolicyConfig = PolicyConfig()
    alerting: AlertingConfig = AlertingConfig()
    exposition: ExpositionConfig = ExpositionConfig()
    scrape: ScrapeConfig = ScrapeConfig()
    jobs: JobsConfig = JobsConfig()
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    @property
    def retention(self) -> dict[str, float]:
        s = self.store
        return {"minute": s.retention_minute, "hour": s.retention_hour, "day": s.retention_day}


def read_mapping(path: Path, what: str = "config file") -> dict[str, Any]:
    """The mapping a YAML (or ``.toml``) file holds, ``{}`` for an empty one; ``ConfigError``
    naming ``what`` and ``path`` when it cannot be read or holds something else."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read {what} {path}: {e.strerror or e}") from None
    if path.suffix == ".toml":
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"cannot parse {what} {path}: {e}") from None
    else:
        # Imported here: PyYAML costs ~0.05 s and most commands run without a config file.
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise ConfigError(f"cannot parse {what} {path}: {e}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{what} {path} must hold a mapping at the top level")
    return data


def format_errors(e: ValidationError, what: str = "config", source: str | None = None) -> str:
    """One line per error of ``e``: ``{what} error at key.path: message`` (`` (source)``)."""
    lines = []
    for err in e.errors():
        path = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        lines.append(f"{what} error at {path}: {msg}" + (f" ({source})" if source else ""))
    return "\n".join(lines)


def load_config(
    path: str | Path | None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> Config:
    """Read ``path`` (or defaults when ``None``), then environment, then ``overrides``."""
    data: dict[str, Any] = read_mapping(Path(path)) if path is not None else {}
    env = os.environ if env is None else env
    for var, (section, key) in ENV_OVERRIDES.items():
        if env.get(var):
            sect = data.setdefault(section, {})
            if isinstance(sect, dict):
                sect[key] = env[var]
    for section, values in (overrides or {}).items():
        sect = data.setdefault(section, {})
        if isinstance(sect, dict):
            sect.update({k: v for k, v in values.items() if v is not None})
    try:
        return Config.model_validate(data)
    except ValidationError as e:
        raise ConfigError(format_errors(e)) from None
