"""Hand-built sides for the gate's tests: per route, per-request draws summed into a
BucketStats the way the pipeline's rollups sum them (seeded numpy, no store)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from monitor.aggregate.bucket import BucketStats
from monitor.gate import GateSides

__all__ = ["Arm", "add_requests", "bucket", "sides"]


@dataclass(frozen=True, slots=True)
class Arm:
    """How one arm serves one route: per-request probabilities and GPU-seconds."""

    p_success: float = 0.8
    gpu_mean: float = 1.0  # gamma with shape 4: the GPU-seconds of a request
    p_error: float = 0.01
    p_tool_valid: float | None = None  # None: the route reports no tool calls
    p_schema_valid: float | None = None
    e2e_ms: float = 1000.0  # median of a lognormal (sigma 0.3)
    acceptance: float | None = None  # draft acceptance, for the record only


def add_requests(b: BucketStats, arm: Arm, n: int, rng: np.random.Generator) -> None:
    """``n`` more requests of ``arm`` summed into ``b`` (outcome ok reported by all)."""
    if n <= 0:
        return
    success = rng.random(n) < arm.p_success
    g = rng.gamma(4.0, arm.gpu_mean / 4.0, n)
    b.requests += n
    b.errors += int((rng.random(n) < arm.p_error).sum())
    b.successes += int(success.sum())
    b.outcome_ok_reported += n
    b.outcome_ok_true += int(success.sum())
    b.gpu_reported_requests += n
    b.gpu_seconds += float(g.sum())
    b.gpu_seconds_sq += float((g * g).sum())
    b.success_gpu_seconds += float(g[success].sum())
    if arm.p_tool_valid is not None:
        b.tool_calls_valid_reported += n
        b.tool_calls_valid_true += int((rng.random(n) < arm.p_tool_valid).sum())
    if arm.p_schema_valid is not None:
        b.schema_valid_reported += n
        b.schema_valid_true += int((rng.random(n) < arm.p_schema_valid).sum())
    if arm.acceptance is not None:
        drafted = 8 * n
        b.spec_requests += n
        b.drafting_requests += n
        b.drafted_tokens += drafted
        b.accepted_tokens += int(rng.binomial(drafted, arm.acceptance))
    b.e2e_ms.extend((arm.e2e_ms * rng.lognormal(0.0, 0.3, n)).tolist())


def bucket(arm: Arm, n: int, rng: np.random.Generator) -> BucketStats:
    b = BucketStats()
    add_requests(b, arm, n, rng)
    return b


def sides(baseline: Mapping[str, tuple[Arm, int]], candidate: Mapping[str, tuple[Arm, int]],
          seed: int = 0, name: str = "test") -> GateSides:
    rng = np.random.default_rng(seed)
    return GateSides("experiment", name,
                     {r: bucket(a, n, rng) for r, (a, n) in baseline.items()},
                     {r: bucket(a, n, rng) for r, (a, n) in candidate.items()})


def scaled(b: BucketStats, k: float, *, gpu: float = 1.0) -> BucketStats:
    """``b`` as if ``k`` times as many requests had come at exactly the same rates and
    latencies (the estimates stay, the variances fall by ``k``); ``gpu`` scales each
    request's GPU-seconds."""
    from monitor.aggregate.bucket import COUNTERS, SKETCHES

    out = BucketStats()
    for name in COUNTERS:
        setattr(out, name, round(getattr(b, name) * k))
    out.gpu_seconds = b.gpu_seconds * k * gpu
    out.gpu_seconds_sq = b.gpu_seconds_sq * k * gpu * gpu
    out.success_gpu_seconds = b.success_gpu_seconds * k * gpu
    for name in SKETCHES:
        src, dst = getattr(b, name), getattr(out, name)
        dst.bins = {key: round(n * k) for key, n in src.bins.items()}
        dst.zeros = round(src.zeros * k)
        dst.count = sum(dst.bins.values()) + dst.zeros
        dst.total = src.total * k
    return out
