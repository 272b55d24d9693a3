"""The proxy end to end: a fake engine, the proxy served by uvicorn, the test broker.

Pass-through is checked by sending the same request directly and through the proxy and
comparing bytes; telemetry by reading the published events back from Kafka and parsing
them with specwatch's own parser.
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import httpx
import orjson
import pytest

from monitor.broker import free_port
from monitor.telemetry.parse import Parser
from tests.helpers import wait_for
from tests.monitor.proxy.conftest import (
    DRAFT,
    SPEC,
    TARGET,
    Engine,
    proxy_config,
    read_events,
    read_records,
    running_proxy,
)
from tests.monitor.proxy.fake_engine import BLOB, LLAMACPP_TIMINGS

pytestmark = pytest.mark.broker

HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
       "proxy-connection"}
CHAT = "/v1/chat/completions"


def end_to_end(headers: httpx.Headers) -> list[tuple[str, str]]:
    return sorted((k.lower(), v) for k, v in headers.multi_items() if k.lower() not in HOP)


def post(url: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    return httpx.post(url, content=json.dumps(body).encode(), timeout=30,
                      headers={"content-type": "application/json", **headers})


def stream_chunks(url: str, body: dict[str, Any], **headers: str) -> tuple[int, Any, list[bytes]]:
    with httpx.Client(timeout=30) as client, client.stream(
            "POST", url, content=json.dumps(body).encode(),
            headers={"content-type": "application/json", **headers}) as r:
        return r.status_code, r.headers, list(r.iter_raw())


def check_valid(events: list[dict[str, Any]]) -> None:
    parsed, rejected = Parser().parse(orjson.dumps(events))
    assert rejected == [], [r.reason for r in rejected]
    assert len(parsed) == len(events)


# --- pass-through -------------------------------------------------------------------------


def test_non_streaming_is_byte_identical_and_publishes_counts(engine: Engine, broker: Any
                                                              ) -> None:
    body = {"model": "served-model", "seed": "ns1", "messages": [{"role": "user",
                                                                  "content": "hi"}]}
    direct = post(engine.url + CHAT, body, **{"x-route": "code-assistant"})
    with running_proxy(proxy_config(engine.url), broker.bootstrap_servers) as proxy:
        started = time.perf_counter()
        proxied = post(proxy.url + CHAT, body, **{"x-route": "code-assistant"})
        elapsed_ms = (time.perf_counter() - started) * 1000
        [event] = read_events(broker.bootstrap_servers, proxy.topic, 1)
    assert proxied.status_code == direct.status_code == 200
    assert proxied.content == direct.content
    assert end_to_end(proxied.headers) == end_to_end(direct.headers)
    check_valid([event])
    assert event["request_id"] == "pod-1/chatcmpl-ns1"
    assert event["route"] == "code-assistant"
    assert event["status"] == "ok"
    assert event["target"] == TARGET
    assert event["draft"] == DRAFT
    assert event["spec"] == {"num_speculative_tokens": 3, "drafted_tokens": 12,
                             "accepted_tokens": 9, "method": "draft_model",
                             "params": SPEC["params"]}
    assert (event["output_tokens"], event["prompt_tokens"]) == (20, 7)
    assert event["engine"] == "llamacpp" and event["instance"] == "pod-1"
    # e2e is the proxy's own measure; a non-streamed response's ttft is e2e minus the
    # engine's decode time (timings.predicted_ms)
    assert 0 < event["e2e_ms"] <= elapsed_ms
    assert event["ttft_ms"] == pytest.approx(max(0.0, event["e2e_ms"]
                                                 - LLAMACPP_TIMINGS["predicted_ms"]), abs=0.01)


def test_streaming_is_byte_identical_incremental_and_read_from_the_final_chunk(
        engine: Engine, broker: Any) -> None:
    body = {"model": "served-model", "seed": "st1", "stream": True}
    status, headers, direct = stream_chunks(engine.url + CHAT, body)
    with running_proxy(proxy_config(engine.url), broker.bootstrap_servers) as proxy:
        # The engine holds the stream after its first event until the gate opens: the
        # first event must reach the client through the proxy before that.
        with httpx.Client(timeout=30) as client, client.stream(
                "POST", proxy.url + CHAT, content=json.dumps(body).encode(),
                headers={"content-type": "application/json", "x-gate": "st1"}) as r:
            chunks = r.iter_raw()
            first = next(chunks)
            assert not engine.app.gate("st1").is_set()
            engine.app.open_gate("st1")
            proxied = [first, *chunks]
            proxied_status, proxied_headers = r.status_code, r.headers
        [event] = read_events(broker.bootstrap_servers, proxy.topic, 1)
    assert proxied_status == status == 200
    assert b"".join(proxied) == b"".join(direct)
    assert first.startswith(b"data: ") and b"[DONE]" not in first
    assert end_to_end(proxied_headers) == end_to_end(headers)
    check_valid([event])
    assert event["request_id"] == "pod-1/chatcmpl-st1"
    assert event["route"] == "chat"  # no header: the default route
    assert (event["spec"]["drafted_tokens"], event["spec"]["accepted_tokens"]) == (12, 9)
    assert event["output_tokens"] == 20
    assert 0 <= event["ttft_ms"] < event["e2e_ms"]


def test_request_passes_unchanged_minus_hop_by_hop_headers(engine: Engine, broker: Any
                                                           ) -> None:
    raw = b"\x00\xffbinary\r\n\r\nbody"
    with running_proxy(proxy_config(engine.url), broker.bootstrap_servers) as proxy:
        r = httpx.put(proxy.url + "/echo/a%20b/%E2%82%AC?x=1&y=%2F&x=2", content=raw,
                      timeout=30, headers=[("x-custom", "one"), ("x-custom", "two"),
                                           ("connection", "x-drop"), ("x-drop", "gone"),
                                           ("user-agent", "test-agent/1")])
    seen = r.json()
    assert r.status_code == 200
    assert seen["method"] == "PUT"
    assert seen["raw_path"] == "/echo/a%20b/%E2%82%AC"
    assert seen["query"] == "x=1&y=%2F&x=2"
    assert seen["body"].encode("latin-1") == raw
    names = [k for k, _ in seen["headers"]]
    assert [v for k, v in seen["headers"] if k == "x-custom"] == ["one", "two"]
    assert dict(seen["headers"])["user-agent"] == "test-agent/1"
    assert "x-drop" not in names and "connection" not in names
    assert dict(seen["headers"])["content-length"] == str(len(raw))
    # nothing the client did not send (a client library's defaults) reaches the engine
    sent = {"x-custom", "user-agent", "accept", "accept-encoding", "host", "content-length"}
    assert set(names) <= sent, set(names) - sent


def test_binary_body_and_repeated_headers_pass_unchanged(engine: Engine, broker: Any) -> None:
    direct = httpx.get(engine.url + "/blob", timeout=30)
    with running_proxy(proxy_config(engine.url), broker.bootstrap_servers) as proxy:
        proxied = httpx.get(proxy.url + "/blob", timeout=30)
        assert proxy.metric("specwatch_proxy_requests_total", kind="other") == 1
    assert proxied.content == direct.content == BLOB
    assert proxied.headers.get_list("set-cookie") == ["a=1", "b=2"]
    assert end_to_end(proxied.headers) == end_to_end(direct.headers)


# --- upstream errors ----------------------------------------------------------------------


@pytest.mark.parametrize(("status", "published"), [(500, "error"), (429, "error"),
                                                   (503, "error"), (400, None)])
def test_upstream_error_status_passes_unchanged(engine: Engine, broker: Any, status: int,
                                                published: str | None) -> None:
    body = {"model": "served-model", "seed": f"err{status}"}
    direct = post(engine.url + CHAT, body, **{"x-fake": f"status-{status}"})
    with running_proxy(proxy_config(engine.url), broker.bootstrap_servers) as proxy:
        proxied = post(proxy.url + CHAT, body, **{"x-fake": f"status-{status}"})
        if published:
            [event] = read_events(broker.bootstrap_servers, proxy.topic, 1)
        else:
            wait_for(lambda: proxy.metric("specwatch_proxy_events_skipped_total",
                                          reason="client_error") == 1,
                     timeout=10, what="the 400 counted as a client error")
            assert proxy.publisher.flush(5.0)
            assert proxy.publisher.sent == 0
    assert proxied.status_code == direct.status_code == status
    assert proxied.content == direct.content
    assert end_to_end(proxied.headers) == end_to_end(direct.headers)
    if status == 429:
        assert proxied.headers["retry-after"] == "7"
    if published:
        check_valid([event])
        assert event["status"] == published
        assert "spec" not in event and event["output_tokens"] == 0
        assert event["draft"] == DRAFT  # same series as the route's other requests


def test_upstream_down_answers_502_and_publishes_an_error(broker: Any) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with running_proxy(proxy_config(dead), broker.bootstrap_servers) as proxy:
        r = post(proxy.url + CHAT, {"model": "m"}, **{"x-route": "code"})
        [event] = read_events(broker.bootstrap_servers, proxy.topic, 1)
        assert proxy.metric("specwatch_proxy_upstream_failures_total", kind="unreachable") == 1
    assert r.status_code == 502
    assert r.headers["content-type"] == "application/json"
    error = r.json()["error"]
    assert error["type"] == "upstream_unreachable" and error["code"] == 502
    assert dead in error["message"]
    check_valid([event])
    assert (event["status"], event["route"]) == ("error", "code")


def test_upstream_breaking_off_breaks_the_response_and_publishes_an_error(
        engine: Engine, broker: Any) -> None:
    with running_proxy(proxy_config(engine.url), broker.bootstrap_servers) as proxy:
        with pytest.raises(httpx.HTTPError):
            post(proxy.url + CHAT, {"model": "m", "seed": "brk"}, **{"x-fake": "broken"})
        [event] = read_events(broker.bootstrap_servers, proxy.topic, 1)
        assert proxy.metric("specwatch_proxy_upstream_failures_total", kind="broken") == 1
        # the proxy itself keeps serving
        assert post(proxy.url + CHAT, {"model": "m", "seed": "after"}).status_code == 200
    assert event["status"] == "error"


def test_client_going_away_cancels_the_upstream_stream(engine: Engine, broker: Any) -> None:
    body = json.dumps({"model": "m", "seed": "gone1", "stream": True}).encode()
    host, port = "127.0.0.1", 0
    with running_proxy(proxy_config(engine.url), broker.bootstrap_servers) as proxy:
        port = int(proxy.url.rsplit(":", 1)[1])
        with socket.create_connection((host, port), timeout=30) as sock:
            sock.sendall(b"POST " + CHAT.encode() + b" HTTP/1.1\r\nhost: x\r\n"
                         b"content-type: application/json\r\nx-gate: gone1\r\n"
                         b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            received = b""
            while b"data: " not in received:
                received += sock.recv(65536)
        # the client hung up after the first event; the engine must hear of it
        wait_for(lambda: "gone1" in engine.app.disconnects, timeout=15,
                 what="the engine to see the proxy hang up")
        [event] = read_events(broker.bootstrap_servers, proxy.topic, 1)
    assert event["status"] == "cancelled"
    assert "spec" not in event


# --- engines ------------------------------------------------------------------------------


def test_llamacpp_without_draft_n_publishes_zero_drafted(engine: Engine, broker: Any) -> None:
    """A llama-server whose draft failed to load keeps serving without `draft_n`: the events
    must say drafted 0 (not leave `spec` out), or `speculation_inactive` cannot see it."""
    with running_proxy(proxy_config(engine.url, engine="llamacpp"),
                       broker.bootstrap_servers) as proxy:
        post(proxy.url + CHAT, {"model": "m", "seed": "nd1"}, **{"x-fake": "llamacpp-nodraft"})
        stream_chunks(proxy.url + CHAT, {"model": "m", "seed": "nd2", "stream": True},
                      **{"x-fake": "llamacpp-nodraft"})
        events = read_events(broker.bootstrap_servers, proxy.topic, 2)
    check_valid(events)
    assert len(events) == 2
    for event in events:
        assert event["spec"]["drafted_tokens"] == 0 and event["spec"]["accepted_tokens"] == 0
        assert event["spec"]["num_speculative_tokens"] == 3
        assert event["output_tokens"] == 20


def test_model_without_spec_metadata_publishes_no_spec(engine: Engine, broker: Any) -> None:
    config = proxy_config(engine.url, models={"*": {"target": TARGET}})
    with running_proxy(config, broker.bootstrap_servers) as proxy:
        post(proxy.url + CHAT, {"model": "m", "seed": "pl1"}, **{"x-fake": "plain"})
        [event] = read_events(broker.bootstrap_servers, proxy.topic, 1)
    check_valid([event])
    assert "spec" not in event and "draft" not in event
    assert "engine" not in event  # auto: a plain OpenAI response names no engine


def test_vllm_counts_streamed_and_not(engine: Engine, broker: Any) -> None:
    with running_proxy(proxy_config(engine.url), broker.bootstrap_servers) as proxy:
        post(proxy.url + CHAT, {"model": "m", "seed": "v1"}, **{"x-fake": "vllm"})
        stream_chunks(proxy.url + CHAT, {"model": "m", "seed": "v2", "stream": True,
                                         "stream_options": {"include_usage": True}},
                      **{"x-fake": "vllm"})
        events = read_events(broker.bootstrap_servers, proxy.topic, 2)
    check_valid(events)
    by_id = {e["request_id"]: e for e in events}
    for rid in ("pod-1/chatcmpl-v1", "pod-1/chatcmpl-v2"):
        spec = by_id[rid]["spec"]
        assert (spec["drafted_tokens"], spec["accepted_tokens"], spec["verify_steps"]) == (
            120, 77, 40)
        # histogram [5, 10, 8, 17]: position i accepted in every step with more than i
        assert spec["accepted_per_position"] == [35, 25, 17]
        assert by_id[rid]["engine"] == "vllm"
    # non-streamed: ttft = e2e - metrics.generation_time_ms
    e = by_id["pod-1/chatcmpl-v1"]
    assert e["ttft_ms"] == pytest.approx(max(0.0, e["e2e_ms"] - 60.0), abs=0.01)


def test_vllm_without_counters_publishes_nothing_and_counts_it(engine: Engine, broker: Any
                                                               ) -> None:
    with running_proxy(proxy_config(engine.url), broker.bootstrap_servers) as proxy:
        r = post(proxy.url + CHAT, {"model": "m", "seed": "vn"}, **{"x-fake": "vllm-null"})
        assert r.status_code == 200
        wait_for(lambda: proxy.metric("specwatch_proxy_events_skipped_total",
                                      reason="no_counters") == 1,
                 timeout=10, what="the skip to be counted")
        assert proxy.publisher.flush(5.0) and proxy.publisher.sent == 0


def test_sglang_generate_and_llamacpp_completion(engine: Engine, broker: Any) -> None:
    with running_proxy(proxy_config(engine.url), broker.bootstrap_servers) as proxy:
        post(proxy.url + "/generate", {"text": "def", "seed": "g1"})
        post(proxy.url + "/generate", {"text": "def", "seed": "g2"},
             **{"x-fake": "sglang-nodraft"})
        post(proxy.url + "/completion", {"prompt": "def", "seed": "c1"})
        events = read_events(broker.bootstrap_servers, proxy.topic, 3)
    check_valid(events)
    by_id = {e["request_id"]: e for e in events}
    spec = by_id["pod-1/sg-g1"]["spec"]
    assert (spec["drafted_tokens"], spec["accepted_tokens"]) == (30, 16)
    assert spec["verify_steps"] == 10
    assert spec["accepted_per_position"] == [8, 5, 3]
    assert by_id["pod-1/sg-g2"]["spec"]["drafted_tokens"] == 0
    [native] = [e for rid, e in by_id.items() if not rid.startswith("pod-1/sg-")]
    assert (native["spec"]["drafted_tokens"], native["output_tokens"]) == (12, 20)
    assert native["engine"] == "llamacpp"


# --- routes -------------------------------------------------------------------------------


def test_route_from_header_path_model_or_default(engine: Engine, broker: Any) -> None:
    config = proxy_config(engine.url, routes={
        "header": "X-Tenant-Route", "paths": {"/code/": "code-by-path"},
        "models": {"writer-model": "creative-by-model"}, "default": "default-route"})
    with running_proxy(config, broker.bootstrap_servers) as proxy:
        post(proxy.url + CHAT, {"model": "writer-model", "seed": "r1"},
             **{"x-tenant-route": "chat-by-header"})
        post(proxy.url + "/code" + CHAT, {"model": "writer-model", "seed": "r2"})
        post(proxy.url + CHAT, {"model": "writer-model", "seed": "r3"})
        post(proxy.url + CHAT, {"model": "other", "seed": "r4"})
        records = read_records(broker.bootstrap_servers, proxy.topic, 4)
    routes = {e["request_id"]: e["route"] for r in records for e in r.events}
    assert routes == {"pod-1/chatcmpl-r1": "chat-by-header", "pod-1/chatcmpl-r2": "code-by-path",
                      "pod-1/chatcmpl-r3": "creative-by-model",
                      "pod-1/chatcmpl-r4": "default-route"}
    for r in records:  # keyed by route: one partition per route
        assert {e["route"] for e in r.events} == {r.key.decode()}


def test_no_route_publishes_nothing(engine: Engine, broker: Any) -> None:
    config = proxy_config(engine.url, routes={"header": "X-Route"})
    with running_proxy(config, broker.bootstrap_servers) as proxy:
        assert post(proxy.url + CHAT, {"model": "m", "seed": "nr"}).status_code == 200
        wait_for(lambda: proxy.metric("specwatch_proxy_events_skipped_total",
                                      reason="no_route") == 1,
                 timeout=10, what="the skip to be counted")


# --- Kafka down ---------------------------------------------------------------------------


def test_kafka_down_fails_no_request_and_counts_drops(engine: Engine) -> None:
    """The publisher's first attempt to reach the broker takes connect_timeout_s (3 s); a
    request that waited for it would show."""
    closed = f"127.0.0.1:{free_port()}"
    body = {"model": "served-model", "messages": []}
    with running_proxy(proxy_config(engine.url), closed, max_buffer=2, connect_timeout_s=3.0,
                       close_timeout=0.5) as proxy:
        times = []
        for i in range(5):
            started = time.perf_counter()
            r = post(proxy.url + CHAT, {**body, "seed": f"kd{i}"})
            times.append(time.perf_counter() - started)
            assert r.status_code == 200
            assert r.content == post(engine.url + CHAT, {**body, "seed": f"kd{i}"}).content
        wait_for(lambda: proxy.metric("specwatch_proxy_events_total", status="ok") == 5,
                 timeout=10, what="5 events built")
        assert max(times) < 2.5, times  # a request that waited for Kafka takes >= 3 s
        assert proxy.publisher.dropped_by_reason == {"buffer_full": 3}
        assert proxy.metric("specwatch_publisher_dropped_total", reason="buffer_full") == 3
        assert proxy.publisher.buffered == 2 and proxy.publisher.sent == 0
    # closing gives up what was still buffered, counted
    assert proxy.publisher.dropped_by_reason == {"buffer_full": 3, "closed": 2}
