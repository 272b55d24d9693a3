"""A read-only view of what detection judges, for the exposition, the API and the report.

The mappings are live and read-only: read them on the thread that feeds the detection
(the daemon's pipeline thread) and hand plain results to other threads.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from monitor.change_record import ChangeRecord
from monitor.detect.lossless import LosslessMonitor
from monitor.detect.segments import Route, Segment

__all__ = ["JudgedView"]


@dataclass(frozen=True, slots=True)
class JudgedView:
    """The routes (by name) and segments (by id) judged by this process, and the routes'
    losslessness monitors (by route name; only routes that sent greedy hashed requests)."""

    routes: Mapping[str, Route]
    segments: Mapping[str, Segment]
    lossless: Mapping[str, LosslessMonitor] = field(
        default_factory=lambda: MappingProxyType({}))

    def segments_of(self, route: Route) -> Iterator[tuple[str, Segment]]:
        """The route's segments (id, segment), in the order the route first saw them."""
        segments = self.segments
        for seg_id in route.segments:
            seg = segments.get(seg_id)
            if seg is not None:
                yield seg_id, seg

    def pair_conditions(self) -> Iterator[tuple[str, str, str]]:
        """(rule, route, severity) of every firing pair condition held outside the routes'
        and segments' ``firing`` (``route.metadata``'s and the losslessness monitors')."""
        for route in self.routes.values():
            for cond in route.metadata.conditions:
                yield cond.rule, route.name, cond.severity
        for name, monitor in self.lossless.items():
            for _ in monitor.conditions:
                yield monitor.rule, name, monitor.severity

    @property
    def changes(self) -> dict[str, ChangeRecord]:
        """The latest change of each segment that has one (change id -> record)."""
        return {seg.versus.record.change_id: seg.versus.record
                for seg in self.segments.values() if seg.versus is not None}
