"""What one upstream response says about its request, per engine: the speculative counters,
the token counts, the outcome and the engine's own decode time.

The body is the decoded JSON response, or for a streamed response the object that
:class:`monitor.proxy.stream.SseBody` merged from its chunks (same keys: the final chunk
carries ``timings``, ``usage``, ``metrics`` or ``meta_info``). Field meanings are those of
``shared/reference/real-engines-on-cpu.md`` (llama.cpp) and ``engine-telemetry.md``
(vLLM section 1.3, SGLang 2.1, TensorRT-LLM 3.4); counts go through the same helpers as the
``specwatch adapt`` adapters (``monitor.adapters.common``).

When a model's metadata says it speculates but the response shows no drafting:

- llama.cpp leaves ``timings.draft_n`` out when nothing was drafted, which is also what a
  server that failed to load its draft model does on every request: ``drafted_tokens: 0``
  (a response without ``timings`` at all says nothing: :class:`NoCounters`);
- SGLang fills ``meta_info``'s spec fields only when the request verified at least once, and
  TensorRT-LLM drops ``speculative_decoding`` when nothing was drafted: ``drafted_tokens: 0``;
- vLLM sends ``metrics.speculative_decoding`` whenever it speculates and ``n == 1``, so its
  absence means "unknown" (flag off, ``n > 1``, or a stream without
  ``stream_options.include_usage``): :class:`NoCounters`, and no event;
- a response no engine can be recognised in (``engine: auto``): :class:`NoCounters`.

A model without ``spec`` in the metadata gets no ``spec`` block; counters in its responses
are a configuration mistake (the draft length is unknown) and raise :class:`AdapterError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from monitor.adapters import llamacpp, sglang, trtllm, vllm
from monitor.adapters.common import (
    AdapterError,
    SpecCounts,
    opt_int,
    opt_number,
    status_of,
)
from monitor.proxy.config import SpecMeta

__all__ = ["NoCounters", "Reading", "detect_engine", "read_response"]

class NoCounters(AdapterError):
    """The response cannot say what the request drafted (no event is better than a wrong
    one)."""


@dataclass(frozen=True, slots=True)
class Reading:
    engine: str | None
    request_id: str | None
    model: str | None
    status: str
    output_tokens: int
    prompt_tokens: int | None
    # The engine's decode time (first to last token), when it reports one: a non-streamed
    # response's time to first token is the proxy's e2e minus this.
    decode_ms: float | None
    spec: SpecCounts | None


def detect_engine(body: dict[str, Any]) -> str | None:
    """The engine a response comes from, by its keys; None when nothing tells.

    >>> detect_engine({"timings": {}}), detect_engine({"meta_info": {}})
    ('llamacpp', 'sglang')
    >>> detect_engine({"metrics": {"speculative_decoding": None}}), detect_engine({"usage": {}})
    ('vllm', None)
    """
    if "timings" in body or "tokens_predicted" in body:
        return "llamacpp"
    if "meta_info" in body:
        return "sglang"
    metrics = body.get("metrics")
    if isinstance(metrics, dict) and "speculative_decoding" in metrics:
        return "vllm"
    choice = _choice(body)
    if choice is not None and ("speculative_decoding" in choice
                               or "avg_decoded_tokens_per_iter" in choice):
        return "trtllm"
    return None


def read_response(body: Any, engine: str, spec: SpecMeta | None) -> Reading:
    """The :class:`Reading` of one response of an engine (``auto``: detected from the body);
    ``spec`` is the served model's drafting metadata (None: it does not speculate)."""
    if not isinstance(body, dict):
        raise AdapterError("the response is not a JSON object")
    choices = body.get("choices")
    if isinstance(choices, list) and len(choices) > 1:
        raise NoCounters(f"choices: {len(choices)} sequences (n > 1) share one set of "
                         "counters; one event cannot describe them")
    if engine == "auto":
        found = detect_engine(body)
        if found is None:
            if spec is not None:
                raise NoCounters("the response carries no speculative counters the proxy "
                                 "knows (set `engine:` to say which engine this is)")
            return _plain(body)
        engine = found
    return _READERS[engine](body, spec)


# --- per engine ---------------------------------------------------------------------------


def _llamacpp(body: dict[str, Any], spec: SpecMeta | None) -> Reading:
    timings = body.get("timings")
    if timings is None:
        if spec is not None:
            raise NoCounters("timings: missing, so what was drafted is unknown (llama-server "
                             "sends it with every finished response; a stream carries it on "
                             "its final chunk)")
        timings = {}
    elif not isinstance(timings, dict):
        raise AdapterError("timings: must be an object")
    counts = None
    drafted_accepted = llamacpp.draft_counts(timings)
    if drafted_accepted is not None:
        counts = SpecCounts(_need_k(spec, "timings.draft_n"), *drafted_accepted)
    elif spec is not None:
        # no draft_n: nothing drafted, or speculation silently off (draft failed to load)
        counts = SpecCounts(spec.num_speculative_tokens, 0, 0)
    usage = _dict(body, "usage")
    output = _first_int((usage, "completion_tokens", "usage"),
                        (body, "tokens_predicted", ""), (timings, "predicted_n", "timings"))
    if output is None:
        raise AdapterError("usage.completion_tokens: missing (and no tokens_predicted or "
                           "timings.predicted_n)")
    prompt = _first_int((usage, "prompt_tokens", "usage"), (body, "tokens_evaluated", ""),
                        (timings, "prompt_n", "timings"))
    choice = _choice(body)
    reason = choice.get("finish_reason") if choice is not None else None
    return Reading("llamacpp", _id(body.get("id")), _str(body.get("model")),
                   _status(reason), output, prompt,
                   opt_number(timings, "predicted_ms", "timings"), counts)


def _vllm(body: dict[str, Any], spec: SpecMeta | None) -> Reading:
    where = "metrics.speculative_decoding"
    metrics = _dict(body, "metrics")
    block = metrics.get("speculative_decoding")
    counts = None
    if block is None:
        if spec is not None:
            raise NoCounters(f"{where}: missing or null, so acceptance is unknown (start vLLM "
                             "with --per-request-spec-decode-metrics summary; a stream needs "
                             "stream_options.include_usage)")
    elif not isinstance(block, dict):
        raise AdapterError(f"{where}: must be an object")
    else:
        k = opt_int(block, "num_spec_tokens", where, minimum=1) or _need_k(spec, where)
        counts = vllm.block_counts(block, k)
    usage = _dict(body, "usage")
    output = _need(usage, "completion_tokens", "usage")
    choice = _choice(body)
    return Reading("vllm", _id(body.get("id")), _str(body.get("model")),
                   _status(choice.get("finish_reason") if choice else None), output,
                   opt_int(usage, "prompt_tokens", "usage"),
                   opt_number(metrics, "generation_time_ms", "metrics"), counts)


def _sglang(body: dict[str, Any], spec: SpecMeta | None) -> Reading:
    meta = body.get("meta_info")
    if not isinstance(meta, dict):
        if spec is not None:
            raise NoCounters("meta_info: missing; SGLang reports speculative counters only on "
                             "its native /generate endpoint")
        return _plain(body, "sglang")
    where = "meta_info"
    completion = _need(meta, "completion_tokens", where)
    counts = None
    if any(meta.get(key) is not None for key in sglang.SPEC_KEYS):
        counts = sglang.spec_counts(meta, completion, _need_k(spec, f"{where}.spec_verify_ct"))
    elif spec is not None:
        counts = SpecCounts(spec.num_speculative_tokens, 0, 0, 0)  # S = 0: nothing drafted
    finish = meta.get("finish_reason")
    if isinstance(finish, dict):
        status = ("error" if finish.get("type") == "abort"
                  and finish.get("status_code") is not None else _status(finish.get("type")))
    else:
        status = _status(finish)
    decode_ms = None
    first = opt_number(meta, "prefill_finished_ts", where)
    last = opt_number(meta, "request_finished_ts", where)
    if last is None:
        last = opt_number(meta, "decode_finished_ts", where)
    if first is not None and last is not None and last >= first:
        decode_ms = (last - first) * 1000.0
    return Reading("sglang", _id(meta.get("id")), _str(body.get("model")), status, completion,
                   opt_int(meta, "prompt_tokens", where), decode_ms, counts)


def _trtllm(body: dict[str, Any], spec: SpecMeta | None) -> Reading:
    choice = _choice(body) or {}
    where = "choices[0].speculative_decoding"
    block = choice.get("speculative_decoding")
    counts = None
    if isinstance(block, dict):
        k = opt_int(block, "num_spec_tokens", where, minimum=1) or _need_k(spec, where)
        counts = trtllm.block_counts(block, k, where)
    elif block is not None:
        raise AdapterError(f"{where}: must be an object")
    elif spec is not None:
        counts = SpecCounts(spec.num_speculative_tokens, 0, 0, 0)  # left out: none drafted
    usage = _dict(body, "usage")
    return Reading("trtllm", _id(body.get("id")), _str(body.get("model")),
                   _status(choice.get("finish_reason")),
                   _need(usage, "completion_tokens", "usage"),
                   opt_int(usage, "prompt_tokens", "usage"), None, counts)


def _plain(body: dict[str, Any], engine: str | None = None) -> Reading:
    """An OpenAI-shaped response of a model that does not speculate."""
    usage = _dict(body, "usage")
    choice = _choice(body)
    return Reading(engine, _id(body.get("id")), _str(body.get("model")),
                   _status(choice.get("finish_reason") if choice else None),
                   _need(usage, "completion_tokens", "usage"),
                   opt_int(usage, "prompt_tokens", "usage"), None, None)


_READERS = {"llamacpp": _llamacpp, "vllm": _vllm, "sglang": _sglang, "trtllm": _trtllm}


# --- helpers ------------------------------------------------------------------------------


def _need_k(spec: SpecMeta | None, where: str) -> int:
    if spec is None:
        raise AdapterError(f"{where}: the response has speculative counters but the model's "
                           "metadata has no `spec` (num_speculative_tokens)")
    return spec.num_speculative_tokens


def _need(obj: dict[str, Any], key: str, where: str) -> int:
    value = opt_int(obj, key, where)
    if value is None:
        raise AdapterError(f"{where}.{key}: missing")
    return value


def _first_int(*places: tuple[dict[str, Any], str, str]) -> int | None:
    for obj, key, where in places:
        value = opt_int(obj, key, where)
        if value is not None:
            return value
    return None


def _dict(body: dict[str, Any], key: str) -> dict[str, Any]:
    value = body.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise AdapterError(f"{key}: must be an object")
    return value


def _choice(body: dict[str, Any]) -> dict[str, Any] | None:
    choices = body.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0]
    return None


def _status(reason: object) -> str:
    """Telemetry status of a finish reason; a finished 2xx response with none, or with one
    no engine documents (llama.cpp's ``stop_type``, say), is ``ok``."""
    if reason is None:
        return "ok"
    try:
        return status_of(reason, "finish_reason")
    except AdapterError:
        return "ok"


def _id(value: object) -> str | None:
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None
