"""bench/soak.py end to end on a few seconds of traffic: the report's shape, the exact store
check, and that nothing it started outlives it (normal end, PostgreSQL cleanup, Ctrl-C).

No timing is asserted: the soak's throughput, lag and memory verdicts are numbers for the
lead's 30-minute run, not properties of a 15-second one. Each test takes 25-60 s (a daemon
subprocess per phase, plus the notification wait of the soak phase).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from bench.soak import main
from tests.fixtures.db import pg_base_url
from tests.helpers import wait_for

REPO = Path(__file__).resolve().parents[2]
SAMPLE_KEYS = {
    "t", "final", "produced", "committed", "processed", "in_rate", "out_rate", "lag_messages",
    "lag_events", "event_time_lag_s", "rss_mb", "peak_mb", "rss_anon_mb", "rss_file_mb",
    "cpu_s", "cpu_pct",
    "broker_rss_mb", "alerts_fired", "notified",
}
SUMMARY_KEYS = {
    "elapsed_s", "throughput_mean", "throughput_min", "produced_mean", "lag_messages",
    "lag_events", "rss_mb", "rss_slope_mb_per_h", "rss_flat_limit_mb_per_h", "cpu_s",
}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def server(request: pytest.FixtureRequest) -> list[str]:
    """Extra arguments: none (SQLite files), or --db-url with the test PostgreSQL server."""
    return [] if request.param == "sqlite" else ["--db-url", pg_base_url()]


def alive(pid: int | None) -> bool:
    """Whether ``pid`` is a running (not zombie) process."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (OSError, TypeError):
        return False
    return not re.search(r"^State:\s+Z", status, re.M)


def pg_database_exists(store: str) -> bool:
    name = store.rpartition("/")[2]
    engine = create_engine(pg_base_url())
    try:
        with engine.connect() as conn:
            return conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :n"),
                                {"n": name}).first() is not None
    finally:
        engine.dispose()


def by_name(report: dict[str, Any]) -> dict[str, str]:
    return {c["check"]: c["status"] for c in report["checks"]}


def test_soak_reports_samples_alerts_and_exact_tables(server: list[str], tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    code = main(["--minutes", "0.25", "--rate", "300", "--sample", "3", "--skip-series",
                 "--out", str(out), *server])
    report = json.loads(out.read_text())
    assert code in (0, 1), report.get("error")  # 1: a timing verdict; asserted below instead
    soak = report["soak"]

    samples = soak["samples"]
    assert len(samples) >= 5 and samples[-1]["final"]
    assert all(SAMPLE_KEYS <= s.keys() for s in samples)
    times = [s["t"] for s in samples]
    assert times == sorted(times) and len(set(times)) == len(times)
    assert all(s["rss_mb"] > 0 and s["cpu_s"] > 0 for s in samples)
    # Drained: every produced event committed, every message's offset stored.
    last = samples[-1]
    assert last["produced"] == last["committed"] == soak["produced"] > 0
    assert last["lag_messages"] == 0 and last["lag_events"] == 0
    assert sum(soak["per_route"].values()) == soak["produced"]

    assert SUMMARY_KEYS <= soak["summary"].keys()
    assert soak["exact"]["rows_expected"] > 0 and soak["exact"]["rows_differing"] == 0
    assert soak["exact"]["events_total"] == soak["produced"]
    incidents = soak["alerts"]["incidents"]
    assert [i["incident"] for i in incidents] == soak["incidents"] and len(incidents) == 5
    assert soak["alerts"]["webhook_violations"] == []

    checks = by_name(report)
    assert checks["daemon ran throughout and exited 0 on SIGTERM"] == "PASS"
    assert checks["store tables equal what was produced (minute rollups, exact)"] == "PASS"
    assert checks["resident memory flat"] == "SKIP"  # 15 s is too short to judge a slope
    assert checks["every scripted incident alerted and notified"] == "SKIP"
    assert soak["daemon_exit"] == 0
    assert not alive(soak["daemon_pid"]) and not alive(report["broker_pid"])
    if server:
        assert not pg_database_exists(soak["store"])


def test_series_phase_measures_memory_per_series(server: list[str], tmp_path: Path) -> None:
    out = tmp_path / "series.json"
    code = main(["--skip-soak", "--series", "10,20", "--series-events", "20", "--pairs", "5",
                 "--out", str(out), *server])
    report = json.loads(out.read_text())
    assert code in (0, 1), report.get("error")  # 1: 10 vs 20 series is no linearity test
    rows = report["series"]
    assert [r["n"] for r in rows] == [10, 20]
    for row in rows:
        measured, base = row["measured"], row["baseline"]
        # The spread admitted N series; the baseline has the few default ones, same events.
        assert measured["series"] == row["n"] and base["series"] == 5
        assert measured["events"] == base["events"] == row["n"] * 20
        assert measured["events_total"] == base["events_total"] == measured["events"]
        assert measured["exit"] == base["exit"] == 0
        assert measured["rss_mb"] > 0 and base["rss_mb"] > 0
        assert measured["state_snapshots"] > base["state_snapshots"]
        assert isinstance(row["bytes_per_series"], float)
        for r in (measured, base):
            assert not alive(r["daemon_pid"])
            if server:
                assert not pg_database_exists(r["store"])
    checks = by_name(report)
    assert checks["10 series admitted, every event counted, clean exit"] == "PASS"
    assert checks["20 series admitted, every event counted, clean exit"] == "PASS"
    assert any(name.startswith("memory at most linear in series") for name in checks)


def test_interrupt_stops_everything_it_started(tmp_path: Path) -> None:
    out = tmp_path / "interrupted.json"
    proc = subprocess.Popen(
        [sys.executable, "bench/soak.py", "--minutes", "10", "--rate", "200", "--sample", "2",
         "--skip-series", "--out", str(out)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")),
                              daemon=True)
    reader.start()
    try:
        # Two samples printed: the daemon runs, the producer sends.
        wait_for(lambda: sum(1 for ln in lines if re.match(r"\s+\d+\s+[\d,]+\s", ln)) >= 2
                 or proc.poll() is not None, timeout=120, what="two samples")
        assert proc.poll() is None, "".join(lines)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 130, "".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(timeout=10)
    text_out = "".join(lines)
    daemon_pid = int(re.search(r"daemon pid (\d+)", text_out).group(1))
    broker_pid = int(re.search(r"broker pid (\d+)", text_out).group(1))
    assert "interrupted" in text_out
    assert not alive(daemon_pid) and not alive(broker_pid)
    report = json.loads(out.read_text())
    assert len(report["soak"]["samples"]) >= 2
    assert report["soak"]["daemon_exit"] == 0  # SIGTERM'd: a final checkpoint, exit 0
