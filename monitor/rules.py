"""The rule catalogue: every alert rule's name, severity, scope, deciding detector and summary.

Everything that names a rule reads it here: the alert record's validation
(``monitor/alert_record.py``), the configuration's rule lists (``monitor/config.py``), the
detectors' ``severity`` (``monitor/detect/base.py``), the engine's alert text
(``monitor/detect/evaluate.py``) and the exposition's firing gauge. Adding a rule is one
:class:`Rule` here and the detector that decides it; its summary builder turns the
detector's ``evidence()`` into the record's ``summary`` (``shared/spec/alerts-v1.md``).

This module imports nothing of ``detect/``, ``alerts/`` or ``store/``: it sits below them all.

>>> CATALOGUE["speculation_inactive"].severity, CATALOGUE["below_breakeven"].detector
('critical', 'breakeven')
>>> CATALOGUE["memory_contention"].summary("firing", {"route": "code"}, {"share": 0.12})
'code: 12% of requests had the draft evicted or reloaded'
>>> names()[:3]
('acceptance_drop', 'below_breakeven', 'throughput_drop')
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

__all__ = ["CATALOGUE", "SEVERITIES", "Rule", "Scope", "fmt", "hhmm", "names", "severity"]

SEVERITIES = frozenset({"critical", "error", "warning", "info"})

Scope = Literal["route", "pair", "segment"]
"""What one alert of the rule is about: a route, a model pair on a route (labels of the pair),
or a segment (a pair x draft length x temperature bucket)."""

Summary = Callable[[str, dict[str, str], dict[str, Any]], str]
"""(state, labels, evidence) -> the record's summary; state is "firing" or "resolved"."""


@dataclass(frozen=True, slots=True)
class Rule:
    """One alert rule. ``detector`` is the ``KIND`` of the detector that decides it."""

    name: str
    severity: str
    scope: Scope
    detector: str
    summary: Summary

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"rule {self.name}: unknown severity {self.severity!r}")


def fmt(value: float | None, spec: str = ".2f") -> str:
    """A number for a summary, or ``n/a``.

    >>> fmt(0.6123), fmt(None), fmt(81.4, ".0f")
    ('0.61', 'n/a', '81')
    """
    return "n/a" if value is None else format(value, spec)


def hhmm(ts: float) -> str:
    """An event time as ``HH:MM`` UTC, as summaries write it."""
    return datetime.fromtimestamp(ts, UTC).strftime("%H:%M")


# -- summary builders, one per rule ----------------------------------------------------------


def _acceptance(verb: str) -> Summary:
    def summary(state: str, lab: dict[str, str], ev: dict[str, Any]) -> str:
        name = lab["route"]
        prev = ev.get("previous")
        if prev:  # a comparison with the setup this one replaced
            if state == "resolved":
                return (f"{name}: acceptance back at {fmt(ev.get('current'))} "
                        f"(previous setup {fmt(prev.get('rate'))})")
            return (f"{name}: acceptance {fmt(prev.get('rate'))} -> "
                    f"{fmt(ev.get('current'))} since {prev.get('change')}")
        if state == "resolved":
            return (f"{name}: acceptance back at {fmt(ev.get('current'))} "
                    f"(baseline {fmt(ev.get('baseline'))})")
        since = ev.get("change_ts")
        return (f"{name}: acceptance {verb} {fmt(ev.get('baseline'))} -> "
                f"{fmt(ev.get('current'))}"
                + (f" since {hhmm(since)}" if since else "")
                + f" (target {lab['target_revision']}, "
                f"draft {lab['draft_revision'] or lab.get('method', 'none')})")

    return summary


def _below_breakeven(state: str, lab: dict[str, str], ev: dict[str, Any]) -> str:
    name = lab["route"]
    if state == "firing":
        return (f"{name}: acceptance {fmt(ev['rate'])} is below the "
                f"break-even {ev['cutoff']:.2f} (95% interval "
                f"{ev['low']:.2f}-{ev['high']:.2f}); turn speculation off for this route")
    return (f"{name}: acceptance {fmt(ev['rate'])} back above "
            f"break-even {ev['cutoff']:.2f}")


def _throughput_drop(state: str, lab: dict[str, str], ev: dict[str, Any]) -> str:
    name = lab["route"]
    base = (ev.get("baseline") or {}).get("0.5")
    cur = ev["current"].get("0.5")
    if state == "firing":
        return (f"{name}: decode throughput p50 {fmt(cur, '.0f')} vs baseline "
                f"{fmt(base, '.0f')} tok/s with a flat error rate")
    return f"{name}: decode throughput back at {fmt(cur, '.0f')} tok/s"


def _metadata(state: str, lab: dict[str, str], ev: dict[str, Any], rule: str) -> str:
    route = lab["route"]
    if state == "resolved":
        return f"{route}: {rule.replace('_', ' ')} cleared for draft {lab['draft_model']}"
    if rule == "tokenizer_mismatch":
        return (f"{route}: draft {lab['draft_model']} uses tokenizer "
                f"{ev.get('draft_tokenizer')} but target {lab['target_model']} uses "
                f"{ev.get('target_tokenizer')}: drafts will be rejected")
    if ev.get("reason") == "pinned_target_revision":
        return (f"{route}: target revision {ev.get('target_revision')} differs from the "
                f"revision {ev.get('pinned_target_revision')} draft {lab['draft_model']} "
                f"was validated against")
    return (f"{route}: target revision changed {ev.get('previous_target_revision')} -> "
            f"{ev.get('target_revision')} while draft {lab['draft_model']} stayed at "
            f"{lab['draft_revision']}")


def _revision_mismatch(state: str, lab: dict[str, str], ev: dict[str, Any]) -> str:
    return _metadata(state, lab, ev, "revision_mismatch")


def _tokenizer_mismatch(state: str, lab: dict[str, str], ev: dict[str, Any]) -> str:
    return _metadata(state, lab, ev, "tokenizer_mismatch")


def _memory_contention(state: str, lab: dict[str, str], ev: dict[str, Any]) -> str:
    name = lab["route"]
    if state == "firing":
        return f"{name}: {ev['share']:.0%} of requests had the draft evicted or reloaded"
    return f"{name}: draft evictions back to {ev['share']:.1%}"


def _telemetry_stale(state: str, lab: dict[str, str], ev: dict[str, Any]) -> str:
    name = lab["route"]
    if state == "firing":
        return (f"{name}: no telemetry for {ev['silent_for_s'] or 0:.0f}s "
                f"(last event {hhmm(ev['last_event_ts'] or ev['now'])} UTC)")
    return f"{name}: telemetry arriving again"


def _speculation_inactive(state: str, lab: dict[str, str], ev: dict[str, Any]) -> str:
    name = lab["route"]
    if state == "firing":
        return (f"{name}: nothing drafted in {ev['requests']} requests over "
                f"{ev['window_s'] / 60:.0f} min; the engine may have dropped speculation")
    return f"{name}: drafting resumed"


def _output_mismatch(state: str, lab: dict[str, str], ev: dict[str, Any]) -> str:
    name = lab["route"]
    draft = lab["draft_model"] or ev.get("method") or "none"
    pair = f"(target {lab['target_model']} {lab['target_revision']}, draft {draft}" + (
        f" {lab['draft_revision']})" if lab["draft_revision"] else ")")
    if state == "firing":
        return (f"{name}: {ev['mismatches']} of {ev['matched_pairs']} greedy prompt pairs "
                f"differ with speculation off {pair}; e.g. {ev['spec_request_id']} vs "
                f"{ev['no_spec_request_id']}")
    if ev.get("reason_resolved"):
        return f"{name}: output mismatch no longer tracked ({ev['reason_resolved']}) {pair}"
    return (f"{name}: {ev['agreeing_in_a_row']} greedy prompt pairs in a row agree with "
            f"speculation off {pair}")


# The order is the order of every rule list shown to users (config errors, the API schema).
CATALOGUE: dict[str, Rule] = {r.name: r for r in (
    Rule("acceptance_drop", "warning", "segment", "acceptance", _acceptance("fell")),
    Rule("below_breakeven", "warning", "segment", "breakeven", _below_breakeven),
    Rule("throughput_drop", "warning", "segment", "throughput", _throughput_drop),
    Rule("revision_mismatch", "warning", "pair", "metadata_rules", _revision_mismatch),
    Rule("tokenizer_mismatch", "critical", "pair", "metadata_rules", _tokenizer_mismatch),
    Rule("memory_contention", "warning", "route", "contention", _memory_contention),
    Rule("telemetry_stale", "warning", "route", "staleness", _telemetry_stale),
    Rule("speculation_inactive", "critical", "route", "inactivity", _speculation_inactive),
    Rule("output_mismatch", "critical", "pair", "lossless", _output_mismatch),
    Rule("acceptance_rise", "info", "segment", "acceptance", _acceptance("rose")),
)}
"""Rule name -> :class:`Rule`."""


def names() -> tuple[str, ...]:
    """The rule names, in catalogue order (read at call time: a test may add a rule)."""
    return tuple(CATALOGUE)


def severity(rule: str) -> str:
    """The severity of every record of ``rule``, firing or resolved."""
    return CATALOGUE[rule].severity
