"""A corpus of bad telemetry messages, shared by the parser tests and the pipeline tests.

Each entry is one whole message with how many events in it must still count, how many
rejections it must produce and a substring every rejection reason must contain
(case-insensitive).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import orjson

__all__ = ["DROP", "BadInput", "bad_input_corpus", "valid_event"]

DROP: Any = object()
"""An override value that removes the field: ``valid_event(e2e_ms=DROP)``."""

_ids = itertools.count()


@dataclass(frozen=True)
class BadInput:
    name: str  # short id, e.g. "truncated_json"
    message: bytes  # one whole message
    valid_events: int  # events in the message that must still be counted
    invalid: int  # Rejections expected from this message
    reason_contains: str  # a substring every Rejection reason for it must contain


def valid_event(**overrides: Any) -> dict[str, Any]:
    """A valid event like the spec's example (~560 bytes), with a fresh ``request_id``.

    A key may be a dotted path into the nested objects (``**{"spec.drafted_tokens": 5}``);
    the value ``DROP`` removes the field.

    >>> e = valid_event(route="chat", **{"spec.method": "eagle", "draft": DROP})
    >>> e["route"], e["spec"]["method"], "draft" in e
    ('chat', 'eagle', False)
    >>> valid_event()["request_id"] != valid_event()["request_id"]
    True
    """
    event: dict[str, Any] = {
        "request_id": f"r-{next(_ids):08d}",
        "ts": "2026-11-02T14:03:07.412Z",
        "route": "code-assistant",
        "status": "ok",
        "target": {"model": "llama-3.1-70b-instruct", "revision": "2026-10-28",
                   "tokenizer": "llama3"},
        "draft": {"model": "llama-3.2-1b-instruct", "revision": "2026-09-30",
                  "tokenizer": "llama3", "pinned_target_revision": "2026-09-15"},
        "spec": {"num_speculative_tokens": 5, "drafted_tokens": 240, "accepted_tokens": 171,
                 "verify_steps": 48, "accepted_per_position": [44, 39, 34, 29, 25]},
        "prompt_tokens": 812, "output_tokens": 219, "ttft_ms": 142.0, "e2e_ms": 2311.5,
        "batch_size": 12, "instance": "pod-3", "engine": "vllm",
    }  # fmt: skip
    for key, value in overrides.items():
        *parents, leaf = key.split(".")
        node = event
        for part in parents:
            node = node[part]
        if value is DROP:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return event


def _dumps(event: dict[str, Any]) -> bytes:
    return orjson.dumps(event)


def _with_literal(literal: bytes, field: str) -> bytes:
    """A valid event whose ``field`` holds raw JSON text orjson would never write (NaN, ...)."""
    marker = "__literal__"
    return _dumps(valid_event(**{field: marker})).replace(f'"{marker}"'.encode(), literal)


def _lines(*parts: bytes) -> bytes:
    return b"\n".join(parts) + b"\n"


def _too_large(max_message_bytes: int) -> bytes:
    # valid-looking JSON (a batch of good events), just too big
    size = max(10 << 20, max_message_bytes + 1)
    template = _dumps(valid_event(request_id="r-XXXXXXXXXX"))
    count = size // (len(template) + 1) + 1
    return b"[" + b",".join(
        template.replace(b"r-XXXXXXXXXX", b"r-%010d" % i) for i in range(count)
    ) + b"]"


def bad_input_corpus(max_message_bytes: int = 1 << 20) -> list[BadInput]:
    """Every kind of bad message the parser must survive (more than 35 kinds)."""
    good = _dumps(valid_event())
    e = valid_event

    def one(name: str, event: dict[str, Any], reason: str) -> BadInput:
        return BadInput(name, _dumps(event), 0, 1, reason)

    corpus = [
        # --- not JSON at all ---
        BadInput("truncated_json", good[: len(good) // 2], 0, 1, "invalid JSON"),
        BadInput("truncated_batch", b"[" + good + b"," + good[:40], 0, 1, "invalid JSON"),
        BadInput("not_json_text", b"request finished ok", 0, 1, "invalid JSON"),
        BadInput("truncated_pretty_printed",
                 orjson.dumps(valid_event(), option=orjson.OPT_INDENT_2)[:-60], 0, 1,
                 "invalid JSON"),
        BadInput("invalid_utf8_multiline", b'{"route":\n "\xff"}', 0, 1, "invalid UTF-8"),
        BadInput("nan_literal", _with_literal(b"NaN", "e2e_ms"), 0, 1, "invalid JSON"),
        BadInput("infinity_literal", _with_literal(b"Infinity", "ttft_ms"), 0, 1,
                 "invalid JSON"),
        BadInput("overflow_1e999", _with_literal(b"1e999", "e2e_ms"), 0, 1, "invalid JSON"),
        BadInput("lone_surrogate_escape", _with_literal(b'"\\ud800"', "route"), 0, 1,
                 "invalid JSON"),
        BadInput("utf8_bom", b"\xef\xbb\xbf" + good, 0, 1, "invalid JSON"),
        BadInput("invalid_utf8", good.replace(b"code-assistant", b"code-\xff\xfeassistant"),
                 0, 1, "invalid UTF-8"),
        BadInput("utf8_encoded_surrogate", good.replace(b"pod-3", b"pod-\xed\xa0\x80"), 0, 1,
                 "invalid UTF-8"),
        BadInput("deeply_nested_arrays", b"[" * 5000 + b"]" * 5000, 0, 1, "nesting too deep"),
        BadInput("deeply_nested_extra_field",
                 _with_literal(b"[" * 2000 + b"]" * 2000, "extra"), 0, 1, "nesting too deep"),
        BadInput("message_too_large_10mb", _too_large(max_message_bytes), 0, 1,
                 "message too large"),
        # --- JSON, but not an event container ---
        BadInput("empty_message", b"", 0, 1, "empty message"),
        BadInput("whitespace_only", b" \t\r\n  \n", 0, 1, "empty message"),
        BadInput("json_number", b"42", 0, 1, "must be a JSON object or array"),
        BadInput("json_string", b'"r-000017"', 0, 1, "must be a JSON object or array"),
        BadInput("json_null", b"null", 0, 1, "must be a JSON object or array"),
        BadInput("json_bool", b"true", 0, 1, "must be a JSON object or array"),
        BadInput("batch_of_scalars", b'[1, "two", null]', 0, 3, "must be a JSON object"),
        # --- batches and JSON lines: the good parts still count ---
        BadInput("batch_mixed",
                 orjson.dumps([e(), e(e2e_ms=DROP), e(), e(), e(route=DROP)]), 3, 2,
                 "missing required field"),
        BadInput("batch_nested_array_element", orjson.dumps([e(), [e()], e()]), 2, 1,
                 "must be a JSON object"),
        BadInput("jsonl_truncated_line",
                 _lines(_dumps(e()), _dumps(e())[:30], _dumps(e()), _dumps(e())), 3, 1,
                 "invalid JSON"),
        BadInput("jsonl_bad_event_line",
                 _lines(_dumps(e()), _dumps(e(**{"spec.accepted_tokens": 250})), _dumps(e())),
                 2, 1, "> spec.drafted_tokens"),
        BadInput("jsonl_invalid_utf8_line", _lines(_dumps(e()), b'{"route": "\xc3("}'), 1, 1,
                 "invalid UTF-8"),
        BadInput("jsonl_batch_line_with_bad_element",
                 _lines(_dumps(e()), orjson.dumps([e(), e(output_tokens=-1)])), 2, 1,
                 "output_tokens must be >= 0"),
        BadInput("jsonl_scalar_line", _lines(_dumps(e()), b"17"), 1, 1,
                 "must be a JSON object or array"),
        # --- missing required fields (and null for a required field) ---
        *(
            one(f"missing_{field.replace('.', '_')}", e(**{field: DROP}),
                f"missing required field: {field}")
            for field in ("request_id", "ts", "route", "target", "target.model",
                          "target.revision", "target.tokenizer", "output_tokens", "e2e_ms")
        ),
        one("null_required_e2e_ms", e(e2e_ms=None), "missing required field: e2e_ms"),
        one("draft_without_model", e(**{"draft.model": DROP}),
            "missing required field: draft.model"),
        one("spec_without_num_speculative_tokens", e(**{"spec.num_speculative_tokens": DROP}),
            "missing required field: spec.num_speculative_tokens"),
        one("spec_without_drafted_tokens", e(**{"spec.drafted_tokens": DROP}),
            "missing required field: spec.drafted_tokens"),
        # --- wrong types ---
        one("string_for_count", e(output_tokens="219"), "output_tokens must be an integer"),
        one("number_for_route", e(route=42), "route must be a string"),
        one("number_for_request_id", e(request_id=17), "request_id must be a string"),
        one("object_for_ts", e(ts={"seconds": 1793628187}), "ts must be an RFC 3339 string"),
        one("bool_for_ts", e(ts=True), "ts must be an RFC 3339 string"),
        one("string_for_target", e(target="llama-3.1-70b-instruct"), "target must be an object"),
        one("number_for_target_model", e(**{"target.model": 7}),
            "target.model must be a string"),
        one("string_for_e2e_ms", e(e2e_ms="2311.5"), "e2e_ms must be a number"),
        one("array_for_spec", e(spec=[5, 240, 171]), "spec must be an object"),
        one("string_for_draft", e(draft="llama-3.2-1b-instruct"), "draft must be an object"),
        one("bool_for_int", e(output_tokens=True), "output_tokens must be an integer"),
        one("bool_for_drafted", e(**{"spec.drafted_tokens": False}),
            "spec.drafted_tokens must be an integer"),
        one("float_for_int", e(**{"spec.drafted_tokens": 240.0}),
            "spec.drafted_tokens must be an integer"),
        one("string_for_draft_evicted", e(draft_evicted="yes"), "draft_evicted must be a boolean"),
        one("object_for_params", e(**{"spec.params": "k=3"}), "spec.params must be an object"),
        one("number_for_method", e(**{"spec.method": 3}), "spec.method must be a string"),
        # --- non-finite numbers smuggled in as strings ---
        one("nan_string", e(e2e_ms="NaN"), "e2e_ms must be a number"),
        one("infinity_string", e(ttft_ms="Infinity"), "ttft_ms must be a number"),
        # --- out of range ---
        one("negative_output_tokens", e(output_tokens=-1), "output_tokens must be >= 0"),
        one("negative_drafted", e(**{"spec.drafted_tokens": -240, "spec.accepted_tokens": 0,
                                     "spec.accepted_per_position": DROP}),
            "spec.drafted_tokens must be >= 0"),
        one("negative_e2e_ms", e(e2e_ms=-0.5, ttft_ms=DROP), "e2e_ms must be >= 0"),
        one("negative_verify_steps", e(**{"spec.verify_steps": -1}), "must be >= 0"),
        one("negative_temperature", e(temperature=-0.1), "temperature must be >= 0"),
        one("zero_batch_size", e(batch_size=0), "batch_size must be >= 1"),
        one("accepted_gt_drafted", e(**{"spec.accepted_tokens": 250}),
            "spec.accepted_tokens (250) > spec.drafted_tokens (240)"),
        one("huge_count_1e30", e(output_tokens=1e30), "huge number"),
        one("huge_int_count", e(prompt_tokens=10**15), "huge number"),
        one("huge_u64_count", e(**{"spec.verify_steps": 2**64 - 1}), "huge number"),
        one("huge_ms", e(e2e_ms=1e300), "huge number"),
        one("ts_year_9999", e(ts="9999-12-31T23:59:59Z"), "outside [2000-01-01, 2100-01-01)"),
        one("ts_huge_number", e(ts=1e30), "outside [2000-01-01, 2100-01-01)"),
        one("ts_before_2000", e(ts=0), "outside [2000-01-01, 2100-01-01)"),
        one("num_speculative_tokens_zero",
            e(**{"spec.num_speculative_tokens": 0, "spec.accepted_per_position": DROP}),
            "spec.num_speculative_tokens must be >= 1"),
        one("num_speculative_tokens_65",
            e(**{"spec.num_speculative_tokens": 65, "spec.accepted_per_position": DROP}),
            "spec.num_speculative_tokens must be <= 64"),
        one("ttft_gt_e2e", e(ttft_ms=3000.0), "ttft_ms (3000.0) > e2e_ms (2311.5)"),
        # --- strings ---
        one("empty_request_id", e(request_id=""), "request_id must be 1..128 characters"),
        one("long_request_id", e(request_id="r" * 129), "request_id must be 1..128 characters"),
        one("long_route", e(route="é" * 129), "route must be 1..128 characters"),
        one("empty_target_model", e(**{"target.model": ""}), "target.model must be 1..256"),
        one("long_instance", e(instance="p" * 257), "instance must be at most 256"),
        one("status_not_in_enum", e(status="success"), "status must be one of"),
        one("status_wrong_case", e(status="OK"), "status must be one of"),
        # --- unreadable ts ---
        *(
            one(f"ts_{name}", e(ts=text), "ts: cannot read")
            for name, text in (
                ("date_only", "2026-11-02"),
                ("naive_time", "2026-11-02T14:03:07"),
                ("naive_fraction", "2026-11-02T14:03:07.412"),
                ("word", "yesterday"),
                ("bad_month_day", "2026-13-45T00:00:00Z"),
                ("bad_day", "2026-02-30T00:00:00Z"),
                ("compact_offset", "2026-11-02T14:03:07+0530"),
                ("hours_only_offset", "2026-11-02T14:03:07+05"),
                ("no_seconds", "2026-11-02T14:03Z"),
                ("comma_fraction", "2026-11-02T14:03:07,412Z"),
                ("empty_fraction", "2026-11-02T14:03:07.Z"),
                ("week_date", "2026-W44-1T14:03:07Z"),
                ("basic_format", "20261102T140307Z"),
                ("numeric_string", "1793628187"),
                ("empty", ""),
                ("offset_out_of_range", "2026-11-02T14:03:07+25:00"),
                ("arabic_digits", "٢٠٢٦-11-02T14:03:07Z"),
            )
        ),
        # --- accepted_per_position ---
        one("per_position_wrong_length", e(**{"spec.accepted_per_position": [44, 39, 34, 54]}),
            "spec.accepted_per_position has 4 entries"),
        one("per_position_wrong_sum", e(**{"spec.accepted_per_position": [44, 39, 34, 29, 24]}),
            "spec.accepted_per_position sums to 170"),
        one("per_position_negative", e(**{"spec.accepted_per_position": [44, 39, -1, 29, 60]}),
            "spec.accepted_per_position[2] must be >= 0"),
        one("per_position_bool", e(**{"spec.accepted_per_position": [44, 39, 34, 29, True]}),
            "spec.accepted_per_position[4] must be an integer"),
        one("per_position_not_array", e(**{"spec.accepted_per_position": "44,39"}),
            "spec.accepted_per_position must be an array"),
        # --- v1.1 optional fields ---
        one("tags_not_object", e(tags=["lang=py"]), "tags must be an object"),
        one("tags_17_keys", e(tags={f"k{i}": "v" for i in range(17)}), "tags has 17 keys"),
        one("tags_number_value", e(tags={"lang": 3}), "tags['lang'] must be a string"),
        one("outcome_string_ok", e(outcome={"ok": "true"}), "outcome.ok must be a boolean"),
        one("outcome_not_object", e(outcome=True), "outcome must be an object"),
        one("experiment_without_arm", e(experiment={"name": "exp-1"}),
            "missing required field: experiment.arm"),
        one("itl_negative_p99", e(itl_ms={"p50": 1.0, "p99": -2.0, "max": 3.0}),
            "itl_ms.p99 must be >= 0"),
        one("itl_without_max", e(itl_ms={"p50": 1.0, "p99": 2.0}),
            "missing required field: itl_ms.max"),
        one("negative_gpu_seconds", e(gpu_seconds=-0.5), "gpu_seconds must be >= 0"),
        one("nan_string_gpu_seconds", e(gpu_seconds="NaN"), "gpu_seconds must be a number"),
        one("empty_prompt_hash", e(prompt_hash=""), "prompt_hash must be 1..128 characters"),
        one("long_output_hash", e(output_hash="f" * 129),
            "output_hash must be 1..128 characters"),
        BadInput("itl_nan_literal", _with_literal(b'{"p50":NaN,"p99":1,"max":1}', "itl_ms"), 0,
                 1, "invalid JSON"),
    ]
    return corpus
