"""SGLang ``/generate`` response -> telemetry v1.

The native endpoint answers ``{"text": ..., "meta_info": {...}}`` per request (a batch
request gets a JSON array of them, which the driver splits). Reference
``engine-telemetry.md`` section 2.1 lists the ``meta_info`` fields used here:

- ``id``, ``finish_reason`` (``{"type": "stop"|"length"|"abort", ...}``),
  ``prompt_tokens``, ``completion_tokens``, ``e2e_latency`` (seconds);
- wall-clock Unix-second times in newer builds: ``request_received_ts``,
  ``prefill_finished_ts`` (first token), ``request_finished_ts`` or ``decode_finished_ts``;
- ``spec_verify_ct`` = S, the request's verification passes. SGLang fills the spec fields only
  for a request with S > 0, so on a model that speculates, their absence means nothing was
  drafted;
- accepted and proposed draft counts, whose names changed across versions: newest
  ``spec_num_correct_drafts``/``spec_num_proposed_drafts``, then
  ``spec_accepted_drafts``/``spec_proposed_drafts``, first
  ``spec_accept_token_num``/``spec_draft_token_num``; plus ``spec_accept_rate`` (A/D),
  ``spec_accept_length`` and the histogram ``spec_correct_drafts_histogram`` (alias
  ``spec_accept_histogram``).

SGLang never reports the draft length k: it comes from the flags or the mapping. For chain
drafting it is ``--speculative-num-draft-tokens`` - 1, and SGLang's own proposed count is
``spec_verify_ct x (num_draft_tokens - 1)`` = S·k (section 2.1 caveat), which is also what this
adapter uses when no proposed count is given. With EAGLE tree drafting (topk > 1) that
"proposed" is the tree size, not comparable with chain rates; ``--method`` keeps such series
apart.
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
    need_k,
    opt_int,
    opt_number,
    seconds_between,
    spec_for_no_stats,
    status_of,
)
from monitor.adapters.defaults import Defaults

__all__ = ["ENGINE", "SPEC_KEYS", "accepted_from_accept_length", "spec_counts", "to_event"]

ENGINE = "sglang"
META = "meta_info"
# Newest name first: a newer build keeps the older names as aliases of the same number.
ACCEPTED_KEYS = ("spec_num_correct_drafts", "spec_accepted_drafts", "spec_accept_token_num")
PROPOSED_KEYS = ("spec_num_proposed_drafts", "spec_proposed_drafts", "spec_draft_token_num")
HISTOGRAM_KEYS = ("spec_correct_drafts_histogram", "spec_accept_histogram")
# Any of them in a meta_info: the request drafted (SGLang fills them only when S > 0).
SPEC_KEYS = ("spec_verify_ct", "spec_accept_rate", "spec_accept_length",
             *ACCEPTED_KEYS, *PROPOSED_KEYS, *HISTOGRAM_KEYS)


def to_event(raw: dict[str, Any], defaults: Defaults) -> dict[str, Any]:
    """One SGLang ``/generate`` response object as an event."""
    if not isinstance(raw, dict):
        raise AdapterError("an SGLang response must be a JSON object")
    meta = need_dict(raw, META)
    request_id = need_id(meta, "id", META)
    d = defaults.for_model(None)  # /generate does not name the model
    status = _status(meta.get("finish_reason"))
    completion = need_int(meta, "completion_tokens", META)

    received = opt_number(meta, "request_received_ts", META)
    finished = opt_number(meta, "request_finished_ts", META)
    if finished is None:
        finished = opt_number(meta, "decode_finished_ts", META)
    e2e_s = opt_number(meta, "e2e_latency", META)
    if e2e_s is None:
        if received is None or finished is None:
            raise AdapterError(f"{META}.e2e_latency: missing (and no request_received_ts/"
                               "request_finished_ts to measure it)")
        e2e_s = seconds_between(received, finished, f"{META}.request_received_ts..finished_ts")
    first_token = opt_number(meta, "prefill_finished_ts", META)
    ttft_ms = None
    if received is not None and first_token is not None:
        ttft_ms = seconds_between(received, first_token,
                                  f"{META}.request_received_ts..prefill_finished_ts") * 1000.0
    if finished is not None:
        ts: float | None = finished
    elif received is not None:
        ts = received + e2e_s
    else:
        ts = None
    return build_event(
        engine=ENGINE, defaults=d, request_id=request_id, ts=ts,
        ts_note="SGLang meta_info has no request_received_ts/request_finished_ts (older build)",
        status=status, output_tokens=completion,
        prompt_tokens=opt_int(meta, "prompt_tokens", META),
        e2e_ms=e2e_s * 1000.0, ttft_ms=ttft_ms,
        spec=_spec(meta, completion, d),
    )  # fmt: skip


def _status(finish: Any) -> str:
    path = f"{META}.finish_reason"
    if isinstance(finish, dict):
        kind = finish.get("type")
        # SGLang aborts for its own errors (prompt too long, ...) carry an HTTP status code;
        # a client going away does not.
        if kind == "abort" and finish.get("status_code") is not None:
            return "error"
        return status_of(kind, f"{path}.type")
    return status_of(finish, path)


def _first(meta: dict[str, Any], keys: tuple[str, ...]) -> tuple[str, Any]:
    for key in keys:
        if meta.get(key) is not None:
            return key, meta[key]
    return keys[0], None


def _spec(meta: dict[str, Any], completion: int, d: Defaults) -> SpecCounts | None:
    if all(meta.get(key) is None for key in SPEC_KEYS):
        return spec_for_no_stats(d)  # nothing drafted (S = 0), or speculation off
    return spec_counts(meta, completion, need_k(d))


def spec_counts(meta: dict[str, Any], completion: int, k: int) -> SpecCounts:
    """The counters of a ``meta_info`` that has spec fields (any of :data:`SPEC_KEYS`), for
    draft length ``k``: the newest field names first; proposed defaults to S x k, accepted
    comes from the count, the histogram, the rate or the accept length."""
    steps = need_int(meta, "spec_verify_ct", META)
    if steps == 0:
        return SpecCounts(k, 0, 0, 0)

    key, _ = _first(meta, PROPOSED_KEYS)
    drafted = opt_int(meta, key, META)
    if drafted is None:
        drafted = steps * k  # section 2.1: proposed = spec_verify_ct x (num_draft_tokens - 1)

    hist_key, hist = _first(meta, HISTOGRAM_KEYS)
    hist_path = f"{META}.{hist_key}"
    key, _ = _first(meta, ACCEPTED_KEYS)
    accepted = opt_int(meta, key, META)
    if accepted is None and hist is not None:
        accepted = from_histogram(hist, k, hist_path)[2]
    if accepted is None:
        rate = opt_number(meta, "spec_accept_rate", META)
        if rate is not None:
            # section 2.1: spec_accept_rate = accepted / proposed, bonus not counted
            accepted = round(rate * drafted)
        else:
            accepted = accepted_from_accept_length(
                opt_number(meta, "spec_accept_length", META), steps, completion)
    check_counts(drafted, accepted, META)
    per_position = None
    if hist is not None:
        per_position, _ = check_histogram(hist, k, hist_path, accepted, steps)
    return SpecCounts(k, drafted, accepted, steps, per_position)


def accepted_from_accept_length(length: float | None, steps: int, completion: int) -> int:
    """Accepted drafts A from SGLang's accept length L = completion_tokens / spec_verify_ct.

    Reference section 2.1: L counts the bonus token of every verify step and the first token,
    which prefill produced. So completion = 1 + sum over steps of (accepted + 1) = 1 + A + S
    and A = L·S - S - 1 (section 5.1's tau = 1 + A/S, off by that one prefill token). A stop
    condition that cuts the last step's accepted tokens makes this a lower bound; builds that
    report the accepted count directly are used before this.

    >>> accepted_from_accept_length(3.25, 8, 26)   # 26 tokens in 8 steps: 1 + 17 + 8
    17
    """
    path = f"{META}.spec_accept_length"
    tokens = completion
    if length is not None:
        tokens = round(length * steps)
        if tokens != completion:
            raise AdapterError(f"{path}: {length!r} x spec_verify_ct {steps} = {tokens} tokens, "
                               f"but completion_tokens is {completion}")
    accepted = tokens - steps - 1
    if accepted < 0:
        raise AdapterError(f"{path}: {tokens} tokens in {steps} verify steps leave no room for "
                           "one prefill token plus one bonus token per step")
    return accepted
