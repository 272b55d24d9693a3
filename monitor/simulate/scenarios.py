"""Named presets: ``specwatch simulate --scenario incidents --duration 6h``.

Incident times are fractions of the duration, so a preset makes sense at any length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from monitor.simulate.config import SimulationConfig
from monitor.simulate.durations import format_duration
from monitor.simulate.exceptions import SimulationError
from monitor.simulate.experiment import draft_v2, null_experiment
from monitor.simulate.incidents import Incident
from monitor.simulate.profiles import EXPERIMENT_ROUTES, POLICY_ROUTES

# Telemetry v1.1 traffic: the default routes plus json-tools, default delivery noise, and a
# few shadow requests so that losslessness has pairs to compare.
_V11: tuple[tuple[str, Any], ...] = (
    ("routes", EXPERIMENT_ROUTES), ("v11", True), ("shadow", 0.02),
    ("duplicates", 0.001), ("late", 0.005), ("late_max", 60.0),
)

# (kind, route, start fraction, length fraction or None = to the end, extra "k=v" params)
_Plan = tuple[tuple[str, str, float, float | None, str], ...]


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    duration_s: float
    incidents: _Plan = ()
    settings: tuple[tuple[str, Any], ...] = ()

    def incidents_for(self, duration_s: float) -> tuple[Incident, ...]:
        out = []
        grain = 60.0 if duration_s >= 3600 else 1.0  # whole minutes read better in specs

        def snap(seconds: float) -> str:
            return format_duration(max(grain, round(seconds / grain) * grain))

        for kind, route, at, length, extra in self.incidents:
            spec = f"{kind}:route={route},at={snap(at * duration_s)}"
            if length is not None:
                spec += f",for={snap(length * duration_s)}"
            out.append(Incident.parse(spec + (f",{extra}" if extra else "")))
        return tuple(out)


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "default",
            "five routes, daily cycle and bursts, a little delivery noise, no incidents",
            3600.0,
            settings=(("duplicates", 0.001), ("late", 0.005), ("late_max", 60.0)),
        ),
        Scenario(
            "quiet",
            "five routes, daily cycle only: no incidents, bursts, duplicates or late events",
            3600.0,
            settings=(("bursts_per_hour", 0.0),),
        ),
        Scenario(
            "incidents",
            "a few incidents: draft drift on creative-writing, a tokenizer swap, a silent route, "
            "speculation switched off, draft evictions",
            6 * 3600.0,
            incidents=(
                ("revision_change", "creative-writing", 0.25, None, "factor=0.85"),
                ("tokenizer_swap", "translation", 0.40, 0.10, ""),
                ("silence", "chat", 0.55, 0.05, ""),
                ("speculation_off", "summarize", 0.65, 0.10, ""),
                ("eviction", "code-assistant", 0.80, 0.08, "share=0.3"),
            ),
            settings=(("duplicates", 0.001), ("late", 0.005), ("late_max", 60.0)),
        ),
        Scenario(
            "noisy",
            "default traffic with heavy delivery noise: 2 % duplicates, 5 % late by up to 5 min",
            3600.0,
            settings=(("duplicates", 0.02), ("late", 0.05), ("late_max", 300.0)),
        ),
        Scenario(
            "outage",
            "a batch surge on chat, then an outage on every route (errors, slow decode)",
            2 * 3600.0,
            incidents=(
                ("batch_surge", "chat", 0.20, 0.15, "factor=3"),
                ("error_spike", "*", 0.50, 0.05, "rate=0.3"),
            ),
        ),
        Scenario(
            "every-incident",
            "each incident kind once, one after the other, with quiet gaps between them",
            8 * 3600.0,
            incidents=(
                ("revision_change", "creative-writing", 0.03, 0.06, "factor=0.85"),
                ("tokenizer_swap", "translation", 0.12, 0.06, ""),
                ("eviction", "code-assistant", 0.21, 0.06, "share=0.3"),
                ("silence", "chat", 0.30, 0.06, ""),
                ("speculation_off", "summarize", 0.39, 0.06, ""),
                ("acceptance_shift", "code-assistant", 0.48, 0.06, "factor=0.8"),
                ("error_spike", "chat", 0.57, 0.06, "rate=0.25"),
                ("batch_surge", "translation", 0.66, 0.06, "factor=3"),
                ("draft_change", "chat", 0.75, 0.06, "factor=0.85"),
                ("draft_length", "creative-writing", 0.84, 0.06, "k=5"),
            ),
        ),
        Scenario(
            "experiment",
            "A/B split of every request (experiment draft-v2): the candidate draft accepts more "
            "on code-assistant but breaks tool calls on json-tools (0.97 -> 0.85); "
            "telemetry v1.1 fields, 2 % shadow requests",
            3600.0,
            settings=(*_V11, ("experiment", draft_v2())),
        ),
        Scenario(
            "experiment-null",
            "A/B split where both arms behave the same (no real difference); telemetry v1.1",
            3600.0,
            settings=(*_V11, ("experiment", null_experiment())),
        ),
        Scenario(
            "experiment-pass",
            "A/B split: the candidate draft accepts more on code-assistant and changes nothing "
            "else; telemetry v1.1",
            3600.0,
            settings=(*_V11, ("experiment", draft_v2(breaks_tools=False))),
        ),
        Scenario(
            "lossy-verifier",
            "telemetry v1.1 with 5 % shadow requests; from 1/3 to 2/3 of the run the verifier "
            "on code-assistant keeps unchecked drafts, so 20 % of its outputs differ",
            3 * 3600.0,
            incidents=(("lossy_verifier", "code-assistant", 1 / 3, 1 / 3, "share=0.2"),),
            settings=(*_V11, ("shadow", 0.05)),
        ),
        Scenario(
            # Stationary for its two days, so a later held-out window agrees with training;
            # the true speed model is in monitor.simulate.policy_truth.
            "policy",
            "traffic a speculation policy must find: code-assistant acceptance by tags.lang "
            "(python high, rust medium, haskell a loss), verification cost rising with batch "
            "size, 15 % of requests without speculation, a prefill-bound summarize route; "
            "telemetry v1.1",
            2 * 86400.0,
            settings=(("routes", POLICY_ROUTES), ("v11", True), ("duplicates", 0.001),
                      ("late", 0.005), ("late_max", 60.0)),
        ),
    )
}


def canonical_name(name: str) -> str:
    """Scenario names use hyphens; ``experiment_null`` is read as ``experiment-null``."""
    return name.replace("_", "-")


def scenario_config(
    name: str = "default", duration_s: float | None = None, **overrides: Any
) -> SimulationConfig:
    """The preset's config at ``duration_s`` (its own default if None), then ``overrides``.

    >>> cfg = scenario_config("incidents", duration_s=3600, seed=3)
    >>> for incident in cfg.incidents[:2]:
    ...     print(incident)
    revision_change:route=creative-writing,at=15m,factor=0.85
    tokenizer_swap:route=translation,at=24m,for=6m
    """
    try:
        preset = SCENARIOS[canonical_name(name)]
    except KeyError:
        raise SimulationError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}") from None
    duration = preset.duration_s if duration_s is None else duration_s
    values: dict[str, Any] = dict(preset.settings)
    values["duration_s"] = duration
    values["incidents"] = preset.incidents_for(duration)
    values.update(overrides)
    return SimulationConfig(**values)

