"""A/B experiments: every request is served by one arm, and the candidate changes some routes.

The arms share the traffic (the same arrivals, prompts and lengths); a request's arm is drawn
on its own random stream, so the arm split never reshuffles the rest of a simulation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from monitor.simulate.exceptions import SimulationError
from monitor.simulate.profiles import DraftModel, check_outcomes

ARMS = ("baseline", "candidate")


@dataclass(frozen=True)
class ArmChange:
    """What the candidate arm does differently on one route.

    ``acceptance_factor`` multiplies the route's engine acceptance rate (and so, through the
    latency model, decode time and GPU-seconds); ``draft`` is the candidate's draft model
    (None: the baseline's); ``outcomes`` replace some of the route's outcome probabilities
    (see :meth:`RouteProfile.outcome_probability`).
    """

    acceptance_factor: float = 1.0
    draft: DraftModel | None = None
    outcomes: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.acceptance_factor > 0:
            raise SimulationError("acceptance_factor must be > 0")
        object.__setattr__(self, "outcomes", MappingProxyType(dict(self.outcomes)))


@dataclass(frozen=True)
class Experiment:
    """An A/B split of all traffic: arm ``candidate`` with probability ``candidate_share``.

    >>> e = Experiment("draft-v2", changes={"code-assistant": ArmChange(1.1)})
    >>> e.change("code-assistant").acceptance_factor, e.change("chat").acceptance_factor
    (1.1, 1.0)
    """

    name: str = "draft-v2"
    candidate_share: float = 0.5
    changes: Mapping[str, ArmChange] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name or len(self.name) > 128:
            raise SimulationError(f"experiment name must have 1..128 characters: {self.name!r}")
        if not 0.0 <= self.candidate_share <= 1.0:
            raise SimulationError("candidate_share must be a fraction in [0, 1]")
        object.__setattr__(self, "changes", MappingProxyType(dict(self.changes)))

    def change(self, route: str) -> ArmChange:
        """The candidate's change on ``route`` (no change if the experiment names none)."""
        return self.changes.get(route, _NO_CHANGE)

    def check_routes(
        self, routes: Mapping[str, float], outcomes: Mapping[str, Mapping[str, float]]
    ) -> None:
        """Fail on changes that name unknown routes or push acceptance to 1.

        ``routes`` maps route name -> acceptance, ``outcomes`` route name -> its outcomes.
        """
        for route, change in self.changes.items():
            if route not in routes:
                raise SimulationError(
                    f"experiment {self.name!r} changes route {route!r}; routes are: "
                    f"{', '.join(routes)}"
                )
            if not routes[route] * change.acceptance_factor < 1.0:
                raise SimulationError(
                    f"experiment {self.name!r}: candidate acceptance on {route!r} must stay "
                    f"below 1"
                )
            reported = dict(outcomes[route])
            where = f"experiment {self.name!r} on {route!r}"
            missing = set(change.outcomes) - set(reported)
            if missing:
                raise SimulationError(
                    f"{where}: the route reports no {', '.join(sorted(missing))} outcome"
                )
            check_outcomes(where, {**reported, **change.outcomes})


_NO_CHANGE = ArmChange()

# The candidate of the `experiment` scenario: a new draft release. It was distilled on more
# code, so code-assistant accepts more (0.80 -> 0.88: fewer verify steps, fewer GPU-seconds per
# request), but on the JSON tool route it breaks tool calls far more often (0.97 -> 0.85), a
# small slice where the faster setup is a loss.
CANDIDATE_DRAFT_CODE = DraftModel(
    "qwen2.5-coder-0.5b-instruct", "2026-11-20", "qwen2", "2026-10-14"
)
CANDIDATE_DRAFT_JSON = DraftModel("qwen2.5-0.5b-instruct", "2026-11-20", "qwen2", "2026-10-02")


def draft_v2(name: str = "draft-v2", breaks_tools: bool = True) -> Experiment:
    """The draft release of the experiment scenarios; ``breaks_tools`` False keeps tool calls."""
    tools = {"tool_calls_valid": 0.85} if breaks_tools else {}
    return Experiment(
        name,
        changes={
            "code-assistant": ArmChange(1.1, CANDIDATE_DRAFT_CODE),
            "json-tools": ArmChange(1.0, CANDIDATE_DRAFT_JSON, tools),
        },
    )


def null_experiment(name: str = "draft-v2") -> Experiment:
    """Two arms that behave identically: any difference the gate finds is a false alarm."""
    return Experiment(name)
