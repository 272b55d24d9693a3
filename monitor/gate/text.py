"""``specwatch gate`` output: one JSON object (docs/gate.md), or a terminal table: the verdict
and its reason, the workload-weighted efficiency, then per route its tests."""

from __future__ import annotations

import json
import unicodedata

from monitor.gate.judge import GateJudgement, MetricResult

__all__ = ["FORMATS", "format_gate", "gate_json", "gate_table"]

FORMATS = ("table", "json")

# Names come from telemetry: controls and bidi overrides are shown escaped.
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def display(s: str) -> str:
    r"""
    >>> display("chat\x1b[31m")
    'chat\\x1b[31m'
    """
    if s.isprintable() and not _BIDI.intersection(s):
        return s
    return "".join(ch.encode("unicode_escape").decode("ascii")
                   if unicodedata.category(ch) == "Cc" or ch in _BIDI else ch for ch in s)


def gate_json(j: GateJudgement) -> str:
    return json.dumps(j.to_json(), ensure_ascii=False, allow_nan=False, indent=1) + "\n"


def format_value(m: MetricResult, v: float | None) -> str:
    if v is None:
        return "-"
    if m.metric.scale == "exceedance":
        return f"{v:,.0f} ms"
    if m.metric.scale == "relative":
        return f"{v:.4g}/s"
    return f"{v:.2%}"


def format_change(m: MetricResult) -> str:
    """The estimate and its always-valid interval, in the metric's unit."""
    cs = m.cs
    if cs is None:
        return "-"
    if m.metric.scale == "relative":
        return f"{cs.estimate:+.1%} [{cs.low:+.1%}, {cs.high:+.1%}]"
    # absolute rates and exceedance shares: points of the share of requests
    return f"{cs.estimate * 100:+.2f} pt [{cs.low * 100:+.2f}, {cs.high * 100:+.2f}]"


def _needed(m: MetricResult) -> str:
    if m.needed is None:
        return ""
    b, c = ("?" if n is None else f"{n:,}" for n in m.needed)
    return f"needs +{b}/+{c}"


def _row(m: MetricResult) -> list[str]:
    label = m.name if m.name != "latency_class" else f"latency_class ({m.extra.get('promised')})"
    notes = [_needed(m)]
    if not m.gating:
        notes.append("(informative)")
    if m.reason:
        notes.append(f"({display(m.reason)})")
    return [label, f"{format_value(m, m.baseline)} -> {format_value(m, m.candidate)}",
            format_change(m), m.verdict, f"n={m.requests[0]:,}/{m.requests[1]:,}",
            "  ".join(n for n in notes if n)]


def _rows(rows: list[list[str]], indent: str) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return [(indent + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False))
             + "  " + r[-1]).rstrip() for r in rows]


def gate_table(j: GateJudgement) -> str:
    g = j.sides
    what = f"{g.kind} {display(g.name)}"
    lines = [f"gate {what}: {j.verdict.upper()}", f"  {display(j.reason)}"]
    for side, t in j.totals.items():
        eff = t.get("success_per_gpu_second")
        lines.append(f"  {side}: {t['requests']:,} requests, {t['successes']:,} successful, "
                     f"{t['gpu_seconds']:,.1f} GPU-s"
                     + (f", {eff:.4g} successful tasks per GPU-second" if eff else ""))
    lines.append(f"  alpha {j.settings.alpha:g} over {j.tests} gating tests "
                 f"({j.settings.alpha / j.tests:.2g} each); intervals are always-valid")
    lines += _rows([_row(j.efficiency)], "  overall ")
    for r in j.routes:
        lines.append(f"  route {display(r.route)}  share {r.share:.1%}"
                     f"{'' if r.gated else ' (below min_route_share: informative)'}  "
                     f"{r.verdict.upper()}")
        lines += _rows([_row(m) for m in r.metrics], "    ")
    for note in g.notes:
        lines.append(f"  note: {display(note)}")
    return "\n".join(lines) + "\n"


def format_gate(j: GateJudgement, fmt: str) -> str:
    if fmt == "json":
        return gate_json(j)
    if fmt == "table":
        return gate_table(j)
    raise ValueError(f"format must be one of {', '.join(FORMATS)}: {fmt!r}")
