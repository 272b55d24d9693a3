"""The frozen configuration of one simulation."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from monitor.simulate.durations import parse_time
from monitor.simulate.exceptions import SimulationError
from monitor.simulate.experiment import Experiment
from monitor.simulate.incidents import (
    ACCEPTANCE_FACTOR_KINDS,
    NEEDS_DRAFT,
    V11_KINDS,
    Incident,
)
from monitor.simulate.profiles import DEFAULT_ROUTES, RouteProfile

DEFAULT_START = "2026-11-02T00:00:00Z"  # a Monday at midnight UTC: the daily trough is 02:00


@dataclass(frozen=True)
class SimulationConfig:
    """What to simulate. Same config (seed included) -> same events, byte for byte.

    ``start`` is event time of the first instant (RFC 3339, Unix seconds or a datetime);
    ``duration_s`` None runs forever. ``rate`` is the mean events per second of event time over
    a day; ``diurnal`` is the amplitude of the daily cycle (peak 14:00 UTC, trough 02:00) and
    ``bursts_per_hour`` how often a burst (x1.5-3 for a few minutes, on one route or all)
    starts. ``duplicates`` / ``late`` are fractions of events re-sent a few events later /
    emitted up to ``late_max`` seconds after their event time. ``error_rate`` is the
    baseline share of requests that end in error, timeout or cancellation.

    Telemetry v1.1: ``v11`` adds ``tags``, ``outcome``, ``gpu_seconds``, ``itl_ms`` and, on
    greedy routes, ``prompt_hash`` / ``output_hash``; ``experiment`` splits every request
    between a baseline and a candidate arm; ``shadow`` is the share of greedy requests
    also served by a non-speculative upstream (as ``specwatch proxy --shadow-upstream``
    does), each one a second event with the same prompt hash and no ``spec``. Off by default,
    so configs without them give the same events as before.
    """

    routes: tuple[RouteProfile, ...] = DEFAULT_ROUTES
    incidents: tuple[Incident, ...] = ()
    seed: int = 0
    start: datetime | float | str = DEFAULT_START
    duration_s: float | None = 3600.0
    rate: float = 50.0
    duplicates: float = 0.0
    late: float = 0.0
    late_max: float = 300.0
    diurnal: float = 0.5
    bursts_per_hour: float = 0.5
    error_rate: float = 0.005
    timeout_ms: float = 60_000.0
    engine: str = "vllm"
    v11: bool = False
    experiment: Experiment | None = None
    shadow: float = 0.0
    start_ts: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "routes", tuple(self.routes))
        object.__setattr__(
            self,
            "incidents",
            tuple(Incident.parse(i) if isinstance(i, str) else i for i in self.incidents),
        )
        object.__setattr__(self, "start_ts", parse_time(self.start))
        if not self.routes:
            raise SimulationError("at least one route is required")
        names = [r.name for r in self.routes]
        if len(set(names)) != len(names):
            raise SimulationError(f"route names must be unique: {names}")
        if sum(r.share for r in self.routes) <= 0:
            raise SimulationError("route shares must not all be 0")
        for inc in self.incidents:
            if inc.route == "*":
                continue
            if inc.route not in names:
                raise SimulationError(
                    f"incident {inc} names route {inc.route!r}; routes are: {', '.join(names)}"
                )
            route = self.route(inc.route)
            if inc.kind in NEEDS_DRAFT and route.draft is None:
                raise SimulationError(
                    f"incident {inc}: route {inc.route!r} drafts without a draft model "
                    f"({route.method}), so it has no draft to swap, evict or replace"
                )
            if inc.kind in ACCEPTANCE_FACTOR_KINDS:
                moved = route.acceptance * float(inc.param("factor"))
                if not moved < 1.0:
                    raise SimulationError(
                        f"incident {inc}: puts {inc.route!r}'s acceptance at "
                        f"{route.acceptance:g} x {inc.param('factor'):g} = {moved:.3g}, "
                        f"it must stay below 1"
                    )
        if not isinstance(self.seed, int) or self.seed < 0:
            raise SimulationError(f"seed must be an integer >= 0, got {self.seed!r}")
        if self.duration_s is not None and not self.duration_s >= 0:
            raise SimulationError("duration must be >= 0")
        if not self.rate > 0:
            raise SimulationError("rate must be > 0 events/s")
        if self.experiment is not None:
            self.experiment.check_routes(
                {r.name: r.acceptance for r in self.routes},
                {r.name: r.outcomes for r in self.routes},
            )
        if (self.shadow or any(i.kind in V11_KINDS for i in self.incidents)) and not self.v11:
            raise SimulationError("shadow requests and lossy_verifier need v1.1 fields (v11=True)")
        for name in ("duplicates", "late", "error_rate", "shadow"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise SimulationError(f"{name} must be a fraction in [0, 1]")
        if not 0.0 <= self.diurnal < 1.0:
            raise SimulationError("diurnal amplitude must be in [0, 1)")
        if self.late_max < 0 or self.bursts_per_hour < 0 or self.timeout_ms <= 0:
            raise SimulationError("late_max >= 0, bursts_per_hour >= 0, timeout_ms > 0 required")

    def with_(self, **changes: Any) -> SimulationConfig:
        """A copy with some fields changed (``incidents`` may hold spec strings)."""
        return replace(self, **changes)

    def add_incidents(self, incidents: Iterable[Incident | str]) -> SimulationConfig:
        return self.with_(incidents=(*self.incidents, *incidents))

    def route(self, name: str) -> RouteProfile:
        for r in self.routes:
            if r.name == name:
                return r
        raise KeyError(name)
