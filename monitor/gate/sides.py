"""The two sides of a release gate, per route: an A/B experiment's arms, or a recorded change.

- ``experiment``: the rollups of an experiment (``Store.experiment_stats``), arm ``baseline``
  against arm ``candidate``, each route's series summed; other arms are left out (named in
  ``notes``). Both arms ran at once on split traffic: matched.
- ``change``: a setup change on a route (``Store.changes``), the replaced setup's series before
  the change against the new setup's series after it, over the windows of the change report
  (``monitor/changes/judge.py``: ``detection.change_window`` each side, cut at the previous
  setup's arrival and at the next change), optionally cut further to ``[since, until)``. The
  sides are consecutive, not simultaneous: a change of traffic mix at the same time shows up
  as a difference too (the notes say so).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from monitor.aggregate.bucket import BucketStats
from monitor.change_record import ChangeRecord
from monitor.exceptions import SpecwatchError
from monitor.store.query import rfc3339

if TYPE_CHECKING:
    from monitor.store.store import Store

__all__ = ["BASELINE", "CANDIDATE", "GateSides", "UnknownChangeError",
           "UnknownExperimentError", "change_sides", "experiment_sides", "sides_of_rows"]

BASELINE, CANDIDATE = "baseline", "candidate"


class UnknownExperimentError(SpecwatchError):
    """No experiment of that name in the store (exit 2: a usage error)."""


class UnknownChangeError(SpecwatchError):
    """No recorded change with that id (exit 2)."""


class ExperimentRow(Protocol):
    """What :func:`sides_of_rows` reads of ``monitor.store.experiments.ExperimentStats``."""

    @property
    def arm(self) -> str: ...
    @property
    def route(self) -> str: ...
    @property
    def stats(self) -> BucketStats: ...


@dataclass(slots=True)
class GateSides:
    """Per route, the merged statistics of each side, and what the sides are."""

    kind: str  # "experiment" or "change"
    name: str  # the experiment's name or the change's id
    baseline: dict[str, BucketStats]
    candidate: dict[str, BucketStats]
    since: datetime | None = None
    until: datetime | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def routes(self) -> list[str]:
        return sorted(set(self.baseline) | set(self.candidate))

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name,
                "since": None if self.since is None else rfc3339(self.since),
                "until": None if self.until is None else rfc3339(self.until),
                **self.detail}


def _add(into: dict[str, BucketStats], route: str, stats: BucketStats) -> None:
    acc = into.get(route)
    if acc is None:
        acc = into[route] = BucketStats()
    acc.merge(stats)


def sides_of_rows(name: str, rows: Sequence[ExperimentRow], *, since: datetime | None = None,
                  until: datetime | None = None) -> GateSides:
    """An experiment's sides from its rollup rows (any number per arm and route: series and
    hours are summed)."""
    sides = GateSides("experiment", name, {}, {}, since, until)
    others: set[str] = set()
    for row in rows:
        if row.arm == BASELINE:
            _add(sides.baseline, row.route, row.stats)
        elif row.arm == CANDIDATE:
            _add(sides.candidate, row.route, row.stats)
        else:
            others.add(row.arm)
    if others:
        sides.notes.append(f"arms other than baseline and candidate left out: "
                           f"{', '.join(sorted(others))}")
    return sides


def experiment_sides(store: Store, name: str, since: datetime | None = None,
                     until: datetime | None = None) -> GateSides:
    """The arms of experiment ``name``; :class:`UnknownExperimentError` if the store has never
    seen it (an experiment with no traffic in ``[since, until)`` has empty sides)."""
    rows = store.experiment_stats(name, since, until)
    if not rows:
        known = [e.name for e in store.experiments()]
        if name not in known:
            hint = f" (known: {', '.join(sorted(known)[:10])})" if known else ""
            raise UnknownExperimentError(f"no experiment named {name!r} in the store{hint}")
    return sides_of_rows(name, rows, since=since, until=until)


def _utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def _clip(window: tuple[float, float], since: datetime | None,
          until: datetime | None) -> tuple[float, float]:
    lo, hi = window
    if since is not None:
        lo = max(lo, since.timestamp())
    if until is not None:
        hi = min(hi, until.timestamp())
    return lo, max(lo, hi)


def change_sides(store: Store, change_id: str, *, window: float,
                 since: datetime | None = None, until: datetime | None = None) -> GateSides:
    """The setup a change replaced (before) against the new one (after) on its route."""
    from monitor.changes.judge import STEPS, _read_sides, side_windows

    records = store.changes()
    mine = [r for r in records if r.change_id == change_id]
    if not mine:
        raise UnknownChangeError(f"no recorded change with id {change_id!r} "
                                 "(specwatch changes --format json lists them)")
    sides = GateSides("change", change_id, {}, {}, since, until)
    detail: list[dict[str, Any]] = []
    for record in mine:
        route_changes = [r for r in records if r.route == record.route]
        for granularity, step in STEPS.items():
            windows = side_windows(record, route_changes, window, step)
            clipped = (_clip(windows[0], since, until), _clip(windows[1], since, until))
            before, after = _read_sides(store, record, clipped, granularity)
            if before.buckets or after.buckets or granularity == "hour":
                break
        if before.buckets:
            _add(sides.baseline, record.route, before.merged)
        if after.buckets:
            _add(sides.candidate, record.route, after.merged)
        detail.append(_change_json(record, before.to_json(), after.to_json(), granularity))
    sides.detail = {"change": detail[0] if len(detail) == 1 else detail}
    sides.notes.append("a change's sides are consecutive, not simultaneous: a shift of the "
                       "traffic at the same time counts as a difference too")
    return sides


def _change_json(record: ChangeRecord, before: Mapping[str, Any], after: Mapping[str, Any],
                 granularity: str) -> dict[str, Any]:
    return {"route": record.route, "temperature": record.temperature,
            "at": rfc3339(_utc(record.at)), "kind": record.kind,
            "previous": dict(record.previous), "current": dict(record.current),
            "before": {**before, "granularity": granularity},
            "after": {**after, "granularity": granularity}}
