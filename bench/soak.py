"""Soak benchmark: the daemon under steady live traffic with incidents, and memory per series.

Phase 1 (soak): the bundled broker, a fresh migrated store (SQLite, or a new database on the
PostgreSQL server of ``--db-url``) and ``specwatch run`` as a subprocess, alerting to a local
webhook receiver. A producer thread sends ``Simulator.realtime`` traffic (the five default
routes at a flat ``--rate``, 100 events per Kafka message per route) for ``--minutes``, with
incidents scripted at fixed fractions of the run: an acceptance drop (chat, 15 %), a
tokenizer swap (translation, 30 %), draft evictions (code-assistant, 45 %), a route going
silent (summarize, 60 %) and a target revision change (creative-writing, 75 %). Every
``--sample`` seconds it records events produced and committed, throughput, consumer lag
(end offsets minus stored offsets, and events produced minus committed), the daemon's RSS
and CPU time from /proc, and alerts fired (store) and notified (webhook). At the end it
drains the backlog, compares every committed minute rollup with an oracle of what was sent,
stops the daemon with SIGTERM and prints a summary with PASS/FAIL checks.

Phase 2 (series): for each N in ``--series``, a fresh daemon consumes N x
``--series-events`` simulated events spread over N series (routes of ``--pairs`` model
pairs each), and a baseline daemon the same events on the five default series; the
difference of their resident memory once everything is checkpointed, divided by the
difference of their series counts, is the memory per series.

Exit code: 0 all checks pass, 1 a check failed, 2 the daemon died or the run broke, 130
interrupted (Ctrl-C or SIGTERM; the broker and daemon are stopped either way).

Commands (from the repo root)::

    .venv/bin/python bench/soak.py --out soak.json              # 30 min at 2,000 events/s,
                                                                # then 1,000 and 10,000 series
    .venv/bin/python bench/soak.py --minutes 2 --rate 1000 --sample 10 --skip-series
    .venv/bin/python bench/soak.py --skip-soak --series 1000,10000
    .venv/bin/python bench/soak.py --db-url postgresql+psycopg://postgres@127.0.0.1:5432/test
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
from kafka import KafkaConsumer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.soak_daemon import (  # noqa: E402
    STOP,
    Daemon,
    DaemonDied,
    Interrupted,
    StoreProbe,
    daemon_env,
    fresh_database,
    pause,
    proc_status,
    write_config,
)
from bench.soak_traffic import (  # noqa: E402
    MESSAGE_BATCH,
    LiveProducer,
    Oracle,
    SeriesSpreader,
    incidents,
    recent_events,
    stale_after,
    steady_config,
    store_sums,
)
from monitor.broker import EmbeddedBroker  # noqa: E402
from monitor.simulate import KafkaWriter  # noqa: E402
from monitor.sources.topics import ensure_topics  # noqa: E402
from monitor.store.store import Store  # noqa: E402
from tests.alerts.receivers import WebhookReceiver  # noqa: E402

PARTITIONS = 4
MB = 1024 * 1024
FLAT_MB_PER_HOUR = 5.0  # RSS is "flat" below this slope, or below 2 % of RSS per hour
FLAT_SHARE_PER_HOUR = 0.02
FLAT_MIN_HALF_S = 300.0  # a second half shorter than this is too short to judge a slope
KEEP_UP_S = 10.0  # lag p99 within this many seconds of traffic: the daemon keeps up
INCIDENTS_MIN_RUN_S = 60.0  # shorter runs script incidents too brief to judge
# Bytes per series at the largest N at most 25 % above the smallest N's: memory grows no
# faster than linearly with cardinality (a fixed share spread over more series may make it
# fall, which is no risk).
LINEAR_TOLERANCE = 0.25


def say(text: str = "") -> None:
    print(text, flush=True)


# -- phase 1: soak -----------------------------------------------------------------------------


class EndOffsets:
    """The topic's end offsets, read by a group-less consumer."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        self._parts = [TopicPartition(topic, p) for p in range(PARTITIONS)]

    def total(self) -> int:
        return sum(self._consumer.end_offsets(self._parts).values())

    def close(self) -> None:
        self._consumer.close()


def _broker_pid(broker: EmbeddedBroker) -> int | None:
    proc = getattr(broker, "_proc", None)  # EmbeddedBroker keeps its Popen private
    return proc.pid if proc is not None else None


def _broker_rss(broker: EmbeddedBroker) -> float | None:
    pid = _broker_pid(broker)
    try:
        return proc_status(pid)["VmRSS"] / MB if pid is not None else None
    except (OSError, KeyError):
        return None


def _slope_per_hour(ts: list[float], ys: list[float]) -> float:
    """Least-squares slope of ``ys`` against ``ts`` (seconds), per hour."""
    if len(ts) < 2 or max(ts) - min(ts) <= 0:
        return 0.0
    return float(np.polyfit(np.asarray(ts), np.asarray(ys), 1)[0]) * 3600.0


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else 0.0


class Soak:
    """One soak run; ``out`` fills as it goes, so an interrupted run still reports."""

    def __init__(self, args: argparse.Namespace, broker: EmbeddedBroker, workdir: Path,
                 out: dict[str, Any]) -> None:
        self.args = args
        self.broker = broker
        self.workdir = workdir
        self.out = out
        self.run_s = args.minutes * 60.0
        self.scripted = incidents(self.run_s)
        self.samples: list[dict[str, Any]] = out.setdefault("samples", [])
        # A route with an alert out batches its next changes this often: 5 % of the run.
        self.group_interval = min(300.0, max(10.0, 0.05 * self.run_s))

    def run(self) -> None:
        args, out = self.args, self.out
        name = uuid.uuid4().hex[:8]
        topic = f"soak-{name}"
        group = f"soak-{name}"
        source = f"kafka:{group}:{topic}"
        out.update(rate=args.rate, minutes=args.minutes, sample_s=args.sample,
                   incidents=[str(i) for i, _ in self.scripted],
                   stale_after_s=stale_after(self.run_s))
        with ExitStack() as stack:
            url = stack.enter_context(
                fresh_database(args.db_url, self.workdir, f"soak-{name}", keep=args.keep))
            out["store"] = _display(url)
            receiver: WebhookReceiver = stack.enter_context(WebhookReceiver())
            config = write_config(self.workdir / "soak.yaml", {
                "kafka": {"bootstrap_servers": self.broker.bootstrap_servers, "topic": topic,
                          "dead_letter_topic": f"{topic}-dlq", "group_id": group,
                          "partitions": PARTITIONS, "session_timeout_ms": 6000,
                          "max_poll_interval_ms": 30000},
                "store": {"url": url},
                "detection": {"stale_after": f"{stale_after(self.run_s):.0f}s"},
                # A quick sweep and short group timings, so that a short run sees its alerts.
                "jobs": {"staleness_every": "5s"},
                "alerting": {"lifecycle": {"group_wait": "10s",
                                           "group_interval": f"{self.group_interval:.0f}s"}},
            })
            ensure_topics(self.broker.bootstrap_servers, [topic, f"{topic}-dlq"], PARTITIONS)
            daemon = Daemon(config, self.workdir / "soak-daemon.log",
                            daemon_env({"SPECWATCH_WEBHOOK_URL": f"{receiver.url}/soak"}))
            stack.callback(self._stop_daemon, daemon)
            daemon.start()
            out["daemon_pid"] = daemon.pid
            say(f"daemon pid {daemon.pid} ready (log: {daemon.log})")
            probe = StoreProbe(url, source)
            stack.callback(probe.close)
            ends = EndOffsets(self.broker.bootstrap_servers, topic)
            stack.callback(ends.close)
            oracle = Oracle()
            producer = LiveProducer(self.broker.bootstrap_servers, topic,
                                    steady_config(args.rate, args.seed,
                                                  [i for i, _ in self.scripted]),
                                    PARTITIONS, oracle)
            stack.callback(producer.stop, 15.0)
            producer.start()
            producer.ready.wait(60)
            if producer.error is not None:
                raise RuntimeError(f"the producer failed: {producer.error!r}")
            say(f"soak: {args.minutes:g} min at {args.rate:,.0f} events/s, a sample every "
                f"{args.sample:g} s; incidents:")
            for inc, rules in self.scripted:
                say(f"  +{inc.at_s:6.0f}s  {inc}  (expect {' or '.join(rules)})")
            say(self._header())
            self._loop(daemon, probe, ends, producer, receiver)

            say("stopping the producer; draining the backlog ...")
            producer.stop()
            if producer.error is not None:
                raise RuntimeError(f"the producer failed: {producer.error!r}")
            out["produced"] = producer.produced
            out["messages"] = producer.messages
            out["per_route"] = dict(producer.per_route)
            drain_started = time.monotonic()
            daemon.wait(lambda: sum(probe.next_offsets().values()) >= ends.total(),
                        max(300.0, self.run_s), "the daemon to commit every message")
            out["drain_s"] = round(time.monotonic() - drain_started, 1)
            self._sample(daemon, probe, ends, producer, receiver, final=True)
            daemon.wait(lambda: probe.pending_notifications() == 0, 180,
                        "every notification to be delivered")
            self._await_notifications(daemon, probe, producer.started, receiver)
            metrics = daemon.metrics()
            self._exact(url, oracle, metrics)
            self._alerts(url, producer.started, receiver)
            out["daemon_exit"] = daemon.stop()
        self._summary()

    # -- sampling ------------------------------------------------------------------------------

    @staticmethod
    def _header() -> str:
        return (f"{'t s':>6} {'produced':>10} {'committed':>10} {'in ev/s':>8} {'out ev/s':>8} "
                f"{'lag msg':>7} {'lag ev':>7} {'rss MB':>7} {'cpu %':>6} {'alerts':>6} "
                f"{'notif':>5}")

    def _loop(self, daemon: Daemon, probe: StoreProbe, ends: EndOffsets,
              producer: LiveProducer, receiver: WebhookReceiver) -> None:
        self._t0 = time.monotonic()
        self._sample(daemon, probe, ends, producer, receiver)
        next_at = self._t0 + self.args.sample
        end = self._t0 + self.run_s
        while True:
            if STOP.is_set():
                raise Interrupted
            now = time.monotonic()
            if now >= end:
                return
            if now >= next_at:
                self._sample(daemon, probe, ends, producer, receiver)
                next_at += self.args.sample
                continue
            daemon.check()
            if producer.error is not None or not producer.is_alive():
                raise RuntimeError(f"the producer stopped: {producer.error!r}")
            pause(min(1.0, next_at - now, end - now))

    def _sample(self, daemon: Daemon, probe: StoreProbe, ends: EndOffsets,
                producer: LiveProducer, receiver: WebhookReceiver, final: bool = False) -> None:
        daemon.check()
        t = time.monotonic() - self._t0
        produced = producer.produced
        end_total = ends.total()
        stored = sum(probe.next_offsets().values())
        committed = probe.committed_events()
        mem = daemon.memory()
        cpu = daemon.cpu()
        try:
            metrics = daemon.metrics()
        except Exception:  # a slow scrape must not end a soak; the sample says so
            metrics = {}
        prev = self.samples[-1] if self.samples else None
        dt = t - prev["t"] if prev else 0.0
        s: dict[str, Any] = {
            "t": round(t, 1),
            "final": final,
            "produced": produced,
            "committed": committed,
            "processed": metrics.get("specwatch_events_total"),
            "in_rate": (produced - prev["produced"]) / dt if prev and dt > 0 else None,
            "out_rate": (committed - prev["committed"]) / dt if prev and dt > 0 else None,
            "lag_messages": max(0, end_total - stored),
            "lag_events": max(0, produced - committed),
            "event_time_lag_s": metrics.get("specwatch_event_time_lag_seconds"),
            "rss_mb": mem["rss"] / MB,
            "peak_mb": mem["peak"] / MB,
            "rss_anon_mb": mem["anon"] / MB,
            "rss_file_mb": mem["file"] / MB,
            "cpu_s": cpu,
            "cpu_pct": 100.0 * (cpu - prev["cpu_s"]) / dt if prev and dt > 0 else None,
            "broker_rss_mb": _broker_rss(self.broker),
            "alerts_fired": probe.alerts_fired(),
            "notified": sum(1 for d in receiver.deliveries if d[1] == "trigger"),
        }
        self.samples.append(s)

        def num(v: float | None, width: int, fmt: str = ",.0f") -> str:
            return f"{'-':>{width}}" if v is None else f"{v:>{width}{fmt}}"

        say(f"{s['t']:>6.0f} {produced:>10,} {committed:>10,} {num(s['in_rate'], 8)} "
            f"{num(s['out_rate'], 8)} {s['lag_messages']:>7,} {s['lag_events']:>7,} "
            f"{s['rss_mb']:>7.1f} {num(s['cpu_pct'], 6, '.1f')} {s['alerts_fired']:>6} "
            f"{s['notified']:>5}{'  (drained)' if final else ''}")

    # -- end of run ----------------------------------------------------------------------------

    def _stop_daemon(self, daemon: Daemon) -> None:
        code = daemon.stop()
        self.out.setdefault("daemon_exit", code)

    def _await_notifications(self, daemon: Daemon, probe: StoreProbe, started: float,
                             receiver: WebhookReceiver) -> None:
        """Give alerts decided late in the run their group interval to be sent: wait until
        every incident that fired was notified, at most a group interval and a half."""
        url = probe.url

        def notified() -> bool:
            with Store(url) as store:
                firing = [r for r in store.alerts() if r.state == "firing"]
            sent = {(b.get("rule"), (b.get("labels") or {}).get("route"))
                    for _, kind, _, b in receiver.deliveries
                    if kind == "trigger" and isinstance(b, dict)}
            for inc, rules in self.scripted:
                start = started + inc.at_s - 1.0
                fired = {r.rule for r in firing if r.labels.get("route") == inc.route
                         and r.rule in rules and r.at.timestamp() >= start}
                if fired and not any((rule, inc.route) in sent for rule in fired):
                    return False
            return probe.pending_notifications() == 0

        try:
            daemon.wait(notified, 1.5 * self.group_interval + 15.0,
                        "the notifications of fired incidents", interval=1.0)
        except TimeoutError:
            pass  # reported as such in the incident table

    def _exact(self, url: str, oracle: Oracle, metrics: dict[str, float]) -> None:
        with Store(url) as store:
            stored = store_sums(store.ratios(granularity="minute"))
        expected = dict(oracle.sums)
        differing = sorted(set(stored) ^ set(expected)) + sorted(
            k for k in set(stored) & set(expected) if stored[k] != expected[k])
        self.out["exact"] = {
            "rows_expected": len(expected),
            "rows_stored": len(stored),
            "rows_differing": len(differing),
            "first_differences": [[list(k), expected.get(k), stored.get(k)]
                                  for k in differing[:5]],
            "events_total": metrics.get("specwatch_events_total"),
            "produced": oracle.events,
            "late": metrics.get("specwatch_late_events_total"),
            "invalid": metrics.get("specwatch_invalid_events_total"),
            "duplicate": metrics.get("specwatch_duplicate_events_total"),
        }

    def _alerts(self, url: str, started: float, receiver: WebhookReceiver) -> None:
        with Store(url) as store:
            records = [r for r in store.alerts() if r.state == "firing"]
        triggers = [d[3] for d in receiver.deliveries if d[1] == "trigger"]
        rows = []
        explained: set[int] = set()
        for inc, rules in self.scripted:
            start = started + inc.at_s
            hits = [(i, r) for i, r in enumerate(records)
                    if r.labels.get("route") == inc.route and r.rule in rules
                    and r.at.timestamp() >= start - 1.0]
            explained.update(i for i, r in enumerate(records)
                             if r.labels.get("route") == inc.route
                             and r.at.timestamp() >= start - 1.0)
            first = hits[0][1] if hits else None
            notified = [b for b in triggers if isinstance(b, dict) and b.get("rule") in rules
                        and (b.get("labels") or {}).get("route") == inc.route]
            rows.append({
                "incident": str(inc), "at_s": inc.at_s, "expected": list(rules),
                "fired": first.rule if first else None,
                "delay_s": round(first.at.timestamp() - start, 1) if first else None,
                "notified": len(notified),
            })
        others = [{"rule": r.rule, "route": r.labels.get("route"),
                   "at_s": round(r.at.timestamp() - started, 1)}
                  for i, r in enumerate(records) if i not in explained]
        self.out["alerts"] = {
            "incidents": rows,
            "firing_records": len(records),
            "unexplained": others,
            "webhook": {kind: sum(1 for d in receiver.deliveries if d[1] == kind)
                        for kind in ("trigger", "reminder", "resolve")},
            "webhook_violations": list(receiver.violations),
        }

    # -- summary --------------------------------------------------------------------------------

    def _summary(self) -> None:
        out = self.out
        live = [s for s in self.samples if not s["final"]]
        rates = [s["out_rate"] for s in live if s["out_rate"] is not None]
        ins = [s["in_rate"] for s in live if s["in_rate"] is not None]
        lag_msg = [float(s["lag_messages"]) for s in live]
        lag_ev = [float(s["lag_events"]) for s in live]
        rss = [s["rss_mb"] for s in live]
        half = [s for s in live if s["t"] >= self.run_s / 2]
        slope = _slope_per_hour([s["t"] for s in half], [s["rss_mb"] for s in half])
        half_span = (half[-1]["t"] - half[0]["t"]) if half else 0.0
        limit = max(FLAT_MB_PER_HOUR, FLAT_SHARE_PER_HOUR * (rss[-1] if rss else 0.0))
        elapsed = live[-1]["t"] if live else 0.0
        summary = {
            "elapsed_s": elapsed,
            "throughput_mean": live[-1]["committed"] / elapsed if elapsed else 0.0,
            "throughput_min": min(rates) if rates else None,
            "produced_mean": live[-1]["produced"] / elapsed if elapsed else 0.0,
            "produced_min": min(ins) if ins else None,
            "lag_messages": {"p50": _pct(lag_msg, 50), "p99": _pct(lag_msg, 99),
                             "max": max(lag_msg, default=0.0)},
            "lag_events": {"p50": _pct(lag_ev, 50), "p99": _pct(lag_ev, 99),
                           "max": max(lag_ev, default=0.0)},
            "rss_mb": {"first": rss[0] if rss else None, "last": rss[-1] if rss else None,
                       "max": max(rss, default=None)},
            "rss_slope_mb_per_h": slope,
            "rss_flat_limit_mb_per_h": limit,
            "rss_second_half_s": half_span,
            "cpu_s": live[-1]["cpu_s"] if live else None,
            "cpu_pct_mean": (100.0 * (live[-1]["cpu_s"] - live[0]["cpu_s"])
                             / (elapsed - live[0]["t"])) if len(live) > 1 else None,
            "broker_rss_mb_last": live[-1]["broker_rss_mb"] if live else None,
        }
        out["summary"] = summary
        checks: list[dict[str, str]] = out.setdefault("checks", [])

        def check(name: str, status: str, detail: str) -> None:
            checks.append({"check": name, "status": status, "detail": detail})

        code = out.get("daemon_exit")
        check("daemon ran throughout and exited 0 on SIGTERM", "PASS" if code == 0 else "FAIL",
              f"exit code {code}")
        p99 = summary["lag_events"]["p99"]
        check(f"kept up: consumer lag p99 <= {KEEP_UP_S:g} s of traffic",
              "PASS" if p99 <= KEEP_UP_S * self.args.rate else "FAIL",
              f"p99 {p99:,.0f} events, {self.args.rate * KEEP_UP_S:,.0f} allowed; drained in "
              f"{out.get('drain_s')} s")
        if half_span < FLAT_MIN_HALF_S or len(half) < 5:
            status = "SKIP"
            detail = (f"second half {half_span:.0f} s / {len(half)} samples: too short to judge "
                      f"(needs {FLAT_MIN_HALF_S:.0f} s, 5 samples)")
        else:
            status = "PASS" if slope < limit else "FAIL"
            detail = f"slope {slope:+.1f} MB/h over the second half, limit {limit:.1f} MB/h"
        check("resident memory flat", status, detail)
        alerts = out.get("alerts", {})
        rows = alerts.get("incidents", [])
        fired = sum(1 for r in rows if r["fired"])
        notified = sum(1 for r in rows if r["notified"])
        if self.run_s < INCIDENTS_MIN_RUN_S:
            check("every scripted incident alerted and notified", "SKIP",
                  f"run shorter than {INCIDENTS_MIN_RUN_S:.0f} s ({fired}/{len(rows)} fired)")
        else:
            check("every scripted incident alerted and notified",
                  "PASS" if rows and fired == notified == len(rows) else "FAIL",
                  f"{fired}/{len(rows)} fired, {notified}/{len(rows)} notified; "
                  f"{len(alerts.get('unexplained', []))} other firing record(s)")
        check("webhook received valid alerts-v1 records only",
              "PASS" if not alerts.get("webhook_violations") else "FAIL",
              f"{len(alerts.get('webhook_violations', []))} violation(s)")
        exact = out.get("exact", {})
        ok = (exact.get("rows_differing") == 0 and exact.get("rows_expected", 0) > 0
              and exact.get("events_total") == exact.get("produced"))
        check("store tables equal what was produced (minute rollups, exact)",
              "PASS" if ok else "FAIL",
              f"{exact.get('rows_expected')} minute rows expected, {exact.get('rows_stored')} "
              f"stored, {exact.get('rows_differing')} differ; events_total "
              f"{exact.get('events_total')} vs {exact.get('produced')} produced")
        self._print_summary()

    def _print_summary(self) -> None:
        out, s = self.out, self.out["summary"]
        say()
        say(f"## soak summary ({s['elapsed_s']:.0f} s at {self.args.rate:,.0f} events/s, "
            f"store {out.get('store')})")
        say(f"throughput: mean {s['throughput_mean']:,.0f} events/s committed (produced "
            f"{s['produced_mean']:,.0f}), min interval {_fmt(s['throughput_min'])} "
            f"(produced min {_fmt(s['produced_min'])})")
        for unit in ("messages", "events"):
            lag = s[f"lag_{unit}"]
            say(f"consumer lag ({unit}): p50 {lag['p50']:,.0f}  p99 {lag['p99']:,.0f}  "
                f"max {lag['max']:,.0f}")
        r = s["rss_mb"]
        say(f"daemon RSS: first {_fmt(r['first'], '.1f')} MB, last {_fmt(r['last'], '.1f')} MB, "
            f"max {_fmt(r['max'], '.1f')} MB; second-half slope {s['rss_slope_mb_per_h']:+.1f} "
            f"MB/h (flat below {s['rss_flat_limit_mb_per_h']:.1f})")
        say(f"daemon CPU: {_fmt(s['cpu_s'], '.0f')} s, mean {_fmt(s['cpu_pct_mean'], '.1f')} % "
            f"of a core; broker RSS at the end {_fmt(s['broker_rss_mb_last'], '.0f')} MB")
        alerts = out.get("alerts", {})
        say(f"{'incident':<68} {'fired':<20} {'delay s':>7} {'notified':>8}")
        for row in alerts.get("incidents", []):
            say(f"{row['incident']:<68} {row['fired'] or 'MISSED':<20} "
                f"{_fmt(row['delay_s'], '.1f'):>7} {row['notified']:>8}")
        for other in alerts.get("unexplained", []):
            say(f"other firing record (no scripted incident on its route before it): "
                f"{other['rule']} on {other['route']} at +{other['at_s']}s")
        say(f"webhook: {alerts.get('webhook')}")
        for c in out.get("checks", []):
            say(f"{c['status']}: {c['check']} ({c['detail']})")


def _display(url: str) -> str:
    """A database URL without its user and password."""
    return url.rpartition("@")[2] if "@" in url else url


def _fmt(value: float | None, fmt: str = ",.0f") -> str:
    return "-" if value is None else format(value, fmt)


# -- phase 2: memory per series ----------------------------------------------------------------


def _measure(args: argparse.Namespace, broker: EmbeddedBroker, workdir: Path, label: str,
             n_series: int, total: int,
             relabel: Callable[[dict[str, Any]], dict[str, Any]] | None) -> dict[str, Any]:
    """One daemon consumes ``total`` events (relabelled); its memory once all is committed."""
    name = f"{label}-{uuid.uuid4().hex[:6]}"
    topic, group = f"series-{name}", f"series-{name}"
    with ExitStack() as stack:
        url = stack.enter_context(fresh_database(args.db_url, workdir, name, keep=args.keep))
        config = write_config(workdir / f"{name}.yaml", {
            "kafka": {"bootstrap_servers": broker.bootstrap_servers, "topic": topic,
                      "dead_letter_topic": f"{topic}-dlq", "group_id": group,
                      "partitions": PARTITIONS, "session_timeout_ms": 6000,
                      "max_poll_interval_ms": 300000},
            "store": {"url": url},
            # Admit every series (the cardinality guard's caps), and judge no route stale
            # while memory is read: the traffic is a few minutes of history. A backlog
            # batched per route interleaves routes by up to a batch's span in a partition:
            # an hour of lateness drops nothing (every request id of a few minutes of
            # traffic is remembered under the default horizon too, so memory is the same).
            "ingest": {"allowed_lateness": "1h", "dedup_horizon": "1h",
                       "max_series_per_route": max(256, args.pairs),
                       "max_series": max(20000, n_series + 1000)},
            "detection": {"stale_after": "1d", "idle_pair_resolve": "1d"},
        })
        ensure_topics(broker.bootstrap_servers, [topic, f"{topic}-dlq"], PARTITIONS)
        events = recent_events(total, args.seed)
        stream = _until_stopped(map(relabel, events) if relabel is not None else events)
        with KafkaWriter(broker.bootstrap_servers, topic, batch_size=MESSAGE_BATCH,
                         partitions=PARTITIONS, max_delay_s=None) as writer:
            writer.write_all(stream)
            messages = writer.messages
        daemon = Daemon(config, workdir / f"{name}.log", daemon_env({}))
        stack.callback(daemon.stop)
        daemon.start()
        started = time.monotonic()  # partitions assigned: consuming from here
        pid = daemon.pid
        probe = StoreProbe(url, f"kafka:{group}:{topic}")
        stack.callback(probe.close)
        daemon.wait(lambda: sum(probe.next_offsets().values()) >= messages,
                    max(600.0, total / 500.0), f"{label}: {messages} messages committed")
        consume_s = time.monotonic() - started
        # Let the last checkpoint's garbage go and the scheduler settle, then read RSS a few
        # times: the median of five readings a second apart.
        readings = []
        for _ in range(5):
            pause(1.0)
            daemon.check()
            readings.append(daemon.memory())
        rss = float(np.median([r["rss"] for r in readings]))
        snapshots, state_size = probe.state_bytes()
        row = {
            "label": label, "store": _display(url), "daemon_pid": pid,
            "events": total, "messages": messages,
            "series": probe.series_count(), "rss_mb": rss / MB,
            "peak_mb": readings[-1]["peak"] / MB, "consume_s": round(consume_s, 3),
            "ingest_rate": total / consume_s,
            "events_total": daemon.metrics().get("specwatch_events_total"),
            "state_snapshots": snapshots, "state_bytes": state_size,
        }
        row["exit"] = daemon.stop()
    return row


def _until_stopped(events: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for event in events:
        if STOP.is_set():
            raise Interrupted
        yield event


def series_phase(args: argparse.Namespace, broker: EmbeddedBroker, workdir: Path,
                 out: list[dict[str, Any]]) -> None:
    say()
    say(f"## memory per series ({args.series_events} events per series, {args.pairs} model "
        f"pairs per route; baseline: the same events on the 5 default series)")
    say(f"{'N':>7} {'series':>7} {'events':>9} {'RSS MB':>8} {'base MB':>8} {'peak MB':>8} "
        f"{'B/series':>9} {'state B/series':>14} {'ingest ev/s':>11} {'(base)':>8}")
    for n in args.series:
        total = n * args.series_events
        base = _measure(args, broker, workdir, f"base{n}", 5, total, None)
        many = _measure(args, broker, workdir, f"n{n}", n, total,
                        SeriesSpreader(n, args.pairs))
        extra = many["series"] - base["series"]
        row = {
            "n": n, "events_per_series": args.series_events, "pairs_per_route": args.pairs,
            "baseline": base, "measured": many,
            "bytes_per_series": (many["rss_mb"] - base["rss_mb"]) * MB / extra if extra else None,
            "state_bytes_per_series": ((many["state_bytes"] - base["state_bytes"]) / extra
                                       if extra else None),
        }
        out.append(row)
        say(f"{n:>7,} {many['series']:>7,} {total:>9,} {many['rss_mb']:>8.1f} "
            f"{base['rss_mb']:>8.1f} {many['peak_mb']:>8.1f} "
            f"{_fmt(row['bytes_per_series']):>9} {_fmt(row['state_bytes_per_series']):>14} "
            f"{many['ingest_rate']:>11,.0f} {base['ingest_rate']:>8,.0f}")


def series_checks(rows: list[dict[str, Any]], checks: list[dict[str, str]]) -> None:
    for row in rows:
        m = row["measured"]
        ok = (m["series"] >= row["n"] and m["events_total"] == m["events"]
              and m["exit"] == 0 and row["baseline"]["exit"] == 0)
        checks.append({"check": f"{row['n']:,} series admitted, every event counted, clean exit",
                       "status": "PASS" if ok else "FAIL",
                       "detail": f"{m['series']} series, {m['events_total']} of {m['events']} "
                                 f"events, exit {m['exit']}/{row['baseline']['exit']}"})
    name = ("memory at most linear in series (bytes/series at the largest N <= 1.25 x at the "
            "smallest)")
    # Resident memory moves in whole pages and allocator arenas: at small N the difference from
    # the baseline can be zero or negative, which says nothing about a slope either way.
    per = [r["bytes_per_series"] for r in rows if r["bytes_per_series"] is not None]
    detail = ", ".join(f"{r['n']:,}: {r['bytes_per_series']:,.0f} B"
                       for r in rows if r["bytes_per_series"] is not None)
    if len(per) < 2 or min(per) <= 0:
        checks.append({"check": name, "status": "SKIP",
                       "detail": f"needs two positive measurements above the baseline ({detail})"})
        return
    ok = per[-1] <= (1.0 + LINEAR_TOLERANCE) * per[0]
    checks.append({"check": name, "status": "PASS" if ok else "FAIL", "detail": detail})


# -- main --------------------------------------------------------------------------------------


def _series_list(text: str) -> list[int]:
    try:
        values = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--series takes counts like 1000,10000: {text!r}") from None
    if not values or values[0] < 10:
        raise argparse.ArgumentTypeError("--series counts must be >= 10")
    return values


def parse_args(argv: Iterable[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--minutes", type=float, default=30.0, help="soak length (default 30)")
    p.add_argument("--rate", type=float, default=2000.0, help="events/s (default 2000)")
    p.add_argument("--sample", type=float, default=30.0, help="seconds between samples")
    p.add_argument("--series", type=_series_list, default=[1000, 10000],
                   help="series counts for the memory phase (default 1000,10000)")
    p.add_argument("--series-events", type=int, default=50,
                   help="events per series in the memory phase (default 50)")
    p.add_argument("--pairs", type=int, default=100,
                   help="model pairs (series) per route in the memory phase (default 100)")
    p.add_argument("--db-url", default=None,
                   help="a PostgreSQL server URL: each run gets a new database there, dropped "
                        "afterwards (default: SQLite files in the work directory)")
    p.add_argument("--skip-soak", action="store_true")
    p.add_argument("--skip-series", action="store_true")
    p.add_argument("--seed", type=int, default=6)
    p.add_argument("--out", default=None, help="write every sample and result as JSON here")
    p.add_argument("--dir", default=None, help="work directory (default: a temporary one, "
                   "removed at the end)")
    p.add_argument("--keep", action="store_true",
                   help="keep the work directory and PostgreSQL databases")
    args = p.parse_args(list(argv) if argv is not None else None)
    if args.minutes <= 0 or args.rate <= 0 or args.sample <= 0 or args.series_events < 1:
        p.error("--minutes, --rate, --sample and --series-events must be > 0")
    return args


def run_phases(args: argparse.Namespace, broker: EmbeddedBroker, workdir: Path,
               results: dict[str, Any]) -> None:
    if not args.skip_soak:
        soak: dict[str, Any] = results.setdefault("soak", {})
        try:
            Soak(args, broker, workdir, soak).run()
        finally:
            results["checks"] += soak.get("checks", [])
    if not args.skip_series:
        rows: list[dict[str, Any]] = results.setdefault("series", [])
        series_phase(args, broker, workdir, rows)
        checks: list[dict[str, str]] = []
        series_checks(rows, checks)
        for c in checks:
            say(f"{c['status']}: {c['check']} ({c['detail']})")
        results["checks"] += checks


def main(argv: Iterable[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="specwatch-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "command": " ".join(["bench/soak.py", *(argv if argv is not None else sys.argv[1:])]),
        "python": platform.python_version(), "machine": platform.machine(),
        "cpus": os.cpu_count(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "checks": [],
    }
    say(f"# bench/soak.py  python {results['python']}  {results['machine']}  "
        f"cpus={results['cpus']}  workdir={workdir}")
    STOP.clear()
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        # Ctrl-C and `kill` ask for a stop: every wait checks STOP and the run unwinds,
        # stopping the producer, the daemon and the broker. A second one stops at once.
        def _stop(signum: int, frame: Any) -> None:
            if STOP.is_set():
                raise KeyboardInterrupt
            STOP.set()

        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, _stop)
    code = 0
    try:
        broker = EmbeddedBroker().start()
        try:
            results["broker_pid"] = _broker_pid(broker)
            say(f"broker pid {results['broker_pid']} on {broker.bootstrap_servers}")
            run_phases(args, broker, workdir, results)
        finally:
            broker.stop()
    except (Interrupted, KeyboardInterrupt):
        code = results["interrupted"] = 130
    except Exception as e:
        if STOP.is_set():
            # e.g. a Kafka call failing because the terminal's Ctrl-C also stopped the broker
            code = results["interrupted"] = 130
        else:
            say(f"FAILED: {e}")
            if not isinstance(e, DaemonDied | TimeoutError):
                traceback.print_exc()
            results["error"] = f"{type(e).__name__}: {e}"
            code = 2
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if args.out:
            Path(args.out).write_text(json.dumps(results, indent=1, default=str) + "\n",
                                      encoding="utf-8")
        if not args.keep and not args.dir:
            shutil.rmtree(workdir, ignore_errors=True)
    if code == 130:
        say("interrupted: stopped the producer, the daemon and the broker")
    if code == 0 and any(c["status"] == "FAIL" for c in results["checks"]):
        code = 1
    if args.out:
        say(f"results: {args.out}")
    return code


if __name__ == "__main__":
    rc = main()
    if rc == 130:
        # Interrupted: a Kafka client thread still flushing to a broker that Ctrl-C stopped
        # must neither hold the terminal nor print its timeout at exit (as `specwatch demo`).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    sys.exit(rc)
