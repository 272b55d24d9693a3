"""The metrics of the change report, and the verdict of one metric across a change.

Each metric says which direction is bad and whether it is *critical* (Kayenta's canary
judgement: a critical metric that got worse makes the whole change worse). A verdict is
``better`` or ``worse`` only when the whole 95% interval of the change lies on one side of 0
**and** the change is at least the metric's minimum effect: a significant 1% move on a busy
route is noise for an operator, and a large move with an interval straddling 0 is not yet
evidence. A side with fewer than ``min_requests`` relevant requests is ``insufficient_data``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from monitor.changes.stats import Interval

__all__ = ["BETTER", "BY_NAME", "INSUFFICIENT", "METRICS", "SAME", "WORSE", "MetricSpec",
           "MetricVerdict", "classify", "format_change", "format_interval", "format_value",
           "insufficient"]

BETTER, WORSE, SAME, INSUFFICIENT = "better", "worse", "same", "insufficient_data"

Direction = Literal["higher", "lower"]


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One metric: how it is named and shown, which way is bad, how it is judged."""

    name: str
    label: str  # for a human: "p99 e2e latency"
    direction_bad: Direction
    critical: bool
    scale: Literal["relative", "absolute"] = "relative"
    unit: str = ""  # for display only
    sketch: str = ""  # the BucketStats sketch of a quantile metric
    q: float = 0.0


# Report order: what speculation is for first, then what users feel, then errors.
METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("acceptance", "acceptance", "lower", True),
    MetricSpec("mean_accepted_length", "mean accepted length", "lower", False, unit=" tok"),
    MetricSpec("decode_tps_p50", "p50 decode throughput", "lower", True, unit=" tok/s",
               sketch="decode_tps", q=0.5),
    MetricSpec("ttft_p50", "p50 TTFT", "higher", False, unit=" ms", sketch="ttft_ms", q=0.5),
    MetricSpec("ttft_p99", "p99 TTFT", "higher", False, unit=" ms", sketch="ttft_ms", q=0.99),
    MetricSpec("e2e_p50", "p50 e2e latency", "higher", False, unit=" ms", sketch="e2e_ms",
               q=0.5),
    MetricSpec("e2e_p99", "p99 e2e latency", "higher", True, unit=" ms", sketch="e2e_ms",
               q=0.99),
    MetricSpec("error_rate", "error rate", "higher", True, scale="absolute"),
)
BY_NAME = {m.name: m for m in METRICS}


def _finite(x: float | None) -> float | None:
    """JSON has no NaN or infinity: an undefined number is ``None``."""
    return x if x is not None and math.isfinite(x) else None


@dataclass(frozen=True, slots=True)
class MetricVerdict:
    """One metric across one change.

    ``change`` is ``after / before - 1`` (``scale`` ``relative``) or ``after - before``
    (``absolute``: the error rate, whose "before" is often 0); ``interval`` is its 95%
    interval, an end ``None`` when unbounded. ``extra`` carries what only some metrics have:
    token counts and ``basis`` for acceptance, the live comparison's state, a ``reason`` for
    insufficient data.
    """

    spec: MetricSpec
    verdict: str
    before: float | None
    after: float | None
    change: float | None
    interval: Interval | None
    requests_before: int
    requests_after: int
    min_effect: float
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.spec.name

    def to_json(self) -> dict[str, Any]:
        interval = None if self.interval is None else [_finite(x) for x in self.interval]
        return {
            "verdict": self.verdict,
            "before": _finite(self.before),
            "after": _finite(self.after),
            "change": _finite(self.change),
            "interval": interval,
            "scale": self.spec.scale,
            "requests_before": self.requests_before,
            "requests_after": self.requests_after,
            "direction_bad": self.spec.direction_bad,
            "critical": self.spec.critical,
            "min_effect": self.min_effect,
            **self.extra,
        }


def insufficient(spec: MetricSpec, reason: str, *, before: float | None = None,
                 after: float | None = None, requests: tuple[int, int] = (0, 0),
                 min_effect: float, **extra: Any) -> MetricVerdict:
    """A metric that cannot be judged, and why."""
    return MetricVerdict(spec, INSUFFICIENT, before, after, None, None, requests[0],
                         requests[1], min_effect, {**extra, "reason": reason})


def classify(spec: MetricSpec, change: float | None, interval: Interval,
             min_effect: float) -> str:
    """``better``, ``worse`` or ``same`` for a change with its interval.

    >>> acc = METRICS[0]
    >>> classify(acc, -0.19, (-0.23, -0.15), 0.05), classify(acc, -0.04, (-0.05, -0.03), 0.05)
    ('worse', 'same')
    >>> classify(acc, 0.12, (-0.01, 0.25), 0.05), classify(acc, 0.12, (0.06, None), 0.05)
    ('same', 'better')
    >>> classify(METRICS[-1], 0.02, (0.012, 0.028), 0.01)  # error rate up 2 points
    'worse'
    """
    if change is None or not math.isfinite(change):
        return SAME
    low, high = interval
    up = low is not None and low > 0 and change >= min_effect
    down = high is not None and high < 0 and change <= -min_effect
    if not (up or down):
        return SAME
    return WORSE if up == (spec.direction_bad == "higher") else BETTER


def format_value(spec: MetricSpec, value: float | None) -> str:
    """A metric's value for people: rates to 3 places, the error rate in percent.

    >>> format_value(BY_NAME["acceptance"], 0.5812), format_value(BY_NAME["e2e_p99"], 1834.2)
    ('0.581', '1834 ms')
    >>> format_value(BY_NAME["error_rate"], 0.0123), format_value(BY_NAME["ttft_p50"], None)
    ('1.23%', '-')
    """
    if value is None or not math.isfinite(value):
        return "-"
    if spec.name == "error_rate":
        return f"{value * 100:.2f}%"
    if spec.sketch == "decode_tps":
        return f"{value:.1f}{spec.unit}"
    if spec.sketch:
        return f"{value:.0f}{spec.unit}"
    return f"{value:.3f}{spec.unit}"


def _signed(spec: MetricSpec, x: float | None, unbounded: str = "") -> str:
    if x is None or not math.isfinite(x):
        return unbounded or ("-inf" if x is not None and x < 0 else "+inf")
    if spec.scale == "absolute":
        return f"{x * 100:+.1f}"
    return f"{x * 100:+.1f}%"


def format_interval(m: MetricVerdict) -> str:
    """``-19.0% [-23.2%, -14.5%]`` (relative) or ``+2.0 points [+1.2, +2.8]`` (absolute);
    empty when there is no change to show."""
    if m.change is None:
        return ""
    unit = " points" if m.spec.scale == "absolute" else ""
    text = _signed(m.spec, m.change) + unit
    if m.interval is not None:
        low, high = m.interval
        text += f" [{_signed(m.spec, low, '-inf')}, {_signed(m.spec, high, '+inf')}]"
    return text


def format_change(m: MetricVerdict) -> str:
    """One metric's move for a sentence: ``acceptance 0.580 -> 0.470 (-19.0% [-23.2%,
    -14.5%])``."""
    return (f"{m.spec.label} {format_value(m.spec, m.before)} -> "
            f"{format_value(m.spec, m.after)} ({format_interval(m)})")
