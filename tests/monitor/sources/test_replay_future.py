"""Replay with future-dated events among valid ones: refused as ``future``, everything else
exact, and nothing of them left behind for the next file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from monitor.cli import main
from monitor.store.store import Store
from monitor.telemetry.serialize import format_ts
from tests.helpers import _ts, assert_exact, read_jsonl

LATENESS = 120.0
DAY = 86400.0


def _simulate(path: Path, start: str, duration: str, seed: int) -> list[dict[str, Any]]:
    assert main(["simulate", "--duration", duration, "--rate", "0.5", "--seed", str(seed),
                 "--duplicates", "0.02", "--start", start, "--out", str(path)]) == 0
    return list(read_jsonl(path))


def _ahead(event: dict[str, Any], seconds: float, rid: str) -> dict[str, Any]:
    return {**event, "request_id": rid, "ts": format_ts(_ts(event["ts"]) + seconds)}


def _write(path: Path, events: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A day-old file with one event 2 days and one 70 years ahead among ~650 valid ones
    (the issue's case), and a clean file that follows it."""
    d = tmp_path_factory.mktemp("future")
    valid = _simulate(d / "valid.jsonl", "2026-11-20T08:00:00Z", "22m", 13)
    later = _simulate(d / "later.jsonl", "2026-11-20T08:30:00Z", "12m", 14)
    poisoned = list(valid)
    poisoned.insert(101, _ahead(valid[100], 2 * DAY, "future-2d"))
    poisoned.insert(300, _ahead(valid[298], 70 * 365 * DAY, "future-70y"))
    return {"valid": valid, "later": later, "poisoned": _write(d / "poisoned.jsonl", poisoned),
            "later_path": d / "later.jsonl"}


def test_future_events_are_refused_and_the_rest_counts_then_a_clean_file_in_full(
    files: dict[str, Any], db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dead = tmp_path / "dead.jsonl"
    assert len(files["valid"]) > 600
    assert main(["replay", str(files["poisoned"]), "--db", db_url, "--migrate",
                 "--no-progress", "--dead-letter", str(dead)]) == 0
    summary = capsys.readouterr().err.strip().splitlines()[-1]
    assert ", 0 late, 2 future" in summary
    records = [json.loads(line) for line in dead.read_text().splitlines()]
    assert [json.loads(r["raw"])["request_id"] for r in records] == ["future-2d", "future-70y"]
    assert all(r["reason"].startswith("future: ") for r in records)
    assert [r["origin"]["line"] for r in records] == [102, 301]
    with Store(db_url) as store:
        assert_exact(store, files["valid"], lateness=LATENESS)
    # Nothing of them stayed behind: the next file counts in full.
    assert main(["replay", str(files["later_path"]), "--db", db_url, "--no-progress"]) == 0
    summary = capsys.readouterr().err.strip().splitlines()[-1]
    assert ", 0 late, 0 future" in summary
    with Store(db_url) as store:
        assert_exact(store, files["valid"] + files["later"], lateness=LATENESS)


def test_now_judges_an_old_file_against_the_time_given(
    files: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = f"sqlite:///{tmp_path / 'now.db'}"
    dead = tmp_path / "dead.jsonl"
    valid = files["valid"]
    cut = _ts(valid[len(valid) // 2]["ts"])
    assert main(["replay", str(files["poisoned"]), "--db", db, "--migrate", "--no-progress",
                 "--now", format_ts(cut - 300), "--dead-letter", str(dead)]) == 0
    capsys.readouterr()
    records = [json.loads(line) for line in dead.read_text().splitlines()]
    future = [r for r in records if r["reason"].startswith("future: ")]
    want = [e for e in valid if _ts(e["ts"]) > cut]
    assert len(future) == len(want) + 2  # a refused event is not remembered: its copies too
    assert all("ahead of --now" in r["reason"] for r in future)
    with Store(db) as store:
        assert_exact(store, [e for e in valid if _ts(e["ts"]) <= cut], lateness=LATENESS)
