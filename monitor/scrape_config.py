"""What ``specwatch scrape`` reads: engine ``/metrics`` endpoints and the route each maps to.

Engines label their spec-decode counters by ``model_name`` (and a data-parallel ``engine``
index), never by route, revision or tokenizer. A target therefore names everything the
metrics do not carry: the route, the model pair and the draft length. One URL may serve
several routes (several served models, or SGLang's per-request custom labels): give one target
per route, each with a ``labels`` selector that picks its series.

It lives beside ``monitor/config.py``, in the config layer, not in ``monitor/scrape/``: the
config reads it, and the config imports nothing above itself (only pydantic and
``monitor.durations`` here).

>>> t = ScrapeTarget(url="http://10.0.0.7:8000/metrics", engine="vllm", route="code",
...                  target_model="llama-3.1-70b", target_revision="2026-10-28",
...                  target_tokenizer="llama3", num_speculative_tokens=5,
...                  labels={"model_name": "llama-3.1-70b"})
>>> t.interval, t.instance_name, len(t.key)
(15.0, '10.0.0.7:8000', 16)
>>> t.model_copy(update={"url": "http://u:secret@[fd00::7]:8000/metrics"}).instance_name
'[fd00::7]:8000'
>>> ScrapeConfig(targets=[t]).targets[0].display_name
'code@10.0.0.7:8000'
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from monitor.durations import Duration

__all__ = ["ENGINES", "ScrapeConfig", "ScrapeTarget"]

ENGINES = ("vllm", "sglang", "trtllm", "llamacpp")

# The telemetry v1 limits (monitor/telemetry/parse.py): an event built from a target that
# breaks them would be rejected by specwatch's own parser.
_Id = Annotated[str, Field(min_length=1, max_length=128)]
_Name = Annotated[str, Field(min_length=1, max_length=256)]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ScrapeTarget(_Frozen):
    """One engine endpoint (one process: a pod URL, not a load-balanced Service, since a
    counter's history is per process) and the route its selected series belong to."""

    url: str
    engine: Literal["vllm", "sglang", "trtllm", "llamacpp"]
    interval: Duration = 15.0
    route: _Id
    target_model: _Name
    target_revision: _Name
    target_tokenizer: _Name
    draft_model: _Name | None = None
    draft_revision: _Name | None = None
    draft_tokenizer: _Name | None = None
    pinned_target_revision: _Name | None = None
    method: _Name | None = None
    num_speculative_tokens: int = Field(ge=1, le=64)
    # Label selector: a series belongs to this target when it has every label given here
    # with exactly this value; the rest (engine index, finished_reason, ...) are summed.
    labels: dict[str, str] = Field(default_factory=dict)
    # Shown in logs and the scraper's own metrics; defaults to "route@host:port".
    name: _Name | None = None
    # The event's `instance`; defaults to the URL's host:port.
    instance: _Name | None = None

    @field_validator("url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        parts = urlsplit(v)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            shown = v.rsplit("@", 1)[-1]  # never the userinfo: it may hold a password
            raise ValueError(
                f"want an http(s) URL such as http://host:8000/metrics, got {shown!r}")
        return v

    @field_validator("interval")
    @classmethod
    def _positive(cls, v: float) -> float:
        if v < 1.0:
            raise ValueError("interval must be at least 1s")
        return v

    @model_validator(mode="after")
    def _draft_complete(self) -> ScrapeTarget:
        # telemetry v1: a `draft` object has model, revision and tokenizer, all three.
        given = [self.draft_model, self.draft_revision, self.draft_tokenizer]
        if any(v is not None for v in given) and any(v is None for v in given):
            raise ValueError("draft_model, draft_revision and draft_tokenizer go together")
        if self.pinned_target_revision is not None and self.draft_model is None:
            raise ValueError("pinned_target_revision needs the draft_* fields")
        return self

    @property
    def instance_name(self) -> str:
        """``instance``, or host:port of the URL (never its user:password part)."""
        if self.instance:
            return self.instance
        parts = urlsplit(self.url)
        host = parts.hostname or ""
        host = f"[{host}]" if ":" in host else host
        return host if parts.port is None else f"{host}:{parts.port}"

    @property
    def display_name(self) -> str:
        return self.name or f"{self.route}@{self.instance_name}"

    @property
    def key(self) -> str:
        """16 hex digits naming this target for good: request ids and saved state use it.

        It covers what decides which counts the target reads and where they go (URL, engine,
        selector, route), not the descriptive fields, so renaming a target keeps its ids.
        """
        selector = ",".join(f"{k}={v}" for k, v in sorted(self.labels.items()))
        text = "\x1f".join((self.url, self.engine, selector, self.route))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


class ScrapeConfig(_Frozen):
    """The ``scrape`` section: targets, where events go, and how patient a fetch is."""

    targets: tuple[ScrapeTarget, ...] = ()
    # Kafka topic for the events; unset means the daemon's own `kafka.topic`.
    topic: str | None = None
    timeout: Duration = 5.0
    # Baselines, the interval in progress and unsent events survive a restart here, so a
    # restarted scraper neither loses an interval nor (thanks to deterministic request ids)
    # counts one twice. Unset: a restart begins with a baseline-only scrape.
    state_path: str | None = None

    @field_validator("timeout")
    @classmethod
    def _timeout_positive(cls, v: float) -> float:
        if v <= 0:
            raise ValueError("timeout must be > 0")
        return v

    @model_validator(mode="after")
    def _targets_distinct(self) -> ScrapeConfig:
        seen: dict[str, int] = {}
        for i, t in enumerate(self.targets):
            if t.key in seen:
                raise ValueError(
                    f"targets {seen[t.key]} and {i} read the same series (same url, engine, "
                    "labels and route): every count would be sent twice"
                )
            seen[t.key] = i
        names = [t.display_name for t in self.targets]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"target names must be unique: {', '.join(dupes)}")
        return self
