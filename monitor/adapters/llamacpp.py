"""llama.cpp ``llama-server`` response -> telemetry v1.

Two shapes, told apart by their keys (llama.cpp ``tools/server/server-task.cpp``,
``server_task_result_cmpl_final``):

- an OpenAI-compatible ``/v1/chat/completions`` or ``/v1/completions`` response (``id``,
  ``created``, ``model``, ``choices``, ``usage``) that llama-server extends with ``timings``;
- a native ``/completion`` response (``content``, ``model``, ``tokens_predicted``,
  ``tokens_evaluated``, ``stop_type``, ``timings``), which has no request id and no time.

``timings`` (``result_timings::to_json``): ``prompt_ms`` is prompt processing up to the first
token, ``predicted_ms`` generation from there to the end; their sum is the server's own time
for the request (queueing is not reported). Speculative decoding adds ``draft_n`` (draft tokens
proposed) and ``draft_n_accepted`` (accepted, bonus excluded), **only when draft_n > 0**. So
on a model whose flags or mapping say it speculates, a response without them drafted nothing:
an n-gram lookup that found no match, or a draft model llama-server refused (an incompatible
vocabulary makes it log an error and serve without speculation, reference
``real-engines-on-cpu.md`` D). Both become ``drafted_tokens = 0`` (no acceptance rate, counted
apart; a whole window of them raises ``speculation_inactive``). Without speculation configured
the event has no ``spec``.

Neither shape says the draft length, the drafting method or the draft model: they come from
the flags or the mapping (``num_speculative_tokens`` is llama-server's ``--spec-draft-n-max``,
3 unless set; ``method`` from ``--spec-type``: ``draft_model`` for draft-simple, ``ngram`` for
the n-gram types, ``eagle``, ``mtp``). Per-request verify steps and per-position counts are not
reported; ``/metrics`` has them as counters (``specwatch scrape``, engine ``llamacpp``).

``request_id`` is the OpenAI ``id``; a native response has none, so its id is ``llamacpp-``
and a digest of the whole response (two byte-identical responses are one request). ``ts`` is
``created`` (the whole second the response was made, i.e. the finish time); a native response
gets the adapt time (or ``--default-ts``) with an ``adapter_note``.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from monitor.adapters.common import (
    AdapterError,
    SpecCounts,
    build_event,
    check_counts,
    need_dict,
    need_int,
    need_k,
    need_number,
    openai_response,
    opt_int,
    opt_number,
    opt_str,
    spec_for_no_stats,
)
from monitor.adapters.defaults import Defaults

__all__ = ["ENGINE", "draft_counts", "to_event"]

ENGINE = "llamacpp"
TIMINGS = "timings"

# native stop_type (stop_type_to_str): eos, a stop word, or the token limit all finish a
# request normally; "none" is a result without a stop, which a final response should not be
_STOP_TYPES = {"eos": "ok", "word": "ok", "limit": "ok"}


def to_event(raw: dict[str, Any], defaults: Defaults) -> dict[str, Any]:
    """One llama-server response (OpenAI-compatible or native ``/completion``) as an event."""
    if not isinstance(raw, dict):
        raise AdapterError("a llama-server response must be a JSON object")
    if "choices" in raw:
        return _from_oai(raw, defaults)
    if "tokens_predicted" in raw or "stop_type" in raw:
        return _from_native(raw, defaults)
    raise AdapterError("neither a llama-server OpenAI-compatible response (id, choices, usage, "
                       "timings) nor a native /completion response (content, tokens_predicted, "
                       "timings)")


def _from_oai(raw: dict[str, Any], defaults: Defaults) -> dict[str, Any]:
    request_id, d, choice, status, usage = openai_response(raw, defaults)
    timings = need_dict(raw, TIMINGS)
    prompt_ms, decode_ms = _times(timings)
    return build_event(
        engine=ENGINE, defaults=d, request_id=request_id,
        ts=opt_number(raw, "created"),
        ts_note="the llama-server response has no 'created' time",
        status=status,
        output_tokens=need_int(usage, "completion_tokens", "usage"),
        prompt_tokens=opt_int(usage, "prompt_tokens", "usage"),
        e2e_ms=prompt_ms + decode_ms, ttft_ms=prompt_ms,
        spec=_spec(timings, d),
    )  # fmt: skip


def _from_native(raw: dict[str, Any], defaults: Defaults) -> dict[str, Any]:
    d = defaults.for_model(opt_str(raw, "model"))
    stop = raw.get("stop_type")
    if not isinstance(stop, str) or stop not in _STOP_TYPES:
        raise AdapterError(f"stop_type: want one of {', '.join(sorted(_STOP_TYPES))} for a "
                           f"finished request (got {stop!r})")
    timings = need_dict(raw, TIMINGS)
    prompt_ms, decode_ms = _times(timings)
    digest = hashlib.sha256(orjson.dumps(raw, option=orjson.OPT_SORT_KEYS)).hexdigest()[:24]
    return build_event(
        engine=ENGINE, defaults=d, request_id=f"llamacpp-{digest}", ts=None,
        ts_note="a native /completion response has no time",
        status=_STOP_TYPES[stop],
        output_tokens=need_int(raw, "tokens_predicted"),
        prompt_tokens=opt_int(raw, "tokens_evaluated"),
        e2e_ms=prompt_ms + decode_ms, ttft_ms=prompt_ms,
        spec=_spec(timings, d),
    )  # fmt: skip


def _times(timings: dict[str, Any]) -> tuple[float, float]:
    return (need_number(timings, "prompt_ms", TIMINGS),
            need_number(timings, "predicted_ms", TIMINGS))


def _spec(timings: dict[str, Any], d: Defaults) -> SpecCounts | None:
    counts = draft_counts(timings)
    if counts is None:
        return spec_for_no_stats(d)
    return SpecCounts(need_k(d), *counts)


def draft_counts(timings: dict[str, Any]) -> tuple[int, int] | None:
    """Drafted and accepted tokens of a response's ``timings``; None when it has neither
    (llama-server writes both only when something was drafted)."""
    drafted = opt_int(timings, "draft_n", TIMINGS)
    if drafted is None:
        if timings.get("draft_n_accepted") is not None:
            raise AdapterError(f"{TIMINGS}.draft_n: missing while draft_n_accepted is given")
        return None
    accepted = need_int(timings, "draft_n_accepted", TIMINGS)
    check_counts(drafted, accepted, TIMINGS)
    return drafted, accepted
