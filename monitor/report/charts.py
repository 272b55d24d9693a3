"""The report's charts: matplotlib figures rendered to inline SVG strings (no files, no pyplot).

Each figure is a :class:`matplotlib.figure.Figure` on its own Agg canvas, never made through
pyplot: no global figure registry or backend switch, no GUI, nothing left open between
reports, safe in a server thread. Text stays SVG text (``svg.fonttype: none``), so the page
is searchable and small, and each chart's ids get a prefix of their own so several SVGs can
share one HTML document.
"""

from __future__ import annotations

import io
import math
import re
import unicodedata
import warnings
from collections.abc import Iterable, Sequence
from datetime import datetime

from matplotlib import rc_context
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from monitor.policy.result import PairSchedule
from monitor.report.data import PairView, RouteReport

__all__ = ["pair_charts", "policy_chart", "scope_ids", "svg_text"]

WIDTH_IN, HEIGHT_IN = 6.4, 3.2
MARGINS = {"left": 0.1, "right": 0.96, "top": 0.96, "bottom": 0.17}
# Spans are coloured by rule, not severity: most rules are warnings, and two overlapping
# warning episodes must still be told apart.
RULE_COLOURS = {
    "below_breakeven": "#d62728", "acceptance_drop": "#ff7f0e", "acceptance_rise": "#17becf",
    "throughput_drop": "#bcbd22", "revision_mismatch": "#8c564b", "tokenizer_mismatch": "#e377c2",
    "memory_contention": "#7f7f7f", "telemetry_stale": "#1f77b4", "speculation_inactive": "#9467bd",
    "output_mismatch": "#000000",
}
CHANGE_COLOUR = "#7f7f7f"
POINT_COLOUR = "#9467bd"
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.S)


def svg_text(s: str) -> str:
    """Data (route, model and revision names) as matplotlib text: ``$`` would start mathtext,
    and control or bidi-override characters would garble the SVG, so both are neutralised.
    (XML escaping is matplotlib's job.)

    >>> svg_text("rev $1\\x1b")
    'rev \\\\$1\\\\x1b'
    """
    out = []
    for ch in s:
        if ch == "$":
            out.append(r"\$")
        elif unicodedata.category(ch) in ("Cc", "Cf") and ch not in "\u200d":
            out.append(ch.encode("unicode_escape").decode("ascii"))
        else:
            out.append(ch)
    return "".join(out)


def _nan(values: Iterable[float | None]) -> list[float]:
    return [math.nan if v is None else v for v in values]


def scope_ids(svg: str, prefix: str) -> str:
    """Prefix every id of ``svg`` and every reference to one: matplotlib numbers its groups
    ``figure_1``, ``axes_1``... in each file, and ids must be unique in one HTML document.
    Only tags are rewritten (attribute values are escaped, so a tag holds no ``>``); text
    that happens to read ``id="..."`` stays as it is.

    >>> scope_ids('<g id="a"><use xlink:href="#a" clip-path="url(#a)"/>id="a"</g>', "c1-")
    '<g id="c1-a"><use xlink:href="#c1-a" clip-path="url(#c1-a)"/>id="a"</g>'
    """

    def tag(m: re.Match[str]) -> str:
        t = _ID.sub(lambda i: f'{i.group(1)}="{prefix}{i.group(2)}"', m.group(0))
        t = _HREF.sub(lambda h: f'{h.group(1)}="#{prefix}{h.group(2)}"', t)
        return _URL.sub(lambda u: f"url(#{prefix}{u.group(1)})", t)

    return _TAG.sub(tag, svg)


_TAG = re.compile(r"<[^>]+>")
_ID = re.compile(r'\b(id)="([^"]+)"')
_HREF = re.compile(r'((?:xlink:)?href)="#([^"]+)"')
_URL = re.compile(r"url\(#([^)]+)\)")


def _render(fig: Figure, prefix: str) -> str:
    buf = io.StringIO()
    # a fixed salt: the same data gives the same SVG, byte for byte
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": "specwatch"}), \
            warnings.catch_warnings():
        # emoji and scripts DejaVu lacks: the browser draws them from its own fonts
        warnings.filterwarnings("ignore", message="Glyph .* missing from")
        warnings.filterwarnings("ignore", message="Matplotlib currently does not support")
        fig.savefig(buf, format="svg", metadata={"Date": None})
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]  # no XML prolog or DOCTYPE inside HTML
    return scope_ids(_METADATA.sub("", svg), prefix)


def _figure() -> tuple[Figure, Axes]:
    fig = Figure(figsize=(WIDTH_IN, HEIGHT_IN))
    FigureCanvasAgg(fig)  # lays text out; savefig(format="svg") then prints through SVG
    # fixed margins, not constrained layout: that draws every figure twice (4x the time)
    fig.subplots_adjust(**MARGINS)
    ax = fig.add_subplot()
    ax.grid(True, color="#e5e5e5", linewidth=0.6)
    ax.tick_params(labelsize=8)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return fig, ax


def _time_axis(ax: Axes, start: datetime, end: datetime) -> None:
    locator = AutoDateLocator(minticks=4, maxticks=8)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(ConciseDateFormatter(locator))
    ax.set_xlim(start, end)


def _marker(values: Sequence[object]) -> str:
    return "o" if len(values) <= 48 else ""  # dots only where points are few enough to see


def _context(ax: Axes, view: PairView, end: datetime, *, labels: bool) -> None:
    """Alert episodes as shaded spans, series changes and change points as vertical lines."""
    seen: set[str] = set()
    for ep in view.episodes:
        colour = RULE_COLOURS.get(ep.rule, "#7f7f7f")
        name = f"{ep.rule} ({ep.severity})"
        ax.axvspan(ep.start, ep.end or end, color=colour, alpha=0.12, linewidth=0,
                   label=name if labels and name not in seen else None)
        seen.add(name)
    for i, ch in enumerate(view.changes):
        ax.axvline(ch.at, color=CHANGE_COLOUR, linestyle="--", linewidth=1.0,
                   label="new series" if labels and i == 0 else None)
        if labels:
            ax.annotate(svg_text(ch.what), xy=(ch.at, 1.0), xycoords=("data", "axes fraction"),
                        xytext=(3, -3), textcoords="offset points", fontsize=7, va="top",
                        color="#444444")
    for i, cp in enumerate(view.change_points):
        ax.axvline(cp.at, color=POINT_COLOUR, linestyle=":", linewidth=1.4,
                   label="change point" if labels and i == 0 else None)
        if labels:
            ax.annotate(cp.rule.replace("acceptance_", ""), xy=(cp.at, 0.02),
                        xycoords=("data", "axes fraction"), xytext=(3, 2),
                        textcoords="offset points", fontsize=7, color=POINT_COLOUR)


def _end(view: PairView, report: RouteReport) -> datetime:
    return view.last + report.step


def acceptance_chart(view: PairView, report: RouteReport, prefix: str) -> str:
    fig, ax = _figure()
    end = _end(view, report)
    _context(ax, view, end, labels=True)
    for s in view.series:
        ax.plot(s.times, _nan(s.acceptance), marker=_marker(s.times), markersize=3,
                linewidth=1.2, label=svg_text(s.label))
    for i, c in enumerate(view.cutoffs):
        ax.axhline(c, color="#d62728", linestyle="-.", linewidth=1.0,
                   label=f"break-even {c:.2f}" if i == 0 else None)
    ax.set_ylim(0.0, 1.0)
    ax.set_ylabel("accepted / drafted", fontsize=8)
    _time_axis(ax, view.first, end)
    ax.legend(fontsize=7, loc="best", framealpha=0.85)
    return _render(fig, prefix)


def positions_chart(view: PairView, prefix: str) -> str:
    """Survival per draft position over the range, and the detectors' recent curve."""
    fig, ax = _figure()
    drawn = False
    for s in view.series:
        p = s.survival
        if p:
            ax.plot(range(1, len(p) + 1), p, marker="o", markersize=4, linewidth=1.2,
                    label=svg_text(s.label))
            drawn = True
    for seg in view.segments:
        p = seg.positions.get("survival")
        if not p or seg.idle:
            continue
        temp = seg.labels.get("temperature")
        name = (f"last {seg.positions.get('window_s', 0) / 60:.0f} min, target "
                f"{seg.labels['target_revision']}" + (f", temp {temp}" if temp else ""))
        (line,) = ax.plot(range(1, len(p) + 1), p, linestyle="--", marker="x", markersize=4,
                          linewidth=1.0, label=svg_text(name))
        if seg.knee:
            ax.axvline(seg.knee, color=line.get_color(), linestyle=":", linewidth=1.0,
                       label=f"knee: k={seg.knee}")
        drawn = True
    costs = {seg.positions.get("marginal_cost") for seg in view.segments} - {None}
    for c in sorted(costs):
        ax.axhline(c, color="#d62728", linestyle="-.", linewidth=1.0,
                   label=f"pays above {c:.2f}")
    if not drawn:
        ax.text(0.5, 0.5, "no per-position counts", ha="center", va="center",
                transform=ax.transAxes, fontsize=9, color="#666666")
    ax.set_ylim(0.0, 1.0)
    ax.set_xlabel("draft position", fontsize=8)
    ax.set_ylabel("steps accepting ≥ position", fontsize=8)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if drawn:
        ax.legend(fontsize=7, loc="best", framealpha=0.85)
    return _render(fig, prefix)


def _quantile_chart(view: PairView, report: RouteReport, prefix: str, unit: str,
                    upper: str, lower: str, series_of: str, *, log: bool = False) -> str:
    fig, ax = _figure()
    end = _end(view, report)
    _context(ax, view, end, labels=False)
    for s in view.series:
        a = getattr(s, f"{series_of}_{upper}")
        b = getattr(s, f"{series_of}_{lower}")
        (line,) = ax.plot(s.times, _nan(a), linewidth=1.2, marker=_marker(s.times),
                          markersize=3, label=svg_text(f"{upper} {s.label}"))
        ax.plot(s.times, _nan(b), linewidth=1.0, linestyle="--", color=line.get_color(),
                label=svg_text(f"{lower} {s.label}"))
    if log:
        ax.set_yscale("log")  # p99 is often 10x p50: a linear axis would flatten p50
    else:
        ax.set_ylim(bottom=0.0)
    ax.set_ylabel(unit, fontsize=8)
    _time_axis(ax, view.first, end)
    ax.legend(fontsize=7, loc="best", framealpha=0.85)
    return _render(fig, prefix)


def ttft_chart(view: PairView, report: RouteReport, prefix: str) -> str:
    return _quantile_chart(view, report, prefix, "time to first token (ms)", "p50", "p99", "ttft",
                           log=True)


def throughput_chart(view: PairView, report: RouteReport, prefix: str) -> str:
    return _quantile_chart(view, report, prefix, "decode tokens/s per request", "p50", "p25",
                           "tps")


def outcome_chart(view: PairView, report: RouteReport, prefix: str) -> str:
    """Per series and bucket: task success (solid) and, where requests report them, the
    tool-call (dashed) and schema (dotted) validity rates."""
    fig, ax = _figure()
    end = _end(view, report)
    _context(ax, view, end, labels=False)
    for s in view.series:
        (line,) = ax.plot(s.times, _nan(s.success_rate), linewidth=1.2,
                          marker=_marker(s.times), markersize=3,
                          label=svg_text(f"success {s.label}"))
        for values, style, name in ((s.tool_calls_valid_rate, "--", "tool_calls_valid"),
                                    (s.schema_valid_rate, ":", "schema_valid")):
            if any(v is not None for v in values):
                ax.plot(s.times, _nan(values), linewidth=1.0, linestyle=style,
                        color=line.get_color(), label=svg_text(f"{name} {s.label}"))
    ax.set_ylim(0.0, 1.02)
    ax.set_ylabel("share of requests", fontsize=8)
    _time_axis(ax, view.first, end)
    ax.legend(fontsize=7, loc="best", framealpha=0.85)
    return _render(fig, prefix)


def pair_charts(view: PairView, report: RouteReport, index: int) -> dict[str, str]:
    """The SVGs of one pair, keyed acceptance, positions, ttft, throughput, and outcome where
    requests report a task outcome (without one, success is only 1 - error rate)."""
    charts = {
        "acceptance": acceptance_chart(view, report, f"c{index}a-"),
        "positions": positions_chart(view, f"c{index}p-"),
        "ttft": ttft_chart(view, report, f"c{index}t-"),
        "throughput": throughput_chart(view, report, f"c{index}d-"),
    }
    if view.outcome_reported:
        charts["outcome"] = outcome_chart(view, report, f"c{index}o-")
    return charts


def policy_chart(schedule: PairSchedule, prefix: str) -> str:
    """One model pair's predicted decode speedup ``T(j)`` by batch-size bucket: one line per
    draft length ``j = 0..K`` (``j = 0``, no speculation, is the line at 1), and a ring on
    the length chosen in each bucket. Buckets are evenly spaced categories: they are ranges
    (``4-7``, ``256+``), not points on a batch-size axis."""
    fig, ax = _figure()
    buckets = schedule.buckets
    xs = list(range(len(buckets)))
    longest = max((len(b.speedups) for b in buckets), default=1)
    for j in range(longest):
        ys = _nan(b.speedups[j] if j < len(b.speedups) else None for b in buckets)
        if j == 0:
            ax.plot(xs, ys, color="#7f7f7f", linestyle="--", linewidth=1.0, marker="o",
                    markersize=2, label="j=0 (no speculation)")
        else:
            ax.plot(xs, ys, marker="o", markersize=3, linewidth=1.2, label=f"j={j}")
    chosen = [(x, b.speedups[b.num_speculative_tokens]) for x, b in zip(xs, buckets, strict=True)
              if b.num_speculative_tokens < len(b.speedups)
              and b.speedups[b.num_speculative_tokens] is not None]
    if chosen:
        ax.scatter([c[0] for c in chosen], [c[1] for c in chosen], s=90, facecolors="none",
                   edgecolors="#000000", linewidths=1.2, zorder=3, label="chosen")
    ax.set_xticks(xs, [svg_text(b.batch) for b in buckets])
    ax.set_xlim(-0.5, len(buckets) - 0.5)
    ax.set_xlabel("batch-size bucket", fontsize=8)
    ax.set_ylabel("predicted decode speedup T(j)", fontsize=8)
    ax.legend(fontsize=7, loc="best", framealpha=0.85)
    return _render(fig, prefix)
