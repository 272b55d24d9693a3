"""The gate's section of the HTML report: the verdict, its reason, and per route its tests.

Self-contained like the rest of the report (no script, nothing fetched); every string from
telemetry or the store is escaped here, with the report's own CSS classes
(``monitor/report/html.py``: ``change``, ``badge``, ``worse``/``better`` cells). Kept out of
``monitor/report`` so that the report imports the gate, never the other way round.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from monitor.gate.judge import FAIL, PASS, GateJudgement, MetricResult
from monitor.gate.text import display, format_change, format_value

__all__ = ["render_gate_section"]

BADGES = {PASS: "PASS", FAIL: "FAIL", "insufficient_data": "NOT ENOUGH DATA"}
# the report's classes: a failing gate is drawn as a worse change, a passing one as better
CLASSES = {PASS: "better", FAIL: "worse", "insufficient_data": "insufficient_data"}


def _t(value: object) -> str:
    return f"<bdi>{html.escape(display(str(value)), quote=True)}</bdi>"


def _row(route: str, m: MetricResult) -> str:
    needed = ""
    if m.needed is not None:
        b, c = ("?" if n is None else f"{n:,}" for n in m.needed)
        needed = f"+{b} / +{c}"
    note = "" if m.gating else "informative. "
    if m.reason:
        note += _t(m.reason)
    return (f"<tr><td>{_t(route)}</td><td>{_t(m.name)}</td>"
            f'<td class="num">{_t(format_value(m, m.baseline))}</td>'
            f'<td class="num">{_t(format_value(m, m.candidate))}</td>'
            f'<td class="num">{_t(format_change(m))}</td>'
            f'<td class="{CLASSES.get(m.verdict, "")}">{_t(m.verdict)}</td>'
            f'<td class="num">{m.requests[0]:,} / {m.requests[1]:,}</td>'
            f'<td class="num">{needed}</td><td>{note}</td></tr>')


def _one(j: GateJudgement) -> str:
    rows = [_row("overall (workload-weighted)", j.efficiency)]
    for r in j.routes:
        rows += [_row(r.route, m) for m in r.metrics]
    return (
        f'<div class="change {CLASSES.get(j.verdict, "")}"><h3><span class="badge">'
        f"{BADGES.get(j.verdict, j.verdict)}</span>{_t(j.sides.kind)} {_t(j.sides.name)}</h3>"
        f'<p class="ev">{_t(j.reason)}</p>'
        "<table><tr><th>route</th><th>metric</th><th>baseline</th><th>candidate</th>"
        "<th>change [always-valid interval]</th><th>verdict</th>"
        "<th>requests baseline / candidate</th><th>more needed</th><th></th></tr>"
        + "".join(rows) + "</table>"
        f'<p class="ev"><small>alpha {j.settings.alpha:g} split over {j.tests} gating tests; '
        "intervals stay valid however often the gate is polled (docs/gate.md)</small></p>"
        "</div>"
    )


def render_gate_section(judgements: Sequence[GateJudgement]) -> str:
    """``<h2>Release gate</h2>`` and one block per judgement (an experiment or a change).

    >>> render_gate_section([])
    '<h2>Release gate</h2><p class="ev">No experiment in this range.</p>'
    """
    if not judgements:
        return '<h2>Release gate</h2><p class="ev">No experiment in this range.</p>'
    return "<h2>Release gate</h2>" + "\n".join(_one(j) for j in judgements)
