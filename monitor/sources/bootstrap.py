"""A bounded check, at start, that a Kafka broker answers at all.

kafka-python's clients wait up to 30 s (``bootstrap_timeout_ms``) for a first broker, logging
a warning per attempt; a daemon started against a wrong address or a broker that is down
should say so in one line within seconds, and let its supervisor retry.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from kafka import KafkaAdminClient
from kafka.errors import KafkaError, KafkaTimeoutError

from monitor.sources.exceptions import BrokerUnavailableError
from monitor.sources.kafka_errors import startup_error

STARTUP_TIMEOUT_S = 3.0  # a broker that answers at all does in milliseconds


@contextmanager
def _kafka_quiet() -> Iterator[None]:
    """kafka-python's per-attempt warnings stay out of the way: the failure is reported
    once, by the caller."""
    logger = logging.getLogger("kafka")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def check_bootstrap(bootstrap_servers: str, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
    """Return once a broker of ``bootstrap_servers`` answered a metadata request; raise
    :class:`BrokerUnavailableError` when none did within ``timeout_s`` (or a
    :class:`~monitor.sources.exceptions.BrokerConfigError` for what retrying cannot fix)."""
    where = f"Kafka at {bootstrap_servers}"
    try:
        with _kafka_quiet():
            admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers,
                                     client_id="specwatch-check",
                                     bootstrap_timeout_ms=int(timeout_s * 1000))
    except KafkaTimeoutError as e:
        raise BrokerUnavailableError(
            f"{where}: no broker answered within {timeout_s:g}s (is it running, and is "
            f"kafka.bootstrap_servers right?)") from e
    except KafkaError as e:
        raise startup_error(e, where) from e
    except (OSError, ValueError) as e:  # an address kafka-python cannot even try
        raise BrokerUnavailableError(f"{where}: {e}") from e
    with _kafka_quiet():
        admin.close()
