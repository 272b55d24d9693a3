"""Judge a policy on held-out traffic later than its training window.

Two questions. Did each slice's acceptance hold? Predicted (training) against realized
(held out), each with its hour-cluster standard error; a slice is ``unstable`` when the
difference exceeds ``z * sqrt(se_train^2 + se_holdout^2)``. Would the policy have paid? The
decode speedup over no speculation of four strategies on the held-out traffic, each slice at
the draft length the strategy picks and with the survival *realized* in the held-out hours:
``sum O / sum O / T(slice)`` (``O``: the slice's output tokens):

- ``policy``: each slice at its chosen length (a slice unseen in training: its parent's);
- ``all_on``: each slice at the length it ran at;
- ``all_off``: 1;
- ``per_route``: one on/off per route and pair, learnt on the pooled training data (on at
  the measured length when its predicted speedup exceeds 1) — today's per-route switch.

Intervals by a block bootstrap over held-out hours (hours resampled with replacement, fixed
seed): the hour is the cluster, so correlated requests of one hour move together.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from statistics import NormalDist

import numpy as np

from monitor.policy.costs import CostTable
from monitor.policy.predict import Evidence, Sums, acceptance_interval
from monitor.policy.result import (
    Comparison,
    HoldoutEvaluation,
    SliceCheck,
    SliceDecision,
    StrategyGoodput,
    Window,
)
from monitor.policy.slice_ids import feature_values, pair_of, slice_id_text
from monitor.policy.slices import SliceRecord

__all__ = ["STRATEGIES", "evaluate_holdout", "goodputs", "t_quantile"]

STRATEGIES = ("policy", "all_on", "all_off", "per_route")
_CHUNK = 512  # slices per bootstrap block: bounds the memory of the dense arrays
MIN_BOOTSTRAP_HOURS = 3


def evaluate_holdout(records: Iterable[SliceRecord], *, window: Window, costs: CostTable,
                     features: Sequence[str], decisions: Mapping[tuple, SliceDecision],
                     parents: Mapping[tuple, SliceDecision],
                     routes: Mapping[tuple, SliceDecision], train: Mapping[tuple, Evidence],
                     z: float, confidence: float, resamples: int = 200,
                     seed: int = 17) -> HoldoutEvaluation:
    held: dict[tuple, Evidence] = defaultdict(Evidence)
    requests = tokens = 0
    for rec in records:
        s = rec.series
        if s.num_speculative_tokens <= 0:
            continue
        m = costs.m(s.target_model, s.target_revision, s.draft_model, rec.key.batch)
        held[(s.route, pair_of(rec), feature_values(rec.key, features))].add_record(rec, m)
        requests += rec.stats.requests
        tokens += rec.stats.output_tokens

    # Many slices are checked at once: at the per-slice level a stationary route would show
    # a tenth of its slices "unstable" at 90%. Bonferroni over the slices checked keeps the
    # chance that any stationary slice is flagged under 1 - confidence.
    both = [sid for sid in sorted(held, key=slice_id_text) if sid in train]
    z_family = NormalDist().inv_cdf(1.0 - (1.0 - confidence) / (2.0 * max(1, len(both))))
    checks = [_check(slice_id_text(sid), train[sid], held[sid], z_family) for sid in both]

    # the per-route switch of today: on at the measured length when T(K) > 1
    per_route = {}
    for rid, dec in routes.items():
        k = dec.measured_length
        t = dec.speedups[k] if k < len(dec.speedups) else None
        per_route[rid] = k if t is not None and t > 1.0 else 0

    lengths: list[tuple[int, int, int, int]] = []  # policy, all_on, all_off, per_route
    evidence: list[Evidence] = []
    for sid, ev in held.items():
        route, pair, feats = sid
        dec = decisions.get(sid)
        if dec is None:
            batch = dict(feats).get("batch_size")
            dec = parents.get((route, pair, (("batch_size", batch),))) if batch else None
            dec = dec or routes.get((route, pair, ()))
        policy_j = dec.num_speculative_tokens if dec is not None else 0
        tot = ev.total()
        lengths.append((policy_j, tot.length, 0, per_route.get((route, pair, ()), 0)))
        evidence.append(ev)

    hours = sorted({h for ev in evidence for h in ev.hours})
    point, boot = goodputs(evidence, lengths, hours, resamples=resamples, seed=seed)
    alpha = (1.0 - confidence) / 2.0
    # Resampling one or two hours only ever redraws the same traffic: such an interval would
    # be a point dressed up as a range. None says so instead.
    enough = len(hours) >= MIN_BOOTSTRAP_HOURS
    strategies = tuple(
        StrategyGoodput(name, float(point[i]), _quantiles(boot[i], alpha) if enough else None)
        for i, name in enumerate(STRATEGIES))
    comparisons = tuple(
        Comparison(name, float(point[0] - point[i]),
                   _quantiles(boot[0] - boot[i], alpha) if enough else None)
        for i, name in enumerate(STRATEGIES) if i)
    note = (f"{len(hours)} held-out hours, {resamples} block-bootstrap resamples over hours; "
            "speedups use the survival realized in the held-out hours and the training costs")
    if not enough:
        note = (f"only {len(hours)} held-out hour(s): no interval (at least "
                f"{MIN_BOOTSTRAP_HOURS} are needed to resample); speedups use the survival "
                "realized in the held-out hours and the training costs")
    return HoldoutEvaluation(window=window, requests=requests, output_tokens=tokens,
                             slices=tuple(checks), strategies=strategies,
                             comparisons=comparisons, resamples=resamples, note=note)


def _quantiles(values: np.ndarray, alpha: float) -> tuple[float, float]:
    if values.size == 0:
        return (math.nan, math.nan)
    lo, hi = np.quantile(values, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def _check(sid_text: str, train: Evidence, held: Evidence, z: float) -> SliceCheck:
    tr, tse, tiv = acceptance_interval([(s.accepted, s.drafted) for s in train.hours.values()], z)
    hr, hse, hiv = acceptance_interval([(s.accepted, s.drafted) for s in held.hours.values()], z)
    diff = None if tr is None or hr is None else hr - tr
    allowed = None
    if tse is not None and hse is not None:
        # few hours on a side make the standard errors themselves uncertain: Student's t at
        # the smaller side's degrees of freedom, not the normal quantile
        dof = min(len(train.hours), len(held.hours)) - 1
        allowed = t_quantile(z, dof) * math.sqrt(tse**2 + hse**2)
    unstable = None if diff is None or allowed is None else abs(diff) > allowed
    return SliceCheck(id=sid_text, predicted=tr, predicted_interval=tiv, realized=hr,
                      realized_interval=hiv, difference=diff, allowed=allowed,
                      unstable=unstable, holdout_requests=held.total().requests)


def t_quantile(z: float, dof: int) -> float:
    """Student's t quantile at the level of the normal quantile ``z``: exact for 1 and 2
    degrees of freedom, a Cornish-Fisher expansion above (within 2% from 3 on).

    >>> round(t_quantile(1.645, 1), 2), round(t_quantile(1.645, 2), 2)
    (6.32, 2.92)
    >>> round(t_quantile(1.645, 3), 2), round(t_quantile(1.645, 30), 3)
    (2.31, 1.697)
    """
    p = NormalDist().cdf(z)
    if dof <= 1:
        return math.tan(math.pi * (p - 0.5))
    if dof == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    z3, z5 = z**3, z**5
    return z + (z3 + z) / (4 * dof) + (5 * z5 + 16 * z3 + 3 * z) / (96 * dof**2)


def goodputs(evidence: Sequence[Evidence], lengths: Sequence[Sequence[int]],
             hours: Sequence[int], *, resamples: int, seed: int
             ) -> tuple[np.ndarray, np.ndarray]:
    """Goodput (``sum O / sum O/T``) of each strategy: on all hours (shape ``(S,)``), and per
    bootstrap resample of the hours (shape ``(S, resamples)``).

    ``lengths[i][s]`` is the draft length strategy ``s`` runs slice ``i`` at (cut to what the
    slice's held-out evidence reaches). One resample is a weight vector over hours (how often
    each was drawn); all resamples are one matrix product per field.

    >>> ev = Evidence()
    >>> for h in range(4):
    ...     ev.add_hour(h * 3600, requests=10, output_tokens=100, accepted=16, drafted=20,
    ...                 steps=10, positions=[(9, 10), (7, 10)], m_tokens=100 * 0.1, length=2)
    >>> point, boot = goodputs([ev], [(2, 2, 0, 0)], [h * 3600 for h in range(4)],
    ...                        resamples=5, seed=1)
    >>> [round(float(x), 3) for x in point], boot.shape
    ([2.167, 2.167, 1.0, 1.0], (4, 5))
    """
    n_strat = len(lengths[0]) if lengths else len(STRATEGIES)
    rng = np.random.default_rng(seed)
    n_h = len(hours)
    hour_index = {h: i for i, h in enumerate(hours)}
    weights = np.ones((n_h, 1 + resamples))
    if n_h:
        weights[:, 1:] = rng.multinomial(n_h, [1.0 / n_h] * n_h, size=resamples).T
    num = np.zeros((n_strat, 1 + resamples))  # sum O
    den = np.zeros((n_strat, 1 + resamples))  # sum O / T
    for start in range(0, len(evidence), _CHUNK):
        block = evidence[start:start + _CHUNK]
        blens = np.asarray(lengths[start:start + _CHUNK], dtype=int)
        _accumulate(block, blens, hour_index, weights, num, den)
    with np.errstate(divide="ignore", invalid="ignore"):
        g = np.where(den > 0, num / den, 1.0)
    return g[:, 0], g[:, 1:]


def _accumulate(block: Sequence[Evidence], lengths: np.ndarray, hour_index: Mapping[int, int],
                weights: np.ndarray, num: np.ndarray, den: np.ndarray) -> None:
    n_s, n_h = len(block), weights.shape[0]
    n_p = max((ev.total().length for ev in block), default=0)
    out_tok = np.zeros((n_s, n_h))
    acc = np.zeros((n_s, n_h))
    steps = np.zeros((n_s, n_h))
    pnum = np.zeros((n_s, n_p, n_h))
    pden = np.zeros((n_s, n_p, n_h))
    m = np.zeros(n_s)
    reach = np.zeros(n_s, dtype=int)  # positions with evidence on the whole holdout
    has_pos = np.zeros(n_s, dtype=bool)
    length = np.zeros(n_s, dtype=int)
    for i, ev in enumerate(block):
        tot: Sums = ev.total()
        m[i] = tot.marginal_cost
        reach[i] = len(tot.survival)
        has_pos[i] = reach[i] > 0
        length[i] = tot.length
        for h, s in ev.hours.items():
            j = hour_index[h]
            out_tok[i, j] = s.output_tokens
            acc[i, j] = s.accepted
            steps[i, j] = s.steps
            k = min(len(s.pos_num), n_p)
            pnum[i, :k, j] = s.pos_num[:k]
            pden[i, :k, j] = s.pos_den[:k]
    o_b = out_tok @ weights  # (S, B)
    with np.errstate(divide="ignore", invalid="ignore"):
        p_b = np.where(pden @ weights > 0, (pnum @ weights) / (pden @ weights), 0.0)  # (S,P,B)
        mean_acc = np.where(steps @ weights > 0, (acc @ weights) / (steps @ weights), 0.0)
    cum = np.concatenate([np.zeros((n_s, 1, weights.shape[1])), np.cumsum(p_b, axis=1)], axis=1)
    for s_idx in range(lengths.shape[1]):
        j = lengths[:, s_idx]
        # cut to what the evidence reaches: positions where reported, else only 0 or length
        j = np.where(has_pos, np.minimum(j, reach), np.where(j >= length, length, 0))
        picked = cum[np.arange(n_s), np.where(has_pos, j, 0), :]
        tokens = np.where(has_pos[:, None], picked, mean_acc * (j > 0)[:, None])
        t = (1.0 + tokens) / (1.0 + j * m)[:, None]
        num[s_idx] += o_b.sum(axis=0)
        den[s_idx] += (o_b / t).sum(axis=0)
