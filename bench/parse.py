"""Micro benchmark of Parser.parse: events/s for batched and single-event messages.

Run from the repo root: ``python bench/parse.py``. Not a test: numbers depend on the machine.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from monitor.telemetry.parse import Parser  # noqa: E402

BATCH = 100
N_EVENTS = 200_000


def make_event(i: int) -> dict[str, object]:
    """An event shaped like the spec's example (~560 bytes serialised)."""
    return {
        "request_id": f"r-{i:08d}",
        "ts": f"2026-11-02T14:{(i // 60) % 60:02d}:{i % 60:02d}.{i % 1000:03d}Z",
        "route": ("code-assistant", "creative-writing", "chat")[i % 3],
        "status": "ok",
        "target": {
            "model": "llama-3.1-70b-instruct",
            "revision": "2026-10-28",
            "tokenizer": "llama3",
        },
        "draft": {
            "model": "llama-3.2-1b-instruct",
            "revision": "2026-09-30",
            "tokenizer": "llama3",
            "pinned_target_revision": "2026-09-15",
        },
        "spec": {
            "num_speculative_tokens": 5,
            "drafted_tokens": 240,
            "accepted_tokens": 171,
            "verify_steps": 48,
            "accepted_per_position": [44, 39, 34, 29, 25],
        },
        "prompt_tokens": 812 + i % 100,
        "output_tokens": 219,
        "ttft_ms": 142.0,
        "e2e_ms": 2311.5 + i % 7,
        "batch_size": 12,
        "instance": f"pod-{i % 8}",
        "engine": "vllm",
    }


def rate(messages: list[bytes], events_per_message: int, work: object) -> float:
    best = 0.0
    for _ in range(5):
        start = time.perf_counter()
        for m in messages:
            work(m)  # type: ignore[operator]
        elapsed = time.perf_counter() - start
        best = max(best, len(messages) * events_per_message / elapsed)
    return best


def main() -> None:
    events = [make_event(i) for i in range(N_EVENTS)]
    singles = [orjson.dumps(e) for e in events]
    batches = [orjson.dumps(events[i : i + BATCH]) for i in range(0, N_EVENTS, BATCH)]
    lines = [b"\n".join(singles[i : i + BATCH]) for i in range(0, N_EVENTS, BATCH)]
    parser = Parser()
    slow = Parser(fast=False)
    found, rejected = parser.parse(batches[0])
    assert len(found) == BATCH and not rejected, rejected
    assert slow.parse(batches[0]) == (found, rejected)
    size = sum(map(len, singles)) / len(singles)
    print(f"mean event size {size:.0f} bytes, {BATCH} events per batch, best of 5")
    print(f"orjson.loads only, batched  : {rate(batches, BATCH, orjson.loads):>10,.0f} events/s")
    print(f"Parser.parse, batched       : {rate(batches, BATCH, parser.parse):>10,.0f} events/s")
    print(f"Parser.parse, single events : {rate(singles, 1, parser.parse):>10,.0f} events/s")
    print(f"Parser.parse, JSON lines    : {rate(lines, BATCH, parser.parse):>10,.0f} events/s")
    print("without the msgspec fast path (Parser(fast=False)):")
    print(f"Parser.parse, batched       : {rate(batches, BATCH, slow.parse):>10,.0f} events/s")
    print(f"Parser.parse, single events : {rate(singles, 1, slow.parse):>10,.0f} events/s")
    print(f"Parser.parse, JSON lines    : {rate(lines, BATCH, slow.parse):>10,.0f} events/s")


if __name__ == "__main__":
    main()
