"""Telemetry v1.1 fields of simulated requests: outcome, GPU-seconds, inter-token gaps, hashes.

Drawn on a stream of their own with the same amount of randomness per request whatever the
parameters, so turning them on or switching arms never changes the v1 fields of a request.

- ``outcome`` is reported on status ``ok`` only, for the outcomes the route's profile names
  (an errored request has no verdict: its status already makes it a failed task).
- ``gpu_seconds`` = e2e x GPUs per replica / batch size: the request's share of its replica's
  time. Routes whose profile says ``reports_gpu_seconds=False`` leave it out.
- ``itl_ms`` is the gap between streamed chunks. A speculative engine streams one chunk per
  verify step (accepted tokens plus the bonus token), so the gap is one step of the target
  with its draft overhead; without drafting, one token per step. Requests with fewer than two
  chunks have no gap.
- ``prompt_hash`` / ``output_hash`` on greedy routes only. A request's prompt is its own (a
  hash of seed, route and its index on the route); the output hash depends only on the
  prompt and the target model and revision: the simulated verifier is lossless, unless a
  ``lossy_verifier`` incident makes a share of speculative outputs differ.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from monitor.simulate.effects import Conditions
from monitor.simulate.model import STATUSES, Requests
from monitor.simulate.profiles import RouteProfile, TargetModel

_DRAWS = 6  # uniforms per request: schema, tools, ok, itl p50, itl p99, itl max
_U_SHADOW, _U_MISMATCH = 6, 7
_OK = STATUSES.index("ok")


def digest(text: str) -> str:
    """A 32-hex-character hash (what a producer would send as prompt or output hash).

    >>> digest("hello")
    '46fb7408d4f285228f4af516ea25851b'
    """
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def output_hash(target: TargetModel, prompt_hash: str) -> str:
    """The greedy output of ``target`` for a prompt: the same with speculation on or off."""
    return digest(f"out:{target.model}@{target.revision}:{prompt_hash}")


@dataclass
class Draws:
    """The v1.1 randomness of n requests (n x 8 uniforms, in a fixed order)."""

    u: np.ndarray

    @classmethod
    def take(cls, rng: np.random.Generator, n: int) -> Draws:
        return cls(rng.random((n, _DRAWS + 2)))

    def shadowed(self, share: float) -> np.ndarray:
        return np.asarray(self.u[:, _U_SHADOW] < share)

    def mismatched(self, share: np.ndarray) -> np.ndarray:
        return np.asarray(self.u[:, _U_MISMATCH] < share)


def outcomes(
    route: RouteProfile,
    req: Requests,
    draws: Draws,
    candidate: np.ndarray | None,
    candidate_outcomes: Mapping[str, float],
) -> list[dict[str, bool] | None]:
    """``outcome`` of each request (None: not reported).

    ``schema_valid`` and ``tool_calls_valid`` are probabilities on their own, tool calls
    valid only on valid JSON; ``ok`` needs every other reported outcome true (see
    :meth:`RouteProfile.outcome_probability`). The candidate arm uses its own probabilities.
    """
    n = len(req.status)
    names = [o for o in ("schema_valid", "tool_calls_valid", "ok") if o in route.outcomes]
    if not names:
        return [None] * n
    base = dict(route.outcomes)
    cand = {**base, **candidate_outcomes}

    def prob(name: str) -> np.ndarray:
        p = np.full(n, float(base[name]))
        if candidate is not None:
            p[candidate] = float(cand[name])
        return p

    u = draws.u
    valid = np.ones(n, dtype=bool)
    columns: dict[str, np.ndarray] = {}
    if "schema_valid" in names:
        columns["schema_valid"] = valid = u[:, 0] < prob("schema_valid")
    if "tool_calls_valid" in names:
        p_tools = prob("tool_calls_valid")
        if "schema_valid" in names:
            # P(tools) = P(schema) x P(tools | schema): tool calls can't be valid in broken JSON
            p_schema = prob("schema_valid")
            p_tools = np.divide(p_tools, p_schema, out=np.zeros(n), where=p_schema > 0)
        columns["tool_calls_valid"] = valid = valid & (u[:, 1] < p_tools)
    if "ok" in names:
        columns["ok"] = valid & (u[:, 2] < prob("ok"))
    reported = (req.status == _OK).tolist()
    rows = zip(*(columns[name].tolist() for name in names), strict=True)
    return [
        dict(zip(names, row, strict=True)) if ok else None
        for ok, row in zip(reported, rows, strict=True)
    ]


def gpu_seconds(route: RouteProfile, e2e_ms: np.ndarray, batch: np.ndarray) -> list[float | None]:
    if not route.reports_gpu_seconds:
        return [None] * len(e2e_ms)
    return np.round(e2e_ms / 1000.0 * route.gpus / batch, 6).tolist()


def itl_ms(req: Requests, draws: Draws) -> list[dict[str, float] | None]:
    """Per-request p50, p99 and max of the gaps between streamed chunks."""
    chunks = np.where(req.drafting, req.verify_steps, req.output_tokens)
    gap = req.step_ms * np.where(req.drafting, req.spec_cost, 1.0)
    u = draws.u
    # p50 near the step time; the tail from batch changes and preemptions (exponential)
    p50 = gap * (0.97 + 0.06 * u[:, 3])
    p99 = p50 * (1.2 - 0.4 * np.log1p(-u[:, 4]))
    top = p99 * (1.0 - 0.5 * np.log1p(-u[:, 5]))
    rows = zip(
        (chunks >= 2).tolist(),
        np.round(p50, 2).tolist(),
        np.round(p99, 2).tolist(),
        np.round(top, 2).tolist(),
        strict=True,
    )
    return [{"p50": a, "p99": b, "max": c} if has else None for has, a, b, c in rows]


def hashes(
    route: RouteProfile,
    req: Requests,
    cond: Conditions,
    draws: Draws,
    targets: list[TargetModel],
    keys: range,
    salt: str,
) -> tuple[list[str | None], list[str | None], list[str | None]]:
    """(prompt hash, output hash, the target's own output hash) per request; Nones when the
    route samples (temperature > 0).

    The third list is what a non-speculative run of the same prompt returns: equal to the
    output hash except where ``lossy_verifier`` changed a speculative output.
    """
    n = len(req.status)
    if route.temperature != 0:
        none: list[str | None] = [None] * n
        return none, none, none
    wrong = (req.drafting & (req.accepted > 0) & draws.mismatched(cond.mismatch)).tolist()
    prompts: list[str | None] = []
    outputs: list[str | None] = []
    truths: list[str | None] = []
    for key, target, bad in zip(keys, targets, wrong, strict=True):
        prompt = digest(f"prompt:{salt}:{route.name}:{key}")
        truth = output_hash(target, prompt)
        prompts.append(prompt)
        truths.append(truth)
        outputs.append(digest(f"lossy:{truth}") if bad else truth)
    return prompts, outputs, truths


def shadow_event(
    event: dict[str, Any],
    route: RouteProfile,
    e2e_ms: float,
    gap_ms: float,
    truth: str,
    instance: str,
) -> dict[str, Any]:
    """The non-speculative twin of a greedy request (``ts`` and ``request_id`` left to fill).

    It has the same prompt, target and output length, no ``draft``, ``spec`` or
    ``experiment``, and the tag ``shadow=true`` (the proxy knows before it sends it).
    """
    twin: dict[str, Any] = {
        "request_id": "",
        "ts": "",
        "route": event["route"],
        "status": "ok",
        "target": dict(event["target"]),
        "prompt_tokens": event["prompt_tokens"],
        "output_tokens": event["output_tokens"],
        "ttft_ms": event["ttft_ms"],
        "e2e_ms": e2e_ms,
        "batch_size": event["batch_size"],
        "instance": instance,
        "engine": event["engine"],
        "temperature": event["temperature"],
        "tags": {**event.get("tags", {}), "shadow": "true"},
    }
    if route.reports_gpu_seconds:
        twin["gpu_seconds"] = round(e2e_ms / 1000.0 * route.gpus / event["batch_size"], 6)
    if event["output_tokens"] >= 2:
        twin["itl_ms"] = {"p50": round(gap_ms, 2), "p99": round(gap_ms * 1.3, 2),
                          "max": round(gap_ms * 1.8, 2)}
    twin["prompt_hash"] = event["prompt_hash"]
    twin["output_hash"] = truth
    return twin
