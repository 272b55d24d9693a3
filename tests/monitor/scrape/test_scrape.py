"""The Prometheus scraper against real HTTP exporters: exact deltas across an engine restart,
the three engines' name sets, failures, saved state, the CLI, Kafka, and the events through
specwatch's own parser and ``specwatch replay``."""

from __future__ import annotations

import argparse
import json
import random
import socket
import threading
import time
import uuid
from collections import Counter as Tally
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import orjson
import pytest
import yaml
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as OPENMETRICS
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from pydantic import ValidationError

from monitor.broker import EmbeddedBroker, free_port
from monitor.cli import main
from monitor.config import KafkaConfig
from monitor.scrape.cli import register
from monitor.scrape.counters import CounterTracker
from monitor.scrape.engines import Reading
from monitor.scrape.scraper import EngineScraper, ScrapeCollector, ScrapeSource
from monitor.scrape.sinks import JsonLinesSink, KafkaSink
from monitor.scrape_config import ScrapeConfig, ScrapeTarget
from monitor.store.store import Store
from monitor.telemetry.parse import Parser
from tests.helpers import read_jsonl

FIXTURES = Path(__file__).parents[2] / "fixtures" / "engines"
T0 = 1793628000.0  # 2026-11-02T14:00:00Z, on the 15 s grid
K = 4
MODELS = {"llama-8b": ("code", 0.8), "llama-70b": ("chat", 0.5)}  # model -> route, acceptance


# -- real HTTP exporters ---------------------------------------------------------------------


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass


class _Server:
    """A WSGI app on wsgiref in a thread, on 127.0.0.1 (port 0: any free one)."""

    def __init__(self, app: Callable[..., Any], port: int = 0) -> None:
        self._server: WSGIServer = make_server("127.0.0.1", port, app, handler_class=_Quiet)
        # A short poll: shutdown() waits for it, and tests stop servers often.
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,),
                                        daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


@dataclass
class Truth:
    """What the exporter counted, per model, independently of the scraper."""

    drafts: Tally[str] = field(default_factory=Tally)
    drafted: Tally[str] = field(default_factory=Tally)
    accepted: Tally[str] = field(default_factory=Tally)
    requests: Tally[str] = field(default_factory=Tally)
    generated: Tally[str] = field(default_factory=Tally)
    per_position: dict[str, list[int]] = field(
        default_factory=lambda: {m: [0] * K for m in MODELS})


class VllmExporter:
    """A vLLM V1-shaped ``/metrics``: the spec-decode counters with ``model_name`` and a
    data-parallel ``engine`` label, finished requests by reason, token counters, TTFT and
    e2e histograms and (unless ``start_time`` is None, as in prometheus multiprocess mode)
    ``process_start_time_seconds``. One instance is one engine process's life."""

    def __init__(self, start_time: float | None, port: int = 0, *,
                 openmetrics: str | None = None) -> None:
        r = self.registry = CollectorRegistry()
        if start_time is not None:
            Gauge("process_start_time_seconds", "Start time of the process.",
                  registry=r).set(start_time)
        labels = ["model_name", "engine"]
        self.drafts = Counter("vllm:spec_decode_num_drafts", "Drafts.", labels, registry=r)
        self.draft_tokens = Counter("vllm:spec_decode_num_draft_tokens", "Draft tokens.",
                                    labels, registry=r)
        self.accepted = Counter("vllm:spec_decode_num_accepted_tokens", "Accepted tokens.",
                                labels, registry=r)
        self.per_pos = Counter("vllm:spec_decode_num_accepted_tokens_per_pos",
                               "Accepted tokens per position.", [*labels, "position"],
                               registry=r)
        self.finished = Counter("vllm:request_success", "Finished requests.",
                                [*labels, "finished_reason"], registry=r)
        self.generated = Counter("vllm:generation_tokens", "Generated tokens.", labels,
                                 registry=r)
        self.prompt = Counter("vllm:prompt_tokens", "Prompt tokens.", labels, registry=r)
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "TTFT.", labels, registry=r)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "E2E.", labels, registry=r)
        Gauge("vllm:num_requests_running", "Running.", labels, registry=r)
        for model in MODELS:  # vLLM creates its labelled children at start
            for engine in "01":
                for p in range(K):
                    self.per_pos.labels(model, engine, str(p))
        app = make_wsgi_app(r)
        if openmetrics is not None:  # an exporter that answers OpenMetrics whatever we ask
            def app(environ: Any, start_response: Any) -> list[bytes]:
                start_response("200 OK", [("Content-Type", OPENMETRICS)])
                text = openmetrics_latest(r, escaping="allow-utf-8")
                if openmetrics == "underscores":  # names escaped: vllm_spec_decode_...
                    text = text.replace(b"vllm:", b"vllm_")
                return [text]
        self.server = _Server(app, port)

    @property
    def url(self) -> str:
        return self.server.url

    def serve(self, model: str, steps: int, rng: random.Random, truth: Truth | None) -> None:
        """``steps`` verification steps of ``model``, a request finishing every 8th."""
        p = MODELS[model][1]
        for i in range(steps):
            engine = str(i % 2)
            accepted = 0
            while accepted < K and rng.random() < p:  # acceptance is a prefix
                accepted += 1
            self.drafts.labels(model, engine).inc()
            self.draft_tokens.labels(model, engine).inc(K)
            self.accepted.labels(model, engine).inc(accepted)
            for pos in range(accepted):
                self.per_pos.labels(model, engine, str(pos)).inc()
            self.generated.labels(model, engine).inc(accepted + 1)
            finished = i % 8 == 7
            if finished:
                self.finished.labels(model, engine, "stop").inc()
                self.prompt.labels(model, engine).inc(300)
                self.ttft.labels(model, engine).observe(0.1)
                self.e2e.labels(model, engine).observe(2.0)
            if truth is not None:
                truth.drafts[model] += 1
                truth.drafted[model] += K
                truth.accepted[model] += accepted
                truth.generated[model] += accepted + 1
                truth.requests[model] += finished
                for pos in range(accepted):
                    truth.per_position[model][pos] += 1

    def stop(self) -> None:
        self.server.stop()


class TextServer:
    """Serves whatever body, status and content type the test sets."""

    def __init__(self, body: str = "") -> None:
        self.body, self.status, self.content_type = body, "200 OK", "text/plain; version=0.0.4"
        self.server = _Server(self._app)

    def _app(self, environ: Any, start_response: Any) -> list[bytes]:
        start_response(self.status, [("Content-Type", self.content_type)])
        return [self.body.encode()]

    @property
    def url(self) -> str:
        return self.server.url

    def stop(self) -> None:
        self.server.stop()


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def target(url: str, model: str = "llama-8b", **over: Any) -> ScrapeTarget:
    route = MODELS[model][0] if model in MODELS else "code"
    fields: dict[str, Any] = dict(
        url=url, engine="vllm", route=route, target_model=model, target_revision="2026-10-28",
        target_tokenizer="llama3", draft_model="eagle3-" + model, draft_revision="2026-09-30",
        draft_tokenizer="llama3", method="eagle", num_speculative_tokens=K,
        labels={"model_name": model},
    )
    fields.update(over)
    return ScrapeTarget(**fields)


class ListSink:
    """Keeps what it is given; ``fail`` makes the next flushes raise like a broker outage."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._batch: list[dict[str, Any]] = []
        self.fail = False

    def write(self, events: Sequence[dict[str, Any]]) -> None:
        self._batch = list(events)

    def flush(self) -> None:
        if self.fail:
            raise ConnectionError("broker unreachable")
        self.events += self._batch

    def close(self) -> None:
        pass


def assert_valid_telemetry(events: list[dict[str, Any]]) -> None:
    """specwatch's own parser takes every event, and no interval is negative or doubled."""
    raw = b"\n".join(orjson.dumps(e) for e in events)
    parsed, rejections = Parser().parse(raw)
    assert rejections == []
    assert len(parsed) == len(events)
    ids = [e["request_id"] for e in events]
    assert len(set(ids)) == len(ids)
    for e in events:
        spec = e["spec"]
        assert 0 <= spec["accepted_tokens"] <= spec["drafted_tokens"]
        assert spec["verify_steps"] >= 0 and e["output_tokens"] >= 0
        assert e["source"] == "scrape"


def sums(events: list[dict[str, Any]], route: str) -> dict[str, Any]:
    mine = [e for e in events if e["route"] == route]
    return {
        "drafts": sum(e["spec"]["verify_steps"] for e in mine),
        "drafted": sum(e["spec"]["drafted_tokens"] for e in mine),
        "accepted": sum(e["spec"]["accepted_tokens"] for e in mine),
        "generated": sum(e["output_tokens"] for e in mine),
        "requests": sum(e["scrape"]["requests"] for e in mine),
        "per_position": [sum(e["spec"]["accepted_per_position"][i] for e in mine)
                         for i in range(K)],
    }


def truth_of(truth: Truth, model: str) -> dict[str, Any]:
    return {"drafts": truth.drafts[model], "drafted": truth.drafted[model],
            "accepted": truth.accepted[model], "generated": truth.generated[model],
            "requests": truth.requests[model], "per_position": truth.per_position[model]}


# -- Must show: an engine restarted mid-way --------------------------------------------------


def test_deltas_stay_exact_across_an_engine_restart(tmp_path: Path) -> None:
    rng, truth, clock = random.Random(7), Truth(), Clock()
    life1 = VllmExporter(start_time=T0 - 86400)
    port = life1.server.port
    life1.serve("llama-8b", 5000, rng, None)  # history before specwatch looked: not counted
    life1.serve("llama-70b", 3000, rng, None)
    out = tmp_path / "scraped.jsonl"
    config = ScrapeConfig(targets=[target(life1.url, "llama-8b"),
                                   target(life1.url, "llama-70b")])
    source = ScrapeSource(config, JsonLinesSink(out), clock=clock)
    assert source.scrape_once() == []  # first scrape: a baseline only
    produced: list[dict[str, Any]] = []
    for _ in range(4):
        clock.now += 15
        life1.serve("llama-8b", 240, rng, truth)
        life1.serve("llama-70b", 160, rng, truth)
        produced += source.scrape_once()
    assert len(produced) == 8

    life1.stop()  # the engine dies ...
    clock.now += 15
    assert source.scrape_once() == []  # ... a scrape fails: no event, counted
    assert [s.stats.failures for s in source.scrapers] == [1, 1]

    life2 = VllmExporter(start_time=T0 + 40, port=port)  # same port, fresh counters
    life2.serve("llama-8b", 60, rng, truth)  # small: below every value of the first life
    life2.serve("llama-70b", 30, rng, truth)
    for _ in range(3):
        clock.now += 15
        produced += source.scrape_once()
        life2.serve("llama-8b", 200, rng, truth)
        life2.serve("llama-70b", 100, rng, truth)
    clock.now += 15
    produced += source.scrape_once()
    life2.stop()
    source.close()

    assert len(produced) == 16
    assert_valid_telemetry(produced)
    for model, (route, _) in MODELS.items():
        assert sums(produced, route) == truth_of(truth, model)
    after_restart = [e for e in produced if e["ts"] == "2026-11-02T14:01:30.000Z"]
    assert len(after_restart) == 2
    assert all(e["scrape"]["failed_scrapes"] == 1 and e["scrape"]["counter_resets"] == 1
               for e in after_restart)
    assert [s.stats.resets for s in source.scrapers] == [1, 1]
    # What went to the file is what scrape_once returned.
    assert list(read_jsonl(out)) == produced

    # Round trip: `specwatch replay` counts the file into the store with the engine's rate.
    db = f"sqlite:///{tmp_path / 'scrape.db'}"
    assert main(["replay", str(out), "--db", db, "--migrate", "--no-progress"]) == 0
    with Store(db) as store:
        rows = store.ratios(granularity="day")
    for model, (route, _) in MODELS.items():
        mine = [r for r in rows if r.route == route]
        drafted = sum(r.drafted_tokens for r in mine)
        accepted = sum(r.accepted_tokens for r in mine)
        assert (drafted, accepted) == (truth.drafted[model], truth.accepted[model])
        assert accepted / drafted == pytest.approx(truth.accepted[model] / truth.drafted[model])
        assert {(r.target_model, r.draft_model, r.num_speculative_tokens) for r in mine} == {
            (model, "eagle3-" + model, K)}
    # The routes really differ: 0.8 vs 0.5 per-position acceptance, never averaged.
    code = truth.accepted["llama-8b"] / truth.drafted["llama-8b"]
    chat = truth.accepted["llama-70b"] / truth.drafted["llama-70b"]
    assert code > chat + 0.2


def test_a_restart_to_higher_counts_is_caught_by_process_start_time() -> None:
    """Counters that climbed past their old values before the first scrape of the new
    process look like growth; only process_start_time_seconds tells."""
    rng, truth, clock = random.Random(3), Truth(), Clock()
    life1 = VllmExporter(start_time=T0 - 3600)
    life1.serve("llama-8b", 50, rng, None)
    scraper = EngineScraper(target(life1.url), clock=clock)
    assert scraper.scrape_once() is None
    clock.now += 15
    life1.serve("llama-8b", 40, rng, truth)
    first = scraper.scrape_once()
    port = life1.server.port
    life1.stop()
    life2 = VllmExporter(start_time=T0 + 20, port=port)
    try:
        life2.serve("llama-8b", 500, rng, truth)  # far above the first life's totals
        clock.now += 15
        second = scraper.scrape_once()
    finally:
        life2.stop()
    assert first is not None and second is not None
    events = [first, second]
    assert_valid_telemetry(events)
    assert sums(events, "code") == truth_of(truth, "llama-8b")
    assert second["scrape"]["counter_resets"] == 1


def test_without_process_metrics_a_lower_counter_is_a_reset() -> None:
    """Prometheus multiprocess mode (vLLM with --api-server-count > 1) has no process_*
    metrics: a counter lower than before is what shows the restart."""
    rng, truth, clock = random.Random(5), Truth(), Clock()
    life1 = VllmExporter(start_time=None)
    life1.serve("llama-8b", 400, rng, None)
    scraper = EngineScraper(target(life1.url), clock=clock)
    scraper.scrape_once()
    port = life1.server.port
    life1.stop()
    life2 = VllmExporter(start_time=None, port=port)
    try:
        life2.serve("llama-8b", 30, rng, truth)
        clock.now += 15
        event = scraper.scrape_once()
    finally:
        life2.stop()
    assert event is not None
    assert sums([event], "code") == truth_of(truth, "llama-8b")


def test_openmetrics_answers_read_the_same() -> None:
    """An exporter that answers OpenMetrics (``_created`` inside the counter family, a
    ``# EOF``) gives the same counts as the text format."""
    events = []
    for openmetrics in (None, "as-is", "underscores"):
        clock = Clock()
        exporter = VllmExporter(start_time=T0, openmetrics=openmetrics)
        scraper = EngineScraper(target(exporter.url), clock=clock)
        try:
            scraper.scrape_once()
            exporter.serve("llama-8b", 100, random.Random(1), None)
            clock.now += 15
            events.append(scraper.scrape_once())
        finally:
            exporter.stop()
    text = events[0]
    assert text is not None and text["scrape"]["requests"] > 0
    for om in events[1:]:
        assert om is not None
        for name in ("spec", "output_tokens", "prompt_tokens", "e2e_ms"):
            assert om[name] == text[name]
        assert om["scrape"]["requests"] == text["scrape"]["requests"]


# -- the engines' name sets, from recorded-shape fixtures ------------------------------------


def _fixture_pair(engine: str) -> tuple[str, str]:
    return ((FIXTURES / f"{engine}-0.prom").read_text(),
            (FIXTURES / f"{engine}-1.prom").read_text())


def _scrape_pair(engine: str, targets: list[ScrapeTarget], server: TextServer
                 ) -> list[dict[str, Any]]:
    before, after = _fixture_pair(engine)
    clock = Clock()
    sink = ListSink()
    source = ScrapeSource(ScrapeConfig(targets=targets), sink, clock=clock)
    server.body = before
    assert source.scrape_once() == []
    server.body = after
    clock.now += 15
    events = source.scrape_once()
    source.close()
    assert sink.events == events
    assert_valid_telemetry(events)
    return events


@pytest.fixture
def text_server() -> Iterator[TextServer]:
    server = TextServer()
    try:
        yield server
    finally:
        server.stop()


def _meta(url: str, engine: str, route: str, model: str, k: int, labels: dict[str, str]
          ) -> ScrapeTarget:
    return ScrapeTarget(url=url, engine=engine, route=route, target_model=model,
                        target_revision="r1", target_tokenizer="tok", draft_model="d",
                        draft_revision="r0", draft_tokenizer="tok", method="eagle",
                        num_speculative_tokens=k, labels=labels)


def test_vllm_fixture(text_server: TextServer) -> None:
    """Data-parallel engines 0 and 1 summed; failures are the abort/error finish reasons."""
    model = "meta-llama/Llama-3.1-8B-Instruct"
    (event,) = _scrape_pair("vllm", [_meta(text_server.url, "vllm", "code", model, 3,
                                           {"model_name": model})], text_server)
    assert event["spec"] == {"num_speculative_tokens": 3, "drafted_tokens": 900,
                             "accepted_tokens": 500, "verify_steps": 300,
                             "accepted_per_position": [230, 165, 105], "method": "eagle"}
    assert (event["output_tokens"], event["prompt_tokens"]) == (800, 9000)
    assert event["e2e_ms"] == pytest.approx(2000.0)
    assert "ttft_ms" not in event
    scrape = event["scrape"]
    assert (scrape["requests"], scrape["errors"]) == (21, 1)
    assert scrape["ttft_ms_mean"] == pytest.approx(100.0)
    assert scrape["counter_resets"] == 0 and "derived" not in scrape


def test_sglang_fixture_with_per_route_custom_labels(text_server: TextServer) -> None:
    """One SGLang server, two routes told apart by the x-customer-labels `route` label;
    drafted and accepted tokens derived from verify steps, generated tokens and requests."""
    model = "Qwen/Qwen2.5-7B-Instruct"
    events = _scrape_pair("sglang", [
        _meta(text_server.url, "sglang", "code", model, 3, {"route": "code"}),
        _meta(text_server.url, "sglang", "chat", model, 3, {"route": "chat"}),
    ], text_server)
    by_route = {e["route"]: e for e in events}
    code, chat = by_route["code"], by_route["chat"]
    assert code["spec"] == {"num_speculative_tokens": 3, "drafted_tokens": 1200,
                            "accepted_tokens": 690, "verify_steps": 400, "method": "eagle"}
    assert chat["spec"]["drafted_tokens"] == 900 and chat["spec"]["accepted_tokens"] == 300
    assert (code["scrape"]["requests"], code["scrape"]["errors"]) == (10, 1)
    assert code["e2e_ms"] == pytest.approx(1500.0)
    assert chat["scrape"]["ttft_ms_mean"] == pytest.approx(300.0)
    assert len(code["scrape"]["derived"]) == 2


def test_trtllm_fixture(text_server: TextServer) -> None:
    """Per-position drafted and accepted counters (token_position); verify steps from the
    drafted count at position 0; requests are successes plus errors."""
    model = "nvidia/Llama-3.1-8B-Instruct-FP8"
    (event,) = _scrape_pair("trtllm", [_meta(text_server.url, "trtllm", "code", model, 4,
                                             {"model_name": model})], text_server)
    assert event["spec"] == {"num_speculative_tokens": 4, "drafted_tokens": 800,
                             "accepted_tokens": 500, "verify_steps": 200,
                             "accepted_per_position": [170, 140, 110, 80], "method": "eagle"}
    assert (event["output_tokens"], event["prompt_tokens"]) == (700, 4000)
    assert (event["scrape"]["requests"], event["scrape"]["errors"]) == (16, 1)
    assert event["scrape"]["derived"] == ["verify_steps = drafted tokens at position 0"]
    assert event["engine"] == "trtllm"


def test_a_draft_length_the_engine_does_not_have_drops_only_the_positions(
        text_server: TextServer) -> None:
    model = "nvidia/Llama-3.1-8B-Instruct-FP8"
    (event,) = _scrape_pair("trtllm", [_meta(text_server.url, "trtllm", "code", model, 3,
                                             {"model_name": model})], text_server)
    assert "accepted_per_position" not in event["spec"]
    assert "position '3'" in event["scrape"]["per_position_dropped"]
    assert event["spec"]["accepted_tokens"] == 500


# -- failures, first scrape, odd samples -----------------------------------------------------


def test_failed_scrapes_yield_no_event_and_are_counted(text_server: TextServer) -> None:
    before, after = _fixture_pair("vllm")
    model = "meta-llama/Llama-3.1-8B-Instruct"
    clock = Clock()
    scraper = EngineScraper(_meta(text_server.url, "vllm", "code", model, 3,
                                  {"model_name": model}), clock=clock)
    text_server.body = before
    assert scraper.scrape_once() is None and scraper.stats.baselines == 1
    text_server.status = "500 Internal Server Error"
    clock.now += 15
    assert scraper.scrape_once() is None
    text_server.status, text_server.body = "200 OK", "vllm:spec_decode_num_drafts_total{ 3\n"
    clock.now += 15
    assert scraper.scrape_once() is None
    assert scraper.stats.failures == 2
    assert "parse" in scraper.stats.last_error
    # Nothing is lost: the next good scrape covers the gap.
    text_server.body = after
    clock.now += 15
    event = scraper.scrape_once()
    assert event is not None and event["spec"]["drafted_tokens"] == 900
    assert event["scrape"]["failed_scrapes"] == 2
    registry = CollectorRegistry()
    registry.register(ScrapeCollector([scraper]))
    name = scraper.target.display_name
    assert registry.get_sample_value("specwatch_scrape_failures_total", {"target": name}) == 2
    assert registry.get_sample_value("specwatch_scrape_events_total", {"target": name}) == 1


def test_no_answer_and_timeout_are_failures() -> None:
    clock = Clock()
    refused = EngineScraper(target(f"http://127.0.0.1:{free_port()}/metrics"), clock=clock)
    assert refused.scrape_once() is None
    assert refused.stats.failures == 1 and "no answer" in refused.stats.last_error
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/metrics"
        source = ScrapeSource(ScrapeConfig(targets=[target(url)], timeout=0.2), ListSink(),
                              clock=clock)
        assert source.scrape_once() == []
        assert source.scrapers[0].stats.last_error == "timed out"
        source.close()


def _reading(values: dict[str, float], *, start: float | None = 1.0,
             created: dict[str, float] | None = None, nan: Sequence[str] = ()) -> Reading:
    key = lambda name: (name, ())  # noqa: E731
    return Reading({key(n): v for n, v in values.items()},
                   {key(n): v for n, v in (created or {}).items()}, start,
                   {key(n) for n in nan})


def _inc(tracker: CounterTracker, reading: Reading) -> dict[str, float]:
    increase = tracker.update(reading)
    assert increase is not None
    return {name: v for (name, _), v in increase.values.items()}


def test_series_appearing_disappearing_and_nonfinite() -> None:
    t = CounterTracker()
    assert t.update(_reading({"a": 10.0}, nan=["b"])) is None
    # "c" is new: born since the last scrape, all of it counts; "b" was NaN: baseline only.
    assert _inc(t, _reading({"a": 12.0, "b": 50.0, "c": 4.0})) == {"a": 2.0, "b": 0.0, "c": 4.0}
    # "a" NaN now and "c" gone: nothing counted for them, baselines kept ...
    assert _inc(t, _reading({"b": 51.0}, nan=["a"])) == {"b": 1.0}
    # ... so they continue where they left off, or count as reset when lower.
    assert _inc(t, _reading({"a": 20.0, "b": 52.0, "c": 1.0})) == {"a": 8.0, "b": 1.0,
                                                                    "c": 1.0}
    # A re-created series (new _created) starts over even when its value is higher.
    t.update(_reading({"a": 20.0}, created={"a": 100.0}))
    assert _inc(t, _reading({"a": 30.0}, created={"a": 200.0})) == {"a": 30.0}


def test_idle_intervals_and_a_second_scrape_in_one_slot_emit_nothing(
        text_server: TextServer) -> None:
    before, after = _fixture_pair("vllm")
    model = "meta-llama/Llama-3.1-8B-Instruct"
    clock = Clock()
    scraper = EngineScraper(_meta(text_server.url, "vllm", "code", model, 3,
                                  {"model_name": model}), clock=clock)
    text_server.body = before
    scraper.scrape_once()
    clock.now += 15
    assert scraper.scrape_once() is None and scraper.stats.idle == 1  # nothing moved
    text_server.body = after
    clock.now += 15
    first = scraper.scrape_once()
    assert first is not None
    text_server.body = before.replace("1.79362080025e+09", "1.79362090025e+09")  # restarted
    clock.now += 5  # same 15 s slot: folded into the next interval, not a second event
    assert scraper.scrape_once() is None
    clock.now += 10
    second = scraper.scrape_once()
    assert second is not None and second["request_id"] != first["request_id"]
    assert second["spec"]["drafted_tokens"] == 3000 + 2400  # the whole new process


def _bare(drafts: str, drafted: float, accepted: float, *, suffix: str = "_total") -> str:
    """vLLM counters as some exporters write them: no # TYPE lines (so prometheus_client
    keeps ``_total`` in the family name), or no ``_total`` at all."""
    labels = '{model_name="m",engine="0"}'
    return (f"vllm:spec_decode_num_drafts{suffix}{labels} {drafts}\n"
            f"vllm:spec_decode_num_draft_tokens{suffix}{labels} {drafted}\n"
            f"vllm:spec_decode_num_accepted_tokens{suffix}{labels} {accepted}\n")


@pytest.mark.parametrize("suffix", ["_total", ""])
def test_untyped_counters_a_torn_read_and_nan(text_server: TextServer, suffix: str) -> None:
    """A torn read (accepted counted before its drafts) is held back and merged into the
    next interval; a NaN sample keeps its last good value as the baseline."""
    clock = Clock()
    scraper = EngineScraper(target(text_server.url, "m", labels={"model_name": "m"}),
                            clock=clock)
    readings = [("10", 100, 50), ("NaN", 110, 62), ("30", 130, 70)]
    events = []
    for drafts, drafted, accepted in readings:
        text_server.body = _bare(drafts, drafted, accepted, suffix=suffix)
        events.append(scraper.scrape_once())
        clock.now += 15
    assert events[:2] == [None, None] and scraper.stats.deferred == 1
    spec = events[2]["spec"]
    assert (spec["drafted_tokens"], spec["accepted_tokens"], spec["verify_steps"]) == (30, 20, 20)
    assert scraper.stats.nonfinite == 1
    # An engine whose counters stay inconsistent is clamped after MAX_DEFERS intervals.
    for drafted, accepted in ((131, 75), (132, 80), (133, 85)):
        text_server.body = _bare("31", drafted, accepted, suffix=suffix)
        last = scraper.scrape_once()
        clock.now += 15
    assert last is not None and scraper.stats.clamped == 1
    assert (last["spec"]["drafted_tokens"], last["spec"]["accepted_tokens"]) == (3, 3)
    assert "clamped" in last["scrape"]
    assert_valid_telemetry([events[2], last])


# -- saved state: a crash re-sends the same ids ----------------------------------------------


def test_state_file_resends_unconfirmed_events_with_the_same_ids(tmp_path: Path) -> None:
    rng, truth, clock = random.Random(2), Truth(), Clock()
    exporter = VllmExporter(start_time=T0)
    state = tmp_path / "scrape-state.json"
    config = ScrapeConfig(targets=[target(exporter.url)], state_path=str(state))
    try:
        sink = ListSink()
        source = ScrapeSource(config, sink, clock=clock)
        source.scrape_once()
        clock.now += 15
        exporter.serve("llama-8b", 100, rng, truth)
        sink.fail = True
        (lost,) = source.scrape_once()  # produced, saved, not confirmed by the sink
        assert source.pending == 1
        # The process dies here. A new one resumes from the state file ...
        sink2 = ListSink()
        resumed = ScrapeSource(config, sink2, clock=clock)
        assert resumed.pending == 1
        clock.now += 15
        exporter.serve("llama-8b", 50, rng, truth)
        (fresh,) = resumed.scrape_once()
        # ... sends the unconfirmed event again, byte for byte, then the new interval.
        assert sink2.events == [lost, fresh]
        assert resumed.pending == 0
        assert sums(sink2.events, "code") == truth_of(truth, "llama-8b")
        # A crash after sending but before saving re-sends it too: downstream it is a
        # duplicate by request_id, counted once.
        out = tmp_path / "twice.jsonl"
        out.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in [lost, lost, fresh]))
        db = f"sqlite:///{tmp_path / 's.db'}"
        assert main(["replay", str(out), "--db", db, "--migrate", "--no-progress"]) == 0
        with Store(db) as store:
            drafted = sum(r.drafted_tokens for r in store.ratios(granularity="day"))
        assert drafted == truth.drafted["llama-8b"]
    finally:
        exporter.stop()


def test_unreadable_state_starts_over(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    state.write_text("{not json")
    source = ScrapeSource(ScrapeConfig(targets=[target("http://127.0.0.1:9/metrics")],
                                       state_path=str(state)), ListSink(), clock=Clock())
    assert source.pending == 0 and source.scrapers[0].stats.baselines == 0


# -- the schedule, with an injected clock ----------------------------------------------------


def test_run_scrapes_each_target_once_per_slot() -> None:
    rng, clock = random.Random(4), Clock(T0 + 3.0)
    exporter = VllmExporter(start_time=T0)
    waits: list[float] = []
    stop = threading.Event()

    def wait(seconds: float) -> None:  # the test's time: advance, let traffic happen
        waits.append(seconds)
        clock.now += seconds
        exporter.serve("llama-8b", 20, rng, None)
        exporter.serve("llama-70b", 20, rng, None)
        if len(waits) == 4:
            stop.set()

    slow = target(exporter.url, "llama-70b", interval="30s")
    source = ScrapeSource(ScrapeConfig(targets=[target(exporter.url), slow]), ListSink(),
                          clock=clock)
    try:
        source.run(stop, wait=wait)
    finally:
        exporter.stop()
    assert waits == [12.0, 15.0, 15.0, 15.0]  # to the next 15 s grid point each time
    fast, slow_scraper = source.scrapers
    # fast: T0+3 (baseline), +15, +30, +45; slow (30 s): T0+3 (baseline), +30
    assert (fast.stats.scrapes, fast.stats.events) == (4, 3)
    assert (slow_scraper.stats.scrapes, slow_scraper.stats.events) == (2, 1)


# -- config ----------------------------------------------------------------------------------


def test_config_rejects_what_would_make_invalid_or_doubled_events() -> None:
    base = dict(url="http://e:8000/metrics", engine="vllm", route="r", target_model="m",
                target_revision="1", target_tokenizer="t", num_speculative_tokens=4)
    with pytest.raises(ValidationError, match="go together"):
        ScrapeTarget(**base, draft_model="d")
    with pytest.raises(ValidationError, match="http"):
        ScrapeTarget(**{**base, "url": "e:8000/metrics"})
    with pytest.raises(ValidationError, match="engine"):
        ScrapeTarget(**{**base, "engine": "tgi"})
    with pytest.raises(ValidationError, match="less than or equal"):
        ScrapeTarget(**{**base, "num_speculative_tokens": 65})
    with pytest.raises(ValidationError, match="same series"):
        ScrapeConfig(targets=[base, {**base, "name": "other"}])
    config = ScrapeConfig.model_validate(yaml.safe_load(
        "targets:\n- {url: 'http://e:8000/metrics', engine: sglang, interval: 1m, route: r,\n"
        "   target_model: m, target_revision: '1', target_tokenizer: t,\n"
        "   num_speculative_tokens: 3, labels: {route: r}}\ntimeout: 2s\n"))
    assert config.targets[0].interval == 60.0 and config.timeout == 2.0
    with pytest.raises(ValidationError):
        config.targets[0].route = "x"  # type: ignore[misc]  # frozen


# -- the command line ------------------------------------------------------------------------


def _cli(argv: list[str], scrape: ScrapeConfig) -> int:
    """``specwatch scrape`` as monitor/cli.py registers it, with the config injected."""
    parser = argparse.ArgumentParser(prog="specwatch")
    sub = parser.add_subparsers(dest="command", required=True)

    def with_config(p: argparse.ArgumentParser) -> None:
        p.add_argument("--config")
        p.add_argument("--db")

    def config(args: argparse.Namespace) -> Any:
        return SimpleNamespace(scrape=scrape, kafka=KafkaConfig(), log_level="WARNING")

    register(sub, with_config, config)
    args = parser.parse_args(["scrape", *argv])
    return int(args.func(args))


def test_cli_once_with_state_appends_each_closed_interval(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    rng, truth = random.Random(9), Truth()
    exporter = VllmExporter(start_time=T0)
    out, state = tmp_path / "events.jsonl", tmp_path / "state.json"
    scrape = ScrapeConfig(targets=[target(exporter.url)])
    try:
        assert _cli(["--once", "--out", str(out), "--state", str(state)], scrape) == 0
        assert "1 target(s), 0 event(s)" in capsys.readouterr().err
        exporter.serve("llama-8b", 80, rng, truth)
        assert _cli(["--once", "--out", str(out), "--state", str(state)], scrape) == 0
        exporter.serve("llama-8b", 8, rng, truth)
        assert _cli(["--once", "--out", "-", "--state", str(state)], scrape) == 0
    finally:
        exporter.stop()
    captured = capsys.readouterr()
    written = list(read_jsonl(out))
    assert len(written) == 1 and written[0]["spec"]["drafted_tokens"] == 80 * K
    # The third run fell in the second one's grid slot, or not: either way nothing is lost.
    stdout = [json.loads(line) for line in captured.out.splitlines() if line.strip()]
    saved = json.loads(state.read_text())
    pending = saved["targets"][scrape.targets[0].key]["interval"]["totals"]
    assert (sum(e["spec"]["drafted_tokens"] for e in written + stdout)
            + pending.get("draft_tokens", 0.0)) == truth.drafted["llama-8b"]


def test_cli_once_without_state_is_refused(tmp_path: Path) -> None:
    from monitor.exceptions import ConfigError

    with pytest.raises(ConfigError, match="state file"):
        _cli(["--once", "--out", str(tmp_path / "x.jsonl")],
             ScrapeConfig(targets=[target("http://127.0.0.1:9/metrics")]))
    with pytest.raises(ConfigError, match="no targets"):
        _cli(["--out", "-"], ScrapeConfig())


# -- Kafka -----------------------------------------------------------------------------------


@pytest.mark.broker
def test_events_reach_kafka_keyed_by_route(broker: EmbeddedBroker) -> None:
    from kafka import KafkaConsumer, TopicPartition

    rng, clock = random.Random(8), Clock()
    exporter = VllmExporter(start_time=T0)
    topic = f"scrape-{uuid.uuid4().hex[:8]}"
    config = ScrapeConfig(targets=[target(exporter.url, "llama-8b"),
                                   target(exporter.url, "llama-70b")])
    source = ScrapeSource(config, KafkaSink(broker.bootstrap_servers, topic, partitions=2),
                          clock=clock)
    try:
        source.scrape_once()
        for _ in range(3):
            clock.now += 15
            exporter.serve("llama-8b", 40, rng, None)
            exporter.serve("llama-70b", 40, rng, None)
            source.scrape_once()
    finally:
        exporter.stop()
        source.close()
    assert source.delivered == 6 and source.pending == 0
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap_servers,
                             auto_offset_reset="earliest", enable_auto_commit=False)
    received: list[dict[str, Any]] = []
    partitions: dict[str, set[int]] = {}
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(2)])
        deadline = time.monotonic() + 30
        while len(received) < 6 and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                for record in batch:
                    events, rejections = Parser().parse(record.value)
                    assert rejections == []
                    for e in events:
                        assert e.route == record.key.decode()
                        partitions.setdefault(e.route, set()).add(record.partition)
                    received += orjson.loads(record.value)
    finally:
        consumer.close()
    assert len(received) == 6
    assert all(len(p) == 1 for p in partitions.values())


# -- llama.cpp llama-server ------------------------------------------------------------------


def test_llamacpp_fixture(text_server: TextServer) -> None:
    """llama-server's own exposition: no request counter and no latency histogram; prompt
    tokens are the processed plus the cached ones."""
    model = "qwen-1.5b-code"
    (event,) = _scrape_pair("llamacpp", [
        _meta(text_server.url, "llamacpp", "code", model, 3, {})], text_server)
    assert event["spec"] == {"num_speculative_tokens": 3, "drafted_tokens": 600,
                             "accepted_tokens": 390, "verify_steps": 200,
                             "accepted_per_position": [170, 125, 95], "method": "eagle"}
    assert (event["output_tokens"], event["prompt_tokens"]) == (600, 1200)
    assert event["e2e_ms"] == 0.0 and "ttft_ms" not in event
    assert event["scrape"]["requests"] is None and event["scrape"]["ttft_ms_mean"] is None
    assert event["engine"] == "llamacpp"


LLAMA_COUNTERS = ("prompt_tokens_total", "prompt_tokens_cached_total", "tokens_predicted_total",
                  "n_decode_total", "spec_decode_num_draft_tokens_total",
                  "spec_decode_num_accepted_tokens_total", "spec_decode_num_drafts_total")


class LlamaServer:
    """llama-server's ``/metrics`` the way ``server-task.cpp`` writes it: ``llamacpp:``
    counters with HELP/TYPE lines, 6 significant digits, no process metrics, the labelled
    per-position counter only once a draft was accepted. One instance is one process's life;
    ``draft_ok=False`` is a draft model the server refused (incompatible vocabulary): it
    serves on without speculation, the spec counters stay 0."""

    def __init__(self, k: int, *, draft_ok: bool = True, port: int = 0) -> None:
        self.k, self.draft_ok = k, draft_ok
        self.values = dict.fromkeys(LLAMA_COUNTERS, 0)
        self.per_pos: list[int] = []
        self.server = _Server(self._app, port)

    @property
    def url(self) -> str:
        return self.server.url

    def _app(self, environ: Any, start_response: Any) -> list[bytes]:
        lines = []
        for name, value in self.values.items():
            lines += [f"# HELP llamacpp:{name} counter", f"# TYPE llamacpp:{name} counter",
                      f"llamacpp:{name} {value:g}"]
        lines += ["# TYPE llamacpp:requests_processing gauge", "llamacpp:requests_processing 0"]
        if self.per_pos:
            lines.append("# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter")
            lines += [f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}} '
                      f"{v:g}" for i, v in enumerate(self.per_pos)]
        start_response("200 OK", [("Content-Type", "text/plain; version=0.0.4")])
        return ["\n".join(lines).encode() + b"\n"]

    def serve(self, requests: int, rng: random.Random, p: float, truth: Truth | None) -> None:
        """``requests`` requests of 30 tokens: prefill gives the first, then verification
        steps give the accepted drafts plus one (or one per decode without speculation)."""
        v = self.values
        for _ in range(requests):
            v["prompt_tokens_total"] += 40
            generated = 1
            while generated < 30:
                if not self.draft_ok:
                    generated += 1
                    v["n_decode_total"] += 1
                    continue
                accepted = 0
                while accepted < self.k and rng.random() < p:
                    accepted += 1
                v["spec_decode_num_drafts_total"] += 1
                v["spec_decode_num_draft_tokens_total"] += self.k
                v["spec_decode_num_accepted_tokens_total"] += accepted
                if accepted:
                    self.per_pos += [0] * (self.k - len(self.per_pos))
                for pos in range(accepted):
                    self.per_pos[pos] += 1
                generated += accepted + 1
                if truth is not None:
                    truth.drafts["llama"] += 1
                    truth.drafted["llama"] += self.k
                    truth.accepted["llama"] += accepted
            v["tokens_predicted_total"] += generated
            if truth is not None:
                truth.generated["llama"] += generated
                truth.requests["llama"] += 1

    def stop(self) -> None:
        self.server.stop()


def _llama_target(url: str) -> ScrapeTarget:
    return ScrapeTarget(url=url, engine="llamacpp", route="code", target_model="qwen-1.5b",
                        target_revision="sha256:cc32", target_tokenizer="gguf:qwen2",
                        draft_model="qwen-0.5b", draft_revision="sha256:1d96",
                        draft_tokenizer="gguf:qwen2", method="draft_model",
                        num_speculative_tokens=3)


def test_llamacpp_silent_disablement_raises_speculation_inactive(
    db_url: str, tmp_path: Path
) -> None:
    """llama-server restarted with a draft it refuses keeps serving: its counters went down
    (a reset, there is no process_start_time_seconds), tokens are generated, nothing is
    drafted. Each such interval is an event with drafted 0; after a full detection window of
    them (10 min, 20+ events) the daemon's rule fires."""
    rng, truth, clock = random.Random(4), Truth(), Clock()
    life1 = LlamaServer(3)
    life1.serve(50, rng, 0.7, None)  # before specwatch looked
    out = tmp_path / "scraped.jsonl"
    source = ScrapeSource(ScrapeConfig(targets=[_llama_target(life1.url)]),
                          JsonLinesSink(out), clock=clock)
    produced: list[dict[str, Any]] = []
    try:
        assert source.scrape_once() == []
        for _ in range(8):  # two minutes of speculation
            life1.serve(2, rng, 0.7, truth)
            clock.now += 15
            produced += source.scrape_once()
    finally:
        life1.stop()
    restart = clock.now
    life2 = LlamaServer(3, draft_ok=False, port=life1.server.port)
    try:
        for _ in range(52):  # 13 minutes without it
            life2.serve(2, rng, 0.7, None)
            clock.now += 15
            produced += source.scrape_once()
    finally:
        life2.stop()
        source.close()

    assert len(produced) == 60
    assert_valid_telemetry(produced)
    assert source.scrapers[0].stats.resets == 1
    before, after = produced[:8], produced[8:]
    assert [sum(e["spec"][f] for e in before) for f in (
        "drafted_tokens", "accepted_tokens", "verify_steps")] == [
        truth.drafted["llama"], truth.accepted["llama"], truth.drafts["llama"]]
    assert sum(e["output_tokens"] for e in before) == truth.generated["llama"]
    assert all(sum(e["spec"]["accepted_per_position"]) == e["spec"]["accepted_tokens"]
               for e in before)
    # spec present (the target speculates), nothing drafted, tokens still generated
    assert all(e["spec"]["drafted_tokens"] == 0 and e["output_tokens"] > 0 for e in after)
    assert after[0]["scrape"]["counter_resets"] == 1
    assert all("accepted_per_position" not in e["spec"] for e in after)

    assert main(["replay", str(out), "--db", db_url, "--migrate", "--no-progress"]) == 0
    with Store(db_url) as store:
        alerts = store.alerts(rule="speculation_inactive")
        rows = store.ratios(granularity="day")
    assert [(a.state, a.labels["route"]) for a in alerts] == [("firing", "code")]
    # not before a whole window (10 one-minute buckets, the oldest partly) had no drafting
    assert alerts[0].at.timestamp() >= restart + 9 * 60
    assert sum(r.drafted_tokens for r in rows) == truth.drafted["llama"]
    assert sum(r.drafting_requests for r in rows) == 8


def test_llamacpp_counters_past_a_million_are_rounded_not_reset(text_server: TextServer
                                                                ) -> None:
    """llama-server prints 6 significant digits: past 10^6 an increase is exact only to that
    precision, and a rounded counter never goes down, so it is never mistaken for a reset."""
    clock = Clock()
    scraper = EngineScraper(_llama_target(text_server.url), clock=clock)

    def body(drafts: int, drafted: int, accepted: int, generated: int) -> str:
        return "".join(f"# TYPE llamacpp:{n} counter\nllamacpp:{n} {v:g}\n" for n, v in (
            ("spec_decode_num_drafts_total", drafts),
            ("spec_decode_num_draft_tokens_total", drafted),
            ("spec_decode_num_accepted_tokens_total", accepted),
            ("tokens_predicted_total", generated)))

    text_server.body = body(333_335, 1_000_004, 700_001, 1_100_000)
    assert "1e+06" in text_server.body and scraper.scrape_once() is None
    text_server.body = body(333_535, 1_000_609, 700_391, 1_100_600)
    clock.now += 15
    event = scraper.scrape_once()
    assert event is not None and scraper.stats.resets == 0
    spec = event["spec"]
    # printed 1e+06 -> 1.00061e+06 and 700001 -> 700391: 610 drafted (605 really), 390
    assert (spec["drafted_tokens"], spec["accepted_tokens"], spec["verify_steps"]) == (
        610, 390, 200)
    assert event["output_tokens"] == 600
