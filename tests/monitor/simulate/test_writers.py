from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import orjson
import pytest

from monitor.simulate import SimulationConfig, Simulator, write_file


@pytest.fixture(scope="module")
def events() -> list[dict[str, Any]]:
    return list(Simulator(SimulationConfig(duration_s=300, rate=20, seed=4)).events())


def read_lines(data: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in data.splitlines()]


def test_jsonl(tmp_path: Path, events: list[dict[str, Any]]) -> None:
    path = tmp_path / "out" / "events.jsonl"  # parent is created
    assert write_file(events, path) == len(events)
    data = path.read_bytes()
    assert data.endswith(b"\n") and data.count(b"\n") == len(events)
    assert read_lines(data) == events


def test_jsonl_gz(tmp_path: Path, events: list[dict[str, Any]]) -> None:
    path = tmp_path / "events.jsonl.gz"
    assert write_file(iter(events), str(path)) == len(events)
    raw = path.read_bytes()
    assert raw[:2] == b"\x1f\x8b"
    assert read_lines(gzip.decompress(raw)) == events


def test_stdout(capsysbinary: pytest.CaptureFixture[bytes], events: list[dict[str, Any]]) -> None:
    assert write_file(events[:10], "-", flush=True) == 10
    assert read_lines(capsysbinary.readouterr().out) == events[:10]


def test_empty(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    assert write_file([], path) == 0
    assert path.read_bytes() == b""
