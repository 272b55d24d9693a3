"""The non-CUSUM rules' detectors in one place: which class decides a rule, restoring any of them.

Every detector here exposes a *condition*: ``firing``, ``changed`` (True only right after the
update on which ``firing`` flipped) and ``evidence()`` (an alert's ``details``), plus ``rule``
and ``severity``. :class:`~monitor.detect.metadata.MetadataRules` holds one condition per
(rule, model pair) and reports its changes as ``flips``, and so does
:class:`~monitor.detect.lossless.LosslessMonitor` (``output_mismatch``, per model pair). The
engine turns flips into alert records; the detectors know nothing of alerts, sinks or clocks.

>>> SEVERITY["speculation_inactive"], RULES["below_breakeven"].__name__
('critical', 'BreakevenMonitor')
>>> m = restore(StalenessMonitor(silence=60).snapshot())
>>> type(m).__name__, m.silence
('StalenessMonitor', 60.0)
>>> restore({"kind": "nope", "version": 1})
Traceback (most recent call last):
...
monitor.exceptions.StateVersionError: unknown detector state kind 'nope'
"""

from __future__ import annotations

from typing import Any, Protocol

from monitor.detect.activity import ContentionMonitor, InactivityMonitor, StalenessMonitor
from monitor.detect.breakeven import BreakevenMonitor
from monitor.detect.exceptions import StateVersionError
from monitor.detect.lossless import LosslessMonitor
from monitor.detect.metadata import MetadataRules
from monitor.detect.positions import PositionCurve
from monitor.detect.throughput import ThroughputMonitor
from monitor.rules import CATALOGUE

__all__ = ["KINDS", "RULES", "SEVERITY", "Condition", "restore"]

KINDS: dict[str, Any] = {
    cls.KIND: cls
    for cls in (
        BreakevenMonitor,
        PositionCurve,
        ThroughputMonitor,
        MetadataRules,
        ContentionMonitor,
        StalenessMonitor,
        InactivityMonitor,
        LosslessMonitor,
    )
}
"""Snapshot ``kind`` -> detector class."""

RULES: dict[str, type] = {
    rule.name: KINDS[rule.detector] for rule in CATALOGUE.values() if rule.detector in KINDS
}
"""Rule name -> the detector class that evaluates it (the acceptance rules are the
change-point detector's, :mod:`monitor.detect.acceptance`)."""

SEVERITY: dict[str, str] = {name: CATALOGUE[name].severity for name in RULES}
"""The severities of :data:`RULES`, from the catalogue (``monitor/rules.py``)."""


class Condition(Protocol):
    """What the engine reads from a single-condition detector after each update."""

    rule: str
    severity: str

    @property
    def firing(self) -> bool: ...

    @property
    def changed(self) -> bool: ...

    def evidence(self) -> dict[str, Any]: ...


def restore(data: dict[str, Any]) -> Any:
    """Restore any of this module's detectors from its snapshot, by ``kind``."""
    cls = KINDS.get(data.get("kind"))  # type: ignore[arg-type]
    if cls is None:
        raise StateVersionError(f"unknown detector state kind {data.get('kind')!r}")
    return cls.restore(data)
