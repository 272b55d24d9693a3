"""bench/daemon_memory.py on a few series: both runs count every event, and the traced
difference is printed per series, by file and by line, largest first."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_reports_resident_and_traced_memory_per_series() -> None:
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "bench/daemon_memory.py", "--series", "60",
                          "--events-per-series", "20", "--pairs", "4", "--top", "4"],
                         cwd=REPO, env=env, capture_output=True, text=True, check=True,
                         timeout=600).stdout
    counted = re.search(r"^events counted: ([\d,]+) on 5 series, ([\d,]+) on 60$", out, re.M)
    assert counted and counted.group(1) == counted.group(2) == "1,200", out
    for label in ("resident", "heap", "anonymous", "pymalloc in objects",
                  "traced \\(live, own run\\)"):
        assert re.search(rf"^ *{label} +[\d,.]+ MB +[\d,.]+ MB +-?[\d,]+ B$", out, re.M), label
    traced = re.search(r"traced \(live, own run\) +[\d,.]+ MB +[\d,.]+ MB +([\d,]+) B$", out,
                       re.M)
    assert traced and int(traced.group(1).replace(",", "")) > 0  # 55 more series hold more
    for title in ("traced, by file", "traced, by line"):
        table = out.split(title, 1)[1].split("\n\n", 1)[0]
        sizes = [int(v.replace(",", "")) for v in re.findall(r"^ +(-?[\d,]+)  \S", table, re.M)]
        assert len(sizes) == 4 and sizes == sorted(sizes, reverse=True), table
