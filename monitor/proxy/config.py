"""What ``specwatch proxy`` knows that engine responses do not say: the upstream, the model
metadata of each served model, and how a request's route is found.

A YAML file (``--metadata FILE``), every key optional but ``models``::

    upstream: http://127.0.0.1:8080      # or --upstream
    engine: llamacpp                     # auto | llamacpp | vllm | sglang | trtllm
    instance: pod-3                      # the events' `instance`
    request_id_prefix: "pod-3/"          # engine ids are unique per process at best
    shadow_upstream: http://127.0.0.1:8081   # or --shadow-upstream: the same model, no speculation
    shadow_rate: 0.01                    # or --shadow-rate: share of greedy requests shadowed
    shadow_max_in_flight: 4              # more shadow requests at once are dropped, counted
    routes:
      header: X-Route                    # or --route-header; first rule that answers wins
      paths: {/code/: code-assistant}    # path prefix -> route (longest prefix wins)
      models: {qwen-coder: code-assistant}  # the request's `model` -> route
      default: chat                      # or --default-route
    models:                              # keyed by the request's `model`; "*" for any other
      "*":
        target: {model: qwen2.5-coder-1.5b, revision: "sha256:cc32...", tokenizer: qwen2}
        draft: {model: qwen2.5-coder-0.5b, revision: "sha256:1d96...", tokenizer: qwen2}
        spec: {method: draft_model, num_speculative_tokens: 3, params: {spec_type: draft-simple}}

A model without ``spec`` does not speculate: its events carry no ``spec`` block. A model with
``spec`` does, so a response that shows no drafting gets ``drafted_tokens: 0`` where the
engine documents that absence means "nothing drafted" (llama.cpp without ``timings.draft_n``,
SGLang ``meta_info`` without spec fields, TensorRT-LLM without ``speculative_decoding``);
that is how a silently disabled draft model becomes visible to ``speculation_inactive``.

>>> cfg = ProxyConfig(upstream="http://127.0.0.1:8080", routes={"default": "chat"},
...                   models={"*": {"target": {"model": "m", "revision": "1", "tokenizer": "t"},
...                                 "spec": {"num_speculative_tokens": 3}}})
>>> cfg.model_meta("anything").spec.num_speculative_tokens, cfg.routes.route(None, "/", None)
(3, 'chat')
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import date
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BeforeValidator, Field, ValidationError, field_validator, model_validator

from monitor.config import Duration, Frozen, format_errors, read_mapping
from monitor.exceptions import ConfigError

__all__ = [
    "ENGINES",
    "DraftMeta",
    "ModelMeta",
    "ProxyConfig",
    "Routes",
    "SpecMeta",
    "TargetMeta",
    "load_proxy_config",
]

ENGINES = ("auto", "llamacpp", "vllm", "sglang", "trtllm")
ANY_MODEL = "*"

def _date_text(value: object) -> object:
    # YAML reads an unquoted 2026-10-28 as a date; a revision is meant
    return value.isoformat() if isinstance(value, date) else value


# The telemetry v1 limits (monitor/telemetry/parse.py): metadata that breaks them would make
# every event of the model invalid.
_Id = Annotated[str, Field(min_length=1, max_length=128)]
_Name = Annotated[str, BeforeValidator(_date_text), Field(min_length=1, max_length=256)]
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+").fullmatch  # an HTTP header name


class TargetMeta(Frozen):
    model: _Name
    revision: _Name
    tokenizer: _Name


class DraftMeta(Frozen):
    model: _Name
    revision: _Name
    tokenizer: _Name
    pinned_target_revision: _Name | None = None


class SpecMeta(Frozen):
    """The drafting settings in force: draft length, method and free-form parameters."""

    num_speculative_tokens: int = Field(ge=1, le=64)
    method: _Name | None = None
    params: dict[str, Any] = Field(default_factory=dict)


class ModelMeta(Frozen):
    target: TargetMeta
    draft: DraftMeta | None = None
    spec: SpecMeta | None = None

    @model_validator(mode="after")
    def _draft_needs_spec(self) -> ModelMeta:
        if self.draft is not None and self.spec is None:
            raise ValueError("a draft model speculates: give spec.num_speculative_tokens too")
        return self


class Routes(Frozen):
    """How a request's route is found: header, then path prefix, then model, then default."""

    header: str | None = "X-Route"
    paths: dict[str, _Id] = Field(default_factory=dict)
    models: dict[str, _Id] = Field(default_factory=dict)
    default: _Id | None = None

    @field_validator("header")
    @classmethod
    def _header_name(cls, v: str | None) -> str | None:
        if v is not None and not _TOKEN(v):
            raise ValueError(f"not an HTTP header name: {v!r}")
        return v

    @field_validator("paths")
    @classmethod
    def _prefixes(cls, v: dict[str, str]) -> dict[str, str]:
        for prefix in v:
            if not prefix.startswith("/"):
                raise ValueError(f"path prefix {prefix!r} must start with /")
        # longest first, so the most specific prefix wins
        return dict(sorted(v.items(), key=lambda kv: -len(kv[0])))

    def route(self, header_value: str | None, path: str, model: str | None) -> str | None:
        """The route of one request, or None when no rule answers.

        >>> r = Routes(paths={"/a/": "A", "/a/b/": "AB"}, models={"m": "M"}, default="D")
        >>> [r.route("H", "/a/b/x", "m"), r.route(None, "/a/b/x", "m"),
        ...  r.route(None, "/a/x", None), r.route(None, "/x", "m"), r.route(None, "/x", "n")]
        ['H', 'AB', 'A', 'M', 'D']
        """
        if header_value:
            return header_value
        for prefix, route in self.paths.items():
            if path.startswith(prefix):
                return route
        if model is not None:
            route = self.models.get(model)
            if route is not None:
                return route
        return self.default


class ProxyConfig(Frozen):
    upstream: str
    engine: Literal["auto", "llamacpp", "vllm", "sglang", "trtllm"] = "auto"
    listen: str = "127.0.0.1:8090"
    instance: _Name | None = None
    request_id_prefix: str = Field("", max_length=64)
    routes: Routes = Routes()
    models: dict[str, ModelMeta] = Field(default_factory=dict)
    connect_timeout: Duration = 5.0
    # Time allowed between two reads from the upstream: a long generation streams, a
    # non-streamed one sends nothing until it is done.
    read_timeout: Duration = 600.0
    # A non-streamed response body above this is passed on but not read for counters.
    max_response_bytes: int = Field(16 << 20, ge=1024)
    # Losslessness: greedy requests also sent to this non-speculative upstream, in the
    # background (monitor.proxy.shadow).
    shadow_upstream: str | None = None
    shadow_rate: float = Field(0.01, ge=0.0, le=1.0)
    shadow_max_in_flight: int = Field(4, ge=1, le=1024)

    @field_validator("upstream", "shadow_upstream")
    @classmethod
    def _http_url(cls, v: str | None) -> str | None:
        if v is None:
            return None
        parts = urlsplit(v)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"want an http(s) URL such as http://127.0.0.1:8080, got {v!r}")
        if parts.query or parts.fragment:
            raise ValueError(f"the upstream URL takes no query or fragment: {v!r}")
        return v.rstrip("/")

    @field_validator("connect_timeout", "read_timeout")
    @classmethod
    def _positive(cls, v: float) -> float:
        if v <= 0:
            raise ValueError("must be > 0")
        return v

    def model_meta(self, served: str | None) -> ModelMeta | None:
        """Metadata of the served model ``served``, else of ``*``, else None."""
        if served is not None:
            meta = self.models.get(served)
            if meta is not None:
                return meta
        return self.models.get(ANY_MODEL)


def load_proxy_config(
    path: str | Path | None, overrides: Mapping[str, Any] | None = None
) -> ProxyConfig:
    """The file at ``path`` (None: nothing) with ``overrides`` laid over it; ``routes.*``
    keys in ``overrides`` are dotted (``{"routes.header": "X-Tenant"}``); None values are
    ignored. Errors name the key path."""
    data: dict[str, Any] = {}
    source = "command line"
    if path is not None:
        source = str(path)
        data = read_mapping(Path(path), "proxy config")
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        section, dot, name = key.partition(".")
        if dot:
            sect = data.setdefault(section, {})
            if isinstance(sect, dict):
                sect[name] = value
        else:
            data[key] = value
    if "upstream" not in data:
        raise ConfigError("proxy config: no upstream (give --upstream URL or `upstream:`)")
    try:
        return ProxyConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(format_errors(e, "proxy config", source)) from None
