"""Topic administration shared by the daemon, the simulator and the tests."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

from monitor.sources.exceptions import BrokerConfigError
from monitor.sources.kafka_errors import startup_error

log = logging.getLogger(__name__)


def ensure_topics(bootstrap_servers: str, topics: Iterable[str], partitions: int = 4, *,
                  create: bool = True) -> None:
    """Create the topics that do not exist yet (existing ones are left as they are).

    With ``create`` off a missing topic is an error. Any failure raises one line: a
    :class:`BrokerConfigError` for what retrying cannot fix (no authorization, a missing
    topic it may not create), else a :class:`BrokerUnavailableError`.
    """
    topics = list(topics)
    where = f"Kafka at {bootstrap_servers}"
    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers,
                                 client_id="specwatch-admin")
    except KafkaError as e:
        raise startup_error(e, where) from e
    try:
        existing = set(admin.list_topics())
        missing = [t for t in topics if t not in existing]
        if not missing:
            return
        if not create:
            raise BrokerConfigError(
                f"{where}: topic {', '.join(missing)} does not exist and kafka.create_topics "
                f"is off: create it, or turn kafka.create_topics on")
        try:
            admin.create_topics(
                [NewTopic(t, num_partitions=partitions, replication_factor=1) for t in missing]
            )
            log.info("created topics %s with %d partitions", missing, partitions)
        except TopicAlreadyExistsError:
            pass  # another process created it between list and create
    except KafkaError as e:
        raise startup_error(e, where) from e
    finally:
        admin.close()
