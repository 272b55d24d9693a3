"""Slice records from a small, known model, for the policy tests.

A slice (route, tags, batch bucket) runs at draft length ``k`` with a true survival curve;
one plain target step at its batch bucket takes ``t0`` ms and a verification step with ``k``
drafts ``t0 * (1 + k * m)``. Each hour gets ``requests`` speculative requests (and, when
``plain`` is set, that many requests without speculation on the same target and bucket), with
seeded noise on the survival (so hour clusters vary) and on the step times.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from monitor.aggregate.series import SeriesKey
from monitor.config import Config, CostModelConfig, DetectionConfig, PolicyConfig
from monitor.policy.slices import SliceKey, SliceRecord, SliceStats

T0 = 1_800_000_000 - 1_800_000_000 % 3600  # an hour boundary
HOUR = 3600
STEPS_PER_REQUEST = 40


@dataclass(frozen=True)
class Slice:
    tags: str = ""
    batch: str = "1-1"
    survival: tuple[float, ...] = (0.8, 0.6, 0.4)
    m: float = 0.1
    requests: int = 50
    plain: int = 0
    t0_ms: float = 20.0
    route: str = "code"
    target: str = "big"
    draft: str = "small"
    prompt: str = "0-255"
    temperature: str = "[0,0.01)"
    noise: float = 0.01


def series(s: Slice, k: int) -> SeriesKey:
    if k == 0:
        return SeriesKey(s.route, s.target, "r1", "tok", "", "", "", "", 0)
    return SeriesKey(s.route, s.target, "r1", "tok", s.draft, "d1", "tok", "draft_model", k)


def spec_stats(s: Slice, rng: random.Random, survival: Sequence[float]) -> SliceStats:
    n, k = s.requests, len(survival)
    st = SliceStats()
    steps = n * STEPS_PER_REQUEST
    pp = [max(0, min(steps, round(steps * min(1.0, max(0.0, p + rng.gauss(0, s.noise))))))
          for p in survival]
    for i in range(1, k):  # survival never rises along the positions
        pp[i] = min(pp[i], pp[i - 1])
    st.requests = st.drafting_requests = st.timed_requests = st.spec_timed = n
    st.verify_steps = steps
    st.per_position = pp
    st.drafted_tokens = steps * k
    st.accepted_tokens = sum(pp)
    st.output_tokens = steps + sum(pp)
    step_ms = s.t0_ms * (1.0 + k * s.m)
    for _ in range(n):
        per = step_ms * (1.0 + rng.gauss(0, 0.02))
        st.spec_step_ms += per
        st.spec_step_ms_sq += per * per
        st.decode_ms += per * STEPS_PER_REQUEST
        st.ttft_ms += 100.0
    st.e2e_ms = st.decode_ms + st.ttft_ms
    return st


def plain_stats(s: Slice, rng: random.Random) -> SliceStats:
    st = SliceStats()
    n = s.plain
    tokens = 80
    st.requests = st.timed_requests = st.plain_timed = n
    st.output_tokens = n * tokens
    for _ in range(n):
        per = s.t0_ms * (1.0 + rng.gauss(0, 0.02))
        st.plain_token_ms += per
        st.plain_token_ms_sq += per * per
        st.decode_ms += per * tokens
        st.ttft_ms += 100.0
    st.e2e_ms = st.decode_ms + st.ttft_ms
    return st


def records(slices: Sequence[Slice], hours: int, *, start_hour: int = 0, seed: int = 7,
            survival_from: dict[int, Sequence[Slice]] | None = None) -> list[SliceRecord]:
    """``hours`` hours of every slice (from ``start_hour``); ``survival_from`` swaps in other
    slice definitions from a given hour on (a slice whose acceptance moves)."""
    rng = random.Random(seed)
    out = []
    for h in range(start_hour, start_hour + hours):
        current = slices
        for since, replacement in sorted((survival_from or {}).items()):
            if h >= since:
                current = replacement
        for s in current:
            key = SliceKey(s.batch, s.prompt, s.temperature, s.tags)
            ts = T0 + h * HOUR
            out.append(SliceRecord(ts, series(s, len(s.survival)), key,
                                   spec_stats(s, rng, s.survival)))
            if s.plain:
                out.append(SliceRecord(ts, series(s, 0), key, plain_stats(s, rng)))
    return out


def make_config(*, cost: dict[str, Any] | None = None, **policy: Any) -> Config:
    """A config with ``policy`` overrides (``min_requests`` 100) and, when given, one cost
    model for every pair."""
    models = () if cost is None else (CostModelConfig(**cost),)
    return Config(policy=PolicyConfig(**{"min_requests": 100, **policy}),
                  detection=DetectionConfig(cost_models=models))
