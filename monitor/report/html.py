"""One self-contained HTML page per route: inline CSS and SVG, no script, nothing fetched.

Every string that came from telemetry or the store (route, model and revision names, alert
summaries) goes through :func:`~monitor.report.escape.text`: HTML-escaped, control and
bidi-override characters shown as escapes, and wrapped in ``<bdi>`` so a right-to-left name
cannot reorder the words around it.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from monitor.changes import ChangeJudgement
from monitor.changes.metrics import format_interval, format_value
from monitor.gate.html import render_gate_section
from monitor.report.data import EpisodeSpan, PairView, RouteReport, SegmentState, when
from monitor.report.escape import num as _num
from monitor.report.escape import plain, text
from monitor.report.policy_html import render_policy_section

__all__ = ["plain", "render_html", "text"]

HEADLINES = {
    "on": "Keep speculation on",
    "off": "Turn speculation off",
    "insufficient_data": "Not enough data to decide",
}
BADGES = {"on": "ON", "off": "OFF", "insufficient_data": "?"}

CSS = """
:root { color-scheme: light; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", "DejaVu Sans",
       sans-serif; color: #1d1d1f; background: #f6f7f9; }
header { background: #fff; border-bottom: 1px solid #dcdfe4; padding: 20px 28px 12px; }
main { padding: 8px 28px 28px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 22px 0 8px; }
h3 { font-size: 14px; margin: 0 0 6px; }
.meta { color: #555; margin: 0 0 12px; }
.route { font-family: ui-monospace, "DejaVu Sans Mono", monospace; background: #eef1f5;
         padding: 0 6px; border-radius: 4px; }
.recs { display: grid; grid-template-columns: repeat(auto-fill, minmax(380px, 1fr));
        gap: 10px; }
.rec { background: #fff; border: 1px solid #dcdfe4; border-left: 6px solid #999;
       border-radius: 6px; padding: 10px 12px; }
.rec.on { border-left-color: #2ca02c; } .rec.off { border-left-color: #d62728; }
.rec.idle { opacity: .6; }
.badge { display: inline-block; min-width: 40px; text-align: center; font-weight: 700;
         border-radius: 4px; padding: 0 6px; margin-right: 6px; color: #fff; background: #888; }
.on .badge { background: #2ca02c; } .off .badge { background: #d62728; }
.rec p { margin: 4px 0; } .ev { color: #333; font-size: 13px; }
.pair { background: #fff; border: 1px solid #dcdfe4; border-radius: 8px; padding: 4px 16px 12px;
        margin-top: 16px; }
.charts { display: grid; grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 12px; }
figure { margin: 0; } figcaption { font-weight: 600; font-size: 13px; margin: 4px 0; }
figure svg { width: 100%; height: auto; display: block; }
table { border-collapse: collapse; width: 100%; font-size: 13px; background: #fff; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid #e6e8eb;
         vertical-align: top; }
th { background: #f0f2f5; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.sev-critical, .sev-error { color: #b31b1b; font-weight: 600; }
.sev-warning { color: #b35900; font-weight: 600; }
.empty { background: #fff; border: 1px solid #dcdfe4; border-radius: 8px; padding: 24px;
         font-size: 16px; }
ul.changes { margin: 4px 0 8px; padding-left: 20px; }
.change { background: #fff; border: 1px solid #dcdfe4; border-left: 6px solid #999;
          border-radius: 6px; padding: 8px 12px; margin: 10px 0; }
.change.worse { border-left-color: #d62728; } .change.better { border-left-color: #2ca02c; }
.change h3 .badge { min-width: 0; }
.change.worse .badge, td.worse { background: #d62728; color: #fff; }
.change.better .badge, td.better { background: #2ca02c; color: #fff; }
footer { color: #777; font-size: 12px; padding: 0 28px 24px; }
pre { white-space: pre-wrap; font-size: 12px; }
.policy h3 { margin-top: 14px; } .policy table + table { margin-top: 10px; }
"""


def _short(t: datetime | None) -> str:
    return "-" if t is None else t.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _segment_name(seg: SegmentState) -> str:
    lab = seg.labels
    parts = [
        f"target rev {text(lab.get('target_revision', ''))}",
        f"draft rev {text(lab.get('draft_revision') or '-')}",
        f"k={text(lab.get('num_speculative_tokens', ''))}",
    ]
    if lab.get("temperature"):
        parts.append(f"temperature {text(lab['temperature'])}")
    return ", ".join(parts)


def _recommendation(seg: SegmentState, report: RouteReport) -> str:
    ev, acc = seg.breakeven, seg.acceptance
    rec = seg.recommendation
    classes = "rec " + ("on" if rec == "on" else "off" if rec == "off" else "insufficient")
    if seg.idle:
        classes += " idle"
    lines = [
        f'<div class="{classes}">',
        f'<h3><span class="badge">{BADGES.get(rec, "?")}</span>'
        f"{HEADLINES.get(rec, text(rec))}</h3>",
        f"<p>{text(seg.pair.label)}: {_segment_name(seg)}</p>",
    ]
    if ev.get("rate") is not None:
        window = (ev.get("window_s") or 0) / 60
        lines.append(
            f'<p class="ev">acceptance {_num(ev["rate"])} (95% interval {_num(ev.get("low"))}'
            f"–{_num(ev.get('high'))}) vs break-even {_num(seg.cutoff, '.2f')} over the last "
            f"{window:.0f} min: {ev.get('requests', 0):,} requests, "
            f"{ev.get('drafted_tokens', 0):,} drafted tokens</p>"
        )
    else:
        lines.append('<p class="ev">nothing drafted in the detector window</p>')
    k = seg.labels.get("num_speculative_tokens")
    if seg.knee is not None:
        lines.append(f'<p class="ev">recommended num_speculative_tokens: <b>{seg.knee}</b> '
                     f"(running {text(k)})</p>")
    if acc.get("phase") == "changed":
        lines.append(f'<p class="ev">acceptance {text(acc.get("direction") or "change")} '
                     f"detected: baseline {_num(acc.get('baseline'))}, since the change "
                     f"{_num(acc.get('current'))}</p>")
    elif acc.get("baseline") is not None:
        lines.append(f'<p class="ev">acceptance baseline {_num(acc["baseline"])}, no change '
                     "detected</p>")
    elif acc.get("phase") == "warmup":
        lines.append('<p class="ev">acceptance baseline still warming up</p>')
    as_of = f"as of {_short(seg.last_event)} (detector state of {text(seg.source)})"
    if seg.idle:
        as_of = f"no traffic since {_short(seg.last_event)}: a series the route has left"
    elif seg.last_event is not None and seg.last_event > report.until:
        as_of += ", after the report range"
    lines.append(f'<p class="ev"><small>{as_of}</small></p></div>')
    return "\n".join(lines)


def _recommendations(report: RouteReport) -> str:
    if not report.segments:
        return ('<p class="ev">No detector state for this route: run the daemon or '
                "<code>specwatch replay</code> with detection on to get recommendations.</p>")
    cards = "\n".join(_recommendation(s, report) for s in report.segments)
    lines = "\n".join(plain(s.line) for s in report.segments)
    return (f'<div class="recs">{cards}</div>\n<details><summary>as text</summary>'
            f"<pre>{lines}</pre></details>")


def _series_table(view: PairView) -> str:
    rows = []
    for s in view.series:
        rows.append(
            f"<tr><td>{text(s.label)}</td><td>{_short(s.first)}</td><td>{_short(s.last)}</td>"
            f'<td class="num">{s.total_requests:,}</td><td class="num">{s.drafted_tokens:,}</td>'
            f'<td class="num">{_num(s.acceptance_rate)}</td></tr>'
        )
    return ("<table><tr><th>series</th><th>first bucket</th><th>last bucket</th>"
            "<th>requests</th><th>drafted tokens</th><th>acceptance</th></tr>"
            + "".join(rows) + "</table>")


def _rate(rate: float | None, reported: int) -> str:
    """A rate with the requests behind it: outcome rates count only those that report."""
    return "n/a" if rate is None else f"{rate:.3f} <small>({reported:,})</small>"


def _outcome_table(view: PairView, price: float | None) -> str:
    """Task outcome and cost of each series over the range (docs/outcome-and-cost.md)."""
    rows = []
    for s in view.series:
        o = s.outcome
        itl50, itl99 = o.itl_p50_ms.quantile(0.5), o.itl_p99_ms.quantile(0.99)
        gpu = "n/a" if not o.gpu_seconds else (
            f"{o.gpu_seconds:,.1f} <small>({o.gpu_reported_requests:,} reported)</small>")
        rows.append(
            f"<tr><td>{text(s.label)}</td>"
            f'<td class="num">{_rate(o.success_rate, o.requests)}</td>'
            f'<td class="num">{_rate(o.ok_rate, o.outcome_ok_reported)}</td>'
            f'<td class="num">{_rate(o.schema_valid_rate, o.schema_valid_reported)}</td>'
            f'<td class="num">{_rate(o.tool_calls_valid_rate, o.tool_calls_valid_reported)}</td>'
            f'<td class="num">{gpu}</td>'
            f'<td class="num">{_num(o.gpu_seconds_per_success, ".3f")}</td>'
            f'<td class="num">{_num(o.successes_per_gpu_second, ".3f")}</td>'
            f'<td class="num">{_num(o.cost_per_success(price), ".6f")}</td>'
            f'<td class="num">{_num(itl50, ".1f")}</td><td class="num">{_num(itl99, ".1f")}</td>'
            "</tr>"
        )
    priced = ("" if price is not None else
              " No <code>cost.price_per_gpu_hour</code> configured: cost is not given.")
    return (
        '<table class="outcome"><tr><th>series</th><th>task success (requests)</th>'
        "<th>ok (reported)</th><th>schema_valid (reported)</th>"
        "<th>tool_calls_valid (reported)</th><th>GPU-seconds</th>"
        "<th>GPU-s per success</th><th>successes per GPU-s</th><th>cost per success</th>"
        "<th>ITL p50 (ms)</th><th>ITL p99 (ms)</th></tr>" + "".join(rows) + "</table>"
        '<p class="ev"><small>Task success: <code>outcome.ok</code> where reported, else '
        "status ok. Each outcome rate counts only the requests reporting it. GPU-seconds are "
        "reported or estimated from e2e_ms, batch_size and cost.gpus_per_replica; failed "
        f"requests' GPU time counts against the successes.{priced}</small></p>"
    )


def _events(view: PairView) -> str:
    items = [f"<li>{_short(c.at)}: new series, {text(c.what)}</li>" for c in view.changes]
    items += [
        f"<li>{_short(p.at)}: {text(p.rule)} (decided {_short(p.decided_at)}): "
        f"{text(p.summary)}</li>"
        for p in view.change_points
    ]
    return f'<ul class="changes">{"".join(items)}</ul>' if items else ""


def _pair(view: PairView, report: RouteReport, index: int) -> str:
    from monitor.report.charts import pair_charts  # matplotlib only when there is a chart

    charts = pair_charts(view, report, index)
    captions = {
        "acceptance": "Acceptance over time (accepted / drafted per bucket)",
        "positions": "Acceptance by draft position",
        "ttft": "Time to first token, p50 and p99",
        "throughput": "Decode throughput, p50 and p25",
        "outcome": "Task success and reported outcome checks per bucket",
    }
    figures = "\n".join(
        f'<figure class="chart-{name}"><figcaption>{cap}</figcaption>{charts[name]}</figure>'
        for name, cap in captions.items() if name in charts
    )
    return (
        f'<section class="pair" id="pair-{index}"><h2>{text(view.pair.label)}</h2>\n'
        f"{_series_table(view)}\n<h3>Task outcome and cost</h3>"
        f"{_outcome_table(view, report.price_per_gpu_hour)}\n{_events(view)}\n"
        f'<div class="charts">{figures}</div></section>'
    )


def _episodes(episodes: Iterable[EpisodeSpan]) -> str:
    rows = [
        f'<tr><td>{text(e.rule)}</td><td class="sev-{plain(e.severity)}">{text(e.severity)}'
        f"</td><td>{text(e.state)}</td><td>{_short(e.start)}</td><td>{_short(e.end)}</td>"
        f"<td>{'yes' if e.notified else 'no'}</td><td>{text(e.summary)}</td></tr>"
        for e in episodes
    ]
    if not rows:
        return '<p class="ev">No alert episodes in this range.</p>'
    return ("<table><tr><th>rule</th><th>severity</th><th>state</th><th>started</th>"
            "<th>resolved</th><th>notified</th><th>summary</th></tr>" + "".join(rows)
            + "</table>")


VERDICT_BADGES = {"worse": "WORSE", "better": "BETTER", "same": "SAME",
                  "insufficient_data": "NOT ENOUGH DATA"}


def _change(j: ChangeJudgement) -> str:
    r = j.record
    verdict = plain(j.verdict)
    rows = []
    for m in j.metrics:
        note = ""
        if m.name == "acceptance":
            if m.extra.get("basis") == "shared_positions":
                note += f"at draft positions 1..{plain(m.extra.get('positions'))}. "
            if m.extra.get("live"):
                note += f"live comparison: {text(m.extra['live'])}. "
        if m.verdict == "insufficient_data" and m.extra.get("reason"):
            note += text(m.extra["reason"])
        rows.append(
            f"<tr><td>{plain(m.spec.label)}</td>"
            f'<td class="num">{plain(format_value(m.spec, m.before))}</td>'
            f'<td class="num">{plain(format_value(m.spec, m.after))}</td>'
            f'<td class="num">{plain(format_interval(m))}</td>'
            f'<td class="{plain(m.verdict)}">{plain(m.verdict)}</td>'
            f'<td class="num">{m.requests_before:,} / {m.requests_after:,}</td>'
            f"<td>{note}</td></tr>")
    temp = f", temperature {text(r.temperature)}" if r.temperature else ""
    started = _short(datetime.fromtimestamp(r.at, UTC))
    return (
        f'<div class="change {verdict}"><h3><span class="badge">'
        f"{VERDICT_BADGES.get(j.verdict, verdict)}</span>{started}"
        f" · {text(r.kind)}: {text(r.summary)}{temp}</h3>"
        f'<p class="ev">{text(j.reason)}</p>'
        "<table><tr><th>metric</th><th>before</th><th>after</th><th>change [95% interval]</th>"
        "<th>verdict</th><th>requests before / after</th><th></th></tr>"
        + "".join(rows) + "</table>"
        f'<p class="ev"><small>before: {_short(datetime.fromtimestamp(j.before.since, UTC))} → '
        f"{_short(datetime.fromtimestamp(j.before.until, UTC))}, after: "
        f"{_short(datetime.fromtimestamp(j.after.since, UTC))} → "
        f"{_short(datetime.fromtimestamp(j.after.until, UTC))} ({plain(j.granularity)} "
        "buckets, each side its own setup's series)</small></p></div>"
    )


def _changes(report: RouteReport) -> str:
    if not report.changes:
        return '<p class="ev">No setup change on this route in this range.</p>'
    return "\n".join(_change(j) for j in report.changes)


def render_html(report: RouteReport) -> str:
    """The whole page. An empty report is a page that says so."""
    since = "the beginning" if report.since is None else when(report.since)
    head = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>specwatch report: {plain(report.route)}</title><style>{CSS}</style></head>"
        f'<body><header><h1>specwatch report for route <span class="route">'
        f"{text(report.route)}</span></h1>"
    )
    if report.empty:
        return (
            head + f'<p class="meta">{since} → {when(report.until)}</p></header><main>'
            f'<p class="empty">{text(report.no_data_message())}</p></main></body></html>\n'
        )
    meta = (
        f'<p class="meta">Range {since} → {when(report.until)} · data {_short(report.first)} → '
        f"{_short(report.last)} · {report.granularity} buckets · {len(report.pairs)} model "
        f"pair(s) · generated {when(report.generated_at)}</p>"
    )
    notes = "".join(f'<p class="ev">{text(n)}</p>' for n in report.notes)
    pairs = "\n".join(_pair(v, report, i) for i, v in enumerate(report.pairs))
    return (
        head + meta + f"<h2>Recommendations</h2>{_recommendations(report)}{notes}</header>"
        f"<main><h2>Changes</h2>{_changes(report)}{render_gate_section(report.gates)}{pairs}"
        f"{render_policy_section(report.policy)}"
        f"<h2>Alert episodes</h2>{_episodes(report.episodes)}</main>"
        "<footer>Generated by specwatch from exact per-route rollups, the alert history and "
        "the detectors' state. Self-contained: no scripts, nothing loaded from the network."
        "</footer></body></html>\n"
    )
