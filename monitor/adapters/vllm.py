"""vLLM per-request output -> telemetry v1.

Two shapes, told apart by their keys (reference ``engine-telemetry.md`` section 1.3):

- an OpenAI-compatible server response (``id``, ``created``, ``model``, ``choices``,
  ``usage``) with the per-request ``metrics`` object of ``--enable-per-request-metrics``
  (``queue_time_ms``, ``time_to_first_token_ms``, ``generation_time_ms``) and, since v0.29,
  ``metrics.speculative_decoding`` from ``--per-request-spec-decode-metrics summary|detailed``;
- an offline ``RequestOutput`` as JSON (``request_id``, ``prompt_token_ids``, ``outputs``,
  ``metrics``), whose ``metrics`` are the V1 ``RequestStateStats`` (``arrival_time`` wall
  clock; ``first_token_ts``/``last_token_ts`` engine-core monotonic; ``first_token_latency``
  seconds; ``num_generation_tokens``) plus the same ``speculative_decoding`` object.

``metrics.speculative_decoding`` (section 1.3 table): ``num_spec_steps`` = S (verify steps),
``num_draft_tokens`` = D (after grammar-invalidated drafts are removed),
``num_accepted_draft_tokens`` = A (bonus excluded), ``num_spec_tokens`` = k and the dense
``acceptance_histogram`` of length k+1 (index j = steps that accepted exactly j drafts). These
map one to one onto telemetry ``verify_steps``, ``drafted_tokens``, ``accepted_tokens`` and
``num_speculative_tokens``; per-position counts come from the histogram (section 5.1, see
``common.from_histogram``). The derived ``mean_acceptance_length`` (1 + A/S) and
``draft_acceptance_rate`` (A/D) are not copied: specwatch recomputes them from the counts.

vLLM documents the object as present whenever speculation is on and ``n == 1``, with an
all-zero histogram when nothing was drafted, and ``null`` otherwise. So a ``null`` one on a
model whose flags or mapping say speculation is on means "unknown", which is rejected rather
than counted as speculation off.
"""

from __future__ import annotations

from typing import Any

from monitor.adapters.common import (
    AdapterError,
    SpecCounts,
    build_event,
    check_counts,
    check_histogram,
    from_histogram,
    need_dict,
    need_id,
    need_int,
    need_list,
    need_number,
    only_choice,
    openai_response,
    opt_int,
    opt_number,
    seconds_between,
    status_of,
)
from monitor.adapters.defaults import Defaults

__all__ = ["ENGINE", "block_counts", "to_event"]

ENGINE = "vllm"
SPEC = "metrics.speculative_decoding"


def to_event(raw: dict[str, Any], defaults: Defaults) -> dict[str, Any]:
    """One vLLM request output (server response or offline ``RequestOutput``) as an event."""
    if not isinstance(raw, dict):
        raise AdapterError("a vLLM request output must be a JSON object")
    if "choices" in raw:
        return _from_response(raw, defaults)
    if "outputs" in raw or "request_id" in raw:
        return _from_request_output(raw, defaults)
    raise AdapterError("neither a vLLM server response (id, choices, usage, metrics) nor a "
                       "RequestOutput (request_id, outputs, metrics)")


def _from_response(raw: dict[str, Any], defaults: Defaults) -> dict[str, Any]:
    request_id, d, choice, status, usage = openai_response(raw, defaults)
    metrics = need_dict(raw, "metrics")
    # Per-request metrics (docs/features/per_request_metrics.md): queue wait, then scheduled
    # -> first token, then first -> last token. Their sum is the engine-side end-to-end time;
    # queue + TTFT is the first-token latency a caller sees from arrival at the engine, so
    # that e2e - ttft is the decode time (generation_time_ms).
    queue = need_number(metrics, "queue_time_ms", "metrics")
    first = need_number(metrics, "time_to_first_token_ms", "metrics")
    generation = need_number(metrics, "generation_time_ms", "metrics")
    e2e_ms = queue + first + generation
    # ``created`` is the whole second the server took the request; finish = created + e2e.
    created = opt_number(raw, "created")
    return build_event(
        engine=ENGINE, defaults=d, request_id=request_id,
        ts=None if created is None else created + e2e_ms / 1000.0,
        ts_note="the vLLM response has no 'created' time",
        status=status,
        output_tokens=need_int(usage, "completion_tokens", "usage"),
        prompt_tokens=opt_int(usage, "prompt_tokens", "usage"),
        e2e_ms=e2e_ms, ttft_ms=queue + first,
        spec=_spec(metrics.get("speculative_decoding"), d),
    )  # fmt: skip


def _from_request_output(raw: dict[str, Any], defaults: Defaults) -> dict[str, Any]:
    request_id = need_id(raw, "request_id")
    d = defaults.for_model(None)
    output = only_choice(need_list(raw, "outputs"), "outputs")
    status = status_of(output.get("finish_reason"), "outputs[0].finish_reason")
    metrics = need_dict(raw, "metrics")
    output_tokens = opt_int(metrics, "num_generation_tokens", "metrics")
    if output_tokens is None:
        output_tokens = len(need_list(output, "token_ids", "outputs[0]"))
    prompt = raw.get("prompt_token_ids")
    prompt_tokens = len(prompt) if isinstance(prompt, list) else None
    # RequestStateStats: first_token_latency is measured from the wall-clock arrival; the
    # decode interval is the engine core's monotonic last - first token. Their sum is the
    # request's end-to-end latency as vLLM's own e2e histogram measures it (section 1.4).
    ttft_s = need_number(metrics, "first_token_latency", "metrics")
    decode_s = seconds_between(need_number(metrics, "first_token_ts", "metrics"),
                               need_number(metrics, "last_token_ts", "metrics"),
                               "metrics.first_token_ts..last_token_ts")
    e2e_s = ttft_s + decode_s
    arrival = opt_number(metrics, "arrival_time", "metrics")
    return build_event(
        engine=ENGINE, defaults=d, request_id=request_id,
        # arrival_time 0.0 is RequestStateStats' "never set"
        ts=arrival + e2e_s if arrival else None,
        ts_note="the RequestOutput has no metrics.arrival_time",
        status=status, output_tokens=output_tokens, prompt_tokens=prompt_tokens,
        e2e_ms=e2e_s * 1000.0, ttft_ms=ttft_s * 1000.0,
        spec=_spec(metrics.get("speculative_decoding"), d),
    )  # fmt: skip


def _spec(block: Any, d: Defaults) -> SpecCounts | None:
    if block is None:
        if d.speculation_configured:
            raise AdapterError(f"{SPEC}: null, so acceptance is unknown (vLLM reports it only "
                               "with --per-request-spec-decode-metrics summary|detailed and "
                               "n == 1); the mapping says model "
                               f"{d.target_model!r} speculates")
        return None  # speculation off for this model
    if not isinstance(block, dict):
        raise AdapterError(f"{SPEC}: must be an object")
    k = opt_int(block, "num_spec_tokens", SPEC, minimum=1) or d.num_speculative_tokens
    if k is None:
        raise AdapterError(f"{SPEC}.num_spec_tokens: missing; pass --num-speculative-tokens")
    return block_counts(block, k)


def block_counts(block: dict[str, Any], k: int) -> SpecCounts:
    """The counters of a ``metrics.speculative_decoding`` object, for draft length ``k`` (its
    ``num_spec_tokens``, else the caller's)."""
    # Section 1.3: the counts are the request's share of vLLM's Prometheus counters.
    drafted = need_int(block, "num_draft_tokens", SPEC)
    accepted = need_int(block, "num_accepted_draft_tokens", SPEC)
    steps = need_int(block, "num_spec_steps", SPEC)
    check_counts(drafted, accepted, SPEC)
    hist = block.get("acceptance_histogram")
    if hist is not None:
        per_position, _ = check_histogram(hist, k, f"{SPEC}.acceptance_histogram", accepted,
                                          steps)
    else:
        per_position = _per_position_from_steps(block.get("per_step_accepted"), k, accepted,
                                                steps)
    return SpecCounts(k, drafted, accepted, steps, per_position)


def _per_position_from_steps(
    per_step: Any, k: int, accepted: int, steps: int
) -> tuple[int, ...] | None:
    """``detailed`` mode's ordered per-step accepted counts, as a histogram, when the summary
    histogram is missing (it never is in the documented shape; this keeps the detail)."""
    if per_step is None:
        return None
    path = f"{SPEC}.per_step_accepted"
    if not isinstance(per_step, list):
        raise AdapterError(f"{path}: must be an array")
    hist = [0] * (k + 1)
    for i, n in enumerate(per_step):
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= k:
            raise AdapterError(f"{path}[{i}]: must be an integer in 0..{k} (got {n!r})")
        hist[n] += 1
    per_position, hist_steps, hist_accepted = from_histogram(hist, k, path)
    if (hist_steps, hist_accepted) != (steps, accepted):
        raise AdapterError(f"{path}: has {hist_steps} steps accepting {hist_accepted}, the "
                           f"totals say {steps} and {accepted}")
    return per_position
