"""Recorded real-engine requests (flat records) -> telemetry v1.

``shared/data/real-engine-events.jsonl`` holds one flat record per request from real
llama.cpp, transformers and llama-cpp-python runs on the CPU (reference
``real-engines-on-cpu.md``)::

    {"runtime": "llama.cpp llama-server (...)", "run": "run-qwen15/draft-simple",
     "route": "code", "target_model": "...", "target_revision": "sha256:...",
     "draft_model": "..." | null, "draft_revision": ..., "tokenizer_id": "gguf:...",
     "draft_tokenizer_id": "gguf:...", "spec_type": "draft-simple", "spec_params": {...},
     "drafted_tokens": 57, "accepted_tokens": 44, "output_tokens": 64, "prompt_tokens": 77,
     "latency_s": 9.041, "generation_ms": 6099.2, "verify_steps": 38}

It is its own shape, not a llama-server response (three runtimes wrote it, and it carries the
model metadata an engine response lacks), hence its own ``--from record``. The record's own
values win; flags and the mapping (keyed by ``target_model``) fill in only what it lacks.

- ``route`` is ``<run>/<route>``: a run is one server configuration, i.e. one deployment.
  Route-wide rules (``speculation_inactive``, metadata consistency) and the acceptance
  baseline must not mix two deployments, and two runs can share a model pair, method and
  draft length (SmolLM2 prompt lookup in transformers and in llama-cpp-python), which would
  otherwise be one series.
- ``spec_type`` -> ``spec.method`` and the draft length, from ``spec_params`` or the
  runtime's documented default (table ``SPEC_TYPES``). ``spec.params`` keeps ``spec_type``
  and ``spec_params`` as recorded. ``drafted_tokens == 0`` stays 0: no acceptance rate.
- ``request_id`` is the record's ``request_id``, else ``rec-`` and a digest of the record.
- ``ts`` is the record's ``ts``; records without one (the recorded file) are laid out back to
  back, as the runs sent them: within one adapt run (one ``Defaults`` object), the first
  finishes ``latency_s`` after the adapt time (or ``--default-ts``), each next one
  ``latency_s`` after the previous one. Such events carry an ``adapter_note``.
- ``e2e_ms = latency_s * 1000``; ``ttft_ms = e2e_ms - generation_ms`` where ``generation_ms``
  is recorded (llama-server's ``predicted_ms``), so decode throughput is the engine's own.
- ``engine`` is ``llamacpp``, ``transformers`` or ``llama-cpp-python`` by ``runtime``;
  ``record`` (an extension field) keeps ``run``, ``route`` and ``runtime`` as recorded.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import orjson

from monitor.adapters.common import (
    NOTE_KEY,
    AdapterError,
    SpecCounts,
    build_event,
    need_int,
    need_number,
    opt_dict,
    opt_int,
    opt_number,
    opt_str,
    status_of,
)
from monitor.adapters.defaults import Defaults

__all__ = ["ENGINE", "SPEC_TYPES", "SpecType", "to_event"]

ENGINE = "record"


@dataclass(frozen=True, slots=True)
class SpecType:
    """How one recorded ``spec_type`` drafts: the telemetry method, the ``spec_params`` keys
    that hold the draft length, and the runtime's default when none of them is recorded."""

    method: str
    length_keys: tuple[str, ...]
    default_length: int | None


SPEC_TYPES: dict[str, SpecType] = {
    # llama-server --spec-draft-n-max, 3 by default (reference "Runtimes and versions")
    "draft-simple": SpecType("draft_model", ("spec_draft_n_max",), 3),
    # llama-server --spec-ngram-simple-size-m: tokens drafted per lookup, 48 by default
    "ngram-simple": SpecType("ngram", ("size_m",), 48),
    # transformers prompt_lookup_num_tokens / llama-cpp-python num_pred_tokens: no default
    "prompt-lookup": SpecType("ngram", ("prompt_lookup_num_tokens", "num_pred_tokens"), None),
    # transformers assisted generation: GenerationConfig.num_assistant_tokens, 20 by default
    "assistant-model": SpecType("draft_model", ("num_assistant_tokens",), 20),
    "assistant-model-different-tokenizer (UAD)": SpecType(
        "draft_model", ("num_assistant_tokens",), 20),
    # assistant_early_exit: the target's first layers draft, with the same 20-token budget
    "early-exit self-speculation": SpecType("early_exit", ("num_assistant_tokens",), 20),
}
_OFF = ("", "none")
_RUNTIMES = (("llama.cpp", "llamacpp"), ("llama-cpp-python", "llama-cpp-python"),
             ("transformers", "transformers"))


class _Timeline:
    """Finish times for records without ``ts``: back to back within one adapt run.

    The driver calls an adapter once per record with the same ``Defaults`` object for the
    whole run, so a new object is a new run whose timeline starts at its ``clock()``.
    """

    def __init__(self) -> None:
        self._owner: Defaults | None = None
        self._end = 0.0

    def finish(self, defaults: Defaults, latency_s: float) -> float:
        if self._owner is not defaults:
            self._owner = defaults
            self._end = defaults.clock()
        self._end += latency_s
        return self._end


_TIMELINE = _Timeline()


def to_event(raw: dict[str, Any], defaults: Defaults) -> dict[str, Any]:
    """One recorded request as an event."""
    if not isinstance(raw, dict):
        raise AdapterError("a recorded request must be a JSON object")
    if "drafted_tokens" not in raw or "latency_s" not in raw:
        raise AdapterError("not a recorded request (want runtime, run, route, target_model, "
                           "drafted_tokens, accepted_tokens, output_tokens, latency_s, ...)")
    target = opt_str(raw, "target_model")
    d = defaults.for_model(target)
    run = opt_str(raw, "run")
    route = opt_str(raw, "route") or d.route
    if route is not None and run is not None:
        route = f"{run}/{route}"
    draft = opt_str(raw, "draft_model")
    spec_type = opt_str(raw, "spec_type") or ""
    params = opt_dict(raw, "spec_params") or {}
    speculating = spec_type.lower() not in _OFF
    kind = SPEC_TYPES.get(spec_type)
    d = replace(
        d, route=route,
        target_model=target or d.target_model,
        target_revision=opt_str(raw, "target_revision") or d.target_revision,
        target_tokenizer=opt_str(raw, "tokenizer_id") or d.target_tokenizer,
        draft_model=draft if speculating else None,
        draft_revision=opt_str(raw, "draft_revision") or d.draft_revision,
        draft_tokenizer=opt_str(raw, "draft_tokenizer_id") or d.draft_tokenizer,
        method=kind.method if kind is not None else d.method,
    )  # fmt: skip

    latency_s = need_number(raw, "latency_s")
    e2e_ms = latency_s * 1000.0
    generation_ms = opt_number(raw, "generation_ms")
    if generation_ms is not None and generation_ms > e2e_ms:
        raise AdapterError(f"generation_ms: {generation_ms!r} is longer than latency_s "
                           f"{latency_s!r}")
    ts, note = _ts(raw, defaults, latency_s)  # the run's own Defaults: its timeline
    event = build_event(
        engine=_engine(opt_str(raw, "runtime")), defaults=d,
        request_id=_request_id(raw), ts=ts, ts_note="",
        status=status_of(raw["status"], "status") if raw.get("status") is not None else "ok",
        output_tokens=need_int(raw, "output_tokens"),
        prompt_tokens=opt_int(raw, "prompt_tokens"),
        e2e_ms=e2e_ms,
        ttft_ms=None if generation_ms is None else e2e_ms - generation_ms,
        spec=_spec(raw, d, kind, params) if speculating else None,
    )  # fmt: skip
    if speculating:
        event["spec"]["params"] = {"spec_type": spec_type, **params}
    event["record"] = {k: raw[k] for k in ("run", "route", "runtime") if raw.get(k) is not None}
    if note:
        event[NOTE_KEY] = note
    return event


def _ts(raw: dict[str, Any], d: Defaults, latency_s: float) -> tuple[float, str | None]:
    value = raw.get("ts")
    if value is None:
        return (_TIMELINE.finish(d, latency_s),
                "ts is not from the engine: the record has none; records are laid out back "
                "to back from the adapt time (or --default-ts) by latency_s")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value), None
    when = None
    if isinstance(value, str):
        try:
            when = datetime.fromisoformat(value)
        except ValueError:
            pass
    if when is None or when.tzinfo is None:
        raise AdapterError(f"ts: want RFC 3339 with zone or Unix seconds (got {value!r})")
    return when.timestamp(), None


def _request_id(raw: dict[str, Any]) -> str:
    given = raw.get("request_id")
    if given is not None:
        if not isinstance(given, str) or not given:
            raise AdapterError(f"request_id: must be a non-empty string (got {given!r})")
        return given
    digest = hashlib.sha256(orjson.dumps(raw, option=orjson.OPT_SORT_KEYS)).hexdigest()[:24]
    return f"rec-{digest}"


def _engine(runtime: str | None) -> str:
    """
    >>> _engine("llama-cpp-python 0.3.36 (...)"), _engine("llama.cpp llama-server (...)")
    ('llama-cpp-python', 'llamacpp')
    """
    text = (runtime or "").lower()
    for prefix, name in _RUNTIMES:
        if text.startswith(prefix):
            return name
    return ENGINE


def _spec(raw: dict[str, Any], d: Defaults, kind: SpecType | None,
          params: dict[str, Any]) -> SpecCounts:
    drafted = need_int(raw, "drafted_tokens")
    accepted = need_int(raw, "accepted_tokens")
    steps = opt_int(raw, "verify_steps")
    return SpecCounts(_length(raw, d, kind, params), drafted, accepted, steps)


def _length(raw: dict[str, Any], d: Defaults, kind: SpecType | None,
            params: dict[str, Any]) -> int:
    if kind is None:
        if d.num_speculative_tokens is None or d.method is None:
            raise AdapterError(f"spec_type: unknown {raw.get('spec_type')!r} (known: "
                               f"{', '.join(SPEC_TYPES)}); pass --method and "
                               "--num-speculative-tokens or set them in the mapping")
        return d.num_speculative_tokens
    for key in kind.length_keys:
        if params.get(key) is not None:
            return need_int(params, key, "spec_params", minimum=1)
    if kind.default_length is not None:
        return kind.default_length
    if d.num_speculative_tokens is not None:
        return d.num_speculative_tokens
    raise AdapterError(f"spec_params: none of {', '.join(kind.length_keys)} (the draft length "
                       f"of {raw.get('spec_type')!r}); pass --num-speculative-tokens")

