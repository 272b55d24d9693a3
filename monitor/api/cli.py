"""``specwatch serve [--http HOST:PORT]``: the HTTP API without the daemon.

For a read replica, or a box that only answers questions: everything comes from the
database (routes from the detector state the daemons committed). ``/metrics`` shows this
process's own registry (the API's request metrics, and the change gauges judged from the
database), not a daemon's.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from monitor.api.exceptions import ApiConfigError
from monitor.config import Config

log = logging.getLogger("specwatch")

# Loopback unless told otherwise: exposing the API is a decision spelled out on the command line.
DEFAULT_LISTEN = "127.0.0.1:8080"


def listen_arg(value: str) -> tuple[str, int]:
    from monitor.api.server import parse_listen

    try:
        return parse_listen(value)
    except ApiConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def cmd_serve(args: argparse.Namespace, config: Config, *, stop: threading.Event | None = None,
              started: Callable[[str], None] | None = None) -> int:
    """Serve until SIGTERM/SIGINT, or until ``stop`` is set (``started`` gets the URL once
    listening: both for tests and embedding)."""
    from prometheus_client import CollectorRegistry

    from monitor.api.app import create_app
    from monitor.api.auth import token_from_env
    from monitor.api.routes_health import database_state
    from monitor.api.server import ApiServer, require_token
    from monitor.changes import JudgeSettings
    from monitor.exposition_changes import ChangeCollector
    from monitor.gate import GateSettings
    from monitor.store.store import Store

    host, port = args.http
    token = token_from_env(os.environ)
    require_token(host, token)
    logging.basicConfig(level=getattr(logging, config.log_level),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    logging.getLogger("alembic").setLevel(logging.WARNING)  # /readyz reads the revision
    # Not refused at start: a replica may be migrated later; /readyz says 503 until then.
    store = Store(config.store.url, require_migrated=False)
    state, reason = database_state(store)
    if state != "ok":
        log.warning("%s: %s; /readyz answers 503 until it is", store.url, reason)
    stop = stop or threading.Event()
    judge = JudgeSettings.from_config(config.detection)
    registry = CollectorRegistry()
    # The change gauges are read from the database: a replica serves them as well as a daemon.
    registry.register(ChangeCollector.for_store(store, judge))
    server = ApiServer(create_app(store, registry=registry, token=token, changes=judge,
                                  price_per_gpu_hour=config.cost.price_per_gpu_hour,
                                  gate=GateSettings.from_config(config.gate),
                                  config=config),
                       host, port)
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, lambda signum, frame: stop.set())
    try:
        server.start()
        print(f"specwatch API on {server.url} (docs: {server.url}/docs) reading {store.url}"
              + ("" if token else "; no token"), file=sys.stderr, flush=True)
        if started is not None:
            started(server.url)
        stop.wait()
    finally:
        server.stop()
        store.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def register(sub: Any, with_config: Callable[[argparse.ArgumentParser], None],
             config: Callable[[argparse.Namespace], Config]) -> None:
    """Add ``serve`` to the ``specwatch`` parser."""
    p = sub.add_parser("serve", help="the HTTP API alone (no daemon), e.g. on a read replica")
    p.add_argument("--http", type=listen_arg, default=DEFAULT_LISTEN, metavar="HOST:PORT",
                   help=f"where to listen (default {DEFAULT_LISTEN}; a bare PORT or :PORT is "
                   "on 127.0.0.1 too), e.g. [::1]:8080; any non-loopback address, 0.0.0.0 or "
                   "[::] included, needs SPECWATCH_API_TOKEN")
    with_config(p)
    p.set_defaults(func=lambda args: cmd_serve(args, config(args)))
