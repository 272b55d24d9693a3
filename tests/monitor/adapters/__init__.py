"""Tests of monitor/adapters; the engine fixtures live in tests/fixtures/engines/adapters/."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson

from monitor.adapters.defaults import Defaults, load_mapping
from monitor.telemetry.parse import Parser

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "engines" / "adapters"
MAPPING = FIXTURES / "mapping.yaml"
# ts for outputs without a wall-clock time: 2026-11-02T14:07:30Z, next to the fixtures' times
PINNED_TS = 1793628450.0


def outputs(engine: str) -> list[dict[str, Any]]:
    """The fixture request outputs of one engine, in file order."""
    path = FIXTURES / f"{engine}.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def defaults(target_model: str | None = None, **flags: Any) -> Defaults:
    """The fixtures' mapping, a pinned clock and any flags."""
    return Defaults(target_model=target_model, models=load_mapping(MAPPING),
                    clock=lambda: PINNED_TS, **flags)


def event_ts(event: dict[str, Any]) -> float:
    """The event's ts in Unix seconds, as the parser reads it."""
    return Parser().parse(orjson.dumps(event))[0][0].ts


def parses_cleanly(event: dict[str, Any]) -> None:
    """specwatch's own parser takes the event as it will be written, without rejection."""
    events, rejections = Parser().parse(orjson.dumps(event))
    assert rejections == [], rejections
    assert len(events) == 1
