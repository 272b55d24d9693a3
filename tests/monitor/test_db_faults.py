"""The daemon through PostgreSQL outages: a fault proxy between it and the shared server.

Live traffic flows while the proxy refuses and cuts connections, stalls them (longer than the
daemon's timeouts), and finally answers no COMMIT although the server ran it (the ambiguous
commit). During each outage the daemon keeps serving /metrics and the API, reports the store
down and ingestion paused, and its stored offsets do not move; after each, with no manual
action, it catches up, and in the end the tables equal the traffic exactly.

PostgreSQL only (the outage is a network one: SQLite has none). The shared server is never
touched: only this test's connections go through the proxy, to a database of its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from monitor.broker import EmbeddedBroker
from monitor.config import Config, load_config
from monitor.sources.topics import ensure_topics
from monitor.store.checkpoint import Checkpoint, PartitionCommit
from monitor.store.db import is_unavailable, make_engine, upgrade
from monitor.store.exceptions import StoreUnavailableError
from monitor.store.store import Store
from tests.fixtures.daemon import Daemon
from tests.fixtures.db import _pg_database
from tests.fixtures.faultproxy import COMMIT, FaultProxy
from tests.fixtures.process import free_port
from tests.helpers import assert_exact, produce, simulated, wait_for
from tests.monitor.test_daemon import LATENESS, PARTITIONS, daemon_config, stored_offsets

IO_TIMEOUT_S = 2.0  # the daemon's deadline for one PostgreSQL round trip
CONNECT_TIMEOUT_S = 2


@pytest.fixture(params=[pytest.param("postgres", marks=pytest.mark.postgres)])
def pg_url() -> Iterator[str]:
    """A fresh, migrated PostgreSQL database (dropped afterwards)."""
    for url in _pg_database():
        upgrade(url)
        yield url


@pytest.fixture(scope="module")
def traffic(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return simulated(tmp_path_factory.mktemp("dbfaults"), duration="1h", seed=61)


def through(url: str, proxy: FaultProxy) -> str:
    u = make_url(url)
    return u.set(host=proxy.host, port=proxy.port,
                 query={**u.query, "connect_timeout": str(CONNECT_TIMEOUT_S)}
                 ).render_as_string(hide_password=False)


def outage(daemon: Daemon, store: Store, config: Config, committed: int) -> None:
    """What must hold while the store is unreachable, ``committed`` offsets stored."""
    wait_for(lambda: daemon.metric("specwatch_store_up") == 0, timeout=60,
             what="specwatch_store_up 0")
    assert daemon.metric("specwatch_ingest_paused") == 1
    code, body = daemon.ready()
    assert code == 503 and body["store"] == "down" and body["ingest_paused"] is True, body
    assert daemon.app.source.consumer.paused() == daemon.app.source.consumer.assignment()
    # Backpressure: the daemon goes on probing, and reads nothing meanwhile.
    read = daemon.metric("specwatch_messages_total")
    errors = daemon.metric("specwatch_store_errors_total")
    wait_for(lambda: daemon.metric("specwatch_store_errors_total") >= errors + 2, timeout=60,
             what="two more failed probes")
    assert daemon.metric("specwatch_messages_total") == read
    assert daemon.metric("specwatch_store_up") == 0
    assert stored_offsets(store, config) == committed
    # A read of the API needs the store: an honest 503, never a hang or a 500.
    r = httpx.get(f"{daemon.base}/api/v1/ratios", params={"granularity": "day"}, timeout=30)
    assert r.status_code == 503, r.text
    assert httpx.get(f"{daemon.base}/healthz", timeout=10).status_code == 200


def recovered(daemon: Daemon, store: Store, config: Config, messages: int) -> None:
    wait_for(lambda: stored_offsets(store, config) == messages, timeout=120,
             what=f"all {messages} messages checkpointed after the outage")
    wait_for(lambda: daemon.ready()[0] == 200, timeout=30, what="/readyz 200 again")
    assert daemon.metric("specwatch_store_up") == 1
    assert daemon.metric("specwatch_ingest_paused") == 0


def test_store_outages_pause_ingestion_and_lose_nothing(
    broker: EmbeddedBroker, pg_url: str, tmp_path: Path, traffic: list[dict[str, Any]]
) -> None:
    config = load_config(daemon_config(tmp_path, broker, pg_url), env={})
    ensure_topics(broker.bootstrap_servers, [config.kafka.topic], PARTITIONS)
    u = make_url(pg_url)
    n = len(traffic) // 4 + 1
    chunks = [traffic[i * n:(i + 1) * n] for i in range(4)]
    send: Callable[[list[dict[str, Any]]], int] = lambda evs: produce(  # noqa: E731
        broker.bootstrap_servers, config.kafka.topic, evs, batch=3)
    with FaultProxy((u.host or "127.0.0.1", u.port or 5432)) as proxy, \
            Store(pg_url) as store, \
            Daemon(config, Store(through(pg_url, proxy), io_timeout=IO_TIMEOUT_S)) as daemon:
        messages = send(chunks[0])
        recovered(daemon, store, config, messages)

        # 1. The server goes away: open connections reset, new ones refused.
        proxy.refuse()
        proxy.cut()
        committed, messages = messages, messages + send(chunks[1])
        outage(daemon, store, config, committed)
        proxy.heal()
        recovered(daemon, store, config, messages)

        # 2. The network stalls: nothing answers, nothing closes (longer than the timeouts).
        proxy.stall()
        committed, messages = messages, messages + send(chunks[2])
        outage(daemon, store, config, committed)
        proxy.heal()
        recovered(daemon, store, config, messages)

        # 3. Every COMMIT reaches the server and runs, but its answer never comes back: each
        # checkpoint fails for the daemon, lands in the store, and is found on the reload.
        errors = daemon.metric("specwatch_store_errors_total")
        proxy.stall_after(COMMIT)
        committed, messages = messages, messages + send(chunks[3])
        wait_for(lambda: daemon.metric("specwatch_store_errors_total") > errors, timeout=60,
                 what="a COMMIT without an answer")
        wait_for(lambda: stored_offsets(store, config) > committed, timeout=60,
                 what="that commit in the store although the daemon saw it fail")
        proxy.heal()
        recovered(daemon, store, config, messages)

        assert daemon.metric("specwatch_store_errors_total") >= 5
        assert proxy.resets > 0 and proxy.refused > 0
    with Store(pg_url) as store:
        assert_exact(store, traffic, lateness=LATENESS)


# -- the store on its own ------------------------------------------------------------------------


def test_a_stalled_server_is_an_error_within_the_deadline(pg_url: str) -> None:
    u = make_url(pg_url)
    with FaultProxy((u.host or "127.0.0.1", u.port or 5432)) as proxy, \
            Store(through(pg_url, proxy), io_timeout=1.0) as store:
        store.ping()
        proxy.stall()
        started = time.monotonic()
        with pytest.raises(StoreUnavailableError, match="ping"):
            store.ping()  # the pooled connection times out, then connecting does
        # io_timeout plus connect_timeout, with room for a loaded machine: not forever.
        assert time.monotonic() - started < 1.0 + CONNECT_TIMEOUT_S + 5
        proxy.heal()
        store.ping()  # the pool replaced its dead connection by itself


def test_an_unanswered_commit_raises_unavailable_and_may_have_landed(pg_url: str) -> None:
    """The ambiguous commit: the client cannot know, so the caller must reload."""
    u = make_url(pg_url)
    cp = Checkpoint("t", partitions=[PartitionCommit(0, 42, None, None)])
    with FaultProxy((u.host or "127.0.0.1", u.port or 5432)) as proxy, \
            Store(through(pg_url, proxy), io_timeout=1.0) as store, Store(pg_url) as direct:
        proxy.stall_after(COMMIT)
        with pytest.raises(StoreUnavailableError, match="checkpoint") as caught:
            store.commit(cp)
        assert "no answer" in str(caught.value)
        assert direct.load_partitions("t", [0])[0].next_offset == 42  # it did land
        proxy.heal()
        store.ping()


def test_refused_connections_are_unavailable_and_bad_sql_is_not(db_url: str,
                                                                 tmp_path: Path) -> None:
    """Only connection-class failures are worth waiting for; a bug must still propagate."""
    upgrade(db_url)
    engine = make_engine(db_url)
    try:
        with pytest.raises(DBAPIError) as bad_sql, engine.connect() as conn:
            conn.exec_driver_sql("SELECT * FROM no_such_table")
        assert not is_unavailable(bad_sql.value)
    finally:
        engine.dispose()
    if db_url.startswith("sqlite"):
        gone = f"sqlite:///{tmp_path / 'no-such-dir' / 'x.db'}"
    else:
        gone = make_url(db_url).set(host="127.0.0.1", port=free_port()).render_as_string(
            hide_password=False)  # nothing listens there
    engine = make_engine(gone)
    try:
        with pytest.raises(DBAPIError) as refused, engine.connect():
            pass
        assert is_unavailable(refused.value)
    finally:
        engine.dispose()
