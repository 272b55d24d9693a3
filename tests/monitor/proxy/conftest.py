"""The fake engine (one per module), a proxy in front of it, and reading events back from
the test broker."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry

from monitor.proxy.app import ProxyApp
from monitor.proxy.config import ProxyConfig
from monitor.proxy.server import ProxyServer
from monitor.publish import Publisher
from tests.helpers import read_topic
from tests.monitor.proxy.fake_engine import FakeEngine, serve

TARGET = {"model": "qwen2.5-coder-1.5b", "revision": "sha256:cc32", "tokenizer": "qwen2"}
DRAFT = {"model": "qwen2.5-coder-0.5b", "revision": "sha256:1d96", "tokenizer": "qwen2"}
SPEC = {"method": "draft_model", "num_speculative_tokens": 3,
        "params": {"spec_type": "draft-simple", "spec_draft_n_max": 3}}


@dataclass
class Engine:
    app: FakeEngine
    url: str


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    app = FakeEngine()
    server = serve(app)
    try:
        yield Engine(app, server.url)
    finally:
        server.stop()


def proxy_config(upstream: str, **overrides: Any) -> ProxyConfig:
    data: dict[str, Any] = {
        "upstream": upstream,
        "instance": "pod-1",
        "request_id_prefix": "pod-1/",
        "routes": {"header": "X-Route", "default": "chat"},
        "models": {"*": {"target": TARGET, "draft": DRAFT, "spec": SPEC}},
    }
    data.update(overrides)
    return ProxyConfig.model_validate(data)


@dataclass
class Proxy:
    url: str
    app: ProxyApp
    registry: CollectorRegistry
    publisher: Publisher
    topic: str

    def metric(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, labels) or 0.0


@contextmanager
def running_proxy(config: ProxyConfig, bootstrap: str, *, close_timeout: float = 5.0,
                  **publisher_args: Any) -> Iterator[Proxy]:
    """A proxy with its own publisher (to ``bootstrap``, a fresh topic) and registry."""
    topic = f"proxy-{uuid.uuid4().hex[:10]}"
    registry = CollectorRegistry()
    publisher = Publisher(bootstrap, topic, registry=registry, linger_s=0.01, **publisher_args)
    app = ProxyApp(config, publisher, registry=registry)
    server = ProxyServer(app, "127.0.0.1", 0)
    server.start()
    try:
        yield Proxy(server.url, app, registry, publisher, topic)
    finally:
        server.stop()
        publisher.close(timeout=close_timeout)


@dataclass
class Record:
    key: bytes
    partition: int
    events: list[dict[str, Any]]


def read_records(bootstrap: str, topic: str, expected: int, timeout: float = 30.0
                 ) -> list[Record]:
    """Records of ``topic`` until they hold ``expected`` events, and any beyond them."""
    records = []
    for r in read_topic(bootstrap, topic, expected, timeout, extra_poll=True):
        value = orjson.loads(r.value)
        records.append(Record(r.key, r.partition, value if isinstance(value, list) else [value]))
    return records


def read_events(bootstrap: str, topic: str, expected: int, timeout: float = 30.0
                ) -> list[dict[str, Any]]:
    return [e for r in read_records(bootstrap, topic, expected, timeout) for e in r.events]
