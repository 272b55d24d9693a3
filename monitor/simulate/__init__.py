"""Simulated speculative-decoding telemetry for the demo, the tests and the benchmarks.

:class:`Simulator` turns a :class:`SimulationConfig` (routes as :class:`RouteProfile`,
scripted :class:`Incident` s, seed, rate, noise) into telemetry v1 dicts; :func:`write_file`
and :class:`KafkaWriter` send them on; :func:`register` adds ``specwatch simulate``.

- :mod:`.profiles` routes and their calibration, :mod:`.acceptance` the acceptance math,
- :mod:`.traffic` arrivals (daily cycle, bursts), :mod:`.model` per-request numbers,
- :mod:`.incidents` and :mod:`.effects` incidents, :mod:`.noise` duplicates and late events,
- :mod:`.experiment` A/B splits, :mod:`.v11` telemetry v1.1 fields (outcome, GPU time, hashes),
- :mod:`.policy_traits`, :mod:`.policy_model` traffic of the ``policy`` scenario (tagged
  acceptance, batch-dependent verification cost, requests without speculation) and
  :mod:`.policy_truth` its true speed model (``true_speedup``, ``true_best_k``),
- :mod:`.scenarios` named presets, :mod:`.writers` outputs, :mod:`.cli` the command.
"""

from monitor.simulate.cli import register
from monitor.simulate.config import DEFAULT_START, SimulationConfig
from monitor.simulate.durations import parse_duration, parse_time
from monitor.simulate.exceptions import SimulationError
from monitor.simulate.experiment import ARMS, ArmChange, Experiment
from monitor.simulate.incidents import KINDS, Incident
from monitor.simulate.profiles import (
    DEFAULT_ROUTES,
    EXPERIMENT_ROUTES,
    JSON_TOOLS,
    POLICY_ROUTES,
    DraftModel,
    RouteProfile,
    TargetModel,
)
from monitor.simulate.scenarios import SCENARIOS, scenario_config
from monitor.simulate.simulator import Simulator
from monitor.simulate.writers import KafkaWriter, write_file

__all__ = [
    "ARMS",
    "DEFAULT_ROUTES",
    "EXPERIMENT_ROUTES",
    "JSON_TOOLS",
    "POLICY_ROUTES",
    "DEFAULT_START",
    "KINDS",
    "SCENARIOS",
    "ArmChange",
    "DraftModel",
    "Experiment",
    "Incident",
    "KafkaWriter",
    "RouteProfile",
    "SimulationConfig",
    "SimulationError",
    "Simulator",
    "TargetModel",
    "parse_duration",
    "parse_time",
    "register",
    "scenario_config",
    "write_file",
]
