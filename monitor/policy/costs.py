"""The marginal cost per drafted position ``m = c + v``, per (target model, target revision,
draft model, batch-size bucket): measured where it can be, configured where not, else the
default break-even cutoff.

A verification step with ``k`` drafts costs ``t0 * (1 + k m)``, where ``t0`` is one plain
decode step of the target at that batch size. Where, on the same target and in the same batch
bucket, requests with speculation (mean decode time per verification step ``S``) and without
(mean decode time per output token ``P``) were both timed often enough, ``m = (S / P - 1) /
k̄`` (``k̄``: the request-weighted mean draft length of the speculative requests), with a
delta-method interval from the per-request variances of ``S`` and ``P``.

>>> from statistics import NormalDist
>>> est = measured_cost(spec=(100, 130.0 * 100, 130.0**2 * 100 + 99 * 4.0), plain=(
...     100, 100.0 * 100, 100.0**2 * 100 + 99 * 4.0), k_mean=3.0, z=1.645)
>>> round(est[0], 3), [round(x, 3) for x in est[1]]
(0.1, [0.098, 0.102])
"""

from __future__ import annotations

import fnmatch
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from monitor.config import Config, CostModelConfig
from monitor.detect.breakeven import DEFAULT_CUTOFF
from monitor.policy.features import Buckets
from monitor.policy.result import CostEstimate
from monitor.policy.slices import SliceRecord

__all__ = ["MIN_TIMED", "CostTable", "configured_cost", "measured_cost"]

MIN_TIMED = 30
"""Timed requests needed on each side (with and without speculation) to measure ``m``."""

CostKey = tuple[str, str, str, str]  # target_model, target_revision, draft_model, batch


def measured_cost(spec: tuple[int, float, float], plain: tuple[int, float, float],
                  k_mean: float, z: float) -> tuple[float, tuple[float, float]]:
    """``m`` and its interval from ``(n, sum, sum of squares)`` of the per-request step times
    with speculation and the per-token times without, clamped at 0."""
    n_s, s_sum, s_sq = spec
    n_p, p_sum, p_sq = plain
    s_mean, p_mean = s_sum / n_s, p_sum / n_p
    var_s = max(0.0, (s_sq - n_s * s_mean * s_mean) / (n_s - 1)) / n_s
    var_p = max(0.0, (p_sq - n_p * p_mean * p_mean) / (n_p - 1)) / n_p
    ratio = s_mean / p_mean
    # delta method: var(S/P) ~ (S/P)^2 (var S / S^2 + var P / P^2)
    se_ratio = ratio * math.sqrt(var_s / s_mean**2 + var_p / p_mean**2)
    m = (ratio - 1.0) / k_mean
    half = z * se_ratio / k_mean
    return max(0.0, m), (max(0.0, m - half), max(0.0, m + half))


def configured_cost(models: Iterable[CostModelConfig], target_model: str, draft_model: str,
                    batch_lo: int) -> float | None:
    """``c + v_at(batch_lo)`` of the first configured cost model matching the pair.

    >>> cm = CostModelConfig(target_model="llama-*", c=0.05, v_by_batch={1: 0.0, 64: 0.3})
    >>> configured_cost([cm], "llama-70b", "llama-1b", 1)
    0.05
    >>> configured_cost([cm], "llama-70b", "x", 64)
    0.35
    >>> configured_cost([cm], "qwen", "x", 1) is None
    True
    """
    for cm in models:
        if fnmatch.fnmatchcase(target_model, cm.target_model) and \
                fnmatch.fnmatchcase(draft_model, cm.draft_model):
            return cm.c + cm.v_at(batch_lo)
    return None


@dataclass
class _Timing:
    n: int = 0
    s: float = 0.0
    sq: float = 0.0
    k_weighted: float = 0.0  # sum over requests of their draft length (speculative side)


@dataclass
class CostTable:
    """Costs per (target model, target revision, draft model, batch bucket), learnt from the
    training records; :meth:`m` answers for any key (configured or default when unmeasured)."""

    config: Config
    buckets: Buckets
    z: float
    estimates: dict[CostKey, CostEstimate] = field(default_factory=dict)

    @classmethod
    def learn(cls, records: Iterable[SliceRecord], config: Config, z: float) -> CostTable:
        table = cls(config, Buckets(config.policy.batch_edges), z)
        spec: dict[CostKey, _Timing] = defaultdict(_Timing)
        plain: dict[tuple[str, str, str], _Timing] = defaultdict(_Timing)
        for rec in records:
            s, st = rec.series, rec.stats
            if s.num_speculative_tokens > 0:
                t = spec[(s.target_model, s.target_revision, s.draft_model, rec.key.batch)]
                t.n += st.spec_timed
                t.s += st.spec_step_ms
                t.sq += st.spec_step_ms_sq
                t.k_weighted += st.spec_timed * s.num_speculative_tokens
                # the key exists (with no timing) for every pair seen: configured/default then
            else:
                t = plain[(s.target_model, s.target_revision, rec.key.batch)]
                t.n += st.plain_timed
                t.s += st.plain_token_ms
                t.sq += st.plain_token_ms_sq
        for key in sorted(spec):
            sp = spec[key]
            pl = plain.get((key[0], key[1], key[3]))
            if pl is not None and sp.n >= MIN_TIMED and pl.n >= MIN_TIMED and pl.s > 0:
                m, iv = measured_cost((sp.n, sp.s, sp.sq), (pl.n, pl.s, pl.sq),
                                      sp.k_weighted / sp.n, z)
                table.estimates[key] = CostEstimate(*key, m=m, source="measured", interval=iv,
                                                    spec_timed=sp.n, plain_timed=pl.n)
            else:
                table.estimates[key] = table._fallback(key, sp.n, pl.n if pl else 0)
        return table

    def _fallback(self, key: CostKey, spec_timed: int = 0, plain_timed: int = 0) -> CostEstimate:
        lo = self.buckets.bounds(key[3])[0] if key[3] in self.buckets.labels else 1
        m = configured_cost(self.config.detection.cost_models, key[0], key[2], lo)
        if m is not None:
            return CostEstimate(*key, m=m, source="configured", spec_timed=spec_timed,
                                plain_timed=plain_timed)
        return CostEstimate(*key, m=DEFAULT_CUTOFF, source="default", spec_timed=spec_timed,
                            plain_timed=plain_timed)

    def estimate(self, target_model: str, target_revision: str, draft_model: str,
                 batch: str) -> CostEstimate:
        key = (target_model, target_revision, draft_model, batch)
        est = self.estimates.get(key)
        return est if est is not None else self._fallback(key)

    def m(self, target_model: str, target_revision: str, draft_model: str, batch: str) -> float:
        return self.estimate(target_model, target_revision, draft_model, batch).m

    def sorted(self) -> tuple[CostEstimate, ...]:
        return tuple(sorted(self.estimates.values(),
                            key=lambda e: (e.target_model, e.target_revision, e.draft_model,
                                           self.buckets.position(e.batch), e.batch)))
