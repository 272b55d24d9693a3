"""Errors of the traffic simulator."""

from __future__ import annotations

from monitor.exceptions import SpecwatchError


class SimulationError(SpecwatchError, ValueError):
    """A scenario, incident spec, duration or time the simulator cannot use.

    It is a ``ValueError`` too, so argparse ``type=`` converters report it as a usage error.
    """
