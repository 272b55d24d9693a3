"""Learn a policy from slice records: where to speculate and how far, per slice of
pre-request signals, on an earlier window; judged on a later one (``monitor/policy/holdout.py``).

A slice is a route, a model pair and the values of the chosen features; features not chosen
are summed over. Requests without speculation carry no acceptance: they only feed the costs.
A slice with fewer than ``policy.min_requests`` training requests keeps its parent's setting
(the route and pair at its batch bucket, pooled over the other features; else the route and
pair pooled) and says so.

The one entry point for the CLI, the API, the report and the job is :func:`compute_policy`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Protocol

from monitor.config import Config
from monitor.detect.breakeven import _z
from monitor.policy.costs import CostTable
from monitor.policy.exceptions import PolicyUsageError
from monitor.policy.features import Buckets, parse_features
from monitor.policy.gains import route_gains
from monitor.policy.holdout import evaluate_holdout
from monitor.policy.predict import Evidence, Sums, best_length
from monitor.policy.result import (
    BucketChoice,
    Pair,
    PairSchedule,
    PolicyResult,
    SliceDecision,
    Window,
)
from monitor.policy.slice_ids import SliceId, feature_values, pair_of, slice_id_text
from monitor.policy.slices import SliceRecord

__all__ = ["DEFAULT_FEATURES", "NO_DATA", "SliceId", "compute_policy", "feature_values",
           "learn", "pair_of", "slice_id_text", "split_windows"]

DEFAULT_FEATURES = ("tags", "batch_size")
HOUR = 3600
NO_DATA = ("no slice rollups in the window: specwatch records them from telemetry v1.1 onwards "
           "when policy.enabled is on (the default); run the daemon (or replay) on such "
           "telemetry first")

TimeArg = datetime | int | None


class SliceSource(Protocol):
    def slice_records(self, since: datetime | None, until: datetime | None,
                      route: str | None) -> list[SliceRecord]: ...


def _ts(t: TimeArg) -> int | None:
    if t is None:
        return None
    return int(t.timestamp()) if isinstance(t, datetime) else int(t)


def split_windows(hours: Iterable[int], share: float,
                  train: tuple[TimeArg, TimeArg] | None,
                  holdout: tuple[TimeArg, TimeArg] | None) -> tuple[Window, Window | None, str]:
    """The training and held-out windows: as given, or the records' span with the last
    ``share`` held out, cut on an hour boundary. The holdout is strictly later.

    >>> split_windows([0, 3600, 7200], 1 / 3, None, None)[:2]
    (Window(since=0, until=7200), Window(since=7200, until=10800))
    >>> split_windows([0, 3600], 0.5, (0, 3600), (1800, None))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    monitor.policy.exceptions.PolicyUsageError: the held-out window starts at ... before the ...
    """
    hs = sorted(set(hours))
    data_start, data_end = hs[0], hs[-1] + HOUR
    t_since, t_until = (None, None) if train is None else (_ts(train[0]), _ts(train[1]))
    h_since, h_until = (None, None) if holdout is None else (_ts(holdout[0]), _ts(holdout[1]))
    if t_until is not None:
        tw = Window(t_since if t_since is not None else data_start, t_until)
        h_since = t_until if h_since is None else h_since
        if h_since < t_until:
            w = Window(h_since, t_until).to_json()
            raise PolicyUsageError(
                f"the held-out window starts at {w['since']}, before the training window ends "
                f"({w['until']}): a policy is judged on later traffic, never on a random or "
                "overlapping split")
        hw = Window(h_since, h_until if h_until is not None else max(data_end, h_since))
        if hw.until <= hw.since:
            return tw, None, "no held-out window: --holdout-until is not after --train-until"
        return tw, hw, ""
    start = max(data_start, t_since) if t_since is not None else data_start
    end = min(data_end, h_until) if h_until is not None else data_end
    n_hours = -(-(end - start) // HOUR)
    if n_hours < 2:
        return Window(start, end), None, ("the window spans under two hours: nothing is held "
                                          "out, the policy is not judged")
    held = min(n_hours - 1, max(1, round(n_hours * share)))
    cut = ((end - held * HOUR) // HOUR) * HOUR
    cut = max(cut, ((start // HOUR) + 1) * HOUR)
    return Window(start, cut), Window(cut, end), ""


class _Groups:
    """Training evidence per slice, per batch parent and per route+pair."""

    def __init__(self) -> None:
        self.slices: dict[SliceId, Evidence] = defaultdict(Evidence)
        self.batch_parents: dict[SliceId, Evidence] = defaultdict(Evidence)
        self.routes: dict[SliceId, Evidence] = defaultdict(Evidence)
        self.buckets: dict[tuple[Pair, str], Evidence] = defaultdict(Evidence)


def _group(records: Iterable[SliceRecord], costs: CostTable,
           features: Sequence[str]) -> _Groups:
    g = _Groups()
    batch_parent = "batch_size" in features and len(features) > 1
    for rec in records:
        s = rec.series
        if s.num_speculative_tokens <= 0:
            continue
        m = costs.m(s.target_model, s.target_revision, s.draft_model, rec.key.batch)
        pair = pair_of(rec)
        sums = Evidence.record_sums(rec, m)  # built once, added to each level
        hour = rec.hour
        g.slices[(s.route, pair, feature_values(rec.key, features))].add_sums(hour, sums)
        g.routes[(s.route, pair, ())].add_sums(hour, sums)
        g.buckets[(pair, rec.key.batch)].add_sums(hour, sums)
        if batch_parent:
            g.batch_parents[(s.route, pair, (("batch_size", rec.key.batch),))].add_sums(hour,
                                                                                       sums)
    return g


def _fmt_curve(speedups: Sequence[float | None]) -> str:
    return " ".join("-" if t is None else f"{t:.2f}" for t in speedups)


def _decision(sid: SliceId, ev: Evidence, z: float, config: Config, *, setting: int,
              decided_by: str, reason: str) -> SliceDecision:
    tot = ev.total()
    speedups = tot.speedups()
    rate, se = ev.acceptance_interval(z)
    iv = None if rate is None or se is None else (max(0.0, rate - z * se),
                                                  min(1.0, rate + z * se))
    return SliceDecision(
        id=slice_id_text(sid), route=sid[0], pair=sid[1], features=sid[2],
        requests=tot.requests, output_tokens=tot.output_tokens, measured_length=tot.length,
        acceptance=rate, acceptance_interval=iv, survival=tuple(tot.survival),
        marginal_cost=tot.marginal_cost, speedups=tuple(speedups),
        best_length=best_length(speedups, config.policy.min_gain),
        speculate=setting > 0, num_speculative_tokens=setting, decided_by=decided_by,
        reason=reason)


def _choose(tot: Sums, speedups: Sequence[float | None], min_gain: float) -> tuple[int, str]:
    """The setting its own evidence picks, and why."""
    if len(speedups) > 1 and all(t is None for t in speedups[1:]):
        # Nothing to predict from: say so, and leave the traffic as it runs.
        return tot.length, (f"no verification steps or per-position counts reported: the "
                            f"speedup cannot be predicted; keeps the draft length it ran at "
                            f"({tot.length})")
    best = best_length(speedups, min_gain)
    return best, _own_reason(tot, best, speedups)


def _own_reason(tot: Sums, best: int, speedups: Sequence[float | None]) -> str:
    if best == 0:
        top = max((t for t in speedups[1:] if t is not None), default=None)
        return ("no draft length beats no speculation by min_gain" if top is None
                else f"best predicted speedup {top:.2f}x does not pay: off")
    return f"T({best}) = {speedups[best]:.2f}x from {tot.requests} requests"


def learn(records: Sequence[SliceRecord], config: Config, *,
          features: str | Sequence[str] | None = None,
          train: tuple[TimeArg, TimeArg] | None = None,
          holdout: tuple[TimeArg, TimeArg] | None = None,
          route: str | None = None, resamples: int = 200, seed: int = 17) -> PolicyResult:
    """The policy learnt on ``train`` (default: the records' span but the last
    ``policy.holdout_share``) and judged on ``holdout`` (strictly later).

    Raises :class:`PolicyUsageError` (exit 2) when there is nothing to learn from, a feature
    is hindsight or unknown, or the held-out window starts before the training one ends.
    """
    feats = DEFAULT_FEATURES if features is None else parse_features(features)
    pc = config.policy
    z = _z(pc.confidence)
    recs = [r for r in records if route is None or r.series.route == route]
    if not recs:
        raise PolicyUsageError(NO_DATA + (f" (route {route})" if route else ""))
    train_w, hold_w, note = split_windows((r.hour for r in recs), pc.holdout_share, train,
                                          holdout)
    train_recs = [r for r in recs if train_w.contains(r.hour)]
    hold_recs = [r for r in recs if hold_w is not None and hold_w.contains(r.hour)]
    if not any(r.series.num_speculative_tokens > 0 for r in train_recs):
        w = train_w.to_json()
        raise PolicyUsageError(f"no speculative traffic in the training window {w['since']} to "
                               f"{w['until']}: nothing to learn a policy from")
    costs = CostTable.learn(train_recs, config, z)
    g = _group(train_recs, costs, feats)

    # route+pair pooled: the setting of last resort, and the routing table's default
    route_dec: dict[SliceId, SliceDecision] = {}
    for sid, ev in sorted(g.routes.items(), key=lambda kv: slice_id_text(kv[0])):
        tot = ev.total()
        best, reason = _choose(tot, tot.speedups(), pc.min_gain)
        if tot.requests < pc.min_requests:
            reason += f" (only {tot.requests} requests < policy.min_requests: thin evidence)"
        route_dec[sid] = _decision(sid, ev, z, config, setting=best, decided_by="pooled",
                                   reason=reason)
    parent_dec: dict[SliceId, SliceDecision] = {}
    for sid, ev in g.batch_parents.items():
        tot = ev.total()
        if tot.requests >= pc.min_requests:
            best, reason = _choose(tot, tot.speedups(), pc.min_gain)
            parent_dec[sid] = _decision(sid, ev, z, config, setting=best, decided_by="pooled",
                                        reason=reason)

    decisions: dict[SliceId, SliceDecision] = {}
    for sid, ev in g.slices.items():
        tot = ev.total()
        if tot.requests >= pc.min_requests:
            best, reason = _choose(tot, tot.speedups(), pc.min_gain)
            decisions[sid] = _decision(sid, ev, z, config, setting=best, decided_by="slice",
                                       reason=reason)
            continue
        small = f"only {tot.requests} requests (< policy.min_requests {pc.min_requests})"
        batch = dict(sid[2]).get("batch_size")
        parent = parent_dec.get((sid[0], sid[1], (("batch_size", batch),))) \
            if batch is not None else None
        if parent is not None:
            reason = (f"{small}: keeps the setting of its route and pair at batch {batch}, "
                      f"pooled over the other features ({parent.requests} requests)")
        else:
            parent = route_dec[(sid[0], sid[1], ())]
            reason = (f"{small}: keeps the setting of its route and pair, pooled "
                      f"({parent.requests} requests)")
        decisions[sid] = _decision(sid, ev, z, config, setting=parent.num_speculative_tokens,
                                   decided_by="parent", reason=reason)

    buckets = Buckets(pc.batch_edges)
    schedules = _schedules(g, buckets, config)
    ordered = sorted(decisions.values(), key=lambda d: _slice_order(d, buckets))
    evaluation = None
    hold_note = note
    if hold_w is not None:
        if not any(r.series.num_speculative_tokens > 0 for r in hold_recs):
            hold_note = "no speculative traffic in the held-out window: the policy is not judged"
        else:
            evaluation = evaluate_holdout(
                hold_recs, window=hold_w, costs=costs, features=feats, decisions=decisions,
                parents=parent_dec, routes=route_dec, train=g.slices, z=z,
                confidence=pc.confidence, resamples=resamples, seed=seed)
    gains = route_gains(train_recs, g.slices, decisions)
    settings = (("min_requests", pc.min_requests), ("min_gain", pc.min_gain),
                ("confidence", pc.confidence), ("holdout_share", round(pc.holdout_share, 4)))
    return PolicyResult(
        route=route, features=tuple(feats), train=train_w, holdout=evaluation,
        holdout_note=hold_note, costs=costs.sorted(), slices=tuple(ordered),
        schedules=schedules, routes=tuple(route_dec.values()), gains=gains,
        settings=settings)


def _slice_order(d: SliceDecision, buckets: Buckets) -> tuple[Any, ...]:
    feats = tuple((k, buckets.position(v) if k == "batch_size" else 0, v)
                  for k, v in d.features)
    return d.route, d.pair, feats


def _schedules(g: _Groups, buckets: Buckets, config: Config) -> tuple[PairSchedule, ...]:
    """Per pair, the best length per batch bucket pooled over routes and tags. Buckets with
    fewer than ``min_requests`` requests are left out (uncovered: the conservative choice
    applies there) unless no bucket of the pair has that many."""
    by_pair: dict[Pair, list[BucketChoice]] = defaultdict(list)
    for (pair, batch), ev in g.buckets.items():
        tot = ev.total()
        sp = tot.speedups()
        lo, hi = buckets.bounds(batch) if batch in buckets.labels else (1, None)
        by_pair[pair].append(BucketChoice(
            batch=batch, lo=lo, hi=hi, requests=tot.requests, output_tokens=tot.output_tokens,
            marginal_cost=tot.marginal_cost, speedups=tuple(sp),
            num_speculative_tokens=_choose(tot, sp, config.policy.min_gain)[0]))
    out = []
    for pair in sorted(by_pair):
        choices = by_pair[pair]
        enough = [c for c in choices if c.requests >= config.policy.min_requests]
        kept = sorted(enough or choices, key=lambda c: c.lo)
        out.append(PairSchedule(pair, tuple(kept)))
    return tuple(out)


def compute_policy(store: SliceSource, config: Config, *, route: str | None = None,
                   train_since: datetime | None = None, train_until: datetime | None = None,
                   holdout_until: datetime | None = None,
                   features: str | Sequence[str] | None = None) -> PolicyResult:
    """Read the slice records of ``[train_since, holdout_until)`` and learn the policy: the
    one call of ``specwatch policy``, ``/api/v1/policy``, the report and the daily job.

    Features are checked before the store is read (a hindsight field fails fast)."""
    if features is not None:
        features = parse_features(features)
    if train_since is not None and train_until is not None and train_since >= train_until:
        raise PolicyUsageError(f"--train-since {train_since.isoformat()} is not before "
                               f"--train-until {train_until.isoformat()}")
    records = store.slice_records(train_since, holdout_until, route)
    if not records:
        raise PolicyUsageError(NO_DATA + (f" (route {route})" if route else ""))
    return learn(records, config, features=features, train=(train_since, train_until),
                 holdout=(train_until, holdout_until), route=route)
