"""specwatch's Kafka producers, built in one place: the telemetry publisher
(``monitor/publish.py``), the simulator's writer (``monitor/simulate/writers.py``, which the
engine scraper's Kafka sink also uses) and the daemon's dead-letter topic.

Each use keeps its own settings, tuned for what it must guarantee (the reasons are next to
them): the publisher never holds up the engine, the writer moves bulk traffic, the
dead-letter producer bounds every wait so that a checkpoint fails and is retried. What they
share is built here: the client, the message of a route's batch and its key, and a bounded,
logged close.

>>> route_key("code"), batch_value([b'{"a":1}']), batch_value([b'{"a":1}', b'{"a":2}'])
(b'code', b'{"a":1}', b'[{"a":1},{"a":2}]')
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # engine-side code imports this module: no config, no Kafka client yet
    from kafka import KafkaProducer

    from monitor.config import KafkaConfig

__all__ = [
    "batch_value",
    "close_producer",
    "dead_letter_producer",
    "json_array",
    "make_producer",
    "publisher_settings",
    "route_key",
    "writer_settings",
]


def make_producer(
    bootstrap_servers: str, client_id: str, settings: Mapping[str, Any],
    overrides: Mapping[str, Any] | None = None,
) -> KafkaProducer:
    """A ``KafkaProducer`` with one use's ``settings``, then the caller's ``overrides``.

    kafka-python is imported here, on first use: a process that never produces (writing a
    file, replaying one) does not load the client.
    """
    from kafka import KafkaProducer

    config = {"bootstrap_servers": bootstrap_servers, "client_id": client_id, **settings}
    config.update(overrides or {})
    return KafkaProducer(**config)


def publisher_settings(connect_timeout_s: float, batch_max_bytes: int) -> dict[str, Any]:
    """:class:`monitor.publish.Publisher`: inside an engine, which it must never hold up."""
    return {
        "acks": "all",
        # The daemon drops duplicates by request_id, so a resend is harmless; an
        # idempotent producer instead fails for good (UnknownProducerId) once a broker
        # that lost its state comes back.
        "enable_idempotence": False,
        "linger_ms": 5,  # batching is done by the publisher, per route
        "max_block_ms": 1000,  # a send waiting for metadata holds only the publisher's thread
        "bootstrap_timeout_ms": int(connect_timeout_s * 1000),
        "request_timeout_ms": 10000,
        "delivery_timeout_ms": 30000,  # then the message comes back to the buffer
        "max_request_size": max(1 << 20, 2 * batch_max_bytes),
        "reconnect_backoff_max_ms": 2000,
    }


def writer_settings(linger_ms: int, max_message_bytes: int) -> dict[str, Any]:
    """:class:`monitor.simulate.writers.KafkaWriter`: bulk traffic, batched per route by the
    writer and by the client (1 MiB batches)."""
    return {
        "linger_ms": linger_ms,
        "batch_size": 1 << 20,
        "max_request_size": max(1 << 20, 2 * max_message_bytes),
        "acks": 1,
        # Idempotence needs acks=all; kafka-python would turn it off itself, with a
        # WARNING on every start of the demo and the simulator.
        "enable_idempotence": False,
    }


def dead_letter_producer(kafka: KafkaConfig, **overrides: Any) -> KafkaProducer:
    """The dead-letter topic's producer (``overrides``: shorter timeouts for tests)."""
    from kafka.errors import KafkaError

    from monitor.sources.kafka_errors import startup_error

    settings: dict[str, Any] = {
        "acks": "all",
        "linger_ms": 50,
        "max_request_size": max(1048576, kafka.dead_letter_max_bytes * 4),
        # Bounded waits while the broker is away: a send gives up after max_block_ms, a
        # record after delivery_timeout_ms; the checkpoint then fails and is tried again.
        "max_block_ms": 10_000,
        "request_timeout_ms": 10_000,
        "delivery_timeout_ms": 30_000,
        # kafka-python 3.0's idempotent producer can stay stuck after a batch expired in an
        # outage (it resets its producer id and then never sends again: measured here). The
        # dead-letter topic is at-least-once anyway, so idempotence buys nothing.
        "enable_idempotence": False,
    }
    try:
        return make_producer(kafka.bootstrap_servers, f"{kafka.client_id}-dlq", settings,
                             overrides)
    except KafkaError as e:  # at start, before anything is consumed: stopping loses nothing
        raise startup_error(e, f"Kafka at {kafka.bootstrap_servers}") from e


def route_key(route: str) -> bytes:
    """The message key of a route's events: telemetry v1 asks producers to key by route, so
    that every event of a route lands in one partition, in order."""
    return route.encode("utf-8")


def json_array(items: Sequence[bytes]) -> bytes:
    """Serialised JSON values as one JSON array."""
    return b"[" + b",".join(items) + b"]"


def batch_value(items: Sequence[bytes]) -> bytes:
    """The message of a batch of serialised events: the event itself when there is one,
    else a JSON array (telemetry v1 accepts both)."""
    return items[0] if len(items) == 1 else json_array(items)


def close_producer(producer: KafkaProducer, timeout: float, logger: logging.Logger,
                   what: str) -> None:
    """Close ``producer``, waiting at most ``timeout`` seconds for what it still holds; a
    failure is a WARNING on the user's ``logger`` naming ``what``, never raised."""
    try:
        producer.close(timeout=timeout)
    except Exception as e:  # noqa: BLE001 - closing must not take the caller down
        logger.warning("%s: closing the Kafka producer failed: %r", what, e)
