from __future__ import annotations

import argparse
import gzip
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from monitor.simulate import register
from tests.helpers import read_topic
from tests.monitor.simulate.shape import check_event, ts_of

START = "2026-11-02T12:00:00Z"


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="specwatch")
    register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["simulate", *argv])


def run(*argv: str) -> int:
    args = parse(*argv)
    return int(args.func(args))


def lines(path: Path) -> list[dict[str, Any]]:
    data = path.read_bytes()
    if path.name.endswith(".gz"):
        data = gzip.decompress(data)
    return [orjson.loads(line) for line in data.splitlines()]


def test_writes_a_file_and_a_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "a.jsonl"
    assert run("--duration", "2m", "--rate", "20", "--seed", "3", "--start", START,
               "--out", str(out)) == 0
    events = lines(out)
    summary = capsys.readouterr().err
    assert summary.count("\n") == 1 and f"{len(events)} events" in summary
    for route, n in Counter(e["route"] for e in events).items():
        assert f"{route} {n}" in summary
    assert all(ts_of(e) >= ts_of({"ts": "2026-11-02T12:00:00.000Z"}) for e in events)
    for e in events:
        check_event(e)
    # the same arguments give the same bytes
    again = tmp_path / "b.jsonl"
    run("--duration", "2m", "--rate", "20", "--seed", "3", "--start", START, "--out", str(again))
    assert again.read_bytes() == out.read_bytes()


def test_scenario_incidents_and_noise(tmp_path: Path) -> None:
    out = tmp_path / "inc.jsonl.gz"
    assert run("--scenario", "quiet", "--duration", "30m", "--rate", "10", "--start", START,
               "--incident", "silence:route=chat,at=0s",
               "--incident", "speculation_off:route=code-assistant,at=10m",
               "--duplicates", "0.05", "--late", "0.05", "--late-max", "1m",
               "--out", str(out)) == 0
    events = lines(out)
    assert not any(e["route"] == "chat" for e in events)
    late_code = [e for e in events if e["route"] == "code-assistant"
                 and ts_of(e) >= ts_of({"ts": "2026-11-02T12:10:00.000Z"})]
    assert late_code and all(e["spec"]["drafted_tokens"] == 0 for e in late_code)
    assert len({e["request_id"] for e in events}) < len(events)  # duplicates present


def test_default_start_ends_now(tmp_path: Path) -> None:
    out = tmp_path / "now.jsonl"
    assert run("--duration", "10m", "--rate", "5", "--out", str(out)) == 0
    events = lines(out)
    assert time.time() - 11 * 60 < ts_of(events[0]) < ts_of(events[-1]) < time.time() + 60


def test_stdout_is_the_default(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    assert run("--duration", "20s", "--rate", "5", "--start", START) == 0
    captured = capsysbinary.readouterr()
    events = [orjson.loads(line) for line in captured.out.splitlines()]
    assert events and f"{len(events)} events".encode() in captured.err


@pytest.mark.parametrize(
    "argv",
    [
        ["--incident", "meltdown:route=chat"],
        ["--duration", "soon"],
        ["--duplicates", "2"],
        ["--scenario", "nope"],
        ["--rate", "0"],
        ["--out", "x.jsonl", "--kafka", "127.0.0.1:9"],
    ],
)
def test_usage_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parse(*argv)
    assert info.value.code == 2
    assert "error" in capsys.readouterr().err


def test_incident_on_an_unknown_route(capsys: pytest.CaptureFixture[str]) -> None:
    assert run("--incident", "silence:route=nowhere", "--out", "-") == 2
    assert "nowhere" in capsys.readouterr().err


@pytest.mark.broker
def test_kafka(broker: Any, capsys: pytest.CaptureFixture[str]) -> None:
    topic = f"cli-{uuid.uuid4().hex[:8]}"
    assert run("--duration", "1m", "--rate", "20", "--start", START, "--kafka",
               broker.bootstrap_servers, "--topic", topic, "--batch-size", "25") == 0
    summary = capsys.readouterr().err
    sent = int(summary.split(" events")[0].rsplit(" ", 1)[1])
    records = read_topic(broker.bootstrap_servers, topic, sent)
    assert sum(len(orjson.loads(r.value)) for r in records) == sent


@pytest.mark.broker
def test_kafka_realtime(broker: Any) -> None:
    topic = f"live-{uuid.uuid4().hex[:8]}"
    started = time.time()
    # 60 simulated seconds at speed 60: about one wall second, ~20 x 60 events
    assert run("--realtime", "--speed", "60", "--duration", "60s", "--rate", "20",
               "--kafka", broker.bootstrap_servers, "--topic", topic) == 0
    elapsed = time.time() - started
    assert 0.8 < elapsed < 10
    records = read_topic(broker.bootstrap_servers, topic, 500)
    events = [e for r in records for e in orjson.loads(r.value)]
    assert 500 < len(events) < 2500
    assert all(started - 1 < ts_of(e) < started + elapsed + 1 for e in events)


def test_realtime_to_a_file(tmp_path: Path) -> None:
    out = tmp_path / "live.jsonl"
    started = time.time()
    assert run("--realtime", "--speed", "30", "--duration", "30s", "--rate", "10",
               "--out", str(out)) == 0
    events = lines(out)
    assert 100 < len(events) < 600
    assert all(started - 1 < ts_of(e) < time.time() + 1 for e in events)


def test_start_does_not_go_with_realtime(capsys: pytest.CaptureFixture[str]) -> None:
    assert run("--realtime", "--start", START, "--out", "-") == 2
    assert "--start" in capsys.readouterr().err
