"""TensorRT-LLM per-request output -> telemetry v1.

Two shapes, told apart by their keys (reference ``engine-telemetry.md`` sections 3.1-3.4):

- the LLM API's ``RequestOutput`` as JSON (``request_id``, ``prompt_token_ids``, ``outputs``):
  ``outputs[0]`` holds ``token_ids``, ``finish_reason`` and, with ``return_perf_metrics``,
  ``request_perf_metrics`` = the executor's ``RequestPerfMetrics`` in its Python (snake_case)
  names: ``timing_metrics`` (``arrival_time``, ``first_token_time``, ``last_token_time``)
  and ``speculative_decoding`` (``acceptance_rate``, ``total_accepted_draft_tokens``,
  ``total_draft_tokens``);
- a ``trtllm-serve`` OpenAI response (``id``, ``created``, ``model``, ``choices``, ``usage``)
  whose choice carries the ``speculative_decoding`` extension of
  ``per_request_spec_decode_stats: true`` (adds ``num_spec_steps``, the dense
  ``acceptance_histogram`` of length k+1 and ``num_spec_tokens``, null under
  ``draft_len_schedule``). The response has no timing, so its line must also carry the
  request's ``/perf_metrics`` entry's ``perf_metrics`` object (``timing_metrics``, and
  ``speculative_decoding`` when the choice lacks it), joined on the request id.

Counts: ``total_draft_tokens`` = D, ``total_accepted_draft_tokens`` = A (bonus excluded, as in
every engine of section 5.1), ``num_spec_steps`` = S; per-position counts come from the
histogram (``common.from_histogram``). ``acceptance_rate`` (A/D) is derived and not copied.
``avg_decoded_tokens_per_iter`` averages over every iteration of the request, drafting or
not, so it yields neither S nor A and is not used.

TensorRT-LLM leaves ``speculative_decoding`` out when a request drafted nothing
(``total_draft_tokens > 0`` guards it in ``openai_server.get_perf_metrics``): on a model whose
flags or mapping say it speculates, that is a request with nothing drafted.

``timing_metrics`` are steady-clock seconds, not wall-clock time: they give latencies but no
``ts``. The OpenAI shape's ``created`` (Unix seconds of the request) + e2e gives the finish
time; the LLM API shape has none, so its events get the adapt time, with a note.
"""

from __future__ import annotations

from typing import Any

from monitor.adapters.common import (
    AdapterError,
    SpecCounts,
    build_event,
    check_counts,
    check_histogram,
    need_dict,
    need_id,
    need_int,
    need_list,
    need_number,
    only_choice,
    openai_response,
    opt_dict,
    opt_int,
    opt_number,
    seconds_between,
    spec_for_no_stats,
    status_of,
)
from monitor.adapters.defaults import Defaults

__all__ = ["ENGINE", "block_counts", "to_event"]

ENGINE = "trtllm"


def to_event(raw: dict[str, Any], defaults: Defaults) -> dict[str, Any]:
    """One TensorRT-LLM request output (LLM API ``RequestOutput`` or OpenAI response)."""
    if not isinstance(raw, dict):
        raise AdapterError("a TensorRT-LLM request output must be a JSON object")
    if "choices" in raw:
        return _from_response(raw, defaults)
    if "outputs" in raw:
        return _from_request_output(raw, defaults)
    if "perf_metrics" in raw:
        raise AdapterError("output_tokens: a /perf_metrics entry alone has no token counts or "
                           "finish reason; put its perf_metrics on the OpenAI response line")
    raise AdapterError("neither a TensorRT-LLM RequestOutput (request_id, outputs) nor an "
                       "OpenAI response (id, choices, usage)")


def _from_request_output(raw: dict[str, Any], defaults: Defaults) -> dict[str, Any]:
    request_id = need_id(raw, "request_id")
    d = defaults.for_model(None)
    output = only_choice(need_list(raw, "outputs"), "outputs")
    status = status_of(output.get("finish_reason"), "outputs[0].finish_reason")
    output_tokens = len(need_list(output, "token_ids", "outputs[0]"))
    prompt = raw.get("prompt_token_ids")
    where = "outputs[0].request_perf_metrics"
    perf = need_dict(output, "request_perf_metrics", "outputs[0]")
    e2e_ms, ttft_ms = _latencies(perf, where)
    return build_event(
        engine=ENGINE, defaults=d, request_id=request_id, ts=None,
        ts_note="TensorRT-LLM timing_metrics are steady-clock times, not wall-clock",
        status=status, output_tokens=output_tokens,
        prompt_tokens=len(prompt) if isinstance(prompt, list) else None,
        e2e_ms=e2e_ms, ttft_ms=ttft_ms,
        spec=_spec(opt_dict(perf, "speculative_decoding", where),
                   f"{where}.speculative_decoding", d),
    )  # fmt: skip


def _from_response(raw: dict[str, Any], defaults: Defaults) -> dict[str, Any]:
    request_id, d, choice, status, usage = openai_response(raw, defaults)
    if raw.get("perf_metrics") is None:
        raise AdapterError("perf_metrics: missing; an OpenAI response has no timing (e2e_ms is "
                           "required): add the request's /perf_metrics entry's perf_metrics "
                           "(trtllm-serve with return_perf_metrics)")
    perf = need_dict(raw, "perf_metrics")
    e2e_ms, ttft_ms = _latencies(perf, "perf_metrics")
    block = opt_dict(choice, "speculative_decoding", "choices[0]")
    where = "choices[0].speculative_decoding"
    if block is None:
        block = opt_dict(perf, "speculative_decoding", "perf_metrics")
        where = "perf_metrics.speculative_decoding"
    created = opt_number(raw, "created")
    return build_event(
        engine=ENGINE, defaults=d, request_id=request_id,
        ts=None if created is None else created + e2e_ms / 1000.0,
        ts_note="the TensorRT-LLM response has no 'created' time",
        status=status, output_tokens=need_int(usage, "completion_tokens", "usage"),
        prompt_tokens=opt_int(usage, "prompt_tokens", "usage"),
        e2e_ms=e2e_ms, ttft_ms=ttft_ms, spec=_spec(block, where, d),
    )  # fmt: skip


def _latencies(perf: dict[str, Any], where: str) -> tuple[float, float]:
    """e2e and TTFT in ms from the engine's steady-clock arrival/first/last token times."""
    timing = need_dict(perf, "timing_metrics", where)
    where = f"{where}.timing_metrics"
    arrival = need_number(timing, "arrival_time", where)
    first = need_number(timing, "first_token_time", where)
    last = need_number(timing, "last_token_time", where)
    ttft = seconds_between(arrival, first, f"{where}.arrival_time..first_token_time")
    e2e = seconds_between(arrival, last, f"{where}.arrival_time..last_token_time")
    if last < first:
        raise AdapterError(f"{where}: last_token_time {last!r} < first_token_time {first!r}")
    return e2e * 1000.0, ttft * 1000.0


def _spec(block: dict[str, Any] | None, where: str, d: Defaults) -> SpecCounts | None:
    if block is None:
        return spec_for_no_stats(d)  # nothing drafted, or speculation off
    k = opt_int(block, "num_spec_tokens", where, minimum=1) or d.num_speculative_tokens
    if k is None:
        raise AdapterError(f"{where}.num_spec_tokens: missing or null (draft_len_schedule?); "
                           "pass --num-speculative-tokens")
    return block_counts(block, k, where)


def block_counts(block: dict[str, Any], k: int, where: str) -> SpecCounts:
    """The counters of a ``speculative_decoding`` object at ``where``, for draft length ``k``
    (its ``num_spec_tokens``, else the caller's)."""
    drafted = need_int(block, "total_draft_tokens", where)
    accepted = need_int(block, "total_accepted_draft_tokens", where)
    steps = opt_int(block, "num_spec_steps", where)
    check_counts(drafted, accepted, where)
    hist = block.get("acceptance_histogram")
    per_position = None
    if hist is not None:
        per_position, steps = check_histogram(hist, k, f"{where}.acceptance_histogram",
                                              accepted, steps)
    return SpecCounts(k, drafted, accepted, steps, per_position)
