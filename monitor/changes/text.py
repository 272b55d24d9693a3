"""``specwatch changes`` output: one JSON array, or a terminal table of changes with their
metrics indented below each."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Sequence

from monitor.change_record import describe
from monitor.changes.judge import ChangeJudgement
from monitor.changes.metrics import MetricVerdict, format_interval, format_value

__all__ = ["FORMATS", "changes_json", "changes_table", "format_changes"]

FORMATS = ("table", "json")

# Route and model names come from telemetry: controls and bidi overrides are shown escaped,
# so a name cannot rewrite the terminal or reorder the line.
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _display(s: str) -> str:
    r"""
    >>> _display("chat\x1b[31m")
    'chat\\x1b[31m'
    """
    if s.isprintable() and not _BIDI.intersection(s):
        return s
    return "".join(ch.encode("unicode_escape").decode("ascii")
                   if unicodedata.category(ch) == "Cc" or ch in _BIDI else ch for ch in s)


def changes_json(judgements: Sequence[ChangeJudgement]) -> str:
    """One array, one change per line: valid JSON that still greps by change."""
    objs = [json.dumps(j.to_json(), ensure_ascii=False, allow_nan=False) for j in judgements]
    return "[\n" + ",\n".join(objs) + "\n]\n" if objs else "[]\n"


def _when(j: ChangeJudgement) -> str:
    text = j.to_json()["at"]
    return text[:19].replace("T", " ") + "Z"


def _metric_row(m: MetricVerdict) -> list[str]:
    """label, before -> after, change [interval], verdict, counts, notes."""
    notes = []
    if m.name == "acceptance":
        if m.extra.get("basis") == "shared_positions":
            notes.append(f"at positions 1..{m.extra.get('positions')}")
        if m.extra.get("live"):
            notes.append(f"live: {_display(str(m.extra['live']))}")
    if m.verdict == "insufficient_data" and m.extra.get("reason"):
        notes.append(f"({m.extra['reason']})")
    return [m.spec.label,
            f"{format_value(m.spec, m.before)} -> {format_value(m.spec, m.after)}",
            format_interval(m), m.verdict, f"n={m.requests_before:,}/{m.requests_after:,}",
            "  ".join(notes)]


def changes_table(judgements: Sequence[ChangeJudgement]) -> str:
    """A line per change (time, route, kind, what changed, overall verdict), then per metric
    ``before -> after``, the change with its interval and the verdict; the live comparison
    beside acceptance."""
    if not judgements:
        return "no changes\n"
    lines = []
    for j in judgements:
        r = j.record
        temp = f" (temperature {_display(r.temperature)})" if r.temperature else ""
        lines.append(f"{_when(j)}  {_display(r.route)}{temp}  {r.kind}  "
                     f"{_display(describe(r.changed, r.current))}  {j.verdict.upper()}")
        rows = [_metric_row(m) for m in j.metrics]
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
        for row in rows:
            cells = [cell.ljust(w) for cell, w in zip(row, widths, strict=False)]
            lines.append(("    " + "  ".join(cells) + "  " + row[-1]).rstrip())
        lines.append(f"    -> {j.reason}")
    return "\n".join(lines) + "\n"


def format_changes(judgements: Sequence[ChangeJudgement], fmt: str) -> str:
    if fmt == "json":
        return changes_json(judgements)
    if fmt == "table":
        return changes_table(judgements)
    raise ValueError(f"format must be one of {', '.join(FORMATS)}: {fmt!r}")
