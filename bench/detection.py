"""Detection benchmark: acceptance change points on simulated traffic, against an oracle.

Run from the repo root (one command, ~15 minutes on 2 cores, 9 of them the changes of
section 5; ``--quick`` for a smoke run, ``--changes-only`` for section 5 alone)::

    PYTHONPATH=. python bench/detection.py

What it does:

1. Simulates a suite of scenarios with ``monitor.simulate`` (the engine behind
   ``specwatch simulate``): the five default routes, daily cycle, bursts, per-request
   acceptance spread (Beta per request, chained prefix acceptance), and scripted acceptance
   incidents of several sizes, drops and rises, at different times of day. Each route is one
   segment; its per-request ``(accepted, drafted, ts)`` stream is fed in event-time order.
2. For each incident, the detection delay (minutes and requests after the change) of
   (a) specwatch's default detector (:class:`OverdispersedCusum`),
   (b) an oracle CUSUM that knows the pre- and post-change means (in-sample
       quasi-likelihood means) and the variance (design effect fitted on the pre-change
       data), one-sided in the true direction, thresholded for the same ARL,
   (c) river's ADWIN with defaults on per-request ratios, and
   (d) a Prometheus-style rule: the 5-minute ratio sum(accepted)/sum(drafted) below 90 % of
       the same series' ratio over the previous 24 h (above 110 % for rises), for 15
       consecutive per-minute evaluations of event time, armed after 24 h of history.
3. False alarms per segment-month of (a), (c), (d) on incident-free traffic (default: 70
   segment-days).
4. PASS/FAIL of the targets: every incident detected by specwatch; specwatch's delay at most
   1.5x the oracle's (each incident); at most 1 false alarm per segment per 30 days.
5. Changes of setup (issue 15, "before and after"): the same traffic, with one change on one
   route at a given hour: (a) a target fine-tune with the draft unchanged, acceptance x0.85,
   x0.90, x0.80 (draft drift); (b) a new draft revision, x0.85; (c) a fine-tune with
   acceptance unchanged (x1.0); (d) draft length 3 -> 5 with no drift; (e) a new draft
   revision, x1.15. Every event of the run goes through the whole engine
   (``monitor.detect.engine.Detection``, one partition, event-time order), as a replay
   does. For (a), (b): the delay (minutes, requests of the new setup) to the first firing
   ``acceptance_drop`` whose details carry ``previous``, whether its summary names both
   revisions, and the oracle CUSUM above run on the new setup's requests from its first one
   (pre = the old setup's in-sample mean, post = the new setup's; variance from the old
   setup; same ARL); target: specwatch <= 1.5x the oracle. For (c), (d), (e): no
   ``acceptance_drop`` on the route after the change. ``--changes-only`` runs just this
   section.

Everything is seeded; the same command prints the same numbers.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from monitor.config import DetectionConfig  # noqa: E402
from monitor.detect.acceptance import OverdispersedCusum  # noqa: E402
from monitor.detect.calibration import adjustment_coefficient, siegmund_threshold  # noqa: E402
from monitor.detect.engine import Detection  # noqa: E402
from monitor.detect.river_adapters import AdwinDetector  # noqa: E402
from monitor.simulate import DEFAULT_ROUTES, Incident, SimulationConfig, Simulator  # noqa: E402
from monitor.telemetry.parse import event_from_obj  # noqa: E402

DAY_S = 86400.0
FALSE_ALARM_DAYS = 30.0
RATE = 5.0  # events/s over all five routes (segments: ~0.5-1.5 drafted requests/s)
BUSY = 20.0  # the busy scenario: segments at ~2-6 drafted requests/s

# (name, seed, events/s, hours, incidents); incident offsets are hours from the start
# (midnight UTC: 2-8 h is the daily trough, 12-16 h the peak)
SCENARIOS: tuple[tuple[str, int, float, float, tuple[str, ...]], ...] = (
    ("night-drops", 101, RATE, 38.0, (
        "revision_change:route=creative-writing,at=26h,factor=0.85",
        "acceptance_shift:route=chat,at=27h,factor=0.9",
        "tokenizer_swap:route=translation,at=28h",
        "acceptance_shift:route=code-assistant,at=29h,factor=0.8",
        "revision_change:route=summarize,at=30h,factor=0.9",
    )),
    ("day-drops", 102, RATE, 48.0, (
        "revision_change:route=chat,at=36h,factor=0.85",
        "revision_change:route=code-assistant,at=37h,factor=0.9",
        "acceptance_shift:route=creative-writing,at=38h,factor=0.8",
        "acceptance_shift:route=translation,at=39h,factor=0.9",
        "acceptance_shift:route=summarize,at=40h,factor=0.85",
    )),
    ("rises", 103, RATE, 42.0, (
        "acceptance_shift:route=code-assistant,at=30h,factor=1.1",
        "acceptance_shift:route=chat,at=31h,factor=1.2",
        "acceptance_shift:route=creative-writing,at=32h,factor=1.3",
        "acceptance_shift:route=translation,at=33h,factor=1.15",
        "acceptance_shift:route=summarize,at=34h,factor=1.25",
    )),
    ("swaps-and-small", 104, RATE, 44.0, (
        "tokenizer_swap:route=code-assistant,at=27h",
        "tokenizer_swap:route=creative-writing,at=33h",
        "acceptance_shift:route=chat,at=34h,factor=0.95",
        "revision_change:route=translation,at=35h,factor=0.85",
        "acceptance_shift:route=summarize,at=36h,factor=1.1",
    )),
    ("busy", 105, BUSY, 30.0, (
        "revision_change:route=code-assistant,at=25h,factor=0.95",
        "acceptance_shift:route=chat,at=26h,factor=0.9",
        "revision_change:route=creative-writing,at=27h,factor=0.85",
        "tokenizer_swap:route=translation,at=28h",
        "acceptance_shift:route=summarize,at=25h30m,factor=1.15",
    )),
)
NULL_SEEDS = (201, 202, 203)
NULL_DAYS = 7.0


@dataclass(frozen=True)
class ChangeCase:
    """One change of setup on one route; ``drop``: specwatch must page (a fall), or not."""

    case: str
    what: str
    seed: int
    incident: str  # its offset is hours from the start (midnight UTC)
    drop: bool


# The change comes at 30 h (06:00 UTC, traffic rising from the night's trough) after a day
# and a quarter of the old setup; the run goes on for 8 h, past the comparison's window
# (detection.change_window, 6 h by default), so a late drop after (c)-(e) is seen too.
CHANGE_AT_H, CHANGE_AFTER_H = 30.0, 8.0
QUICK_CHANGE_AT_H, QUICK_CHANGE_AFTER_H = 8.0, 3.0
CHANGE_CASES: tuple[ChangeCase, ...] = (
    ChangeCase("(a)", "fine-tune, draft unchanged", 301,
               "revision_change:route=chat,factor=0.85", True),
    ChangeCase("(a)", "fine-tune, draft unchanged", 302,
               "revision_change:route=chat,factor=0.9", True),
    ChangeCase("(a)", "fine-tune, draft unchanged", 303,
               "revision_change:route=chat,factor=0.8", True),
    ChangeCase("(b)", "new draft, worse", 304,
               "draft_change:route=code-assistant,factor=0.85", True),
    ChangeCase("(c)", "fine-tune, acceptance same", 305,
               "revision_change:route=chat,factor=1.0", False),
    ChangeCase("(d)", "draft length 3 -> 5, no drift", 306,
               "draft_length:route=creative-writing,k=5", False),
    ChangeCase("(e)", "new draft, better", 307,
               "draft_change:route=chat,factor=1.15", False),
)
QUICK_CHANGE_CASES = (CHANGE_CASES[0], *CHANGE_CASES[3:])  # x0.85, (b)-(e)


# -- streams -----------------------------------------------------------------------------------


@dataclass
class Stream:
    """One segment's drafted requests in event-time order."""

    route: str
    accepted: np.ndarray
    drafted: np.ndarray
    ts: np.ndarray
    start: float
    end: float

    @property
    def rate(self) -> float:
        """Drafted requests per second over the whole run."""
        return len(self.ts) / (self.end - self.start)


def simulate(seed: int, hours: float, incidents: tuple[str, ...], rate: float) -> dict[str, Stream]:
    cfg = SimulationConfig(seed=seed, duration_s=hours * 3600.0, rate=rate, incidents=incidents)
    rows: dict[str, list[tuple[int, int, float]]] = {r.name: [] for r in cfg.routes}
    for event in Simulator(cfg).events():
        spec = event["spec"]
        if spec["drafted_tokens"] > 0:
            ts = datetime.fromisoformat(event["ts"]).timestamp()
            rows[event["route"]].append((spec["accepted_tokens"], spec["drafted_tokens"], ts))
    out = {}
    for route, data in rows.items():
        arr = np.array(data, dtype=np.float64).reshape(-1, 3)
        order = np.argsort(arr[:, 2], kind="stable")
        arr = arr[order]
        out[route] = Stream(route, arr[:, 0].astype(np.int64), arr[:, 1].astype(np.int64),
                            arr[:, 2], cfg.start_ts, cfg.start_ts + cfg.duration_s)
    return out


# -- the four detectors ---------------------------------------------------------------------


def run_specwatch(s: Stream) -> list[tuple[int, str]]:
    """(request index, direction) of every alarm of the default detector."""
    det = OverdispersedCusum()
    out = []
    for i, (a, d, t) in enumerate(zip(s.accepted.tolist(), s.drafted.tolist(), s.ts.tolist(),
                                      strict=True)):
        det.update(a, d, t)
        if det.drift_detected:
            out.append((i, str(det.direction)))
    return out


def run_adwin(s: Stream) -> list[tuple[int, str]]:
    """(request index, direction) of every detection of river's ADWIN at its defaults."""
    det = AdwinDetector(max_replay=None)  # river's own unbounded ADWIN, no snapshot cap
    out = []
    for i, (a, d) in enumerate(zip(s.accepted.tolist(), s.drafted.tolist(), strict=True)):
        det.update(a, d)
        if det.drift_detected:
            out.append((i, str(det.direction)))
    return out


def _rho(a: np.ndarray, d: np.ndarray) -> float:
    p = a.sum() / d.sum()
    excess = float(((a - p * d) ** 2).sum()) / (p * (1.0 - p)) - float(d.sum())
    return min(max(excess / float((d * (d - 1.0)).sum()), 0.0), 1.0)


def run_oracle(s: Stream, change: int, rise: bool, arl: float,
               fresh: bool = False) -> tuple[int | None, int, float]:
    """First alarm at or after ``change`` of the oracle CUSUM, its false alarms before, and h.

    The oracle knows the variance (rho fitted on all pre-change requests) and both means
    (quasi-likelihood means of the pre- and post-change requests), and its direction; its
    threshold comes from the same ARL with theta solved on the pre-change increments.
    ``fresh``: the CUSUM starts at 0 on the first request after the change (a new setup's
    own stream, as specwatch's comparison of a new setup starts) instead of running
    through the pre-change requests.
    """
    a, d = s.accepted.astype(np.float64), s.drafted.astype(np.float64)
    rho = _rho(a[:change], d[:change])
    w = 1.0 / (1.0 + (d - 1.0) * rho)
    p0 = float((w * a)[:change].sum() / (w * d)[:change].sum())
    p1 = float((w * a)[change:].sum() / (w * d)[change:].sum())
    if (p1 > p0) != rise:
        return None, 0, math.inf
    inc = w * (a * math.log(p1 / p0) + (d - a) * math.log((1.0 - p1) / (1.0 - p0)))
    pre = inc[:change]
    h = siegmund_threshold(arl, -float(pre.mean()), adjustment_coefficient(pre))
    stat, false_alarms = 0.0, 0
    first = change if fresh else 0
    for i, x in enumerate(inc[first:].tolist(), start=first):
        stat = max(0.0, stat + x)
        if stat >= h:
            if i >= change:
                return i, false_alarms, h
            false_alarms += 1
            stat = 0.0
    return None, false_alarms, h


def run_rule(s: Stream, factor: float = 0.9) -> list[tuple[float, str]]:
    """(event time, direction) where the Prometheus-style rule starts firing.

    Per minute of event time: ratio over the last 5 minutes vs the ratio over the last 24 h;
    below ``factor`` (drop) or above ``2 - factor`` (rise) for 15 consecutive evaluations
    fires; a firing rule fires again only after its condition has been false once.
    """
    minutes = int(math.ceil((s.end - s.start) / 60.0))
    idx = np.minimum(((s.ts - s.start) // 60).astype(np.int64), minutes - 1)
    acc = np.bincount(idx, weights=s.accepted, minlength=minutes)
    dra = np.bincount(idx, weights=s.drafted, minlength=minutes)
    ca = np.concatenate([[0.0], np.cumsum(acc)])
    cd = np.concatenate([[0.0], np.cumsum(dra)])
    out: list[tuple[float, str]] = []
    for direction in ("drop", "rise"):
        run, firing = 0, False
        for m in range(1440, minutes):  # armed once a full day of history exists
            e = m + 1  # evaluated at the end of minute m
            d5, d24 = cd[e] - cd[e - 5], cd[e] - cd[e - 1440]
            cond = False
            if d5 > 0 and d24 > 0:
                r5 = (ca[e] - ca[e - 5]) / d5
                r24 = (ca[e] - ca[e - 1440]) / d24
                cond = r5 < factor * r24 if direction == "drop" else r5 > (2 - factor) * r24
            run = run + 1 if cond else 0
            if run >= 15 and not firing:
                firing = True
                out.append((s.start + 60.0 * e, direction))
            elif not cond:
                firing = False
    return sorted(out)


# -- jobs ----------------------------------------------------------------------------------------


def _truth(inc: Incident) -> tuple[float, bool]:
    """Post-change acceptance of the route and whether it is a rise."""
    route = next(r for r in DEFAULT_ROUTES if r.name == inc.route)
    if inc.kind == "tokenizer_swap":
        p1 = float(inc.param("acceptance"))
    else:
        p1 = route.acceptance * float(inc.param("factor"))
    return p1, p1 > route.acceptance


def incident_job(job: tuple[str, int, float, float, tuple[str, ...]]) -> list[dict[str, Any]]:
    name, seed, rate, hours, specs = job
    streams = simulate(seed, hours, specs, rate)
    rows = []
    for spec in specs:
        inc = Incident.parse(spec)
        s = streams[inc.route]
        t_change = s.start + inc.at_s
        change = int(np.searchsorted(s.ts, t_change))
        p1, rise = _truth(inc)
        want = "rise" if rise else "drop"
        arl = FALSE_ALARM_DAYS * DAY_S * s.rate
        row: dict[str, Any] = {
            "scenario": name, "incident": spec, "route": inc.route, "rate": s.rate,
            "p0": next(r.acceptance for r in DEFAULT_ROUTES if r.name == inc.route),
            "p1": p1, "change": change, "t_change": t_change,
        }

        def delay(i: int | None, s: Stream = s, t: float = t_change, c: int = change) -> Any:
            """(minutes, requests) from the change to the alarm at request i."""
            return None if i is None else ((float(s.ts[i]) - t) / 60.0, i - c + 1)

        t0 = time.perf_counter()
        alarms = run_specwatch(s)
        row["t_specwatch"] = time.perf_counter() - t0
        hits = [i for i, dr in alarms if i >= change and dr == want]
        row["specwatch"] = delay(hits[0] if hits else None)
        row["specwatch_fa"] = sum(1 for i, _ in alarms if i < change)
        o, o_fa, _ = run_oracle(s, change, rise, arl)
        row["oracle"] = delay(o)
        row["oracle_fa"] = o_fa
        ad = run_adwin(s)
        hits = [i for i, dr in ad if i >= change and dr == want]
        row["adwin"] = delay(hits[0] if hits else None)
        row["adwin_fa"] = sum(1 for i, _ in ad if i < change)
        rule = run_rule(s)
        fired = [t for t, dr in rule if t >= t_change and dr == want]
        if fired:
            n_req = int(np.searchsorted(s.ts, fired[0])) - change
            row["rule"] = ((fired[0] - t_change) / 60.0, n_req)
        else:
            row["rule"] = None
        row["rule_fa"] = sum(1 for t, _ in rule if t < t_change)
        rows.append(row)
    return rows


def null_job(job: tuple[int, float, float]) -> list[dict[str, Any]]:
    seed, days, rate = job
    streams = simulate(seed, days * 24.0, (), rate)
    rows = []
    for route, s in streams.items():
        t0 = time.perf_counter()
        sw = run_specwatch(s)
        t_sw = time.perf_counter() - t0
        rows.append({
            "seed": seed, "route": route, "days": (s.end - s.start) / DAY_S, "rate": s.rate,
            "requests": len(s.ts), "specwatch": len(sw), "adwin": len(run_adwin(s)),
            "rule": len(run_rule(s)), "t_specwatch": t_sw,
        })
    return rows


def _drafted_stream(rows: list[tuple[int, int, float]], start: float, end: float,
                    route: str) -> Stream:
    arr = np.array(rows, dtype=np.float64).reshape(-1, 3)
    arr = arr[np.argsort(arr[:, 2], kind="stable")]
    return Stream(route, arr[:, 0].astype(np.int64), arr[:, 1].astype(np.int64), arr[:, 2],
                  start, end)


def change_job(job: tuple[ChangeCase, float, float]) -> list[dict[str, Any]]:
    """One change case through the whole detection engine, and the oracle on its route."""
    case, at_h, after_h = job
    kind, _, rest = case.incident.partition(":")
    where, _, params = rest.partition(",")
    spec = f"{kind}:{where},at={at_h:g}h" + (f",{params}" if params else "")
    inc = Incident.parse(spec)
    cfg = SimulationConfig(seed=case.seed, duration_s=(at_h + after_h) * 3600.0, rate=RATE,
                           incidents=(spec,))
    route = cfg.route(inc.route)
    t_change = cfg.start_ts + inc.at_s
    det = Detection(DetectionConfig(), clock="event")
    det.load({})
    records = []
    rows: list[tuple[int, int, float]] = []  # the route's drafted requests: a, d, ts
    old_setup: tuple[str, ...] = ()
    new_setup: tuple[str, ...] = ()
    batch = []
    t0 = time.perf_counter()
    for obj in Simulator(cfg).events():
        event = event_from_obj(obj)
        batch.append(event)
        if len(batch) == 500:
            det.observe(0, batch)
            records += det.drain()
            batch = []
        if obj["route"] == inc.route and obj["spec"]["drafted_tokens"] > 0:
            rows.append((obj["spec"]["accepted_tokens"], obj["spec"]["drafted_tokens"],
                         event.ts))
            setup = (event.target_revision, event.draft_revision or "",
                     str(event.num_speculative_tokens))
            if event.ts < t_change:
                old_setup = setup
            elif not new_setup:
                new_setup = setup
    det.observe(0, batch)
    records += det.drain()
    wall = time.perf_counter() - t0

    s = _drafted_stream(rows, cfg.start_ts, cfg.start_ts + cfg.duration_s, inc.route)
    change = int(np.searchsorted(s.ts, t_change))
    drops = [r for r in records if r.rule == "acceptance_drop" and r.state == "firing"
             and r.labels.get("route") == inc.route]
    after = [r for r in drops if r.at.timestamp() >= t_change]
    crossed = [r for r in after if isinstance(r.details, dict) and "previous" in r.details]
    p0 = float(s.accepted[:change].sum() / s.drafted[:change].sum())
    p1 = float(s.accepted[change:].sum() / s.drafted[change:].sum())
    row: dict[str, Any] = {
        "case": case.case, "what": case.what, "incident": spec, "route": inc.route,
        "factor": inc.param("k") if inc.kind == "draft_length" else inc.param("factor"),
        "kind": inc.kind, "at_h": at_h, "drop": case.drop, "p0": p0, "p1": p1,
        "rate": float(len(s.ts[change:]) / max(s.end - t_change, 1.0)),
        "old": old_setup, "new": new_setup, "wall": wall,
        "before": sum(1 for r in drops if r.at.timestamp() < t_change),
        "after": len(after), "first_after": None, "specwatch": None, "summary": None,
        "names_both": None, "oracle": None, "k": route.num_speculative_tokens,
    }
    if after:
        first = after[0]
        row["first_after"] = ((first.at.timestamp() - t_change) / 60.0, first.summary)
    if case.drop:
        if crossed:
            hit = crossed[0]
            at = hit.at.timestamp()
            n_req = int(np.searchsorted(s.ts, at, side="right")) - change
            row["specwatch"] = ((at - t_change) / 60.0, n_req)
            row["summary"] = hit.summary
            changed = [(o, n) for o, n in zip(old_setup, new_setup, strict=True) if o != n]
            row["names_both"] = bool(changed) and all(
                o in hit.summary and n in hit.summary for o, n in changed)
        arl = FALSE_ALARM_DAYS * DAY_S * s.rate
        o, _, _ = run_oracle(s, change, False, arl, fresh=True)
        row["oracle"] = None if o is None else ((float(s.ts[o]) - t_change) / 60.0,
                                                o - change + 1)
    return [row]


def change_ok(row: dict[str, Any]) -> bool:
    """(a), (b): a drop naming both revisions within 1.5x the oracle; (c)-(e): no drop."""
    if not row["drop"]:
        return row["after"] == 0
    sw, orc = row["specwatch"], row["oracle"]
    return bool(sw and orc and row["names_both"] and sw[1] <= 1.5 * orc[1])


def print_changes(rows: list[dict[str, Any]]) -> list[tuple[str, bool, str]]:
    """The change table; returns its PASS/FAIL checks."""
    print()
    print("## Changes of setup: acceptance_drop across the change (issue 15)")
    print("(delay: minutes, requests of the new setup from its first one; oracle: CUSUM with "
          "the old setup's and the new setup's in-sample means, fresh at the change)")
    head = (f"{'case':<4} {'what':<30} {'route':<16} {'factor':>6} {'at':>4} "
            f"{'p0->p1 (raw)':<13} {'req/s':>5} | {'specwatch':>14} | {'oracle':>14} | "
            f"{'ratio':>5} | {'names':>5} | result")
    print(head)
    print("-" * len(head))
    for r in rows:
        factor = f"k={r['factor']}" if r["kind"] == "draft_length" else f"x{r['factor']:.2f}"
        ratio = names = ""
        if r["drop"]:
            sw = _fmt(r["specwatch"]) if r["specwatch"] else "not detected"
            orc = _fmt(r["oracle"])
            if r["specwatch"] and r["oracle"]:
                ratio = f"{r['specwatch'][1] / r['oracle'][1]:5.2f}"
            if r["names_both"] is not None:
                names = "yes" if r["names_both"] else "NO"
        else:
            sw = "no drop" if not r["after"] else f"{r['after']} drop(s)"
            orc = "-"
        print(f"{r['case']:<4} {r['what']:<30} {r['route']:<16} {factor:>6} "
              f"{r['at_h']:>3g}h {r['p0']:.2f}->{r['p1']:.2f}{'':<3} {r['rate']:5.2f} | "
              f"{sw:>14} | {orc:>14} | {ratio:>5} | {names:>5} | "
              f"{'PASS' if change_ok(r) else 'FAIL'}")
    for r in rows:
        if r["summary"]:
            print(f"  {r['case']} {r['incident']}: \"{r['summary']}\"")
        elif r["first_after"]:
            minutes, summary = r["first_after"]
            print(f"  {r['case']} {r['incident']}: acceptance_drop {minutes:.1f} min after "
                  f"the change: \"{summary}\"")
    before = sum(r["before"] for r in rows)
    print(f"acceptance_drop on the changed route before the change in these runs: {before}; "
          f"engine time {sum(r['wall'] for r in rows):.0f} s "
          f"(simulate + parse + Detection, all routes)")
    worse = [r for r in rows if r["drop"]]
    same = [r for r in rows if not r["drop"]]
    ratios = [r["specwatch"][1] / r["oracle"][1] for r in worse
              if r["specwatch"] and r["oracle"]]
    detail = f"{sum(change_ok(r) for r in worse)}/{len(worse)}"
    if ratios:
        detail += f", worst ratio {max(ratios):.2f}"
    return [
        ("changes (a)(b): acceptance_drop with previous, both revisions named, "
         "<= 1.5x oracle", all(change_ok(r) for r in worse), detail),
        ("changes (c)(d)(e): no acceptance_drop after an unchanged, longer or better setup",
         all(change_ok(r) for r in same), f"{sum(change_ok(r) for r in same)}/{len(same)}"),
    ]


# -- report --------------------------------------------------------------------------------------


def _fmt(value: tuple[float, int] | None) -> str:
    return "missed" if value is None else f"{value[0]:7.1f} {value[1]:6d}"


def _size(row: dict[str, Any]) -> str:
    return f"{row['p0']:.2f}->{row['p1']:.2f} ({row['p1'] / row['p0'] - 1:+.0%})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="two scenarios and 10 segment-days of null traffic (smoke run)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--changes-only", action="store_true",
                        help="only the changes-of-setup section (5.)")
    args = parser.parse_args(argv)
    scenarios = SCENARIOS[:2] if args.quick else SCENARIOS
    null_seeds = NULL_SEEDS[:1] if args.quick else NULL_SEEDS
    # (--workers 1 runs in this process: handy under a profiler)
    null_days = 2.0 if args.quick else NULL_DAYS
    if args.changes_only:
        scenarios, null_seeds = (), ()
    cases = QUICK_CHANGE_CASES if args.quick else CHANGE_CASES
    at_h, after_h = ((QUICK_CHANGE_AT_H, QUICK_CHANGE_AFTER_H) if args.quick
                     else (CHANGE_AT_H, CHANGE_AFTER_H))

    flags = "".join(f" --{f}" for f, on in (("quick", args.quick),
                                              ("changes-only", args.changes_only)) if on)
    print("# specwatch detection benchmark")
    print(f"# command: PYTHONPATH=. python bench/detection.py{flags}")
    print(f"# traffic: monitor.simulate (as `specwatch simulate`), the 5 default routes, "
          f"diurnal 0.5, bursts 0.5/h, {RATE:g} events/s ({BUSY:g} in 'busy'); "
          f"target: 1 false alarm per segment per {FALSE_ALARM_DAYS:g} days")
    if not args.changes_only:
        print("# scenario seeds: " + ", ".join(f"{n}={s}" for n, s, *_ in scenarios)
              + f"; null seeds: {', '.join(map(str, null_seeds))} x {null_days:g} days "
              f"at {RATE:g} events/s")
    print(f"# change seeds: {', '.join(str(c.seed) for c in cases)}; each change at "
          f"{at_h:g} h, run to {at_h + after_h:g} h")
    started = time.perf_counter()
    # longest jobs first, so the pool's workers finish together
    jobs: list[Any] = [("null", (seed, null_days, RATE)) for seed in null_seeds]
    jobs += [("inc", sc) for sc in sorted(scenarios, key=lambda sc: -sc[2] * sc[3])]
    jobs += [("chg", (case, at_h, after_h)) for case in cases]
    if args.workers > 1:
        with multiprocessing.get_context("fork").Pool(args.workers) as pool:
            results = pool.map(_dispatch, jobs, chunksize=1)
    else:
        results = [_dispatch(job) for job in jobs]
    order = {name: i for i, (name, *_) in enumerate(SCENARIOS)}
    pairs = sorted(zip(jobs, results, strict=True),
                   key=lambda jr: (jr[0][0] == "inc", order.get(jr[0][1][0], -1)))
    jobs, results = [j for j, _ in pairs], [r for _, r in pairs]
    inc_rows = [r for kind, rows in zip(jobs, results, strict=True) if kind[0] == "inc"
                for r in rows]
    null_rows = [r for kind, rows in zip(jobs, results, strict=True) if kind[0] == "null"
                 for r in rows]
    chg_rows = [r for kind, rows in zip(jobs, results, strict=True) if kind[0] == "chg"
                for r in rows]
    if args.changes_only:
        checks = print_changes(chg_rows)
        return _verdict(checks, started)

    print()
    print("## Detection delay after each incident (minutes, requests)")
    head = (f"{'incident':<58} {'size':<20} {'req/s':>5} | {'(a) specwatch':>14} | "
            f"{'(b) oracle':>14} | {'(c) ADWIN':>14} | {'(d) rule':>14} | {'a/b':>5}")
    print(head)
    print("-" * len(head))
    ratios = []
    for r in inc_rows:
        ratio = ""
        if r["specwatch"] and r["oracle"]:
            q = r["specwatch"][1] / r["oracle"][1]
            ratios.append(q)
            ratio = f"{q:5.2f}"
        print(f"{r['incident']:<58} {_size(r):<20} {r['rate']:5.2f} | {_fmt(r['specwatch']):>14} | "
              f"{_fmt(r['oracle']):>14} | {_fmt(r['adwin']):>14} | {_fmt(r['rule']):>14} | "
              f"{ratio:>5}")
    names = ("specwatch", "oracle", "adwin", "rule")
    pre = {k: sum(r[f"{k}_fa"] for r in inc_rows) for k in names}
    print("alarms before the change in these runs: "
          + ", ".join(f"{k} {v}" for k, v in pre.items()))

    print()
    seg_days = sum(r["days"] for r in null_rows)
    months = seg_days / FALSE_ALARM_DAYS
    print(f"## False alarms on incident-free traffic ({len(null_rows)} segments, "
          f"{seg_days:.0f} segment-days)")
    print(f"{'segment':<28} {'req/s':>6} {'requests':>9} {'(a)':>4} {'(c)':>5} {'(d)':>4}")
    for r in null_rows:
        print(f"seed {r['seed']} {r['route']:<18} {r['rate']:6.2f} {r['requests']:9d} "
              f"{r['specwatch']:4d} {r['adwin']:5d} {r['rule']:4d}")
    fa = {k: sum(r[k] for r in null_rows) for k in ("specwatch", "adwin", "rule")}
    print("per segment-month: " + ", ".join(
        f"({tag}) {name} {fa[name] / months:.2f}"
        for tag, name in (("a", "specwatch"), ("c", "adwin"), ("d", "rule"))))
    us = sum(r["t_specwatch"] for r in null_rows) / sum(r["requests"] for r in null_rows) * 1e6
    print(f"specwatch cost: {us:.1f} us per request")

    missed = [r["incident"] for r in inc_rows if r["specwatch"] is None]
    worst = max(ratios) if ratios else math.inf
    checks = [
        ("every incident detected by specwatch", not missed,
         f"{len(inc_rows) - len(missed)}/{len(inc_rows)}"),
        ("specwatch delay <= 1.5x oracle (every incident)", worst <= 1.5,
         f"worst {worst:.2f}, median {float(np.median(ratios)):.2f}"),
        ("<= 1 false alarm per segment per 30 days", fa["specwatch"] / months <= 1.0,
         f"{fa['specwatch']} in {seg_days:.0f} segment-days = {fa['specwatch'] / months:.2f}"),
    ]
    checks += print_changes(chg_rows)
    return _verdict(checks, started)


def _verdict(checks: list[tuple[str, bool, str]], started: float) -> int:
    print()
    for text, ok, detail in checks:
        print(f"{'PASS' if ok else 'FAIL'}: {text} ({detail})")
    print(f"# wall time {time.perf_counter() - started:.0f} s")
    return 0 if all(ok for _, ok, _ in checks) else 1


def _dispatch(job: tuple[str, Any]) -> list[dict[str, Any]]:
    kind, args = job
    if kind == "chg":
        return change_job(args)
    return incident_job(args) if kind == "inc" else null_job(args)


if __name__ == "__main__":
    sys.exit(main())
