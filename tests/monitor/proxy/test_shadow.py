"""The proxy's v1.1 fields (temperature, itl_ms, prompt and output hashes) and its shadow
requests to a non-speculative upstream, end to end over loopback: two fake engines, the
proxy served by uvicorn, events captured from a list publisher (no broker needed)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import pytest
from prometheus_client import CollectorRegistry

from monitor.alert_record import AlertRecord
from monitor.config import DetectionConfig
from monitor.detect.engine import Detection
from monitor.proxy.app import ProxyApp
from monitor.proxy.hashes import output_hash, prompt_hash
from monitor.proxy.server import ProxyServer
from monitor.telemetry.parse import Parser
from tests.helpers import wait_for
from tests.monitor.proxy.conftest import TARGET, Engine, proxy_config
from tests.monitor.proxy.fake_engine import FakeEngine, serve

CHAT = "/v1/chat/completions"
GREEDY = {"model": "m", "temperature": 0, "max_tokens": 20,
          "messages": [{"role": "user", "content": "write f"}]}


class ListPublisher:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def publish(self, event: Mapping[str, Any]) -> bool:
        with self._lock:
            self.events.append(dict(event))
        return True


class ShadowEngine(FakeEngine):
    """The same fake model without speculation (llama.cpp timings without ``draft_n``);
    ``x-shadow-gate`` holds its stream like ``x-gate`` does the primary's; ``answer`` replaces
    its output text (a broken speculative path differs from it)."""

    def __init__(self) -> None:
        super().__init__()
        self.answer: str | None = None
        self.speculating = False

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = [(k, v) for k, v in scope["headers"] if k not in (b"x-gate", b"x-fake")]
            headers += [(b"x-gate", v) for k, v in scope["headers"] if k == b"x-shadow-gate"]
            if not self.speculating:
                headers.append((b"x-fake", b"llamacpp-nodraft"))
            scope = {**scope, "headers": headers}
        await super().__call__(scope, receive, send)

    def _body(self, path: str, fake: str, seed: str) -> dict[str, Any]:
        body = super()._body(path, fake, seed)
        if self.answer is not None:
            body["choices"][0]["message"]["content"] = self.answer
        return body


@dataclass
class Setup:
    url: str
    app: ProxyApp
    events: ListPublisher
    shadow_engine: ShadowEngine
    registry: CollectorRegistry

    def metric(self, outcome: str) -> float:
        return self.registry.get_sample_value("specwatch_proxy_shadow_requests_total",
                                              {"outcome": outcome}) or 0.0

    def wait_events(self, n: int) -> list[dict[str, Any]]:
        wait_for(lambda: len(self.events.events) >= n, timeout=20, what=f"{n} events")
        return list(self.events.events)


@pytest.fixture(scope="module")
def shadow_engine() -> Iterator[tuple[ShadowEngine, str]]:
    app = ShadowEngine()
    server = serve(app)
    try:
        yield app, server.url
    finally:
        server.stop()


@pytest.fixture
def setup(engine: Engine, shadow_engine: tuple[ShadowEngine, str],
          request: pytest.FixtureRequest) -> Iterator[Setup]:
    app_engine, url = shadow_engine
    app_engine.answer, app_engine.speculating = None, False
    overrides = getattr(request, "param", {})
    config = proxy_config(engine.url, **{"shadow_upstream": url, "shadow_rate": 1.0, **overrides})
    events = ListPublisher()
    registry = CollectorRegistry()
    app = ProxyApp(config, events, registry=registry)
    server = ProxyServer(app, "127.0.0.1", 0)
    server.start()
    try:
        yield Setup(server.url, app, events, app_engine, registry)
    finally:
        server.stop()


def post(url: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    return httpx.post(url, content=json.dumps(body).encode(), timeout=30,
                      headers={"content-type": "application/json", **headers})


def detect(events: list[dict[str, Any]]) -> tuple[list[AlertRecord], int]:
    """The events through the parser and the Detection facade, in event-time order: the
    ``output_mismatch`` records it decides, and the matched pairs it saw."""
    parsed, rejected = Parser().parse(orjson.dumps(events))
    assert rejected == [], [r.reason for r in rejected]
    detection = Detection(DetectionConfig())
    detection.observe(0, sorted(parsed, key=lambda e: e.ts))
    pairs = sum(p["matched_pairs"] for m in detection.view().lossless.values()
                for p in m.evidence()["pairs"])
    return [r for r in detection.drain() if r.rule == "output_mismatch"], pairs


def sides(events: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    shadow = [e for e in events if e.get("tags") == {"shadow": "true"}]
    primary = [e for e in events if "tags" not in e]
    assert len(shadow) == 1 and len(primary) == 1, events
    return primary[0], shadow[0]


def test_a_greedy_request_is_shadowed_and_both_sides_carry_the_hashes(setup: Setup) -> None:
    r = post(setup.url + CHAT, {**GREEDY, "seed": "g1"})
    assert r.status_code == 200
    primary, shadow = sides(setup.wait_events(2))
    want_prompt = prompt_hash(CHAT, {**GREEDY, "seed": "g1"})
    assert primary["prompt_hash"] == shadow["prompt_hash"] == want_prompt
    assert primary["output_hash"] == shadow["output_hash"] == output_hash("def f(): pass")
    assert primary["temperature"] == shadow["temperature"] == 0.0
    # the speculative side as always; the shadow one a request without speculation
    assert primary["spec"]["drafted_tokens"] == 12 and "draft" in primary
    assert "spec" not in shadow and "draft" not in shadow
    assert shadow["target"] == primary["target"] == TARGET
    assert shadow["route"] == primary["route"] == "chat"
    assert shadow["request_id"].startswith("pod-1/shadow/")
    assert shadow["request_id"] != primary["request_id"]
    parsed, rejected = Parser().parse(orjson.dumps([primary, shadow]))
    assert rejected == [] and len(parsed) == 2
    assert setup.metric("published") == 1 and setup.metric("failed") == 0
    assert detect([primary, shadow]) == ([], 1)  # a matched pair, equal: no output_mismatch
    # the shadow upstream got the caller's request unchanged
    assert json.loads(setup.shadow_engine.requests[-1]["body"]) == {**GREEDY, "seed": "g1"}


def test_a_stream_has_inter_token_gaps_and_hashes_like_the_full_answer(setup: Setup) -> None:
    body = {**GREEDY, "seed": "s1", "stream": True}
    with httpx.Client(timeout=30) as client, client.stream(
            "POST", setup.url + CHAT, content=json.dumps(body).encode()) as r:
        raw = b"".join(r.iter_raw())
    assert b"[DONE]" in raw
    primary, shadow = sides(setup.wait_events(2))
    for e in (primary, shadow):
        itl = e["itl_ms"]
        assert set(itl) == {"p50", "p99", "max"}
        assert 0 <= itl["p50"] <= itl["p99"] <= itl["max"]
        # the same text as the non-streamed answer: "stream" is no part of the prompt hash
        assert e["output_hash"] == output_hash("def f(): pass")
        assert e["prompt_hash"] == prompt_hash(CHAT, {**GREEDY, "seed": "s1"})


def shadowed_bodies(setup: Setup, since: int) -> list[dict[str, Any]]:
    return [json.loads(r["body"]) for r in setup.shadow_engine.requests[since:]]


@pytest.mark.parametrize("body", [
    {**GREEDY, "temperature": 0.7},
    {k: v for k, v in GREEDY.items() if k != "temperature"},  # engine default: not greedy
])
def test_only_greedy_requests_are_shadowed(setup: Setup, body: dict[str, Any]) -> None:
    before = len(setup.shadow_engine.requests)
    assert post(setup.url + CHAT, body).status_code == 200
    assert post(setup.url + CHAT, {**GREEDY, "seed": "after"}).status_code == 200
    wait_for(lambda: setup.metric("published") == 1, timeout=10, what="one shadow")
    # requests are handled in order: the first would have been shadowed before the second
    assert shadowed_bodies(setup, before) == [{**GREEDY, "seed": "after"}]
    first = setup.events.events[0]
    assert first.get("temperature") == body.get("temperature")
    assert first["prompt_hash"] == prompt_hash(CHAT, body)


@pytest.mark.parametrize("setup", [{"shadow_rate": 0.0}], indirect=True)
def test_rate_zero_shadows_nothing(setup: Setup) -> None:
    before = len(setup.shadow_engine.requests)
    for seed in "abcd":
        assert post(setup.url + CHAT, {**GREEDY, "seed": seed}).status_code == 200
    setup.wait_events(4)
    assert setup.app.shadow is not None and setup.app.shadow.in_flight == 0
    assert shadowed_bodies(setup, before) == [] and setup.metric("published") == 0


def test_a_different_answer_gets_a_different_output_hash(setup: Setup) -> None:
    setup.shadow_engine.answer = "def f(): return 1"
    assert post(setup.url + CHAT, {**GREEDY, "seed": "d"}).json()["choices"][0]["message"][
        "content"] == "def f(): pass"  # the caller gets the speculative answer
    primary, shadow = sides(setup.wait_events(2))
    assert primary["prompt_hash"] == shadow["prompt_hash"]
    assert primary["output_hash"] != shadow["output_hash"]
    assert shadow["output_hash"] == output_hash("def f(): return 1")
    (alert,), pairs = detect([primary, shadow])
    assert pairs == 1
    assert (alert.state, alert.severity, alert.labels["route"]) == ("firing", "critical", "chat")


@pytest.mark.parametrize("setup", [{"shadow_max_in_flight": 1}], indirect=True)
def test_a_full_shadow_pool_drops_and_the_caller_never_waits(setup: Setup) -> None:
    body = {**GREEDY, "seed": "held", "stream": True}
    # the shadow of the first request hangs until the gate opens; the caller has its answer
    with httpx.Client(timeout=30) as client:
        with client.stream("POST", setup.url + CHAT, content=json.dumps(body).encode(),
                           headers={"x-shadow-gate": "held"}) as r:
            assert b"[DONE]" in b"".join(r.iter_raw())
        wait_for(lambda: setup.app.shadow is not None and setup.app.shadow.in_flight == 1,
                 timeout=10, what="the held shadow request")
        r2 = client.post(setup.url + CHAT, content=json.dumps({**GREEDY, "seed": "2"}))
        assert r2.status_code == 200
    wait_for(lambda: setup.metric("dropped") == 1, timeout=10, what="a dropped shadow")
    assert setup.metric("published") == 0
    setup.shadow_engine.open_gate("held")
    wait_for(lambda: setup.metric("published") == 1, timeout=10, what="the held shadow")
    assert len(setup.events.events) == 3  # two callers, one shadow


@pytest.mark.parametrize("setup", [{"shadow_upstream": "http://127.0.0.1:9"}], indirect=True)
def test_an_unreachable_shadow_is_counted_never_surfaced(setup: Setup) -> None:
    r = post(setup.url + CHAT, {**GREEDY, "seed": "u"})
    assert r.status_code == 200 and r.json()["id"] == "chatcmpl-u"
    wait_for(lambda: setup.metric("failed") == 1, timeout=10, what="a failed shadow")
    assert len(setup.events.events) == 1 and setup.metric("published") == 0


def test_a_shadow_upstream_that_speculates_is_a_failure(setup: Setup) -> None:
    setup.shadow_engine.speculating = True
    assert post(setup.url + CHAT, {**GREEDY, "seed": "sp"}).status_code == 200
    wait_for(lambda: setup.metric("failed") == 1, timeout=10, what="a failed shadow")
    assert len(setup.events.events) == 1


def test_error_events_carry_the_prompt_hash(setup: Setup) -> None:
    r = post(setup.url + CHAT, {**GREEDY, "seed": "e"}, **{"x-fake": "status-503"})
    assert r.status_code == 503
    (event,) = setup.wait_events(1)
    assert event["status"] == "error" and "output_hash" not in event
    assert event["prompt_hash"] == prompt_hash(CHAT, {**GREEDY, "seed": "e"})
    assert setup.metric("published") == 0  # failures are not shadowed
