"""Ingest throughput: specwatch's whole pipeline against a bare kafka-python loop.

One run, one broker (the bundled Tansu on loopback), one process:

1. single-event messages: a bare ``poll()`` + ``json.loads`` loop vs specwatch (parse,
   validate, dedup, event time, aggregate, checkpoint rollups + offsets into SQLite);
2. batched messages (JSON arrays of --batch events): the same two;
3. ``specwatch replay`` on a JSON-lines file of the same events, against a bare loop that
   reads the file's lines and ``json.loads`` each.

Each specwatch run settles the garbage collector after start-up, as the commands do
(``monitor/heap.py``). The last lines check issue 18's targets (detection on: single-event
messages 0.8x the bare loop, batched 0.5x, replay 0.5x).

Timings run from the first record received to the last record processed (for specwatch,
to the final checkpoint committed), so broker start, topic creation and group joins are
excluded. CPU seconds are this process's own (``time.process_time``).

    PYTHONPATH=. python bench/ingest.py                 # defaults below
    PYTHONPATH=. python bench/ingest.py --batched 500000 --single 80000 --db postgresql://...
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from prometheus_client import CollectorRegistry

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monitor import heap  # noqa: E402
from monitor.app import Application  # noqa: E402
from monitor.broker import EmbeddedBroker  # noqa: E402
from monitor.config import (  # noqa: E402
    Config,
    DetectionConfig,
    IngestConfig,
    KafkaConfig,
    StoreConfig,
)
from monitor.deadletter import CountingDeadLetter  # noqa: E402
from monitor.detect.engine import Detection  # noqa: E402
from monitor.metrics import IngestMetrics  # noqa: E402
from monitor.pipeline import Pipeline  # noqa: E402
from monitor.simulate import KafkaWriter, Simulator, scenario_config, write_file  # noqa: E402
from monitor.sources.replay import replay  # noqa: E402
from monitor.store.db import upgrade  # noqa: E402
from monitor.store.store import Store  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replay_cli import json_loop  # noqa: E402

PARTITIONS = 4


def events(n: int, seed: int) -> list[dict[str, Any]]:
    # Quiet traffic at a high rate; twice the time needed, since the daily cycle and
    # bursts move the mean, then cut to exactly n events.
    cfg = scenario_config("quiet", duration_s=2 * n / 200.0, rate=200.0, seed=seed)
    out: list[dict[str, Any]] = []
    for event in Simulator(cfg).events():
        out.append(event)
        if len(out) == n:
            break
    return out


def produce(bootstrap: str, topic: str, evs: list[dict[str, Any]], batch: int) -> int:
    with KafkaWriter(bootstrap, topic, batch_size=batch, partitions=PARTITIONS,
                     max_delay_s=None) as writer:
        writer.write_all(evs)
        writer.flush()
        return writer.messages


def bare_loop(bootstrap: str, topic: str, messages: int) -> dict[str, float]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest", fetch_max_bytes=52428800,
                             max_partition_fetch_bytes=52428800, max_poll_records=5000)
    consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    seen = n_events = 0
    t0 = c0 = 0.0
    while seen < messages:
        batch = consumer.poll(timeout_ms=500)
        if batch and not t0:
            t0, c0 = time.perf_counter(), time.process_time()
        for records in batch.values():
            for r in records:
                doc = json.loads(r.value)
                n_events += len(doc) if isinstance(doc, list) else 1
            seen += len(records)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    consumer.close()
    return {"events": n_events, "wall": wall, "cpu": cpu, "rate": n_events / wall}


def specwatch_loop(
    bootstrap: str, topic: str, messages: int, db_url: str, detection: bool
) -> dict[str, float]:
    upgrade(db_url)
    name = uuid.uuid4().hex[:8]
    config = Config(
        kafka=KafkaConfig(bootstrap_servers=bootstrap, topic=topic, group_id=f"bench-{name}",
                          dead_letter_topic=f"dlq-{name}", partitions=PARTITIONS,
                          session_timeout_ms=6000, max_poll_interval_ms=30000),
        store=StoreConfig(url=db_url),
        ingest=IngestConfig(allowed_lateness=3600, dedup_horizon=3600),
        detection=DetectionConfig(enabled=detection),
    )
    app = Application(config, registry=CollectorRegistry())
    heap.settle()  # as `specwatch run` does after start-up
    pipeline, source = app.pipeline, app.source
    t0 = c0 = 0.0
    while pipeline.summary.messages < messages:
        source.poll_once(timeout_ms=500)
        if pipeline.summary.messages and not t0:
            t0, c0 = time.perf_counter(), time.process_time()
    source.checkpoint()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    n = pipeline.summary.events
    app.close()
    return {"events": n, "wall": wall, "cpu": cpu, "rate": n / wall}


def replay_file(path: Path, db_url: str, detection: bool) -> dict[str, float]:
    upgrade(db_url)
    store = Store(db_url)
    pipeline = Pipeline(store, "bench", IngestConfig(allowed_lateness=3600, dedup_horizon=3600),
                        IngestMetrics(CollectorRegistry()), CountingDeadLetter(),
                        observer=Detection(DetectionConfig()) if detection else None)
    heap.settle()  # as `specwatch replay` does after start-up
    t0, c0 = time.perf_counter(), time.process_time()
    summary = replay(str(path), pipeline, progress=False)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    store.close()
    return {"events": summary.events, "wall": wall, "cpu": cpu, "rate": summary.events / wall}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--single", type=int, default=60_000, help="events sent one per message")
    parser.add_argument("--batched", type=int, default=300_000, help="events sent in batches")
    parser.add_argument("--batch", type=int, default=100, help="events per batched message")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--db", default=None, help="database URL (default: a fresh SQLite file)")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="specwatch-bench-"))

    def db(name: str) -> str:
        return args.db or f"sqlite:///{tmp / name}.db"

    print(f"# bench/ingest.py  python {platform.python_version()}  {platform.machine()}  "
          f"cpus={os.cpu_count()}  seed={args.seed}  batch={args.batch}")
    evs = events(max(args.single, args.batched), args.seed)
    single, batched = evs[: args.single], evs[: args.batched]
    rows = []
    with EmbeddedBroker() as broker:
        for label, data, batch in (("single-event messages", single, 1),
                                   (f"batched messages ({args.batch}/message)", batched,
                                    args.batch)):
            topic = f"bench-{uuid.uuid4().hex[:8]}"
            messages = produce(broker.bootstrap_servers, topic, data, batch)
            bare = bare_loop(broker.bootstrap_servers, topic, messages)
            for detection in (False, True):
                spec = specwatch_loop(broker.bootstrap_servers, topic, messages,
                                      db(f"kafka-{batch}-{detection}"), detection)
                rows.append((label, "on" if detection else "off", messages, bare, spec))
    path = tmp / "events.jsonl"
    write_file(batched, path)
    floor = json_loop(path)
    replays = [(d, replay_file(path, db(f"replay-{d}"), d)) for d in (False, True)]

    print(f"{'input':<34} {'detection':>9} {'messages':>9} {'events':>9} {'bare ev/s':>10} "
          f"{'specwatch ev/s':>15} {'ratio':>6} {'cpu s':>6}")
    for label, det, messages, bare, spec in rows:
        print(f"{label:<34} {det:>9} {messages:>9} {spec['events']:>9} {bare['rate']:>10,.0f} "
              f"{spec['rate']:>15,.0f} {spec['rate'] / bare['rate']:>6.2f} {spec['cpu']:>6.1f}")
    for det, rep in replays:
        print(f"{'replay (JSON lines file)':<34} {'on' if det else 'off':>9} {'':>9} "
              f"{rep['events']:>9} {floor['rate']:>10,.0f} {rep['rate']:>15,.0f} "
              f"{rep['rate'] / floor['rate']:>6.2f} {rep['cpu']:>6.1f}")
    print("(replay's bare column: a json.loads loop over the same file)")
    # Issue 18's targets, detection on.
    on = [r[4]["rate"] / r[3]["rate"] for r in rows if r[1] == "on"]  # single, batched
    replay_on = replays[1][1]["rate"] / floor["rate"]
    for label, got, want in (("single-event messages", on[0], 0.8),
                             ("batched messages", on[1], 0.5),
                             ("replay", replay_on, 0.5)):
        print(f"detection on, {label} >= {want:.1f}x bare: "
              f"{'PASS' if got >= want else 'FAIL'} ({got:.2f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
