"""The ``specwatch`` command: run, replay, ratios, changes, gate, simulate, db, demo,
silence, baseline, alerts, adapt, scrape, report, serve."""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from monitor.durations import parse_duration
from monitor.exceptions import SpecwatchError
from monitor.times import parse_time_arg

if TYPE_CHECKING:
    from monitor.config import Config

log = logging.getLogger("specwatch")


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for noisy in ("kafka", "alembic"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, getattr(logging, level)))


def _config(args: argparse.Namespace) -> Config:
    # Imported here: building the config models costs 0.1 s, which `ratios` without a
    # config file does not pay (see cmd_ratios).
    from monitor.config import load_config

    overrides: dict[str, dict[str, Any]] = {}
    if getattr(args, "db", None):
        overrides["store"] = {"url": args.db}
    if getattr(args, "bootstrap", None):
        overrides["kafka"] = {"bootstrap_servers": args.bootstrap}
    return load_config(getattr(args, "config", None), overrides=overrides)


# -- commands ------------------------------------------------------------------------------


def _listen(value: str) -> tuple[str, int]:
    from monitor.api.cli import listen_arg

    return listen_arg(value)


def cmd_run(args: argparse.Namespace) -> int:
    # heap (ctypes) is imported by the commands that settle the heap, not by every command.
    from monitor import heap
    from monitor.app import Application

    config = _config(args)
    _setup_logging(config.log_level)
    app = Application(config, http=args.http)
    heap.settle()  # after start-up: see monitor/heap.py

    def _stop(signum: int, frame: Any) -> None:
        log.info("signal %d: stopping after a final checkpoint", signum)
        app.stop()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    app.run()
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from prometheus_client import CollectorRegistry

    from alerts.alerting import Alerting
    from alerts.metrics import AlertMetrics
    from alerts.outfile import AlertsFile
    from alerts.sinks import build_sinks
    from monitor import heap
    from monitor.aggregate.guard import CardinalityGuard
    from monitor.deadletter import CountingDeadLetter, FileDeadLetter
    from monitor.detect.engine import Detection
    from monitor.detect.report import recommendation_lines
    from monitor.metrics import IngestMetrics
    from monitor.pipeline import Pipeline
    from monitor.policy.slicer import Slicer
    from monitor.sources.replay import open_input, replay
    from monitor.store.db import create_if_new, redact_url, upgrade
    from monitor.store.store import Store

    config = _config(args)
    _setup_logging(config.log_level)
    # The input first: a wrong path or a closed stdin must not leave a new database behind.
    src = open_input(args.path)
    try:
        if args.migrate:
            upgrade(config.store.url)
        elif create_if_new(config.store.url):  # a database with tables is never touched here
            log.info("created the new database %s", redact_url(config.store.url))
        store = Store(config.store.url)
    except BaseException:
        src.close()
        raise
    # Cut like on the dead-letter topic: a 200 MB line is not copied whole into the file.
    dead_letter = (FileDeadLetter(args.dead_letter,
                                  max_raw_bytes=config.kafka.dead_letter_max_bytes)
                   if args.dead_letter else CountingDeadLetter())
    detection = Detection(config.detection, clock="event") if config.detection.enabled else None
    alerts_out = AlertsFile(args.alerts_out) if args.alerts_out else None
    # A backtest pages no one: without --deliver no sink is even built.
    sinks = build_sinks(config.alerting, os.environ) if args.deliver else {}
    registry = CollectorRegistry()
    alert_metrics = AlertMetrics(registry, sinks)
    # Delivering: reminders count from when a notification really went out (see lifecycle).
    alerting = (Alerting(config.alerting, sinks, alert_metrics, deliver=args.deliver,
                         wall=time.time if args.deliver else None)
                if detection is not None else None)
    guard = CardinalityGuard(store, config.ingest.max_series_per_route,
                             config.ingest.max_series, registry)
    pipeline = Pipeline(
        store, args.source_id, config.ingest, IngestMetrics(registry), dead_letter,
        observer=detection, on_alerts=[alerts_out.write] if alerts_out else None,
        alerting=alerting, guard=guard, gpus_per_replica=config.cost.gpus_per_replica,
        slicer=Slicer(config.policy) if config.policy.enabled else None,
    )
    heap.settle()  # after start-up: see monitor/heap.py
    started = time.monotonic()
    try:
        summary = replay(args.path, pipeline, progress=args.progress, src=src,
                         now=args.now.timestamp() if args.now else None)
        if args.deliver:
            # Imported here: its HTTP client costs a backtest's start-up for nothing.
            from alerts.delivery import DeliveryWorker

            worker = DeliveryWorker(store.alerting, sinks, config.alerting, alert_metrics)
            left = worker.drain(args.deliver_timeout)
            print(f"delivered to {', '.join(sinks) or 'no sink'}; {left} notification(s) "
                  f"still queued", file=sys.stderr)
    finally:
        dead_letter.close()
        store.close()
        if alerts_out is not None:
            alerts_out.close()
    elapsed = time.monotonic() - started
    rate = summary.events / elapsed if elapsed > 0 else 0.0
    print(f"replay {args.path}: {summary.line()} in {elapsed:.1f}s ({rate:,.0f} events/s)",
          file=sys.stderr)
    if detection is not None and args.recommendations:
        recs = detection.recommendations()
        if args.recommendations == "-":
            print("\n".join(recommendation_lines(recs)))
        else:
            Path(args.recommendations).write_text(
                "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs),
                encoding="utf-8")
    return 0


def _ratio_columns(value: str) -> tuple[str, ...]:
    from monitor.store.query import table_columns

    try:
        return table_columns(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _one_blas_thread() -> None:
    """Before numpy is first imported: OpenBLAS starts one thread per core at import, and
    starting them costs a reading command's process CPU for nothing (no command that calls
    this does linear algebra). A value set by the user is kept."""
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def cmd_ratios(args: argparse.Namespace) -> int:
    _one_blas_thread()
    from monitor.config_env import store_url
    from monitor.store.query import NARROW_COLUMNS, fields_for, format_ratios, sketches_for
    from monitor.store.store import Store

    table = args.format == "table"
    if not table and (args.wide or args.columns):
        raise SpecwatchError("--wide and --columns shape the table; json and csv always carry "
                             "every field")
    columns = None if args.wide else args.columns or NARROW_COLUMNS
    if args.config is None:
        # No file: the URL is --db's, the environment's or the default, and no GPU-hour
        # price is set; the config models are not built (0.1 s of this command).
        url, price = store_url(os.environ, args.db), None
    else:
        config = _config(args)
        url, price = config.store.url, config.cost.price_per_gpu_hour
    store = Store(url)
    span = {"granularity": args.granularity, "route": args.route, "since": args.since,
            "until": args.until}
    try:
        shaped = table and columns
        # A table reads only what its columns show (JSON and CSV carry every field).
        rows, latency = store.ratio_table(
            sketches_for(columns) if shaped else (), **span,
            price_per_gpu_hour=price,
            fields=fields_for(columns) if shaped else None)
    finally:
        store.close()
    out = format_ratios(rows, args.format, columns=columns if table else None, latency=latency)
    sys.stdout.write(out if out.endswith("\n") else out + "\n")
    return 0


def cmd_db(args: argparse.Namespace) -> int:
    from monitor.store.db import current_revision, head_revision, redact_url, upgrade

    config = _config(args)
    url = config.store.url
    if args.db_command == "upgrade":
        upgrade(url)
        print(f"{redact_url(url)} is at revision {current_revision(url)}")
    else:
        print(f"{redact_url(url)}: at {current_revision(url) or 'none'}, head {head_revision()}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from monitor.demo import run_demo

    _setup_logging("WARNING")
    # A shell that starts us in the background hands SIGINT down ignored, and Python keeps it
    # ignored: Ctrl+C (or a supervisor's SIGINT) must always stop the demo.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    rc = run_demo(
        data_dir=Path(args.dir), duration=args.duration, rate=args.rate, refresh=args.refresh,
        incident_after=args.incident_after,
    )
    # The demo's embedded daemon, broker and simulator were stopped with bounded waits; a
    # worker thread of theirs still winding down (a Kafka close, a scheduler pool) must not
    # hold the terminal after "stopped" was printed, so the process ends here.
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(rc)


# -- parser ----------------------------------------------------------------------------------


# The commands defined in this module: a command line naming one of them needs no other
# command's parser, and building those imports their packages (numpy for simulate, the
# adapters...): about half a second of `specwatch ratios`'s start-up.
OWN_COMMANDS = frozenset({"run", "replay", "ratios", "db", "demo"})


def build_parser(*, own_only: bool = False) -> argparse.ArgumentParser:
    """The whole command line; with ``own_only``, only :data:`OWN_COMMANDS` (for a command
    line that names one of them: see :func:`main`)."""
    parser = argparse.ArgumentParser(
        prog="specwatch",
        description="Is speculative decoding still paying for itself, per route?",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def with_config(p: argparse.ArgumentParser) -> None:
        p.add_argument("--config", metavar="FILE", help="YAML or TOML configuration file")
        p.add_argument("--db", metavar="URL", help="database URL (overrides the config)")

    p = sub.add_parser("run", help="the daemon: consume telemetry from Kafka")
    with_config(p)
    p.add_argument("--bootstrap", metavar="HOST:PORT", help="Kafka bootstrap servers")
    p.add_argument("--http", type=_listen, metavar="HOST:PORT",
                   help="serve /metrics, the HTTP API (/api/v1, /docs) and /healthz, /readyz "
                   "here; a non-loopback address needs SPECWATCH_API_TOKEN")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("replay", help="run a telemetry file through the pipeline")
    p.add_argument("path", help="JSON lines file (.gz too), or - for stdin")
    with_config(p)
    p.add_argument("--alerts-out", metavar="PATH", help="write alert state changes as JSON lines")
    p.add_argument("--dead-letter", metavar="PATH", help="write rejected input with reasons")
    p.add_argument("--recommendations", metavar="PATH",
                   help="per-segment keep/turn-off recommendations with evidence: JSON lines to "
                   "PATH, or a readable table on stdout for -")
    p.add_argument("--source-id", default="replay",
                   help="name the replay's progress is stored under (default: replay)")
    p.add_argument("--migrate", action="store_true", help="apply migrations to the database first")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar (default: when stderr is a terminal)")
    p.add_argument("--deliver", action="store_true",
                   help="send the replay's notifications through the configured sinks (off by "
                   "default: a backtest pages no one)")
    p.add_argument("--now", type=parse_time_arg, metavar="TIME",
                   help="judge event times as if the clock read TIME (RFC 3339 or a duration "
                   "ago): events more than ingest.max_future_skew later are dead-lettered as "
                   "future (default: the newest plausible time of the file)")
    p.add_argument("--deliver-timeout", type=parse_duration, default=300.0, metavar="DURATION",
                   help="how long --deliver keeps retrying before leaving the rest queued")
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("ratios", help="query the historical ratio tables (acceptance, task "
                       "outcome, GPU-seconds, cost per successful task)")
    with_config(p)
    p.add_argument("--route")
    p.add_argument("--since", type=parse_time_arg, help="RFC 3339 time or a duration ago (30d)")
    p.add_argument("--until", type=parse_time_arg, help="RFC 3339 time or a duration ago")
    p.add_argument("--granularity", choices=["minute", "hour", "day"], default="hour")
    p.add_argument("--format", choices=["table", "json", "csv"], default="table")
    shape = p.add_mutually_exclusive_group()
    shape.add_argument("--wide", action="store_true",
                       help="the table with every field (json and csv always have them all)")
    shape.add_argument("--columns", type=_ratio_columns, metavar="A,B,...",
                       help="the table's columns, e.g. route,pair,k,accept,acc_len,ttft_p99 "
                       "or route,pair,success_rate,tool_calls_valid_rate,cost_per_success "
                       "(default: bucket,route,pair,k,requests,accept,ttft_p50,ttft_p99)")
    p.set_defaults(func=cmd_ratios)

    p = sub.add_parser("db", help="database schema")
    p.add_argument("db_command", choices=["upgrade", "current"])
    with_config(p)
    p.set_defaults(func=cmd_db)

    p = sub.add_parser("demo", help="broker + SQLite + daemon + simulator, live per-route table")
    p.add_argument("--dir", default="demo-data", help="where the demo database goes")
    p.add_argument("--duration", type=parse_duration, default=None,
                   help="stop after this long (default: until Ctrl+C)")
    p.add_argument("--rate", type=float, default=200.0, help="simulated requests per second")
    p.add_argument("--refresh", type=parse_duration, default=2.0, help="table refresh interval")
    p.add_argument("--incident-after", type=parse_duration, default=60.0, metavar="DURATION",
                   help="when the scripted draft-drift incident starts (default: 60s)")
    p.set_defaults(func=cmd_demo)
    if not own_only:
        _register_others(sub, with_config)
    return parser


def _register_others(sub: Any, with_config: Callable[[argparse.ArgumentParser], None]) -> None:
    from monitor.adapters.cli import register as register_adapt
    from monitor.api.cli import register as register_api
    from monitor.cli_alerting import register as register_alerting
    from monitor.cli_changes import register as register_changes
    from monitor.cli_gate import register as register_gate
    from monitor.cli_policy import register as register_policy
    from monitor.proxy.cli import register as register_proxy
    from monitor.report.cli import register as register_report
    from monitor.scrape.cli import register as register_scrape
    from monitor.simulate.cli import register

    register(sub)
    register_changes(sub, with_config, _config)
    register_gate(sub, with_config, _config)
    register_policy(sub, with_config, _config)
    register_alerting(sub, with_config, _config)
    register_adapt(sub, with_config, _config)
    register_scrape(sub, with_config, _config)
    register_report(sub, with_config, _config)
    register_api(sub, with_config, _config)
    register_proxy(sub, with_config, _config)


def run() -> int:
    """``specwatch`` as a process (the console script, ``python -m monitor``): :func:`main`,
    then an exit that leaves the collector out.

    The interpreter's shutdown runs full collections over every object still alive
    (SQLAlchemy's, numpy's, the config models'): about 0.1 s of `specwatch ratios`'s 1 s.
    Frozen, they are not traversed; everything else at exit still happens (atexit
    handlers, buffers flushed, modules cleared, threads joined). Only objects in reference
    cycles stay unfreed, and the process is ending."""
    code = main()
    gc.freeze()
    return code


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(own_only=bool(argv) and argv[0] in OWN_COMMANDS).parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except SpecwatchError as e:
        print(f"specwatch: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return 130
