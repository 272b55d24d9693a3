"""replay's dead-letter file cuts oversized input as the dead-letter topic does."""

from __future__ import annotations

import gzip
import hashlib
import json
import tracemalloc
from pathlib import Path

import pytest

from monitor.cli import main
from monitor.config import KafkaConfig

HUGE = 20 * 1024 * 1024


@pytest.mark.parametrize("suffix", ["jsonl", "jsonl.gz"])
def test_a_huge_line_is_cut_with_its_size_and_sha256(tmp_path: Path, suffix: str) -> None:
    huge = b'{"request_id": "' + b"x" * HUGE + b'"}'
    data = b"\n" + huge + b"\n"
    path = tmp_path / f"t.{suffix}"
    path.write_bytes(gzip.compress(data, compresslevel=1) if suffix.endswith("gz") else data)
    dead = tmp_path / "dead.jsonl"
    url = f"sqlite:///{tmp_path / 'x.db'}"
    # Everything imported and the database created first: the peak below is the replay's.
    assert main(["replay", str(tmp_path / "none.jsonl"), "--db", url, "--no-progress"]) == 2
    assert main(["db", "upgrade", "--db", url]) == 0
    tracemalloc.start()
    try:
        assert main(["replay", str(path), "--db", url, "--no-progress",
                     "--dead-letter", str(dead)]) == 0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The line itself, and one copy while it is read: never the text and JSON copies too.
    assert peak < 2.5 * len(huge), peak / len(huge)
    records = [json.loads(line) for line in dead.read_bytes().splitlines()]
    assert len(records) == 1, [(r["reason"], r["origin"]) for r in records]
    [record] = records
    cut = KafkaConfig().dead_letter_max_bytes
    assert record["reason"].startswith("message too large")
    assert record["origin"]["line"] == 2
    assert record["truncated"] is True
    assert record["raw_bytes"] == len(huge)
    assert record["raw_sha256"] == hashlib.sha256(huge).hexdigest()
    assert record["raw"].encode() == huge[:cut]
