"""Topic administration shared by the daemon, the simulator and the tests."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError

log = logging.getLogger(__name__)


def ensure_topics(bootstrap_servers: str, topics: Iterable[str], partitions: int = 4) -> None:
    """Create the topics that do not exist yet (existing ones are left as they are)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers, client_id="specwatch-admin")
    try:
        existing = set(admin.list_topics())
        missing = [t for t in topics if t not in existing]
        if not missing:
            return
        try:
            admin.create_topics(
                [NewTopic(t, num_partitions=partitions, replication_factor=1) for t in missing]
            )
            log.info("created topics %s with %d partitions", missing, partitions)
        except TopicAlreadyExistsError:
            pass  # another process created it between list and create
    finally:
        admin.close()
