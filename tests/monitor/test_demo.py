"""README command 1: `specwatch demo` shows per-route acceptance from live Kafka traffic."""

from __future__ import annotations

import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from monitor.demo import render
from monitor.store.store import Store

ROUTES = ("chat", "code-assistant", "creative-writing", "summarize", "translation")
ROW = re.compile(r"^(\S+)\s.*\s(0\.\d{3})\s+(0\.\d{3})\s")


def test_demo_shows_live_per_route_acceptance_within_60s(tmp_path: Path) -> None:
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "monitor", "demo", "--dir", str(tmp_path), "--duration", "300",
         "--refresh", "1s"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True)
    reader.start()
    acceptance: dict[str, float] = {}
    try:
        while set(acceptance) != set(ROUTES):
            remaining = 60 - (time.monotonic() - started)
            assert remaining > 0, f"only {sorted(acceptance)} after 60s"
            try:
                line = lines.get(timeout=remaining)
            except queue.Empty:
                continue
            m = ROW.match(line)
            if m and m.group(1) in ROUTES:
                acceptance[m.group(1)] = float(m.group(2))
        elapsed = time.monotonic() - started
    finally:
        proc.send_signal(signal.SIGINT)
        # The 60 s promise is about the table; a clean stop on a loaded two-core box (final
        # checkpoint, leaving the group, stopping the broker) gets its own, looser bound.
        try:
            rc = proc.wait(timeout=180)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise AssertionError("demo did not stop within 180 s of SIGINT: "
                                 + proc.communicate()[1][-3000:]) from None
    assert elapsed < 60
    assert rc == 0, proc.stderr.read()[-3000:]
    # Routes keep their different acceptance levels: a fleet average would hide this.
    assert acceptance["code-assistant"] > 0.7 > acceptance["creative-writing"]
    assert acceptance["translation"] < 0.45
    # What was shown live is in the store for later queries.
    with Store(f"sqlite:///{tmp_path / 'specwatch.db'}") as store:
        assert {k.route for k in store.stats(granularity="minute")} == set(ROUTES)


def test_render_marks_missing_values_and_orders_routes() -> None:
    from datetime import UTC, datetime

    from monitor.aggregate.bucket import BucketStats
    from monitor.aggregate.series import SeriesKey

    key_b = SeriesKey("b-route", "t", "r", "tok", "", "", "", "ngram", 4)
    key_a = SeriesKey("a-route", "t", "r", "tok", "d", "dr", "tok", "", 3)
    out = render({}, {key_b: BucketStats(), key_a: BucketStats()}, datetime(2026, 1, 1, tzinfo=UTC))
    rows = out.splitlines()[3:]
    assert rows[0].startswith("a-route") and rows[1].startswith("b-route")
    assert "ngram -> t" in rows[1] and " - " in rows[1]
