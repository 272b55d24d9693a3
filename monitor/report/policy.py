"""The report's "Where to speculate" section, read: the route's policy over the report's range.

The policy is learnt by :func:`monitor.policy.learn.compute_policy` from the route's slice
rollups in ``[since, until)``, the last ``policy.holdout_share`` of them held out, exactly as
``specwatch policy --route R --train-since SINCE --holdout-until UNTIL`` does. The section is
an addition to the page, never a reason to lose it: when the policy cannot be computed (no
slice rollups, no speculative traffic, or a fault in the policy code) it holds the reason
instead of the result.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from monitor.config import Config
from monitor.policy.exceptions import PolicyError
from monitor.policy.learn import compute_policy
from monitor.policy.result import Pair, PairSchedule, PolicyResult, RouteGain, SliceDecision
from monitor.store.store import Store

__all__ = ["PolicySection", "gather_policy"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PolicySection:
    """A route's policy (``result``), or why there is none (``message``). ``current``: the
    model pair the route ran last, whose schedule the section's one chart draws.

    >>> PolicySection("code", None, "no slice rollups in the window").computed
    False
    """

    route: str
    result: PolicyResult | None
    message: str = ""
    current: Pair | None = None

    @property
    def computed(self) -> bool:
        return self.result is not None

    @property
    def gains(self) -> tuple[RouteGain, ...]:
        return () if self.result is None else tuple(
            g for g in self.result.gains if g.route == self.route)

    @property
    def slices(self) -> tuple[SliceDecision, ...]:
        return () if self.result is None else tuple(
            s for s in self.result.slices if s.route == self.route)

    @property
    def pooled(self) -> tuple[SliceDecision, ...]:
        """The route's setting per model pair, pooled over the slices."""
        return () if self.result is None else tuple(
            r for r in self.result.routes if r.route == self.route)

    @property
    def schedules(self) -> tuple[PairSchedule, ...]:
        return () if self.result is None else tuple(s for s in self.result.schedules
                                                    if s.buckets)

    @property
    def charted(self) -> PairSchedule | None:
        """The schedule the chart draws: the current pair's; else (its revision not in the
        training window) the pair with the most training requests."""
        for s in self.schedules:
            if s.pair == self.current:
                return s
        return max(self.schedules, key=lambda s: sum(b.requests for b in s.buckets),
                   default=None)


def gather_policy(store: Store, config: Config, route: str, *, since: datetime | None,
                  until: datetime | None, current: Pair | None = None) -> PolicySection:
    """The route's policy over ``[since, until)``, or the reason it cannot be had."""
    try:
        result = compute_policy(store, config, route=route, train_since=since,
                                holdout_until=until)
    except PolicyError as e:
        return PolicySection(route, None, str(e), current)
    except (ArithmeticError, LookupError, TypeError, ValueError) as e:
        # A fault in the policy code must not cost the operator the rest of the page: it is
        # logged with its traceback and named in the section. (Store errors are not caught:
        # the rest of the report reads the same store and says so its own way.)
        log.exception("policy for route %r could not be computed", route)
        return PolicySection(route, None, f"the policy could not be computed ({type(e).__name__}:"
                             f" {e}); see the log", current)
    return PolicySection(route, result, current=current)
