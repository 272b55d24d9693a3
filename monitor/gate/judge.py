"""The release gate's verdicts: per metric, per route and overall (docs/gate.md).

Each metric has a direction that is bad and a criticality, as in Kayenta's canary judge; each
is judged on an always-valid confidence sequence (``monitor/gate/stats.py``) against a
boundary, its tolerance:

==========================  ============  ==========  ============================================
metric                      bad           boundary    estimate
==========================  ============  ==========  ============================================
``success_per_gpu_second``  decrease      -eff. tol.  relative change (overall: workload-weighted)
``ok_rate``                 decrease      -rate tol.  difference of rates (reporting requests only)
``schema_valid_rate``       decrease      -rate tol.  idem
``tool_calls_valid_rate``   decrease      -rate tol.  idem
``error_rate``              increase      +rate tol.  difference of rates
``e2e_p99``                 increase      0           share of candidate requests above the
                                                      baseline's p99 x (1 + p99 tol.), minus the
                                                      baseline's share above its p99 (~1%)
``latency_class``           no decrease   0           as e2e_p99 for the class's metric, no
                                                      tolerance: the candidate must improve
==========================  ============  ==========  ============================================

A test **fails** when its whole sequence lies on the bad side of the boundary, **passes** when
it lies wholly on the good side, and is **insufficient** otherwise (or below the minimum
count per side: ``min_requests`` requests, and for a quantile at least ``10 / (1 - q)``).

**Overall verdict.** ``fail`` if any gating test fails; ``pass`` if every gating test passes;
``insufficient_data`` otherwise. The gating tests: the workload-weighted efficiency (every
route, each weighted by its share of the requests of both sides), the critical metrics of
every route carrying at least ``min_route_share`` of the requests, and the latency class of
every route a configured class names (whatever its share).

**Alpha.** The chance of a wrong verdict, however often the gate is polled, is kept below
``alpha`` by Bonferroni: each of the ``T`` gating tests runs its sequence at ``alpha / T``
(a wrong ``fail`` and a wrong ``pass`` both need the sequence of some test to miss its true
effect, which has chance at most ``alpha / T`` per test over all looks). ``T`` counts the
tests of the routes present at the look (an outcome nobody reports is no test); the tests
that only inform (per-route efficiency, the critical metrics of small routes) use the same
level and spend no alpha.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from monitor.aggregate.bucket import BucketStats
from monitor.gate.sides import GateSides
from monitor.gate.stats import (
    ConfidenceSequence,
    confidence_sequence,
    efficiency,
    exceedance_difference,
    growth_needed,
    rate_difference,
    relative_ratio_change,
)

if TYPE_CHECKING:
    from monitor.config import GateConfig

__all__ = ["FAIL", "INSUFFICIENT", "METRICS", "PASS", "GateJudgement", "GateMetric",
           "GateSettings", "MetricResult", "RouteResult", "judge_gate"]

PASS, FAIL, INSUFFICIENT = "pass", "fail", "insufficient_data"
OVERALL = "*"

# The latency metrics a class may promise: (sketch, quantile).
LATENCY = {"ttft_p99": ("ttft_ms", 0.99), "ttft_p50": ("ttft_ms", 0.5),
           "e2e_p99": ("e2e_ms", 0.99), "e2e_p50": ("e2e_ms", 0.5),
           "itl_p99": ("itl_p99_ms", 0.99), "itl_p50": ("itl_p50_ms", 0.5)}


@dataclass(frozen=True, slots=True)
class GateMetric:
    """A metric of the gate: which way is bad, whether it is critical, its mixing scale."""

    name: str
    label: str
    bad: str  # "decrease" or "increase"
    critical: bool
    scale: str  # "relative", "absolute" or "exceedance"
    tau: float  # the normal mixture's scale (monitor/gate/stats.py)


EFFICIENCY = GateMetric("success_per_gpu_second", "successful tasks per GPU-second", "decrease",
                        True, "relative", 0.05)
OUTCOMES = {
    "ok_rate": ("outcome_ok_true", "outcome_ok_reported"),
    "schema_valid_rate": ("schema_valid_true", "schema_valid_reported"),
    "tool_calls_valid_rate": ("tool_calls_valid_true", "tool_calls_valid_reported"),
}
METRICS: tuple[GateMetric, ...] = (
    EFFICIENCY,
    GateMetric("ok_rate", "ok rate", "decrease", True, "absolute", 0.02),
    GateMetric("schema_valid_rate", "schema_valid rate", "decrease", True, "absolute", 0.02),
    GateMetric("tool_calls_valid_rate", "tool_calls_valid rate", "decrease", True, "absolute",
               0.02),
    GateMetric("error_rate", "error rate", "increase", True, "absolute", 0.02),
    GateMetric("e2e_p99", "p99 e2e latency", "increase", True, "exceedance", 0.005),
    GateMetric("latency_class", "promised latency", "increase", True, "exceedance", 0.005),
)
BY_NAME = {m.name: m for m in METRICS}
CRITICAL_ROUTE_METRICS = ("ok_rate", "schema_valid_rate", "tool_calls_valid_rate",
                          "error_rate", "e2e_p99")


@dataclass(frozen=True, slots=True)
class GateSettings:
    """``gate`` of the configuration, plus the minimum count per side of a test."""

    alpha: float = 0.05
    min_route_share: float = 0.05
    efficiency_tolerance: float = 0.02
    p99_tolerance: float = 0.10
    rate_tolerance: float = 0.01
    latency_classes: tuple[tuple[tuple[str, ...], str], ...] = ()  # (route globs, metric)
    min_requests: int = 100

    def __post_init__(self) -> None:
        if not 0.0 < self.alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha}")
        for _, metric in self.latency_classes:
            if metric not in LATENCY:
                raise ValueError(f"unknown latency class metric {metric!r}")

    @classmethod
    def from_config(cls, gate: GateConfig, **overrides: Any) -> GateSettings:
        values: dict[str, Any] = {
            "alpha": gate.alpha, "min_route_share": gate.min_route_share,
            "efficiency_tolerance": gate.efficiency_tolerance,
            "p99_tolerance": gate.p99_tolerance, "rate_tolerance": gate.rate_tolerance,
            "latency_classes": tuple((tuple(c.routes), c.metric) for c in gate.latency_classes),
        }
        values.update(overrides)
        return cls(**values)

    def latency_class_of(self, route: str) -> str | None:
        """The metric the first class naming ``route`` promises, if any."""
        for globs, metric in self.latency_classes:
            if any(fnmatch.fnmatchcase(route, g) for g in globs):
                return metric
        return None

    def to_json(self) -> dict[str, Any]:
        return {"alpha": self.alpha, "min_route_share": self.min_route_share,
                "efficiency_tolerance": self.efficiency_tolerance,
                "p99_tolerance": self.p99_tolerance, "rate_tolerance": self.rate_tolerance,
                "min_requests": self.min_requests,
                "latency_classes": [{"routes": list(g), "metric": m}
                                    for g, m in self.latency_classes]}


Needed = tuple[int | None, int | None]


@dataclass(frozen=True, slots=True)
class MetricResult:
    """One metric on one route (``route == "*"``: the workload-weighted efficiency)."""

    metric: GateMetric
    route: str
    verdict: str
    gating: bool
    baseline: float | None = None
    candidate: float | None = None
    cs: ConfidenceSequence | None = None
    boundary: float = 0.0
    tolerance: float = 0.0
    requests: tuple[int, int] = (0, 0)
    needed: Needed | None = None  # more requests per side (baseline, candidate) to decide
    reason: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.metric.name

    @property
    def change(self) -> float | None:
        return None if self.cs is None else self.cs.estimate

    def to_json(self) -> dict[str, Any]:
        cs = self.cs
        return {
            "verdict": self.verdict, "gating": self.gating, "critical": self.metric.critical,
            "bad": self.metric.bad, "scale": self.metric.scale,
            "baseline": _finite(self.baseline), "candidate": _finite(self.candidate),
            "change": None if cs is None else _finite(cs.estimate),
            "interval": None if cs is None else [_finite(cs.low), _finite(cs.high)],
            "boundary": self.boundary, "tolerance": self.tolerance,
            "alpha": None if cs is None else cs.alpha,
            "requests": {"baseline": self.requests[0], "candidate": self.requests[1]},
            "requests_needed": _needed_json(self.needed), "reason": self.reason,
            **{k: _finite(v) if isinstance(v, float) else v for k, v in self.extra.items()},
        }


def _finite(v: float | None) -> float | None:
    return None if v is None or not math.isfinite(v) else v


def _needed_json(n: Needed | None) -> dict[str, int | None] | None:
    return None if n is None else {"baseline": n[0], "candidate": n[1]}


@dataclass(frozen=True, slots=True)
class RouteResult:
    route: str
    share: float
    gated: bool
    verdict: str
    requests: tuple[int, int]
    metrics: tuple[MetricResult, ...]
    needed: Needed | None

    def metric(self, name: str) -> MetricResult:
        for m in self.metrics:
            if m.name == name:
                return m
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        return {"route": self.route, "share": self.share, "gated": self.gated,
                "verdict": self.verdict,
                "requests": {"baseline": self.requests[0], "candidate": self.requests[1]},
                "requests_needed": _needed_json(self.needed),
                "metrics": {m.name: m.to_json() for m in self.metrics}}


@dataclass(frozen=True, slots=True)
class GateJudgement:
    """What ``specwatch gate`` prints and exits on (``exit_code``)."""

    sides: GateSides
    settings: GateSettings
    verdict: str
    reason: str
    efficiency: MetricResult
    routes: tuple[RouteResult, ...]
    failures: tuple[MetricResult, ...]
    needed: Needed | None
    tests: int
    totals: Mapping[str, Mapping[str, float | int | None]]

    @property
    def exit_code(self) -> int:
        return {PASS: 0, FAIL: 1, INSUFFICIENT: 3}[self.verdict]

    def route(self, name: str) -> RouteResult:
        for r in self.routes:
            if r.route == name:
                return r
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        return {
            "gate": self.sides.to_json(), "verdict": self.verdict, "reason": self.reason,
            "failures": [{"route": m.route, "metric": m.name} for m in self.failures],
            "requests_needed": _needed_json(self.needed),
            "alpha": self.settings.alpha, "tests": self.tests,
            "alpha_per_test": self.settings.alpha / max(self.tests, 1),
            "settings": self.settings.to_json(),
            "sides": {k: dict(v) for k, v in self.totals.items()},
            "efficiency": self.efficiency.to_json(),
            "routes": [r.to_json() for r in self.routes],
            "notes": list(self.sides.notes),
        }


# -- one test -----------------------------------------------------------------------------------


def _decide(cs: ConfidenceSequence, boundary: float, bad: str) -> str:
    if bad == "decrease":
        return FAIL if cs.below(boundary) else PASS if cs.above(boundary) else INSUFFICIENT
    return FAIL if cs.above(boundary) else PASS if cs.below(boundary) else INSUFFICIENT


def _more(n: int, k: float | None, floor: int) -> int | None:
    if k is None:
        return None
    return max(math.ceil(n * (k - 1.0)), floor - n, 0)


def _needed(cs: ConfidenceSequence, boundary: float, counts: tuple[int, int], floor: int,
            planning: float) -> Needed:
    """More requests per side for the sequence to clear the boundary on the side its
    estimate is on, both sides growing in proportion (the variance falls as 1 / growth).

    The distance to clear is the estimate's from the boundary, but at least ``planning``
    (the tolerance: the distance of a candidate with no real change): an estimate that
    happens to sit on the boundary in a small sample would otherwise need "infinitely many".
    """
    margin = max(abs(cs.estimate - boundary), planning)
    k = growth_needed(cs.variance, margin, cs.alpha, cs.tau)
    return _more(counts[0], k, floor), _more(counts[1], k, floor)


def _short(metric: GateMetric, route: str, counts: tuple[int, int], floor: int, gating: bool,
           what: str, **kw: Any) -> MetricResult:
    """Below the minimum count on a side: insufficient, needing at least the rest."""
    needed = (max(floor - counts[0], 0), max(floor - counts[1], 0))
    return MetricResult(metric, route, INSUFFICIENT, gating, requests=counts, needed=needed,
                        reason=f"{counts[0]} baseline and {counts[1]} candidate {what} "
                        f"(need {floor} each)", **kw)


def _judged(metric: GateMetric, route: str, cs: ConfidenceSequence, boundary: float,
            counts: tuple[int, int], floor: int, gating: bool, **kw: Any) -> MetricResult:
    verdict = _decide(cs, boundary, metric.bad)
    planning = abs(boundary)
    needed = (_needed(cs, boundary, counts, floor, planning) if verdict == INSUFFICIENT
              else None)
    reason = None
    if verdict == INSUFFICIENT and needed == (None, None):
        reason = "the estimate sits on the boundary: more requests alone will not decide"
    return MetricResult(metric, route, verdict, gating, cs=cs, boundary=boundary,
                        requests=counts, needed=needed, reason=reason, **kw)


def _rate_test(name: str, route: str, b: BucketStats, c: BucketStats, s: GateSettings,
               alpha: float, gating: bool) -> MetricResult | None:
    metric = BY_NAME[name]
    if name == "error_rate":
        hits, n = "errors", "requests"
    else:
        hits, n = OUTCOMES[name]
    xb, nb = _get(b, hits), _get(b, n)
    xc, nc = _get(c, hits), _get(c, n)
    if nb == 0 and nc == 0:
        return None  # not reported on either side: no test
    counts = (int(nb), int(nc))
    tol = s.rate_tolerance
    boundary = -tol if metric.bad == "decrease" else tol
    values = {"baseline": xb / nb if nb else None, "candidate": xc / nc if nc else None}
    if min(counts) < s.min_requests:
        what = "requests" if name == "error_rate" else f"requests reporting {name[:-5]}"
        return _short(metric, route, counts, s.min_requests, gating, what, tolerance=tol,
                      boundary=boundary, **values)
    d, v = rate_difference(xb, nb, xc, nc)
    return _judged(metric, route, confidence_sequence(d, v, alpha, metric.tau), boundary,
                   counts, s.min_requests, gating, tolerance=tol, **values)


def _exceedance_test(metric: GateMetric, route: str, b: BucketStats, c: BucketStats,
                     sketch: str, q: float, tolerance: float, s: GateSettings, alpha: float,
                     gating: bool, **extra: Any) -> MetricResult:
    hb, hc = getattr(b, sketch, None), getattr(c, sketch, None)
    counts = (0 if hb is None else hb.count, 0 if hc is None else hc.count)
    floor = max(s.min_requests, math.ceil(10.0 / (1.0 - q)))
    values = {"baseline": None if hb is None else hb.quantile(q),
              "candidate": None if hc is None else hc.quantile(q)}
    if min(counts) < floor:
        return _short(metric, route, counts, floor, gating, "requests with this measurement",
                      tolerance=tolerance, extra=extra, **values)
    assert hb is not None and hc is not None
    d, v, threshold = exceedance_difference(hb, hc, q, tolerance,
                                            baseline_quantile=values["baseline"])
    extra = {**extra, "threshold_ms": threshold, "quantile": q}
    return _judged(metric, route, confidence_sequence(d, v, alpha, metric.tau), 0.0, counts,
                   floor, gating, tolerance=tolerance, extra=extra, **values)


def _get(b: BucketStats, name: str) -> float:
    # getattr with a default: rollups written before telemetry v1.1 have no outcome fields
    return float(getattr(b, name, 0) or 0)


def _efficiency_of(b: BucketStats) -> tuple[float, float] | None:
    g = _get(b, "gpu_seconds")
    if g <= 0.0:
        return None
    return efficiency(_get(b, "successes"), g, _get(b, "gpu_seconds_sq"),
                      _get(b, "success_gpu_seconds"))


def _route_efficiency(route: str, b: BucketStats, c: BucketStats, s: GateSettings,
                      alpha: float) -> tuple[MetricResult, tuple[float, float] | None]:
    """The route's relative change of efficiency (informative) and (change, variance) for
    the weighted sum, when it can be had."""
    m, tol = EFFICIENCY, s.efficiency_tolerance
    counts = (b.requests, c.requests)
    eb, ec = _efficiency_of(b), _efficiency_of(c)
    values = {"baseline": None if eb is None else eb[0],
              "candidate": None if ec is None else ec[0]}
    if min(counts) < s.min_requests:
        return _short(m, route, counts, s.min_requests, False, "requests", tolerance=tol,
                      boundary=-tol, **values), None
    if eb is None or ec is None or eb[0] <= 0.0:
        why = ("no GPU-seconds on a side" if eb is None or ec is None
               else "no successful task on the baseline side")
        return MetricResult(m, route, INSUFFICIENT, False, boundary=-tol, tolerance=tol,
                            requests=counts, reason=why, **values), None
    d, v = relative_ratio_change(eb[0], eb[1], ec[0], ec[1])
    cs = confidence_sequence(d, v, alpha, m.tau)
    return _judged(m, route, cs, -tol, counts, s.min_requests, False, tolerance=tol,
                   **values), (d, v)


# -- the whole gate ---------------------------------------------------------------------------


def _verdict(results: Sequence[MetricResult]) -> str:
    verdicts = {r.verdict for r in results}
    if FAIL in verdicts:
        return FAIL
    if INSUFFICIENT in verdicts or not results:
        return INSUFFICIENT
    return PASS


def _max_needed(parts: Sequence[tuple[int | None, int | None]]) -> Needed | None:
    if not parts:
        return None
    out: list[int | None] = []
    for i in (0, 1):
        vals = [p[i] for p in parts]
        out.append(None if any(v is None for v in vals) else max(v or 0 for v in vals))
    return out[0], out[1]


def _count_tests(sides: GateSides, s: GateSettings, shares: Mapping[str, float]) -> int:
    tests = 1  # the workload-weighted efficiency
    empty = BucketStats()
    for route in sides.routes:
        b, c = sides.baseline.get(route, empty), sides.candidate.get(route, empty)
        if shares[route] >= s.min_route_share:
            tests += 2  # error rate, p99 e2e
            tests += sum(1 for _, n in OUTCOMES.values() if _get(b, n) + _get(c, n) > 0)
        if s.latency_class_of(route) is not None:
            tests += 1
    return tests


def judge_gate(sides: GateSides, settings: GateSettings | None = None) -> GateJudgement:
    """Every route's tests and the overall verdict (module docstring)."""
    s = settings or GateSettings()
    empty = BucketStats()
    routes = sides.routes
    n_b = {r: sides.baseline.get(r, empty).requests for r in routes}
    n_c = {r: sides.candidate.get(r, empty).requests for r in routes}
    total = sum(n_b.values()) + sum(n_c.values())
    shares = {r: (n_b[r] + n_c[r]) / total if total else 0.0 for r in routes}
    tests = _count_tests(sides, s, shares)
    alpha = s.alpha / tests

    route_results: list[RouteResult] = []
    weighted: list[tuple[str, float, float, float]] = []  # route, weight, change, variance
    short_gated: list[tuple[str, int, int]] = []
    for route in routes:
        b, c = sides.baseline.get(route, empty), sides.candidate.get(route, empty)
        gated = shares[route] >= s.min_route_share
        results: list[MetricResult] = []
        eff, dv = _route_efficiency(route, b, c, s, alpha)
        results.append(eff)
        if dv is not None:
            weighted.append((route, shares[route], dv[0], dv[1]))
        elif gated:
            short_gated.append((route, *eff.requests))
        for name in CRITICAL_ROUTE_METRICS:
            if name == "e2e_p99":
                r = _exceedance_test(BY_NAME[name], route, b, c, "e2e_ms", 0.99,
                                     s.p99_tolerance, s, alpha, gated)
            else:
                r = _rate_test(name, route, b, c, s, alpha, gated)
            if r is not None:
                results.append(r)
        promised = s.latency_class_of(route)
        if promised is not None:
            sketch, q = LATENCY[promised]
            results.append(_exceedance_test(BY_NAME["latency_class"], route, b, c, sketch, q,
                                            0.0, s, alpha, True, promised=promised))
        judged = [m for m in results if m.metric.critical and m.name != EFFICIENCY.name]
        needed = _max_needed([m.needed for m in judged
                              if m.verdict == INSUFFICIENT and m.needed is not None])
        route_results.append(RouteResult(route, shares[route], gated, _verdict(judged),
                                         (n_b[route], n_c[route]), tuple(results), needed))

    totals = {"baseline": _totals(sides.baseline.values()),
              "candidate": _totals(sides.candidate.values())}
    overall_eff = _overall_efficiency(totals, s, alpha, weighted, short_gated, n_b)
    gating = [overall_eff] + [m for rr in route_results for m in rr.metrics if m.gating]
    verdict = _verdict(gating)
    failures = tuple(m for m in gating if m.verdict == FAIL)
    needed = None
    if verdict == INSUFFICIENT:
        needed = _total_needed([m for m in gating if m.verdict == INSUFFICIENT], n_b, n_c)
    reason = _reason(verdict, overall_eff, failures, needed, gating)
    return GateJudgement(sides, s, verdict, reason, overall_eff, tuple(route_results), failures,
                         needed, tests, totals)


def _overall_efficiency(totals: Mapping[str, Mapping[str, float | int | None]],
                        s: GateSettings, alpha: float,
                        weighted: Sequence[tuple[str, float, float, float]],
                        short_gated: Sequence[tuple[str, int, int]],
                        n_b: Mapping[str, int]) -> MetricResult:
    m, tol = EFFICIENCY, s.efficiency_tolerance
    tb, tc = totals["baseline"], totals["candidate"]
    counts = (int(tb["requests"] or 0), int(tc["requests"] or 0))
    values = {"baseline": tb["success_per_gpu_second"],
              "candidate": tc["success_per_gpu_second"]}
    extra: dict[str, Any] = {"weights": {r: w for r, w, _, _ in weighted},
                             "routes_left_out": sorted(set(n_b) - {r for r, *_ in weighted})}
    if short_gated or not weighted:
        # A route that must count cannot yet: as many more requests as it lacks, scaled up by
        # its share of its side (traffic arrives in the current mix).
        parts: list[tuple[int | None, int | None]] = []
        for _, rb, rc in short_gated:
            parts.append((_scaled(max(s.min_requests - rb, 0), rb, counts[0]),
                          _scaled(max(s.min_requests - rc, 0), rc, counts[1])))
        if not weighted and not short_gated:
            parts.append((max(s.min_requests - counts[0], 0),
                          max(s.min_requests - counts[1], 0)))
        what = ", ".join(r for r, *_ in short_gated) or "every route"
        return MetricResult(m, OVERALL, INSUFFICIENT, True, boundary=-tol, tolerance=tol,
                            requests=counts, needed=_max_needed(parts),
                            reason=f"efficiency not yet comparable on {what}", extra=extra,
                            **values)
    w_sum = sum(w for _, w, _, _ in weighted)
    d = sum(w * x for _, w, x, _ in weighted) / w_sum
    v = sum((w / w_sum) ** 2 * var for _, w, _, var in weighted)
    extra["weights"] = {r: w / w_sum for r, w, _, _ in weighted}
    cs = confidence_sequence(d, v, alpha, m.tau)
    return _judged(m, OVERALL, cs, -tol, counts, s.min_requests, True, tolerance=tol,
                   extra=extra, **values)


def _scaled(more: int, n: int, side_total: int) -> int | None:
    """``more`` requests of a route, as requests of its whole side in the current mix."""
    if more <= 0:
        return 0
    if n <= 0 or side_total <= 0:
        return None  # the route has no traffic on this side: no amount of traffic helps
    return math.ceil(more * side_total / n)


def _total_needed(undecided: Sequence[MetricResult], n_b: Mapping[str, int],
                  n_c: Mapping[str, int]) -> Needed | None:
    """The most any undecided gating test needs, in requests of each whole side."""
    tot_b, tot_c = sum(n_b.values()), sum(n_c.values())
    parts: list[tuple[int | None, int | None]] = []
    for m in undecided:
        if m.needed is None:
            parts.append((None, None))
            continue
        if m.route == OVERALL:
            parts.append(m.needed)
            continue
        nb, nc = m.needed
        parts.append((None if nb is None else _scaled(nb, n_b.get(m.route, 0), tot_b),
                      None if nc is None else _scaled(nc, n_c.get(m.route, 0), tot_c)))
    return _max_needed(parts)


def _totals(stats: Iterable[BucketStats]) -> dict[str, float | int | None]:
    # counters only: merging the sketches too would cost more than the whole judgement
    bs = list(stats)
    g = sum(_get(b, "gpu_seconds") for b in bs)
    succ = sum(_get(b, "successes") for b in bs)
    return {"requests": sum(b.requests for b in bs), "errors": sum(b.errors for b in bs),
            "successes": int(succ), "gpu_seconds": g,
            "success_per_gpu_second": succ / g if g > 0 else None}


def _fmt(m: MetricResult) -> str:
    """``json-tools tool_calls_valid_rate 0.990 -> 0.900 (-9.0 points [-11.2, -6.8])``."""
    cs = m.cs
    where = "overall" if m.route == OVERALL else m.route
    if cs is None:
        return f"{where} {m.name}"
    if m.metric.scale == "absolute":
        change = f"{cs.estimate * 100:+.1f} points [{cs.low * 100:+.1f}, {cs.high * 100:+.1f}]"
    elif m.metric.scale == "relative":
        change = f"{cs.estimate:+.1%} [{cs.low:+.1%}, {cs.high:+.1%}]"
    else:
        change = (f"{cs.estimate * 100:+.2f} points of requests above the threshold "
                  f"[{cs.low * 100:+.2f}, {cs.high * 100:+.2f}]")
    vals = ""
    if m.baseline is not None and m.candidate is not None:
        vals = f" {m.baseline:.4g} -> {m.candidate:.4g}"
    return f"{where} {m.name}{vals} ({change})"


def _reason(verdict: str, eff: MetricResult, failures: Sequence[MetricResult],
            needed: Needed | None, gating: Sequence[MetricResult]) -> str:
    if verdict == FAIL:
        return "fail: " + "; ".join(_fmt(m) for m in failures)
    if verdict == PASS:
        return (f"pass: {_fmt(eff)} workload-weighted; no critical regression in "
                f"{len(gating) - 1} gating tests")
    undecided = [m for m in gating if m.verdict == INSUFFICIENT]
    names = ", ".join(f"{'overall' if m.route == OVERALL else m.route} {m.name}"
                      for m in undecided[:6])
    if len(undecided) > 6:
        names += f" and {len(undecided) - 6} more"
    if needed is None or None in needed:
        more = "more requests alone may not decide"
        if needed is not None:
            more = "; ".join(f"about {n:,} more {side} requests" for side, n in
                             zip(("baseline", "candidate"), needed, strict=True)
                             if n is not None) or more
        return f"insufficient data ({names}): {more}"
    return (f"insufficient data ({names}): about {needed[0]:,} more baseline and "
            f"{needed[1]:,} more candidate requests")
