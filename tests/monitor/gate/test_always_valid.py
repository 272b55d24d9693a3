"""The always-valid property: a pipeline that polls the gate after every 1,000 events of a
null experiment (both arms the same) for a long run fails it in at most alpha of the runs.

200 runs x 50 looks x 1,000 events, two routes (70% / 30%), per request a Bernoulli success,
gamma GPU-seconds, a Bernoulli error, a Bernoulli valid tool call on one route and a lognormal
e2e latency, summed per arm and route the way the rollups sum them; the gate's judge runs on
the sums at every look (no store: the statistics are the point). Every tolerance is 0, the
strictest null: any regression the gate claims to see is a false fail. The same looks with a
fixed one-sided 95% test on the efficiency alone show that peeking would have been caught.
"""

from __future__ import annotations

import math

import numpy as np

from monitor.aggregate.bucket import BucketStats
from monitor.gate import FAIL, GateSettings, GateSides, judge_gate

RUNS, LOOKS, PER_LOOK = 200, 50, 1000
ALPHA = 0.05
# name, share of requests, success rate, mean GPU-seconds, reports tool calls
ROUTES = (("code-assistant", 0.7, 0.8, 1.0, False), ("json-tools", 0.3, 0.9, 0.5, True))
STRICT = GateSettings(alpha=ALPHA, efficiency_tolerance=0.0, rate_tolerance=0.0,
                      p99_tolerance=0.0)


KEYS = 1024  # sketch bucket keys of latencies from 1 ms to 100 s, offset to start at 0
KEY0 = -64


def _look(groups: list[BucketStats], bins: np.ndarray, group: np.ndarray, success: np.ndarray,
          gpu: np.ndarray, error: np.ndarray, tool: np.ndarray, e2e: np.ndarray,
          reports_tool: list[bool]) -> None:
    """One look's requests summed into their (route, arm) groups: every quantity with one
    bincount over the groups; the latencies counted per group and sketch bucket in ``bins``
    (the keys ``LogHistogram.extend`` uses) and handed to each group's sketch."""
    m = len(groups)
    n = np.bincount(group, minlength=m)
    s = np.bincount(group, weights=success, minlength=m)
    g = np.bincount(group, weights=gpu, minlength=m)
    q = np.bincount(group, weights=gpu * gpu, minlength=m)
    sg = np.bincount(group, weights=gpu * success, minlength=m)
    err = np.bincount(group, weights=error, minlength=m)
    tv = np.bincount(group, weights=tool, minlength=m)
    lat = np.bincount(group, weights=e2e, minlength=m)
    keys = np.ceil(np.log(e2e) * groups[0].e2e_ms._inv_log_gamma).astype(np.int64) - KEY0
    bins += np.bincount(group * KEYS + keys, minlength=m * KEYS).reshape(m, KEYS)
    for i, b in enumerate(groups):
        b.requests += int(n[i])
        b.errors += round(err[i])
        b.successes += round(s[i])
        b.outcome_ok_reported += int(n[i])
        b.outcome_ok_true += round(s[i])
        b.gpu_seconds += float(g[i])
        b.gpu_seconds_sq += float(q[i])
        b.success_gpu_seconds += float(sg[i])
        if reports_tool[i]:
            b.tool_calls_valid_reported += int(n[i])
            b.tool_calls_valid_true += round(tv[i])
        h = b.e2e_ms
        h.count += int(n[i])
        h.total += float(lat[i])
        nonzero = np.flatnonzero(bins[i])
        h.bins = dict(zip((nonzero + KEY0).tolist(), bins[i][nonzero].tolist(), strict=True))


def _run(seed: int) -> tuple[bool, bool]:
    """(the gate ever failed, the naive test ever failed) over one null experiment."""
    rng = np.random.default_rng(seed)
    # group 2 i + 0: route i on the baseline arm, 2 i + 1: on the candidate arm
    groups = [BucketStats() for _ in range(2 * len(ROUTES))]
    bins = np.zeros((len(groups), KEYS), dtype=np.int64)
    reports_tool = [r[4] for r in ROUTES for _ in (0, 1)]
    baseline = {r[0]: groups[2 * i] for i, r in enumerate(ROUTES)}
    candidate = {r[0]: groups[2 * i + 1] for i, r in enumerate(ROUTES)}
    shares = np.array([r[1] for r in ROUTES])
    p_ok = np.array([r[2] for r in ROUTES])
    gpu_mean = np.array([r[3] for r in ROUTES])
    gate_failed = naive_failed = False
    for _ in range(LOOKS):
        route = (rng.random(PER_LOOK) >= shares[0]).astype(np.int64)  # two routes
        group = 2 * route + (rng.random(PER_LOOK) < 0.5)
        success = rng.random(PER_LOOK) < p_ok[route]
        gpu = rng.gamma(4.0, 1.0, PER_LOOK) * gpu_mean[route] / 4.0
        error = rng.random(PER_LOOK) < 0.02
        tool = rng.random(PER_LOOK) < 0.95
        e2e = 1000.0 * rng.lognormal(0.0, 0.3, PER_LOOK)
        _look(groups, bins, group, success, gpu, error, tool, e2e, reports_tool)
        j = judge_gate(GateSides("experiment", "null", baseline, candidate), STRICT)
        gate_failed = gate_failed or j.verdict == FAIL
        cs = j.efficiency.cs
        if cs is not None and cs.estimate + 1.645 * math.sqrt(cs.variance) < 0.0:
            naive_failed = True
        if gate_failed and naive_failed:
            break
    return gate_failed, naive_failed


def test_polling_a_null_experiment_every_1000_events_fails_within_alpha() -> None:
    results = [_run(seed) for seed in range(RUNS)]
    ever_failed = sum(g for g, _ in results)
    naive = sum(n for _, n in results)
    # alpha plus two binomial standard errors of 200 runs (about 3 points)
    allowance = ALPHA + 2 * math.sqrt(ALPHA * (1 - ALPHA) / RUNS)
    assert ever_failed / RUNS <= allowance, f"{ever_failed} of {RUNS} null runs ever failed"
    # the looks are many enough to matter: a fixed 95% one-sided test of the efficiency
    # alone, read at the same looks, fails far more often than its 5%
    assert naive / RUNS > 2 * ALPHA, f"naive peeking failed only {naive} of {RUNS}"
