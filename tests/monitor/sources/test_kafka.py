"""The Kafka source against the bundled broker: when it counts as caught up."""

from __future__ import annotations

import uuid
from pathlib import Path

from prometheus_client import CollectorRegistry

from monitor.broker import EmbeddedBroker
from monitor.config import IngestConfig, KafkaConfig
from monitor.deadletter import CountingDeadLetter
from monitor.metrics import IngestMetrics
from monitor.pipeline import Pipeline
from monitor.sources.kafka import IDLE_POLLS, KafkaSource, source_id
from monitor.sources.topics import ensure_topics
from monitor.store.db import upgrade
from monitor.store.store import Store
from tests.helpers import produce, wait_for
from tests.monitor.telemetry.bad_inputs import valid_event


def test_caught_up_only_once_the_backlog_is_read(broker: EmbeddedBroker,
                                                 tmp_path: Path) -> None:
    """Silence is judged only when caught up: a daemon reading an hour of backlog must not
    call every route silent because the newest event it has read so far is old."""
    name = uuid.uuid4().hex[:8]
    config = KafkaConfig(bootstrap_servers=broker.bootstrap_servers, topic=f"t-{name}",
                         group_id=f"g-{name}", partitions=2, session_timeout_ms=6000,
                         max_poll_records=25)
    ensure_topics(config.bootstrap_servers, [config.topic], config.partitions)
    events = [dict(valid_event(), request_id=f"r{i}", route=f"route-{i % 3}")
              for i in range(300)]
    messages = produce(config.bootstrap_servers, config.topic, events)
    db = f"sqlite:///{tmp_path / 's.db'}"
    upgrade(db)
    with Store(db) as store:
        pipeline = Pipeline(store, source_id(config), IngestConfig(),
                            IngestMetrics(CollectorRegistry()), CountingDeadLetter())
        source = KafkaSource(config, pipeline)
        try:
            assert not source.caught_up()  # nothing fetched: nothing known
            read = 0
            seen_behind = False
            while read < messages:
                read += source.poll_once(timeout_ms=500)
                if 0 < read < messages:
                    seen_behind = seen_behind or not source.caught_up()
            assert seen_behind
            wait_for(source.caught_up, timeout=30, what="caught up after the backlog")
            for _ in range(IDLE_POLLS):
                assert source.poll_once(timeout_ms=50) == 0
            assert source.caught_up()
        finally:
            source.close()


def test_a_source_with_nothing_left_to_read_checkpoints_inside_a_pause(
        broker: EmbeddedBroker, tmp_path: Path) -> None:
    """A slow checkpoint pauses the next (``ingest.checkpoint_pause_factor``), but the tail
    of a backlog is not left waiting for it: the first empty poll stores what was read."""
    name = uuid.uuid4().hex[:8]
    config = KafkaConfig(bootstrap_servers=broker.bootstrap_servers, topic=f"t-{name}",
                         group_id=f"g-{name}", partitions=1, session_timeout_ms=6000,
                         max_poll_records=50)
    ensure_topics(config.bootstrap_servers, [config.topic], config.partitions)
    events = [dict(valid_event(), request_id=f"r{i}") for i in range(120)]
    messages = produce(config.bootstrap_servers, config.topic, events)
    db = f"sqlite:///{tmp_path / 's.db'}"
    upgrade(db)
    # Never due by age or count, and inside a pause: only being idle stores anything.
    ingest = IngestConfig(checkpoint_interval=3600.0, checkpoint_max_events=10**6)
    with Store(db) as store:
        pipeline = Pipeline(store, source_id(config), ingest,
                            IngestMetrics(CollectorRegistry()), CountingDeadLetter())
        source = KafkaSource(config, pipeline)

        def stored() -> int:
            return store.load_partitions(pipeline.source, [0])[0].next_offset or 0

        try:
            read = 0
            while read < messages:
                read += source.poll_once(timeout_ms=500)
            pipeline._pause_until = float("inf")  # as after a slow checkpoint
            assert pipeline.pending and not pipeline.due()
            assert source.poll_once(timeout_ms=50) == 0
            assert stored() == messages and not pipeline.pending
        finally:
            source.close()
