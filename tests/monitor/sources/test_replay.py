"""Replay: the whole pipeline on a file, exact against an independent oracle."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from monitor.cli import main
from monitor.store.store import Store
from tests.helpers import oracle, read_jsonl, table

# Late events count in the tables up to the dedup horizon (default 15 min); the detectors'
# own allowance (2 min) does not cut the tables.
HORIZON = 900.0


@pytest.fixture(scope="module")
def traffic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """>= 200,000 simulated events over two days with duplicates and late arrivals, many
    of them later than the detectors' allowance (up to 10 minutes)."""
    path = tmp_path_factory.mktemp("replay") / "traffic.jsonl"
    rc = main([
        "simulate", "--scenario", "incidents", "--duration", "2d", "--rate", "1.25",
        "--seed", "20261129", "--duplicates", "0.03", "--late", "0.05", "--late-max", "10m",
        "--start", "2026-11-01T00:00:00Z", "--out", str(path),
    ])
    assert rc == 0
    return path


def test_simulated_file_is_big_and_noisy(traffic: Path) -> None:
    events = list(read_jsonl(traffic))
    assert len(events) >= 200_000
    ids = [e["request_id"] for e in events]
    assert len(set(ids)) < len(ids)  # duplicates present


def test_hourly_table_equals_exact_sums(traffic: Path, db_url: str, tmp_path: Path) -> None:
    dead = tmp_path / "dead.jsonl"
    rc = main(["replay", str(traffic), "--db", str(db_url), "--migrate", "--no-progress",
               "--dead-letter", str(dead)])
    assert rc == 0
    expected = oracle(read_jsonl(traffic), lateness=HORIZON, granularity="hour")
    with Store(db_url) as store:
        for granularity in ("minute", "hour", "day"):
            got = table(store.ratios(granularity=granularity))
            want = oracle(read_jsonl(traffic), lateness=HORIZON, granularity=granularity)
            assert got == want, granularity
    assert sum(v[0] for v in expected.values()) > 190_000
    # Every event is within the horizon: none is lost, however late for the detectors.
    assert not dead.exists() or not dead.read_text().strip()
    # and the tables equal the file's exact sums with no lateness cut at all
    assert expected == oracle(read_jsonl(traffic), lateness=float("inf"), granularity="hour")


def test_gzip_and_stdin_give_the_same_tables(traffic: Path, tmp_path: Path) -> None:
    gz = tmp_path / "traffic.jsonl.gz"
    with gzip.open(gz, "wb") as out:
        out.write(traffic.read_bytes()[: 4_000_000])
    a, b = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    assert main(["replay", str(gz), "--db", a, "--migrate", "--no-progress"]) == 0
    data = gzip.decompress(gz.read_bytes())
    proc = subprocess.run(
        [sys.executable, "-m", "monitor", "replay", "-", "--db", b, "--migrate"],
        input=data, capture_output=True, check=True,
    )
    # Not a terminal: one summary line, no progress bar.
    summary = proc.stderr.decode().strip().splitlines()[-1]
    assert "events counted" in summary and "events/s" in summary
    with Store(a) as sa, Store(b) as sb:
        assert table(sa.ratios(granularity="minute")) == table(sb.ratios(granularity="minute"))


def test_replaying_the_same_file_twice_counts_nothing_new(traffic: Path, tmp_path: Path) -> None:
    part = tmp_path / "part.jsonl"
    part.write_bytes(b"".join(traffic.read_bytes().splitlines(keepends=True)[:20_000]))
    url = f"sqlite:///{tmp_path / 'twice.db'}"
    assert main(["replay", str(part), "--db", url, "--migrate", "--no-progress"]) == 0
    with Store(url) as store:
        first = table(store.ratios(granularity="hour"))
    assert main(["replay", str(part), "--db", url, "--no-progress"]) == 0
    with Store(url) as store:
        assert table(store.ratios(granularity="hour")) == first


def test_split_replay_equals_one_replay(traffic: Path, tmp_path: Path) -> None:
    lines = traffic.read_bytes().splitlines(keepends=True)[:60_000]
    whole, first, second = (tmp_path / n for n in ("whole.jsonl", "1.jsonl", "2.jsonl"))
    whole.write_bytes(b"".join(lines))
    first.write_bytes(b"".join(lines[:25_000]))
    second.write_bytes(b"".join(lines[25_000:]))
    one, two = f"sqlite:///{tmp_path / 'one.db'}", f"sqlite:///{tmp_path / 'two.db'}"
    assert main(["replay", str(whole), "--db", one, "--migrate", "--no-progress"]) == 0
    assert main(["replay", str(first), "--db", two, "--migrate", "--no-progress"]) == 0
    assert main(["replay", str(second), "--db", two, "--no-progress"]) == 0
    with Store(one) as s1, Store(two) as s2:
        assert table(s1.ratios(granularity="minute")) == table(s2.ratios(granularity="minute"))


def test_bad_input_corpus_through_replay(tmp_path: Path) -> None:
    from tests.monitor.telemetry.bad_inputs import bad_input_corpus

    # A replay line is one message, so multi-line (JSON lines) entries cannot be one line.
    corpus = [c for c in bad_input_corpus() if b"\n" not in c.message.rstrip(b"\n")]
    assert len({c.name for c in corpus}) >= 30
    path, dead = tmp_path / "bad.jsonl", tmp_path / "dead.jsonl"
    path.write_bytes(b"".join(c.message.rstrip(b"\n") + b"\n" for c in corpus))
    url = f"sqlite:///{tmp_path / 'bad.db'}"
    assert main(["replay", str(path), "--db", url, "--migrate", "--no-progress",
                 "--dead-letter", str(dead)]) == 0
    records = [json.loads(line) for line in dead.read_text().splitlines()]
    blank = [c for c in corpus if not c.message.strip()]  # blank lines are not messages
    assert len(records) == sum(c.invalid for c in corpus) - sum(c.invalid for c in blank)
    assert all(r["reason"] and r["origin"]["line"] >= 1 for r in records)
    with Store(url) as store:
        counted = sum(r.requests for r in store.ratios(granularity="day"))
    assert counted == sum(c.valid_events for c in corpus)
