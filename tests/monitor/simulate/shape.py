"""Checks and helpers shared by the simulator tests (telemetry v1 as in shared/spec)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import orjson

TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
STATUSES = {"ok", "error", "timeout", "cancelled"}


def _int(value: Any, low: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _number(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )


def _model(obj: Any, draft: bool) -> None:
    assert isinstance(obj, dict)
    keys = {"model", "revision", "tokenizer"} | ({"pinned_target_revision"} if draft else set())
    assert {"model", "revision", "tokenizer"} <= set(obj) <= keys, obj
    assert all(isinstance(v, str) and v for v in obj.values()), obj


def check_event(e: dict[str, Any]) -> None:
    """Assert that ``e`` is a valid telemetry v1 event with consistent counters.

    v1.1 fields are checked where present; a shadow request (tag ``shadow=true``) and a
    request of the policy scenario served without speculation have no ``spec`` and no
    ``draft``.
    """
    assert orjson.loads(orjson.dumps(e)) == e  # plain JSON values only
    assert isinstance(e["request_id"], str) and 1 <= len(e["request_id"]) <= 128
    assert isinstance(e["ts"], str) and TS.match(e["ts"]), e["ts"]
    assert isinstance(e["route"], str) and 1 <= len(e["route"]) <= 128
    assert e["status"] in STATUSES
    _model(e["target"], draft=False)
    check_v11(e)
    if "spec" not in e:
        if e.get("tags", {}).get("shadow") == "true":
            _check_shadow(e)
        else:
            _check_plain(e)
        return
    if "draft" in e:
        _model(e["draft"], draft=True)
        assert isinstance(e["draft_evicted"], bool)
    spec = e["spec"]
    k = spec["num_speculative_tokens"]
    assert _int(k, 1)
    drafted, accepted, steps = spec["drafted_tokens"], spec["accepted_tokens"], spec["verify_steps"]
    assert _int(drafted) and _int(accepted) and _int(steps)
    assert accepted <= drafted
    per_pos = spec["accepted_per_position"]
    assert isinstance(per_pos, list) and len(per_pos) == k and all(_int(x) for x in per_pos)
    assert sum(per_pos) == accepted
    # draft steps accept a prefix: survivors can only shrink along the positions
    assert all(a >= b for a, b in zip([steps, *per_pos], per_pos, strict=False)), (steps, per_pos)
    assert drafted == k * steps
    assert isinstance(spec["method"], str)
    assert _int(e["output_tokens"]) and _int(e["prompt_tokens"])
    if drafted:
        assert e["output_tokens"] == steps + accepted  # each step emits its accepted + a bonus
    assert _number(e["ttft_ms"]) and _number(e["e2e_ms"])
    assert e["ttft_ms"] <= e["e2e_ms"]
    assert _int(e["batch_size"], 1)
    assert isinstance(e["instance"], str) and re.fullmatch(r"pod-\d+", e["instance"])
    assert e["engine"] == "vllm"
    assert e["temperature"] in (0.0, 0.7)


V11_KEYS = {"tags", "outcome", "experiment", "itl_ms", "gpu_seconds", "prompt_hash",
            "output_hash"}


def check_v11(e: dict[str, Any]) -> None:
    """The telemetry v1.1 fields of ``e`` that are present have the spec's types."""
    if "tags" in e:
        tags = e["tags"]
        assert isinstance(tags, dict) and len(tags) <= 16
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in tags.items())
    if "outcome" in e:
        outcome = e["outcome"]
        assert isinstance(outcome, dict) and outcome
        assert set(outcome) <= {"ok", "schema_valid", "tool_calls_valid"}
        assert all(isinstance(v, bool) for v in outcome.values())
    if "experiment" in e:
        exp = e["experiment"]
        assert set(exp) == {"name", "arm"} and isinstance(exp["name"], str) and exp["name"]
        assert exp["arm"] in ("baseline", "candidate")
    if "gpu_seconds" in e:
        assert _number(e["gpu_seconds"])
    if "itl_ms" in e:
        itl = e["itl_ms"]
        assert set(itl) == {"p50", "p99", "max"} and all(_number(v) for v in itl.values())
        assert itl["p50"] <= itl["p99"] <= itl["max"]
    assert ("prompt_hash" in e) == ("output_hash" in e)
    for key in ("prompt_hash", "output_hash"):
        if key in e:
            assert isinstance(e[key], str) and 1 <= len(e[key]) <= 128


def _check_plain(e: dict[str, Any]) -> None:
    """A request served without speculation (policy scenario): no draft, one step a token."""
    assert "draft" not in e and "draft_evicted" not in e and "experiment" not in e
    assert re.fullmatch(r"pod-\d+", e["instance"]) and e["engine"] == "vllm"
    assert _number(e["ttft_ms"]) and _number(e["e2e_ms"]) and e["ttft_ms"] <= e["e2e_ms"]
    assert _int(e["output_tokens"]) and _int(e["prompt_tokens"]) and _int(e["batch_size"], 1)
    assert e["temperature"] in (0.0, 0.7)


def _check_shadow(e: dict[str, Any]) -> None:
    assert "draft" not in e and "experiment" not in e and "outcome" not in e
    assert e["tags"]["shadow"] == "true" and re.fullmatch(r"shadow-\d+", e["instance"])
    assert e["temperature"] == 0.0 and e["status"] == "ok" and "prompt_hash" in e
    assert _number(e["ttft_ms"]) and _number(e["e2e_ms"]) and e["ttft_ms"] <= e["e2e_ms"]
    assert _int(e["output_tokens"]) and _int(e["prompt_tokens"]) and _int(e["batch_size"], 1)


def ts_of(e: dict[str, Any]) -> float:
    return datetime.fromisoformat(e["ts"]).timestamp()


def rate(events: Iterable[dict[str, Any]]) -> float:
    """Pooled acceptance: sum(accepted) / sum(drafted)."""
    a = d = 0
    for e in events:
        a += e["spec"]["accepted_tokens"]
        d += e["spec"]["drafted_tokens"]
    return a / d


def throughput(e: dict[str, Any]) -> float:
    return e["output_tokens"] / ((e["e2e_ms"] - e["ttft_ms"]) / 1000)
