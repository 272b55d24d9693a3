"""Latency the telemetry proxy adds on loopback: the same requests sent directly to a fast fake
engine and through ``specwatch proxy``, interleaved, one at a time.

Run from the repo root: ``python bench/proxy_latency.py [--requests 2000] [--runs 3]
[--shadow-rate 1.0] [--no-shadow]``.

Three processes: the fake engine (a bare asyncio HTTP/1.1 server answering a fixed
llama.cpp-shaped chat completion, or a stream of ``--chunks`` server-sent events whose last
one carries ``timings``), the proxy (the real ``specwatch proxy`` command, publishing to the
bundled Kafka broker unless ``--no-kafka``), and this client (one keep-alive connection to
each, ``http.client``). Each pair of requests goes direct and proxied in random order, so
both see the same machine load. "Added" is the proxied percentile minus the direct one, for
the time from sending the request to having read the whole response. The verdict (target:
p99 under 2 ms) is taken on the median run. Not a test: numbers depend on the machine and
on what else runs on it.

Two cases, each with its own proxy process: shadowing off, then shadowing on
(``--shadow-upstream`` to a second fake engine answering without draft counters, at
``--shadow-rate``, 1.0 by default: every request is greedy, so every one is shadowed, the
worst case). A shadow request starts once the caller's response is complete and runs on the
proxy's event loop while the next measured request goes through, which is what this case
measures. The shadow counters (published, dropped, failed) are printed after it.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from multiprocessing import Process
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

TARGET_P99_MS = 2.0

_JSON = json.dumps({
    "id": "chatcmpl-bench", "object": "chat.completion", "created": 1793628180,
    "model": "bench", "choices": [{"index": 0, "finish_reason": "stop",
                                   "message": {"role": "assistant", "content": "x" * 200}}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 40, "total_tokens": 52},
    "timings": {"prompt_n": 12, "prompt_ms": 5.0, "predicted_n": 40, "predicted_ms": 80.0,
                "draft_n": 30, "draft_n_accepted": 21},
}).encode()


def _sse(chunks: int) -> bytes:
    parts = []
    for i in range(chunks):
        parts.append(b"data: " + json.dumps({
            "id": "chatcmpl-bench", "object": "chat.completion.chunk", "model": "bench",
            "choices": [{"index": 0, "delta": {"content": f"tok{i} "}, "finish_reason": None}],
        }).encode() + b"\n\n")
    parts.append(b"data: " + json.dumps({
        "id": "chatcmpl-bench", "object": "chat.completion.chunk", "model": "bench",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": chunks},
        "timings": {"predicted_n": chunks, "predicted_ms": 80.0, "draft_n": 30,
                    "draft_n_accepted": 21},
    }).encode() + b"\n\n")
    parts.append(b"data: [DONE]\n\n")
    return b"".join(parts)


def _no_draft(data: bytes) -> bytes:
    """The same answer from an engine that does not speculate (no draft counters)."""
    out = data.replace(b', "draft_n": 30, "draft_n_accepted": 21', b"")
    assert out != data, "the fake answer's draft counters moved"
    return out


def _engine(port: int, chunks: int, drafts: bool = True) -> None:
    """The fake engine: answers each request at once (its own cost is the same either way)."""
    body = _JSON if drafts else _no_draft(_JSON)
    json_response = (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                     b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    stream = _sse(chunks) if drafts else _no_draft(_sse(chunks))
    events = [e + b"\n\n" for e in stream.split(b"\n\n") if e]
    stream_head = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                   b"transfer-encoding: chunked\r\n\r\n")

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = await reader.readexactly(length) if length else b""
                if b'"stream": true' in body or b'"stream":true' in body:
                    writer.write(stream_head)
                    for event in events:  # one network write per event, as an engine does
                        writer.write(b"%x\r\n%s\r\n" % (len(event), event))
                        await writer.drain()
                    writer.write(b"0\r\n\r\n")
                else:
                    writer.write(json_response)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", port)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"nothing listens on 127.0.0.1:{port} after {timeout}s"
                                 ) from None
            time.sleep(0.05)


def _request(conn: http.client.HTTPConnection, body: bytes) -> float:
    start = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", body=body,
                 headers={"content-type": "application/json", "x-route": "bench"})
    response = conn.getresponse()
    response.read()
    elapsed = time.perf_counter() - start
    if response.status != 200:
        raise SystemExit(f"request failed: HTTP {response.status}")
    return elapsed * 1000.0


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _measure(direct_port: int, proxy_port: int, body: bytes, n: int, warmup: int
             ) -> tuple[list[float], list[float]]:
    """``body`` has ``"hi"`` as its prompt: each pair gets a prompt of its own, so that the
    shadow sampler (by prompt hash) picks its share of them."""
    head, tail = body.split(b'"hi"', 1)
    direct = http.client.HTTPConnection("127.0.0.1", direct_port)
    proxied = http.client.HTTPConnection("127.0.0.1", proxy_port)
    rng = random.Random(7)
    d: list[float] = []
    p: list[float] = []
    for i in range(warmup + n):
        order = [(direct, d), (proxied, p)]
        rng.shuffle(order)
        prompt = b'%s"hi %d"%s' % (head, i, tail)
        for conn, out in order:
            ms = _request(conn, prompt)
            if i >= warmup:
                out.append(ms)
    direct.close()
    proxied.close()
    return d, p


def _metric(port: int, name: str) -> float:
    conn = http.client.HTTPConnection("127.0.0.1", port)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name) and not line.startswith("#"))


def _proxy(args: argparse.Namespace, tmp: Path, label: str, engine_port: int, bootstrap: str,
           extra: list[str]) -> tuple[subprocess.Popen[bytes], int, int, Any]:
    proxy_port, metrics_port = _free_port(), _free_port()
    log = open(tmp / f"proxy-{label}.log", "wb")  # noqa: SIM115 - closed by the caller
    proc = subprocess.Popen(
        [sys.executable, "-m", "monitor", "proxy", "--upstream",
         f"http://127.0.0.1:{engine_port}", "--listen", f"127.0.0.1:{proxy_port}",
         "--metadata", str(tmp / "proxy.yaml"), "--bootstrap", bootstrap,
         "--topic", "bench.proxy", "--metrics-port", str(metrics_port), *extra],
        cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    return proc, proxy_port, metrics_port, log


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process so far (Linux /proc; None elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _case(args: argparse.Namespace, label: str, engine_port: int, proxy_port: int,
          metrics_port: int, kinds: dict[str, bytes], pid: int
          ) -> tuple[bool, dict[str, float]]:
    """Measure every kind through one proxy; the verdict and the median added p99s.

    Also the proxy process's CPU time per proxied request: unlike the percentiles it does
    not depend on how long the process waited for a core, so it shows what shadowing costs
    even on a machine too busy for the tail to mean much."""
    _wait_port(proxy_port)
    _wait_port(metrics_port)
    verdict = True
    p99s: dict[str, float] = {}
    for kind, body in kinds.items():
        added99, added50 = [], []
        cpu0 = _cpu_seconds(pid)
        for run in range(1, args.runs + 1):
            d, p = _measure(engine_port, proxy_port, body, args.requests, args.warmup)
            a50 = _pct(p, 0.50) - _pct(d, 0.50)
            a99 = _pct(p, 0.99) - _pct(d, 0.99)
            added50.append(a50)
            added99.append(a99)
            print(f"  {label} {kind:13s} run {run}: direct p50 {_pct(d, .5):.3f} p99 "
                  f"{_pct(d, .99):.3f} ms | proxied p50 {_pct(p, .5):.3f} p99 "
                  f"{_pct(p, .99):.3f} ms | added p50 {a50:.3f} p99 {a99:.3f} ms "
                  f"(load {os.getloadavg()[0]:.2f})")
        cpu1 = _cpu_seconds(pid)
        if cpu0 is not None and cpu1 is not None:
            per = (cpu1 - cpu0) * 1000.0 / (args.runs * (args.requests + args.warmup))
            print(f"  {label} {kind}: proxy CPU {per:.3f} ms per proxied request (its shadow "
                  f"requests included)")
        m99, m50 = statistics.median(added99), statistics.median(added50)
        ok = m99 < TARGET_P99_MS
        verdict &= ok
        p99s[kind] = m99
        print(f"{'PASS' if ok else 'FAIL'}: {label} {kind} added latency p50 {m50:.3f} ms, "
              f"p99 {m99:.3f} ms (median of {args.runs} runs; target p99 < "
              f"{TARGET_P99_MS} ms)")
    # let the publisher's linger (and the last shadow requests) pass before reading counters
    time.sleep(1.0)
    events = _metric(metrics_port, "specwatch_proxy_events_total")
    sent = _metric(metrics_port, "specwatch_publisher_sent_total")
    dropped = _metric(metrics_port, "specwatch_publisher_dropped_total")
    print(f"  {label}: proxy published {events:.0f} caller events: {sent:.0f} events "
          f"acknowledged by Kafka (shadow ones included), {dropped:.0f} dropped")
    shadow = {o: _metric(metrics_port, "specwatch_proxy_shadow_requests_total{outcome=\""
                         + o + '"}') for o in ("published", "dropped", "failed")}
    if any(shadow.values()):
        print(f"  {label}: shadow requests published {shadow['published']:.0f}, dropped "
              f"(in flight limit) {shadow['dropped']:.0f}, failed {shadow['failed']:.0f}")
    return verdict, p99s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=2000, help="measured pairs per kind and run")
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--chunks", type=int, default=32, help="events of a streamed response")
    ap.add_argument("--shadow-rate", type=float, default=1.0,
                    help="share of (greedy) requests shadowed in the shadowing-on case")
    ap.add_argument("--no-shadow", action="store_true", help="skip the shadowing-on case")
    ap.add_argument("--no-kafka", action="store_true",
                    help="publish to a closed port instead (events are counted as dropped)")
    args = ap.parse_args()

    engine_port, shadow_port = _free_port(), _free_port()
    engine = Process(target=_engine, args=(engine_port, args.chunks), daemon=True)
    engine.start()
    shadow_engine = Process(target=_engine, args=(shadow_port, args.chunks, False), daemon=True)
    shadow_engine.start()
    broker = None
    if args.no_kafka:
        bootstrap = f"127.0.0.1:{_free_port()}"
    else:
        from monitor.broker import EmbeddedBroker

        broker = EmbeddedBroker().start()
        bootstrap = broker.bootstrap_servers
    cases: list[tuple[str, list[str]]] = [("shadow-off", [])]
    if not args.no_shadow:
        cases.append(("shadow-on", ["--shadow-upstream", f"http://127.0.0.1:{shadow_port}",
                                    "--shadow-rate", str(args.shadow_rate)]))
    verdict = True
    summary: dict[str, dict[str, float]] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp_name:
            tmp = Path(tmp_name)
            (tmp / "proxy.yaml").write_text(json.dumps({
                "engine": "llamacpp",
                "models": {"*": {
                    "target": {"model": "bench-target", "revision": "1", "tokenizer": "t"},
                    "draft": {"model": "bench-draft", "revision": "1", "tokenizer": "t"},
                    "spec": {"method": "draft_model", "num_speculative_tokens": 3}}},
            }))
            _wait_port(engine_port)
            _wait_port(shadow_port)
            # greedy, so that the shadowing-on case shadows them
            kinds = {
                "non-streaming": json.dumps({"model": "bench", "temperature": 0, "messages": [
                    {"role": "user", "content": "hi"}]}).encode(),
                "streaming": json.dumps({"model": "bench", "stream": True, "temperature": 0,
                                         "messages": [{"role": "user", "content": "hi"}]}
                                        ).encode(),
            }
            print(f"proxy_latency: {args.runs} run(s) x {args.requests} request pairs per kind "
                  f"(+{args.warmup} warm-up), {args.chunks} events per stream, Kafka "
                  f"{'off (closed port)' if args.no_kafka else bootstrap}, cases "
                  f"{', '.join(c for c, _ in cases)} (shadow rate {args.shadow_rate:g}), "
                  f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
            for label, extra in cases:
                proc, proxy_port, metrics_port, log = _proxy(args, tmp, label, engine_port,
                                                             bootstrap, extra)
                try:
                    ok, summary[label] = _case(args, label, engine_port, proxy_port,
                                               metrics_port, kinds, proc.pid)
                    verdict &= ok
                finally:
                    _stop(proc)
                    log.close()
    finally:
        engine.terminate()
        shadow_engine.terminate()
        engine.join(5)
        shadow_engine.join(5)
        if broker is not None:
            broker.stop()
    if "shadow-on" in summary:
        for kind, p99 in summary["shadow-on"].items():
            print(f"shadowing on, {kind}: added p99 {p99:.3f} ms (shadowing off: "
                  f"{summary['shadow-off'][kind]:.3f} ms); target < {TARGET_P99_MS} ms")
    return 0 if verdict else 1


if __name__ == "__main__":
    sys.exit(main())
