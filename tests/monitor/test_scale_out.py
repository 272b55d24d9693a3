"""Scale-out: three ``specwatch run`` daemons in one consumer group that join, die and come back.

Traffic is keyed by route on a six-partition topic, so each daemon reads (and judges) the
routes of its partitions. Two daemons join the first; one that holds no delivery lease is
killed mid-traffic once incidents on its routes have paged; the two survivors take its
partitions over, restore its routes' detector and alert state from the store and go on.
Then it comes back while incidents are still open: the survivors hand partitions over, and
it goes on from their stored state. Afterwards:

- the minute, hour and day tables equal the produced traffic exactly;
- the alert records equal a single-process replay of the same traffic, record for record
  (every rule here is judged in event time: silence and idle pairs, the two rules judged by
  the wall-clock sweep live but by event time in a replay, are set to 2 days so they never
  flip);
- PagerDuty got exactly one trigger per incident key and at most one resolve, the webhook
  at most one request per notification key; every outbox row was delivered;
- the incidents that were open on the killed daemon's routes stayed one episode each: not
  announced again, and resolved by a survivor.

The victim holds no delivery lease on purpose: delivery is at-least-once, and the row on
the wire when a lease holder dies is sent again by the next holder (see
``alerts/delivery.py``); that takeover is tested in ``tests/alerts/test_delivery.py``. Here
"at most one message per key" must hold strictly.

Both stores run: SQLite (WAL, ``BEGIN IMMEDIATE``: three processes queue on its write lock)
and PostgreSQL.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from monitor.broker import EmbeddedBroker
from monitor.config import Config, load_config
from monitor.sources.kafka import source_id
from monitor.sources.topics import ensure_topics
from monitor.store.db import upgrade
from monitor.store.store import Store
from tests.alerts.receivers import PagerDutyReceiver, WebhookReceiver
from tests.fixtures.process import free_port
from tests.helpers import oracle, produce, read_jsonl, table, wait_for
from tests.monitor.test_daemon import LATENESS, daemon_config

T = TypeVar("T")

PARTITIONS = 6
PD_KEY = "0123456789abcdef0123456789ABCDEF"
SINKS = ("pagerduty", "webhook")  # the receivers; ``log`` is on too, as by default
LEASED = ("log", *SINKS)
HOUR = 3600.0
# With six partitions the five routes land on partitions 0, 1, 2 and 4 (murmur2 of the key),
# so each daemon's pair of partitions carries traffic. Every route has an incident open at
# the end of the first stretch (2 h) that ends in the second: whoever is killed had pages
# out, and a survivor must resolve them.
INCIDENTS = (
    "tokenizer_swap:route=creative-writing,at=1h,for=2h",
    "tokenizer_swap:route=chat,at=70m,for=2h",
    "eviction:route=code-assistant,at=1h,for=2h,share=0.5,slowdown=3",
    "tokenizer_swap:route=translation,at=80m,for=100m",
    "speculation_off:route=summarize,at=3h,for=30m",
)
FIRST = 2 * HOUR  # event time of the first stretch, produced before the kill
KILLED_IN = 2.5 * HOUR  # the second stretch is produced while the victim dies
BACK_IN = 3 * HOUR  # the third is read by the survivors alone; then the victim comes back
SETTINGS = (
    # Silence and idle pairs are judged by the wall clock live (see the module docstring).
    "detection:\n  stale_after: 2d\n  idle_pair_resolve: 2d\n"
    # No reminders: every PagerDuty trigger is then a new page.
    "alerting:\n  lifecycle:\n    repeat_interval: 30d\n"
    "  pagerduty:\n    min_interval: 20ms\n"
    "  delivery:\n    poll_interval: 200ms\n    backoff_initial: 200ms\n    backoff_max: 1s\n"
)


@dataclass
class Traffic:
    path: Path
    events: list[dict[str, Any]]
    replayed: list[dict[str, Any]]  # alert records of a single-process replay

    def between(self, lo: float, hi: float) -> list[dict[str, Any]]:
        """The events from ``lo`` to ``hi`` seconds of event time after the start."""
        start = _ts(self.events[0]["ts"])
        return [e for e in self.events if lo <= _ts(e["ts"]) - start < hi]


def _ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _record_key(a: dict[str, Any]) -> tuple[str, str, str]:
    return (a["at"], a["fingerprint"], a["state"])


@pytest.fixture(scope="module")
def traffic(tmp_path_factory: pytest.TempPathFactory) -> Traffic:
    """Four hours at 2 events/s (about 21,000 events; ending now: live traffic is recent)
    and what one process decides from them."""
    from monitor.cli import main

    tmp = tmp_path_factory.mktemp("scale_out")
    path = tmp / "traffic.jsonl"
    args = ["simulate", "--scenario", "quiet", "--duration", "4h", "--rate", "2", "--seed", "5",
            "--out", str(path)]
    for spec in INCIDENTS:
        args += ["--incident", spec]
    assert main(args) == 0
    cfg = tmp / "replay.yaml"
    cfg.write_text(f"ingest:\n  allowed_lateness: {LATENESS:.0f}s\n"
                   f"  dedup_horizon: {LATENESS:.0f}s\n" + SETTINGS)
    db = f"sqlite:///{tmp / 'replay.db'}"
    assert main(["replay", str(path), "--config", str(cfg), "--db", db, "--migrate",
                 "--no-progress"]) == 0
    with Store(db) as store:
        replayed = sorted((a.to_json() for a in store.alerts()), key=_record_key)
    return Traffic(path, list(read_jsonl(path)), replayed)


@dataclass
class Daemon:
    """One ``specwatch run --http`` subprocess, its log in a file (a pipe nobody reads could
    fill up and stall it)."""

    name: str
    proc: subprocess.Popen[bytes]
    port: int
    log: Path
    killed: bool = False

    @property
    def holder(self) -> str:
        """How its delivery worker names itself in the lease table."""
        return f"{socket.gethostname()}:{self.proc.pid}"

    def ready(self) -> dict[str, Any] | None:
        """``/readyz`` as JSON (``None`` while it does not answer)."""
        try:
            return httpx.get(f"http://127.0.0.1:{self.port}/readyz", timeout=5).json()
        except (httpx.HTTPError, ValueError):
            return None

    def partitions(self) -> set[int] | None:
        """Its partitions once it is ready, else ``None``."""
        status = self.ready()
        if status is None or not status["ready"]:
            return None
        return set(status["partitions"])

    def tail(self) -> str:
        return f"--- {self.name} (pid {self.proc.pid}) ---\n" + "\n".join(
            self.log.read_text(errors="replace").splitlines()[-30:])


def _start(name: str, cfg: Path, env: dict[str, str], tmp_path: Path) -> Daemon:
    port = free_port()
    log = tmp_path / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "monitor", "run", "--config", str(cfg),
             "--http", f"127.0.0.1:{port}"],
            env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
            stdout=subprocess.DEVNULL, stderr=out,
        )
    return Daemon(name, proc, port, log)


@pytest.fixture
def running() -> Iterator[list[Daemon]]:
    """The daemons a test starts; whatever is still running at the end is killed."""
    daemons: list[Daemon] = []
    yield daemons
    for d in daemons:
        if d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait()


def _stored(store: Store, config: Config, partitions: Iterable[int]) -> int:
    """Messages checkpointed (the sum of the stored next offsets) of ``partitions``."""
    states = store.load_partitions(source_id(config.kafka), partitions)
    return sum(s.next_offset or 0 for s in states.values())


def _spread(daemons: list[Daemon]) -> dict[str, set[int]] | None:
    """Each daemon's partitions once every one has some, none twice, all of them covered."""
    owned = {d.name: d.partitions() or set() for d in daemons}
    every = [p for ps in owned.values() for p in ps]
    if not all(owned.values()) or len(every) != len(set(every)):
        return None
    return owned if set(every) == set(range(PARTITIONS)) else None


def test_three_daemons_share_the_routes_and_a_kill_9_and_a_return_lose_nor_repeat_anything(
    broker: EmbeddedBroker, db_url: str, tmp_path: Path, traffic: Traffic,
    running: list[Daemon],
) -> None:
    upgrade(db_url)
    cfg = daemon_config(tmp_path, broker, db_url)
    cfg.write_text(cfg.read_text().replace("  partitions: 4\n", f"  partitions: {PARTITIONS}\n")
                   + SETTINGS)
    config = load_config(cfg, env={})
    assert config.kafka.partitions == PARTITIONS
    ensure_topics(broker.bootstrap_servers, [config.kafka.topic], PARTITIONS)
    source = source_id(config.kafka)
    topic = config.kafka.topic

    def until(condition: Callable[[], T], timeout: float, what: str) -> T:
        """``wait_for``, failing at once (with the logs) if a daemon not killed died."""
        def check() -> T:
            dead = [d for d in running if not d.killed and d.proc.poll() is not None]
            assert not dead, "\n".join(d.tail() for d in dead)
            return condition()
        try:
            return wait_for(check, timeout=timeout, what=what)
        except AssertionError as e:
            raise AssertionError(f"{e}\n" + "\n".join(d.tail() for d in running)) from None

    with PagerDutyReceiver() as pd, WebhookReceiver() as hook, Store(db_url) as store:
        env = {"SPECWATCH_PAGERDUTY_ROUTING_KEY": PD_KEY, "SPECWATCH_PAGERDUTY_URL": pd.url,
               "SPECWATCH_WEBHOOK_URL": hook.url}

        def holders() -> set[str | None]:
            return {(store.alerting.lease(s) or (None, None))[0] for s in LEASED}

        def settled() -> bool:
            """Every notification decided so far delivered: each announced episode paged
            (and its resolve out once it ended), nothing left in the outbox."""
            if store.alerting.outbox(state="pending"):
                return False
            told = [e for e in store.alerting.episodes() if e["notified"]]
            opened = {i.dedup_key for i in pd.incidents}
            closed = {i.dedup_key for i in pd.incidents if i.resolved}
            return all(f"specwatch/{e['episode']}" in opened for e in told) and all(
                f"specwatch/{e['episode']}" in closed for e in told if e["state"] == "resolved")

        # 1. One daemon first, so that it takes both delivery leases; then two more join.
        first = _start("a", cfg, env, tmp_path)
        running.append(first)
        until(lambda: holders() == {first.holder}, 60, "the first daemon's delivery leases")
        running += [_start(n, cfg, env, tmp_path) for n in ("b", "c")]
        spread = until(lambda: _spread(running), 120, "six partitions spread over three")
        assert all(spread.values())

        # 2. The first stretch: incidents start on every route and page.
        messages = produce(broker.bootstrap_servers, topic, traffic.between(0, FIRST), batch=3)
        until(lambda: _stored(store, config, range(PARTITIONS)) == messages, 120,
              f"the first {messages} messages checkpointed")
        until(settled, 60, "the first stretch's pages delivered")
        route_partition = {s["name"]: s["partition"]
                           for s in store.load_state(source, "detect/route/").values()}
        open_told = [e for e in store.alerting.episodes(states=["firing"]) if e["notified"]]

        # 3. The victim: no lease, and pages out for incidents on its routes.
        def pages_of(d: Daemon) -> list[dict[str, Any]]:
            return [e for e in open_told if route_partition[e["route"]] in spread[d.name]]

        holding = holders()
        victim = next((d for d in running if d.holder not in holding and pages_of(d)), None)
        assert victim is not None, (spread, holding, route_partition, open_told)
        moved = {e["episode"]: e for e in pages_of(victim)}
        paged_before = {i.dedup_key: len(i.events) for i in pd.incidents}
        assert all(f"specwatch/{ep}" in paged_before for ep in moved)
        survivors = [d for d in running if d is not victim]

        # 4. kill -9 while it reads the second stretch; the rest comes after.
        victim_parts = spread[victim.name]
        read = _stored(store, config, victim_parts)
        messages += produce(broker.bootstrap_servers, topic,
                            traffic.between(FIRST, KILLED_IN), batch=1)
        until(lambda: _stored(store, config, victim_parts) > read, 60,
              "the victim reading the second stretch")
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait()
        victim.killed = True
        taken = until(lambda: _spread(survivors), 120, "the survivors taking all partitions")
        assert victim_parts <= set().union(*taken.values())
        messages += produce(broker.bootstrap_servers, topic,
                            traffic.between(KILLED_IN, BACK_IN), batch=3)
        until(lambda: _stored(store, config, range(PARTITIONS)) == messages, 180,
              f"the {messages} messages up to the return checkpointed")

        # 5. It comes back: the survivors hand partitions over while incidents are open,
        # and the newcomer goes on from their stored state.
        back = _start(f"{victim.name}-back", cfg, env, tmp_path)
        running.append(back)
        members = [*survivors, back]
        again = until(lambda: _spread(members), 120, "six partitions spread over three again")
        back_parts = again[back.name]
        read_before = _stored(store, config, back_parts)
        messages += produce(broker.bootstrap_servers, topic,
                            traffic.between(BACK_IN, 10 * HOUR), batch=3)
        until(lambda: _stored(store, config, range(PARTITIONS)) == messages, 180,
              f"all {messages} messages checkpointed")
        until(settled, 120, "every decided notification delivered")
        # Range assignment gives each member a pair of partitions, and every pair carries a
        # route: the returned daemon judged traffic of its own.
        assert _stored(store, config, back_parts) > read_before, (again, route_partition)
        assert _spread(members) == again, "no rebalance after the return"

        rows = store.alerting.outbox()
        episodes = store.alerting.episodes()
        live = sorted((a.to_json() for a in store.alerts()), key=_record_key)
        tables = {g: table(store.ratios(granularity=g)) for g in ("minute", "hour", "day")}
        for d in members:
            d.proc.send_signal(signal.SIGTERM)
        for d in members:
            assert d.proc.wait(timeout=60) == 0, d.tail()

    # Exact tables: nothing lost with the victim, nothing counted twice by the survivors.
    for granularity, got in tables.items():
        assert got == oracle(traffic.events, lateness=LATENESS, granularity=granularity), (
            granularity)

    # The same alert records as one process deciding everything: the survivors went on from
    # the victim's stored detector state (from scratch, its open incidents would fire anew).
    assert {a["rule"] for a in live} >= {"tokenizer_mismatch", "memory_contention",
                                         "speculation_inactive", "below_breakeven"}
    assert live == traffic.replayed

    # Delivery: every row out; strictly once per key at each receiver.
    assert rows and {r.state for r in rows} == {"delivered"}
    assert {r.sink for r in rows} == set(LEASED)
    assert pd.violations == [] and hook.violations == []
    assert pd.dropped == [] and pd.change_events == []
    told = {e["episode"]: e for e in episodes if e["notified"]}
    by_key: dict[str, Any] = {}
    for inc in pd.incidents:
        assert inc.dedup_key not in by_key, f"a second incident for {inc.dedup_key}"
        by_key[inc.dedup_key] = inc
        actions = [ev["event_action"] for ev in inc.events]
        assert actions[0] == "trigger" and inc.triggers == 1, (inc.dedup_key, actions)
        assert actions.count("resolve") == int(inc.resolved) <= 1, (inc.dedup_key, actions)
    assert set(by_key) == {f"specwatch/{ep}" for ep in told}
    for ep, e in told.items():
        assert by_key[f"specwatch/{ep}"].resolved == (e["state"] == "resolved"), e
    keys = Counter(key for key, *_ in hook.deliveries)
    assert keys and max(keys.values()) == 1, [k for k, n in keys.items() if n > 1]
    kinds = Counter((episode, kind) for _, kind, episode, _ in hook.deliveries)
    assert {ep for ep, kind in kinds if kind == "trigger"} == set(told)
    assert max(kinds.values()) == 1

    # The victim's open incidents: one episode each, paged once before the kill, resolved
    # by a survivor after it, and no other episode of the same alert meanwhile.
    assert any(e["state"] == "resolved" for e in (told[ep] for ep in moved))
    for ep, before in moved.items():
        after = told[ep]
        inc = by_key[f"specwatch/{ep}"]
        assert paged_before[inc.dedup_key] == 1
        if after["state"] == "resolved":
            assert len(inc.events) == 2 and inc.resolved
        overlapping = [e["episode"] for e in episodes
                       if e["fingerprint"] == before["fingerprint"] and e["episode"] != ep
                       and e["started_at"] >= before["started_at"]
                       and (after["resolved_at"] is None
                            or e["started_at"] <= after["resolved_at"])]
        assert overlapping == [], (before, overlapping)
