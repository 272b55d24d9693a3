"""bench/metrics_scrape.py on a tiny N: it builds the daemon's exposition state and prints a
row per N with a scrape that holds the segment gauges."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ENV = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}


def test_metrics_scrape_prints_a_row_per_n() -> None:
    out = subprocess.run(
        [sys.executable, "bench/metrics_scrape.py", "--series", "20,60", "--events-per-series",
         "3", "--scrapes", "2", "--max-series", "40"],
        cwd=REPO, capture_output=True, text=True, check=True, timeout=300, env=ENV,
    ).stdout
    rows = {int(m[1]): m for m in re.finditer(
        r"^\s+(\d+)\s+(\d+)\s+(\d+)\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+"
        r"([\d,]+)\s+([\d,]+)$", out, re.M)}
    assert sorted(rows) == [20, 60], out
    assert [int(rows[n][2]) for n in (20, 60)] == [20, 60], out  # every series a segment
    assert [int(rows[n][3]) for n in (20, 60)] == [60, 180], out
    samples = {n: int(rows[n][4].replace(",", "")) for n in rows}
    assert 0 < samples[20] < samples[60], out
