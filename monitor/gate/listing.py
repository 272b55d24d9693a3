"""Every stored experiment gated at once: what the HTML report shows for a route."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from monitor.gate.judge import GateJudgement, GateSettings, judge_gate
from monitor.gate.sides import experiment_sides

if TYPE_CHECKING:
    from monitor.store.store import Store

__all__ = ["judge_experiments"]


def judge_experiments(store: Store, *, route: str | None = None, since: datetime | None = None,
                      until: datetime | None = None,
                      settings: GateSettings | None = None) -> list[GateJudgement]:
    """The gate of every experiment with hours in ``[since, until)`` (and traffic on
    ``route``, when given), by name."""
    out = []
    for summary in store.experiments():
        if since is not None and summary.last < since.replace(minute=0, second=0,
                                                              microsecond=0):
            continue
        if until is not None and summary.first >= until:
            continue
        sides = experiment_sides(store, summary.name, since, until)
        if route is not None and route not in sides.routes:
            continue
        out.append(judge_gate(sides, settings))
    return out
