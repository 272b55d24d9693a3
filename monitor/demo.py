"""``specwatch demo``: everything on embedded defaults, a live per-route table, and an incident.

It starts the bundled Kafka-protocol broker, a fresh SQLite store, the daemon and the
traffic simulator in one process, then redraws, read back from what the daemon writes:

- acceptance per route and model pair beside TTFT and decode throughput (the store);
- a scripted draft-drift incident (``incident_after`` in): one route's target moves to a new
  revision while its draft stays, and acceptance falls below break-even;
- the alerts it raises (rule, route, summary; the store's alert history) and the sinks each
  would go to, with the notifications the log sink has sent;
- per route segment, the decision to keep speculation on or turn it off, with its evidence
  (the detectors' recommendations, copied on the pipeline thread after each checkpoint).

Ctrl+C stops the simulator, then the daemon (final checkpoint, leaving the group), then the
broker, which runs in its own process group so the terminal's Ctrl+C does not stop it first.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

from alerts.sinks import ENV as SINK_ENV
from monitor.aggregate.bucket import BucketStats
from monitor.aggregate.series import SeriesKey
from monitor.alert_record import AlertRecord
from monitor.app import Application
from monitor.broker import EmbeddedBroker
from monitor.config import AlertingConfig, Config, IngestConfig, KafkaConfig, StoreConfig
from monitor.detect.engine import Detection
from monitor.simulate import Incident, KafkaWriter, Simulator, scenario_config
from monitor.store.checkpoint import Checkpoint
from monitor.store.db import upgrade
from monitor.store.query import short_pair
from monitor.store.store import Store

WINDOW = timedelta(minutes=5)
# Draft drift on the route that sits just above break-even: x0.85 takes it from 0.42 to
# about 0.36, under the default cutoff of 0.40.
INCIDENT_ROUTE = "creative-writing"
INCIDENT_FACTOR = 0.85
SHOWN_ALERTS = 6
SHOWN_SENT = 3
# The variables that enable a sink besides the log, Slack's first.
SINK_VARIABLES = tuple(SINK_ENV.values())


def _fmt(value: float | None, spec: str, unit: str = "") -> str:
    return "-" if value is None else format(value, spec) + unit


def render(recent: Mapping[SeriesKey, BucketStats], total: Mapping[SeriesKey, BucketStats],
           now: datetime) -> str:
    """The table: one line per series (route x model pair x target revision x draft length)."""
    header = (
        f"{'route':<16} {'pair (target/draft)':<42} {'target rev':<10} {'k':>1} "
        f"{'req/5m':>6} {'acc 5m':>6} {'no-draft':>8} {'ttft p50':>8} {'ttft p99':>8} "
        f"{'tok/s':>6}"
    )
    lines = [f"specwatch demo  {now:%H:%M:%S} UTC  (acceptance = accepted / drafted tokens)",
             header, "-" * len(header)]
    for key in sorted(total, key=lambda k: (k.route, k.target_model, k.target_revision,
                                            k.draft_model)):
        r = recent.get(key) or BucketStats()
        pair = short_pair(key.target_model, key.draft_model, key.method,
                          key.num_speculative_tokens)
        no_draft = (
            (r.spec_requests - r.drafting_requests) / r.spec_requests if r.spec_requests else None
        )
        lines.append(
            f"{key.route[:16]:<16} {pair:<42} {key.target_revision[:10]:<10} "
            f"{key.num_speculative_tokens:>1} {r.requests:>6} "
            f"{_fmt(r.acceptance_rate, '.3f'):>6} {_fmt(no_draft, '.1%'):>8} "
            f"{_fmt(r.ttft_ms.quantile(0.5), '.0f', 'ms'):>8} "
            f"{_fmt(r.ttft_ms.quantile(0.99), '.0f', 'ms'):>8} "
            f"{_fmt(r.decode_tps.quantile(0.5), '.1f'):>6}"
        )
    return "\n".join(lines)


def incident_line(incident: Incident, at: datetime, now: datetime) -> str:
    """What is scripted, and when."""
    what = (f"{incident.route}'s target model moves to a new revision, its draft stays "
            f"(draft drift: acceptance x{incident.param('factor'):g})")
    if now < at:
        return f"incident at {at:%H:%M:%S} UTC (in {(at - now).total_seconds():.0f}s): {what}"
    return f"incident since {at:%H:%M:%S} UTC: {what}"


def sinks_for(alert: AlertRecord, alerting: AlertingConfig,
              sinks: Iterable[str]) -> list[str]:
    """The sinks whose routing admits ``alert`` (alerting.routing, route_overrides)."""
    route = alert.labels.get("route", "")
    return [s for s in sinks if alerting.filter_for(s, route).admits(alert.rule, alert.severity)]


def alert_lines(alerts: Sequence[AlertRecord], alerting: AlertingConfig,
                sinks: Sequence[str], sent: Sequence[str]) -> list[str]:
    """The latest alert state changes, where each goes, and what the log sink sent."""
    lines = [f"alerts ({len(alerts)} since the start; `specwatch alerts --all` lists them)"]
    if not alerts:
        lines.append("  none yet")
    for a in alerts[-SHOWN_ALERTS:]:
        to = sinks_for(a, alerting, sinks)
        where = ", ".join(to) or "no sink (routing admits none)"
        if to == ["log"]:
            where = f"log only: set {SINK_VARIABLES[0]} to send it"
        route = a.labels.get("route", "")
        lines.append(f"  {a.at:%H:%M:%S} {a.state.upper()} {a.severity} {a.rule} {route} "
                     f"-> {where}")
        # The detectors' summaries start with the route, shown just above.
        lines.append(f"           {a.summary.removeprefix(f'{route}: ')}")
    if alerts and list(sinks) == ["log"]:
        lines.append(f"  (other sinks: {', '.join(SINK_VARIABLES[1:])})")
    if sent:
        lines.append("sent by the log sink (after the lifecycle's group wait):")
        lines.extend(f"  {line}" for line in sent[-SHOWN_SENT:])
    return lines


_DECISION = {"on": "ON", "off": "OFF", "insufficient_data": "WAIT"}


def decision_lines(recommendations: Sequence[Mapping[str, Any]]) -> list[str]:
    """Per segment: speculation on or off, and the numbers behind it."""
    lines = ["decisions: speculation per route segment (off when acceptance is confidently "
             "below break-even)"]
    if not recommendations:
        lines.append("  none yet (the daemon joins its consumer group first)")
    for r in recommendations:
        lab, ev = r["labels"], r["evidence"]
        decision = _DECISION.get(r["recommendation"], r["recommendation"])
        head = (f"  {lab['route'][:16]:<16} target {lab['target_revision'][:10]:<10} "
                f"k={lab['num_speculative_tokens']}  {decision:<4}")
        rate, cut = ev.get("rate"), ev.get("cutoff")
        if rate is None or not ev.get("sufficient"):
            lines.append(f"{head}  {ev.get('requests', 0)} requests so far: not enough to decide")
            continue
        verdict = "below" if r["recommendation"] == "off" else "vs"
        line = (f"{head}  acceptance {rate:.3f} (95% {_fmt(ev.get('low'), '.3f')}-"
                f"{_fmt(ev.get('high'), '.3f')}, {ev.get('requests', 0):,} requests) {verdict} "
                f"break-even {_fmt(cut, '.2f')}")
        knee = r.get("recommended_num_speculative_tokens")
        if knee:
            line += f"; best k={knee}"
        lines.append(line)
    return lines


class _Decisions:
    """The detectors' recommendations: copied on the pipeline thread, which owns the
    detectors, after each checkpoint; the screen reads the list that was assigned whole."""

    def __init__(self, detection: Detection | None) -> None:
        self._detection = detection
        self.latest: list[dict[str, Any]] = []

    def __call__(self, _cp: Checkpoint) -> None:
        if self._detection is not None:
            self.latest = self._detection.recommendations()


class _Captured(logging.Handler):
    """Keeps the log sink's lines for the screen instead of scrolling it away on stderr."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: deque[str] = deque(maxlen=SHOWN_SENT)

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def run_demo(
    *,
    data_dir: Path,
    duration: float | None = None,
    rate: float = 200.0,
    refresh: float = 2.0,
    incident_after: float = 60.0,
    out: TextIO = sys.stdout,
    env: Mapping[str, str] | None = None,
) -> int:
    data_dir.mkdir(parents=True, exist_ok=True)
    # The broker keeps nothing across runs, so neither may the store: stored offsets
    # would point past the end of a fresh topic.
    for leftover in data_dir.glob("specwatch.db*"):
        leftover.unlink()
    url = f"sqlite:///{data_dir / 'specwatch.db'}"
    upgrade(url)
    if threading.current_thread() is threading.main_thread():
        # A closed terminal or a supervisor stops the demo as Ctrl+C does: the broker runs
        # in its own process group, hears none of them, and is stopped last.
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, _interrupt)
    stop = threading.Event()
    sent = _Captured()
    sink_log = logging.getLogger("specwatch.alerts")  # the log sink's logger
    sink_log.addHandler(sent)
    sink_log.setLevel(logging.INFO)
    sink_log.propagate = False
    started_at = datetime.now(UTC).replace(microsecond=0)
    incident = Incident("revision_change", INCIDENT_ROUTE, at_s=incident_after,
                        factor=INCIDENT_FACTOR)
    with EmbeddedBroker() as broker:
        config = Config(
            kafka=KafkaConfig(bootstrap_servers=broker.bootstrap_servers,
                              session_timeout_ms=6000, max_poll_interval_ms=10000),
            store=StoreConfig(url=url),
            ingest=IngestConfig(checkpoint_interval=1.0),
        )
        # Sinks from the environment, as for `specwatch run`: set a Slack webhook and the
        # demo's alert goes there too.
        app = Application(config, env=dict(os.environ if env is None else env))
        decisions = _Decisions(app.detection)
        app.pipeline.on_commit.append(decisions)
        daemon = threading.Thread(target=app.run, name="daemon", daemon=True)
        simulator = threading.Thread(
            target=_simulate,
            args=(broker.bootstrap_servers, config.kafka.topic, rate, incident, stop),
            name="simulator", daemon=True,
        )
        try:
            daemon.start()
            simulator.start()
            incident_at = datetime.now(UTC) + timedelta(seconds=incident_after)
            _say(out, f"broker {broker.bootstrap_servers}, store {url}; Ctrl+C to stop")
            started = time.monotonic()
            with Store(url) as store:
                while duration is None or time.monotonic() - started < duration:
                    if stop.wait(refresh):
                        break
                    now = datetime.now(UTC)
                    total = store.stats(granularity="minute")
                    if not total:
                        continue
                    recent = store.stats(granularity="minute", since=now - WINDOW)
                    shown = _draw(out, [
                        *render(recent, total, now).splitlines(), "",
                        incident_line(incident, incident_at, now), "",
                        *alert_lines(store.alerts(since=started_at), config.alerting,
                                     sorted(app.sinks), list(sent.lines)), "",
                        *decision_lines(decisions.latest),
                    ])
                    if not shown:
                        break
        except KeyboardInterrupt:
            pass
        finally:
            _quiet_stop(out)
            # Producers first, then the consumer, then (leaving the with) the broker they use.
            stop.set()
            if simulator.is_alive():
                simulator.join(timeout=10)
            app.stop()
            if daemon.is_alive():
                daemon.join(timeout=30)
            sink_log.removeHandler(sent)
            sink_log.propagate = True
    _say(out, f"stopped; the tables stay in {data_dir / 'specwatch.db'}:\n"
              f"  specwatch ratios --db {url} --granularity minute\n"
              f"  specwatch alerts --all --db {url}")
    return 0


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _say(out: TextIO, text: str) -> None:
    try:
        print(text, file=out, flush=True)
    except OSError:  # the terminal is gone (closed window, broken pipe): stop all the same
        pass


def _draw(out: TextIO, screen: list[str]) -> bool:
    """Show ``screen``; False when there is nothing left to show it on."""
    try:
        if out.isatty():
            # A redraw, each line cut to the window: nothing wraps or scrolls.
            width = os.get_terminal_size(out.fileno()).columns
            screen = [_clip(line, width) for line in screen]
            out.write("\x1b[H\x1b[2J")
        out.write("\n".join(screen) + "\n\n")
        out.flush()
    except OSError:  # the terminal was closed, or the pipe reader left
        return False
    return True


def _clip(line: str, width: int) -> str:
    return line if len(line) <= width else line[: max(width - 1, 0)] + "…"


def _quiet_stop(out: TextIO) -> None:
    """A second Ctrl+C must not cut the orderly stop short with a traceback."""
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
    _say(out, "\nstopping: simulator, daemon (final checkpoint), then the broker ...")


def _simulate(bootstrap: str, topic: str, rate: float, incident: Incident,
              stop: threading.Event) -> None:
    config = scenario_config("default", duration_s=None, rate=rate, seed=int(time.time()),
                             incidents=(incident,))
    with KafkaWriter(bootstrap, topic, batch_size=50, max_delay_s=0.5) as writer:
        for event in Simulator(config).realtime(stop=stop):
            writer.write(event)


__all__ = ["alert_lines", "decision_lines", "incident_line", "render", "run_demo", "sinks_for"]
