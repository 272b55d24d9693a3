"""Expected failures of ``specwatch run`` and ``replay``: one ``specwatch:`` line, exit 2.

Each case runs the real command as a process: a wrong path, a truncated ``.gz``, a closed
stdin, an unreachable, unusable or unsupported database, an unreachable broker. None may
print a traceback or take long (the bound is a sanity check, far above what they take).
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
import zlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from monitor.broker import free_port
from monitor.store.db import upgrade
from monitor.store.store import Store
from tests.helpers import assert_exact

LIMIT_S = 10.0
ROOT = Path(__file__).resolve().parents[2]


def specwatch(*args: str, cwd: Path, stdin_closed: bool = False) -> tuple[str, float]:
    """Run ``specwatch ARGS``; assert it failed the expected way; its stderr and duration."""
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "monitor", *args], cwd=cwd, capture_output=True, text=True,
        timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=None if stdin_closed else subprocess.DEVNULL,
        preexec_fn=(lambda: os.close(0)) if stdin_closed else None,
    )
    elapsed = time.monotonic() - started
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert [line for line in lines if line.startswith("specwatch:")] == lines[-1:], lines
    assert elapsed < LIMIT_S, (elapsed, proc.stderr)
    return lines[-1], elapsed


def one_line(*args: str, cwd: Path, stdin_closed: bool = False) -> str:
    """The error of a command that fails before doing anything: its only line."""
    line, _ = specwatch(*args, cwd=cwd, stdin_closed=stdin_closed)
    return line


@pytest.fixture
def events_file(tmp_path: Path) -> Path:
    path = tmp_path / "ok.jsonl"
    path.write_bytes(b"".join(_line(i) for i in range(10)))
    return path


def _event(i: int) -> dict[str, Any]:
    ts = datetime(2026, 11, 2, 14, tzinfo=UTC).timestamp() + i
    return {"request_id": f"r-{i}", "ts": ts, "route": "chat",
            "target": {"model": "m", "revision": "1", "tokenizer": "t"},
            "draft": {"model": "d", "revision": "1", "tokenizer": "t"},
            "spec": {"num_speculative_tokens": 4, "drafted_tokens": 8, "accepted_tokens": i % 9},
            "output_tokens": 9, "e2e_ms": 120.5}


def _line(i: int) -> bytes:
    return json.dumps(_event(i)).encode() + b"\n"


# -- replay's input ---------------------------------------------------------------------------


def test_replay_of_a_missing_file_creates_no_database(tmp_path: Path) -> None:
    line = one_line("replay", "nowhere.jsonl", "--db", "sqlite:///new.db", cwd=tmp_path)
    assert line == "specwatch: cannot read nowhere.jsonl: No such file or directory"
    assert not (tmp_path / "new.db").exists()


def test_replay_of_a_directory(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    line = one_line("replay", "d", "--db", "sqlite:///x.db", cwd=tmp_path)
    assert line == "specwatch: cannot read d: Is a directory"


def test_replay_from_a_closed_stdin(tmp_path: Path) -> None:
    line = one_line("replay", "-", "--db", "sqlite:///x.db", cwd=tmp_path, stdin_closed=True)
    assert line.startswith("specwatch: stdin is closed")
    assert not (tmp_path / "x.db").exists()


def test_replay_of_a_file_that_is_not_gzip(tmp_path: Path, events_file: Path) -> None:
    (tmp_path / "plain.jsonl.gz").write_bytes(events_file.read_bytes())
    line = one_line("replay", "plain.jsonl.gz", "--db", "sqlite:///x.db", cwd=tmp_path)
    assert line.startswith("specwatch: cannot read plain.jsonl.gz: not gzip data, or damaged (")


def test_truncated_gzip_commits_the_readable_prefix(tmp_path: Path) -> None:
    events = 20_000
    whole = gzip.compress(b"".join(_line(i) for i in range(events)))
    cut = whole[: len(whole) * 3 // 5]
    (tmp_path / "t.jsonl.gz").write_bytes(cut)
    # The lines a reader can get out of the cut file: the prefix that must be committed.
    readable = zlib.decompressobj(wbits=31).decompress(cut).count(b"\n")
    assert 0 < readable < events
    url = f"sqlite:///{tmp_path / 'x.db'}"
    upgrade(url)
    (tmp_path / "quiet.yaml").write_text("log_level: WARNING\n")
    line, _ = specwatch("replay", "t.jsonl.gz", "--db", url, "--config", "quiet.yaml",
                        cwd=tmp_path)
    assert line.startswith(
        f"specwatch: t.jsonl.gz: input ended early at line {readable + 1:,}: Compressed file "
        f"ended before the end-of-stream marker was reached; the {readable:,} lines before "
        f"it were committed ({readable} messages, {readable} events counted"), line
    with Store(url) as store:
        assert_exact(store, [_event(i) for i in range(readable)], lateness=120.0)


# -- the database -----------------------------------------------------------------------------


CLOSED_PG = "postgresql://specwatch:hunter2@127.0.0.1:{port}/nowhere"


@pytest.mark.parametrize("command", ["run", "replay"])
def test_unreachable_postgresql(command: str, tmp_path: Path, events_file: Path) -> None:
    url = CLOSED_PG.format(port=free_port())
    args = [command, str(events_file)] if command == "replay" else [command]
    line = one_line(*args, "--db", url, cwd=tmp_path)
    assert line.startswith(
        "specwatch: cannot open database postgresql://specwatch:***@127.0.0.1:"), line
    assert "Connection refused" in line and "hunter2" not in line


@pytest.mark.parametrize("command", ["run", "replay"])
def test_sqlite_in_a_directory_that_does_not_exist(command: str, tmp_path: Path,
                                                   events_file: Path) -> None:
    db = tmp_path / "no" / "such" / "x.db"
    args = [command, str(events_file)] if command == "replay" else [command]
    line = one_line(*args, "--db", f"sqlite:///{db}", cwd=tmp_path)
    assert line == (f"specwatch: cannot open database sqlite:///{db}: unable to open database "
                    f"file (directory {db.parent} does not exist)")


@pytest.mark.parametrize("command", ["run", "replay"])
@pytest.mark.parametrize(("url", "says"), [
    ("notaurl", "specwatch: cannot read database URL 'notaurl': want sqlite:///PATH or "
                "postgresql://"),
    ("mysql://me:pw@127.0.0.1/x", "specwatch: mysql databases are not supported "
                                  "(mysql://me:***@127.0.0.1/x): specwatch stores into SQLite "
                                  "or PostgreSQL, sqlite:///PATH or postgresql://"),
])
def test_unsupported_database_urls(command: str, url: str, says: str, tmp_path: Path,
                                   events_file: Path) -> None:
    args = [command, str(events_file)] if command == "replay" else [command]
    assert one_line(*args, "--db", url, cwd=tmp_path).startswith(says)


# -- the broker -------------------------------------------------------------------------------


def test_run_with_the_broker_unreachable_fails_fast(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    upgrade(url)
    address = f"127.0.0.1:{free_port()}"
    line = one_line("run", "--db", url, "--bootstrap", address, cwd=tmp_path)
    assert line.startswith(f"specwatch: Kafka at {address}: no broker answered within"), line
