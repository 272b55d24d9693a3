"""The release gate (``specwatch gate``, docs/gate.md): baseline against candidate on matched
traffic, per route and overall, on always-valid tests.

``sides.py`` reads the two sides (an experiment's arms, or a recorded change's before and
after); ``stats.py`` holds the confidence sequences; ``judge.py`` turns them into verdicts;
``text.py`` renders the table and the JSON; ``html.py`` the report's section;
``listing.py`` gates every stored experiment (for the report).
"""

from __future__ import annotations

from monitor.gate.judge import (
    FAIL,
    INSUFFICIENT,
    PASS,
    GateJudgement,
    GateSettings,
    MetricResult,
    RouteResult,
    judge_gate,
)
from monitor.gate.listing import judge_experiments
from monitor.gate.sides import (
    GateSides,
    UnknownChangeError,
    UnknownExperimentError,
    change_sides,
    experiment_sides,
    sides_of_rows,
)

__all__ = ["FAIL", "INSUFFICIENT", "PASS", "GateJudgement", "GateSettings", "GateSides",
           "MetricResult", "RouteResult", "UnknownChangeError", "UnknownExperimentError",
           "change_sides", "experiment_sides", "judge_experiments", "judge_gate",
           "sides_of_rows"]
