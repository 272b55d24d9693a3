"""The specwatch command line: ratios output, db commands, replay's terminal behaviour."""

from __future__ import annotations

import csv
import io
import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from monitor.aggregate.series import SeriesKey
from monitor.cli import main
from monitor.store.db import current_revision, head_revision, make_engine, upgrade
from monitor.store.query import rfc3339
from monitor.store.store import Store

EVENTS = 3000


@pytest.fixture(scope="module")
def traffic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "t.jsonl"
    assert main(["simulate", "--duration", "2h", "--rate", "0.42", "--seed", "5",
                 "--start", "2026-11-02T00:00:00Z", "--out", str(path)]) == 0
    return path


@pytest.fixture
def filled(db_url: str, traffic: Path) -> str:
    assert main(["replay", str(traffic), "--db", db_url, "--migrate", "--no-progress"]) == 0
    return db_url


def test_ratios_json_csv_and_table_agree(filled: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ratios", "--db", filled, "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert isinstance(rows, list) and rows
    required = {"bucket_start", "route", "target_model", "target_revision", "draft_model",
                "draft_revision", "num_speculative_tokens", "requests", "drafted_tokens",
                "accepted_tokens", "acceptance_rate"}
    assert required <= set(rows[0])
    assert all(r["bucket_start"].endswith("Z") and r["bucket_start"][13:] == ":00:00Z"
               for r in rows)
    for r in rows:
        if r["drafted_tokens"]:
            assert r["acceptance_rate"] == pytest.approx(r["accepted_tokens"] / r["drafted_tokens"])
    assert main(["ratios", "--db", filled, "--format", "csv"]) == 0
    csv_rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(csv_rows) == len(rows)
    assert sum(int(r["requests"]) for r in csv_rows) == sum(r["requests"] for r in rows)
    assert main(["ratios", "--db", filled, "--wide"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert "acceptance_rate" in table[0] and len(table) >= len(rows) + 1


def test_ratios_default_table_is_narrow_and_answers_the_common_question(
    filled: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["ratios", "--db", filled, "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert main(["ratios", "--db", filled]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["bucket", "route", "pair", "k", "requests", "accept",
                                "ttft_p50", "ttft_p99"]
    assert len(table) == len(rows) + 1
    assert max(map(len, table)) <= 120  # the routes and pairs the simulator makes fit
    with Store(filled) as store:
        ttft = {(key, rfc3339(start)): stats.ttft_ms
                for (key, start), stats in store.buckets(granularity="hour").items()}
    for line, row in zip(table[1:], rows, strict=True):
        bucket, route, pair, k, requests, accept, p50, p99 = line.split()
        assert (bucket, route, int(k), int(requests)) == (
            row["bucket_start"].replace(":00:00Z", ":00Z"), row["route"],
            row["num_speculative_tokens"], row["requests"])
        assert pair.startswith(row["target_model"] + "/")
        assert accept == ("-" if row["acceptance_rate"] is None
                          else f"{row['acceptance_rate']:.3f}")
        # TTFT of the same series and bucket, from the stored sketches
        key = SeriesKey(*(row[f] or "" for f in SeriesKey._fields[:-1]), int(k))
        sketch = ttft[key, row["bucket_start"]]
        assert (p50, p99) == (f"{sketch.quantile(0.5):.0f}ms", f"{sketch.quantile(0.99):.0f}ms")


def test_ratios_columns_choose_the_table(filled: str, capsys: pytest.CaptureFixture[str]) -> None:
    # headings and field names both name a column
    assert main(["ratios", "--db", filled, "--columns",
                 "route,num_speculative_tokens,accept,acc_len,decode_tps_p50"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["route", "k", "accept", "acc_len", "decode_tps_p50"]
    assert len(table) > 1 and all(len(line.split()) == 5 for line in table[1:])


@pytest.mark.parametrize("bad", [["--columns", "route,nope"], ["--columns", ""],
                                 ["--wide", "--columns", "route"]])
def test_ratios_unknown_columns_exit_2_with_the_valid_names(
    bad: list[str], filled: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["ratios", "--db", filled, *bad])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    if bad[0] == "--columns":
        assert "valid: bucket, route," in err and "ttft_p99" in err and "acc_len" in err


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_ratios_machine_formats_keep_every_field(
    fmt: str, filled: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["ratios", "--db", filled, "--format", fmt, "--columns", "route"]) == 2
    assert "json and csv always carry every field" in capsys.readouterr().err
    assert main(["ratios", "--db", filled, "--format", fmt, "--wide"]) == 2


def test_ratios_filters(filled: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ratios", "--db", filled, "--format", "json", "--granularity", "minute",
                 "--route", "chat", "--since", "2026-11-02T00:30:00Z",
                 "--until", "2026-11-02T01:00:00+00:00"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and {r["route"] for r in rows} == {"chat"}
    assert min(r["bucket_start"] for r in rows) >= "2026-11-02T00:30:00Z"
    assert max(r["bucket_start"] for r in rows) < "2026-11-02T01:00:00Z"
    assert main(["ratios", "--db", filled, "--format", "json", "--granularity", "day"]) == 0
    days = json.loads(capsys.readouterr().out)
    assert {r["bucket_start"] for r in days} == {"2026-11-02T00:00:00Z"}


@pytest.mark.parametrize("bad", [["--since", "yesterday"], ["--since", "2026-11-02T00:00:00"],
                                 ["--granularity", "week"], ["--format", "xml"]])
def test_bad_arguments_are_clear_usage_errors(bad: list[str], filled: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["ratios", "--db", filled, *bad])
    assert exit_.value.code == 2
    assert "error" in capsys.readouterr().err


def test_db_upgrade_and_current(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["db", "current", "--db", db_url]) == 0
    assert "at none" in capsys.readouterr().out
    assert main(["db", "upgrade", "--db", db_url]) == 0
    assert main(["db", "current", "--db", db_url]) == 0
    assert f"at {head_revision()}, head {head_revision()}" in capsys.readouterr().out


def test_commands_refuse_an_unmigrated_database(db_url: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ratios", "--db", db_url]) == 2
    assert capsys.readouterr().err.count("specwatch db upgrade") == 1


def test_replay_creates_a_database_that_does_not_exist_yet(db_url: str, traffic: Path) -> None:
    # A SQLite file not there yet, an empty PostgreSQL database: nothing to protect.
    assert main(["replay", str(traffic), "--db", db_url, "--no-progress"]) == 0
    assert current_revision(db_url) == head_revision()
    with Store(db_url) as store:
        assert sum(r.requests for r in store.ratios(granularity="day")) > 0


@pytest.mark.parametrize("state", ["tables without a version", "an old version"])
def test_replay_refuses_an_existing_unmigrated_database(
        db_url: str, traffic: Path, state: str, capsys: pytest.CaptureFixture[str]) -> None:
    if state == "an old version":
        upgrade(db_url, "0001")
    else:
        engine = make_engine(db_url)
        with engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE someone_elses (id INTEGER)")
        engine.dispose()
    assert main(["replay", str(traffic), "--db", db_url, "--no-progress"]) == 2
    assert "is not migrated" in capsys.readouterr().err
    assert current_revision(db_url) == ("0001" if state == "an old version" else None)


def test_replay_shows_a_progress_bar_on_a_terminal(traffic: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tty.db'}"
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "monitor", "replay", str(traffic), "--db", url, "--migrate"],
        stdin=follower, stdout=follower, stderr=follower, close_fds=True,
    )
    os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the pty closes when the child exits
            break
        if not chunk:
            break
        out += chunk
    assert proc.wait(timeout=60) == 0
    os.close(leader)
    text = out.decode(errors="replace")
    assert "replay:" in text and "events/s" in text and "100%" in text
    assert "<" in text  # tqdm's elapsed<remaining: the ETA


def test_alerts_out_and_dead_letter_files_are_written(traffic: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(traffic.read_bytes()[:5000] + b"\n{broken\n[1, 2]\n")
    dead, alerts = tmp_path / "dead.jsonl", tmp_path / "alerts.jsonl"
    url = f"sqlite:///{tmp_path / 'x.db'}"
    assert main(["replay", str(bad), "--db", url, "--migrate", "--no-progress",
                 "--dead-letter", str(dead), "--alerts-out", str(alerts)]) == 0
    records = [json.loads(x) for x in dead.read_text().splitlines()]
    reasons = [r["reason"] for r in records]
    assert any("invalid JSON" in r for r in reasons)
    assert all("line" in r["origin"] and r["origin"]["file"] == str(bad) for r in records)
    assert alerts.exists()


def test_the_process_gives_mains_output_and_code_and_still_runs_what_exit_runs(
        filled: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m monitor`` (and the console script) exits through ``run``: the collector
    is left out of the shutdown, nothing else is (the whole output, atexit handlers, the
    exit code)."""
    assert main(["ratios", "--db", filled, "--format", "csv"]) == 0
    want = capsys.readouterr().out
    code = ("import atexit, sys, monitor.cli\n"
            "atexit.register(lambda: print('atexit ran', file=sys.stderr))\n"
            "raise SystemExit(monitor.cli.run())\n")
    done = subprocess.run([sys.executable, "-c", code, "ratios", "--db", filled, "--format",
                           "csv"], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (0, want, "atexit ran\n")
    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    failed = subprocess.run([sys.executable, "-m", "monitor", "ratios", "--db", empty],
                            capture_output=True, text=True, timeout=120)
    assert failed.returncode == main(["ratios", "--db", empty]) == 2
    assert failed.stderr.startswith("specwatch: ")


def test_run_freezes_what_is_alive_once_main_returned(monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    import monitor.cli

    monkeypatch.setattr(monitor.cli, "main", lambda: 7)
    gc.unfreeze()  # whatever an earlier test froze
    try:
        assert monitor.cli.run() == 7
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
