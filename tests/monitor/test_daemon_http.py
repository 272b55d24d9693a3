"""The running daemon's HTTP side: a real Prometheus scrapes ``specwatch run --http`` fed by
the simulator through the broker; promtool finds nothing to say about the exposition; the
API answers from the same process; a public address needs a token."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry

from monitor.api.exceptions import ApiConfigError
from monitor.app import Application
from monitor.broker import EmbeddedBroker
from monitor.config import load_config
from monitor.sources.topics import ensure_topics
from monitor.store.db import upgrade
from monitor.store.store import Store
from tests.fixtures.prometheus import scrape_config, start_prometheus
from tests.helpers import produce, read_jsonl, wait_for
from tests.monitor.test_daemon import PARTITIONS, daemon_config, stored_offsets

TOTALS = ("sum by (route) (specwatch_accepted_tokens_total) / "
          "sum by (route) (specwatch_drafted_tokens_total)")


def test_prometheus_scrapes_the_running_daemon(broker: EmbeddedBroker, tmp_path: Path) -> None:
    from monitor.cli import main

    path = tmp_path / "traffic.jsonl"
    assert main(["simulate", "--duration", "1h", "--rate", "5", "--seed", "4",
                 "--out", str(path)]) == 0
    events = list(read_jsonl(path))
    db = f"sqlite:///{tmp_path / 'live.db'}"
    upgrade(db)
    config = load_config(daemon_config(tmp_path, broker, db), env={})
    ensure_topics(broker.bootstrap_servers, [config.kafka.topic], PARTITIONS)
    messages = produce(broker.bootstrap_servers, config.kafka.topic, events, batch=20)
    app = Application(config, registry=CollectorRegistry(), env={}, http=("127.0.0.1", 0))
    runner = threading.Thread(target=app.run)
    runner.start()
    try:
        with Store(db) as store:
            wait_for(lambda: stored_offsets(store, config) == messages, timeout=120,
                     what="the traffic checkpointed")
            exact = {r.route: r for r in store.ratios(granularity="day")}
        assert app.api is not None
        base = app.api.url
        wait_for(lambda: httpx.get(f"{base}/readyz", timeout=5).status_code == 200,
                 timeout=30, what="/readyz")
        exposition = httpx.get(f"{base}/metrics", timeout=5)
        assert exposition.status_code == 200
        lint = subprocess.run(["promtool", "check", "metrics"], input=exposition.content,
                              capture_output=True, timeout=30)
        assert (lint.returncode, lint.stdout, lint.stderr) == (0, b"", b"")
        ratios = httpx.get(f"{base}/api/v1/ratios", params={"granularity": "day"}, timeout=5)
        assert ratios.status_code == 200 and ratios.json()

        target = base.removeprefix("http://")
        with start_prometheus(tmp_path / "prom", [scrape_config("specwatch", [target])]) as prom:
            def per_route() -> dict[str, float]:
                return {r["metric"]["route"]: float(r["value"][1]) for r in prom.query(TOTALS)}

            scraped = wait_for(lambda: len(per_route()) == len(exact) and per_route(),
                               timeout=60, what="every route's acceptance in Prometheus")
            gauges = wait_for(lambda: prom.query("specwatch_acceptance_ratio"), timeout=30,
                              what="the acceptance gauges")
    finally:
        app.stop()
        runner.join(timeout=60)
    assert not runner.is_alive()
    # Summed by route over the day rows: the same tokens the daemon's counters saw.
    drafted: dict[str, int] = {}
    accepted: dict[str, int] = {}
    with Store(db) as store:
        for row in store.ratios(granularity="day"):
            drafted[row.route] = drafted.get(row.route, 0) + row.drafted_tokens
            accepted[row.route] = accepted.get(row.route, 0) + row.accepted_tokens
    assert set(scraped) == set(drafted)
    for route, value in scraped.items():
        assert value == pytest.approx(accepted[route] / drafted[route], rel=1e-9), route
    assert {g["metric"]["route"] for g in gauges} <= set(drafted)


def test_a_public_address_needs_a_token(broker: EmbeddedBroker, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'x.db'}"
    upgrade(db)
    config = load_config(daemon_config(tmp_path, broker, db), env={})
    with pytest.raises(ApiConfigError):
        Application(config, env={}, http=("0.0.0.0", 0))
