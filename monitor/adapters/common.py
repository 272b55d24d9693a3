"""What every engine adapter shares: the error, field readers that name the bad field, the
acceptance math of ``shared/reference/engine-telemetry.md`` section 5, and event assembly.

An adapter turns one engine request output (a decoded JSON object) into one telemetry v1
event dict. It never guesses: a missing or ill-typed field raises ``AdapterError`` whose
reason starts with the field's path in the engine's output, and the driver dead-letters it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from monitor.adapters.defaults import Defaults
from monitor.exceptions import SpecwatchError
from monitor.telemetry.serialize import format_ts, request_tail, spec_block

__all__ = [
    "NOTE_KEY",
    "AdapterError",
    "SpecCounts",
    "build_event",
    "check_counts",
    "check_histogram",
    "from_histogram",
    "need_dict",
    "need_id",
    "need_int",
    "need_k",
    "need_list",
    "need_number",
    "only_choice",
    "openai_response",
    "opt_dict",
    "opt_int",
    "opt_number",
    "opt_str",
    "seconds_between",
    "spec_for_no_stats",
    "status_of",
]

# Extra event field saying what the adapter had to make up (the spec keeps unknown fields out
# of the statistics, so it travels with the event without changing any number).
NOTE_KEY = "adapter_note"


class AdapterError(SpecwatchError):
    """An engine output cannot become a telemetry v1 event; ``reason`` names the field."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# --- field readers ------------------------------------------------------------------------


def _path(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _show(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {'true' if value else 'false'}"
    if isinstance(value, int | float):
        return f"number {value!r}"
    if isinstance(value, str):
        text = repr(value)
        return f"string {text if len(text) <= 40 else text[:37] + '...'}"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _get(obj: dict[str, Any], key: str, where: str) -> Any:
    value = obj.get(key)
    if value is None:
        raise AdapterError(f"{_path(where, key)}: missing" + (" (null)" if key in obj else ""))
    return value


def need_dict(obj: dict[str, Any], key: str, where: str = "") -> dict[str, Any]:
    value = _get(obj, key, where)
    if not isinstance(value, dict):
        raise AdapterError(f"{_path(where, key)}: must be an object (got {_show(value)})")
    return value


def opt_dict(obj: dict[str, Any], key: str, where: str = "") -> dict[str, Any] | None:
    return None if obj.get(key) is None else need_dict(obj, key, where)


def need_list(obj: dict[str, Any], key: str, where: str = "") -> list[Any]:
    value = _get(obj, key, where)
    if not isinstance(value, list):
        raise AdapterError(f"{_path(where, key)}: must be an array (got {_show(value)})")
    return value


def _check_int(value: Any, path: str, minimum: int) -> int:
    # bool is an int to Python but never a count in JSON
    if isinstance(value, bool) or not isinstance(value, int):
        raise AdapterError(f"{path}: must be an integer (got {_show(value)})")
    if value < minimum:
        raise AdapterError(f"{path}: must be >= {minimum} (got {value})")
    return value


def need_int(obj: dict[str, Any], key: str, where: str = "", minimum: int = 0) -> int:
    return _check_int(_get(obj, key, where), _path(where, key), minimum)


def opt_int(obj: dict[str, Any], key: str, where: str = "", minimum: int = 0) -> int | None:
    return None if obj.get(key) is None else need_int(obj, key, where, minimum)


def need_number(obj: dict[str, Any], key: str, where: str = "", minimum: float = 0.0) -> float:
    value = _get(obj, key, where)
    path = _path(where, key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise AdapterError(f"{path}: must be a number (got {_show(value)})")
    number = float(value)
    if not math.isfinite(number):
        raise AdapterError(f"{path}: must be finite (got {value!r})")
    if number < minimum:
        raise AdapterError(f"{path}: must be >= {minimum:g} (got {value!r})")
    return number


def opt_number(
    obj: dict[str, Any], key: str, where: str = "", minimum: float = 0.0
) -> float | None:
    return None if obj.get(key) is None else need_number(obj, key, where, minimum)


def opt_str(obj: dict[str, Any], key: str, where: str = "") -> str | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise AdapterError(f"{_path(where, key)}: must be a string (got {_show(value)})")
    return value or None


def need_id(obj: dict[str, Any], key: str, where: str = "") -> str:
    """A request id: a non-empty string, or an integer (TensorRT-LLM numbers its requests)."""
    value = _get(obj, key, where)
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise AdapterError(f"{_path(where, key)}: must be a non-empty string or integer "
                       f"(got {_show(value)})")


def only_choice(items: list[Any], path: str) -> dict[str, Any]:
    """The single sequence of a request; ``n > 1`` is several streams with one shared usage
    and timing, which no single telemetry event can describe."""
    if len(items) != 1:
        raise AdapterError(f"{path}: want exactly 1 sequence (n == 1), got {len(items)}")
    item = items[0]
    if not isinstance(item, dict):
        raise AdapterError(f"{path}[0]: must be an object (got {_show(item)})")
    return item


def openai_response(
    raw: dict[str, Any], defaults: Defaults
) -> tuple[str, Defaults, dict[str, Any], str, dict[str, Any]]:
    """What an OpenAI-compatible response says the same way on every server: its ``id``, the
    defaults for its ``model``, its single choice, that choice's status, and ``usage``."""
    request_id = need_id(raw, "id")
    d = defaults.for_model(opt_str(raw, "model"))
    choice = only_choice(need_list(raw, "choices"), "choices")
    status = status_of(choice.get("finish_reason"), "choices[0].finish_reason")
    return request_id, d, choice, status, need_dict(raw, "usage")


# --- status -------------------------------------------------------------------------------

_STATUS = {
    # vLLM FINISH_REASON_STRINGS, SGLang finish_reason.type, TensorRT-LLM
    # CompletionOutput.finish_reason and the OpenAI values all three servers use
    "stop": "ok", "length": "ok", "repetition": "ok", "tool_calls": "ok",
    "function_call": "ok", "end_id": "ok", "stop_words": "ok",
    "abort": "cancelled", "cancelled": "cancelled",
    "timeout": "timeout", "timed_out": "timeout",
    "error": "error",
}  # fmt: skip


def status_of(reason: object, path: str) -> str:
    """Telemetry status of an engine finish reason.

    >>> status_of("length", "finish_reason"), status_of("abort", "finish_reason")
    ('ok', 'cancelled')
    >>> status_of(None, "choices[0].finish_reason")
    Traceback (most recent call last):
    ...
    monitor.adapters.common.AdapterError: choices[0].finish_reason: missing (request not finished?)
    """
    if reason is None:
        raise AdapterError(f"{path}: missing (request not finished?)")
    if not isinstance(reason, str):
        raise AdapterError(f"{path}: must be a string (got {_show(reason)})")
    status = _STATUS.get(reason.lower())
    if status is None:
        raise AdapterError(f"{path}: unknown finish reason {reason!r} "
                           f"(known: {', '.join(sorted(_STATUS))})")
    return status


# --- acceptance math ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SpecCounts:
    """The speculative-decoding counters of one request, bonus token excluded everywhere."""

    num_speculative_tokens: int
    drafted: int
    accepted: int
    verify_steps: int | None = None
    per_position: tuple[int, ...] | None = None


def from_histogram(hist: Any, k: int, path: str) -> tuple[tuple[int, ...], int, int]:
    """Per-position accepted counts, verify steps and accepted drafts of an acceptance
    histogram (index j = steps that accepted exactly j drafts, bonus excluded).

    Reference section 5.1: acceptance is a prefix, so the draft at position i (0-based) was
    accepted in every step that accepted at least i+1 drafts: ``per_pos[i] = sum(h[j], j > i)``;
    ``S = sum(h)`` and ``A = sum(j * h[j]) = sum(per_pos)``. A histogram shorter than k+1 is
    read with zeros after its end (SGLang trims it); a longer one contradicts k.

    >>> from_histogram([39, 1, 0, 3], 3, "h")   # vLLM's documented example
    ((4, 3, 3), 43, 10)
    """
    if not isinstance(hist, list):
        raise AdapterError(f"{path}: must be an array (got {_show(hist)})")
    if len(hist) > k + 1:
        raise AdapterError(f"{path}: has {len(hist)} buckets (0..{len(hist) - 1} accepted) but "
                           f"the draft length is {k}: want at most {k + 1}")
    counts = [_check_int(n, f"{path}[{j}]", 0) for j, n in enumerate(hist)]
    counts += [0] * (k + 1 - len(counts))
    per_position = []
    running = 0
    for j in range(k, 0, -1):  # suffix sums, from the longest accepted prefix down
        running += counts[j]
        per_position.append(running)
    per_position.reverse()
    return tuple(per_position), sum(counts), sum(j * n for j, n in enumerate(counts))


def check_histogram(
    hist: Any, k: int, path: str, accepted: int, steps: int | None
) -> tuple[tuple[int, ...], int]:
    """Per-position counts and verify steps of a histogram that must agree with the reported
    totals (``steps`` None: not reported, the histogram's count is returned)."""
    per_position, hist_steps, hist_accepted = from_histogram(hist, k, path)
    if hist_accepted != accepted:
        raise AdapterError(f"{path}: implies {hist_accepted} accepted drafts, the totals say "
                           f"{accepted}")
    if steps is not None and hist_steps != steps:
        raise AdapterError(f"{path}: sums to {hist_steps} steps, the totals say {steps}")
    return per_position, hist_steps


def spec_for_no_stats(defaults: Defaults) -> SpecCounts | None:
    """Counters of a request whose output carries no speculative stats, for engines that
    document leaving them out when nothing was drafted (SGLang, TensorRT-LLM).

    Speculation counts as on when the flags or mapping describe it; then the request drafted
    nothing (no acceptance rate, counted apart), else speculation was off (no ``spec``).
    """
    if not defaults.speculation_configured:
        return None
    return SpecCounts(need_k(defaults), 0, 0, 0)


def need_k(defaults: Defaults) -> int:
    if defaults.num_speculative_tokens is None:
        raise AdapterError("num_speculative_tokens: the engine output does not say the draft "
                           "length; pass --num-speculative-tokens or set it in the mapping")
    return defaults.num_speculative_tokens


def check_counts(drafted: int, accepted: int, where: str) -> None:
    if accepted > drafted:
        raise AdapterError(f"{where}: {accepted} accepted drafts > {drafted} drafted")


# --- the event ----------------------------------------------------------------------------


def build_event(
    *,
    engine: str,
    defaults: Defaults,
    request_id: str,
    ts: float | None,
    ts_note: str,
    status: str,
    output_tokens: int,
    e2e_ms: float,
    ttft_ms: float | None = None,
    prompt_tokens: int | None = None,
    spec: SpecCounts | None = None,
) -> dict[str, Any]:
    """The telemetry v1 event; descriptive fields come from ``defaults`` (already resolved
    for the request's model). ``ts`` None means the engine gave no wall-clock time: the
    event gets ``defaults.clock()`` (the adapt time, or ``--default-ts``) and a note saying
    so (``ts_note``)."""
    route = defaults.route
    if route is None:
        raise AdapterError(f"route: the engine output has no route; pass --route or map model "
                           f"{defaults.target_model!r} in --mapping")
    target = {
        "model": _needed(defaults.target_model, "target_model", "--target-model", defaults),
        "revision": _needed(defaults.target_revision, "target_revision", "--target-revision",
                            defaults),
        "tokenizer": _needed(defaults.target_tokenizer, "target_tokenizer", "--target-tokenizer",
                             defaults),
    }
    note = None
    if ts is None:
        ts = defaults.clock()
        note = f"ts is not from the engine: {ts_note}"
    event: dict[str, Any] = {
        "request_id": defaults.request_id_prefix + request_id,
        "ts": format_ts(ts),
        "route": route,
        "status": status,
        "target": target,
    }
    if defaults.draft_model is not None:
        draft = {
            "model": defaults.draft_model,
            "revision": _needed(defaults.draft_revision, "draft_revision", "--draft-revision",
                                defaults),
            "tokenizer": _needed(defaults.draft_tokenizer, "draft_tokenizer", "--draft-tokenizer",
                                 defaults),
        }
        if defaults.pinned_target_revision is not None:
            draft["pinned_target_revision"] = defaults.pinned_target_revision
        event["draft"] = draft
    if spec is not None:
        check_counts(spec.drafted, spec.accepted, "speculative stats")
        event["spec"] = spec_block(spec.num_speculative_tokens, spec.drafted, spec.accepted,
                                   spec.verify_steps, spec.per_position, defaults.method)
    request_tail(event, output_tokens=output_tokens, e2e_ms=e2e_ms,
                 prompt_tokens=prompt_tokens, ttft_ms=ttft_ms, instance=defaults.instance,
                 engine=engine)
    if note is not None:
        event[NOTE_KEY] = note
    return event


def _needed(value: str | None, name: str, flag: str, defaults: Defaults) -> str:
    if value is None:
        raise AdapterError(f"{name}: not in the engine output; pass {flag} or set it for model "
                           f"{defaults.target_model!r} in --mapping")
    return value


def seconds_between(start: float, end: float, where: str) -> float:
    """``end - start`` in seconds, refusing a clock that ran backwards."""
    if end < start:
        raise AdapterError(f"{where}: ends before it starts ({end!r} < {start!r})")
    return end - start
