"""The report's "Where to speculate" section, drawn: what the route gains, its slices and
their settings, the held-out comparison, and one chart: the predicted speedup by batch bucket
and draft length of the model pair in force, other pairs' schedules as text
(``monitor/report/policy.py`` reads it).

Every string from telemetry or the store (routes, model names, tag values, reasons naming
them) goes through :func:`~monitor.report.escape.text`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from monitor.policy.result import (
    Comparison,
    HoldoutEvaluation,
    PairSchedule,
    PolicyResult,
    RouteGain,
    SliceDecision,
    Window,
)
from monitor.report.escape import num, plain, text
from monitor.report.policy import PolicySection

__all__ = ["MAX_SLICE_ROWS", "render_policy_section"]

log = logging.getLogger(__name__)

HEADING = "<h2>Where to speculate</h2>"
MAX_SLICE_ROWS = 40
"""Slices listed on the page; the rest are counted (``specwatch policy`` lists them all)."""

STRATEGY_NAMES = {"policy": "this policy", "all_on": "all on (as the traffic ran)",
                  "all_off": "all off", "per_route": "per-route on/off (today's switch)"}


def _interval(iv: Sequence[float | None] | None, spec: str = ".3f") -> str:
    if iv is None:
        return "n/a"
    return f"[{num(iv[0], spec)}, {num(iv[1], spec)}]"


def _window(w: Window) -> str:
    j = w.to_json()
    return f"{j['since']} → {j['until']} ({w.hours} h)"


def _setting(d: SliceDecision) -> str:
    return f"ON, k={d.num_speculative_tokens}" if d.speculate else "OFF"


def _gain(g: RouteGain) -> str:
    """The sentence first, said plainly; the numbers behind it after."""
    if g.decode_bound is False:
        saving = "" if g.saving_ms is None else (
            f" The predicted saving, about {g.saving_ms:,.0f} ms per request against no "
            f"speculation, is small beside a mean end-to-end time of "
            f"{num(g.mean_e2e_ms, ',.0f')} ms.")
        sentence = (f"<b>Prefill- or retrieval-bound: a faster decode will not be felt.</b> "
                    f"Decoding is only {num(g.decode_share, '.0%')} of this route's "
                    f"end-to-end time; the rest is waiting before the first token.{saving}")
        kind = "worse"
    else:
        sentence, kind = text(g.note), "better" if g.decode_bound else ""
    facts = (f"decode share {num(g.decode_share, '.0%')} of e2e over "
             f"{g.timed_requests:,} timed requests; mean e2e {num(g.mean_e2e_ms, ',.0f')} ms, "
             f"mean decode {num(g.mean_decode_ms, ',.0f')} ms; speedup as run "
             f"{num(g.speedup_observed, '.2f')}x, with this policy "
             f"{num(g.speedup_policy, '.2f')}x; predicted saving "
             f"{num(g.saving_ms, ',.0f')} ms per request against no speculation")
    return (f'<div class="change gain {kind}"><p>{sentence}</p>'
            f'<p class="ev"><small>{facts}</small></p></div>')


def _features(d: SliceDecision) -> str:
    parts = [f"{k}={v}" if v != "" else f"{k} (none)" for k, v in d.features]
    return text(", ".join(parts) or "(the route, pooled)")


def _slice_row(d: SliceDecision) -> str:
    best = d.speedups[d.num_speculative_tokens] \
        if d.num_speculative_tokens < len(d.speedups) else None
    state = "better" if d.speculate else "worse"
    return (f"<tr><td>{text(d.pair.label)}</td><td>{_features(d)}</td>"
            f'<td class="num">{d.requests:,}</td>'
            f'<td class="num">{num(d.acceptance)} <small>{_interval(d.acceptance_interval)}'
            f"</small></td>"
            f'<td class="num">{num(best, ".2f")}x</td>'
            f'<td class="{state}">{_setting(d)}</td><td>{plain(d.decided_by)}</td>'
            f"<td>{text(d.reason)}</td></tr>")


def _slices(section: PolicySection) -> str:
    pooled = "".join(
        f"<li>{text(d.pair.label)}: pooled over the route <b>{_setting(d)}</b> "
        f"({d.requests:,} requests): {text(d.reason)}</li>" for d in section.pooled)
    rows = [_slice_row(d) for d in section.slices[:MAX_SLICE_ROWS]]
    more = len(section.slices) - len(rows)
    rest = (f'<p class="ev"><small>and {more:,} more slices: <code>specwatch policy --route '
            f"{plain(section.route)}</code> lists them all</small></p>" if more > 0 else "")
    return (
        f'<ul class="changes">{pooled}</ul>'
        "<table><tr><th>model pair</th><th>slice</th><th>requests</th>"
        "<th>acceptance [interval]</th><th>predicted speedup at the setting</th>"
        "<th>setting</th><th>decided by</th><th>why</th></tr>" + "".join(rows) + "</table>"
        + rest
    )


def _comparison(c: Comparison) -> str:
    if c.interval is None:
        verdict, word = "", "no interval: too few held-out hours to resample"
    elif c.better:
        verdict, word = "better", "better"
    elif c.interval[1] < 0:
        verdict, word = "worse", "worse"
    else:
        verdict, word = "", "not distinguishable"
    return (f"<tr><td>this policy − {plain(STRATEGY_NAMES.get(c.against, c.against))}</td>"
            f'<td class="num">{num(c.difference, "+.3f")}</td>'
            f'<td class="num">{_interval(c.interval)}</td>'
            f'<td class="{verdict}">{word}</td></tr>')


def _holdout(h: HoldoutEvaluation | None, note: str) -> str:
    if h is None:
        return f'<p class="ev">Not judged on held-out traffic: {text(note)}</p>'
    strategies = "".join(
        f"<tr><td>{plain(STRATEGY_NAMES.get(s.name, s.name))}</td>"
        f'<td class="num">{num(s.goodput)}x</td><td class="num">{_interval(s.interval)}</td>'
        "</tr>" for s in h.strategies)
    unstable = sorted(c.id for c in h.slices if c.unstable)
    flagged = ("" if not unstable else
               f'<p class="ev">Acceptance moved beyond its interval between the windows '
               f"(unstable): {text('; '.join(unstable))}</p>")
    return (
        f'<p class="ev">Judged on the later held-out window {_window(h.window)}: '
        f"{h.requests:,} requests, {h.output_tokens:,} output tokens. {text(h.note)}</p>"
        "<table><tr><th>strategy</th><th>predicted decode speedup over no speculation</th>"
        f"<th>interval</th></tr>{strategies}</table>"
        "<table><tr><th>comparison</th><th>difference</th><th>interval</th><th></th></tr>"
        + "".join(_comparison(c) for c in h.comparisons) + "</table>" + flagged
        + f'<p class="ev"><small>intervals: block bootstrap over held-out hours '
        f"({h.resamples} resamples)</small></p>"
    )


def _chosen(schedule: PairSchedule) -> str:
    return ", ".join(f"{b.batch}: k={b.num_speculative_tokens}" for b in schedule.buckets)


def _schedules(section: PolicySection) -> str:
    """The one chart (the current pair's schedule), and the other pairs' schedules as text."""
    from monitor.report.charts import policy_chart  # matplotlib only when there is a chart

    charted = section.charted
    if charted is None:
        return ""
    others = "".join(f"<li>{text(s.pair.label)}: {text(_chosen(s))}</li>"
                     for s in section.schedules if s is not charted)
    listed = (f'<p class="ev">Other model pairs of the route, chosen per batch bucket:</p>'
              f'<ul class="changes">{others}</ul>' if others else "")
    return (f'<div class="charts"><figure class="chart-policy"><figcaption>Predicted speedup '
            f"by batch bucket and draft length: {text(charted.pair.label)}</figcaption>"
            f"{policy_chart(charted, 'pol-')}"
            f'<p class="ev"><small>chosen per bucket: {text(_chosen(charted))}</small></p>'
            f"</figure></div>{listed}")


def render_policy_section(section: PolicySection | None) -> str:
    """``<h2>Where to speculate</h2>`` and the route's policy; one line when there is none.

    >>> render_policy_section(None)
    ''
    >>> render_policy_section(PolicySection("code", None, "no data"))
    '<h2>Where to speculate</h2><p class="ev">No policy: <bdi>no data</bdi></p>'
    """
    if section is None:
        return ""
    result = section.result
    if result is None:
        return f'{HEADING}<p class="ev">No policy: {text(section.message)}</p>'
    try:
        body = _body(section, result)
    except (ArithmeticError, LookupError, TypeError, ValueError) as e:
        # as when computing it: a fault here costs the section, never the page
        log.exception("policy section of route %r could not be drawn", section.route)
        return (f'{HEADING}<p class="ev">No policy: the section could not be drawn '
                f"({text(f'{type(e).__name__}: {e}')}); see the log</p>")
    return f'{HEADING}<section class="policy">{body}</section>'


def _body(section: PolicySection, result: PolicyResult) -> str:
    feats = ", ".join(result.features) or "none (route and model pair only)"
    meta = (f'<p class="ev">Learnt on {_window(result.train)} from the slices of signals known '
            f"before a request runs (features: {text(feats)}); the speedups are predicted from "
            "each slice's measured per-position survival and the cost of a drafted position "
            "(<code>specwatch policy</code>, docs/policy.md).</p>")
    gains = "".join(_gain(g) for g in section.gains)
    return (f"{meta}{gains}<h3>Slices and settings</h3>{_slices(section)}"
            f"<h3>On held-out traffic</h3>{_holdout(result.holdout, result.holdout_note)}"
            f"{_schedules(section)}")
