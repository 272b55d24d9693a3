"""``specwatch demo``: everything on embedded defaults, with a live per-route table.

It starts the bundled Kafka-protocol broker, a fresh SQLite store, the daemon and the
traffic simulator in one process, then redraws acceptance per route (last five minutes and
since start) beside TTFT and decode throughput, read back from the store the daemon writes.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TextIO

from monitor.aggregate.bucket import BucketStats
from monitor.aggregate.series import SeriesKey
from monitor.app import Application
from monitor.broker import EmbeddedBroker
from monitor.config import (
    AlertingConfig,
    Config,
    IngestConfig,
    KafkaConfig,
    SinkFilter,
    StoreConfig,
)
from monitor.simulate import KafkaWriter, Simulator, scenario_config
from monitor.store.db import upgrade
from monitor.store.store import Store

WINDOW = timedelta(minutes=5)


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def render(recent: Mapping[SeriesKey, BucketStats], total: Mapping[SeriesKey, BucketStats],
           now: datetime) -> str:
    """The table: one line per series (route x model pair x draft length)."""
    header = (
        f"{'route':<18} {'draft -> target':<44} {'k':>2} {'req/5m':>7} {'acc 5m':>7} "
        f"{'acc all':>7} {'no-draft':>8} {'ttft p50':>9} {'ttft p99':>9} {'tok/s p50':>9}"
    )
    lines = [f"specwatch demo  {now:%H:%M:%S} UTC  (acceptance = accepted / drafted tokens)",
             header, "-" * len(header)]
    for key in sorted(total, key=lambda k: (k.route, k.target_model, k.draft_model)):
        r = recent.get(key) or BucketStats()
        t = total[key]
        pair = f"{key.draft_model or key.method or 'none'} -> {key.target_model}"
        no_draft = (
            (r.spec_requests - r.drafting_requests) / r.spec_requests if r.spec_requests else None
        )
        lines.append(
            f"{key.route[:18]:<18} {pair[:44]:<44} {key.num_speculative_tokens:>2} "
            f"{r.requests:>7} {_fmt(r.acceptance_rate, '.3f'):>7} "
            f"{_fmt(t.acceptance_rate, '.3f'):>7} {_fmt(no_draft, '.1%'):>8} "
            f"{_fmt(r.ttft_ms.quantile(0.5), '.0f'):>7}ms "
            f"{_fmt(r.ttft_ms.quantile(0.99), '.0f'):>7}ms "
            f"{_fmt(r.decode_tps.quantile(0.5), '.1f'):>9}"
        )
    return "\n".join(lines)


def run_demo(
    *,
    data_dir: Path,
    duration: float | None = None,
    rate: float = 200.0,
    refresh: float = 2.0,
    out: TextIO = sys.stdout,
) -> int:
    data_dir.mkdir(parents=True, exist_ok=True)
    # The broker keeps nothing across runs, so neither may the store: stored offsets
    # would point past the end of a fresh topic.
    for leftover in data_dir.glob("specwatch.db*"):
        leftover.unlink()
    url = f"sqlite:///{data_dir / 'specwatch.db'}"
    upgrade(url)
    stop = threading.Event()
    with EmbeddedBroker() as broker:
        config = Config(
            kafka=KafkaConfig(bootstrap_servers=broker.bootstrap_servers,
                              session_timeout_ms=6000, max_poll_interval_ms=10000),
            store=StoreConfig(url=url),
            ingest=IngestConfig(checkpoint_interval=1.0),
            # Alert lines would scroll the live table away; `specwatch alerts` shows them.
            alerting=AlertingConfig(routing={"log": SinkFilter(enabled=False)}),
        )
        app = Application(config, env={})
        daemon = threading.Thread(target=app.run, name="daemon", daemon=True)
        simulator = threading.Thread(
            target=_simulate, args=(broker.bootstrap_servers, config.kafka.topic, rate, stop),
            name="simulator", daemon=True,
        )
        daemon.start()
        simulator.start()
        print(f"broker {broker.bootstrap_servers}, store {url}; Ctrl+C to stop", file=out,
              flush=True)
        started = time.monotonic()
        tty = out.isatty()
        try:
            with Store(url) as store:
                while duration is None or time.monotonic() - started < duration:
                    if stop.wait(refresh):
                        break
                    now = datetime.now(UTC)
                    total = store.stats(granularity="minute")
                    if not total:
                        continue
                    recent = store.stats(granularity="minute", since=now - WINDOW)
                    table = render(recent, total, now)
                    if tty:
                        out.write("\x1b[H\x1b[2J")
                    out.write(table + "\n\n")
                    out.flush()
        except KeyboardInterrupt:
            pass
        finally:
            stop.set()
            app.stop()
            simulator.join(timeout=10)
            daemon.join(timeout=30)
    print(f"stopped; the tables stay in {data_dir / 'specwatch.db'}:\n"
          f"  specwatch ratios --db {url} --granularity minute\n"
          f"  specwatch alerts --all --db {url}", file=out)
    return 0


def _simulate(bootstrap: str, topic: str, rate: float, stop: threading.Event) -> None:
    config = scenario_config("default", duration_s=None, rate=rate, seed=int(time.time()))
    with KafkaWriter(bootstrap, topic, batch_size=50, max_delay_s=0.5) as writer:
        for event in Simulator(config).realtime(stop=stop):
            writer.write(event)


__all__ = ["render", "run_demo"]
